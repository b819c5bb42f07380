"""Resident memory under sustained good traffic (issue #23), the long version of tests/test_leaks.py: for each
kind of request, perf_analyzer sends a warm-up and then a long run (`--request-count`, concurrency 4, in runs of
at most 1 GiB of responses, which perf_analyzer keeps until a run ends) over
HTTP and then gRPC, and the server's resident memory is read when the warm-up ends (settled), sampled every
100 ms during the run (peak) and read when it ends (after). A server that leaks per request ends above its
settled value by the leak times the requests; one that does not ends within noise of it.

Kinds: `simple` (Wasm), `identity_bytes` (64 strings of 4 KiB: 256 KiB a request), `identity_fp32` (8 MiB
FP32 in and out; fewer requests, as perf_analyzer generates and reads 16 MiB a request on the same two
cores), `add_sub_python` (Tessera's Python runtime), `simple_onnx` (ONNX Runtime). Prints a Markdown table
and writes it under .cache/bench/results/. Run through `scripts/dev bench-leaks [--scale F]` (F multiplies
every request count; 1 is 100k for the small kinds).
"""

import argparse
import datetime
import os
import shutil
import subprocess
import threading
import time

from harness import CACHE, PERF, ROOT, TESSERA, proc_kib, save_results, tessera_server

# model: (perf_analyzer arguments, warm-up requests, measured requests, bytes a response) at scale 1.
KINDS = {
    "simple": ([], 10_000, 100_000, 128),
    "identity_bytes": (["--shape", "INPUT0:64", "--string-length", "4096"], 10_000, 100_000, 64 * 4100),
    "identity_fp32": (["--shape", "INPUT0:2097152"], 500, 5_000, 8 << 20),
    "add_sub_python": ([], 10_000, 100_000, 128),
    "simple_onnx": ([], 10_000, 100_000, 128),
}
# perf_analyzer keeps what it receives until a run ends (100k responses of 256 KiB were killed for memory
# on this 23 GiB machine), so a run is split into runs of at most this many response bytes.
RUN_BYTES = 1 << 30


def run_requests(server, protocol, model, count):
    """`count` requests of `model` by perf_analyzer at concurrency 4 (in as many runs as RUN_BYTES needs);
    returns the requests a second over them."""
    arguments, _, _, response_bytes = KINDS[model]
    url = server.http if protocol == "http" else server.grpc
    per_run = max(1, RUN_BYTES // response_bytes)
    # Timed here: with --request-count, perf_analyzer's own throughput divides by its default window instead.
    started = time.monotonic()
    for done in range(0, count, per_run):
        requests = min(per_run, count - done)
        command = [str(PERF / "perf_analyzer"), "-m", model, "-u", url, "-i", protocol, "--concurrency-range", "4",
                   "--request-count", str(requests), *arguments]
        result = subprocess.run(command, env={**os.environ, "LD_LIBRARY_PATH": str(PERF / "lib")}, capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise SystemExit(f"perf_analyzer failed ({result.returncode}) on {model} over {protocol}:\n{result.stdout}{result.stderr}")
    return count / (time.monotonic() - started)


def rss_mib(server):
    return proc_kib(server.process.pid, "status", "VmRSS:") / 1024


def measure(server, protocol, model, scale):
    _, warm_up, count, _ = KINDS[model]
    run_requests(server, protocol, model, max(1, int(warm_up * scale)))
    settled, peak, stop = rss_mib(server), [0.0], threading.Event()

    def sample():
        while not stop.wait(0.1):
            peak[0] = max(peak[0], rss_mib(server))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        rate = run_requests(server, protocol, model, max(1, int(count * scale)))
    finally:
        stop.set()
        sampler.join()
    time.sleep(1)
    return {"model": model, "protocol": protocol, "requests": int(count * scale), "rate": rate, "settled": settled,
            "peak": max(peak[0], settled), "after": rss_mib(server)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    repo = CACHE / "repos" / "leaks"
    shutil.rmtree(repo, ignore_errors=True)
    for model in KINDS:
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    server = tessera_server(repo, TESSERA)
    rows = []
    try:
        print(f"  tessera ready in {server.start():.1f} s", flush=True)
        started = rss_mib(server)
        for model in KINDS:
            for protocol in ("http", "grpc"):
                rows.append(measure(server, protocol, model, args.scale))
                print(f"  {rows[-1]}", flush=True)
    finally:
        server.stop()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = [f"Resident memory under sustained requests, {stamp} ({os.cpu_count()} cores, `scripts/dev bench-leaks"
             f"{'' if args.scale == 1 else f' --scale {args.scale}'}`): perf_analyzer c=4 `--request-count`, one server "
             f"for all rows in this order (it started at {started:.0f} MiB); settled = after the warm-up; after = 1 s "
             "after the run.", "",
             "| model | protocol | requests | requests/s | settled MiB | peak MiB | after MiB | after/settled |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['protocol']} | {r['requests']} | {r['rate']:.0f} | {r['settled']:.1f} | "
                     f"{r['peak']:.1f} | {r['after']:.1f} | {r['after'] / r['settled']:.3f} |")
    save_results("leaks", stamp, "\n".join(lines), {"rows": rows})


if __name__ == "__main__":
    main()
