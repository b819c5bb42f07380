"""Decoupled models (`model_transaction_policy { decoupled: true }`): a request answered with any number of
responses, then a final flag. Triton's `repeat_int32` and `square_int32` test models as Wasm plugins
(plugins/repeat, plugins/square), over tritonclient's sync gRPC stream, its aio stream, and raw HTTP
Server-Sent Events (`generate_stream`); the endpoints that answer once refuse decoupled models with Triton's
messages; a decoupled config and its plugin must agree at load; and a plugin that misbehaves
(plugins/stream_faults: no final flag, a send after it, a trap, a client that goes away, a client that stops
reading) costs only its own request, with the right error on the stream; and a plugin reads a decoupled
model's responses through BLS (plugins/stream_sum)."""

import asyncio
import json
import queue
import shutil
import time

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, tensor_config, wait_for

FAULTS_CONFIG = (
    'backend: "wasm"\nmodel_transaction_policy { decoupled: true }\n'
    + tensor_config("input", "MODE", "TYPE_INT32", [1])
    + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])
    + 'parameters { key: "wasm_execute_timeout_ms" value: { string_value: "300" } }\n'
)
SQUARE_CONFIG = (ROOT / "model_repository/square_int32/config.pbtxt").read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decoupled")
    repo = tmp / "repo"
    for model in ("repeat_int32", "square_int32", "simple"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    add_model(repo, "stream_faults", FAULTS_CONFIG, plugin="stream_faults")
    identity_io = tensor_config("input", "INPUT0", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT0", "TYPE_INT32", [1])
    add_model(repo, "identity_decoupled", 'backend: "wasm"\nmodel_transaction_policy { decoupled: true }\n' + identity_io,
              plugin="identity")
    not_decoupled = SQUARE_CONFIG.replace('name: "square_int32"', 'name: "square_not_decoupled"').replace(
        "decoupled: True", "decoupled: false")
    add_model(repo, "square_not_decoupled", not_decoupled, plugin="square")
    sum_io = (tensor_config("input", "IN", "TYPE_INT32", [1]) + tensor_config("output", "COUNT", "TYPE_INT32", [1])
              + tensor_config("output", "SUM", "TYPE_INT32", [1]))
    add_model(repo, "stream_sum", 'backend: "wasm"\n' + sum_io, plugin="stream_sum")
    s = Server([repo], tmp, "--exit-on-error=false").wait_live()
    yield s
    assert s.stop() == 0


def int32(name, values, datatype="INT32", module=grpcclient):
    tensor = module.InferInput(name, [len(values)], datatype)
    tensor.set_data_from_numpy(np.array(values, dtype=np.int32 if datatype == "INT32" else np.uint32))
    return tensor


def repeat_inputs(values, delays, wait=0):
    return [int32("IN", values), int32("DELAY", delays, "UINT32"), int32("WAIT", [wait], "UINT32")]


class Stream:
    """tritonclient's sync stream, its callback's (result, error) pairs in a queue."""

    def __init__(self, server):
        self.got = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.client.start_stream(callback=lambda result, error: self.got.put((result, error)))

    def send(self, model, inputs, request_id="", **kwargs):
        self.client.async_stream_infer(model, inputs, request_id=request_id, **kwargs)

    def take(self, count):
        return [self.got.get(timeout=30) for _ in range(count)]

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def described(result):
    """(id, final flag, OUT or OUTPUT values) of one streamed result."""
    response = result.get_response()
    final = response.parameters["triton_final_response"].bool_param
    values = next((result.as_numpy(name) for name in ("OUT", "OUTPUT") if result.as_numpy(name) is not None), None)
    return response.id, final, None if values is None else values.tolist()


def test_square_sends_n_responses_then_a_bare_final_flag_only_when_asked(server):
    stream = Stream(server)
    try:
        stream.send("square_int32", [int32("IN", [4])], "four", enable_empty_final_response=True)
        answers = stream.take(5)
        assert [error for _, error in answers] == [None] * 5
        assert [described(result) for result, _ in answers] == [("four", False, [4])] * 4 + [("four", True, None)]
        stream.send("square_int32", [int32("IN", [3])], "three")
        assert [described(result) for result, _ in stream.take(3)] == [("three", False, [3])] * 3
        # Without the flag no bare final is sent: the next message is the next request's.
        stream.send("square_int32", [int32("IN", [0])], "zero", enable_empty_final_response=True)
        assert [described(result) for result, _ in stream.take(1)] == [("zero", True, None)]
    finally:
        stream.close()


def test_repeat_answers_each_element_with_its_index_and_refuses_mismatched_delays(server):
    stream = Stream(server)
    try:
        outputs = [grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")]
        stream.client.async_stream_infer("repeat_int32", repeat_inputs([10, 11, 12], [5, 5, 5]), request_id="r",
                                         outputs=outputs)
        answers = stream.take(3)
        assert [(result.as_numpy("OUT").tolist(), result.as_numpy("IDX").tolist()) for result, _ in answers] == [
            ([10], [0]), ([11], [1]), ([12], [2])]
        stream.send("repeat_int32", repeat_inputs([1, 2, 3], [0, 0]), "bad")
        [(result, error)] = stream.take(1)
        assert result is None and "expected IN and DELAY shape to match, got [3] and [2]" in str(error)
        # The stream stays open, and only OUT comes when only OUT is asked for.
        stream.client.async_stream_infer("repeat_int32", repeat_inputs([7], [0]), request_id="after",
                                         outputs=[grpcclient.InferRequestedOutput("OUT")])
        [(result, error)] = stream.take(1)
        assert error is None and described(result) == ("after", False, [7]) and result.as_numpy("IDX") is None
    finally:
        stream.close()


def test_requests_of_decoupled_and_plain_models_interleave_on_one_stream(server):
    stream = Stream(server)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    simple_inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for tensor in simple_inputs:
        tensor.set_data_from_numpy(a)
    try:
        stream.send("square_int32", [int32("IN", [3])], "sq3", enable_empty_final_response=True)
        stream.send("simple", simple_inputs, "plain")
        stream.send("repeat_int32", repeat_inputs([5, 6], [1, 1]), "rep", enable_empty_final_response=True)
        stream.send("square_int32", [int32("IN", [2])], "sq2", enable_empty_final_response=True)
        answers = stream.take(4 + 1 + 3 + 3)
        assert all(error is None for _, error in answers)
        by_id = {}
        for result, _ in answers:
            request_id, final, values = described(result)
            by_id.setdefault(request_id, []).append((final, values))
        assert by_id["sq3"] == [(False, [3])] * 3 + [(True, None)]
        assert by_id["rep"] == [(False, [5]), (False, [6]), (True, None)]
        assert by_id["sq2"] == [(False, [2])] * 2 + [(True, None)]
        [(final, _)] = by_id["plain"]
        assert final
    finally:
        stream.close()


def test_the_aio_stream_receives_every_response(server):
    async def run():
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            async def requests_():
                for n in (2, 3):
                    yield {"model_name": "square_int32", "inputs": [int32("IN", [n], module=aioclient)],
                           "request_id": f"n{n}"}

            got = []
            async for result, error in client.stream_infer(inputs_iterator=requests_()):
                assert error is None, error
                got.append((result.get_response().id, result.as_numpy("OUT").tolist()))
            return got

    got = asyncio.run(run())
    assert sorted(got) == [("n2", [2])] * 2 + [("n3", [3])] * 3


def test_endpoints_that_answer_once_refuse_decoupled_models_as_triton(server):
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [2]}]}
    response = requests.post(server.url("/v2/models/square_int32/infer"), json=body, timeout=10)
    assert response.status_code == 501
    assert response.json() == {"error": "HTTP end point doesn't support models with decoupled transaction policy"}
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("square_int32", [int32("IN", [2])])
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "ModelInfer RPC doesn't support models with decoupled transaction policy" in refused.value.message()
    client.close()


def sse_events(server, model, body):
    """The `data:` events of a generate_stream answer, parsed, read as they arrive."""
    response = requests.post(server.url(f"/v2/models/{model}/generate_stream"), json=body, stream=True, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return [json.loads(line[len("data: "):]) for line in response.iter_lines(decode_unicode=True) if line]


def test_generate_stream_sends_each_response_as_a_server_sent_event(server):
    assert sse_events(server, "square_int32", {"IN": 3}) == [{"OUT": 3, "model_name": "square_int32", "model_version": "1"}] * 3
    events = sse_events(server, "repeat_int32", {"IN": [4, 5], "DELAY": [0, 0], "WAIT": 0, "id": "x"})
    assert [(e["OUT"], e["IDX"], e["id"]) for e in events] == [(4, 0, "x"), (5, 1, "x")]
    # A failure inside the model is an event; the stream goes on to the model's next response.
    events = sse_events(server, "stream_faults", {"MODE": 5})
    assert "the first response failed" in events[0]["error"] and events[1]["OUTPUT"] == 1
    assert "expected IN and DELAY shape to match" in sse_events(server, "repeat_int32", {"IN": [1, 2], "DELAY": [0], "WAIT": 0})[0]["error"]


def test_generate_takes_a_decoupled_model_only_when_it_answers_once(server):
    one = requests.post(server.url("/v2/models/square_int32/generate"), json={"IN": 1}, timeout=10)
    assert one.status_code == 200 and one.json() == {"OUT": 1, "model_name": "square_int32", "model_version": "1"}
    for n in (0, 3):
        many = requests.post(server.url("/v2/models/square_int32/generate"), json={"IN": n}, timeout=10)
        assert many.status_code == 500
        assert many.json()["error"].startswith("generate expects model to produce exactly 1 response")


def test_a_decoupled_config_and_its_plugin_must_agree_at_load(server):
    index = {m["name"]: m for m in requests.post(server.url("/v2/repository/index"), json={}, timeout=10).json()}
    assert index["identity_decoupled"]["state"] == "UNAVAILABLE"
    assert "does not import tessera:backend/streaming" in index["identity_decoupled"]["reason"]
    assert index["square_not_decoupled"]["state"] == "UNAVAILABLE"
    assert "model_transaction_policy { decoupled: false }" in index["square_not_decoupled"]["reason"]
    assert index["square_int32"]["state"] == "READY"


def faults(stream, mode, request_id):
    stream.send("stream_faults", [int32("MODE", [mode])], request_id, enable_empty_final_response=True)


def test_a_plugin_that_never_sends_its_final_flag_is_ended_at_its_execute_timeout(server):
    stream = Stream(server)
    try:
        for mode in (0, 4):
            started = time.monotonic()
            faults(stream, mode, f"m{mode}")
            answers = stream.take(3 if mode == 0 else 2)
            sent, (result, error) = answers[:-1], answers[-1]
            assert all(e is None for _, e in sent)
            assert result is None and "did not send the final response within its execute timeout of 300 ms" in str(error)
            assert time.monotonic() - started < 10
    finally:
        stream.close()


def test_a_send_after_final_and_a_trap_cost_only_their_own_request(server):
    stream = Stream(server)
    try:
        faults(stream, 1, "after_final")
        assert [described(r) for r, _ in stream.take(2)] == [("after_final", False, [0]), ("after_final", True, None)]
        wait_for(lambda: "send after final refused: the request is already complete" in server.log(),
                 what="the plugin's log of the refused send")
        faults(stream, 3, "trap")
        (first, none), (result, error) = stream.take(2)
        assert none is None and described(first) == ("trap", False, [0])
        assert result is None and "plugin trapped" in str(error)
        faults(stream, 5, "after_trap")
        (result, error), (last, _) = stream.take(2)
        assert "the first response failed" in str(error) and described(last) == ("after_trap", True, [1])
    finally:
        stream.close()


def test_a_sender_kept_past_execute_completes_its_request_from_a_later_call(server):
    stream = Stream(server)
    try:
        faults(stream, 6, "kept")
        # Its first response shows that it has the (one) instance: the next request runs after its call.
        assert [described(result) for result, _ in stream.take(1)] == [("kept", False, [0])]
        faults(stream, 7, "later")
        answers = sorted(described(result) for result, _ in stream.take(2))
        assert answers == [("kept", True, [6]), ("later", True, [7])]
    finally:
        stream.close()


def test_an_onnx_model_cannot_be_decoupled(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "model_repository/simple_onnx", repo / "simple_onnx")
    config = repo / "simple_onnx/config.pbtxt"
    config.write_text(config.read_text() + "\nmodel_transaction_policy { decoupled: true }\n")
    s = Server([repo], tmp_path, "--exit-on-error=false").wait_live()
    try:
        [entry] = requests.post(s.url("/v2/repository/index"), json={}, timeout=10).json()
        assert entry["state"] == "UNAVAILABLE" and "cannot serve a decoupled model" in entry["reason"], entry
    finally:
        assert s.stop() == 0


def cancelled_count(server):
    return server.log().count("client went away after")


def abandon_stream(server):
    stream = Stream(server)
    faults(stream, 2, "abandoned")
    stream.take(1)
    stream.close(cancel=True)


def test_abandoned_streams_stop_the_plugin_and_give_their_memory_back(server):
    before = cancelled_count(server)
    for _ in range(50):
        abandon_stream(server)
    wait_for(lambda: cancelled_count(server) == before + 50, what="the plugin to see every warm-up client go away")
    baseline = server.rss_kib()
    for _ in range(1000):
        abandon_stream(server)
    wait_for(lambda: cancelled_count(server) == before + 1050, timeout=60,
             what="the plugin to see every abandoned client go away")
    grown = server.rss_kib() - baseline
    assert grown < 16 * 1024, f"resident memory grew by {grown} KiB over 1000 abandoned streams"
    # And the model still serves.
    stream = Stream(server)
    try:
        stream.send("square_int32", [int32("IN", [1])], "still")
        assert described(stream.take(1)[0][0]) == ("still", False, [1])
    finally:
        stream.close()


def test_a_plugin_reads_a_decoupled_models_responses_through_bls(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for n, parameters in ((4, None), (0, None), (3, {"model": "simple_missing"})):
            if parameters:
                with pytest.raises(InferenceServerException, match="unknown model: 'simple_missing'"):
                    client.infer("stream_sum", [int32("IN", [n])], parameters=parameters)
                continue
            result = client.infer("stream_sum", [int32("IN", [n])])
            assert (result.as_numpy("COUNT").tolist(), result.as_numpy("SUM").tolist()) == ([n], [n * n])
        # A callee's error reaches the caller as an error (stream_faults takes MODE, not IN).
        with pytest.raises(InferenceServerException, match="unexpected inference input .IN. for model .stream_faults."):
            client.infer("stream_sum", [int32("IN", [1])], parameters={"model": "stream_faults"})
    finally:
        client.close()


def test_a_client_that_stops_reading_holds_the_plugin_not_the_servers_memory(server):
    """A raw stream whose responses are not read: the plugin (mode 2, up to a million responses) waits in
    `send` once the buffers are full, and is stopped at its execute timeout, instead of the server buffering
    its responses. Read afterwards, the stream holds a bounded number of them, then the timeout's error."""
    timeouts, baseline = server.log().count("ran past its execute timeout of 300 ms"), server.rss_kib()
    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = service_pb2.ModelInferRequest(model_name="stream_faults", id="unread")
    tensor = request.inputs.add(name="MODE", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(2)
    try:
        call = stub.ModelStreamInfer(iter([request]))
        wait_for(lambda: server.log().count("ran past its execute timeout of 300 ms") == timeouts + 1, timeout=30,
                 what="the plugin to be stopped at its execute timeout")
        grown = server.rss_kib() - baseline
        assert grown < 32 * 1024, f"resident memory grew by {grown} KiB for one unread stream"
        received = 0
        for message in call:
            if message.error_message:
                assert "ran past its execute timeout" in message.error_message
                break
            received += 1
        assert 0 < received < 200_000, f"the server buffered {received} unread responses"
    finally:
        channel.close()
