"""Decoupled Python models with Triton's python decoupled API (`request.get_response_sender()`,
`sender.send(response, flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)`, `request.is_cancelled()`): Triton QA's
`mock_llm` unchanged (model_repository/mock_llm) streamed over gRPC and `generate_stream`, and a model that
misuses the API getting Triton's errors while the server keeps serving."""

import json
import queue
import shutil

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from conftest import ROOT, Server, add_model, tensor_config, wait_for

MISUSE = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            sender = request.get_response_sender()
            assert sender is request.get_response_sender()
            if mode == 0:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                try:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([2], np.int32))]))
                except pb_utils.TritonError as e:
                    pb_utils.Logger.log_warn(f"refused: {e.message()}")
            elif mode == 1:
                return [pb_utils.InferenceResponse([])]
            elif mode == 2:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]))
                raise ValueError("broke after one response")
            else:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("bad mode")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("python_decoupled")
    repo = tmp / "repo"
    shutil.copytree(ROOT / "model_repository/mock_llm", repo / "mock_llm")
    config = ('backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
              + tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUT", "TYPE_INT32", [1]))
    add_model(repo, "misuse", config, files={"model.py": MISUSE})
    s = Server([repo], tmp).wait_live()
    yield s
    assert s.stop() == 0


def llm_inputs(prompt, stream):
    text = grpcclient.InferInput("PROMPT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[prompt]], dtype=np.object_))
    flag = grpcclient.InferInput("STREAM", [1, 1], "BOOL")
    flag.set_data_from_numpy(np.array([[stream]], dtype=bool))
    return [text, flag]


def streamed(server, calls, count):
    """Sends `calls` ((model, inputs, id, parameters) each) on one stream; returns `count` (result, error) pairs."""
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        for model, inputs, request_id, parameters in calls:
            client.async_stream_infer(model, inputs, request_id=request_id, parameters=parameters,
                                      enable_empty_final_response=True)
        answers = [got.get(timeout=60) for _ in range(count)]
        client.stop_stream()
    finally:
        client.close()
    return answers


def final(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def test_mock_llm_streams_its_repetitions_over_grpc(server):
    answers = streamed(server, [("mock_llm", llm_inputs(b"hello", True), "llm", {"REPETITION": 3})], 4)
    assert [error for _, error in answers] == [None] * 4
    texts = [result.as_numpy("TEXT") for result, _ in answers[:3]]
    assert [t.tolist() for t in texts] == [[[b"hello"]]] * 3
    assert [final(result) for result, _ in answers] == [False, False, False, True]
    assert answers[3][0].as_numpy("TEXT") is None


def test_mock_llm_over_generate_and_generate_stream(server):
    events = requests.post(server.url("/v2/models/mock_llm/generate_stream"),
                           json={"PROMPT": "hi", "STREAM": True, "REPETITION": 2}, stream=True, timeout=60)
    assert events.status_code == 200
    data = [json.loads(line[len("data: "):]) for line in events.iter_lines(decode_unicode=True) if line]
    assert [event["TEXT"] for event in data] == ["hi", "hi"]
    once = requests.post(server.url("/v2/models/mock_llm/generate"), json={"PROMPT": "one", "STREAM": False}, timeout=60)
    assert once.status_code == 200 and once.json()["TEXT"] == "one"


def test_misusing_the_sender_gets_tritons_errors_and_the_model_keeps_serving(server):
    def mode(n):
        tensor = grpcclient.InferInput("MODE", [1], "INT32")
        tensor.set_data_from_numpy(np.array([n], np.int32))
        return [tensor]

    (first, error), = streamed(server, [("misuse", mode(0), "after_final", None)], 1)
    assert error is None and first.as_numpy("OUT").tolist() == [1] and final(first)
    wait_for(lambda: "refused: Unable to send response: the request is already complete" in server.log(),
             what="the model's log of the refused send")
    (result, error), = streamed(server, [("misuse", mode(1), "returns_list", None)], 1)
    assert result is None and "the execute function must return None" in str(error)
    (sent, none), (result, error) = streamed(server, [("misuse", mode(2), "raises", None)], 2)
    assert none is None and sent.as_numpy("OUT").tolist() == [1]
    assert result is None and "ValueError: broke after one response" in str(error)
    (result, error), = streamed(server, [("misuse", mode(3), "error_response", None)], 1)
    assert result is None and "bad mode" in str(error)
    answers = streamed(server, [("mock_llm", llm_inputs(b"still", True), "after", {"REPETITION": 1})], 2)
    assert answers[0][0].as_numpy("TEXT").tolist() == [[b"still"]]
