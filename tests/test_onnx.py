"""The ONNX Runtime backend through tritonclient: results must equal ONNX Runtime's own Python API on the same
inputs, for the generated add/sub twin of `simple` and for the real all-MiniLM-L6-v2 model. A config that
contradicts its graph, or a missing runtime library, fails only the ONNX models, with the reason."""

import numpy as np
import onnxruntime
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tokenizers import Tokenizer

from conftest import MINILM_TOKENIZER, ROOT, Server, add_model, client_for

MINILM = ROOT / "model_repository" / "minilm" / "1" / "model.onnx"
SIMPLE_ONNX = ROOT / "model_repository" / "simple_onnx" / "1" / "model.onnx"
SENTENCES = ["eating food", "eating bread", "A man is playing a guitar on the stage tonight."]


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    module, c = client_for(request.param, server)
    yield module, c
    c.close()


def infer(module, client, model, arrays, outputs):
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, array.shape, {np.int32: "INT32", np.int64: "INT64"}[array.dtype.type])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[module.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


def test_simple_onnx_equals_onnxruntime(client):
    module, c = client
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, (5, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (5, 16), dtype=np.int32)
    got = infer(module, c, "simple_onnx", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    session = onnxruntime.InferenceSession(str(SIMPLE_ONNX), providers=["CPUExecutionProvider"])
    want = session.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(got["OUTPUT0"], want[0])
    np.testing.assert_array_equal(got["OUTPUT1"], want[1])
    np.testing.assert_array_equal(got["OUTPUT0"], a + b)


def tokenise(sentences):
    tokenizer = Tokenizer.from_file(str(MINILM_TOKENIZER))
    tokenizer.enable_padding(pad_id=0)
    encodings = tokenizer.encode_batch(sentences)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def sentence_embeddings(hidden, mask):
    summed = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return summed / np.linalg.norm(summed, axis=1, keepdims=True)


def test_minilm_equals_onnxruntime(client):
    """Tolerance 1e-4 absolute: the same graph on the same library, possibly with other thread counts."""
    module, c = client
    feeds = tokenise(SENTENCES)
    got = infer(module, c, "minilm", feeds, ["last_hidden_state"])["last_hidden_state"]
    session = onnxruntime.InferenceSession(str(MINILM), providers=["CPUExecutionProvider"])
    (want,) = session.run(["last_hidden_state"], feeds)
    assert got.shape == want.shape == (3, feeds["input_ids"].shape[1], 384)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # And the embeddings mean something: the two food sentences are closer to each other than to the guitar.
    embeddings = sentence_embeddings(got, feeds["attention_mask"])
    related, unrelated = float(embeddings[0] @ embeddings[1]), float(embeddings[0] @ embeddings[2])
    assert related > 0.6 and unrelated < 0.3, (related, unrelated)


def test_onnx_config_that_contradicts_the_graph_fails_alone(server):
    response = requests.get(server.url("/v2/models/onnx_mismatch"))
    assert response.status_code == 400
    message = response.json()["error"]
    assert "INPUT0" in message and "FP32" in message and "Int32" in message
    assert requests.get(server.url("/v2/models/simple_onnx/ready")).status_code == 200


def test_missing_onnxruntime_library_fails_only_onnx_models(tmp_path):
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    import shutil

    shutil.copytree(ROOT / "model_repository" / "simple_onnx", repo / "simple_onnx")
    server = Server([repo], tmp_path, "--exit-on-error=false", "--backend-config=onnxruntime,library=/nonexistent/libonnxruntime.so")
    try:
        server.wait_live()
        assert requests.get(server.url("/v2/models/simple/ready")).status_code == 200
        message = requests.get(server.url("/v2/models/simple_onnx")).json()["error"]
        assert "cannot load the ONNX Runtime library /nonexistent/libonnxruntime.so" in message
    finally:
        assert server.stop() == 0


def auto_repo(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    (repo / "bare" / "1").mkdir(parents=True)
    shutil.copy(SIMPLE_ONNX, repo / "bare" / "1" / "model.onnx")
    (repo / "partial" / "1").mkdir(parents=True)
    shutil.copy(SIMPLE_ONNX, repo / "partial" / "1" / "model.onnx")
    (repo / "partial" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 2\n')
    return repo


def test_auto_complete_from_the_graph(tmp_path):
    server = Server([auto_repo(tmp_path)], tmp_path).wait_live()
    try:
        bare = requests.get(server.url("/v2/models/bare/config")).json()
        assert bare["platform"] == "onnxruntime_onnx" and bare["backend"] == "onnxruntime"
        assert bare["max_batch_size"] == 4 and "dynamic_batching" in bare
        assert [(i["name"], i["data_type"], i["dims"]) for i in bare["input"]] == [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]
        assert [o["name"] for o in bare["output"]] == ["OUTPUT0", "OUTPUT1"]
        partial = requests.get(server.url("/v2/models/partial/config")).json()
        assert partial["max_batch_size"] == 2 and partial["input"][0]["dims"] == [16]
        client = httpclient.InferenceServerClient(server.http_url)
        a = np.arange(32, dtype=np.int32).reshape(2, 16)
        got = infer(httpclient, client, "bare", {"INPUT0": a, "INPUT1": a}, ["OUTPUT1"])
        np.testing.assert_array_equal(got["OUTPUT1"], np.zeros_like(a))
        client.close()
    finally:
        assert server.stop() == 0


def test_auto_complete_can_be_disabled(tmp_path):
    server = Server([auto_repo(tmp_path)], tmp_path, "--disable-auto-complete-config", "--exit-on-error=false").wait_live()
    try:
        assert "config.pbtxt: cannot read" in requests.get(server.url("/v2/models/bare")).json()["error"]
        assert "at least one output" in requests.get(server.url("/v2/models/partial")).json()["error"]
    finally:
        assert server.stop() == 0


def test_strings_fp16_and_reshape(tmp_path):
    """BYTES ↔ ONNX string tensors, FP16, and `reshape` (the client sends [4], the graph takes [2, 2])."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["TEXT"], ["TEXT_OUT"]), helper.make_node("Identity", ["HALF"], ["HALF_OUT"])],
        "types",
        [helper.make_tensor_value_info("TEXT", TensorProto.STRING, [-1]), helper.make_tensor_value_info("HALF", TensorProto.FLOAT16, [2, 2])],
        [helper.make_tensor_value_info("TEXT_OUT", TensorProto.STRING, [-1]), helper.make_tensor_value_info("HALF_OUT", TensorProto.FLOAT16, [2, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    config = """platform: "onnxruntime_onnx"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] },
        { name: "HALF" data_type: TYPE_FP16 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "HALF_OUT" data_type: TYPE_FP16 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
"""
    model_dir = add_model(tmp_path / "repo", "types", config)
    onnx.save(model, model_dir / "1" / "model.onnx")
    server = Server([tmp_path / "repo"], tmp_path).wait_live()
    try:
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            client = module.InferenceServerClient(url)
            text = np.array(["héllo", "", "wörld"], dtype=np.object_)
            half = np.array([1.5, -2.0, 0.25, 65504.0], dtype=np.float16)
            inputs = [module.InferInput("TEXT", text.shape, "BYTES"), module.InferInput("HALF", half.shape, "FP16")]
            inputs[0].set_data_from_numpy(text)
            inputs[1].set_data_from_numpy(half)
            result = client.infer("types", inputs)
            assert [x.decode() for x in result.as_numpy("TEXT_OUT")] == list(text)
            got = result.as_numpy("HALF_OUT")
            assert got.shape == (4,) and got.dtype == np.float16
            np.testing.assert_array_equal(got, half)
            client.close()
    finally:
        assert server.stop() == 0
