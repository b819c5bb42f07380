"""gRPC `ModelStreamInfer` for models that answer each request once: tritonclient's sync stream
(`start_stream` / `async_stream_infer`) and aio stream (`stream_infer`), and the raw RPC where the client
would hide what is on the wire (the failed request's id). Requests of several models interleave on one
stream, each is answered once with its id and `triton_final_response`, in the order sent; a request that
fails is answered with its error and the stream goes on; a client that sends without reading holds bounded
server memory."""

import asyncio
import queue
import threading
import time

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import add_sub_inputs


def stream_results(server, calls):
    """Sends `calls` ((model, data, id) each; data None: a request missing its inputs) on one sync stream and
    returns what the callback got, in order: (result, error) pairs."""
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        for model, data, request_id in calls:
            inputs = add_sub_inputs(grpcclient, data) if data is not None else []
            client.async_stream_infer(model, inputs, request_id=request_id)
        answers = [got.get(timeout=30) for _ in calls]
        client.stop_stream()
    finally:
        client.close()
    return answers


def test_requests_of_several_models_are_answered_in_order_with_their_ids(server):
    calls = [("simple" if i % 2 else "simple_onnx", np.full((1, 16), i, dtype=np.int32), f"r{i}") for i in range(40)]
    answers = stream_results(server, calls)
    for (model, data, request_id), (result, error) in zip(calls, answers):
        assert error is None, error
        response = result.get_response()
        assert (response.id, response.model_name) == (request_id, model)
        assert response.parameters["triton_final_response"].bool_param is True
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data - data)


def test_a_failing_request_is_answered_with_its_error_and_the_stream_goes_on(server):
    ones = np.ones((1, 16), dtype=np.int32)
    answers = stream_results(server, [("simple", ones, "good"), ("no_such_model", ones, "unknown"),
                                      ("simple", None, "no_inputs"), ("simple", ones * 3, "after")])
    assert answers[0][1] is None and answers[3][1] is None
    np.testing.assert_array_equal(answers[3][0].as_numpy("OUTPUT0"), ones * 6)
    assert isinstance(answers[1][1], InferenceServerException) and "no_such_model" in answers[1][1].message()
    assert isinstance(answers[2][1], InferenceServerException) and "INPUT0" in answers[2][1].message()


def test_the_raw_stream_names_the_failed_request(server):
    """tritonclient hands a failed stream request's error to the callback without its id; the wire has it."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        requests = [service_pb2.ModelInferRequest(model_name="no_such_model", model_version="", id="lost-7")]
        (message,) = list(stub.ModelStreamInfer(iter(requests), timeout=30))
    assert "no_such_model" in message.error_message
    assert (message.infer_response.id, message.infer_response.model_name) == ("lost-7", "no_such_model")
    assert message.infer_response.parameters["triton_final_response"].bool_param is True


def test_the_aio_stream(server):
    async def run():
        client = aioclient.InferenceServerClient(server.grpc_url)
        try:
            async def requests():
                for i in range(10):
                    data = np.full((1, 16), i, dtype=np.int32)
                    yield {"model_name": "simple", "inputs": add_sub_inputs(aioclient, data), "request_id": str(i)}

            answers = []
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                answers.append((result.get_response().id, result.as_numpy("OUTPUT0")))
            return answers
        finally:
            await client.close()

    answers = asyncio.run(run())
    assert [request_id for request_id, _ in answers] == [str(i) for i in range(10)]
    for request_id, total in answers:
        np.testing.assert_array_equal(total, np.full((1, 16), 2 * int(request_id), dtype=np.int32))


def test_a_client_that_sends_without_reading_holds_bounded_memory(server):
    """512 MiB of requests on a stream whose responses are never read: the server stops reading the stream
    (HTTP/2 flow control) instead of holding them all."""

    payload = np.zeros((1, 256 * 1024 // 4), dtype=np.float32).tobytes()  # 256 KiB
    sent = threading.Event()
    count = {"sent": 0}

    def requests():
        for i in range(2048):
            count["sent"] = i
            yield service_pb2.ModelInferRequest(
                model_name="identity_fp32", id=str(i),
                inputs=[service_pb2.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[65536])],
                raw_input_contents=[payload])
        sent.set()

    before = server.rss_kib() / 1024
    channel = grpc.insecure_channel(server.grpc_url)
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        responses = stub.ModelStreamInfer(requests())  # never read
        time.sleep(5)
        grown = server.rss_kib() / 1024 - before
        assert not sent.is_set(), "the server took all 512 MiB without the client reading a response"
        assert grown < 160, f"the server grew by {grown:.0f} MiB holding an unread stream ({count['sent']} requests sent)"
        responses.cancel()
    finally:
        channel.close()
    assert server.process.poll() is None
