"""The response cache: `response_cache { enable: true }` with `--cache-config local,size=N` (and Triton's
other spellings) answers a repeated request without running it, over HTTP and gRPC; hits and misses in
statistics and metrics; errors, answers larger than the cache and the least recently used answers are not
kept; decoupled and sequence models refuse it at load; without a server cache nothing is cached."""

import subprocess

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import BINARY, ROOT, Server, add_model, identity_config, tensor_config

CACHED = 'response_cache { enable: true }\n'
FAULTY = 'backend: "wasm"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])


def cache_repo(root):
    add_model(root, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32") + CACHED, plugin="identity")
    add_model(root, "uncached", identity_config("uncached", "TYPE_FP32"), plugin="identity")
    add_model(root, "faulty", FAULTY + CACHED, plugin="faulty")
    simple = (ROOT / "model_repository/simple/config.pbtxt").read_text()
    add_model(root, "simple", simple + CACHED, plugin="add_sub")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    server = Server([cache_repo(root / "repo")], root, "--cache-config=local,size=65536").wait_live()
    yield server
    assert server.stop() == 0, server.log()


def stats(server, model):
    entry = requests.get(server.url(f"/v2/models/{model}/stats"), timeout=10).json()["model_stats"][0]
    infer = entry["inference_stats"]
    return {"hits": infer["cache_hit"]["count"], "misses": infer["cache_miss"]["count"], "success": infer["success"]["count"],
            "executions": entry["execution_count"], "failures": infer["fail"]["count"]}


def identity(server, values, **parameters):
    body = {"inputs": [{"name": "INPUT0", "shape": [len(values)], "datatype": "FP32", "data": values}], **parameters}
    return requests.post(server.url("/v2/models/identity_fp32/infer"), json=body, timeout=10)


def test_a_repeated_request_is_answered_from_the_cache(server):
    before = stats(server, "identity_fp32")
    first = identity(server, [1.5, 2.5], id="first")
    second = identity(server, [1.5, 2.5], id="second", parameters={"priority": 0})
    assert first.status_code == second.status_code == 200
    assert second.json()["outputs"] == first.json()["outputs"] and second.json()["id"] == "second"
    other = identity(server, [1.5, 3.5])
    assert other.json()["outputs"][0]["data"] == [1.5, 3.5]
    after = stats(server, "identity_fp32")
    assert after["hits"] - before["hits"] == 1 and after["misses"] - before["misses"] == 2, (before, after)
    assert after["executions"] - before["executions"] == 2, "a hit does not run the model"
    assert after["success"] - before["success"] == 3
    metrics = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    assert 'nv_cache_num_hits_per_model{model="identity_fp32",version="1"}' in metrics
    assert 'nv_cache_num_misses_per_model{model="identity_fp32",version="1"}' in metrics


def test_grpc_requests_share_the_cache(server):
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    before = stats(server, "simple")
    results = [client.infer("simple", inputs) for _ in range(3)]
    for result in results:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * data)
    http_client = httpclient.InferenceServerClient(server.http_url)
    http_inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data, binary_data=True)
        http_inputs.append(tensor)
    np.testing.assert_array_equal(http_client.infer("simple", http_inputs).as_numpy("OUTPUT1"), 0 * data)
    after = stats(server, "simple")
    assert after["hits"] - before["hits"] == 3 and after["executions"] - before["executions"] == 1, (before, after)
    grpc_stats = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]["inference_stats"]
    assert int(grpc_stats["cache_hit"]["count"]) == after["hits"]
    client.close()
    http_client.close()


def test_errors_are_not_kept(server):
    body = {"inputs": [{"name": "MODE", "shape": [1], "datatype": "INT32", "data": [1]}]}
    for _ in range(2):
        assert requests.post(server.url("/v2/models/faulty/infer"), json=body, timeout=30).status_code == 500
    counted = stats(server, "faulty")
    assert counted["hits"] == 0 and counted["misses"] == 0 and counted["failures"] == 2, counted


def test_a_model_without_the_cache_runs_every_request(server):
    body = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [4.0]}]}
    for _ in range(2):
        assert requests.post(server.url("/v2/models/uncached/infer"), json=body, timeout=10).status_code == 200
    counted = stats(server, "uncached")
    assert counted["executions"] == 2 and counted["hits"] == 0 and counted["misses"] == 0, counted


def test_the_cache_holds_at_most_its_size(server):
    big = [0.25] * 10_000  # 40 KB: fits the 64 KiB cache once, not twice
    before = stats(server, "identity_fp32")
    for values in (big, [0.5] + big[1:], big):
        assert identity(server, values).status_code == 200
    after = stats(server, "identity_fp32")
    assert after["hits"] == before["hits"], "the first answer was dropped for the second"
    assert identity(server, big).status_code == 200
    assert stats(server, "identity_fp32")["hits"] == before["hits"] + 1, "the latest answer is kept"
    huge = [0.75] * 20_000  # 80 KB: larger than the whole cache, never kept
    for _ in range(2):
        assert identity(server, huge).status_code == 200
    assert stats(server, "identity_fp32")["hits"] == before["hits"] + 1


def test_without_a_server_cache_nothing_is_cached(tmp_path):
    server = Server([cache_repo(tmp_path / "repo")], tmp_path).wait_live()
    try:
        for _ in range(2):
            assert identity(server, [1.0]).status_code == 200
        assert stats(server, "identity_fp32")["executions"] == 2
    finally:
        assert server.stop() == 0
    assert "the config enables the response cache, but the server has none" in server.log()


def test_the_deprecated_byte_size_flag_configures_the_local_cache(tmp_path):
    server = Server([cache_repo(tmp_path / "repo")], tmp_path, "--response-cache-byte-size=1048576").wait_live()
    try:
        for _ in range(2):
            assert identity(server, [2.0]).status_code == 200
        assert stats(server, "identity_fp32")["hits"] == 1
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("flag, says", [("--cache-config=redis,host=localhost", "unknown cache 'redis'"),
                                        ("--cache-config=local,sise=10", "no setting 'sise'"),
                                        ("--cache-config=local,size=lots", "not a byte count")])
def test_other_caches_and_settings_are_refused(tmp_path, flag, says):
    done = subprocess.run([str(BINARY), "--model-repository", str(tmp_path), flag], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and says in done.stdout + done.stderr, done.stdout + done.stderr


def test_decoupled_and_sequence_models_refuse_the_cache(tmp_path):
    repo = tmp_path / "repo"
    square = (ROOT / "model_repository/square_int32/config.pbtxt").read_text().replace('"square_int32"', '"decoupled"')
    add_model(repo, "decoupled", square + CACHED, plugin="square")
    sequence = identity_config("sequence", "TYPE_FP32").replace("max_batch_size: 0", "max_batch_size: 1") + CACHED
    add_model(repo, "sequence", sequence + "sequence_batching { }\n", plugin="identity")
    server = Server([repo], tmp_path, "--cache-config=local,size=1024", "--exit-on-error=false").wait_live()
    try:
        index = {e["name"]: e for e in requests.post(server.url("/v2/repository/index"), timeout=10).json()}
        assert "Response Cache does not currently support model decoupled with 'decoupled' transaction policy" in index["decoupled"]["reason"]
        assert "Response Cache does not currently support model sequence with sequence batching scheduler" in index["sequence"]["reason"]
    finally:
        assert server.stop() == 0
