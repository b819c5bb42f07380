"""Sequence batching against the real Triton, in one run on this machine: perf_analyzer `--sequence-length`
over gRPC, sequences of 20 requests, at concurrency 1, 4 and 16.

Three sides on `simple_sequence` (OUTPUT = (INPUT + START) * READY, the direct strategy), interleaved trial by
trial so that machine drift hits all of them: Tessera serving Triton's example graph with ONNX Runtime
(model_repository/simple_sequence), Tessera serving the same model written as Triton users write a python
model (bench/triton_sequence/model.py), and Triton 2.51's python backend serving that same file (this
Triton has no ONNX Runtime backend). A fourth side shows the sequence batcher without ONNX Runtime's
hand-off: Tessera serving a Wasm sequence model of the same shape (the `dyna_sequence` plugin of
`simple_string_dyna_sequence`, an accumulator, with simple_sequence's direct strategy and one instance). Then Tessera alone on `silero_vad` (implicit state, the oldest strategy)
with 32 concurrent streams of 512-sample chunks: chunks per second and the p99 per chunk.

Prints a Markdown table and writes it under .cache/bench/results/. Run through `scripts/dev bench-sequences`.
"""

import datetime
import json
import os
import re
import shutil
import statistics

from harness import (CACHE, ROOT, TESSERA, fresh_repositories, interleaved, link_numpy, perf_analyzer, save_results, side_rows,
                     tessera_server, trial_arguments, triton_server)

SIDES = ("tessera onnx", "tessera wasm", "tessera python", "triton python")
LENGTH = 20
VAD_STREAMS = 32


def python_sequence(repo):
    """`repo/simple_sequence_python`: simple_sequence's config served by bench/triton_sequence/model.py."""
    directory = repo / "simple_sequence_python"
    (directory / "1").mkdir(parents=True)
    config = (ROOT / "model_repository/simple_sequence/config.pbtxt").read_text()
    kept = [line for line in config.splitlines() if not line.startswith("#")]
    text = "\n".join(kept).replace('name: "simple_sequence"', 'name: "simple_sequence_python"')
    (directory / "config.pbtxt").write_text(text.replace('platform: "onnxruntime_onnx"', 'backend: "python"') + "\n")
    shutil.copy(ROOT / "bench/triton_sequence/model.py", directory / "1" / "model.py")
    if repo.name == "triton":
        link_numpy(directory)


def wasm_sequence(repo):
    """`repo/simple_sequence_wasm`: the dyna_sequence plugin, UINT64 CORRID, direct strategy, one instance."""
    directory = repo / "simple_sequence_wasm"
    (directory / "1").mkdir(parents=True)
    config = (ROOT / "model_repository/simple_string_dyna_sequence/config.pbtxt").read_text()
    config = re.sub(r"\s*oldest \{[^}]*\}", "", config).replace("TYPE_STRING", "TYPE_UINT64")
    config = config.replace('name: "simple_string_dyna_sequence"', 'name: "simple_sequence_wasm"')
    (directory / "config.pbtxt").write_text(config.replace("count: 2", "count: 1"))
    shutil.copy(ROOT / "model_repository/simple_string_dyna_sequence/1/model.wasm", directory / "1" / "model.wasm")


def vad_input_data():
    """perf_analyzer's input file for silero_vad: one chunk of a 440 Hz tone."""
    import math

    path = CACHE / "vad_input.json"
    chunk = [round(0.3 * math.sin(2 * math.pi * 440 * i / 16000), 6) for i in range(512)]
    path.write_text(json.dumps({"data": [{"chunk": {"content": chunk, "shape": [512]}}]}))
    return str(path)


def main():
    args = trial_arguments(__doc__)
    tessera_repo, triton_repo = fresh_repositories("sequences")
    for model in ("simple_sequence", "silero_vad"):
        shutil.copytree(ROOT / "model_repository" / model, tessera_repo / model)
    python_sequence(tessera_repo)
    python_sequence(triton_repo)
    wasm_sequence(tessera_repo)
    tessera, triton = tessera_server(tessera_repo, TESSERA), triton_server(triton_repo)
    sides = {"tessera onnx": (tessera, "simple_sequence"), "tessera wasm": (tessera, "simple_sequence_wasm"),
             "tessera python": (tessera, "simple_sequence_python"),
             "triton python": (triton, "simple_sequence_python")}
    rows = []
    try:
        for server in (tessera, triton):
            print(f"  {server.name} ready in {server.start():.1f} s", flush=True)
        for concurrency in (1, 4, 16):
            runs = interleaved(args.trials, lambda side: perf_analyzer(
                sides[side][0], "grpc", concurrency, args.measurement_ms, model=sides[side][1],
                sequence_length=LENGTH), names=SIDES)
            rows.append((concurrency, runs))
        vad = [perf_analyzer(tessera, "grpc", VAD_STREAMS, args.measurement_ms, model="silero_vad",
                             input_data=vad_input_data(), sequence_length=100) for _ in range(args.trials)]
    finally:
        tessera.stop()
        triton.stop()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = [f"Sequence batching over gRPC, {stamp} ({os.cpu_count()} cores, `scripts/dev bench-sequences`, "
             f"{args.trials} interleaved trials of {args.measurement_ms} ms): perf_analyzer `--sequence-length "
             f"{LENGTH}` on simple_sequence; medians, ratios = medians of per-trial ratios against Triton's python "
             "backend.", "",
             "| concurrency | side | infer/s | vs Triton | p50 µs | vs Triton | p99 µs |",
             "|---|---|---|---|---|---|---|"]
    lines += side_rows(rows, SIDES)
    lines += ["", f"silero_vad (Tessera, ONNX Runtime, implicit state, oldest strategy), {VAD_STREAMS} concurrent "
              f"streams of 100 chunks: {statistics.median(r[0] for r in vad):.0f} chunks/s (32 ms of audio each), "
              f"p50 {statistics.median(r[1] for r in vad):.0f} µs, p99 {statistics.median(r[2] for r in vad):.0f} µs "
              "per chunk."]
    save_results("sequences", stamp, "\n".join(lines), {"rows": rows, "silero_vad": vad})


if __name__ == "__main__":
    main()
