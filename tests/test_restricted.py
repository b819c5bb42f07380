"""Restricted APIs: `--http-restricted-api` and `--grpc-restricted-protocol` with Triton's categories,
answers (403 / UNAVAILABLE) and messages, through tritonclient (which passes headers) and raw requests."""

import subprocess

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BINARY, ROOT, Server, add_model, add_sub_inputs

FLAGS = ("--http-restricted-api=inference,model-config:infer-key=s3cret",
         "--http-restricted-api=model-repository,logging:admin-key=yes",
         "--grpc-restricted-protocol=inference,statistics:infer-key=s3cret",
         "--model-control-mode=explicit", "--load-model=simple")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("restricted")
    add_model(root / "repo", "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    server = Server([root / "repo"], root, *FLAGS).wait_live()
    yield server
    assert server.stop() == 0, server.log()


DATA = np.arange(16, dtype=np.int32).reshape(1, 16)
INFER_BODY = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": DATA.ravel().tolist()} for n in ("INPUT0", "INPUT1")]}


@pytest.mark.parametrize("method, path, body, header", [
    ("post", "/v2/models/simple/infer", INFER_BODY, "infer-key"),
    ("post", "/v2/models/simple/versions/1/infer", INFER_BODY, "infer-key"),
    ("get", "/v2/models/simple/config", None, "infer-key"),
    ("post", "/v2/repository/index", None, "admin-key"),
    ("post", "/v2/repository/models/simple/unload", None, "admin-key"),
    ("get", "/v2/logging", None, "admin-key"),
])
def test_a_restricted_http_api_needs_its_header(server, method, path, body, header):
    refused = getattr(requests, method)(server.url(path), json=body, timeout=10)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == f"This API is restricted, expecting header '{header}'"
    wrong = getattr(requests, method)(server.url(path), json=body, headers={header: "guess"}, timeout=10)
    assert wrong.status_code == 403
    assert requests.get(server.url("/v2/models/simple/ready"), timeout=10).status_code == 200, "nothing was unloaded"


def test_open_categories_and_the_right_header_pass(server):
    assert requests.get(server.url("/v2/health/ready"), timeout=10).status_code == 200
    assert requests.get(server.url("/v2/models/simple"), timeout=10).status_code == 200
    assert requests.get(server.url("/v2/models/simple/stats"), timeout=10).status_code == 200, "statistics are open over HTTP"
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
        client.infer("simple", add_sub_inputs(httpclient, DATA))
    result = client.infer("simple", add_sub_inputs(httpclient, DATA), headers={"infer-key": "s3cret"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * DATA)
    assert client.get_model_config("simple", headers={"Infer-Key": "s3cret"})["name"] == "simple"
    client.close()


def test_a_restricted_grpc_protocol_needs_its_prefixed_header(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_live() and client.get_model_metadata("simple").name == "simple"
    assert client.get_model_config("simple").config.name == "simple", "model-config is restricted over HTTP only"
    for call in (lambda **h: client.infer("simple", add_sub_inputs(grpcclient, DATA), **h),
                 lambda **h: client.get_inference_statistics("simple", **h)):
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert refused.value.message() == "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
        call(headers={"triton-grpc-protocol-infer-key": "s3cret"})
    client.close()


def test_a_restricted_stream_needs_the_header_too(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results = []
    client.start_stream(callback=lambda result, error: results.append(error))
    try:
        client.async_stream_infer("simple", add_sub_inputs(grpcclient, DATA))
    except InferenceServerException as gone:
        # The server refuses the stream when it opens, so the refusal can reach the
        # client's reader before the request is queued; the client then says so here
        # and the reason is still in the callback.
        assert "no longer in valid state" in gone.message(), gone
    client.stop_stream()
    client.close()
    assert len(results) == 1 and "expecting header 'triton-grpc-protocol-infer-key'" in str(results[0]), results
    streamed = grpcclient.InferenceServerClient(server.grpc_url)
    answers = []
    streamed.start_stream(callback=lambda result, error: answers.append((result, error)),
                          headers={"triton-grpc-protocol-infer-key": "s3cret"})
    streamed.async_stream_infer("simple", add_sub_inputs(grpcclient, DATA))
    streamed.stop_stream()
    assert len(answers) == 1 and answers[0][1] is None
    np.testing.assert_array_equal(answers[0][0].as_numpy("OUTPUT1"), 0 * DATA)
    streamed.close()


@pytest.mark.parametrize("flag, says", [
    ("--http-restricted-api=gpu:k=v", "unknown restricted api 'gpu'"),
    ("--grpc-restricted-protocol=health:a=1", None),
    ("--http-restricted-api=health", "expected <api>"),
])
def test_bad_restriction_flags_stop_the_server_with_the_reason(tmp_path, flag, says):
    flags = [flag] if says else [flag, "--grpc-restricted-protocol=health,trace:b=2"]
    says = says or "restricted protocol 'health' can not be specified in multiple config groups"
    done = subprocess.run([str(BINARY), "--model-repository", str(tmp_path), *flags], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and says in done.stdout + done.stderr, done.stdout + done.stderr
