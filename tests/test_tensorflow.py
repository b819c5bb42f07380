"""The TensorFlow backend through tritonclient, HTTP and gRPC: the seed's own repository (its `simple` config as
the seed gives it, a GraphDef made by setup with the tensorflow package) under the seed's tritonserver command
line, answering Triton's own example clients; the same model as a SavedModel; Triton's `simple_string` as a
GraphDef under its string clients; and each bad model failing alone with its reason, the library missing
included, while the server keeps serving."""

import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, add_sub_inputs, client_for
from test_triton_examples import run_example

SIMPLE_TF = ROOT / "model_repository" / "simple_tf"
# The seed's command line, less the binary's name and the repository path.
SEED_FLAGS = ("--model-control-mode=explicit", "--load-model=simple", "--log-verbose=0", "--log-info=1",
              "--log-warning=1", "--log-error=1")


def seed_config():
    """The seed's `simple/config.pbtxt`: simple_tf's config under the seed's name, without our comments."""
    lines = (SIMPLE_TF / "config.pbtxt").read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("#")).replace('"simple_tf"', '"simple"') + "\n"


def test_the_seed_repository_and_command_line(tmp_path):
    repo = tmp_path / "model"
    add_model(repo, "simple", seed_config(), files={"model.graphdef": (SIMPLE_TF / "1" / "model.graphdef").read_bytes()})
    server = Server([repo], tmp_path, *SEED_FLAGS).wait_live()
    try:
        assert requests.get(server.url("/v2/models/simple/config")).json()["platform"] == "tensorflow_graphdef"
        for script, url in (("simple_http_infer_client.py", server.http_url), ("simple_grpc_infer_client.py", server.grpc_url)):
            run_example(script, url)
    finally:
        assert server.stop() == 0, server.log()


def test_tritons_string_clients_against_a_string_graph(tmp_path):
    repo = tmp_path / "model"
    source = ROOT / "model_repository" / "simple_string_tf"
    add_model(repo, "simple_string", (source / "config.pbtxt").read_text().replace('"simple_string_tf"', '"simple_string"'),
              files={"model.graphdef": (source / "1" / "model.graphdef").read_bytes()})
    # The clients also echo strings through Triton's `simple_identity`.
    shutil.copytree(ROOT / "model_repository" / "simple_identity", repo / "simple_identity")
    server = Server([repo], tmp_path).wait_live()
    try:
        for script, url in (("simple_http_string_infer_client.py", server.http_url),
                            ("simple_grpc_string_infer_client.py", server.grpc_url)):
            run_example(script, url)
        # Bytes that are not UTF-8 cannot be a TensorFlow string here: that request fails, saying so.
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = [httpclient.InferInput(name, [1, 16], "BYTES") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.array([[b"\xff"] * 16], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="not UTF-8"):
            client.infer("simple_string", inputs)
        client.close()
    finally:
        assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def tf_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tensorflow")
    repo = tmp / "repo"
    for model in ("simple_tf", "simple_tf_savedmodel", "simple"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    config = (SIMPLE_TF / "config.pbtxt").read_text()
    graph = (SIMPLE_TF / "1" / "model.graphdef").read_bytes()

    def variant(name, text, files):
        add_model(repo, name, text.replace('"simple_tf"', f'"{name}"'), files=files)

    variant("not_a_graph", config, {"model.graphdef": b"not really a graph"})
    variant("no_graph_file", config, {})
    variant("unknown_input", config.replace('"INPUT1"', '"INPUT9"'), {"model.graphdef": graph})
    variant("wrong_type", config.replace("TYPE_INT32", "TYPE_FP32", 1), {"model.graphdef": graph})
    variant("bytes_input", config.replace("TYPE_INT32", "TYPE_STRING", 1), {"model.graphdef": graph})
    variant("bf16_input", config.replace("TYPE_INT32", "TYPE_BF16", 1), {"model.graphdef": graph})
    variant("second_output", config.replace('"OUTPUT1"', '"OUTPUT1:0"'), {"model.graphdef": graph})
    server = Server([repo], tmp, "--exit-on-error=false", "--strict-readiness=false")
    server.wait_live(timeout=60)
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(params=["http", "grpc"])
def client(request, tf_server):
    module, c = client_for(request.param, tf_server)
    yield module, c
    c.close()


@pytest.mark.parametrize("model", ["simple_tf", "simple_tf_savedmodel", "second_output"])
def test_graphdef_and_savedmodel_add_and_subtract(client, model):
    module, c = client
    rng = np.random.default_rng(4)
    a, b = rng.integers(-1000, 1000, (3, 16), dtype=np.int32), rng.integers(-1000, 1000, (3, 16), dtype=np.int32)
    inputs = add_sub_inputs(module, a)
    inputs[1].set_data_from_numpy(b)
    result = c.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    second = "OUTPUT1:0" if model == "second_output" else "OUTPUT1"
    np.testing.assert_array_equal(result.as_numpy(second), a - b)


@pytest.mark.parametrize("model, reason", [
    ("not_a_graph", "cannot load"),
    ("no_graph_file", "model.graphdef not found"),
    ("unknown_input", "input 'INPUT9' is not a tensor of the graph"),
    ("wrong_type", "input 'INPUT0' is FP32 in the config but Int32 in the graph"),
    ("bytes_input", "input 'INPUT0' is BYTES in the config but Int32 in the graph"),
    ("bf16_input", "'INPUT0' is TYPE_BF16: the TensorFlow backend here moves numeric, BOOL and BYTES tensors, not BF16"),
])
def test_a_bad_model_fails_alone_with_its_reason(tf_server, model, reason):
    index = {e["name"]: e for e in requests.post(tf_server.url("/v2/repository/index")).json()}
    assert index[model]["state"] == "UNAVAILABLE" and reason in index[model]["reason"], index[model]
    assert index["simple_tf"]["state"] == "READY" and index["simple"]["state"] == "READY"


def test_without_the_library_only_tensorflow_models_fail(tmp_path):
    repo = tmp_path / "repo"
    for model in ("simple", "simple_tf"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=false",
                    f"--backend-config=tensorflow,library-dir={tmp_path / 'nowhere'}")
    try:
        server.wait_live()
        index = {e["name"]: e for e in requests.post(server.url("/v2/repository/index")).json()}
        assert index["simple_tf"]["state"] == "UNAVAILABLE"
        assert "the TensorFlow library was not found" in index["simple_tf"]["reason"], index["simple_tf"]
        assert index["simple"]["state"] == "READY"
    finally:
        assert server.stop() == 0, server.log()
