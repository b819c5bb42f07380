"""A good client's latency while the server is flooded, against the real Triton, in one run on this machine:
perf_analyzer at concurrency 1 on `simple` over HTTP and gRPC, first quiet, then while 2000 idle connections
and 200 slowloris connections (a byte a second; see bench/flood.py) are held on the server's two ports,
reopened as soon as the server closes them. Both servers run with their default settings.

Tessera serves `simple` with its Wasm plugin, Triton 2.51 with its python backend (as in `scripts/dev
bench`); the row that matters is each server's flooded p99 over its own quiet p99. Trials alternate which
server goes first. Prints a Markdown table and writes it under .cache/bench/results/. Run through
`scripts/dev bench-floods`.
"""

import datetime
import os
import statistics

from flood import SLOW_HTTP, SLOW_HTTP2, Flood, raise_open_file_limit
from harness import (TESSERA, interleaved, perf_analyzer, prepare_repositories, ratio, save_results, tessera_server,
                     trial_arguments, triton_server)

IDLE, SLOW = 2000, 200


def ports(server):
    return int(server.http.split(":")[1]), int(server.grpc.split(":")[1])


def measure(server, protocol, measurement_ms):
    """(quiet, flooded) perf_analyzer results for one server and protocol, and the flood's reopen counts."""
    quiet = perf_analyzer(server, protocol, 1, measurement_ms)
    http, grpc = ports(server)
    flood = Flood([http, grpc], IDLE, {http: SLOW_HTTP, grpc: SLOW_HTTP2}, SLOW)
    try:
        flooded = perf_analyzer(server, protocol, 1, measurement_ms)
    finally:
        flood.stop()
    return quiet, flooded, dict(flood.reopened, refused=flood.failed_connects)


def main():
    args = trial_arguments(__doc__)
    if not raise_open_file_limit(IDLE + SLOW + 256):
        raise SystemExit(f"the flood needs {IDLE + SLOW + 256} open files; raise the hard limit (ulimit -Hn)")
    tessera_repo, triton_repo = prepare_repositories()
    servers = {"tessera": tessera_server(tessera_repo, TESSERA), "triton": triton_server(triton_repo)}
    rows = []
    try:
        for server in servers.values():
            print(f"  {server.name} ready in {server.start():.1f} s", flush=True)
        for protocol in ("http", "grpc"):
            runs = interleaved(args.trials, lambda side: measure(servers[side], protocol, args.measurement_ms))
            rows.append((protocol, runs))
    finally:
        for server in servers.values():
            server.stop()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = [f"A good client under a flood of {IDLE} idle and {SLOW} slowloris connections, {stamp} ({os.cpu_count()} "
             f"cores, `scripts/dev bench-floods`, {args.trials} interleaved trials of {args.measurement_ms} ms): "
             "perf_analyzer c=1 on `simple`, both servers with default settings; medians; flooded/quiet = median of "
             "per-trial ratios; closed = flood connections the server closed during the flooded run (median).", "",
             "| protocol | server | quiet p50 µs | quiet p99 µs | flooded p50 µs | flooded p99 µs | p99 flooded/quiet | "
             "throughput flooded/quiet | closed idle | closed slow |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for protocol, runs in rows:
        for side, trials in runs.items():
            quiet, flooded, reopened = zip(*trials)

            def median(results, i):
                return statistics.median(r[i] for r in results)

            lines.append(
                f"| {protocol} | {side} | {median(quiet, 1):.0f} | {median(quiet, 2):.0f} | {median(flooded, 1):.0f} | "
                f"{median(flooded, 2):.0f} | {ratio([f[2] for f in flooded], [q[2] for q in quiet]):.2f} | "
                f"{ratio([f[0] for f in flooded], [q[0] for q in quiet]):.2f} | "
                f"{statistics.median(r['idle'] for r in reopened):.0f} | {statistics.median(r['slow'] for r in reopened):.0f} |")
    save_results("floods", stamp, "\n".join(lines), {"rows": rows})


if __name__ == "__main__":
    main()
