"""Python models against the real Triton, in one run on this machine, both servers serving the same files:
Triton's python-backend `add_sub` example (model_repository/add_sub: numpy, `triton_python_backend_utils`),
on Tessera's Python runtime and on Triton 2.51's python backend (a stub process per instance).

- serving: perf_analyzer p50 at concurrency 1 and throughput at 4 and 16, HTTP and gRPC, the servers
  interleaved trial by trial (A B, then B A) so that machine drift hits both;
- first load of a new model.py: in explicit mode, the wall time from the load request to the first answer
  of a model directory neither server has seen (Tessera's runtime is already compiled, as after setup;
  Triton's stub binary is in place);
- memory per instance: the proportional memory (PSS) of the server and every process below it with the
  model at `count: 1`, then at `count: K`, after every instance has answered about `--memory-requests`
  requests (a Tessera instance copies more of its memory image over its first thousand or so, then levels
  off); (K - 1) instances' worth is the difference, the median of `--memory-repeats` such pairs. PSS rather
  than RSS: RSS counts a page once per mapping, and every Tessera instance maps the same copy-on-write image
  of the runtime's memory; resident memory is printed as well.

Prints a Markdown table and writes it under .cache/bench/results/. Run through `scripts/dev bench-python`.
"""

import argparse
import concurrent.futures
import datetime
import itertools
import os
import shutil
import statistics
import time
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from harness import CACHE, ROOT, TESSERA, interleaved, link_numpy, perf_analyzer, ratio, save_results, tessera_server, triton_server

MODEL = ROOT / "model_repository" / "add_sub"


def add_model(repo, name, count=1, mark=""):
    """`repo/name`: add_sub's files under another name, with `count` instances; `mark` makes model.py new."""
    directory = repo / name
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "1").mkdir(parents=True)
    config = (MODEL / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
    config = config.replace("instance_group [{ kind: KIND_CPU }]", f"instance_group [{{ kind: KIND_CPU count: {count} }}]")
    (directory / "config.pbtxt").write_text(config)
    (directory / "1" / "model.py").write_text((MODEL / "1" / "model.py").read_text() + mark)
    if repo.name == "triton":
        link_numpy(directory)


def post(server, path):
    request = urllib.request.Request(f"http://{server.http}{path}", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=300) as answer:
        return answer.status


def answer(server, name, times=1):
    """`times` add_sub requests on one connection; checks the sums."""
    client = httpclient.InferenceServerClient(server.http)
    try:
        a, b = np.float32([1, 2, 3, 4]), np.float32([4, 3, 2, 1])
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        for _ in range(times):
            assert (client.infer(name, inputs).as_numpy("OUTPUT0") == a + b).all()
    finally:
        client.close()


def first_load_s(server, repo, trial):
    """Seconds from the load request of a model directory new to the server to its first answer."""
    name = f"fresh_{trial}"
    add_model(repo, name, mark=f"\n# {time.time_ns()}\n")
    started = time.monotonic()
    post(server, f"/v2/repository/models/{name}/load")
    answer(server, name)
    elapsed = time.monotonic() - started
    post(server, f"/v2/repository/models/{name}/unload")
    return elapsed


def memory_with(server, repo, count, requests):
    """The server's (PSS, RSS) in MiB, with its children, once `count` instances of a model have answered
    `count` clients sending `requests` requests each at once (so about that many an instance)."""
    add_model(repo, "memory", count=count)
    post(server, "/v2/repository/models/memory/load")
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        list(pool.map(lambda _: answer(server, "memory", requests), range(count)))
    time.sleep(2)
    memory = server.pss_mib(), server.rss_mib()
    post(server, "/v2/repository/models/memory/unload")
    time.sleep(2)
    return memory


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=2000)
    parser.add_argument("--instances", type=int, default=5, help="K, the larger instance count of the memory test")
    parser.add_argument("--memory-repeats", type=int, default=3, help="readings of the memory test, of which the median")
    parser.add_argument("--memory-requests", type=int, default=2000, help="requests an instance before a memory reading")
    args = parser.parse_args()
    repos = CACHE / "repos" / "python"
    shutil.rmtree(repos, ignore_errors=True)
    servers = {}
    for name, make in (("tessera", lambda repo: tessera_server(repo, TESSERA)), ("triton", triton_server)):
        repo = repos / name
        repo.mkdir(parents=True)
        add_model(repo, "add_sub")
        server = make(repo)
        server.command += ["--model-control-mode=explicit", "--load-model=add_sub"]
        servers[name] = (server, repo)
    rows = []
    try:
        for server, _ in servers.values():
            print(f"  {server.name} ready in {server.start():.1f} s", flush=True)
        fresh = itertools.count()
        loads = interleaved(args.trials, lambda name: first_load_s(*servers[name], next(fresh)))
        # Repeated, as the host allocator's retention moves a single reading by a few MiB an instance.
        memory = {name: [(memory_with(server, repo, 1, args.memory_requests),
                          memory_with(server, repo, args.instances, args.memory_requests))
                         for _ in range(args.memory_repeats)]
                  for name, (server, repo) in servers.items()}
        for protocol in ("http", "grpc"):
            for concurrency in (1, 4, 16):
                runs = interleaved(args.trials, lambda name: perf_analyzer(
                    servers[name][0], protocol, concurrency, args.measurement_ms, model="add_sub"))
                rows.append((protocol, concurrency, runs))
    finally:
        for server, _ in servers.values():
            server.stop()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = [f"Python models, {stamp} ({os.cpu_count()} cores, `scripts/dev bench-python`, {args.trials} interleaved "
             f"trials of {args.measurement_ms} ms): Triton's add_sub example (numpy) on Tessera's Python runtime and on "
             "Triton 2.51's python backend; medians, ratio = median of per-trial ratios.", "",
             "| protocol | concurrency | Tessera infer/s | Triton infer/s | throughput ratio | Tessera p50 µs | Triton p50 µs | p50 ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for protocol, concurrency, runs in rows:
        ours, theirs = runs["tessera"], runs["triton"]
        lines.append(f"| {protocol} | {concurrency} | {statistics.median(r[0] for r in ours):.0f} | "
                     f"{statistics.median(r[0] for r in theirs):.0f} | {ratio([r[0] for r in ours], [r[0] for r in theirs]):.2f} | "
                     f"{statistics.median(r[1] for r in ours):.0f} | {statistics.median(r[1] for r in theirs):.0f} | "
                     f"{ratio([r[1] for r in ours], [r[1] for r in theirs]):.2f} |")
    lines += ["", "| | Tessera | Triton | ratio |", "|---|---|---|---|"]
    load = {name: statistics.median(values) for name, values in loads.items()}
    lines.append(f"| first load of a new model.py, load request to first answer (s, median of {args.trials}) | "
                 f"{load['tessera']:.2f} | {load['triton']:.2f} | {load['tessera'] / load['triton']:.2f} |")
    for index, kind in ((0, "proportional (PSS)"), (1, "resident (RSS)")):
        per = {name: statistics.median((k[index] - one[index]) / (args.instances - 1) for one, k in readings)
               for name, readings in memory.items()}
        lines.append(f"| {kind} memory per instance (MiB, count 1 → {args.instances}, {args.memory_requests} requests an "
                     f"instance, median of {args.memory_repeats}) | "
                     f"{per['tessera']:.1f} | {per['triton']:.1f} | {per['tessera'] / per['triton']:.2f} |")
    whole = {name: statistics.median(one[0] for one, _ in readings) for name, readings in memory.items()}
    lines.append(f"| proportional memory, whole server with one instance (MiB) | {whole['tessera']:.0f} | "
                 f"{whole['triton']:.0f} | |")
    text = "\n".join(lines)
    save_results("python", stamp, text, {"rows": rows, "loads": loads, "memory": memory})


if __name__ == "__main__":
    main()
