"""Python models (`backend: "python"`, `model.py` with a `TritonPythonModel`) on Tessera's Python runtime:
the default repository's examples (`add_sub_python`, the `tokenize` pre-processor) against their references
over HTTP and gRPC, and a test model that uses the rest of the `tessera` module under its own name
(auto_complete_config, initialize args, BLS into a Wasm model with its error handled, per-request errors,
exceptions, lists instead of numpy arrays). Broken models and a missing runtime fail that model only, with
the reason in the repository index. tests/test_python_models.py has Triton's models as users write them."""


import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from conftest import MINILM_TOKENIZER, ROOT, Server, add_model, add_sub_inputs

CALLER = '''
import json
import tessera as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "MODE", "data_type": "TYPE_INT32", "dims": [1]})
        config.add_output({"name": "SUM", "data_type": "TYPE_INT32", "dims": [16]})
        config.add_output({"name": "NOTE", "data_type": "TYPE_STRING", "dims": [1]})
        return config

    def initialize(self, args):
        self.name = args["model_name"] + ":" + args["model_version"] + ":" + args["model_instance_name"]
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_list()[0]
            if mode == 1:
                raise ValueError("asked to raise")
            if mode == 2:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("asked to refuse this request")))
                continue
            values = list(range(16))
            call = pb_utils.InferenceRequest(
                model_name="simple" if mode == 0 else "no_such_model",
                inputs=[pb_utils.Tensor("INPUT0", [values], "INT32"), pb_utils.Tensor("INPUT1", [values], "INT32")],
                requested_output_names=["OUTPUT0"],
            )
            answer = call.exec()
            if answer.has_error():
                note, total = "handled: " + answer.error().message(), [0] * 16
            else:
                note, total = self.name, pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_list()[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total), pb_utils.Tensor("NOTE", [note])]))
        return responses
'''

SENTENCES = [
    "Tessera serves Triton's models.",
    "Héllo, WORLD!! naïve café — déjà vu?",
    "unbelievably tokenisable hyperparameterisation",
    "数据 and 中文 mixed with emoji 🙂 and tabs\there",
    "",
]


@pytest.fixture(scope="module")
def python_server(tmp_path_factory, component_cache):
    tmp = tmp_path_factory.mktemp("python")
    repo = tmp / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(repo, "caller", 'backend: "python"\n', files={"model.py": CALLER.encode()})
    add_model(repo, "broken", 'backend: "python"\n', files={"model.py": b"def broken(:\n"})
    add_model(repo, "no_file", 'backend: "python"\n')
    server = Server([repo], tmp, "--exit-on-error=false", "--strict-readiness=false", cache_dir=component_cache)
    server.wait_live(timeout=600)
    yield server
    assert server.stop() == 0, server.log()


def call_caller(server, mode, module=httpclient):
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)
    tensor = module.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([mode], dtype=np.int32))
    try:
        result = client.infer("caller", [tensor])
        return result.as_numpy("SUM"), result.as_numpy("NOTE")[0].decode()
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_add_sub_python_answers_like_simple(default_server, module):
    client = module.InferenceServerClient(default_server.http_url if module is httpclient else default_server.grpc_url)
    data = np.arange(32, dtype=np.int32).reshape(2, 16)
    other = np.full((2, 16), 5, dtype=np.int32)
    inputs = add_sub_inputs(module, data)
    inputs[1].set_data_from_numpy(other)
    result = client.infer("add_sub_python", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + other)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data - other)
    client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_tokenize_equals_hugging_face_tokenizers(default_server, module):
    reference = Tokenizer.from_file(str(MINILM_TOKENIZER))
    reference.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest, as the model pads
    reference.enable_truncation(128)
    expected = reference.encode_batch(SENTENCES)
    client = module.InferenceServerClient(default_server.http_url if module is httpclient else default_server.grpc_url)
    tensor = module.InferInput("TEXT", [len(SENTENCES), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[s.encode()] for s in SENTENCES], dtype=np.object_))
    result = client.infer("tokenize", [tensor])
    client.close()
    np.testing.assert_array_equal(result.as_numpy("input_ids"), [e.ids for e in expected])
    np.testing.assert_array_equal(result.as_numpy("attention_mask"), [e.attention_mask for e in expected])
    np.testing.assert_array_equal(result.as_numpy("token_type_ids"), [e.type_ids for e in expected])


def test_tokenize_declares_its_own_inputs_and_outputs(default_server):
    config = requests.get(default_server.url("/v2/models/tokenize/config")).json()
    assert [(t["name"], t["data_type"]) for t in config["input"]] == [("TEXT", "TYPE_STRING")]
    assert [t["name"] for t in config["output"]] == ["input_ids", "attention_mask", "token_type_ids"]


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_bls_from_python_into_a_wasm_model(python_server, module):
    total, note = call_caller(python_server, 0, module)
    np.testing.assert_array_equal(total, np.arange(16) * 2)
    assert note == "caller:1:caller_0_0"


def test_a_bls_error_comes_back_for_the_model_to_handle(python_server):
    total, note = call_caller(python_server, 3)
    assert note.startswith("handled: ") and "no_such_model" in note
    np.testing.assert_array_equal(total, np.zeros(16))


def test_errors_and_exceptions_fail_only_their_request(python_server):
    with pytest.raises(InferenceServerException, match="asked to refuse this request"):
        call_caller(python_server, 2)
    with pytest.raises(InferenceServerException, match=r"ValueError: asked to raise \(at model.py:\d+\)"):
        call_caller(python_server, 1)
    assert call_caller(python_server, 0)[1] == "caller:1:caller_0_0"


def test_auto_complete_config_from_python(python_server):
    config = requests.get(python_server.url("/v2/models/caller/config")).json()
    assert [t["name"] for t in config["input"]] == ["MODE"]
    assert [(t["name"], t["data_type"]) for t in config["output"]] == [("SUM", "TYPE_INT32"), ("NOTE", "TYPE_STRING")]


def test_broken_python_models_fail_alone_with_their_reason(python_server):
    index = {e["name"]: e for e in requests.post(python_server.url("/v2/repository/index")).json()}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "SyntaxError" in index["broken"]["reason"] and "model.py, line 1" in index["broken"]["reason"]
    assert index["no_file"]["state"] == "UNAVAILABLE" and "model.py is missing" in index["no_file"]["reason"]
    assert index["caller"]["state"] == "READY" and index["simple"]["state"] == "READY"


def test_nothing_is_written_into_the_model_directory(python_server):
    caller = python_server.log_path.parent / "repo" / "caller" / "1"
    assert sorted(p.name for p in caller.iterdir()) == ["model.py"]


def test_without_the_python_runtime_python_models_fail_saying_so(tmp_path):
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(repo, "needs_runtime", 'backend: "python"\n', files={"model.py": b"class TritonPythonModel:\n    pass\n"})
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=false",
                    f"--backend-config=python,runtime-dir={tmp_path / 'nowhere'}")
    try:
        server.wait_live()
        index = {e["name"]: e for e in requests.post(server.url("/v2/repository/index")).json()}
        assert index["needs_runtime"]["state"] == "UNAVAILABLE"
        assert "lacks runtime.wasm or lib/python3.14" in index["needs_runtime"]["reason"]
        assert index["simple"]["state"] == "READY"
    finally:
        assert server.stop() == 0
