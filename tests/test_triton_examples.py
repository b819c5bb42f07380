"""Triton's own example clients (tests/triton_examples/, copied unmodified from tritonclient's repository), run
as a Triton user runs them, against Tessera serving the default repository: each must exit 0, and those that
print a verdict must print PASS. The model-control examples count the models in the repository (seven for
HTTP, eight for gRPC) and reload `simple` with a config override of `max_batch_size` alone, so each runs
against a repository of that many models in explicit mode, as Triton's own tests run them.

The sequence examples run twice: as they are (`simple_sequence`) and with `-d` (the dynamic-sequence models
`simple_dyna_sequence` and `simple_string_dyna_sequence`).

The shared-memory examples and `reuse_infer_objects_client.py` need `--allow-client-shm=true`; they run in
`test_shared_memory.py`."""

import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, Server
from test_pipelines import document_images

EXAMPLES = pathlib.Path(__file__).resolve().parent / "triton_examples"

# (script, protocol, extra arguments): every example that the default repository serves.
SERVED = [
    ("simple_http_infer_client.py", "http", []),
    ("simple_grpc_infer_client.py", "grpc", []),
    ("simple_http_async_infer_client.py", "http", []),
    ("simple_grpc_async_infer_client.py", "grpc", []),
    ("simple_http_aio_infer_client.py", "http", []),
    ("simple_grpc_aio_infer_client.py", "grpc", []),
    ("simple_http_health_metadata.py", "http", []),
    ("simple_grpc_health_metadata.py", "grpc", []),
    ("simple_grpc_custom_args_client.py", "grpc", []),
    ("simple_grpc_keepalive_client.py", "grpc", []),
    ("grpc_explicit_int_content_client.py", "grpc", []),
    ("grpc_explicit_int8_content_client.py", "grpc", []),
    ("grpc_explicit_byte_content_client.py", "grpc", []),
    ("simple_http_string_infer_client.py", "http", []),
    ("simple_grpc_string_infer_client.py", "grpc", []),
    ("simple_grpc_custom_repeat.py", "grpc", []),
    *((script, protocol, arguments)
      for script, protocol in (("simple_http_sequence_sync_infer_client.py", "http"),
                               ("simple_grpc_sequence_sync_infer_client.py", "grpc"),
                               ("simple_grpc_sequence_stream_infer_client.py", "grpc"),
                               ("simple_grpc_aio_sequence_stream_infer_client.py", "grpc"))
      for arguments in ([], ["-d"])),
]


def run_example(script, url, *arguments):
    """Runs one example client; fails with its output unless it exits 0 (and says PASS, where it says)."""
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "-u", url, *arguments],
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} exited with {done.returncode}:\n{output}"
    assert "FAIL" not in output and "error" not in output.lower(), output
    return output


@pytest.mark.parametrize("script,protocol,arguments", SERVED,
                         ids=[f"{s}-{p}{''.join(a)}" for s, p, a in SERVED])
def test_example_client_passes_against_the_default_repository(default_server, script, protocol, arguments):
    url = default_server.http_url if protocol == "http" else default_server.grpc_url
    run_example(script, url, *arguments)


# The models the model-control examples find in their repository: the HTTP one counts seven, the gRPC one eight.
CONTROLLED = ["simple", "simple_onnx", "simple_string", "simple_int8", "simple_identity", "identity_fp32",
              "identity_bytes", "filetype"]


@pytest.mark.parametrize("script,protocol,count", [("simple_http_model_control.py", "http", 7),
                                                   ("simple_grpc_model_control.py", "grpc", 8)])
def test_model_control_example_passes(tmp_path, script, protocol, count):
    for name in CONTROLLED[:count]:
        shutil.copytree(ROOT / "model_repository" / name, tmp_path / "repo" / name)
    server = Server([tmp_path / "repo"], tmp_path, "--model-control-mode=explicit").wait_live()
    try:
        output = run_example(script, server.http_url if protocol == "http" else server.grpc_url)
        assert "PASS: model control" in output
    finally:
        assert server.stop() == 0, server.log()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_image_examples_classify_pages_with_orientation(default_server, tmp_path, protocol):
    document_images(tmp_path)
    url = default_server.http_url if protocol == "http" else default_server.grpc_url
    output = run_example("image_client.py", url, "-i", protocol, "-m", "orientation", "-c", "2",
                         str(tmp_path / "page_90.png"))
    assert "PASS" in output and len([line for line in output.splitlines() if ") = " in line]) == 2
    output = run_example("ensemble_image_client.py", url, "-i", protocol, "-m", "orientation_ensemble", "-c", "1",
                         str(tmp_path))
    # Eight pages, one class each, labelled with the model's degrees.
    classes = [line.split(" = ")[1] for line in output.splitlines() if ") = " in line]
    assert "PASS" in output and len(classes) == 8 and set(classes) <= {"0", "90", "180", "270"}
