"""Decoupled models over gRPC streams against the real Triton, in one run on this machine: `repeat_int32`
answering each request with 100 responses (DELAY 0, WAIT 0), measured by perf_analyzer `--streaming`:
responses per second, and the p50 and p99 time to a request's first response, at concurrency 1 and 16.

Three sides, interleaved trial by trial so that machine drift hits all of them: Tessera serving
`repeat_int32` with its Wasm plugin (model_repository/repeat_int32), Tessera serving the same model written
as Triton users write a decoupled python model (bench/triton_repeat/model.py), and Triton 2.51's python
backend serving that same file.

Prints a Markdown table and writes it under .cache/bench/results/. Run through `scripts/dev bench-streaming`.
"""

import datetime
import json
import os
import shutil

from harness import (CACHE, ROOT, TESSERA, fresh_repositories, interleaved, link_numpy, perf_analyzer, save_results, side_rows,
                     tessera_server, trial_arguments, triton_server)

RESPONSES = 100
SIDES = ("tessera wasm", "tessera python", "triton python")


def python_repeat(repo):
    """`repo/repeat_python`: repeat_int32's signature served by bench/triton_repeat/model.py."""
    directory = repo / "repeat_python"
    (directory / "1").mkdir(parents=True)
    config = (ROOT / "model_repository/repeat_int32/config.pbtxt").read_text()
    kept = [line for line in config.splitlines() if not line.startswith(("#", "instance_group", "parameters"))]
    text = "\n".join(kept).replace('name: "repeat_int32"', 'name: "repeat_python"').replace('backend: "wasm"', 'backend: "python"')
    (directory / "config.pbtxt").write_text(text + "\n")
    shutil.copy(ROOT / "bench/triton_repeat/model.py", directory / "1" / "model.py")
    if repo.name == "triton":
        link_numpy(directory)


def input_data():
    """perf_analyzer's input file: 100 elements, no delays, no wait."""
    path = CACHE / "repeat_input.json"
    data = {"IN": {"content": list(range(RESPONSES)), "shape": [RESPONSES]},
            "DELAY": {"content": [0] * RESPONSES, "shape": [RESPONSES]}, "WAIT": [0]}
    path.write_text(json.dumps({"data": [data]}))
    return str(path)


def main():
    args = trial_arguments(__doc__)
    tessera_repo, triton_repo = fresh_repositories("streaming")
    shutil.copytree(ROOT / "model_repository/repeat_int32", tessera_repo / "repeat_int32")
    python_repeat(tessera_repo)
    python_repeat(triton_repo)
    tessera, triton = tessera_server(tessera_repo, TESSERA), triton_server(triton_repo)
    sides = {"tessera wasm": (tessera, "repeat_int32"), "tessera python": (tessera, "repeat_python"),
             "triton python": (triton, "repeat_python")}
    data = input_data()
    rows = []
    try:
        for server in (tessera, triton):
            print(f"  {server.name} ready in {server.start():.1f} s", flush=True)
        for concurrency in (1, 16):
            runs = interleaved(args.trials, lambda side: perf_analyzer(
                sides[side][0], "grpc", concurrency, args.measurement_ms, model=sides[side][1], input_data=data,
                streaming=True, window_requests=200), names=SIDES)
            rows.append((concurrency, runs))
    finally:
        tessera.stop()
        triton.stop()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = [f"Decoupled models over gRPC streams, {stamp} ({os.cpu_count()} cores, `scripts/dev bench-streaming`, "
             f"{args.trials} interleaved trials of {args.measurement_ms} ms): repeat_int32 with {RESPONSES} responses per "
             "request; first response = perf_analyzer's latency for decoupled models; medians, ratios = medians of "
             "per-trial ratios against Triton's python backend.", "",
             "| concurrency | side | responses/s | vs Triton | first response p50 µs | vs Triton | p99 µs |",
             "|---|---|---|---|---|---|---|"]
    lines += side_rows(rows, SIDES)
    save_results("streaming", stamp, "\n".join(lines), {"rows": rows})


if __name__ == "__main__":
    main()
