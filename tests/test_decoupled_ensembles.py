"""Decoupled steps inside ensembles, as Triton runs them: each response of a decoupled step (here Triton's
`repeat_int32`, a Wasm plugin) runs the steps after it once, on that response's tensors, and each of those
runs is one response of the ensemble, which is decoupled itself (its config says so). A step that would mix
tensors of two decoupled lineages (or of one and the request's own) is refused at load with Triton's
message."""

import queue
import shutil

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from conftest import ROOT, Server, add_model, tensor_config
from test_ensembles import ensemble_config

REPEAT_IO = [("IN", "TYPE_INT32", [-1]), ("DELAY", "TYPE_UINT32", [-1]), ("WAIT", "TYPE_UINT32", [1])]
# repeat_int32, then every response's OUT through identity: OUT and IDX of each response.
REPEAT_THEN_IDENTITY = ensemble_config(
    "repeat_then_identity",
    REPEAT_IO,
    [("OUT", "TYPE_INT32", [1]), ("IDX", "TYPE_UINT32", [1])],
    [
        ("repeat_int32", {"IN": "IN", "DELAY": "DELAY", "WAIT": "WAIT"}, {"OUT": "repeated", "IDX": "IDX"}),
        ("identity_int32", {"INPUT0": "repeated"}, {"OUTPUT0": "OUT"}),
    ],
)
# A step that reads a repeat response's tensor and the request's own: refused.
MIXED = ensemble_config(
    "mixed_lineages",
    REPEAT_IO + [("OTHER", "TYPE_INT32", [1])],
    [("SUM", "TYPE_INT32", [1])],
    [
        ("repeat_int32", {"IN": "IN", "DELAY": "DELAY", "WAIT": "WAIT"}, {"OUT": "repeated"}),
        ("add_int32", {"A": "repeated", "B": "OTHER"}, {"SUM": "SUM"}),
    ],
)
ADD = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SUM", (
            pb_utils.get_input_tensor_by_name(r, "A").as_numpy() + pb_utils.get_input_tensor_by_name(r, "B").as_numpy()
        ).astype(np.int32))]) for r in requests]
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory, component_cache):
    tmp = tmp_path_factory.mktemp("decoupled_ensembles")
    repo = tmp / "repo"
    shutil.copytree(ROOT / "model_repository/repeat_int32", repo / "repeat_int32")
    identity = 'backend: "wasm"\n' + tensor_config("input", "INPUT0", "TYPE_INT32", [1]) + tensor_config(
        "output", "OUTPUT0", "TYPE_INT32", [1])
    add_model(repo, "identity_int32", identity, plugin="identity")
    add = ('backend: "python"\n' + tensor_config("input", "A", "TYPE_INT32", [1]) + tensor_config("input", "B", "TYPE_INT32", [1])
           + tensor_config("output", "SUM", "TYPE_INT32", [1]))
    add_model(repo, "add_int32", add, files={"model.py": ADD})
    add_model(repo, "repeat_then_identity", REPEAT_THEN_IDENTITY)
    add_model(repo, "mixed_lineages", MIXED)
    s = Server([repo], tmp, "--exit-on-error=false", cache_dir=component_cache).wait_live(timeout=300)
    yield s
    assert s.stop() == 0


def repeat_inputs(values):
    tensors = [grpcclient.InferInput("IN", [len(values)], "INT32"), grpcclient.InferInput("DELAY", [len(values)], "UINT32"),
               grpcclient.InferInput("WAIT", [1], "UINT32")]
    tensors[0].set_data_from_numpy(np.array(values, np.int32))
    tensors[1].set_data_from_numpy(np.zeros(len(values), np.uint32))
    tensors[2].set_data_from_numpy(np.zeros(1, np.uint32))
    return tensors


def test_each_response_of_a_decoupled_step_is_one_response_of_the_ensemble(server):
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("repeat_then_identity", repeat_inputs([7, 8, 9]), request_id="e",
                                  enable_empty_final_response=True)
        answers = [got.get(timeout=30) for _ in range(4)]
        client.async_stream_infer("repeat_then_identity", repeat_inputs([]), request_id="none",
                                  enable_empty_final_response=True)
        nothing = got.get(timeout=30)
        client.stop_stream()
    finally:
        client.close()
    assert all(error is None for _, error in answers), answers
    pairs = sorted((r.as_numpy("IDX")[0], r.as_numpy("OUT")[0]) for r, _ in answers[:3])
    assert pairs == [(0, 7), (1, 8), (2, 9)]
    final = answers[3][0].get_response()
    assert final.parameters["triton_final_response"].bool_param and answers[3][0].as_numpy("OUT") is None
    # No response at all from the decoupled step: only the final flag.
    assert nothing[1] is None and nothing[0].get_response().id == "none" and nothing[0].as_numpy("OUT") is None


def test_an_ensemble_with_a_decoupled_step_is_decoupled(server):
    config = requests.get(server.url("/v2/models/repeat_then_identity/config"), timeout=10).json()
    assert config["model_transaction_policy"]["decoupled"] is True
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]},
                       {"name": "DELAY", "shape": [1], "datatype": "UINT32", "data": [0]},
                       {"name": "WAIT", "shape": [1], "datatype": "UINT32", "data": [0]}]}
    refused = requests.post(server.url("/v2/models/repeat_then_identity/infer"), json=body, timeout=10)
    assert refused.status_code == 501, refused.text
    events = requests.post(server.url("/v2/models/repeat_then_identity/generate_stream"),
                           json={"IN": [4, 5], "DELAY": [0, 0], "WAIT": 0}, stream=True, timeout=30)
    lines = [line for line in events.iter_lines(decode_unicode=True) if line]
    assert len(lines) == 2 and all('"OUT"' in line for line in lines), lines


def test_a_step_mixing_lineages_is_refused_with_tritons_message(server):
    index = {m["name"]: m for m in requests.post(server.url("/v2/repository/index"), json={}, timeout=10).json()}
    assert index["mixed_lineages"]["state"] == "UNAVAILABLE"
    assert index["mixed_lineages"]["reason"] == (
        "in ensemble mixed_lineages, step of model 'add_int32' receives inputs originated from different decoupled models")
