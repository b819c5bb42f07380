"""System shared memory against the wire, and the response cache, in one run on this machine.

Shared memory: a 16 MiB FP32 identity, the same python model on both servers (bench/triton_identity/model.py,
as Triton users write it: OUTPUT0 is `as_numpy()` of INPUT0), served by Triton 2.51's python backend and by
Tessera's Python runtime, and by Tessera's Rust identity plugin (`identity_fp32`) for reference; and a python
model whose output is a new array (bench/triton_scale/model.py: OUTPUT0 is 2 × INPUT0) on both servers;
perf_analyzer sends the tensor and receives it back either in the request and response (binary tensor data
over HTTP, raw contents over gRPC) or through system shared memory (`--shared-memory system`), over HTTP
and gRPC, at concurrency 1 (p50) and 4 (throughput). Trials interleave the three.

Response cache: Tessera alone, `minilm` with `response_cache { enable: true }` (every request after the first
a hit: perf_analyzer sends the same data) against the same model without it (every request runs), p50 at
concurrency 1 over gRPC.

Prints Markdown tables and writes them under .cache/bench/results/. Run through `scripts/dev bench-shm`
(`--no-wire`: only the shared-memory points, the wire's take most of the run's half hour; `--model NAME`: only
that python model).
"""

import datetime
import json
import os
import shutil
import statistics

from harness import (CACHE, ROOT, TESSERA, fresh_repositories, interleaved, link_numpy, perf_analyzer, save_results, tessera_server,
                     trial_arguments, triton_server)

ELEMENTS = 4 << 20  # 16 MiB of FP32
SIDES = ("tessera", "triton", "tessera_plugin")
# Each python model, and what Tessera's plugin side runs beside it (None: nothing).
MODELS = {"identity_python": ("triton_identity", "identity_fp32"),
          "scale_python": ("triton_scale", None)}
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def python_model(repo, name):
    directory = repo / name
    (directory / "1").mkdir(parents=True)
    (directory / "config.pbtxt").write_text(CONFIG.replace("{name}", name))
    shutil.copy(ROOT / "bench" / MODELS[name][0] / "model.py", directory / "1" / "model.py")
    link_numpy(directory)


def minilm_pair(repo):
    """`minilm` with the response cache, and `minilm_uncached` without."""
    shutil.copytree(ROOT / "model_repository/minilm", repo / "minilm")
    config = (repo / "minilm/config.pbtxt").read_text()
    (repo / "minilm/config.pbtxt").write_text(config + "response_cache { enable: true }\n")
    shutil.copytree(ROOT / "model_repository/minilm", repo / "minilm_uncached")
    (repo / "minilm_uncached/config.pbtxt").write_text(config.replace('name: "minilm"', 'name: "minilm_uncached"'))


def minilm_input_data():
    """perf_analyzer's input file for minilm: one sentence of 16 tokens (ids from its vocabulary)."""
    ids = [101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1998, 5368, 2067, 2000, 2009, 102]
    path = CACHE / "minilm_tokens.json"
    tensor = lambda values: {"content": values, "shape": [len(values)]}  # noqa: E731
    path.write_text(json.dumps({"data": [{"input_ids": tensor(ids), "attention_mask": tensor([1] * 16),
                                          "token_type_ids": tensor([0] * 16)}]}))
    return str(path)


def main():
    args = trial_arguments(__doc__, [
        ("--no-wire", {"action": "store_true", "help": "only the shared-memory points"}),
        ("--model", {"action": "append", "choices": list(MODELS), "help": "only these python models (default: all)"})])
    models = {name: MODELS[name] for name in args.model or MODELS}
    transports = [("shared memory", ELEMENTS * 4)]
    if not args.no_wire:
        transports.insert(0, ("wire", None))
    tessera_repo, triton_repo = fresh_repositories("shared_memory")
    shutil.copytree(ROOT / "model_repository/identity_fp32", tessera_repo / "identity_fp32")
    for name in models:
        python_model(tessera_repo, name)
        python_model(triton_repo, name)
    minilm_pair(tessera_repo)
    tessera = tessera_server(tessera_repo, TESSERA, ["--allow-client-shm=true", "--cache-config=local,size=67108864"])
    triton = triton_server(triton_repo)
    shape = f"INPUT0:{ELEMENTS}"
    rows = []
    try:
        for server in (tessera, triton):
            print(f"  {server.name} ready in {server.start():.1f} s", flush=True)
        for model, (_, plugin) in models.items():
            servers = {"tessera": (tessera, model), "triton": (triton, model), "tessera_plugin": (tessera, plugin)}
            sides = SIDES if plugin else SIDES[:2]
            for protocol in ("http", "grpc"):
                for concurrency in (1, 4):
                    for transport, shm_bytes in transports:
                        runs = interleaved(args.trials, lambda side: perf_analyzer(
                            servers[side][0], protocol, concurrency, args.measurement_ms, model=servers[side][1],
                            shape=shape, window_requests=200, output_shm_bytes=shm_bytes), names=sides)
                        rows.append((model, protocol, concurrency, transport, runs))
                        medians = (f"{side} {statistics.median(r[0] for r in runs[side]):.1f}/s" for side in sides)
                        print(f"  {model} {protocol} c={concurrency} {transport}: " + ", ".join(medians), flush=True)
        tokens = minilm_input_data()
        cache = {model: [perf_analyzer(tessera, "grpc", 1, args.measurement_ms, model=model, input_data=tokens)
                         for _ in range(args.trials)]
                 for model in ("minilm", "minilm_uncached")}
    finally:
        tessera.stop()
        triton.stop()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = [f"16 MiB FP32 in and out, the same python models on both servers (and Tessera's Rust identity plugin), wire "
             f"vs system shared memory, {stamp} ({os.cpu_count()} cores, `scripts/dev bench-shm`, {args.trials} interleaved "
             f"trials of {args.measurement_ms} ms); medians.", "",
             "| model | protocol | concurrency | transport | Tessera python infer/s | Triton python infer/s | Tessera plugin "
             "infer/s | Tessera python p50 ms | Triton python p50 ms | Tessera plugin p50 ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model, protocol, concurrency, transport, runs in rows:
        median = {side: [statistics.median(r[i] for r in runs[side]) for i in range(3)] for side in runs}
        infer_s = [f"{median[side][0]:.1f}" if side in median else "—" for side in SIDES]
        p50_ms = [f"{median[side][1] / 1000:.2f}" if side in median else "—" for side in SIDES]
        lines.append(f"| {model} | {protocol} | {concurrency} | {transport} | " + " | ".join(infer_s + p50_ms) + " |")
    hit, miss = (statistics.median(r[1] for r in cache[m]) for m in ("minilm", "minilm_uncached"))
    lines += ["", f"Response cache, minilm over gRPC at concurrency 1 (16 tokens): hit p50 {hit:.0f} µs, "
              f"miss (no cache) p50 {miss:.0f} µs, {miss / hit:.1f}× faster on a hit."]
    save_results("shared_memory", stamp, "\n".join(lines), {"rows": rows, "cache": cache})


if __name__ == "__main__":
    main()
