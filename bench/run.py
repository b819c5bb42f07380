"""Tessera against the real Triton and against the floor, side by side, in one run on this machine.

Serves `simple` (INT32 [16] add/sub, max_batch_size 8) both ways — Triton 2.51 with a python-backend
model.py, Tessera with the Wasm add_sub plugin, identical config otherwise — on loopback, and measures:

- perf_analyzer over HTTP and gRPC at each concurrency against three servers interleaved (A B C, then
  C B A, …) so machine drift hits all: Tessera, Triton, and the floor of that protocol, a server that
  answers from memory with Tessera's own recorded answers (bench/floor.rs for HTTP; bench/floor_grpc.rs,
  hyper's HTTP/2 under Tessera's executor, for gRPC), so that what is left between Tessera and the floor
  is Tessera's own work. Per point: medians of throughput and p50/p99; Tessera/Triton and Tessera/floor
  as medians of the per-trial ratios; Tessera's own cost as the median of the per-trial differences
  Tessera p50 − floor p50; and each server's CPU time per answered request (Triton's includes its python
  stub process);
- the same three sides on an 8 MiB FP32 identity at concurrency 4 (Tessera's `identity_fp32` Wasm plugin,
  Triton's python backend running bench/triton_identity/model.py), binary tensors both ways;
- a tritonclient Python loop of sequential calls per protocol;
- one row for each path the open issues added (ensemble, decoupled stream, sequence, shared memory, numpy
  python model, TorchScript: bench/paths.py), gRPC at concurrency 4, and the ONNX path (`simple_onnx`) at
  concurrency 1 on both protocols, whose p50 is set against `simple`'s; Tessera against Triton, from a
  second pair of servers started after the first (`--no-paths` leaves them out);
- time from process start to `/v2/health/ready` (median of several starts; Tessera's compiled-plugin cache
  warm); idle RSS after start and RSS after the load (Triton's includes its python stub process).

Writes a Markdown table and a CSV under .cache/bench/results/ and prints the Markdown.
Run through `scripts/dev bench` (which builds everything and installs the reference side first).
"""

import argparse
import csv
import datetime
import os
import platform
import shutil
import statistics
import time

import paths
from harness import (
    RESULTS, ROOT, TESSERA, floor_server, fresh_repositories, interleaved, link_numpy, measured, prepare_repositories, ratio,
    tessera_server, triton_server,
)

SIDES = ("tessera", "triton", "floor")
# The path name of the `simple` rows (the Wasm plugin), in the table and for the ONNX path's p50 against it.
PLUGIN = "plugin"
# The concurrencies at which `simple` is measured against the floor too, per protocol. Beyond c=1 the HTTP
# floor answers faster than perf_analyzer can count on 2 cores: at c=4 it never settled in 3 attempts of
# 90 s (2026-12-06, three runs), perf_analyzer's memory growing past 4 GB. The gRPC floor settles at c=4.
FLOOR_CONCURRENCY = {"http": (1,), "grpc": (1, 4)}
# The large-tensor point: 2 Mi FP32 elements (8 MiB) a request, at concurrency 4.
LARGE_ELEMENTS = 2 << 20
LARGE_CONCURRENCY = 4
# An 8 MiB round trip takes milliseconds: windows of a few hundred requests finish within an attempt.
LARGE_WINDOW_REQUESTS = 200


def add_identity(tessera_repo, triton_repo):
    """`identity_fp32` in both repositories: Tessera's Wasm plugin, and the same config on Triton's python
    backend with bench/triton_identity/model.py."""
    source = ROOT / "model_repository" / "identity_fp32"
    shutil.copytree(source, tessera_repo / "identity_fp32")
    triton = triton_repo / "identity_fp32"
    (triton / "1").mkdir(parents=True)
    config = (source / "config.pbtxt").read_text()
    (triton / "config.pbtxt").write_text(config.replace('backend: "wasm"', 'backend: "python"'))
    shutil.copy(ROOT / "bench" / "triton_identity" / "model.py", triton / "1" / "model.py")
    link_numpy(triton)


def large_inputs():
    """The identity's request, as the floor records it: INPUT0, FP32 [1, LARGE_ELEMENTS], zeros."""
    return [("INPUT0", "FP32", [1, LARGE_ELEMENTS], bytes(4 * LARGE_ELEMENTS))]


def client_loop(server, protocol, calls):
    """Sequential tritonclient calls; returns the median microseconds per call."""
    import numpy as np

    if protocol == "http":
        import tritonclient.http as module
        client = module.InferenceServerClient(server.http)
    else:
        import tritonclient.grpc as module
        client = module.InferenceServerClient(server.grpc)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", a.shape, "INT32"), module.InferInput("INPUT1", a.shape, "INT32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    timings = []
    for _ in range(calls):
        start = time.perf_counter()
        client.infer("simple", inputs)
        timings.append(time.perf_counter() - start)
    client.close()
    return statistics.median(timings) * 1e6


def point(sides, protocol, concurrency, models, args, path, **options):
    """One row of `path`: perf_analyzer against `sides` (Tessera, Triton and, where it is measured, the floor)
    over `protocol`, each side asked for its model in `models` (one name for all, or a name per side),
    interleaved over the trials. The floor's columns are None without it."""
    names = tuple(sides)
    if isinstance(models, str):
        models = dict.fromkeys(names, models)
    runs = interleaved(args.trials, lambda n: measured(sides[n], protocol, concurrency, args.measurement_ms, model=models[n],
                                                       **options), names=names)
    med = {n: [statistics.median(r[i] for r in runs[n]) for i in range(4)] for n in names}
    column = lambda side, i: [r[i] for r in runs[side]]  # noqa: E731
    floor = "floor" in sides
    model = models["tessera"] if models["tessera"] == models["triton"] else f"{models['tessera']} (Triton: {models['triton']})"
    row = {"path": path, "model": model, "protocol": protocol, "concurrency": concurrency}
    for n in SIDES:
        row[f"{n}_infer_per_s"] = med[n][0] if n in med else None
    row["vs_triton"] = ratio(column("tessera", 0), column("triton", 0))
    row["vs_floor"] = ratio(column("tessera", 0), column("floor", 0)) if floor else None
    for n in SIDES:
        row[f"{n}_p50_us"] = med[n][1] if n in med else None
    row["own_us"] = statistics.median(a - b for a, b in zip(column("tessera", 1), column("floor", 1))) if floor else None
    row["tessera_p99_us"], row["triton_p99_us"] = med["tessera"][2], med["triton"][2]
    row["tessera_cpu_us"], row["triton_cpu_us"] = med["tessera"][3], med["triton"][3]
    against_floor = f", floor {row['floor_infer_per_s']:.0f}/s; own {row['own_us']:.0f} us" if floor else ""
    print(f"  {path}, {model} {protocol} c={concurrency}: tessera {row['tessera_infer_per_s']:.0f}/s, triton "
          f"{row['triton_infer_per_s']:.0f}/s (x{row['vs_triton']:.2f}){against_floor}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description="Tessera vs Triton and the floor on `simple`")
    parser.add_argument("--trials", type=int, default=3, help="perf_analyzer runs per server and point")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--measurement-ms", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=1000, help="sequential tritonclient calls per protocol")
    parser.add_argument("--starts", type=int, default=3, help="starts per server for start-to-ready")
    parser.add_argument("--no-paths", action="store_true", help="leave out the rows of bench/paths.py")
    parser.add_argument("--tessera-binary", default=str(TESSERA), help="the tessera build to measure (e.g. an older one)")
    args = parser.parse_args()
    began = time.monotonic()
    tessera_repo, triton_repo = prepare_repositories()
    add_identity(tessera_repo, triton_repo)
    servers = {"tessera": tessera_server(tessera_repo, args.tessera_binary), "triton": triton_server(triton_repo)}
    rows, floors = [], []

    # Warm Tessera's compiled-plugin cache, then time starts, alternating the servers.
    servers["tessera"].start()
    servers["tessera"].stop()
    starts = interleaved(args.starts, lambda n: (servers[n].start(), servers[n].stop())[0])
    for server in servers.values():
        server.start()
    time.sleep(1)
    idle = {name: s.rss_mib() for name, s in servers.items()}
    try:
        for protocol in ("http", "grpc"):
            floors.append(floor_server(servers["tessera"], "simple", protocol))
            floors[-1].start()
            for concurrency in map(int, args.concurrency.split(",")):
                sides = {**servers, "floor": floors[-1]} if concurrency in FLOOR_CONCURRENCY[protocol] else servers
                rows.append(point(sides, protocol, concurrency, "simple", args, PLUGIN))
        for protocol in ("http", "grpc"):
            floors.append(floor_server(servers["tessera"], "identity_fp32", protocol, large_inputs()))
            floors[-1].start()
            sides = {**servers, "floor": floors[-1]}
            rows.append(point(sides, protocol, LARGE_CONCURRENCY, "identity_fp32", args, "large tensor",
                              shape=f"INPUT0:{LARGE_ELEMENTS}", window_requests=LARGE_WINDOW_REQUESTS))
        loops = {p: interleaved(1, lambda n: client_loop(servers[n], p, args.calls)) for p in ("http", "grpc")}
        loaded = {name: s.rss_mib() for name, s in servers.items()}
    finally:
        for server in [*servers.values(), *floors]:
            server.stop()
    if not args.no_paths:
        rows += path_rows(args)
    summary = {
        "start_to_ready_ms": {n: statistics.median(v) * 1000 for n, v in starts.items()},
        "idle_rss_mib": idle, "loaded_rss_mib": loaded,
        "client_loop_us": {p: {n: v[0] for n, v in loops[p].items()} for p in loops},
    }
    write_results(rows, summary, args, time.monotonic() - began)


def path_rows(args):
    """The rows of bench/paths.py: a second pair of servers over a repository of those paths' models, so that
    the memory readings of the first pair stay those of `simple` and the identity alone."""
    tessera_repo, triton_repo = fresh_repositories("paths")
    paths.repositories(tessera_repo, triton_repo)
    servers = {"tessera": tessera_server(tessera_repo, args.tessera_binary, paths.TESSERA_FLAGS),
               "triton": triton_server(triton_repo)}
    rows = []
    try:
        for server in servers.values():
            server.start()
        for path in paths.paths():
            models = {"tessera": path.tessera_model, "triton": path.triton_model}
            rows.append(point(servers, path.protocol, path.concurrency, models, args, path.name, **path.options))
    finally:
        for server in servers.values():
            server.stop()
    return rows


def onnx_gap(rows):
    """A line: how much later than `simple` (the Wasm plugin) `simple_onnx` answers at concurrency 1, per
    protocol (their p50s come from the two pairs of servers, minutes apart)."""
    p50 = {(r["path"], r["protocol"]): r["tessera_p50_us"] for r in rows if r["concurrency"] == 1}
    gaps = [f"{p.upper() if p == 'http' else 'gRPC'} {p50[paths.ONNX, p] - p50[PLUGIN, p]:+.0f} µs"
            for p in ("http", "grpc") if (paths.ONNX, p) in p50 and (PLUGIN, p) in p50]
    return ["", f"`simple_onnx` p50 − `simple` p50 at concurrency 1: {', '.join(gaps)}."] if gaps else []


def write_results(rows, summary, args, elapsed):
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    with open(RESULTS / f"bench-{stamp}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cores = os.cpu_count()
    lines = [
        f"Measured {stamp} on {platform.machine()} with {cores} cores, in one run: "
        f"`scripts/dev bench --trials {args.trials} --concurrency {args.concurrency} --measurement-ms {args.measurement_ms}` "
        f"({elapsed / 60:.1f} min). Triton 2.51 (python backend) vs Tessera (Wasm plugin) vs the floor (answers from "
        "memory: bench/floor.rs over HTTP, bench/floor_grpc.rs over gRPC); perf_analyzer 2.51, `-s 50`, medians of "
        "the trials; ratios and Tessera's own cost (Tessera p50 − floor p50) are medians of the per-trial values; "
        "CPU is each server's user + system time per answered request. `identity_fp32` echoes 8 MiB of FP32. The "
        "rows after the large tensor are bench/paths.py's, from a second pair of servers (Triton serving each path "
        "with its python backend, the only one this build has): the decoupled stream counts "
        "responses (100 a request) and its p50 is to a request's first response; the shared-memory row moves 16 MiB "
        "each way through system shared memory; the sequence row runs sequences of 20 requests.",
        "",
        "| path | model | protocol | concurrency | Tessera infer/s | Triton infer/s | floor infer/s | Tessera/Triton | "
        "Tessera/floor | Tessera p50 µs | Triton p50 µs | floor p50 µs | Tessera's own µs | Tessera p99 µs | "
        "Triton p99 µs | Tessera CPU µs/req | Triton CPU µs/req |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    number = lambda value: "—" if value is None else f"{value:.0f}"  # noqa: E731
    for r in rows:
        vs_floor = "—" if r["vs_floor"] is None else f"{r['vs_floor']:.2f}×"
        lines.append(
            f"| {r['path']} | {r['model']} | {r['protocol']} | {r['concurrency']} | {r['tessera_infer_per_s']:.0f} | "
            f"{r['triton_infer_per_s']:.0f} | {number(r['floor_infer_per_s'])} | {r['vs_triton']:.2f}× | {vs_floor} | "
            f"{r['tessera_p50_us']:.0f} | {r['triton_p50_us']:.0f} | {number(r['floor_p50_us'])} | {number(r['own_us'])} | "
            f"{r['tessera_p99_us']:.0f} | {r['triton_p99_us']:.0f} | {r['tessera_cpu_us']:.0f} | {r['triton_cpu_us']:.0f} |"
        )
    s = summary
    lines += [
        "",
        "| | Tessera | Triton |",
        "|---|---|---|",
        f"| start to ready (median of {args.starts}) | {s['start_to_ready_ms']['tessera']:.0f} ms | {s['start_to_ready_ms']['triton']:.0f} ms |",
        f"| idle RSS after start | {s['idle_rss_mib']['tessera']:.1f} MiB | {s['idle_rss_mib']['triton']:.1f} MiB |",
        f"| RSS after the load | {s['loaded_rss_mib']['tessera']:.1f} MiB | {s['loaded_rss_mib']['triton']:.1f} MiB |",
        f"| tritonclient HTTP, {args.calls} sequential calls, median per call | {s['client_loop_us']['http']['tessera']:.0f} µs | {s['client_loop_us']['http']['triton']:.0f} µs |",
        f"| tritonclient gRPC, {args.calls} sequential calls, median per call | {s['client_loop_us']['grpc']['tessera']:.0f} µs | {s['client_loop_us']['grpc']['triton']:.0f} µs |",
    ]
    lines += onnx_gap(rows)
    text = "\n".join(lines) + "\n"
    (RESULTS / f"bench-{stamp}.md").write_text(text)
    print()
    print(text)
    print(f"written: {RESULTS / f'bench-{stamp}.md'} and .csv")


if __name__ == "__main__":
    main()
