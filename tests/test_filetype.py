"""The `filetype` pipeline of the default repository: raw file bytes in, Magika's label and score out. The
Wasm plugin builds Magika's features and calls the `magika` ONNX model by BLS; its answers must equal the
`magika` Python package's own (`Magika().identify_bytes`) on the same files, and name the right type for a
PNG, a PDF, a Python script, a shell script and a ZIP made here."""

import io
import struct
import zipfile
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from magika import Magika

from conftest import ROOT


def png(width=48, height=32):
    """A real RGB PNG: a colour gradient, written with zlib."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + bytes(v for x in range(width) for v in (x * 5 % 256, y * 7 % 256, (x + y) % 256)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pdf():
    """A real one-page PDF with a line of text, its cross-reference table computed."""
    stream = b"BT /F1 24 Tf 72 720 Td (Tessera serves Magika through a Wasm plugin.) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = io.BytesIO(), []
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def zip_file():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("README.txt", "Files zipped by the filetype test.\n" * 20)
        z.writestr("data/numbers.csv", "\n".join(f"{i},{i * i}" for i in range(200)))
    return out.getvalue()


FILES = {
    "png": png(),
    "pdf": pdf(),
    "python": (ROOT / "scripts" / "models.py").read_bytes(),
    "shell": (ROOT / "scripts" / "dev").read_bytes(),
    "zip": zip_file(),
}
# Decided without the model, as Magika does: nothing at all, and too few bytes to be worth a call.
SHORT = {"empty": b"", "txt": b"hi!\n", "unknown": b"\xff\xfe\x00"}


def classify(module, url, files):
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("FILE", [len(files), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(files, dtype=np.object_).reshape(-1, 1))
    try:
        result = client.infer("filetype", [tensor])
        return [label.decode() for label in result.as_numpy("LABEL").ravel()], result.as_numpy("SCORE").ravel()
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_real_files_get_their_type_and_magikas_own_answer(default_server, module):
    url = default_server.http_url if module is httpclient else default_server.grpc_url
    reference = Magika()
    for expected, content in {**FILES, **SHORT}.items():
        labels, scores = classify(module, url, [content])
        own = reference.identify_bytes(content)
        assert labels == [str(own.output.label)], expected
        assert labels == [expected]
        assert scores[0] == pytest.approx(own.score, abs=1e-5), expected


def test_several_files_in_one_request_are_answered_in_order(default_server):
    contents = list(FILES.values()) + list(SHORT.values())
    labels, scores = classify(httpclient, default_server.http_url, contents)
    assert labels == list(FILES) + list(SHORT)
    assert all(0.5 <= s <= 1.0 for s in scores)


def test_the_model_calls_go_through_magikas_scheduler(default_server):
    """The plugin's BLS calls are ordinary requests to `magika`: its statistics count them."""
    import requests

    def magika_requests():
        stats = requests.get(default_server.url("/v2/models/magika/stats")).json()["model_stats"][0]
        return stats["inference_stats"]["success"]["count"]

    before = magika_requests()
    classify(httpclient, default_server.http_url, [FILES["png"], FILES["zip"], SHORT["txt"]])
    assert magika_requests() == before + 1  # one call for the two files that need the model
