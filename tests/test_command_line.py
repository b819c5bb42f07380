"""tritonserver's command line as users type it: the seed's own line starts the server and serves `simple`,
and the logging flags do what tritonserver's do."""

import numpy as np
import requests
import tritonclient.http as httpclient

from conftest import ROOT, Server, add_model, add_sub_inputs

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
    assert "WARN" in written and "broken" in written, written
    assert " INFO " not in written, written
    assert quiet.log() == "", "with --log-file nothing goes to standard error"

    verbose = Server([repo_with_simple(tmp_path)], tmp_path, "--log-verbose=1", "--log-warning=0", "--exit-on-error=false").wait_live()
    try:
        body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))} for n in ("INPUT0", "INPUT1")]}
        assert requests.post(verbose.url("/v2/models/simple/infer"), json=body, timeout=10).status_code == 200
    finally:
        assert verbose.stop() == 0
    log = verbose.log()
    assert "DEBUG" in log and "inference request" in log and " WARN " not in log and "broken" in log, log
