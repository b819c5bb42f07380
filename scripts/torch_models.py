"""Prepares the TorchScript models of the default repository (never committed; idempotent), with the
`torchscript` tool setup builds from scripts/torchscript.cpp (libtorch's own TorchScript compiler):

- `add_sub_torch/1/model.pt`: the add/sub of `simple` in Triton's PyTorch naming (`INPUT__0`, `INPUT__1` ->
  `OUTPUT__0` sum, `OUTPUT__1` difference, INT32), scripted from TORCHSCRIPT_ADD_SUB;
- `mlp_torch/1/model.pt`: the classifier of `mlp_onnx` and `mlp_python`, with the same weights (from
  models.mlp_weights), inputs bound by `forward`'s argument name;
- `silero_vad_torch/1/model.pt`: the Silero voice-activity detector's 16 kHz network from the `silero-vad`
  package's TorchScript file (`_model` of `silero_vad.jit`, saved as a module of its own): the same network
  as `silero_vad_frame`'s ONNX graph, `forward(x [N, 576], state [2, N, 128]) -> (output [N, 1], state)`.

usage: python scripts/torch_models.py TORCHSCRIPT_TOOL
"""

import pathlib
import subprocess
import sys
import tempfile

from models import CACHE, REPO, ROOT, SILERO_WHEEL, from_wheel, mlp_weights

TORCHSCRIPT_ADD_SUB = """
def forward(self, INPUT__0, INPUT__1):
    return INPUT__0 + INPUT__1, INPUT__0 - INPUT__1
"""

TORCHSCRIPT_MLP = """
def forward(self, INPUT):
    logits = torch.relu(INPUT @ self.w1 + self.b1) @ self.w2 + self.b2
    return torch.softmax(logits, -1), torch.argmax(logits, -1, keepdim=True)
"""


def script(tool, source, target, parameters=()):
    """Compiles TorchScript `source` into `target`, with `parameters` ({name: float32 array})."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source_file = pathlib.Path(tmp) / "source.py"
        source_file.write_text(source)
        specs = []
        for name, array in dict(parameters).items():
            raw = pathlib.Path(tmp) / f"{name}.bin"
            array.astype("<f4").tofile(raw)
            specs.append(f"{name}={raw}:{'x'.join(str(d) for d in array.shape)}")
        subprocess.run([tool, "script", source_file, target, *specs], check=True)


def main(tool):
    made = []
    target = REPO / "add_sub_torch" / "1" / "model.pt"
    if not target.exists():
        script(tool, TORCHSCRIPT_ADD_SUB, target)
        made.append(target)
    target = REPO / "mlp_torch" / "1" / "model.pt"
    if not target.exists():
        script(tool, TORCHSCRIPT_MLP, target, mlp_weights())
        made.append(target)
    target = REPO / "silero_vad_torch" / "1" / "model.pt"
    if not target.exists():
        spec, wheel, _ = SILERO_WHEEL
        jit = CACHE / "silero_vad.jit"
        from_wheel(spec, wheel, "silero_vad/data/silero_vad.jit", jit)
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([tool, "submodule", jit, "_model", target], check=True)
        made.append(target)
    for path in made:
        print(f"  made {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1])
