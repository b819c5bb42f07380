"""Decoupled Python models with Triton's python decoupled API (`request.get_response_sender()`,
`sender.send(response, flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)`, `request.is_cancelled()`): Triton QA's
`mock_llm` unchanged (model_repository/mock_llm) streamed over gRPC and `generate_stream`, read by another
Python model through BLS `exec(decoupled=True)`, and a model that misuses the API getting Triton's errors
while the server keeps serving."""

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


COLLECT = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            model = "mock_llm" if n >= 0 else "no_such_model"
            call = pb_utils.InferenceRequest(
                model_name=model, requested_output_names=["TEXT"], parameters={"REPETITION": abs(n)},
                inputs=[pb_utils.Tensor("PROMPT", np.array([[b"ab"]], dtype=np.object_)),
                        pb_utils.Tensor("STREAM", np.array([[True]]))])
            texts, empty, errors = [], 0, []
            for response in call.exec(decoupled=True):
                if response.has_error():
                    errors.append(response.error().message())
                elif not response.output_tensors():
                    empty += 1
                else:
                    texts.append(pb_utils.get_output_tensor_by_name(response, "TEXT").as_numpy().reshape(-1)[0])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("COUNT", np.array([len(texts)], np.int32)),
                pb_utils.Tensor("EMPTY", np.array([empty], np.int32)),
                pb_utils.Tensor("TEXTS", np.array([b",".join(texts)], dtype=np.object_)),
                pb_utils.Tensor("ERRORS", np.array(["|".join(errors).encode()], dtype=np.object_))]))
        return responses
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("python_decoupled")
    repo = tmp / "repo"
    shutil.copytree(ROOT / "model_repository/mock_llm", repo / "mock_llm")
    config = ('backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
              + tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUT", "TYPE_INT32", [1]))
    add_model(repo, "misuse", config, files={"model.py": MISUSE})
    collect_io = (tensor_config("input", "N", "TYPE_INT32", [1]) + tensor_config("output", "COUNT", "TYPE_INT32", [1])
                  + tensor_config("output", "EMPTY", "TYPE_INT32", [1]) + tensor_config("output", "TEXTS", "TYPE_STRING", [1])
                  + tensor_config("output", "ERRORS", "TYPE_STRING", [1]))
    add_model(repo, "collect", 'backend: "python"\n' + collect_io, files={"model.py": COLLECT})
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


def test_bls_exec_decoupled_iterates_over_a_decoupled_models_responses(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for n in (3, 0):
            tensor = grpcclient.InferInput("N", [1], "INT32")
            tensor.set_data_from_numpy(np.array([n], np.int32))
            result = client.infer("collect", [tensor])
            # As in Triton, a final flag sent alone ends the iteration with one response without outputs.
            assert result.as_numpy("COUNT").tolist() == [n] and result.as_numpy("EMPTY").tolist() == [1]
            assert result.as_numpy("TEXTS").tolist() == [b",".join([b"ab"] * n)]
            assert result.as_numpy("ERRORS").tolist() == [b""]
        tensor.set_data_from_numpy(np.array([-1], np.int32))
        result = client.infer("collect", [tensor])
        assert result.as_numpy("COUNT").tolist() == [0]
        assert b"unknown model: 'no_such_model'" in result.as_numpy("ERRORS")[0]
    finally:
        client.close()
