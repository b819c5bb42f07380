"""The classification extension, as Triton answers it: a requested output with a class count comes back as
its top classes, BYTES "value:index" or "value:index:label" (labels from the output's label_filename),
ranked row by row for a batching model, over tritonclient HTTP (JSON and binary) and gRPC, on a plain model
and on an ensemble's output."""

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from conftest import Server, add_model, tensor_config

LABELS = ["zero", "one", "", "three"]


def identity(name, max_batch_size, data_type="TYPE_FP32"):
    output = tensor_config("output", "OUTPUT0", data_type, [-1]).replace(
        "dims:", 'label_filename: "labels.txt" dims:'
    )
    return (f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: {max_batch_size}\n'
            + tensor_config("input", "INPUT0", data_type, [-1]) + output)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    repo = tmp_path_factory.mktemp("classes")
    for name, batch, data_type in (("batched", 8, "TYPE_FP32"), ("unbatched", 0, "TYPE_FP32"),
                                   ("integers", 0, "TYPE_INT64"), ("halves", 0, "TYPE_FP16")):
        model = add_model(repo, name, identity(name, batch, data_type), plugin="identity")
        (model / "labels.txt").write_text("\n".join(LABELS) + "\n")
    ensemble = identity("classify_ensemble", 8).replace('backend: "wasm"', 'platform: "ensemble"') + (
        'ensemble_scheduling { step [ { model_name: "batched" model_version: -1 '
        'input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }\n'
    )
    (add_model(repo, "classify_ensemble", ensemble) / "labels.txt").write_text("a\nb\nc\nd\n")
    server = Server([repo], tmp_path_factory.mktemp("classes-server")).wait_live()
    yield server
    assert server.stop() == 0, server.log()


def classify(module, url, model, data, count, binary=True):
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("INPUT0", list(data.shape), np_to_triton_dtype(data.dtype))
    tensor.set_data_from_numpy(data)
    if module is httpclient:
        output = module.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=count)
    else:
        output = module.InferRequestedOutput("OUTPUT0", class_count=count)
    try:
        return client.infer(model, [tensor], outputs=[output]).as_numpy("OUTPUT0")
    finally:
        client.close()


@pytest.mark.parametrize("protocol,binary", [("http", True), ("http", False), ("grpc", True)])
def test_batched_outputs_are_ranked_row_by_row_with_labels(classifier, protocol, binary):
    module = httpclient if protocol == "http" else grpcclient
    url = classifier.http_url if protocol == "http" else classifier.grpc_url
    data = np.array([[0.1, 0.7, 0.2, 0.05], [3.5, -1.0, 0.25, 9.0]], dtype=np.float32)
    classes = classify(module, url, "batched", data, 3, binary)
    assert classes.shape == (2, 3)
    assert [[c.decode() if isinstance(c, bytes) else c for c in row] for row in classes.tolist()] == [
        ["0.700000:1:one", "0.200000:2", "0.100000:0:zero"],
        ["9.000000:3:three", "3.500000:0:zero", "0.250000:2"],
    ]


def test_an_unbatched_output_is_one_list_capped_at_its_size(classifier):
    data = np.array([5, -2, 9], dtype=np.int64)
    classes = classify(grpcclient, classifier.grpc_url, "integers", data, 10)
    assert classes.shape == (3,)
    assert classes.tolist() == [b"9:2", b"5:0:zero", b"-2:1:one"]


def test_an_ensemble_output_is_ranked_with_the_ensembles_labels(classifier):
    data = np.array([[0.5, 0.25, 1.5, 0.0]], dtype=np.float32)
    classes = classify(httpclient, classifier.http_url, "classify_ensemble", data, 2)
    assert classes.tolist() == [[b"1.500000:2:c", b"0.500000:0:a"]]


def test_classification_of_a_type_triton_cannot_rank_is_refused(classifier):
    with pytest.raises(InferenceServerException, match="class result not available for output due to unsupported type 'FP16'"):
        classify(httpclient, classifier.http_url, "halves", np.ones(3, dtype=np.float16), 1)
    assert classify(httpclient, classifier.http_url, "unbatched", np.ones(2, dtype=np.float32), 1).shape == (1,)


def test_a_malformed_class_count_is_a_400_and_zero_means_none(classifier):
    body = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    for bad in ("three", -1, 1.5):
        response = requests.post(classifier.url("/v2/models/unbatched/infer"),
                                 json={**body, "outputs": [{"name": "OUTPUT0", "parameters": {"classification": bad}}]})
        assert response.status_code == 400 and "classification" in response.json()["error"], response.text
    response = requests.post(classifier.url("/v2/models/unbatched/infer"),
                             json={**body, "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}]})
    assert response.status_code == 200 and response.json()["outputs"][0]["data"] == [1.0, 2.0]
