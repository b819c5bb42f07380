"""Test fixtures: the real `tessera` binary on loopback ports, serving repositories built from the real
plugins (built by `scripts/dev setup`). Nothing here mocks the server or the protocol."""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parent.parent
# TESSERA_BINARY runs the suite against another build (e.g. to show that a regression test fails on it).
BINARY = pathlib.Path(os.environ.get("TESSERA_BINARY") or ROOT / "target" / "release" / "tessera")
PLUGINS = ROOT / "plugins" / "target" / "wasm32-wasip2" / "release"
MINILM_TOKENIZER = ROOT / ".cache" / "models" / "minilm" / "tokenizer.json"
SPEECH = ROOT / ".cache" / "models" / "speech"
# The default repository's models built from the example plugins, by kind (rust, javascript, c): what setup
# builds, from the same list.
EXAMPLE_MODELS = json.loads((ROOT / "plugins" / "models.json").read_text())
# The Python runtime setup builds, where the server finds it.
PYTHON_RUNTIME = ROOT / ".cache" / "python"
# KServe's storage initializer, in the venv setup makes for it.
KSERVE_STORAGE_PYTHON = ROOT / ".cache" / "kserve-storage" / "venv" / "bin" / "python"
# The tool setup builds that compiles TorchScript with libtorch (scripts/torchscript.cpp).
TORCHSCRIPT = ROOT / ".cache" / "torchscript"

# Every KServe data type that tritonclient can send from numpy, with its config name.
DTYPES = {
    "BOOL": "TYPE_BOOL",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
}


def free_ports(count):
    """`count` distinct free loopback ports (the sockets stay open until all are chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tensor_config(kind, name, config_type, dims):
    return f'{kind} [ {{ name: "{name}" data_type: {config_type} dims: [ {", ".join(map(str, dims))} ] }} ]\n'


def add_model(repo, name, config, plugin=None, versions=(1,), files=None):
    """Writes <repo>/<name>/config.pbtxt and version directories holding the plugin (if any) and files."""
    model = pathlib.Path(repo) / name
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(config)
    for version in versions:
        vdir = model / str(version)
        vdir.mkdir(exist_ok=True)
        if plugin:
            shutil.copy(PLUGINS / f"{plugin}.wasm", vdir / "model.wasm")
        for fname, content in (files or {}).items():
            (vdir / fname).parent.mkdir(parents=True, exist_ok=True)
            (vdir / fname).write_bytes(content)
    return model


def client_for(protocol, server):
    """tritonclient's module for `protocol` ("http" or "grpc") and a client of it connected to `server`."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    module = httpclient if protocol == "http" else grpcclient
    return module, module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)


def wait_for(condition, timeout=15, what="condition"):
    """Polls `condition` until it holds; fails saying `what` did not happen within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until_answers(url, process, log_path, timeout=30):
    """Polls `url` until it answers 200; fails with the log at `log_path` when `process` (one started without
    the Server class: under runc, or with a manifest's command line) exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, pathlib.Path(log_path).read_text()
        time.sleep(0.05)


def add_sub_inputs(module, data):
    """INPUT0 and INPUT1 of the add/sub models (`simple`, `simple_onnx`), both holding `data` (INT32 [1, 16])."""
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def identity_config(name, config_type):
    return (
        f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: 0\n'
        + tensor_config("input", "INPUT0", config_type, [-1])
        + tensor_config("output", "OUTPUT0", config_type, [-1])
    )


def skip_if_taken(ports, client):
    """Skips the test when one of `ports` (Triton's defaults) is taken on this machine, since `client` only
    talks to those."""
    for port in ports:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                pytest.skip(f"port {port} is taken on this machine, and {client} only talks to localhost:{port}")


class Server:
    """One tessera process on free loopback ports, its log captured to a file."""

    def __init__(self, repositories, tmp_path, *flags, cache_dir=None, env=None, open_files=None, http_port=None, grpc_port=None, wrapper=()):
        """`open_files`: run the server under that open-file limit (soft and hard), as a container would.
        `http_port`, `grpc_port`: fixed ports (for clients that know only one) instead of free ones. `wrapper`: a
        command the server runs under (its arguments, ending with `--`)."""
        self.repositories, self.tmp_path, self.flags, self.env, self.open_files = repositories, tmp_path, flags, env, open_files
        self.wrapper = list(wrapper)
        self.fixed_http_port, self.fixed_grpc_port = http_port, grpc_port
        self.cache_dir = cache_dir or (pathlib.Path(tmp_path) / "cache")
        self.start()

    def start(self):
        """Starts the process on fresh ports."""
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.http_port = self.fixed_http_port or self.http_port
        self.grpc_port = self.fixed_grpc_port or self.grpc_port
        self.log_path = pathlib.Path(self.tmp_path) / f"tessera-{self.http_port}.log"
        # prlimit (util-linux) rather than a preexec_fn: forking a process that runs grpcio's threads and
        # then running Python in the child can abort the child before it executes anything.
        limit = ["prlimit", f"--nofile={self.open_files}:{self.open_files}", "--"] if self.open_files else []
        args = [*limit, *self.wrapper, str(BINARY)]
        for repo in self.repositories:
            args += ["--model-repository", str(repo)]
        args += [
            "--http-address", "127.0.0.1", "--http-port", str(self.http_port),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(self.grpc_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
            "--cache-dir", str(self.cache_dir),
            *self.flags,
        ]
        self.log_file = open(self.log_path, "w")
        self.process = subprocess.Popen(
            args, stdout=self.log_file, stderr=subprocess.STDOUT, env={**os.environ, **(self.env or {})}
        )

    def rss_kib(self):
        """The process's resident memory (VmRSS), in KiB."""
        return self._status("VmRSS:")

    def threads(self):
        """How many threads the process has."""
        return self._status("Threads:")

    def _status(self, key):
        """The number after `key` in /proc/<pid>/status."""
        status = pathlib.Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith(key)))

    @property
    def http_url(self):
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self):
        return f"127.0.0.1:{self.grpc_port}"

    def url(self, path):
        return f"http://{self.http_url}{path}"

    def log(self):
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log_path.read_text()

    def wait_live(self, timeout=60, port_retries=2):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                # A port chosen free can be taken (by a client's outgoing connection) before the server
                # binds it; only that failure is retried, on fresh ports.
                if "cannot listen for" in self.log() and port_retries > 0:
                    self.log_file.close()
                    self.start()
                    return self.wait_live(timeout, port_retries - 1)
                raise RuntimeError(f"tessera exited with {self.process.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url("/v2/health/live"), timeout=1).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"tessera not live after {timeout}s:\n{self.log()}")

    def wait_exit(self, timeout=60):
        return self.process.wait(timeout=timeout)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode


@pytest.fixture(scope="session", autouse=True)
def built():
    test_plugins = [PLUGINS / f"{plugin}.wasm" for plugin in ("add_sub", "identity", "faulty", "sleep", "bls", "filetype", "stream_faults", "stream_sum")]
    example_models = [ROOT / "model_repository" / model / "1" / "model.wasm" for model in EXAMPLE_MODELS["rust"]]
    needed = [BINARY, *test_plugins, *example_models, ROOT / "model_repository/magika/1/model.onnx",
              ROOT / "model_repository/tokenize/1/tokenizer.json", PYTHON_RUNTIME / "runtime.wasm", MINILM_TOKENIZER,
              ROOT / "model_repository/minilm/1/model.onnx", ROOT / "model_repository/silero_vad/1/model.onnx",
              ROOT / "model_repository/silero_vad_frame/1/model.onnx",
              SPEECH / "sample.wav", SPEECH / "sample.rttm",
              *(ROOT / "model_repository" / model / "1/model.onnx"
                for model in ("simple_onnx", "simple_string", "simple_int8", "orientation", "simple_sequence",
                            "simple_dyna_sequence")),
              ROOT / "model_repository/orientation_ensemble/labels.txt", TORCHSCRIPT, KSERVE_STORAGE_PYTHON,
              *(ROOT / "model_repository" / model / "1/model.pt"
                for model in ("add_sub_torch", "mlp_torch", "silero_vad_torch")),
              ROOT / "model_repository/simple_tf/1/model.graphdef",
              ROOT / "model_repository/simple_string_tf/1/model.graphdef",
              ROOT / "model_repository/simple_tf_savedmodel/1/model.savedmodel/saved_model.pb"]
    missing = [p for p in needed if not p.exists()]
    if missing:
        pytest.exit(f"run `scripts/dev setup` first; missing: {', '.join(map(str, missing))}", returncode=2)


@pytest.fixture(scope="session")
def repo(tmp_path_factory):
    """A repository with the default models, an identity model per data type, the faulty plugin, and
    several broken models next to them."""
    root = tmp_path_factory.mktemp("repo")
    add_model(root, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    for dtype, config_type in DTYPES.items():
        add_model(root, f"identity_{dtype.lower()}", identity_config(f"identity_{dtype.lower()}", config_type), plugin="identity")
    add_model(root, "identity_bf16", identity_config("identity_bf16", "TYPE_BF16"), plugin="identity")
    add_model(
        root,
        "faulty",
        'backend: "wasm"\n'
        + tensor_config("input", "MODE", "TYPE_INT32", [1])
        + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]),
        plugin="faulty",
    )
    for onnx_model in ("simple_onnx", "minilm"):
        shutil.copytree(ROOT / "model_repository" / onnx_model, root / onnx_model)
    # Broken models: each must fail alone, with its reason, while the others serve.
    mismatch = root / "onnx_mismatch"
    shutil.copytree(ROOT / "model_repository" / "simple_onnx", mismatch)
    (mismatch / "config.pbtxt").write_text(
        (mismatch / "config.pbtxt").read_text().replace('"simple_onnx"', '"onnx_mismatch"').replace("TYPE_INT32", "TYPE_FP32", 1)
    )
    add_model(root, "bad_syntax", 'backend: "wasm"\ninput [\n  { name: "A" data_type: TYPE_NOPE dims: [ 1 ] }\n]\n', plugin="identity")
    add_model(
        root,
        "trt_simple",
        (ROOT / "model_repository/simple/config.pbtxt").read_text().replace('name: "simple"', 'name: "trt_simple"').replace(
            'backend: "wasm"', 'platform: "tensorrt_plan"'
        ),
        files={"model.plan": b"not really a plan"},
    )
    add_model(root, "no_plugin", identity_config("no_plugin", "TYPE_FP32"))
    add_model(root, "not_a_component", identity_config("not_a_component", "TYPE_FP32"), files={"model.wasm": b"\0asm garbage"})
    (root / "no_versions").mkdir()
    (root / "no_versions" / "config.pbtxt").write_text(identity_config("no_versions", "TYPE_FP32"))
    return root


@pytest.fixture(scope="session")
def component_cache(tmp_path_factory):
    """A compiled-component cache shared by the servers that load Python models, so the Python runtime is
    compiled (seconds) once per test session rather than once per server."""
    return tmp_path_factory.mktemp("components")


@pytest.fixture(scope="session")
def default_server(tmp_path_factory, component_cache):
    """The server on the default repository, exactly as `scripts/dev serve` runs it. Its first start
    compiles the Python runtime, hence the long wait."""
    server = Server([ROOT / "model_repository"], tmp_path_factory.mktemp("default"), cache_dir=component_cache)
    server.wait_live(timeout=600)
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="session")
def server(repo, tmp_path_factory):
    s = Server([repo], tmp_path_factory.mktemp("server"), "--exit-on-error=false", "--strict-readiness=false")
    s.wait_live()
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture
def http_client(server):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


@pytest.fixture
def grpc_client(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()
