"""Triton's statistics extension (HTTP and gRPC, through tritonclient) and the Prometheus metrics endpoint,
checked against a known sequence of requests on a server of their own, so every count is exact."""

import re

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, Server, add_model, tensor_config


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """A server that has answered: 5 HTTP requests of batch 2 and 2 gRPC requests of batch 1 on `simple`,
    1 request with a wrong shape, and on `faulty` 1 good request and 1 trap."""
    tmp = tmp_path_factory.mktemp("observability")
    repo = tmp / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(repo, "faulty", 'backend: "wasm"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1])
              + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]), plugin="faulty")
    server = Server([repo], tmp).wait_live()
    for module, url, batch, calls in ((httpclient, server.http_url, 2, 5), (grpcclient, server.grpc_url, 1, 2)):
        client = module.InferenceServerClient(url)
        a = np.ones((batch, 16), dtype=np.int32)
        inputs = [module.InferInput("INPUT0", a.shape, "INT32"), module.InferInput("INPUT1", a.shape, "INT32")]
        for t in inputs:
            t.set_data_from_numpy(a)
        for _ in range(calls):
            client.infer("simple", inputs)
        client.close()
    bad = {"inputs": [{"name": n, "shape": [1, 15], "datatype": "INT32", "data": [0] * 15} for n in ("INPUT0", "INPUT1")]}
    assert requests.post(server.url("/v2/models/simple/infer"), json=bad).status_code == 400
    for mode, status in ((0, 200), (1, 500)):
        body = {"inputs": [{"name": "MODE", "shape": [1], "datatype": "INT32", "data": [mode]}]}
        assert requests.post(server.url("/v2/models/faulty/infer"), json=body).status_code == status
    yield server
    assert server.stop() == 0


def test_http_statistics_count_every_request(observed):
    stats = requests.get(observed.url("/v2/models/simple/versions/1/stats")).json()["model_stats"]
    assert len(stats) == 1
    s = stats[0]
    assert (s["name"], s["version"]) == ("simple", "1")
    assert s["inference_count"] == 12 and s["execution_count"] == 7
    infer = s["inference_stats"]
    assert infer["success"]["count"] == 7 and infer["fail"]["count"] == 1
    assert infer["queue"]["count"] == 7
    for stage in ("success", "compute_input", "compute_infer", "compute_output"):
        assert infer[stage]["ns"] > 0, stage
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in s["batch_stats"]} == {1: 2, 2: 5}
    assert s["last_inference"] > 1_700_000_000_000


def test_trap_counts_as_failure_after_an_execution(observed):
    s = requests.get(observed.url("/v2/models/faulty/stats")).json()["model_stats"][0]
    assert s["inference_stats"]["success"]["count"] == 1 and s["inference_stats"]["fail"]["count"] == 1
    assert s["execution_count"] == 2


def test_tritonclient_statistics_agree_over_both_protocols(observed):
    http = httpclient.InferenceServerClient(observed.http_url).get_inference_statistics("simple")
    grpc = grpcclient.InferenceServerClient(observed.grpc_url).get_inference_statistics("simple", as_json=True)
    assert http["model_stats"][0]["inference_count"] == 12
    assert int(grpc["model_stats"][0]["inference_count"]) == 12
    everything = requests.get(observed.url("/v2/models/stats")).json()["model_stats"]
    assert sorted(m["name"] for m in everything) == ["faulty", "simple"]
    assert requests.get(observed.url("/v2/models/nope/stats")).status_code == 404


def metric(text, name, **labels):
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(label_text)}\}} (\S+)$", text, re.MULTILINE)
    assert match, f"{name}{{{label_text}}} not in metrics"
    return float(match.group(1))


def test_prometheus_metrics_have_triton_names_and_exact_counts(observed):
    response = requests.get(f"http://127.0.0.1:{observed.metrics_port}/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    simple = {"model": "simple", "version": "1"}
    assert metric(text, "nv_inference_request_success", **simple) == 7
    assert metric(text, "nv_inference_request_failure", **simple) == 1
    assert metric(text, "nv_inference_count", **simple) == 12
    assert metric(text, "nv_inference_exec_count", **simple) == 7
    assert metric(text, "nv_inference_pending_request_count", **simple) == 0
    for name in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
        assert metric(text, f"nv_inference_{name}_duration_us", **simple) >= 0
    assert metric(text, "nv_inference_request_duration_us", **simple) > 0
    # The batch-size histogram Triton lacks: 2 executions of batch 1, 5 of batch 2.
    assert metric(text, "tessera_batch_size_bucket", **simple, le="1") == 2
    assert metric(text, "tessera_batch_size_bucket", **simple, le="2") == 7
    assert metric(text, "tessera_batch_size_count", **simple) == 7
    assert metric(text, "nv_inference_request_failure", model="faulty", version="1") == 1
