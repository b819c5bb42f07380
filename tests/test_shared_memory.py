"""The shared memory extension: Triton's shm example clients unmodified, registration and status with
Triton's shapes and messages over HTTP and gRPC, bounds checked against each region, a region unregistered
in the middle of a request, CUDA routes without a GPU, and client shared memory off by default."""

import shutil
import threading
import time
import uuid

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, identity_config
from test_ensembles import sleep_config
from test_triton_examples import run_example

DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


def shm_repo(root):
    add_model(root, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    shutil.copytree(ROOT / "model_repository/simple_string", root / "simple_string")
    add_model(root, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"), plugin="identity")
    add_model(root, "identity_bytes", identity_config("identity_bytes", "TYPE_STRING"), plugin="identity")
    add_model(root, "sleep", sleep_config("sleep"), plugin="sleep")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("shm")
    server = Server([shm_repo(root / "repo")], root, "--allow-client-shm=true").wait_live()
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture
def region():
    """A fresh shm object (key, handle) of 1 MiB, destroyed afterwards."""
    key = f"/tessera_test_{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region(key[1:], key, 1 << 20)
    yield key, handle
    shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("script,protocol,arguments", [
    ("simple_http_shm_client.py", "http", []),
    ("simple_grpc_shm_client.py", "grpc", []),
    ("simple_http_shm_string_client.py", "http", []),
    ("simple_grpc_shm_string_client.py", "grpc", []),
    ("reuse_infer_objects_client.py", "http", ["-i", "HTTP"]),
    ("reuse_infer_objects_client.py", "grpc", ["-i", "gRPC"]),
])
def test_tritons_shared_memory_examples_pass(server, script, protocol, arguments):
    output = run_example(script, server.http_url if protocol == "http" else server.grpc_url, *arguments)
    if script.startswith("reuse"):
        # It prints no verdict: it exits 1 on a wrong sum or difference; both passes (with and without
        # shared memory) must have run.
        assert "SHARED_MEMORY ========" in output and "NO_SHARED_MEMORY" in output, output
    else:
        assert "PASS" in output, output


def http_register(server, name, body):
    return requests.post(server.url(f"/v2/systemsharedmemory/region/{name}/register"), json=body, timeout=10)


def test_status_has_tritons_shapes_over_http_and_grpc(server, region):
    key, _ = region
    assert http_register(server, "status_r", {"key": key, "offset": 4096, "byte_size": 100}).status_code == 200
    try:
        entry = {"name": "status_r", "key": key, "offset": 4096, "byte_size": 100}
        assert entry in requests.get(server.url("/v2/systemsharedmemory/status"), timeout=10).json()
        assert requests.get(server.url("/v2/systemsharedmemory/region/status_r/status"), timeout=10).json() == [entry]
        grpc_status = grpcclient.InferenceServerClient(server.grpc_url).get_system_shared_memory_status("status_r", as_json=True)
        assert grpc_status["regions"]["status_r"] == {"name": "status_r", "key": key, "offset": "4096", "byte_size": "100"}
        missing = requests.get(server.url("/v2/systemsharedmemory/region/nothing/status"), timeout=10)
        assert missing.status_code == 404 and "Unable to find system shared memory region: 'nothing'" in missing.json()["error"]
        cuda = requests.get(server.url("/v2/cudasharedmemory/region/status_r/status"), timeout=10)
        assert cuda.status_code == 404 and "registered as system shared memory, not CUDA" in cuda.json()["error"]
    finally:
        assert requests.post(server.url("/v2/systemsharedmemory/region/status_r/unregister"), timeout=10).status_code == 200
    assert requests.get(server.url("/v2/systemsharedmemory/region/status_r/status"), timeout=10).status_code == 404


@pytest.mark.parametrize("body, says", [
    ({"offset": 0, "byte_size": 8}, "has no 'key' field"),
    ({"key": "KEY", "offset": 0}, "has no 'byte_size' field"),
    ({"key": "KEY", "byte_size": -1}, "Unable to parse 'byte_size'"),
    ({"key": "///", "byte_size": 8}, "invalid shm key '///'"),
    ({"key": "/triton_python_backend_shm_region_7", "byte_size": 8}, "reserved prefix 'triton_python_backend_shm_region_'"),
    ({"key": "/no_such_object_here", "byte_size": 8}, "Unable to open shared memory region: '/no_such_object_here'"),
    ({"key": "KEY", "byte_size": (1 << 20) + 1}, "failed to register shared memory region 'bad': invalid args"),
    ({"key": "KEY", "offset": 1 << 20, "byte_size": 1}, "invalid args"),
    ({"key": "KEY", "offset": (1 << 64) - 1, "byte_size": 2}, "invalid args"),
])
def test_a_bad_registration_is_400_with_tritons_message(server, region, body, says):
    key, _ = region
    body = {k: (key if v == "KEY" else v) for k, v in body.items()}
    refused = http_register(server, "bad", body)
    assert refused.status_code == 400 and says in refused.json()["error"], refused.text
    assert requests.get(server.url("/v2/systemsharedmemory/region/bad/status"), timeout=10).status_code == 404


def test_a_name_is_registered_once(server, region):
    key, _ = region
    assert http_register(server, "twice", {"key": key, "byte_size": 64}).status_code == 200
    try:
        again = http_register(server, "twice", {"key": key, "byte_size": 64})
        assert again.status_code == 400 and "shared memory region 'twice' already in manager" in again.json()["error"]
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.SystemSharedMemoryRegister(service_pb2.SystemSharedMemoryRegisterRequest(name="twice", key=key, byte_size=64))
            assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    finally:
        requests.post(server.url("/v2/systemsharedmemory/region/twice/unregister"), timeout=10)


def infer_identity_http(server, inputs_parameters, outputs=None):
    body = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "parameters": inputs_parameters}]}
    if outputs is not None:
        body["outputs"] = outputs
    return requests.post(server.url("/v2/models/identity_fp32/infer"), json=body, timeout=10)


@pytest.mark.parametrize("parameters, status, says", [
    ({"shared_memory_region": "bounds", "shared_memory_offset": 256, "shared_memory_byte_size": 16}, 400,
     "Invalid offset for shared memory region: 'bounds'"),
    ({"shared_memory_region": "bounds", "shared_memory_offset": 250, "shared_memory_byte_size": 16}, 400,
     "Invalid offset + byte size for shared memory region: 'bounds'"),
    ({"shared_memory_region": "bounds", "shared_memory_offset": 1, "shared_memory_byte_size": (1 << 64) - 1}, 400,
     "Integer overflow detected"),
    ({"shared_memory_region": "bounds", "shared_memory_byte_size": 12}, 400, "INPUT0"),
    ({"shared_memory_region": 7, "shared_memory_byte_size": 16}, 400, "Unable to parse 'shared_memory_region'"),
    ({"shared_memory_region": "bounds", "shared_memory_byte_size": "16"}, 400, "Unable to parse 'shared_memory_byte_size'"),
    ({"shared_memory_region": "unknown", "shared_memory_byte_size": 16}, 404, "Unable to find shared memory region: 'unknown'"),
])
def test_inputs_are_checked_against_their_region(server, region, parameters, status, says):
    key, handle = region
    shm.set_shared_memory_region(handle, [np.arange(64, dtype=np.float32)])
    assert http_register(server, "bounds", {"key": key, "byte_size": 256}).status_code == 200
    try:
        answer = infer_identity_http(server, parameters)
        assert answer.status_code == status and says in answer.json()["error"], answer.text
        good = infer_identity_http(server, {"shared_memory_region": "bounds", "shared_memory_offset": 240, "shared_memory_byte_size": 16})
        assert good.status_code == 200 and good.json()["outputs"][0]["data"] == [60.0, 61.0, 62.0, 63.0], good.text
    finally:
        requests.post(server.url("/v2/systemsharedmemory/region/bounds/unregister"), timeout=10)


def test_an_input_with_data_and_shared_memory_is_refused(server, region):
    key, _ = region
    assert http_register(server, "both", {"key": key, "byte_size": 64}).status_code == 200
    try:
        body = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4],
                            "parameters": {"shared_memory_region": "both", "shared_memory_byte_size": 16}}]}
        answer = requests.post(server.url("/v2/models/identity_fp32/infer"), json=body, timeout=10)
        assert answer.status_code == 400 and "But set 'data' 'shared_memory_region'" in answer.json()["error"], answer.text
    finally:
        requests.post(server.url("/v2/systemsharedmemory/region/both/unregister"), timeout=10)


def test_outputs_are_checked_against_their_region(server, region):
    key, handle = region
    shm.set_shared_memory_region(handle, [np.arange(4, dtype=np.float32)])
    assert http_register(server, "out", {"key": key, "byte_size": 64}).status_code == 200
    try:
        source = {"shared_memory_region": "out", "shared_memory_byte_size": 16}
        small = infer_identity_http(server, source, [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": "out", "shared_memory_offset": 32, "shared_memory_byte_size": 8}}])
        assert small.status_code == 400, small.text
        assert "for output 'OUTPUT0' (8 bytes) should be at least 16 bytes to hold the results" in small.json()["error"]
        past = infer_identity_http(server, source, [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": "out", "shared_memory_offset": 60, "shared_memory_byte_size": 16}}])
        assert past.status_code == 400 and "Invalid offset + byte size" in past.json()["error"], past.text
        both = infer_identity_http(server, source, [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": "out", "shared_memory_byte_size": 16, "binary_data": True}}])
        assert both.status_code == 400 and "can't set both 'shared_memory_region' and 'binary_data'" in both.json()["error"]
        placed = infer_identity_http(server, source, [{"name": "OUTPUT0", "parameters": {
            "shared_memory_region": "out", "shared_memory_offset": 32, "shared_memory_byte_size": 16}}])
        assert placed.status_code == 200, placed.text
        assert placed.json()["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4]}]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4], offset=32), np.arange(4))
    finally:
        requests.post(server.url("/v2/systemsharedmemory/region/out/unregister"), timeout=10)


def test_grpc_parameters_are_checked_as_triton_checks_them(server, region):
    key, handle = region
    shm.set_shared_memory_region(handle, [np.arange(4, dtype=np.float32)])
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.register_system_shared_memory("g", key, 64)
    try:
        def infer(parameters):
            tensor = service_pb2.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[4])
            for name, value in parameters.items():
                if isinstance(value, str):
                    tensor.parameters[name].string_param = value
                else:
                    tensor.parameters[name].int64_param = value
            with grpc.insecure_channel(server.grpc_url) as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                return stub.ModelInfer(service_pb2.ModelInferRequest(model_name="identity_fp32", inputs=[tensor]), timeout=10)
        for parameters, says in [
            ({"shared_memory_region": "g"}, "'shared_memory_byte_size' must be specified along with 'shared_memory_region'"),
            ({"shared_memory_offset": 0}, "'shared_memory_offset' can not be specified without 'shared_memory_region'"),
            ({"shared_memory_region": "g", "shared_memory_byte_size": "16"}, "expected int64_param"),
            ({"shared_memory_region": "g", "shared_memory_byte_size": 16, "shared_memory_offset": 64}, "Invalid offset"),
        ]:
            with pytest.raises(grpc.RpcError) as refused:
                infer(parameters)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in refused.value.details(), parameters
        answer = infer({"shared_memory_region": "g", "shared_memory_byte_size": 16})
        assert np.frombuffer(answer.raw_output_contents[0], dtype=np.float32).tolist() == [0, 1, 2, 3]
    finally:
        client.unregister_system_shared_memory("g")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sixteen_mib_round_trip_through_shared_memory(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    size = 16 << 20
    data = np.random.default_rng(7).random(size // 4, dtype=np.float32)
    key_in, key_out = f"/tessera_in_{uuid.uuid4().hex[:8]}", f"/tessera_out_{uuid.uuid4().hex[:8]}"
    handle_in = shm.create_shared_memory_region("big_in", key_in, size)
    handle_out = shm.create_shared_memory_region("big_out", key_out, size)
    try:
        shm.set_shared_memory_region(handle_in, [data])
        client.register_system_shared_memory("big_in", key_in, size)
        client.register_system_shared_memory("big_out", key_out, size)
        tensor = module.InferInput("INPUT0", [data.size], "FP32")
        tensor.set_shared_memory("big_in", size)
        output = module.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("big_out", size)
        result = client.infer("identity_fp32", [tensor], outputs=[output])
        assert result.get_output("OUTPUT0") is not None
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle_out, np.float32, [data.size]), data)
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle_in)
        shm.destroy_shared_memory_region(handle_out)


def test_a_region_unregistered_during_a_request_stays_valid_until_it_ends(server, region):
    key, handle = region
    shm.set_shared_memory_region(handle, [np.array([700], dtype=np.int32)])
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    client.register_system_shared_memory("busy", key, 64)
    tensor = httpclient.InferInput("MS", [1], "INT32")
    tensor.set_shared_memory("busy", 4)
    output = httpclient.InferRequestedOutput("OUT")
    output.set_shared_memory("busy", 4, offset=32)
    outcome = {}

    def slow_request():  # tritonclient's HTTP client belongs to the thread that made it (gevent)
        own = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
        outcome["result"] = own.infer("sleep", [tensor], outputs=[output])
        own.close()

    worker = threading.Thread(target=slow_request)
    worker.start()
    time.sleep(0.2)
    other = httpclient.InferenceServerClient(server.http_url)
    other.unregister_system_shared_memory("busy")
    assert other.get_system_shared_memory_status() == []
    worker.join(timeout=30)
    assert "result" in outcome, "the request in flight finished"
    assert shm.get_contents_as_numpy(handle, np.int32, [1], offset=32).tolist() == [700]
    with pytest.raises(InferenceServerException, match="Unable to find shared memory region: 'busy'"):
        other.infer("sleep", [tensor], outputs=[output])
    client.close()
    other.close()


def test_cuda_routes_answer_without_a_gpu(server):
    for client in (httpclient.InferenceServerClient(server.http_url), grpcclient.InferenceServerClient(server.grpc_url)):
        client.unregister_cuda_shared_memory()
        client.unregister_cuda_shared_memory("anything")
        status = client.get_cuda_shared_memory_status()
        assert status == [] or len(status.regions) == 0
        with pytest.raises(InferenceServerException, match="failed to register CUDA shared memory region: 'gpu', GPUs not supported"):
            client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)


def test_shared_memory_is_listed_as_extensions(server):
    extensions = requests.get(server.url("/v2"), timeout=10).json()["extensions"]
    assert "system_shared_memory" in extensions and "cuda_shared_memory" in extensions


def test_client_shared_memory_is_off_unless_allowed(tmp_path, region):
    key, _ = region
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    server = Server([repo], tmp_path).wait_live()
    try:
        for path, body in [("/v2/systemsharedmemory/region/r/register", {"key": key, "byte_size": 8}),
                           ("/v2/systemsharedmemory/region/r/unregister", None),
                           ("/v2/systemsharedmemory/unregister", None),
                           ("/v2/cudasharedmemory/region/r/register", {}),
                           ("/v2/cudasharedmemory/unregister", None)]:
            refused = requests.post(server.url(path), json=body, timeout=10)
            assert refused.status_code == 501 and refused.json()["error"] == DISABLED, (path, refused.text)
        assert requests.get(server.url("/v2/systemsharedmemory/status"), timeout=10).json() == []
        assert requests.get(server.url("/v2/cudasharedmemory/status"), timeout=10).json() == []
        client = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException) as refused:
            client.register_system_shared_memory("r", key, 8)
        assert refused.value.status() == "StatusCode.UNIMPLEMENTED" and DISABLED in refused.value.message()
        with pytest.raises(InferenceServerException, match="Client shared memory is disabled"):
            client.unregister_system_shared_memory()
        assert len(client.get_system_shared_memory_status().regions) == 0
    finally:
        assert server.stop() == 0
