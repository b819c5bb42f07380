"""Hostile and mistaken requests over raw HTTP and raw gRPC (no client library to hide a bug): each gets a
4xx / INVALID_ARGUMENT or NOT_FOUND whose message names the problem, and the server keeps serving — every
test ends by checking that a good request still succeeds. A plugin that traps fails only its own request."""

import gzip
import json
import struct

import grpc
import numpy as np
import pytest
import requests
from tritonclient.grpc import service_pb2, service_pb2_grpc

ONES = list(range(16))


def infer_body(inputs, outputs=None, **extra):
    body = {"inputs": inputs, **extra}
    if outputs is not None:
        body["outputs"] = outputs
    return body


def simple_inputs(shape=(1, 16), dtype="INT32", data=None):
    n = int(np.prod(shape))
    data = data if data is not None else list(range(n))
    return [
        {"name": "INPUT0", "shape": list(shape), "datatype": dtype, "data": data},
        {"name": "INPUT1", "shape": list(shape), "datatype": dtype, "data": data},
    ]


@pytest.fixture
def http(server):
    """POSTs to a path, returns the response; afterwards checks the server still answers a good request."""

    def post(path, body=None, data=None, headers=None):
        if body is not None:
            data = json.dumps(body).encode()
        return requests.post(server.url(path), data=data, headers=headers or {}, timeout=10)

    yield post
    good = post("/v2/models/simple/infer", infer_body(simple_inputs()))
    assert good.status_code == 200, good.text
    assert good.json()["outputs"][0]["data"] == [2 * x for x in ONES]


def assert_error(response, status, *fragments):
    assert response.status_code == status, response.text
    message = response.json()["error"]
    for fragment in fragments:
        assert fragment in message, message


def test_unknown_model(http, server):
    assert_error(http("/v2/models/nope/infer", infer_body(simple_inputs())), 404, "nope")
    assert_error(requests.get(server.url("/v2/models/nope")), 404, "nope")
    assert requests.get(server.url("/v2/models/nope/ready")).status_code == 400


def test_unknown_version(http, server):
    assert_error(http("/v2/models/simple/versions/3/infer", infer_body(simple_inputs())), 404, "simple", "3")
    assert_error(http("/v2/models/simple/versions/x/infer", infer_body(simple_inputs())), 404, "simple")
    assert requests.get(server.url("/v2/models/simple/versions/3/ready")).status_code == 400
    assert requests.get(server.url("/v2/models/simple/versions/1/ready")).status_code == 200


def test_missing_input(http):
    assert_error(http("/v2/models/simple/infer", infer_body(simple_inputs()[:1])), 400, "INPUT1")


def test_extra_input(http):
    inputs = simple_inputs() + [{"name": "EXTRA", "shape": [1], "datatype": "INT32", "data": [1]}]
    assert_error(http("/v2/models/simple/infer", infer_body(inputs)), 400, "EXTRA")


def test_wrong_datatype(http):
    inputs = simple_inputs(dtype="FP32")
    assert_error(http("/v2/models/simple/infer", infer_body(inputs)), 400, "INPUT0", "FP32", "INT32")
    inputs = simple_inputs(dtype="INT33")
    assert_error(http("/v2/models/simple/infer", infer_body(inputs)), 400, "INT33")


def test_wrong_shape(http):
    assert_error(http("/v2/models/simple/infer", infer_body(simple_inputs(shape=(1, 15)))), 400, "INPUT0", "shape", "[1, 15]")
    assert_error(http("/v2/models/simple/infer", infer_body(simple_inputs(shape=(16,)))), 400, "INPUT0")


def test_element_count_differs_from_shape(http):
    inputs = simple_inputs(data=ONES[:15])
    assert_error(http("/v2/models/simple/infer", infer_body(inputs)), 400, "INPUT0", "16 elements", "15")


def test_binary_size_differs_from_shape(http):
    header = infer_body([
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 60}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
    ])
    head = json.dumps(header).encode()
    response = http("/v2/models/simple/infer", data=head + bytes(124), headers={"Inference-Header-Content-Length": str(len(head))})
    assert_error(response, 400, "INPUT0", "64 bytes", "60")


def test_batch_larger_than_max(http):
    assert_error(http("/v2/models/simple/infer", infer_body(simple_inputs(shape=(9, 16)))), 400, "batch size 9", "8")


def test_negative_dims(http):
    assert_error(http("/v2/models/simple/infer", infer_body(simple_inputs(shape=(-1, 16), data=ONES))), 400, "negative")


def test_malformed_json(http):
    assert_error(http("/v2/models/simple/infer", data=b'{"inputs": [ {"name": '), 400, "JSON")
    assert_error(http("/v2/models/simple/infer", data=b"[1, 2, 3]"), 400, "JSON")
    assert_error(http("/v2/models/simple/infer", data=b'{"inputs": 5}'), 400, "JSON")
    assert_error(http("/v2/models/simple/infer", data=b"\xff\xfe"), 400, "JSON")


def test_json_nested_too_deep(http):
    deep = "[" * 5000 + "1" + "]" * 5000
    body = '{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": ' + deep + "}]}"
    assert_error(http("/v2/models/simple/infer", data=body.encode()), 400, "recursion")


def binary_request(sizes, payload):
    inputs = [
        {"name": f"INPUT{i}", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": size}}
        for i, size in enumerate(sizes)
    ]
    head = json.dumps(infer_body(inputs)).encode()
    return head, head + payload


def test_truncated_binary_body(http):
    head, body = binary_request([64, 64], bytes(64 + 30))
    response = http("/v2/models/simple/infer", data=body, headers={"Inference-Header-Content-Length": str(len(head))})
    assert_error(response, 400, "INPUT1", "binary_data_size 64", "30")


def test_extra_binary_bytes(http):
    head, body = binary_request([64, 64], bytes(130))
    response = http("/v2/models/simple/infer", data=body, headers={"Inference-Header-Content-Length": str(len(head))})
    assert_error(response, 400, "2 bytes")


def test_header_length_larger_than_body(http):
    head, body = binary_request([64, 64], bytes(128))
    response = http("/v2/models/simple/infer", data=body, headers={"Inference-Header-Content-Length": str(len(body) + 1)})
    assert_error(response, 400, "Inference-Header-Content-Length")
    response = http("/v2/models/simple/infer", data=body, headers={"Inference-Header-Content-Length": "lots"})
    assert_error(response, 400, "Inference-Header-Content-Length")


def test_binary_request_and_response_by_hand(http):
    a = np.arange(16, dtype=np.int32)
    head, body = binary_request([64, 64], a.tobytes() + a.tobytes())
    header = json.loads(head)
    header["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}]
    head = json.dumps(header).encode()
    response = http("/v2/models/simple/infer", data=head + a.tobytes() * 2, headers={"Inference-Header-Content-Length": str(len(head))})
    assert response.status_code == 200, response.text
    length = int(response.headers["Inference-Header-Content-Length"])
    meta = json.loads(response.content[:length])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 64
    assert meta["outputs"][1]["data"] == [0] * 16
    assert np.frombuffer(response.content[length:], dtype=np.int32).tolist() == (2 * a).tolist()


def test_gzip_and_deflate_bodies(http):
    import zlib

    body = json.dumps(infer_body(simple_inputs())).encode()
    response = http("/v2/models/simple/infer", data=gzip.compress(body), headers={"Content-Encoding": "gzip"})
    assert response.status_code == 200 and response.json()["outputs"][1]["data"] == [0] * 16
    response = http("/v2/models/simple/infer", data=zlib.compress(body), headers={"Content-Encoding": "deflate"})
    assert response.status_code == 200, response.text
    assert_error(http("/v2/models/simple/infer", data=b"not gzip", headers={"Content-Encoding": "gzip"}), 400, "decompress")
    assert_error(http("/v2/models/simple/infer", data=body, headers={"Content-Encoding": "br"}), 400, "br")


def test_gzip_bomb_is_refused(http):
    bomb = gzip.compress(b" " * (65 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 1024 * 1024
    assert_error(http("/v2/models/simple/infer", data=bomb, headers={"Content-Encoding": "gzip"}), 400, "limit")


def faulty_body(mode):
    return infer_body([{"name": "MODE", "shape": [1], "datatype": "INT32", "data": [mode]}])


def test_plugin_trap_fails_only_that_request(http, server):
    assert http("/v2/models/faulty/infer", faulty_body(0)).json()["outputs"][0]["data"] == [0]
    trapped = http("/v2/models/faulty/infer", faulty_body(1))
    assert_error(trapped, 500, "faulty", "trap")
    # The instance was re-created: the model stays ready and answers the next request.
    assert requests.get(server.url("/v2/models/faulty/ready")).status_code == 200
    assert http("/v2/models/faulty/infer", faulty_body(0)).status_code == 200
    assert_error(http("/v2/models/faulty/infer", faulty_body(2)), 500, "asked to fail")
    assert http("/v2/models/faulty/infer", faulty_body(0)).status_code == 200


def test_unknown_route_is_404_json(server):
    response = requests.get(server.url("/v2/nothing/here"))
    assert response.status_code == 404 and "error" in response.json()


# ---- raw gRPC ----------------------------------------------------------------------------------------


@pytest.fixture
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    yield stub
    good = stub.ModelInfer(grpc_simple_request())
    assert np.frombuffer(good.raw_output_contents[0], dtype=np.int32).tolist() == [2 * x for x in ONES]
    channel.close()


def grpc_simple_request(model="simple", version="", shape=(1, 16), dtype="INT32", names=("INPUT0", "INPUT1"), raw=None):
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name in names:
        tensor = request.inputs.add(name=name, datatype=dtype, shape=list(shape))
        del tensor
    a = np.arange(int(np.prod(shape)), dtype=np.int32).tobytes()
    request.raw_input_contents.extend(raw if raw is not None else [a] * len(names))
    return request


def grpc_error(call, code, *fragments):
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, caught.value.details()
    for fragment in fragments:
        assert fragment in caught.value.details(), caught.value.details()


def test_grpc_unknown_model_and_version(stub):
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(model="nope")), grpc.StatusCode.NOT_FOUND, "nope")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(version="4")), grpc.StatusCode.NOT_FOUND, "4")
    grpc_error(lambda: stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="nope")), grpc.StatusCode.NOT_FOUND, "nope")
    assert not stub.ModelReady(service_pb2.ModelReadyRequest(name="nope")).ready


def test_grpc_bad_inputs(stub):
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(names=("INPUT0",))), invalid, "INPUT1")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(names=("INPUT0", "INPUT1", "EXTRA"))), invalid, "EXTRA")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(dtype="FP32")), invalid, "FP32")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(shape=(9, 16))), invalid, "batch size 9")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(shape=(1, 15))), invalid, "shape")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(shape=(-1, 16), raw=[b"", b""])), invalid, "negative")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(raw=[bytes(64)])), invalid, "raw_input_contents")
    grpc_error(lambda: stub.ModelInfer(grpc_simple_request(raw=[bytes(60), bytes(64)])), invalid, "64 bytes")


def test_grpc_typed_contents(stub):
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(ONES)
    response = stub.ModelInfer(request)
    assert np.frombuffer(response.raw_output_contents[0], dtype=np.int32).tolist() == [2 * x for x in ONES]
    request.inputs[0].contents.int_contents.append(99)
    grpc_error(lambda: stub.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT, "16 elements", "17")

    text = service_pb2.ModelInferRequest(model_name="identity_bytes")
    tensor = text.inputs.add(name="INPUT0", datatype="BYTES", shape=[3])
    tensor.contents.bytes_contents.extend([b"", b"a\x00", b"zz"])
    raw = stub.ModelInfer(text).raw_output_contents[0]
    assert raw == struct.pack("<I", 0) + struct.pack("<I", 2) + b"a\x00" + struct.pack("<I", 2) + b"zz"


def test_grpc_plugin_trap(stub):
    def mode(m):
        request = service_pb2.ModelInferRequest(model_name="faulty")
        request.inputs.add(name="MODE", datatype="INT32", shape=[1])
        request.raw_input_contents.append(struct.pack("<i", m))
        return request

    grpc_error(lambda: stub.ModelInfer(mode(1)), grpc.StatusCode.INTERNAL, "faulty", "trap")
    assert struct.unpack("<i", stub.ModelInfer(mode(0)).raw_output_contents[0]) == (0,)


def test_grpc_health_check(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
        assert check(b"") == b"\x08\x01"  # status: SERVING


def test_bf16_binary_round_trip(http):
    # bfloat16 has no numpy type; its bits are the top half of a float32's.
    values = np.array([1.0, -2.5, 3.140625, 0.0], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    header = infer_body(
        [{"name": "INPUT0", "shape": [4], "datatype": "BF16", "parameters": {"binary_data_size": len(bits)}}],
        outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    )
    head = json.dumps(header).encode()
    response = http("/v2/models/identity_bf16/infer", data=head + bits, headers={"Inference-Header-Content-Length": str(len(head))})
    assert response.status_code == 200, response.text
    length = int(response.headers["Inference-Header-Content-Length"])
    assert json.loads(response.content[:length])["outputs"][0]["datatype"] == "BF16"
    assert response.content[length:] == bits
    as_json = http("/v2/models/identity_bf16/infer", infer_body([{"name": "INPUT0", "shape": [4], "datatype": "BF16", "data": values.tolist()}]))
    assert as_json.json()["outputs"][0]["data"] == values.tolist()


def test_an_unregistered_shared_memory_region_is_refused_not_ignored(http):
    inputs = simple_inputs()
    inputs[0]["parameters"] = {"shared_memory_region": "input0_region", "shared_memory_byte_size": 64}
    del inputs[0]["data"]
    assert_error(http("/v2/models/simple/infer", infer_body(inputs)), 404, "Unable to find shared memory region: 'input0_region'")
