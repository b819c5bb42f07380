"""Triton python models as users write them, on Tessera's Python runtime: Triton's own `add_sub` example
unchanged (its model, its config and its client), a model that loads numpy weights from `1/weights/` answering
the same as the ONNX graph of the same network, the numpy surface of `triton_python_backend_utils` on real
arrays (numeric and BYTES as object arrays, DLPack, the paths a model builds from `args` and `__file__`, its
own helper modules, the standard library at run time), and each kind of bad model or request failing alone
with the Python message and line while the server keeps serving."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from conftest import ROOT, Server, add_model, skip_if_taken, tensor_config, wait_for

EXAMPLES = pathlib.Path(__file__).resolve().parent / "triton_examples" / "python_backend"

NUMPY_MODEL = b'''
import json
import os

import numpy as np
import tessera
import triton_python_backend_utils as pb_utils

import helper
from .helper import SCALE


def _error_of(action):
    try:
        action()
        return "none"
    except Exception as e:
        return type(e).__name__


def _bytecode_of(module):
    """Whether the module's bytecode is beside its source and matches it, as CPython checks before using it."""
    import importlib.util
    import struct

    try:
        with open(importlib.util.cache_from_source(module.__file__), "rb") as f:
            magic, flags, mtime, size = struct.unpack("<4sIII", f.read(16))
    except OSError as e:
        return type(e).__name__
    source = os.stat(module.__file__)
    fresh = (magic, flags, mtime, size) == (importlib.util.MAGIC_NUMBER, 0, int(source.st_mtime) & 0xFFFFFFFF,
                                            source.st_size & 0xFFFFFFFF)
    return "fresh" if fresh else "stale"


class TritonPythonModel:
    def initialize(self, args):
        import fractions  # a standard module nothing imported before: read from the mounted library

        self.args, self.half, self.bytecode = args, fractions.Fraction(1, 2), _bytecode_of(fractions)

    def execute(self, requests):
        responses = []
        for request in requests:
            floats = pb_utils.get_input_tensor_by_name(request, "FLOATS").as_numpy()
            ints = pb_utils.get_input_tensor_by_name(request, "INTS").as_numpy()
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            flags = pb_utils.get_input_tensor_by_name(request, "FLAGS").as_numpy()
            half = pb_utils.get_input_tensor_by_name(request, "HALF").as_numpy()
            exp = np.exp(floats - floats.max())
            through_dlpack = pb_utils.Tensor.from_dlpack("COPY", pb_utils.Tensor("FLOATS", floats).to_dlpack())
            model_dir = pb_utils.get_model_dir()
            info = {
                "fp32": pb_utils.triton_string_to_numpy("TYPE_FP32").__name__,
                "string": pb_utils.triton_string_to_numpy("TYPE_STRING").__name__,
                "triton_type": pb_utils.numpy_to_triton_type(np.float32),
                "text_dtype": str(text.dtype),
                "model_dir": model_dir,
                "args_dir": self.args["model_repository"],
                "file": __file__,
                "cwd": os.getcwd(),
                "dlpack_equal": bool(np.array_equal(through_dlpack.as_numpy(), floats)),
                "read_only": not floats.flags.writeable,
                "fraction": str(self.half),
                "fraction_bytecode": self.bytecode,
                "helper": helper.NAME,
                "same_module": tessera is pb_utils,
                "escape": _error_of(lambda: open(os.path.join(model_dir, "..", "add_sub", "config.pbtxt")).read()),
                "sibling": _error_of(lambda: open(os.path.join(os.path.dirname(model_dir), "add_sub", "config.pbtxt")).read()),
                "write": _error_of(lambda: open(os.path.join(model_dir, "1", "written.txt"), "w").write("x")),
            }
            outputs = [
                pb_utils.Tensor("SOFTMAX", (exp / exp.sum()).astype(np.float32)),
                pb_utils.Tensor("ARGMAX", np.array([np.argmax(floats)], dtype=np.int64)),
                pb_utils.Tensor("CONCAT", np.concatenate([floats.astype(np.float64), ints.astype(np.float64)]) * SCALE),
                pb_utils.Tensor("UPPER", np.array([t.upper() for t in text], dtype=np.object_)),
                pb_utils.Tensor("LENGTHS", np.array([len(t) for t in text], dtype=np.int32)),
                pb_utils.Tensor("NEGATED", ~flags),
                pb_utils.Tensor("DOUBLED", half * np.float16(2)),
                pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''

NUMPY_CONFIG = 'backend: "python"\n' + "".join(
    tensor_config(kind, name, config_type, dims)
    for kind, name, config_type, dims in [
        ("input", "FLOATS", "TYPE_FP32", [-1]), ("input", "INTS", "TYPE_INT64", [-1]),
        ("input", "TEXT", "TYPE_STRING", [-1]), ("input", "FLAGS", "TYPE_BOOL", [-1]),
        ("input", "HALF", "TYPE_FP16", [-1]),
        ("output", "SOFTMAX", "TYPE_FP32", [-1]), ("output", "ARGMAX", "TYPE_INT64", [1]),
        ("output", "CONCAT", "TYPE_FP64", [-1]), ("output", "UPPER", "TYPE_STRING", [-1]),
        ("output", "LENGTHS", "TYPE_INT32", [-1]), ("output", "NEGATED", "TYPE_BOOL", [-1]),
        ("output", "DOUBLED", "TYPE_FP16", [-1]), ("output", "INFO", "TYPE_STRING", [1]),
    ]
)

# Models that fail to load, and the Python error each must report.
BROKEN = {
    "syntax_error": (b"import numpy as np\n\nclass TritonPythonModel:\n    def execute(self, requests:\n        pass\n",
                     r"SyntaxError: .*\(model.py, line 4\)"),
    "imports_torch": (b"import torch\n\nclass TritonPythonModel:\n    pass\n",
                      r"ModuleNotFoundError: No module named 'torch' \(at model.py:1\)"),
    "missing_weights": (b"import os\nimport numpy as np\n\nclass TritonPythonModel:\n    def initialize(self, args):\n"
                        b"        path = os.path.join(args['model_repository'], args['model_version'], 'weights', 'w.npy')\n"
                        b"        self.w = np.load(path)\n",
                        r"FileNotFoundError: .*weights/w.npy.* \(at model.py:7\)"),
}

# A model whose requests fail in execute: MODE 0 answers, 1 raises, 2 mismatches numpy shapes.
FAILING = b'''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0])
        if mode == 1:
            raise RuntimeError("asked to fail")
        if mode == 2:
            total = np.ones(3) + np.ones(4)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array([mode], dtype=np.int32))])]
'''


# Outputs made from an input in ways that keep its bytes whole (as is, reshaped, viewed as bytes) and in
# ways that do not (reversed, half of it, changed, in big-endian order, transposed into Fortran order): the
# first go back as the input's own handle, the others as new bytes, and each must answer exactly what numpy
# says.
PASSING_ON = b'''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            outputs = {"SAME": x, "RESHAPED": x.reshape(-1, 2), "AS_BYTES": x.view(np.uint8),
                       "REVERSED": x[::-1], "HALF": x[: len(x) // 2], "CHANGED": x + 1,
                       "BIG_ENDIAN": x.astype(">f4"), "TRANSPOSED": x.reshape(2, -1).T}
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in outputs.items()]))
        return responses
'''
PASSING_ON_CONFIG = 'backend: "python"\n' + tensor_config("input", "X", "TYPE_FP32", [-1]) + "".join(
    tensor_config("output", name, kind, dims) for name, kind, dims in (
        ("SAME", "TYPE_FP32", [-1]), ("RESHAPED", "TYPE_FP32", [-1, 2]), ("AS_BYTES", "TYPE_UINT8", [-1]),
        ("REVERSED", "TYPE_FP32", [-1]), ("HALF", "TYPE_FP32", [-1]), ("CHANGED", "TYPE_FP32", [-1]),
        ("BIG_ENDIAN", "TYPE_FP32", [-1]), ("TRANSPOSED", "TYPE_FP32", [-1, 2])))
# Large tensors travel through the model's stdin and stdout (contract 1.3.0): what the model itself prints
# and reads there must stay its own. A line begun in one request ends in the next, with a large output
# written to stdout between them; a read of stdin after an input was read finds its end.
TALKING = b'''import os
import sys
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            left = os.read(0, 100) + sys.stdin.buffer.read()
            sys.stdout.write(f"[{len(left)} bytes left on stdin] " if x[0] == 0 else "and its end\\n")
            sys.stdout.flush()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 3)]))
        return responses
'''
TALKING_CONFIG = 'backend: "python"\n' + tensor_config("input", "X", "TYPE_FP32", [-1]) + tensor_config(
    "output", "Y", "TYPE_FP32", [-1])


@pytest.fixture(scope="module")
def python_models(tmp_path_factory, component_cache):
    tmp = tmp_path_factory.mktemp("python_models")
    repo = tmp / "repo"
    for name in ("add_sub", "mlp_python", "mlp_onnx"):
        add_model(repo, name, (ROOT / "model_repository" / name / "config.pbtxt").read_text())
        for path in (ROOT / "model_repository" / name / "1").rglob("*"):
            if path.is_file():
                add_model(repo, name, (repo / name / "config.pbtxt").read_text(),
                          files={str(path.relative_to(ROOT / "model_repository" / name / "1")): path.read_bytes()})
    add_model(repo, "numpy_surface", NUMPY_CONFIG,
              files={"model.py": NUMPY_MODEL, "helper.py": b"NAME = 'helper'\nSCALE = 2.0\n"})
    for name, (source, _) in BROKEN.items():
        add_model(repo, name, 'backend: "python"\n' + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]),
                  files={"model.py": source})
    add_model(repo, "passing_on", PASSING_ON_CONFIG, files={"model.py": PASSING_ON})
    add_model(repo, "talking", TALKING_CONFIG, files={"model.py": TALKING})
    add_model(repo, "failing", 'backend: "python"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1])
              + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]), files={"model.py": FAILING})
    server = Server([repo], tmp, "--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false",
                    "--strict-readiness=false", cache_dir=component_cache)
    server.wait_live(timeout=600)
    yield server, repo
    assert server.stop() == 0, server.log()


def client_for(module, server):
    return module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)


def infer(module, server, model, arrays, outputs=None):
    inputs = []
    for name, data in arrays.items():
        tensor = module.InferInput(name, list(data.shape), np_to_triton_dtype(data.dtype))
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    client = client_for(module, server)
    try:
        return client.infer(model, inputs)
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_triton_add_sub_example_unchanged(python_models, module):
    server, _ = python_models
    rng = np.random.default_rng(1)
    a, b = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
    answer = infer(module, server, "add_sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT1"), a - b)


def test_triton_add_sub_client_unchanged(tmp_path, component_cache):
    """python_backend's examples/add_sub/client.py talks to localhost:8000, as it ships: a server on that port."""
    skip_if_taken([8000], "Triton's add_sub client")
    repo = tmp_path / "repo"
    add_model(repo, "add_sub", (ROOT / "model_repository/add_sub/config.pbtxt").read_text(),
              files={"model.py": (ROOT / "model_repository/add_sub/1/model.py").read_bytes()})
    server = Server([repo], tmp_path, cache_dir=component_cache, http_port=8000)
    try:
        server.wait_live(timeout=600)
        wait_for(lambda: requests.get("http://127.0.0.1:8000/v2/models/add_sub/ready").ok, 60, "add_sub on port 8000")
        done = subprocess.run([sys.executable, str(EXAMPLES / "add_sub" / "client.py")], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and "PASS: add_sub" in done.stdout, done.stdout + done.stderr
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_weights_loaded_with_numpy_answer_as_the_onnx_graph_does(python_models, module):
    server, _ = python_models
    batch = np.random.default_rng(2).normal(size=(5, 8)).astype(np.float32)
    python = infer(module, server, "mlp_python", {"INPUT": batch})
    onnx = infer(module, server, "mlp_onnx", {"INPUT": batch})
    np.testing.assert_allclose(python.as_numpy("PROBABILITIES"), onnx.as_numpy("PROBABILITIES"), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(python.as_numpy("CLASS"), onnx.as_numpy("CLASS"))
    assert len(set(onnx.as_numpy("CLASS").ravel())) > 1, "the batch should not all fall in one class"


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_numpy_surface_on_real_arrays(python_models, module):
    server, repo = python_models
    floats = np.array([0.5, -1.25, 3.0, 2.0], dtype=np.float32)
    ints = np.array([7, -8], dtype=np.int64)
    text = np.array([b"tessera", "naïve café".encode(), b""], dtype=np.object_)
    flags = np.array([True, False, True])
    half = np.array([1.5, -0.25], dtype=np.float16)
    answer = infer(module, server, "numpy_surface",
                   {"FLOATS": floats, "INTS": ints, "TEXT": text, "FLAGS": flags, "HALF": half})
    exp = np.exp(floats - floats.max())
    np.testing.assert_allclose(answer.as_numpy("SOFTMAX"), exp / exp.sum(), rtol=1e-6)
    assert answer.as_numpy("ARGMAX").tolist() == [2]
    np.testing.assert_array_equal(answer.as_numpy("CONCAT"), np.concatenate([floats, ints]).astype(np.float64) * 2.0)
    assert answer.as_numpy("UPPER").tolist() == [b"TESSERA", "NAïVE CAFé".encode(), b""]
    assert answer.as_numpy("LENGTHS").tolist() == [7, len("naïve café".encode()), 0]
    assert answer.as_numpy("NEGATED").tolist() == [False, True, False]
    np.testing.assert_array_equal(answer.as_numpy("DOUBLED"), half * np.float16(2))
    info = json.loads(answer.as_numpy("INFO")[0])
    model_dir = str((repo / "numpy_surface").resolve())
    assert info == {
        "fp32": "float32", "string": "object_", "triton_type": 11, "text_dtype": "object",
        "model_dir": model_dir, "args_dir": model_dir, "file": f"{model_dir}/1/model.py", "cwd": f"{model_dir}/1",
        "dlpack_equal": True, "read_only": True, "fraction": "1/2", "fraction_bytecode": "fresh", "helper": "helper",
        "same_module": True,
        "escape": "PermissionError", "sibling": "FileNotFoundError", "write": "PermissionError",
    }
    assert not (repo / "numpy_surface" / "1" / "written.txt").exists()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
@pytest.mark.parametrize("size", [8, 1 << 20], ids=["small", "4MiB"])
def test_tensors_passed_on_whole_or_changed_answer_as_numpy_says(python_models, module, size):
    server, _ = python_models
    x = np.random.default_rng(size).random(size, dtype=np.float32)
    result = infer(module, server, "passing_on", {"X": x})
    expected = {"SAME": x, "RESHAPED": x.reshape(-1, 2), "AS_BYTES": x.view(np.uint8), "REVERSED": x[::-1],
                "HALF": x[: size // 2], "CHANGED": x + 1, "BIG_ENDIAN": x, "TRANSPOSED": x.reshape(2, -1).T}
    for name, want in expected.items():
        got = result.as_numpy(name)
        assert got.shape == want.shape and np.array_equal(got, want), name


def test_large_tensors_through_stdin_and_stdout_leave_the_models_own_output_alone(python_models):
    server, _ = python_models
    first = np.zeros(1 << 20, dtype=np.float32)
    second = np.random.default_rng(3).random(1 << 20, dtype=np.float32) + 1
    for x in (first, second):
        np.testing.assert_array_equal(infer(httpclient, server, "talking", {"X": x}).as_numpy("Y"), x * 3)
    lines = [line for line in server.log().splitlines() if 'model="talking:1"' in line]
    assert len(lines) == 1 and "[0 bytes left on stdin] and its end" in lines[0], lines


def test_broken_models_fail_alone_with_the_python_error_and_line(python_models):
    server, _ = python_models
    index = {e["name"]: e for e in requests.post(server.url("/v2/repository/index")).json()}
    for name, (_, reason) in BROKEN.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert __import__("re").search(reason, index[name]["reason"]), index[name]["reason"]
    assert all(index[name]["state"] == "READY" for name in ("add_sub", "mlp_python", "numpy_surface", "failing"))


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_an_execute_that_raises_fails_that_request_with_its_line(python_models, module):
    server, _ = python_models
    with pytest.raises(InferenceServerException, match=r"RuntimeError: asked to fail \(at model.py:9\)"):
        infer(module, server, "failing", {"MODE": np.array([1], dtype=np.int32)})
    with pytest.raises(InferenceServerException,
                       match=r"ValueError: operands could not be broadcast together with shapes \(3,\) \(4,\).*\(at model.py:11\)"):
        infer(module, server, "failing", {"MODE": np.array([2], dtype=np.int32)})
    assert infer(module, server, "failing", {"MODE": np.array([0], dtype=np.int32)}).as_numpy("OUTPUT").tolist() == [0]


def test_memory_of_a_model_that_keeps_raising_stays_at_its_baseline(python_models):
    server, _ = python_models

    def fail(count):
        for _ in range(count):
            with pytest.raises(InferenceServerException):
                infer(httpclient, server, "failing", {"MODE": np.array([1], dtype=np.int32)})
            with pytest.raises(InferenceServerException):
                infer(httpclient, server, "failing", {"MODE": np.array([2], dtype=np.int32)})

    fail(50)  # warm: the instance's interpreter reaches its working size
    baseline = server.rss_kib()
    fail(300)
    grown = server.rss_kib() - baseline
    assert grown < 4 * 1024, f"the server grew by {grown} KiB over 600 failed requests"


def test_a_new_model_py_is_imported_not_built(python_models):
    """Loading another Python model compiles nothing: every Python model runs the one runtime component."""
    server, repo = python_models
    add_model(repo, "late", 'backend: "python"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1])
              + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]), files={"model.py": FAILING + b"\n# late\n"})
    assert requests.post(server.url("/v2/repository/models/late/load")).ok
    assert infer(httpclient, server, "late", {"MODE": np.array([0], dtype=np.int32)}).as_numpy("OUTPUT").tolist() == [0]
    late_lines = [line for line in server.log().splitlines() if '"late' in line]
    assert late_lines and not any("compiled component" in line for line in late_lines), late_lines
