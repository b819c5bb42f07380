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
import struct
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
    link_numpy(triton)
    return repos / "tessera", repos / "triton"


def link_numpy(directory):
    """Makes numpy importable by the python model in `directory` under Triton: its python stub starts an
    isolated interpreter that ignores PYTHONPATH and PYTHONHOME, and the model directory is on its sys.path."""
    for entry in ("numpy", "numpy.libs"):
        (directory / entry).symlink_to(NUMPY / entry)


def trial_arguments(doc, more=()):
    """The command line of a side-by-side benchmark: `--trials` and `--measurement-ms`, and the options `more`
    names as (flag, argparse keyword arguments)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    for flag, options in more:
        parser.add_argument(flag, **options)
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
            if self.answers():
                return time.monotonic() - started
            time.sleep(0.002)
        raise SystemExit(f"{self.name} not ready after 120 s")

    def answers(self):
        """Whether the server is ready: `/v2/health/ready` answers 200, or, for a server without HTTP (the
        gRPC floor), its gRPC port accepts a connection."""
        import socket

        try:
            if self.http is None:
                host, port = self.grpc.rsplit(":", 1)
                socket.create_connection((host, int(port)), timeout=1).close()
                return True
            with urllib.request.urlopen(f"http://{self.http}/v2/health/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

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

    def cpu_seconds(self):
        """CPU time (user + system) the server and every process below it (Triton's python stubs) have used."""
        return sum(cpu_seconds(pid) for pid in self._pids())

    def _memory_mib(self, proc_file, key):
        """The sum of `key` (KiB) in /proc/<pid>/`proc_file` over the server and every process below it."""
        return sum(proc_kib(pid, proc_file, key) for pid in self._pids()) / 1024

    def _pids(self):
        pids = [self.process.pid]
        for pid in pids:
            pids.extend(children(pid))
        return pids


def children(pid):
    try:
        return [int(c) for c in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def cpu_seconds(pid):
    """CPU time (user + system) process `pid` has used so far; 0 if it is gone."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


# The add/sub models' request: INPUT0 and INPUT1, INT32 [1, 16], 0..15 each.
ADD_SUB_INPUTS = [(f"INPUT{i}", "INT32", [1, 16], struct.pack("<16i", *range(16))) for i in (0, 1)]


def floor_server(tessera, model, protocol="http", inputs=ADD_SUB_INPUTS):
    """The floor for `model` over `protocol`: a server that answers from memory with Tessera's own answers,
    recorded here (metadata, config and one inference of `inputs`, (name, datatype, shape, raw bytes) each,
    with binary outputs as perf_analyzer asks for them), so that perf_analyzer against it measures the
    client and loopback alone. HTTP: bench/floor.rs (plain rustc, cached); gRPC: bench/floor_grpc.rs (an
    example of the server's crate, on its transport)."""
    answers = CACHE / f"floor-answers-{model}-{protocol}"
    answers.mkdir(parents=True, exist_ok=True)
    port = free_port()
    if protocol == "http":
        source, binary = ROOT / "bench" / "floor.rs", CACHE / "floor"
        sources = (source, ROOT / "bench" / "floor_answers.rs")
        if not binary.exists() or binary.stat().st_mtime < max(s.stat().st_mtime for s in sources):
            subprocess.run(["rustc", "--edition", "2021", "-O", str(source), "-o", str(binary)], check=True)
        record_http_answers(tessera, model, inputs, answers)
        return Server("floor", [str(binary), str(port), model, str(answers)], dict(os.environ), f"127.0.0.1:{port}", None)
    subprocess.run(["cargo", "build", "--quiet", "--release", "--example", "floor_grpc"], cwd=ROOT, check=True)
    record_grpc_answers(tessera, model, inputs, answers)
    command = [str(ROOT / "target" / "release" / "examples" / "floor_grpc"), str(port), model, str(answers)]
    return Server("floor", command, dict(os.environ), None, f"127.0.0.1:{port}")


def record_http_answers(tessera, model, inputs, answers):
    """Tessera's HTTP answers to metadata, config and an inference of `inputs` (sent as binary data), as
    bench/floor.rs reads them from `answers`."""
    host, port = tessera.http.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)

    def call(method, path, body=None, headers=None):
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response, response.read()

    (answers / "metadata").write_bytes(call("GET", f"/v2/models/{model}")[1])
    (answers / "config").write_bytes(call("GET", f"/v2/models/{model}/config")[1])
    tensors = [{"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": len(raw)}}
               for name, datatype, shape, raw in inputs]
    outputs = [{"name": o["name"], "parameters": {"binary_data": True}} for o in json.loads((answers / "metadata").read_bytes())["outputs"]]
    header = json.dumps({"inputs": tensors, "outputs": outputs}).encode()
    body = header + b"".join(raw for *_, raw in inputs)
    response, answer = call("POST", f"/v2/models/{model}/infer", body,
                            {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
    if response.status != 200:
        raise SystemExit(f"Tessera refused the floor's recording request: {answer[:500]!r}")
    head = "".join(f"{name}: {value}\r\n" for name, value in response.getheaders() if name.lower() != "date")
    (answers / "infer").write_bytes(f"HTTP/1.1 200 OK\r\n{head}\r\n".encode() + answer)
    connection.close()


def record_grpc_answers(tessera, model, inputs, answers):
    """Tessera's gRPC answers to metadata, config and an inference of `inputs` (as raw contents), serialized,
    as bench/floor_grpc.rs reads them from `answers`."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(tessera.grpc, options=unlimited) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        metadata = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model))
        config = stub.ModelConfig(service_pb2.ModelConfigRequest(name=model))
        request = service_pb2.ModelInferRequest(model_name=model, raw_input_contents=[raw for *_, raw in inputs])
        for name, datatype, shape, _ in inputs:
            request.inputs.add(name=name, datatype=datatype, shape=shape)
        inference = stub.ModelInfer(request)
    for name, message in (("metadata", metadata), ("config", config), ("infer", inference)):
        (answers / name).write_bytes(message.SerializeToString())


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


def successes(server, model):
    """How many requests `model` has answered successfully (the statistics extension, over HTTP, or over
    gRPC for a server without HTTP)."""
    if server.http is None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(server.grpc)
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"]
        client.close()
    else:
        with urllib.request.urlopen(f"http://{server.http}/v2/models/{model}/stats", timeout=10) as r:
            stats = json.load(r)["model_stats"]
    return sum(int(s["inference_stats"]["success"].get("count", 0)) for s in stats)


def measured(server, protocol, concurrency, measurement_ms, model="simple", **options):
    """One perf_analyzer run (`options` as `perf_analyzer` takes them): (throughput, p50, p99) and the CPU
    time, in µs, the server's processes used per request it answered during the run."""
    cpu, count = server.cpu_seconds(), successes(server, model)
    result = perf_analyzer(server, protocol, concurrency, measurement_ms, model=model, **options)
    requests = max(successes(server, model) - count, 1)
    return (*result, (server.cpu_seconds() - cpu) * 1e6 / requests)


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
