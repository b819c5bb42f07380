"""PyTorch and TensorFlow beside ONNX in one Tessera, and Tessera's serving overhead over the compute floor.

The classifier of `mlp_onnx` (8 features, a hidden layer of 16, 3 classes) is served twice from one Tessera,
as ONNX through ONNX Runtime (`mlp_onnx`) and as TorchScript through libtorch (`mlp_torch`, the same
weights), both with dynamic batching; and the seed's add/sub `simple` as ONNX (`simple_onnx`) and as a
TensorFlow GraphDef (`simple_tf`). perf_analyzer measures the p50 at concurrency 1 and the throughput at
concurrency 16, over HTTP and gRPC, the models interleaved trial by trial; each row's ratio is to the ONNX
model of its pair.

The floor: the same TorchScript module called in-process by `torch.jit` in Python (PyTorch's own wheel, in a
venv of its own at .cache/bench/torch-venv, made on the first run: torch needs the whole CUDA stack to import,
about 3 GB, so it is kept out of setup), and the ONNX graph by onnxruntime's Python API, on one row. perf_analyzer's
p50 also holds the client's own work and the loopback round trip, which the floor server (bench/floor.rs,
answering from memory) measures interleaved with Tessera: Tessera's p50 minus the floor server's minus the
in-process call is the overhead that is Tessera's.

Run through `scripts/dev bench-frameworks` (after setup and bench install).
"""

import statistics
import subprocess
import sys
import time

from harness import CACHE, ROOT, TESSERA, floor_server, perf_analyzer, ratio, save_results, tessera_server, trial_arguments

import shutil  # noqa: E402

TORCH_VENV = CACHE / "torch-venv"
MODELS = ("mlp_onnx", "mlp_torch", "simple_onnx", "simple_tf")
# Each model's ONNX twin, for the ratios.
TWIN = {"mlp_onnx": "mlp_onnx", "mlp_torch": "mlp_onnx", "simple_onnx": "simple_onnx", "simple_tf": "simple_onnx"}
CALLS = 20000

# Times CALLS calls of one row through the model named in argv (torch or onnx); prints the p50 in µs.
BARE = r"""
import statistics, sys, time
import numpy as np
kind, path, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
row = np.random.default_rng(0).normal(size=(1, 8)).astype(np.float32)
if kind == "torch":
    import torch
    torch.set_num_threads(2)
    module = torch.jit.load(path).eval()
    x = torch.from_numpy(row)
    def call():
        with torch.inference_mode():
            return module(x)
else:
    import onnxruntime
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    def call():
        return session.run(None, {"INPUT": row})
for _ in range(2000):
    call()
times = []
for _ in range(calls):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
print(statistics.median(times) * 1e6)
"""


def torch_python():
    """The torch venv's python, made on first use (pip install torch with its CUDA dependencies)."""
    python = TORCH_VENV / "bin" / "python"
    if not python.exists():
        print("  installing torch 2.13.0 with its CUDA stack into .cache/bench/torch-venv (once; about 3 GB)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(TORCH_VENV)], check=True)
        subprocess.run([str(TORCH_VENV / "bin" / "pip"), "install", "--quiet", "torch==2.13.0", "numpy"], check=True)
    return python


def bare_p50(kind):
    model = ROOT / "model_repository" / ("mlp_torch/1/model.pt" if kind == "torch" else "mlp_onnx/1/model.onnx")
    python = torch_python() if kind == "torch" else sys.executable
    result = subprocess.run([str(python), "-c", BARE, kind, str(model), str(CALLS)], check=True, capture_output=True, text=True)
    return float(result.stdout.split()[-1])


def main():
    args = trial_arguments(__doc__)
    repo = CACHE / "repos" / "frameworks"
    shutil.rmtree(repo, ignore_errors=True)
    for model in MODELS:
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    stamp = time.strftime("%Y-%m-%dT%H%MZ", time.gmtime())
    tessera = tessera_server(repo, TESSERA)
    tessera.start()
    runs = {}
    try:
        floor = floor_server(tessera, "simple_onnx")
        floor.start()
        try:
            for trial in range(args.trials):
                order = list(MODELS) if trial % 2 == 0 else list(MODELS[::-1])
                for protocol, concurrency in (("http", 1), ("grpc", 1), ("http", 16), ("grpc", 16)):
                    for model in order:
                        point = runs.setdefault((model, protocol, concurrency), [])
                        point.append(perf_analyzer(tessera, protocol, concurrency, args.measurement_ms, model=model))
                    if concurrency == 1 and protocol == "http":
                        runs.setdefault(("floor", "http", 1), []).append(
                            perf_analyzer(floor, "http", 1, args.measurement_ms, model="simple_onnx", input_data="zero"))
        finally:
            floor.stop()
    finally:
        tessera.stop()
    bare = {"mlp_torch": bare_p50("torch"), "mlp_onnx": bare_p50("onnx")}
    lines = [f"Frameworks ({stamp}, {args.trials} interleaved trials, medians; `scripts/dev bench-frameworks`)", "",
             "| model | protocol | c | throughput/s | p50 µs | p99 µs | throughput vs its ONNX twin |", "|---|---|---|---|---|---|---|"]
    for (model, protocol, concurrency), results in sorted(runs.items(), key=lambda item: (item[0][2], item[0][1], item[0][0])):
        if model == "floor":
            continue
        versus = ratio([r[0] for r in results], [r[0] for r in runs[(TWIN[model], protocol, concurrency)]])
        median = [statistics.median(r[i] for r in results) for i in range(3)]
        lines.append(f"| {model} | {protocol} | {concurrency} | {median[0]:.0f} | {median[1]:.0f} | {median[2]:.0f} | {versus:.2f} |")
    floor_p50 = statistics.median(r[1] for r in runs[("floor", "http", 1)])
    lines += ["", f"Floor server (client + loopback, HTTP c=1): p50 {floor_p50:.0f} µs", "",
              "| model | in-process call p50 µs (Python) | Tessera HTTP c=1 p50 µs | Tessera's own (p50 − floor − call) µs |",
              "|---|---|---|---|"]
    for model in ("mlp_onnx", "mlp_torch"):
        served = runs[(model, "http", 1)]
        own = statistics.median(r[1] - f[1] for r, f in zip(served, runs[("floor", "http", 1)])) - bare[model]
        lines.append(f"| {model} | {bare[model]:.1f} | {statistics.median(r[1] for r in served):.0f} | {own:.0f} |")
    save_results("frameworks", stamp, "\n".join(lines), {"runs": {"/".join(map(str, k)): v for k, v in runs.items()}, "bare": bare})


if __name__ == "__main__":
    main()
