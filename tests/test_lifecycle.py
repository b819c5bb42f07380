"""Model management against the real binary, in the spirit of Triton's qa/L0_lifecycle: the three control
modes, the repository API over HTTP and gRPC (index, load with config override and supplied files, unload),
poll-mode changes (models and versions added, removed, modified, broken), version policies, two repositories
with the same model name, strict readiness. The under-load tests are in test_reload_under_load.py."""

import json
import shutil
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import PLUGINS, ROOT, Server, add_model, add_sub_inputs, tensor_config, wait_for

DOUBLED = np.arange(16).reshape(1, 16) * 2  # what the add/sub models answer for add_sub() below
# A model that exists only in a load request: the identity plugin on FP32 vectors.
PUSHED_CONFIG = {
    "name": "pushed", "backend": "wasm", "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}
SIMPLE_CONFIG = (ROOT / "model_repository/simple/config.pbtxt").read_text()


def simple_config(name, extra=""):
    return SIMPLE_CONFIG.replace('name: "simple"', f'name: "{name}"') + extra


def make_repo(root, names=("simple", "other")):
    for name in names:
        add_model(root, name, simple_config(name), plugin="add_sub")
    shutil.copytree(ROOT / "model_repository/simple_onnx", root / "simple_onnx")
    return root


def add_sub(client_module, url, model, version=""):
    """Runs `model` once; returns OUTPUT0 (INPUT0 + INPUT1)."""
    client = client_module.InferenceServerClient(url)
    inputs = add_sub_inputs(client_module, np.arange(16, dtype=np.int32).reshape(1, 16))
    try:
        return client.infer(model, inputs, model_version=version).as_numpy("OUTPUT0")
    finally:
        client.close()


def index(server, ready=None):
    body = {} if ready is None else {"ready": ready}
    response = requests.post(server.url("/v2/repository/index"), json=body)
    assert response.status_code == 200, response.text
    return {(e["name"], e.get("version", "")): e for e in response.json()}


@pytest.fixture()
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


def start(repo, tmp_path, *flags, repositories=None):
    return Server(repositories or [repo], tmp_path, *flags).wait_live()


# --- control mode none -------------------------------------------------------------------------------


def test_none_mode_serves_everything_and_refuses_load_and_unload(repo, tmp_path):
    server = start(repo, tmp_path)
    try:
        assert {k[0] for k, e in index(server).items() if e["state"] == "READY"} == {"simple", "other", "simple_onnx"}
        response = requests.post(server.url("/v2/repository/models/simple/load"))
        assert response.status_code == 503
        assert "not allowed if model control mode is 'none'" in response.json()["error"]
        client = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException) as caught:
            client.unload_model("simple")
        assert caught.value.status() == "StatusCode.UNAVAILABLE"
        np.testing.assert_array_equal(add_sub(httpclient, server.http_url, "simple"), DOUBLED)
    finally:
        assert server.stop() == 0


# --- explicit mode -----------------------------------------------------------------------------------


def test_explicit_mode_loads_only_what_is_named_then_what_the_api_asks(repo, tmp_path):
    server = start(repo, tmp_path, "--model-control-mode=explicit", "--load-model=simple")
    try:
        entries = index(server)
        assert entries[("simple", "1")]["state"] == "READY"
        assert entries[("other", "")] == {"name": "other"}  # never loaded: listed by name only, as Triton does
        assert list(index(server, ready=True)) == [("simple", "1")]
        with pytest.raises(InferenceServerException, match="unknown model"):
            add_sub(httpclient, server.http_url, "other")

        client = httpclient.InferenceServerClient(server.http_url)
        client.load_model("other")
        assert client.is_model_ready("other")
        np.testing.assert_array_equal(add_sub(httpclient, server.http_url, "other"), DOUBLED)

        client.unload_model("other")
        assert index(server)[("other", "1")] == {"name": "other", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        with pytest.raises(InferenceServerException, match="has no available versions"):
            add_sub(httpclient, server.http_url, "other")
        assert not client.is_model_ready("other")

        with pytest.raises(InferenceServerException, match="no model directory named 'nope'"):
            client.load_model("nope")
        with pytest.raises(InferenceServerException, match="not loaded"):
            client.unload_model("nope")
    finally:
        assert server.stop() == 0


def test_explicit_mode_over_grpc_with_the_onnx_model(repo, tmp_path):
    server = start(repo, tmp_path, "--model-control-mode=explicit")
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        assert {m["name"] for m in client.get_model_repository_index(as_json=True)["models"]} == {"simple", "other", "simple_onnx"}
        client.load_model("simple_onnx")
        assert client.is_model_ready("simple_onnx")
        np.testing.assert_array_equal(add_sub(grpcclient, server.grpc_url, "simple_onnx"), DOUBLED)
        ready = client.get_model_repository_index(as_json=True)["models"]
        assert [m for m in ready if m.get("state") == "READY"] == [{"name": "simple_onnx", "version": "1", "state": "READY"}]
        client.unload_model("simple_onnx")
        assert not client.is_model_ready("simple_onnx")

        wasm = (PLUGINS / "identity.wasm").read_bytes()
        client.load_model("pushed", config=json.dumps(PUSHED_CONFIG), files={"file:1/model.wasm": wasm})
        data = np.array([4.0, 2.0], dtype=np.float32)
        t = grpcclient.InferInput("INPUT0", [2], "FP32")
        t.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("pushed", [t]).as_numpy("OUTPUT0"), data)
    finally:
        assert server.stop() == 0


def test_load_with_a_config_override_and_with_supplied_files(repo, tmp_path):
    server = start(repo, tmp_path, "--model-control-mode=explicit", "--load-model=simple")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        config = client.get_model_config("simple")
        config["instance_group"][0]["count"] = 3
        client.load_model("simple", config=json.dumps(config))
        assert client.get_model_config("simple")["instance_group"][0]["count"] == 3

        pushed = PUSHED_CONFIG
        wasm = (PLUGINS / "identity.wasm").read_bytes()
        client.load_model("pushed", config=json.dumps(pushed), files={"file:1/model.wasm": wasm})
        data = np.array([1.5, -2.0], dtype=np.float32)
        t = httpclient.InferInput("INPUT0", [2], "FP32")
        t.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("pushed", [t]).as_numpy("OUTPUT0"), data)
        assert not (repo / "pushed").exists(), "supplied files must not be written into the user's repository"

        for bad, message in [
            ({"parameters": {"file:1/model.wasm": "AAAA"}}, "without a 'config' parameter"),
            ({"parameters": {"config": "{}", "file:../escape": "AAAA"}}, "inside the model directory"),
            ({"parameters": {"config": "{not json"}}, "not a valid JSON model configuration"),
            ({"parameters": {"config": json.dumps(pushed), "file:1/model.wasm": "***"}}, "not valid base64"),
        ]:
            response = requests.post(server.url("/v2/repository/models/pushed/load"), json=bad)
            assert response.status_code == 400, response.text
            assert message in response.json()["error"]
        np.testing.assert_array_equal(client.infer("pushed", [t]).as_numpy("OUTPUT0"), data)  # still serving
    finally:
        assert server.stop() == 0


def test_a_broken_reload_keeps_the_old_version_serving(repo, tmp_path):
    server = start(repo, tmp_path, "--model-control-mode=explicit", "--load-model=simple")
    try:
        (repo / "simple" / "config.pbtxt").write_text("this is { not a config")
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException, match="previous versions keep serving"):
            client.load_model("simple")
        entry = index(server)[("simple", "1")]
        assert entry["state"] == "READY" and "config.pbtxt" in entry["reason"]
        np.testing.assert_array_equal(add_sub(httpclient, server.http_url, "simple"), DOUBLED)
    finally:
        assert server.stop() == 0


def test_every_instance_is_finalised_exactly_once_across_reloads_and_unload(tmp_path):
    repo = tmp_path / "repo"
    config = 'backend: "wasm"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])
    add_model(repo, "faulty", config + "instance_group [ { count: 2 } ]\n", plugin="faulty")
    server = start(repo, tmp_path, "--model-control-mode=explicit", "--load-model=faulty")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        config = client.get_model_config("faulty")
        for count in (1, 3):
            config["instance_group"][0]["count"] = count
            client.load_model("faulty", config=json.dumps(config))
        client.unload_model("faulty")
        created = 2 + 1 + 3
        wait_for(lambda: server.log().count("faulty plugin finalised") >= created, what="every instance finalised")
        time.sleep(0.3)
        assert server.log().count("faulty plugin initialised") == created
        assert server.log().count("faulty plugin finalised") == created
    finally:
        assert server.stop() == 0
    assert server.log().count("faulty plugin finalised") == created, "an unloaded model must not be finalised again at exit"


def test_a_slow_load_does_not_hold_up_the_others_and_shows_as_loading(tmp_path):
    repo = tmp_path / "repo"
    slow = 'backend: "wasm"\nparameters { key: "initialize_ms" value: { string_value: "3000" } }\n'
    add_model(repo, "slow", slow, plugin="sleep")
    add_model(repo, "fast", 'backend: "wasm"\n', plugin="sleep")
    server = start(repo, tmp_path, "--model-control-mode=explicit")
    try:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
        slow_load = threading.Thread(target=lambda: httpclient.InferenceServerClient(server.http_url, network_timeout=30).load_model("slow"))
        slow_load.start()
        wait_for(lambda: index(server).get(("slow", ""), {}).get("state") == "LOADING", what="slow to show as loading")
        started = time.monotonic()
        client.load_model("fast")
        assert time.monotonic() - started < 2, "the fast model waited for the slow one"
        assert client.is_model_ready("fast") and not client.is_model_ready("slow")
        slow_load.join(timeout=30)
        assert client.is_model_ready("slow")
    finally:
        assert server.stop() == 0
    assert '"model loaded" model="fast"' in server.log() and '"model loaded" model="slow"' in server.log()


def test_load_model_star_loads_all_and_cannot_be_combined(repo, tmp_path):
    server = start(repo, tmp_path, "--model-control-mode=explicit", "--load-model=*")
    try:
        assert len(index(server, ready=True)) == 3
    finally:
        assert server.stop() == 0
    bad = Server([repo], tmp_path, "--model-control-mode=explicit", "--load-model=*", "--load-model=simple")
    assert bad.wait_exit() != 0
    assert "must be the only --load-model" in bad.log()


# --- poll mode ---------------------------------------------------------------------------------------


def add_sub_model(repo, name, kind):
    """Puts an add/sub model named `name` in `repo`, as a Wasm plugin or an ONNX graph; returns its config."""
    if kind == "wasm":
        config = simple_config(name)
        add_model(repo, name, config, plugin="add_sub")
    else:
        onnx = ROOT / "model_repository/simple_onnx"
        config = (onnx / "config.pbtxt").read_text().replace('"simple_onnx"', f'"{name}"')
        add_model(repo, name, config, files={"model.onnx": (onnx / "1" / "model.onnx").read_bytes()})
    return config


@pytest.mark.parametrize("kind", ["wasm", "onnx"])
def test_poll_follows_models_and_versions_added_removed_modified_and_broken(repo, tmp_path, kind):
    server = start(repo, tmp_path, "--model-control-mode=poll", "--repository-poll-secs=1")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException):
            client.load_model("simple")  # the API is refused in poll mode

        config = add_sub_model(repo, "added", kind)
        wait_for(lambda: client.is_model_ready("added"), what="the added model")

        (repo / "added" / "config.pbtxt").write_text(config + 'instance_group [ { count: 2 } ]\n')
        wait_for(lambda: client.get_model_config("added")["instance_group"][0]["count"] == 2, what="the modified config")

        shutil.copytree(repo / "added" / "1", repo / "added" / "2")
        wait_for(lambda: client.is_model_ready("added", "2") and not client.is_model_ready("added", "1"), what="version 2")
        assert index(server)[("added", "2")]["state"] == "READY"

        shutil.rmtree(repo / "added" / "2")
        wait_for(lambda: client.is_model_ready("added", "1"), what="back to version 1")

        (repo / "added" / "config.pbtxt").write_text("broken {")
        wait_for(lambda: "previous versions keep serving" in index(server)[("added", "1")].get("reason", ""), what="the failed reload")
        assert client.is_model_ready("added", "1")
        np.testing.assert_array_equal(add_sub(httpclient, server.http_url, "added"), DOUBLED)

        shutil.rmtree(repo / "added")
        wait_for(lambda: ("added", "1") not in index(server), what="the removed model")
        with pytest.raises(InferenceServerException, match="unknown model"):
            add_sub(httpclient, server.http_url, "added")
        assert client.is_model_ready("simple")
    finally:
        assert server.stop() == 0


# --- versions, repositories, readiness ---------------------------------------------------------------


def test_version_policies_and_per_version_routes(tmp_path):
    repo = tmp_path / "repo"
    add_model(repo, "latest2", simple_config("latest2", "version_policy: { latest: { num_versions: 2 } }\n"), plugin="add_sub", versions=(1, 2, 3))
    add_model(repo, "every", simple_config("every", "version_policy: { all: {} }\n"), plugin="add_sub", versions=(1, 2, 3))
    add_model(repo, "chosen", simple_config("chosen", "version_policy: { specific: { versions: [1, 3] } }\n"), plugin="add_sub", versions=(1, 2, 3))
    server = start(repo, tmp_path)
    try:
        ready = {k for k in index(server, ready=True)}
        assert ready == {("latest2", "2"), ("latest2", "3"), ("every", "1"), ("every", "2"), ("every", "3"), ("chosen", "1"), ("chosen", "3")}
        for model, version in ready:
            np.testing.assert_array_equal(add_sub(httpclient, server.http_url, model, version), DOUBLED)
        with pytest.raises(InferenceServerException, match="version 2 is not found"):
            add_sub(httpclient, server.http_url, "chosen", "2")
        assert requests.get(server.url("/v2/models/latest2")).json()["versions"] == ["2", "3"]
    finally:
        assert server.stop() == 0


def test_a_name_in_two_repositories_fails_for_that_name_only(tmp_path):
    first, second = make_repo(tmp_path / "a", names=("simple", "only_a")), tmp_path / "b"
    add_model(second, "simple", simple_config("simple"), plugin="add_sub")
    add_model(second, "only_b", simple_config("only_b"), plugin="add_sub")
    server = start(first, tmp_path, "--exit-on-error=false", "--strict-readiness=false", repositories=[first, second])
    try:
        entries = index(server)
        assert "exists in two repositories" in entries[("simple", "")]["reason"]
        assert entries[("only_a", "1")]["state"] == "READY" and entries[("only_b", "1")]["state"] == "READY"
    finally:
        assert server.stop() == 0


def test_strict_readiness_and_model_config_name(tmp_path):
    repo = make_repo(tmp_path / "repo", names=("simple",))
    add_model(repo, "broken", "not a config", plugin="add_sub")
    (repo / "simple" / "configs").mkdir()
    (repo / "simple" / "configs" / "two.pbtxt").write_text(simple_config("simple", "instance_group [ { count: 2 } ]\n"))
    strict = start(repo, tmp_path, "--exit-on-error=false", "--model-config-name=two")
    try:
        assert requests.get(strict.url("/v2/health/ready")).status_code == 400
        assert requests.get(strict.url("/v2/models/simple/config")).json()["instance_group"][0]["count"] == 2
    finally:
        assert strict.stop() == 0
    lenient = start(repo, tmp_path, "--exit-on-error=false", "--strict-readiness=false")
    try:
        assert requests.get(lenient.url("/v2/health/ready")).status_code == 200
        assert requests.get(lenient.url("/v2/models/simple/config")).json()["instance_group"][0]["count"] == 1
    finally:
        assert lenient.stop() == 0
