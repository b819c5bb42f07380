"""The large-tensor repository: an 8 MiB FP32 tensor echoed back, by the Wasm identity plugin
(`identity_fp32`) and by an ONNX Identity graph (`identity_onnx`), both FP32 [-1] with batching. Measures
what the server's tensor boundary costs when a copy of the data dominates; perf_analyzer sends and asks
for binary data.

  .venv/bin/python bench/large.py                     # prints the repository it prepared
  .venv/bin/python bench/ab.py --a OLD --b NEW --repository "$(.venv/bin/python bench/large.py)" \\
      --shape INPUT0:2097152 --point identity_fp32:http:1 --point identity_onnx:grpc:4
"""

import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPOSITORY = ROOT / ".cache" / "bench" / "repos" / "large"
# 2 Mi FP32 elements: 8 MiB per tensor.
SHAPE = "INPUT0:2097152"

ONNX_CONFIG = """name: "identity_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def identity_onnx(path):
    from onnx import TensorProto, helper, save

    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "n"]) for name in ("INPUT0", "OUTPUT0")]
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity", io[:1], io[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tessera")
    model.ir_version = 8  # what ONNX Runtime 1.31 reads (the onnx package writes a newer one by default)
    save(model, str(path))


def prepare():
    """Writes the repository afresh and returns its path."""
    shutil.rmtree(REPOSITORY, ignore_errors=True)
    shutil.copytree(ROOT / "model_repository" / "identity_fp32", REPOSITORY / "identity_fp32")
    onnx_model = REPOSITORY / "identity_onnx"
    (onnx_model / "1").mkdir(parents=True)
    (onnx_model / "config.pbtxt").write_text(ONNX_CONFIG)
    identity_onnx(onnx_model / "1" / "model.onnx")
    return REPOSITORY


if __name__ == "__main__":
    print(prepare())
