"""Tessera against the real Triton, side by side, in one run on this machine.

Serves `simple` (INT32 [16] add/sub, max_batch_size 8) both ways — Triton 2.51 with a python-backend
model.py, Tessera with the Wasm add_sub plugin, identical config otherwise — on loopback, and measures:

- perf_analyzer over HTTP and gRPC at each concurrency, the two servers interleaved (A B, then B A, …) so
  machine drift hits both; per point the medians of throughput and p50/p99, and the ratio Tessera/Triton
  as the median of the per-trial ratios;
- a tritonclient Python loop of sequential calls per protocol;
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
import statistics
import time

from harness import (
    RESULTS, TESSERA, floor_server, interleaved, perf_analyzer, prepare_repositories, ratio, tessera_server, triton_server,
)

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


def main():
    parser = argparse.ArgumentParser(description="Tessera vs Triton on `simple`")
    parser.add_argument("--trials", type=int, default=3, help="perf_analyzer runs per server and point")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--measurement-ms", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=1000, help="sequential tritonclient calls per protocol")
    parser.add_argument("--starts", type=int, default=3, help="starts per server for start-to-ready")
    parser.add_argument("--tessera-binary", default=str(TESSERA), help="the tessera build to measure (e.g. an older one)")
    args = parser.parse_args()
    began = time.monotonic()
    tessera_repo, triton_repo = prepare_repositories()
    servers = {"tessera": tessera_server(tessera_repo, args.tessera_binary), "triton": triton_server(triton_repo)}
    rows, summary = [], {}

    # Warm Tessera's compiled-plugin cache, then time starts, alternating the servers.
    servers["tessera"].start()
    servers["tessera"].stop()
    starts = interleaved(args.starts, lambda n: (servers[n].start(), servers[n].stop())[0])
    for name, server in servers.items():
        server.start()
    time.sleep(1)
    idle = {name: s.rss_mib() for name, s in servers.items()}
    try:
        for protocol in ("http", "grpc"):
            for concurrency in map(int, args.concurrency.split(",")):
                points = interleaved(args.trials, lambda n: perf_analyzer(servers[n], protocol, concurrency, args.measurement_ms))
                med = {n: [statistics.median(p[i] for p in points[n]) for i in range(3)] for n in points}
                row = {
                    "protocol": protocol, "concurrency": concurrency,
                    "tessera_infer_per_s": med["tessera"][0], "triton_infer_per_s": med["triton"][0],
                    "throughput_ratio": ratio([p[0] for p in points["tessera"]], [p[0] for p in points["triton"]]),
                    "tessera_p50_us": med["tessera"][1], "triton_p50_us": med["triton"][1],
                    "p50_ratio": ratio([p[1] for p in points["tessera"]], [p[1] for p in points["triton"]]),
                    "tessera_p99_us": med["tessera"][2], "triton_p99_us": med["triton"][2],
                }
                rows.append(row)
                print(f"  {protocol} c={concurrency}: tessera {row['tessera_infer_per_s']:.0f}/s vs triton "
                      f"{row['triton_infer_per_s']:.0f}/s (x{row['throughput_ratio']:.2f})", flush=True)
        floor = floor_server(servers["tessera"], "simple")
        floor.start()
        try:
            sides = {"tessera": servers["tessera"], "floor": floor}
            floor_runs = interleaved(args.trials, lambda n: perf_analyzer(sides[n], "http", 1, args.measurement_ms, stability=100), names=tuple(sides))
        finally:
            floor.stop()
        loops = {p: interleaved(1, lambda n: client_loop(servers[n], p, args.calls)) for p in ("http", "grpc")}
        loaded = {name: s.rss_mib() for name, s in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    summary = {
        "start_to_ready_ms": {n: statistics.median(v) * 1000 for n, v in starts.items()},
        "idle_rss_mib": idle, "loaded_rss_mib": loaded,
        "client_loop_us": {p: {n: v[0] for n, v in loops[p].items()} for p in loops},
        "floor_p50_us": statistics.median(p[1] for p in floor_runs["floor"]),
        "floor_paired_tessera_p50_us": statistics.median(p[1] for p in floor_runs["tessera"]),
    }
    write_results(rows, summary, args, time.monotonic() - began)


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
        f"({elapsed / 60:.1f} min). Triton 2.51 (python backend) vs Tessera (Wasm plugin), model `simple`; "
        "perf_analyzer 2.51, `-s 50`, medians of the trials; ratio = median of per-trial Tessera/Triton ratios.",
        "",
        "| protocol | concurrency | Tessera infer/s | Triton infer/s | throughput ratio | Tessera p50 µs | Triton p50 µs | p50 ratio | Tessera p99 µs | Triton p99 µs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['protocol']} | {r['concurrency']} | {r['tessera_infer_per_s']:.0f} | {r['triton_infer_per_s']:.0f} | "
            f"{r['throughput_ratio']:.2f}× | {r['tessera_p50_us']:.0f} | {r['triton_p50_us']:.0f} | {r['p50_ratio']:.2f} | "
            f"{r['tessera_p99_us']:.0f} | {r['triton_p99_us']:.0f} |"
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
        "",
        f"The floor, HTTP concurrency 1: perf_analyzer's p50 against a server that answers from memory (bench/floor.rs) "
        f"is {s['floor_p50_us']:.0f} µs, what the client and loopback cost alone; Tessera's p50 in the same interleaved "
        f"trials was {s['floor_paired_tessera_p50_us']:.0f} µs.",
    ]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"bench-{stamp}.md").write_text(text)
    print()
    print(text)
    print(f"written: {RESULTS / f'bench-{stamp}.md'} and .csv")


if __name__ == "__main__":
    main()
