"""BLS: the `bls` plugin calls other models through the host's `infer` import, following the request
parameter `chain` (model names, comma-separated; each model's outputs are the next one's inputs). A chain
through the ONNX add/sub model then the Wasm one must compute ((a+b)+(a-b), (a+b)-(a-b)) = (2a, 2b); a callee
that is unknown, fails or traps comes back to the plugin as an error that it handles (its message starts with
"handled:"), and every model keeps serving."""

import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, add_sub_inputs, tensor_config

SIMPLE = (ROOT / "model_repository/simple/config.pbtxt").read_text()
A = np.arange(16, dtype=np.int32).reshape(1, 16)
CONTRACT_1_0_BLS = ROOT / "tests/fixtures/contract-1.0.0/bls.wasm"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bls")
    repo = tmp / "repo"
    add_model(repo, "simple", SIMPLE, plugin="add_sub")
    shutil.copytree(ROOT / "model_repository/simple_onnx", repo / "simple_onnx")
    add_model(repo, "pipeline", SIMPLE.replace('name: "simple"', 'name: "pipeline"'), plugin="bls")
    # The same plugin as built against contract 1.0.0, before `streaming` (1.1.0): it must keep working.
    add_model(repo, "pipeline_1_0", SIMPLE.replace('name: "simple"', 'name: "pipeline_1_0"'),
              files={"model.wasm": CONTRACT_1_0_BLS.read_bytes()})
    mode_io = tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])
    add_model(repo, "faulty", 'backend: "wasm"\n' + mode_io, plugin="faulty")
    add_model(repo, "caller", 'backend: "wasm"\n' + mode_io, plugin="bls")
    timeout = 'parameters { key: "wasm_execute_timeout_ms" value: { string_value: "300" } }\n'
    add_model(repo, "selfish", 'backend: "wasm"\n' + mode_io + timeout, plugin="bls")
    s = Server([repo], tmp).wait_live()
    yield s
    assert s.stop() == 0


def pipeline(server, chain, protocol, a=A, model="pipeline"):
    module, url = (httpclient, server.http_url) if protocol == "http" else (grpcclient, server.grpc_url)
    client = module.InferenceServerClient(url)
    inputs = add_sub_inputs(module, a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    try:
        result = client.infer(model, inputs, parameters={"chain": chain})
        return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    finally:
        client.close()


def test_a_plugin_built_against_contract_1_0_0_still_loads_and_calls_other_models(server):
    assert b"tessera:backend/host@1.0.0" in CONTRACT_1_0_BLS.read_bytes()
    total, difference = pipeline(server, "simple_onnx,simple", "grpc", model="pipeline_1_0")
    np.testing.assert_array_equal(total, 2 * A)
    np.testing.assert_array_equal(difference, 2 * np.ones_like(A))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_plugin_calls_an_onnx_model_then_a_wasm_model(server, protocol):
    total, difference = pipeline(server, "simple_onnx,simple", protocol)
    np.testing.assert_array_equal(total, 2 * A)
    np.testing.assert_array_equal(difference, 2 * np.ones_like(A))
    total, difference = pipeline(server, "simple", protocol)
    np.testing.assert_array_equal(total, A + 1)
    np.testing.assert_array_equal(difference, A - 1)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_unknown_callee_is_an_error_the_plugin_handles(server, protocol):
    with pytest.raises(InferenceServerException, match="handled: model 'nope' is not ready"):
        pipeline(server, "simple,nope", protocol)


@pytest.mark.parametrize("mode, cause", [(2, "faulty plugin asked to fail this request"), (1, "plugin trapped")])
def test_a_failing_callee_comes_back_as_an_error_and_everyone_keeps_serving(server, mode, cause):
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([mode], dtype=np.int32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("caller", [tensor], parameters={"chain": "faulty"})
    assert "handled: 'faulty' failed:" in caught.value.message() and cause in caught.value.message()
    tensor.set_data_from_numpy(np.array([0], dtype=np.int32))
    assert client.infer("caller", [tensor], parameters={"chain": "faulty"}).as_numpy("OUTPUT").tolist() == [0]
    total, _ = pipeline(server, "simple_onnx,simple", "http")
    np.testing.assert_array_equal(total, 2 * A)


def test_a_request_the_callee_refuses_is_reported_with_the_callee_s_reason(server):
    # simple wants INPUT0 and INPUT1; the caller's MODE is refused by simple's own checks.
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="handled: 'simple' failed: .*(INPUT0|MODE)"):
        client.infer("caller", [tensor], parameters={"chain": "simple"})


def test_a_model_that_calls_itself_gets_an_error_at_its_timeout_not_a_hang(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    tensor = httpclient.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], dtype=np.int32))
    # The nested call cannot get the instance its caller holds; at the caller's deadline the wait ends, and
    # the caller, out of time, is stopped.
    started = time.monotonic()
    with pytest.raises(InferenceServerException, match=r"execute timeout of 300 ms \(wasm_execute_timeout_ms\)"):
        client.infer("selfish", [tensor], parameters={"chain": "selfish"})
    assert time.monotonic() - started < 5
    assert client.infer("selfish", [tensor], parameters={"chain": "faulty"}).as_numpy("OUTPUT").tolist() == [0]
