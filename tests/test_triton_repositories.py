"""Triton's own model repositories, served unchanged, with the example clients that call them.

- The quickstart repository of Triton's documentation (server `docs/examples/model_repository`, copied byte
  for byte into tests/triton_examples/model_repository). Triton's `fetch_models.sh` downloads the two model
  files it lacks: densenet_onnx's (DenseNet-121 from the ONNX model zoo on GitHub) and inception_onnx's (a
  TensorFlow graph from Google's storage, converted with tf2onnx); the test machines reach neither.
  densenet_onnx gets the `onnx` wheel's `light_densenet121.onnx`: the same DenseNet-121 graph, input and
  output (`data_0` [1,3,224,224] → `fc6_1` [1,1000,1,1]) with generated weights, so its answers are checked
  against ONNX Runtime on the same input rather than against ImageNet's classes. inception_onnx stays without
  a version, as a user who skipped the script has it: it must be UNAVAILABLE with the reason while the rest
  serve.
- The repository of Triton's client memory-growth test (server `qa/L0_client_memory_growth/models`):
  `custom_identity_int32` on Triton's `identity` backend, called by `memory_growth_test.py`, which knows only
  localhost:8000 and :8001. Then the identity backend's own behaviour: Triton's config checks and messages,
  echoing, and its delay parameters."""

import concurrent.futures
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import Server, add_model, skip_if_taken
from test_pipelines import document_images
from test_security import index
from test_triton_examples import EXAMPLES, run_example

QUICKSTART = EXAMPLES / "model_repository"
DENSENET = pathlib.Path(onnx.__file__).parent / "backend/test/data/light/light_densenet121.onnx"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, component_cache):
    """Tessera on a copy of the quickstart repository, densenet_onnx's model file added."""
    root = tmp_path_factory.mktemp("quickstart")
    shutil.copytree(QUICKSTART, root / "models")
    (root / "models/densenet_onnx/1").mkdir()
    shutil.copy(DENSENET, root / "models/densenet_onnx/1/model.onnx")
    server = Server([root / "models"], root, "--exit-on-error=false", cache_dir=component_cache)
    server.wait_live(timeout=600)
    yield server
    assert server.stop() == 0, server.log()


def test_the_quickstart_repository_loads_all_but_the_model_without_a_file(quickstart):
    models = index(quickstart)
    assert sorted(models) == sorted(p.name for p in QUICKSTART.iterdir())
    for name, entry in models.items():
        if name == "inception_onnx":
            assert entry["state"] == "UNAVAILABLE" and "no version directory" in entry["reason"], entry
        else:
            assert entry["state"] == "READY", entry


# (script, protocol): the example clients whose models the quickstart repository holds. The health examples
# are not among them: with inception_onnx unavailable the server is not ready (strict readiness, as Triton).
QUICKSTART_CLIENTS = [
    ("simple_http_infer_client.py", "http"),
    ("simple_grpc_infer_client.py", "grpc"),
    ("simple_http_async_infer_client.py", "http"),
    ("simple_grpc_async_infer_client.py", "grpc"),
    ("simple_http_aio_infer_client.py", "http"),
    ("simple_grpc_aio_infer_client.py", "grpc"),
    ("simple_grpc_custom_args_client.py", "grpc"),
    ("simple_grpc_keepalive_client.py", "grpc"),
    ("grpc_explicit_int_content_client.py", "grpc"),
    ("grpc_explicit_int8_content_client.py", "grpc"),
    ("grpc_explicit_byte_content_client.py", "grpc"),
    ("simple_http_string_infer_client.py", "http"),
    ("simple_grpc_string_infer_client.py", "grpc"),
    ("simple_http_sequence_sync_infer_client.py", "http"),
    ("simple_grpc_sequence_sync_infer_client.py", "grpc"),
    ("simple_grpc_sequence_stream_infer_client.py", "grpc"),
    ("simple_grpc_aio_sequence_stream_infer_client.py", "grpc"),
    ("grpc_client.py", "grpc"),
]


@pytest.mark.parametrize("script,protocol", QUICKSTART_CLIENTS, ids=[f"{s}-{p}" for s, p in QUICKSTART_CLIENTS])
def test_example_client_passes_against_the_quickstart_repository(quickstart, script, protocol):
    output = run_example(script, quickstart.http_url if protocol == "http" else quickstart.grpc_url)
    if script == "grpc_client.py":
        # It prints densenet_onnx's metadata, config and answer to a tensor of 602112 bytes.
        assert 'name: "fc6_1"' in output and "label_filename" in output and output.rstrip().endswith("PASS")


def densenet_labels():
    return (QUICKSTART / "densenet_onnx/densenet_labels.txt").read_text().splitlines()


@pytest.mark.parametrize("script,protocol", [("image_client.py", "http"), ("image_client.py", "grpc"),
                                             ("grpc_image_client.py", "grpc")])
def test_the_image_clients_classify_with_densenet(quickstart, tmp_path, script, protocol):
    image = document_images(tmp_path)[1]
    url = quickstart.http_url if protocol == "http" else quickstart.grpc_url
    arguments = ["-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION", str(image)]
    output = run_example(script, url, *(["-i", protocol] if script == "image_client.py" else []), *arguments)
    classes = [line.strip() for line in output.splitlines() if ") = " in line]
    assert "PASS" in output and len(classes) == 3, output
    labels = densenet_labels()
    for line in classes:
        score, rest = line.split(" (", 1)
        index_text, label = rest.split(") = ")
        float(score)
        assert labels[int(index_text)] == label


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_densenet_answers_as_onnx_runtime_does(quickstart, module):
    """The config's reshapes ([3,224,224] in, [1000] out around the graph's [1,3,224,224] and [1,1000,1,1])
    and its labels, against ONNX Runtime's own answer on the same image."""
    image = np.random.default_rng(7).random((3, 224, 224), dtype=np.float32)
    expected = onnxruntime.InferenceSession(str(DENSENET)).run(None, {"data_0": image[None]})[0].reshape(1000)
    url = quickstart.http_url if module is httpclient else quickstart.grpc_url
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("data_0", [3, 224, 224], "FP32")
    tensor.set_data_from_numpy(image)
    result = client.infer("densenet_onnx", [tensor], outputs=[module.InferRequestedOutput("fc6_1")])
    scores = result.as_numpy("fc6_1")
    assert scores.shape == (1000,) and np.allclose(scores, expected, atol=1e-5)
    top = client.infer("densenet_onnx", [tensor], outputs=[module.InferRequestedOutput("fc6_1", class_count=2)])
    first = top.as_numpy("fc6_1")[0].decode().split(":")
    best = int(np.argmax(expected))
    assert int(first[1]) == best and first[2] == densenet_labels()[best]


# --- Triton's identity backend -------------------------------------------------------------------------------

MEMORY_GROWTH_MODEL = EXAMPLES / "qa/custom_identity_int32"


def test_memory_growth_example_passes_on_the_identity_backend(tmp_path):
    """`memory_growth_test.py` makes a new client (a new connection) per request, as Triton's test runs it;
    Tessera's memory must not grow with them."""
    skip_if_taken([8000, 8001], "memory_growth_test.py")
    shutil.copytree(MEMORY_GROWTH_MODEL, tmp_path / "models/custom_identity_int32")
    (tmp_path / "models/custom_identity_int32/1").mkdir()
    server = Server([tmp_path / "models"], tmp_path, http_port=8000, grpc_port=8001).wait_live()
    try:
        for protocol in ("HTTP", "gRPC"):
            run_memory_growth_test(protocol, 300)
        settled = server.rss_kib()
        for protocol in ("HTTP", "gRPC"):
            run_memory_growth_test(protocol, 2000)
        assert server.rss_kib() - settled < 4096, (settled, server.rss_kib())
    finally:
        assert server.stop() == 0, server.log()


def run_memory_growth_test(protocol, repetitions):
    # It takes no URL (its ports are Triton's defaults), so it is not run through run_example.
    done = subprocess.run([sys.executable, str(EXAMPLES / "memory_growth_test.py"), "-i", protocol,
                           "-r", str(repetitions)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


IDENTITY = """
name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
        {{ name: "INPUT1" data_type: TYPE_STRING dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_STRING dims: [ 2 ] }} ]
{extra}
"""


def identity(name, extra="", **changes):
    """The two-pair identity config, with `changes` (old text: new text) made to it."""
    config = IDENTITY.format(name=name, extra=extra)
    for old, new in changes.items():
        assert old in config
        config = config.replace(old, new)
    return config


OUTPUT1 = '{ name: "OUTPUT1" data_type: TYPE_STRING dims: [ 2 ] }'

# Triton's identity backend's refusals, with its messages.
REFUSED = {
    "unpaired": (identity("unpaired", **{f",\n         {OUTPUT1}": ""}),
                 "model configuration must have equal input/output pairs"),
    "input_name": (identity("input_name", **{'"INPUT1"': '"IN1"'}),
                   "expected input name to follow INPUT<index> pattern, got 'IN1'"),
    "output_name": (identity("output_name", **{'"OUTPUT1"': '"OUT1"'}),
                    "expected output name to follow OUTPUT<index> pattern, got 'OUT1'"),
    "indices": (identity("indices", **{'"OUTPUT1"': '"OUTPUT7"'}), "expected input and output indices to match"),
    "datatype": (identity("datatype", **{'"OUTPUT0" data_type: TYPE_FP32': '"OUTPUT0" data_type: TYPE_INT32'}),
                 "expected input and output datatype to match, got TYPE_FP32 and TYPE_INT32"),
    "shape": (identity("shape", **{OUTPUT1: OUTPUT1.replace("[ 2 ]", "[ 3 ]")}),
              "expected input and output shape to match, got [2] and [3]"),
}


@pytest.fixture(scope="module")
def identities(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    add_model(root / "models", "echo", identity("echo", "dynamic_batching { }"))
    add_model(root / "models", "slow", identity("slow", """
        instance_group [ { count: 1 kind: KIND_CPU } ]
        parameters { key: "execute_delay_ms" value: { string_value: "300" } }"""))
    for name, (config, _) in REFUSED.items():
        add_model(root / "models", name, config)
    server = Server([root / "models"], root, "--exit-on-error=false").wait_live()
    yield server
    assert server.stop() == 0, server.log()


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_identity_backend_refuses_what_triton_refuses(identities, name):
    entry = index(identities)[name]
    assert entry["state"] == "UNAVAILABLE" and REFUSED[name][1] in entry["reason"], entry


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_identity_backend_echoes_each_input(identities, module):
    client = module.InferenceServerClient(identities.http_url if module is httpclient else identities.grpc_url)
    numbers = np.arange(15, dtype=np.float32).reshape(3, 5) / 7
    strings = np.array([[b"a", b"\xff\x00"], [b"", b"long" * 100], [b"c", b"d"]], dtype=np.object_)
    inputs = [module.InferInput("INPUT0", [3, 5], "FP32"), module.InferInput("INPUT1", [3, 2], "BYTES")]
    inputs[0].set_data_from_numpy(numbers)
    inputs[1].set_data_from_numpy(strings)
    result = client.infer("echo", inputs)
    assert np.array_equal(result.as_numpy("OUTPUT0"), numbers)
    assert result.as_numpy("OUTPUT1").tolist() == strings.tolist()
    only = client.infer("echo", inputs, outputs=[module.InferRequestedOutput("OUTPUT1")])
    assert only.as_numpy("OUTPUT0") is None and only.as_numpy("OUTPUT1").tolist() == strings.tolist()


def test_execute_delay_holds_the_instance(identities):
    """`execute_delay_ms: 300` on one instance: two requests at once are answered one after the other."""
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1.5]},
                       {"name": "INPUT1", "shape": [1, 2], "datatype": "BYTES", "data": ["x", "y"]}]}

    def call():
        response = requests.post(identities.url("/v2/models/slow/infer"), json=body, timeout=10)
        assert response.status_code == 200, response.text
        return time.monotonic()

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        finished = sorted(pool.map(lambda _: call(), range(2)))
    assert finished[0] - start >= 0.3 and finished[1] - start >= 0.6, (finished[0] - start, finished[1] - start)


def test_creation_delay_holds_the_load(tmp_path):
    add_model(tmp_path / "models", "late", identity(
        "late", 'parameters { key: "creation_delay_sec" value: { string_value: "1" } }'))
    server = Server([tmp_path / "models"], tmp_path, "--model-control-mode=explicit").wait_live()
    try:
        start = time.monotonic()
        response = requests.post(server.url("/v2/repository/models/late/load"), timeout=30)
        assert response.status_code == 200, response.text
        assert time.monotonic() - start >= 1.0
        assert index(server)["late"]["state"] == "READY"
    finally:
        assert server.stop() == 0, server.log()
