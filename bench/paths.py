"""The paths the open issues added, one row each in `bench/run.py`'s table against the real Triton, so that a
regression in any of them shows in the one command.

Each path is a model pair — what Tessera serves for it, and what Triton 2.51 (python backend only in its
CPU build) serves for the same signature — and the perf_analyzer options that exercise it. The repositories
are built from the same pieces as the dedicated benchmarks beside this file (`ensembles.py`, `streaming.py`,
`sequences.py`, `shared_memory.py`, `python_models.py`), which measure each path at more points; these rows
are one point each: gRPC at concurrency 4, where the issues' throughput targets are set, and the ONNX path
(`simple_onnx`, against Triton's python `simple`: this Triton has no ONNX Runtime backend) at concurrency 1
over both protocols, where its p50 is set against the plugin path's.
"""

import shutil
from dataclasses import dataclass, field

from ensembles import model_dir, simple_twice
from harness import ROOT, link_numpy
from python_models import add_model
from sequences import LENGTH, python_sequence
from shared_memory import ELEMENTS, python_model
from streaming import input_data as repeat_input_data, python_repeat

# The ONNX path's name, by which bench/run.py finds its rows to set their p50 against `simple`'s.
ONNX = "ONNX Runtime"
# The flags Tessera needs for these rows: shared-memory registration is off unless asked for, as in Triton.
TESSERA_FLAGS = ["--allow-client-shm=true"]


@dataclass
class Path:
    """One row: `name` of the path, the model each server answers it with, perf_analyzer's options, and the
    protocol and concurrency of the point (gRPC at 4 unless said)."""
    name: str
    tessera_model: str
    triton_model: str
    options: dict = field(default_factory=dict)
    protocol: str = "grpc"
    concurrency: int = 4


def paths():
    """The rows: the ONNX path at concurrency 1 (its p50 against `simple`'s), then the rest in the order of the
    issues that added them."""
    return [
        Path(ONNX, "simple_onnx", "simple", protocol="http", concurrency=1),
        Path(ONNX, "simple_onnx", "simple", protocol="grpc", concurrency=1),
        Path("ensemble", "simple_twice", "simple_twice"),
        Path("decoupled stream", "repeat_int32", "repeat_python",
             {"input_data": repeat_input_data(), "streaming": True, "window_requests": 200}),
        Path("sequence", "simple_sequence", "simple_sequence_python", {"sequence_length": LENGTH}),
        Path("shared memory", "identity_python", "identity_python",
             {"shape": f"INPUT0:{ELEMENTS}", "output_shm_bytes": ELEMENTS * 4, "window_requests": 200}),
        Path("shared memory, new output", "scale_python", "scale_python",
             {"shape": f"INPUT0:{ELEMENTS}", "output_shm_bytes": ELEMENTS * 4, "window_requests": 200}),
        Path("numpy python model", "add_sub", "add_sub"),
        Path("TorchScript", "mlp_torch", "mlp_python"),
    ]


def repositories(tessera, triton):
    """Fills `tessera` and `triton` (empty repository paths named so) with every model of `paths()`, Tessera's
    side / Triton's. ONNX Runtime: the seed's add/sub as an ONNX graph / `simple`'s model.py. Ensemble:
    `simple` twice in a row (Wasm plugin / python backend). Stream: repeat_int32's Wasm plugin /
    bench/triton_repeat/model.py. Sequence: simple_sequence on ONNX Runtime / bench/triton_sequence/model.py.
    Shared memory: the same python identity on both, 16 MiB a request, and the same python model making a new
    16 MiB output (2 × its input). numpy python: Triton's add_sub example on both. TorchScript: mlp_torch
    through libtorch / the same network as a numpy model.py (mlp_python, the same weights; this Triton has no
    PyTorch backend)."""
    models = ROOT / "model_repository"
    simple = (models / "simple" / "config.pbtxt").read_text()
    model_dir(tessera, "simple", simple, [(models / "simple/1/model.wasm", "model.wasm")])
    triton_simple = model_dir(triton, "simple", simple.replace('backend: "wasm"', 'backend: "python"'),
                              [(ROOT / "bench/triton_simple/model.py", "model.py")])
    link_numpy(triton_simple)
    for repo in (tessera, triton):
        model_dir(repo, "simple_twice", simple_twice())
        python_model(repo, "identity_python")
        python_model(repo, "scale_python")
        add_model(repo, "add_sub")
    python_repeat(triton)
    python_sequence(triton)
    for name in ("simple_onnx", "repeat_int32", "simple_sequence", "mlp_torch"):
        shutil.copytree(models / name, tessera / name)
    shutil.copytree(models / "mlp_python", triton / "mlp_python")
    link_numpy(triton / "mlp_python")
