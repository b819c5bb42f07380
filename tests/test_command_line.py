"""tritonserver's command line as users type it: the seed's own line starts the server and serves `simple`,
the logging flags do what tritonserver's do, tritonserver's other flags are accepted (or refused with a
reason), and repositories laid out with links (as Kubernetes mounts them) serve."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BINARY, ROOT, Server, add_model, add_sub_inputs, wait_for

# The seed's command line, less the binary's name and the repository path (each test has its own).
SEED_FLAGS = ("--model-control-mode=explicit", "--load-model=simple", "--log-verbose=0", "--log-info=1", "--log-warning=1", "--log-error=1")


def repo_with_simple(tmp_path):
    repo = tmp_path / "model"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(repo, "other", (ROOT / "model_repository/simple/config.pbtxt").read_text().replace('"simple"', '"other"'), plugin="add_sub")
    add_model(repo, "broken", 'backend: "wasm"\nmax_batch_size: -1\n')
    return repo


def test_the_seed_command_line_serves_simple(tmp_path):
    server = Server([repo_with_simple(tmp_path)], tmp_path, *SEED_FLAGS).wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        result = client.infer("simple", add_sub_inputs(httpclient, data))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        assert not client.is_model_ready("other"), "explicit mode loads only --load-model"
        client.close()
        assert "Started HTTPService" in server.log()
    finally:
        assert server.stop() == 0


def test_log_levels_and_log_file(tmp_path):
    log_file = tmp_path / "server.log"
    quiet = Server([repo_with_simple(tmp_path)], tmp_path, "--log-info=false", f"--log-file={log_file}", "--model-control-mode=explicit")
    quiet.wait_live()
    try:
        # A failed load logs a warning; with --log-info=false nothing informational is written.
        assert requests.post(quiet.url("/v2/repository/models/broken/load"), timeout=30).status_code == 400
        assert requests.post(quiet.url("/v2/repository/models/simple/load"), timeout=30).status_code == 200
    finally:
        assert quiet.stop() == 0
    written = log_file.read_text()
    assert any(line.startswith("W") and "broken" in line for line in written.splitlines()), written
    assert not any(line.startswith("I") for line in written.splitlines()), written
    assert quiet.log() == "", "with --log-file nothing goes to standard output or error"

    verbose = Server([repo_with_simple(tmp_path)], tmp_path, "--log-verbose=1", "--log-warning=0", "--exit-on-error=false").wait_live()
    try:
        body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))} for n in ("INPUT0", "INPUT1")]}
        assert requests.post(verbose.url("/v2/models/simple/infer"), json=body, timeout=10).status_code == 200
    finally:
        assert verbose.stop() == 0
    lines = verbose.log().splitlines()
    assert any("inference request" in line for line in lines), lines
    assert not any(line.startswith("W") for line in lines), lines
    assert any(line.startswith("E") and "broken" in line for line in lines), lines


# tritonserver's flags for things Tessera has no counterpart of, as a Helm chart or launch script passes them.
TRITON_ONLY_FLAGS = ("--http-thread-count=8", "--grpc-infer-thread-count=4", "--pinned-memory-pool-byte-size=268435456",
                     "--cuda-memory-pool-byte-size=0:67108864", "--min-supported-compute-capability=6.0",
                     "--backend-directory=/opt/tritonserver/backends", "--allow-gpu-metrics=false",
                     "--allow-sagemaker=false", "--rate-limit=off", "--trace-config", "level=OFF")
# Ones that carry meaning here.
MEANINGFUL_FLAGS = ("--id=edge-7", "--model-load-thread-count=1", "--strict-model-config=false", "--log-format=ISO8601",
                    "--exit-timeout-secs=5")


def test_tritonservers_flags_start_the_server_and_say_what_they_change(tmp_path):
    server = Server([repo_with_simple(tmp_path)], tmp_path, *SEED_FLAGS, *TRITON_ONLY_FLAGS, *MEANINGFUL_FLAGS)
    server.wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_server_metadata()["name"] == "edge-7"
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        np.testing.assert_array_equal(client.infer("simple", add_sub_inputs(httpclient, data)).as_numpy("OUTPUT1"), 0 * data)
        client.close()
    finally:
        assert server.stop() == 0
    lines = server.log().splitlines()
    for flag in ("http-thread-count", "grpc-infer-thread-count", "pinned-memory-pool-byte-size", "backend-directory"):
        said = [line for line in lines if f"--{flag} has no effect in Tessera" in line]
        assert len(said) == 1, (flag, lines)
    assert not any("allow-sagemaker" in line or "trace-config" in line for line in lines), "flags that ask for nothing are silent"
    iso = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [EWI] \d+ [\w.]+:\d+\] ".*')
    assert lines and all(iso.match(line) for line in lines), lines


@pytest.mark.parametrize("flag, says", [
    ("--grpc-use-ssl=true", "does not terminate TLS"),
    ("--allow-vertex-ai=1", "no Vertex AI endpoint"),
    ("--model-namespacing=true", "does not namespace models"),
    ("--trace-config=mode=zipkin", "the mode is 'triton' or 'opentelemetry'"),
    ("--log-format=syslog", "invalid argument for --log-format"),
])
def test_a_flag_whose_absence_would_surprise_is_refused_with_the_reason(tmp_path, flag, says):
    refused = subprocess.run([str(BINARY), "--model-repository", str(tmp_path), flag], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and says in refused.stderr, refused.stderr


def test_help_groups_the_flags_as_tritonserver_does():
    usage = subprocess.run([str(BINARY), "--help"], capture_output=True, text=True, timeout=30).stdout
    headings = [line[:-1] for line in usage.splitlines() if line.endswith(":") and not line.startswith(" ")]
    expected = ["Server", "Logging", "Model Repository", "HTTP", "GRPC", "Sagemaker", "Vertex", "Metrics", "Tracing",
                "Backend", "Repository Agent", "Rate Limiter", "Memory/Device Management", "DEPRECATED"]
    assert [h for h in headings if h in expected] == expected, headings
    for flag in ("--log-info", "--model-store", "--allow-grpc", "--grpc-keepalive-time", "--host-policy", "--trace-level"):
        assert flag in usage, flag


def test_allow_http_and_allow_grpc_turn_an_endpoint_off(tmp_path):
    repo = repo_with_simple(tmp_path)
    grpc_only = Server([repo], tmp_path, *SEED_FLAGS, "--allow-http=false")
    try:
        wait_for(lambda: grpc_ready(grpc_only), timeout=60, what="the gRPC endpoint")
        with pytest.raises(requests.ConnectionError):
            requests.get(grpc_only.url("/v2/health/live"), timeout=2)
    finally:
        assert grpc_only.stop() == 0
    http_only = Server([repo], tmp_path, *SEED_FLAGS, "--allow-grpc=0").wait_live()
    try:
        with pytest.raises(InferenceServerException):
            grpcclient.InferenceServerClient(http_only.grpc_url).is_server_live(client_timeout=2)
    finally:
        assert http_only.stop() == 0
    assert "Started GRPCInferenceService" not in http_only.log()


def grpc_ready(server):
    try:
        return grpcclient.InferenceServerClient(server.grpc_url).is_model_ready("simple", client_timeout=2)
    except InferenceServerException:
        return False


def test_symlinked_repository_models_versions_and_configs_load(tmp_path):
    """Kubernetes lays out ConfigMaps and projected volumes with links: `..data` links to a timestamped
    directory and every entry links into `..data`. The repository itself is a link too."""
    real = tmp_path / "volume"
    stamp = real / "..2026_12_04_21_00_00.000000001"
    add_model(stamp, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    os.symlink(stamp.name, real / "..data")
    os.symlink("..data/simple", real / "simple")
    # A model whose version directory and config are links to elsewhere.
    elsewhere = tmp_path / "elsewhere"
    add_model(elsewhere, "store", (ROOT / "model_repository/simple/config.pbtxt").read_text().replace('"simple"', '"linked"'),
              plugin="add_sub")
    (real / "linked").mkdir()
    os.symlink(elsewhere / "store" / "1", real / "linked" / "1")
    os.symlink(elsewhere / "store" / "config.pbtxt", real / "linked" / "config.pbtxt")
    repo = tmp_path / "repo-link"
    os.symlink(real, repo)
    server = Server([repo], tmp_path).wait_live()
    try:
        index = {entry["name"]: entry for entry in requests.post(server.url("/v2/repository/index"), timeout=10).json()}
        assert set(index) == {"simple", "linked"}, index
        client = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        for model in ("simple", "linked"):
            assert index[model]["state"] == "READY", index
            np.testing.assert_array_equal(client.infer(model, add_sub_inputs(httpclient, data)).as_numpy("OUTPUT0"), 2 * data)
        client.close()
    finally:
        assert server.stop() == 0


def test_an_empty_ort_dylib_path_is_unset(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "model_repository" / "simple_onnx", repo / "simple_onnx")
    server = Server([repo], tmp_path, env={"ORT_DYLIB_PATH": ""}).wait_live()
    try:
        assert requests.get(server.url("/v2/models/simple_onnx/ready"), timeout=10).status_code == 200
    finally:
        assert server.stop() == 0


def healthcheck(*flags):
    done = subprocess.run([str(BINARY), "healthcheck", *flags], capture_output=True, text=True, timeout=30)
    return done.returncode, done.stderr


def test_healthcheck_answers_for_exec_probes(tmp_path):
    """`tessera healthcheck` exits 0 when the server is ready (or live, with --live) and 1 with the reason when
    it is not, for images that have no shell or curl."""
    repo = repo_with_simple(tmp_path)
    # Every model loaded, one of them broken: live, but not ready under strict readiness.
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=true").wait_live()
    port = str(server.http_port)
    try:
        wait_for(lambda: "broken" in server.log(), what="the broken model's failure")
        assert healthcheck("--http-port", port, "--live") == (0, "")
        code, reason = healthcheck("--http-port", port)
        assert code == 1 and f"http://127.0.0.1:{port}/v2/health/ready answered 400" in reason, reason
    finally:
        assert server.stop() == 0
    server = Server([repo_with_simple(tmp_path / "second")], tmp_path, *SEED_FLAGS).wait_live()
    port = str(server.http_port)
    try:
        assert healthcheck("--http-port", port) == (0, "")
    finally:
        assert server.stop() == 0
    code, reason = healthcheck("--http-port", port, "--timeout-secs", "2")
    assert code == 1 and "Connection refused" in reason, reason


def test_a_repeated_flag_takes_its_last_value_as_tritonserver_does(tmp_path):
    """KServe appends an InferenceService's args to its runtime's, so users override a runtime's flag by
    repeating it; tritonserver (getopt) takes the last value, and so does Tessera."""
    server = Server([repo_with_simple(tmp_path)], tmp_path, *SEED_FLAGS, "--exit-timeout-secs=1", "--exit-timeout-secs=7",
                    "--load-model=other").wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        # A repeatable flag still adds up: both models named are loaded.
        assert client.is_model_ready("simple") and client.is_model_ready("other")
        client.close()
    finally:
        assert server.stop() == 0
    assert "finishing in-flight requests for up to 7s" in server.log()
