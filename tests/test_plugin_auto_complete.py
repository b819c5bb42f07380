"""A Wasm plugin completes its own configuration through `auto-complete-config`, as a Triton python model's
`auto_complete_config` does: the `sleep` plugin fills in its inputs and outputs when the config (or the
whole config file) leaves them out, the `faulty` plugin refuses when asked to, and
`--disable-auto-complete-config` turns the call off."""

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from conftest import Server, add_model, tensor_config


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("auto_complete") / "repo"
    add_model(root, "described_by_plugin", 'backend: "wasm"\nmax_batch_size: 4\n', plugin="sleep")
    add_model(root, "no_config_file", "", plugin="sleep")
    (root / "no_config_file" / "config.pbtxt").unlink()
    refusing = 'backend: "wasm"\nparameters { key: "refuse_auto_complete" value: { string_value: "yes" } }\n'
    add_model(root, "refused", refusing + tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]), plugin="faulty")
    return root


def index(server):
    return {e["name"]: e for e in requests.post(server.url("/v2/repository/index")).json()}


def test_the_plugin_fills_in_what_the_config_leaves_out(repo, tmp_path):
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=false").wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        for model in ("described_by_plugin", "no_config_file"):
            config = client.get_model_config(model)
            assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("MS", "TYPE_INT32", [1])]
            assert [(t["name"], t["data_type"]) for t in config["output"]] == [("OUT", "TYPE_INT32")]
        assert client.get_model_config("described_by_plugin")["max_batch_size"] == 4
        tensor = httpclient.InferInput("MS", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[0]], dtype=np.int32))
        assert client.infer("described_by_plugin", [tensor]).as_numpy("OUT").tolist() == [[0]]
        refused = index(server)["refused"]
        assert refused["state"] == "UNAVAILABLE"
        assert "auto-complete-config failed: faulty plugin refuses to complete this config" in refused["reason"]
    finally:
        assert server.stop() == 0


def test_disabling_auto_complete_leaves_the_config_as_written(repo, tmp_path):
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=false", "--disable-auto-complete-config").wait_live()
    try:
        entries = index(server)
        assert entries["described_by_plugin"]["state"] == "UNAVAILABLE"
        assert "at least one output" in entries["described_by_plugin"]["reason"]
        assert entries["refused"]["state"] == "READY"  # never asked
    finally:
        assert server.stop() == 0
