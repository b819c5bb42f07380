"""What every benchmark script shares: where things are, starting Tessera, Triton and the floor server on
loopback, running perf_analyzer against them, and interleaving trials so that machine drift hits both sides.
The scripts beside this one (`run.py`, `ab.py`, `plugins.py`, `batching.py`) import it; Python puts a
script's own directory on its import path, so no path setup is needed."""

import csv
import http.client
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"
TESSERA = ROOT / "target" / "release" / "tessera"
TRITON = CACHE / "triton"
PERF = CACHE / "perf_analyzer"
NUMPY = CACHE / "numpy"
RESULTS = CACHE / "results"


def prepare_repositories():
    """Two repositories with the same `simple` config, differing only in the backend line."""
    config = (ROOT / "model_repository" / "simple" / "config.pbtxt").read_text()
    repos = CACHE / "repos"
    shutil.rmtree(repos, ignore_errors=True)
    tessera = repos / "tessera" / "simple"
    (tessera / "1").mkdir(parents=True)
    (tessera / "config.pbtxt").write_text(config)
    shutil.copy(ROOT / "model_repository" / "simple" / "1" / "model.wasm", tessera / "1" / "model.wasm")
    triton = repos / "triton" / "simple"
    (triton / "1").mkdir(parents=True)
    (triton / "config.pbtxt").write_text(config.replace('backend: "wasm"', 'backend: "python"'))
    shutil.copy(ROOT / "bench" / "triton_simple" / "model.py", triton / "1" / "model.py")
    # Triton's python stub starts an isolated interpreter that ignores PYTHONPATH and PYTHONHOME; the model
    # directory is on its sys.path, so numpy is linked in there.
    for entry in ("numpy", "numpy.libs"):
        (triton / entry).symlink_to(NUMPY / entry)
    return repos / "tessera", repos / "triton"


def trial_arguments(doc):
    """The command line of a side-by-side benchmark: `--trials` and `--measurement-ms`."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    return parser.parse_args()


def fresh_repositories(name):
    """Empty `.cache/bench/repos/<name>/tessera` and `.../triton` paths for one benchmark's two servers."""
    repos = CACHE / "repos" / name
    shutil.rmtree(repos, ignore_errors=True)
    return repos / "tessera", repos / "triton"


def side_rows(rows, sides, reference="triton python"):
    """Markdown rows `| concurrency | side | throughput | vs reference | p50 | vs reference | p99 |` from
    (concurrency, {side: [(throughput, p50, p99) per trial]}) pairs: medians, and medians of per-trial ratios."""
    lines = []
    for concurrency, runs in rows:
        theirs = runs[reference]
        for side in sides:
            ours = runs[side]

            def versus(i):
                return "" if side == reference else f"{ratio([r[i] for r in ours], [r[i] for r in theirs]):.2f}"

            median = [statistics.median(r[i] for r in ours) for i in range(3)]
            lines.append(f"| {concurrency} | {side} | {median[0]:.0f} | {versus(0)} | {median[1]:.0f} | {versus(1)} | "
                         f"{median[2]:.0f} |")
    return lines


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, command, env, http, grpc):
        self.name, self.command, self.env, self.http, self.grpc = name, command, env, http, grpc
        self.process = None

    def start(self):
        """Starts the server and returns the seconds until /v2/health/ready answered 200."""
        log = open(CACHE / f"{self.name}.log", "a")
        started = time.monotonic()
        self.process = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = started + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.process.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"http://{self.http}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.002)
        raise SystemExit(f"{self.name} not ready after 120 s")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def rss_mib(self):
        """Resident memory of the server and every process below it (Triton's python stubs)."""
        return self._memory_mib("status", "VmRSS:")

    def pss_mib(self):
        """Proportional memory of the server and every process below it: each page shared between mappings
        or processes counted once in all (resident memory counts a page once per mapping, so a plugin
        instance's copy-on-write memory image would count once per instance)."""
        return self._memory_mib("smaps_rollup", "Pss:")

    def _memory_mib(self, proc_file, key):
        """The sum of `key` (KiB) in /proc/<pid>/`proc_file` over the server and every process below it."""
        pids = [self.process.pid]
        for pid in pids:
            pids.extend(children(pid))
        return sum(proc_kib(pid, proc_file, key) for pid in pids) / 1024


def children(pid):
    try:
        return [int(c) for c in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def proc_kib(pid, proc_file, key):
    """The value (KiB) of the line starting with `key` in /proc/<pid>/<proc_file>; 0 if the process is gone."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/{proc_file}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tessera_server(repo, binary, flags=()):
    """Tessera on free loopback ports; `flags`: more of its command line."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [str(binary), "--model-repository", str(repo), "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
               "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
               "--cache-dir", str(CACHE / "tessera-cache"), *flags]
    env = {**os.environ, "TESSERA_LOG": "warn"}
    return Server("tessera", command, env, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")


def triton_server(repo):
    http, grpc, metrics = free_port(), free_port(), free_port()
    server_dir = TRITON / "pytriton" / "tritonserver"
    command = [str(server_dir / "bin" / "tritonserver"), "--model-repository", str(repo),
               "--backend-directory", str(server_dir / "backends"),
               "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--log-info=false"]
    libs = f"{TRITON / 'nvidia_pytriton.libs'}:{pathlib.Path(sys.base_prefix) / 'lib'}"
    env = {**os.environ, "LD_LIBRARY_PATH": libs}
    return Server("triton", command, env, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")


def floor_server(tessera, model):
    """Builds bench/floor.rs (plain rustc, cached), records Tessera's answers for the add/sub `model` (`simple`
    or `simple_onnx`: metadata, config and one inference with binary outputs, as perf_analyzer asks for them)
    and returns the floor serving them: perf_analyzer against it measures the client and loopback alone."""
    source, binary = ROOT / "bench" / "floor.rs", CACHE / "floor"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["rustc", "--edition", "2021", "-O", str(source), "-o", str(binary)], check=True)
    answers = CACHE / "floor-answers"
    answers.mkdir(exist_ok=True)
    host, port = tessera.http.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)

    def call(method, path, body=None):
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = connection.getresponse()
        return response, response.read()

    (answers / "metadata").write_bytes(call("GET", f"/v2/models/{model}")[1])
    (answers / "config").write_bytes(call("GET", f"/v2/models/{model}/config")[1])
    inputs = [{"name": f"INPUT{i}", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))} for i in (0, 1)]
    outputs = [{"name": f"OUTPUT{i}", "parameters": {"binary_data": True}} for i in (0, 1)]
    response, body = call("POST", f"/v2/models/{model}/infer", json.dumps({"inputs": inputs, "outputs": outputs}))
    if response.status != 200:
        raise SystemExit(f"Tessera refused the floor's recording request: {body!r}")
    head = "".join(f"{name}: {value}\r\n" for name, value in response.getheaders() if name.lower() != "date")
    (answers / "infer").write_bytes(f"HTTP/1.1 200 OK\r\n{head}\r\n".encode() + body)
    connection.close()
    port = free_port()
    return Server("floor", [str(binary), str(port), model, str(answers)], dict(os.environ), f"127.0.0.1:{port}", None)


# Runs of one point before a perf_analyzer that cannot stabilise ends the benchmark.
ATTEMPTS = 3
# A run that stabilises takes well under a minute (at most 20 windows of 2 s); one past this is stuck.
ATTEMPT_TIMEOUT_S = 90
# Requests per window when a point is measured again in count windows (see below).
WINDOW_REQUESTS = 20000


def perf_analyzer(server, protocol, concurrency, measurement_ms, model="simple", stability=50, input_data=None, shape=None,
                  window_requests=WINDOW_REQUESTS, streaming=False, sequence_length=None, output_shm_bytes=None):
    """One perf_analyzer run; returns (throughput infer/s, p50 µs, p99 µs). `stability`: perf_analyzer's
    `-s`, the percentage by which consecutive windows may differ; `input_data`: its `--input-data`
    (random by default); `shape`: its `--shape` (`NAME:dims`), for inputs of variable size;
    `window_requests`: the requests per window when a run is measured again in count windows (a slow model
    needs fewer, to finish a window within the attempt's time); `streaming`: over a gRPC stream, for decoupled
    models: the throughput is then responses per second, and the latencies are to each request's first
    response; `sequence_length`: for a sequence model, the requests per sequence (each concurrent slot runs
    one sequence at a time); `output_shm_bytes`: send inputs and receive outputs through system shared memory,
    with that many bytes for each output."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as out:
        url = server.http if protocol == "http" else server.grpc
        command = [str(PERF / "perf_analyzer"), "-m", model, "-u", url, "-i", protocol,
                   "--concurrency-range", str(concurrency), "-s", str(stability), "--max-trials", "20",
                   "--percentile", "99", "-f", out.name]
        if input_data:
            command += ["--input-data", input_data]
        if shape:
            command += ["--shape", shape]
        if streaming:
            command += ["--streaming"]
        if sequence_length:
            command += ["--sequence-length", str(sequence_length)]
        if output_shm_bytes:
            command += ["--shared-memory", "system", "--output-shared-memory-size", str(output_shm_bytes)]
        env = {**os.environ, "LD_LIBRARY_PATH": str(PERF / "lib")}
        windows = ["--measurement-interval", str(measurement_ms)]
        # On a shared VM a burst of steal can keep p99 from settling within 20 windows; such a run is
        # measured again (same criterion) rather than ending the whole benchmark. perf_analyzer can also
        # lose track of its time windows on 2 cores at high rates: at HTTP c=16 on 2026-12-03 (Tessera
        # serving 35k requests a second by its own count) windows stretched to ~7 s, each reading less than
        # the one before (15k, 13k, 12k/s), and the run never settled, in 3 of 6 runs and 4 of 6 with the
        # build before. Windows of a fixed number of requests settled in 6 of 6, so the runs after the
        # first use those.
        for attempt in range(1, ATTEMPTS + 1):
            try:
                result = subprocess.run(command + windows, env=env, capture_output=True, text=True, timeout=ATTEMPT_TIMEOUT_S)
                output = result.stdout + result.stderr
                if result.returncode == 0:
                    break
                unsettled = "stable measurement" in output
            except subprocess.TimeoutExpired:
                output, unsettled = f"still running after {ATTEMPT_TIMEOUT_S} s", True
            if attempt == ATTEMPTS or not unsettled:
                raise SystemExit(f"perf_analyzer failed against {server.name}:\n{output}")
            windows = ["--measurement-mode", "count_windows", "--measurement-request-count", str(window_requests)]
            print(f"  perf_analyzer found no stable measurement against {server.name} ({model}, {protocol}, "
                  f"c={concurrency}); measuring again in windows of {window_requests} requests", file=sys.stderr)
        row = next(csv.DictReader(open(out.name)))
    throughput = float(row["Response Throughput"] if streaming else row["Inferences/Second"])
    return throughput, float(row["p50 latency"]), float(row["p99 latency"])


def interleaved(trials, measure, names=("tessera", "triton")):
    """Runs measure(name) for both named servers `trials` times, alternating which goes first."""
    results = {name: [] for name in names}
    for trial in range(trials):
        order = list(names) if trial % 2 == 0 else list(reversed(names))
        for name in order:
            results[name].append(measure(name))
    return results


def save_results(name, stamp, text, data=None):
    """Prints a benchmark's Markdown `text` and keeps it, with its raw `data` as JSON, under RESULTS."""
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}-{stamp}.md").write_text(text + "\n")
    if data is not None:
        (RESULTS / f"{name}-{stamp}.json").write_text(json.dumps(data))


def ratio(ours, theirs):
    return statistics.median(a / b for a, b in zip(ours, theirs))
