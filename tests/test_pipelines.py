"""The default repository's real pipelines, each an ensemble, checked against the libraries their users would
otherwise run by hand: `embed` (tokenize -> minilm -> pool) against Hugging Face `tokenizers` and ONNX
Runtime's Python API with sentence-transformers' pooling."""

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from conftest import MINILM_TOKENIZER, ROOT

SENTENCES = [
    "Tessera serves Triton's models.",
    "Héllo, WORLD!! naïve café — déjà vu?",
    "short",
    "数据 and 中文 mixed with emoji 🙂 and tabs\there",
    "",
    # Longer than the tokenizer's 128 tokens: truncated as the tokenizer truncates.
    " ".join(f"word{i} unbelievably" for i in range(200)),
]


def reference_embeddings(sentences):
    """all-MiniLM-L6-v2 as sentence-transformers computes it, outside the server."""
    tokenizer = Tokenizer.from_file(str(MINILM_TOKENIZER))
    tokenizer.enable_padding(pad_id=0)
    tokenizer.enable_truncation(128)
    encodings = tokenizer.encode_batch(sentences)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = onnxruntime.InferenceSession(str(ROOT / "model_repository/minilm/1/model.onnx"))
    states = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                                 "token_type_ids": np.zeros_like(ids)})[0]
    mean = (states * mask[..., None]).sum(1) / np.clip(mask.sum(1, keepdims=True), 1e-9, None)
    return mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)


def embed(module, url, sentences):
    client = module.InferenceServerClient(url)
    text = module.InferInput("TEXT", [len(sentences), 1], "BYTES")
    text.set_data_from_numpy(np.array([[s.encode()] for s in sentences], dtype=np.object_))
    try:
        return client.infer("embed", [text]).as_numpy("EMBEDDING")
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_embed_equals_tokenizers_and_onnxruntime(default_server, module):
    url = default_server.http_url if module is httpclient else default_server.grpc_url
    got = embed(module, url, SENTENCES)
    assert got.shape == (len(SENTENCES), 384)
    assert np.abs(got - reference_embeddings(SENTENCES)).max() <= 1e-4
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # One sentence alone (no padding) gives the same embedding as in the batch.
    alone = embed(module, url, SENTENCES[:1])
    assert np.abs(alone[0] - got[0]).max() <= 1e-4


def test_embed_refuses_an_empty_or_oversized_batch_and_keeps_serving(default_server):
    client = httpclient.InferenceServerClient(default_server.http_url)
    for rows in (0, 9):
        text = httpclient.InferInput("TEXT", [rows, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"x"]] * rows, dtype=np.object_).reshape(rows, 1))
        with pytest.raises(InferenceServerException, match=f"batch size {rows}; model 'embed' accepts 1 to 8"):
            client.infer("embed", [text])
    client.close()
    assert embed(httpclient, default_server.http_url, ["still serving"]).shape == (1, 384)
