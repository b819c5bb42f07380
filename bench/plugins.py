"""The plugin paths at concurrency 1, in one run: the same add/sub logic as a Rust Wasm plugin (`simple`),
a Python model (`add_sub_python`, numpy, on the Python runtime), a JavaScript plugin (`add_sub_js`) and a C plugin
(`add_sub_c`), each when setup built it, and, as the baseline without a plugin, ONNX Runtime
(`simple_onnx`), all in one Tessera server; and Triton's python backend on the same logic (`simple` with
bench/triton_simple/model.py). Every model is measured with perf_analyzer over HTTP and gRPC, the servers
interleaved trial by trial. Prints per model the median p50 and throughput, the plugin path's overhead
over the ONNX baseline, and the ratio to Triton's python backend (median of the per-trial ratios).

Run through `scripts/dev bench` (after bench/run.py, whose Triton install and repositories it reuses).
"""

import argparse
import os
import shutil
import statistics

from harness import CACHE, ROOT, TESSERA, perf_analyzer, prepare_repositories, ratio, tessera_server, triton_server

MODELS = ["simple", "add_sub_python", "add_sub_js", "add_sub_c", "simple_onnx"]


def plugin_repository():
    """Tessera's repository for this run: the default repository's add/sub models, whichever were built."""
    repo = CACHE / "repos" / "plugins"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    served = []
    for model in MODELS:
        source = ROOT / "model_repository" / model
        if any(source.glob("1/model.*")):
            shutil.copytree(source, repo / model)
            served.append(model)
    return repo, served


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=2000)
    args = parser.parse_args()
    _, triton_repo = prepare_repositories()
    repo, served = plugin_repository()
    tessera = tessera_server(repo, TESSERA)
    triton = triton_server(triton_repo)
    print(f"  building/loading {', '.join(served)} (the first load of the Python runtime or a JS plugin compiles; later ones are cached)", flush=True)
    tessera.start()
    triton.start()
    results = {}
    try:
        for protocol in ("http", "grpc"):
            runs = {model: [] for model in served + ["triton"]}
            for trial in range(args.trials):
                order = served + ["triton"] if trial % 2 == 0 else ["triton"] + served[::-1]
                for model in order:
                    server, name = (triton, "simple") if model == "triton" else (tessera, model)
                    runs[model].append(perf_analyzer(server, protocol, 1, args.measurement_ms, model=name, input_data="zero"))
            results[protocol] = runs
    finally:
        tessera.stop()
        triton.stop()
    print()
    print(f"Plugin paths at concurrency 1 ({os.cpu_count()} cores, `scripts/dev bench`, {args.trials} interleaved trials of "
          f"{args.measurement_ms} ms, zero-filled INT32 [1, 16] inputs; overhead = p50 minus simple_onnx's p50 on the same protocol; "
          "ratio = median of per-trial p50 ratios to Triton's python backend):")
    print()
    print("| protocol | model | path | infer/s | p50 µs | overhead vs ONNX µs | p50 / Triton python backend |")
    print("|---|---|---|---|---|---|---|")
    paths = {"simple": "Rust Wasm plugin", "add_sub_python": "Python model (numpy, Python runtime)",
             "add_sub_js": "JavaScript plugin (componentize-js)", "add_sub_c": "C plugin (clang, wasi-libc)", "simple_onnx": "ONNX Runtime (no plugin)",
             "triton": "Triton 2.51 python backend"}
    for protocol, runs in results.items():
        base = statistics.median(r[1] for r in runs["simple_onnx"]) if "simple_onnx" in runs else None
        for model, points in runs.items():
            p50 = statistics.median(r[1] for r in points)
            overhead = f"{p50 - base:+.0f}" if base is not None and model != "triton" else ""
            versus = f"{ratio([r[1] for r in points], [r[1] for r in runs['triton']]):.2f}" if model != "triton" else ""
            print(f"| {protocol} | {model} | {paths[model]} | {statistics.median(r[0] for r in points):.0f} | {p50:.0f} | {overhead} | {versus} |")


if __name__ == "__main__":
    main()
