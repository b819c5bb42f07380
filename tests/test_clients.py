"""The unmodified tritonclient (HTTP, gRPC and the asyncio gRPC client) against the real server: metadata,
configuration, readiness, and inference on `simple` and on identity models of every data type, in JSON and
binary forms."""

import asyncio

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

from conftest import DTYPES

NUMPY = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}


@pytest.fixture(params=["http", "grpc"])
def protocol(request, server):
    module = httpclient if request.param == "http" else grpcclient
    url = server.http_url if request.param == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    yield module, client
    client.close()


def sample(dtype, n=7):
    rng = np.random.default_rng(42)
    if dtype == "BOOL":
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype == "BYTES":
        return np.array([b"", b"a\x00b", b"\x00", "héllo".encode(), b"x" * 300, b"", b"end"][:n], dtype=np.object_)
    info = np.iinfo(NUMPY[dtype]) if dtype[0] in "IU" else None
    if info is not None:
        return rng.integers(info.min, info.max, n, dtype=NUMPY[dtype], endpoint=True)
    return rng.standard_normal(n).astype(NUMPY[dtype])


def test_server_metadata_and_health(protocol):
    module, client = protocol
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    if module is grpcclient:
        assert metadata.name == "triton" and "binary_tensor_data" in metadata.extensions
    else:
        assert metadata["name"] == "triton" and "binary_tensor_data" in metadata["extensions"]


def test_model_metadata_config_and_ready(protocol):
    module, client = protocol
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    metadata = client.get_model_metadata("simple")
    config = client.get_model_config("simple")
    if module is grpcclient:
        assert list(metadata.versions) == ["1"]
        assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
        config = config.config
        assert config.max_batch_size == 8 and config.backend == "wasm"
        assert [o.name for o in config.output] == ["OUTPUT0", "OUTPUT1"]
    else:
        assert metadata["versions"] == ["1"]
        assert metadata["outputs"][1] == {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]}
        assert config["max_batch_size"] == 8 and config["backend"] == "wasm"
        assert config["input"][0]["data_type"] == "TYPE_INT32" and config["input"][0]["dims"] == [16]
        assert config["instance_group"][0]["kind"] == "KIND_CPU"


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("binary", [True, False])
def test_simple_add_sub(protocol, batch, binary):
    module, client = protocol
    a = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32) - a
    inputs = [module.InferInput("INPUT0", a.shape, "INT32"), module.InferInput("INPUT1", b.shape, "INT32")]
    if module is httpclient:
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    else:
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs, request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    if module is httpclient:
        assert response["id"] == "req-7" and response["model_version"] == "1"
    else:
        assert response.id == "req-7" and response.model_version == "1"


def test_requested_output_subset(protocol):
    module, client = protocol
    a = np.ones((1, 16), dtype=np.int32)
    inputs = [module.InferInput("INPUT0", a.shape, "INT32"), module.InferInput("INPUT1", a.shape, "INT32")]
    for i in inputs:
        i.set_data_from_numpy(a)
    result = client.infer("simple", inputs, outputs=[module.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), dtype=np.int32))
    assert result.as_numpy("OUTPUT0") is None


def test_no_requested_outputs_returns_all(protocol):
    module, client = protocol
    a = np.full((2, 16), 5, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", a.shape, "INT32"), module.InferInput("INPUT1", a.shape, "INT32")]
    for i in inputs:
        i.set_data_from_numpy(a)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("form", ["http-binary", "http-json", "grpc-raw"])
def test_identity_round_trip(server, dtype, form):
    """tritonclient.grpc always sends raw contents; typed gRPC contents are covered in test_bad_input."""
    data = sample(dtype)
    model = f"identity_{dtype.lower()}"
    if form.startswith("http"):
        binary = form == "http-binary"
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", data.shape, dtype)
        tensor.set_data_from_numpy(data, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    else:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("INPUT0", data.shape, dtype)
        tensor.set_data_from_numpy(data)
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]
    try:
        got = client.infer(model, [tensor], outputs=outputs).as_numpy("OUTPUT0")
    finally:
        client.close()
    if dtype == "BYTES":
        # JSON output comes back as str (KServe JSON strings), binary output as bytes.
        as_bytes = [x.encode() if isinstance(x, str) else bytes(x) for x in got.flatten()]
        assert as_bytes == list(data)
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)


def test_grpc_aio_client(server):
    async def run():
        client = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            assert await client.is_server_ready()
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = [grpcaio.InferInput("INPUT0", a.shape, "INT32"), grpcaio.InferInput("INPUT1", a.shape, "INT32")]
            for i in inputs:
                i.set_data_from_numpy(a)
            results = await asyncio.gather(*(client.infer("simple", inputs) for _ in range(20)))
            for result in results:
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
        finally:
            await client.close()

    asyncio.run(run())


def test_concurrent_http_requests_all_answered(server):
    from concurrent.futures import ThreadPoolExecutor

    def call(i):
        client = httpclient.InferenceServerClient(server.http_url)
        a = np.full((1, 16), i, dtype=np.int32)
        inputs = [httpclient.InferInput("INPUT0", a.shape, "INT32"), httpclient.InferInput("INPUT1", a.shape, "INT32")]
        for t in inputs:
            t.set_data_from_numpy(a)
        out = client.infer("simple", inputs).as_numpy("OUTPUT0")
        client.close()
        return (out == 2 * i).all()

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(call, range(64)))


def test_example_client_runs(server):
    import subprocess
    import sys

    from conftest import ROOT

    out = subprocess.run(
        [sys.executable, str(ROOT / "examples/simple_client.py"), "--http", server.http_url, "--grpc", server.grpc_url],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "tritonclient.http: [ 0  1  2  3" in out and "= [ 1  2  3" in out
    assert "tritonclient.grpc:" in out
