"""The PyTorch backend through tritonclient, HTTP and gRPC: TorchScript modules under Triton's PyTorch
conventions (inputs and outputs by `<name>__<index>`, by `forward`'s argument names, in config order, or as
one dictionary), every numeric type libtorch has, `-1` dims, batching, instance groups and the parameters;
the Silero VAD network as TorchScript agreeing with its ONNX twin; traced modules (recorded at batch 1,
served batched, their control flow frozen as tracing freezes it); and each bad model or request failing
alone, with its reason, while the server keeps serving.

The small modules here are compiled from TorchScript source by libtorch's own compiler, and traced by
libtorch's own tracer (the `torchscript` tool setup builds; Python's torch cannot be imported here, its
wheel needs the whole CUDA stack)."""

import pathlib
import shutil
import subprocess
import wave

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, SPEECH, Server, TORCHSCRIPT, add_model, client_for, tensor_config

NUMPY_TYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}


def compile_module(tmp_path, source, target, traced_shapes=(), parameters=()):
    """Compiles TorchScript `source` into `target` with libtorch, with `parameters` ({name: float32 array});
    with `traced_shapes` (one example input shape per argument of forward), traces it on them instead."""
    stem = target.parent.parent.name
    source_file = tmp_path / f"{stem}.py"
    source_file.write_text(source)
    specs = []
    for name, array in dict(parameters).items():
        raw = tmp_path / f"{stem}.{name}.bin"
        array.astype("<f4").tofile(raw)
        specs.append(f"{name}={raw}:{'x'.join(map(str, array.shape))}")
    if traced_shapes:
        shapes = ["x".join(map(str, shape)) for shape in traced_shapes]
        arguments = ["trace", source_file, target, *shapes, "--", *specs]
    else:
        arguments = ["script", source_file, target, *specs]
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(TORCHSCRIPT), *map(str, arguments)], check=True)


def torch_model(repo, tmp_path, name, source, inputs, outputs, extra="", **compile_options):
    """A PyTorch model `name` from TorchScript `source`; `inputs`/`outputs`: (name, type, dims) triples;
    `compile_options` as compile_module takes them."""
    config = f'name: "{name}"\nplatform: "pytorch_libtorch"\n{extra}\n'
    config += "".join(tensor_config("input", n, f"TYPE_{t}" if t != "BYTES" else "TYPE_STRING", d) for n, t, d in inputs)
    config += "".join(tensor_config("output", n, f"TYPE_{t}", d) for n, t, d in outputs)
    add_model(repo, name, config)
    compile_module(tmp_path, source, repo / name / "1" / "model.pt", **compile_options)


IDENTITY = "def forward(self, INPUT__0):\n    return INPUT__0\n"

# A classifier with its weights as parameters; traced at batch 1, served at any batch size.
TRACED_MLP = """
def forward(self, x):
    logits = torch.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2
    return torch.softmax(logits, -1), torch.argmax(logits, -1, keepdim=True)
"""
RNG = np.random.default_rng(7)
MLP_WEIGHTS = {"w1": RNG.normal(size=(8, 16)), "b1": RNG.normal(size=16), "w2": RNG.normal(size=(16, 3)),
               "b2": RNG.normal(size=3)}
MLP_WEIGHTS = {name: array.astype(np.float32) for name, array in MLP_WEIGHTS.items()}

# Control flow on the values: scripted, both branches stay; traced on a positive example, only that one.
BRANCHING = """
def forward(self, x):
    if bool(x.sum() > 0):
        return torch.relu(x @ self.w) * 2
    return x @ self.w - 1
"""
BRANCH_WEIGHT = {"w": np.arange(1, 9, dtype=np.float32).reshape(4, 2) / 8}


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torch")
    repo = tmp / "repo"
    for model in ("add_sub_torch", "mlp_torch", "mlp_onnx", "silero_vad_torch", "silero_vad_frame"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    for dtype in NUMPY_TYPES:
        torch_model(repo, tmp, f"identity_{dtype.lower()}", IDENTITY, [("INPUT__0", dtype, [-1])],
                    [("OUTPUT__0", dtype, [-1])], "max_batch_size: 4")
    # Bound by forward's argument names, listed in another order than forward takes them.
    torch_model(repo, tmp, "by_argument", "def forward(self, scale, offset):\n    return scale * 10 + offset\n",
                [("offset", "INT64", [2]), ("scale", "INT64", [2])], [("OUT", "INT64", [2])], "max_batch_size: 4")
    # Neither argument names nor indices: config order.
    torch_model(repo, tmp, "by_order", "def forward(self, p, q):\n    return p - q\n",
                [("FIRST", "FP32", [3]), ("SECOND", "FP32", [3])], [("DIFF", "FP32", [3])])
    torch_model(repo, tmp, "by_dict", "def forward(self, inputs: Dict[str, Tensor]):\n"
                "    return inputs['A'] * inputs['B'], inputs['A'] + inputs['B']\n",
                [("A", "FP32", [-1]), ("B", "FP32", [-1])], [("PRODUCT__0", "FP32", [-1]), ("SUM__1", "FP32", [-1])])
    # A network whose weights take 8 features, configured with 4: found on the first request.
    torch_model(repo, tmp, "wrong_dims", "def forward(self, INPUT__0):\n    return INPUT__0 @ torch.ones(8, 2)\n",
                [("INPUT__0", "FP32", [4])], [("OUTPUT__0", "FP32", [2])], "max_batch_size: 4")
    torch_model(repo, tmp, "wrong_output_type", "def forward(self, INPUT__0):\n    return INPUT__0.long()\n",
                [("INPUT__0", "FP32", [2])], [("OUTPUT__0", "FP32", [2])])
    torch_model(repo, tmp, "with_parameters", IDENTITY, [("INPUT__0", "FP32", [-1])], [("OUTPUT__0", "FP32", [-1])],
                'parameters [ { key: "INFERENCE_MODE" value: { string_value: "false" } },'
                ' { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } },'
                ' { key: "ENABLE_JIT_PROFILING" value: { string_value: "false" } },'
                ' { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } } ]')
    torch_model(repo, tmp, "batched", "def forward(self, INPUT__0):\n    return INPUT__0 * 2\n",
                [("INPUT__0", "INT32", [4])], [("OUTPUT__0", "INT32", [4])],
                "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 300000 }\n"
                "instance_group [ { kind: KIND_CPU count: 2 } ]")
    torch_model(repo, tmp, "traced_mlp", TRACED_MLP, [("INPUT__0", "FP32", [8])],
                [("OUTPUT__0", "FP32", [3]), ("OUTPUT__1", "INT64", [1])],
                "max_batch_size: 8\ndynamic_batching { }", traced_shapes=[(1, 8)], parameters=MLP_WEIGHTS)
    for name, traced_shapes in (("traced_branch", [(1, 4)]), ("scripted_branch", ())):
        torch_model(repo, tmp, name, BRANCHING, [("INPUT__0", "FP32", [4])], [("OUTPUT__0", "FP32", [2])],
                    "max_batch_size: 4", traced_shapes=traced_shapes, parameters=BRANCH_WEIGHT)
    # Broken models: each fails alone.
    torch_model(repo, tmp, "int_argument", "def forward(self, x, rate: int):\n    return x * rate\n",
                [("x", "FP32", [1]), ("rate", "INT64", [1])], [("y", "FP32", [1])])
    torch_model(repo, tmp, "too_many_inputs", IDENTITY, [("INPUT__0", "FP32", [1]), ("INPUT__1", "FP32", [1])],
                [("OUTPUT__0", "FP32", [1])])
    torch_model(repo, tmp, "bytes_input", IDENTITY, [("INPUT__0", "BYTES", [1])], [("OUTPUT__0", "FP32", [1])])
    torch_model(repo, tmp, "bad_parameter", IDENTITY, [("INPUT__0", "FP32", [1])], [("OUTPUT__0", "FP32", [1])],
                'parameters [ { key: "INFERENCE_MODE" value: { string_value: "maybe" } } ]')
    add_model(repo, "not_torchscript", 'platform: "pytorch_libtorch"\n' + tensor_config("input", "INPUT__0", "TYPE_FP32", [1])
              + tensor_config("output", "OUTPUT__0", "TYPE_FP32", [1]), files={"model.pt": b"PK\x03\x04 not a zip at all"})
    add_model(repo, "missing_file", 'backend: "pytorch"\n' + tensor_config("input", "INPUT__0", "TYPE_FP32", [1])
              + tensor_config("output", "OUTPUT__0", "TYPE_FP32", [1]))
    server = Server([repo], tmp, "--exit-on-error=false", "--strict-readiness=false")
    server.wait_live(timeout=60)
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(params=["http", "grpc"])
def client(request, torch_server):
    module, c = client_for(request.param, torch_server)
    yield module, c
    c.close()


def infer(module, client, model, arrays, outputs):
    inputs = []
    for name, array in arrays.items():
        dtype = next(k for k, v in NUMPY_TYPES.items() if v == array.dtype.type)
        tensor = module.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[module.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def test_add_sub_by_index(client):
    module, c = client
    a = np.arange(48, dtype=np.int32).reshape(3, 16)
    b = np.full((3, 16), 7, np.int32)
    total, difference = infer(module, c, "add_sub_torch", {"INPUT__1": b, "INPUT__0": a}, ["OUTPUT__1", "OUTPUT__0"])[::-1]
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)


@pytest.mark.parametrize("dtype", list(NUMPY_TYPES))
def test_every_numeric_type_with_variable_dims(client, dtype):
    module, c = client
    values = (np.arange(-3, 7) % 2 == 0) if dtype == "BOOL" else np.arange(-3, 7)
    if dtype.startswith("UINT"):
        values = np.arange(10)
    array = np.asarray(values).astype(NUMPY_TYPES[dtype]).reshape(2, 5)
    (out,) = infer(module, c, f"identity_{dtype.lower()}", {"INPUT__0": array}, ["OUTPUT__0"])
    assert out.dtype == array.dtype
    np.testing.assert_array_equal(out, array)


def test_inputs_by_argument_name_order_and_dictionary(client):
    module, c = client
    scale, offset = np.array([[1, 2]], np.int64), np.array([[3, 4]], np.int64)
    (out,) = infer(module, c, "by_argument", {"offset": offset, "scale": scale}, ["OUT"])
    np.testing.assert_array_equal(out, scale * 10 + offset)
    first, second = np.array([5, 5, 5], np.float32), np.array([1, 2, 3], np.float32)
    (diff,) = infer(module, c, "by_order", {"SECOND": second, "FIRST": first}, ["DIFF"])
    np.testing.assert_array_equal(diff, first - second)
    a, b = np.array([1.5, 2, 3], np.float32), np.array([2, 4, 8], np.float32)
    product, total = infer(module, c, "by_dict", {"A": a, "B": b}, ["PRODUCT__0", "SUM__1"])
    np.testing.assert_array_equal(product, a * b)
    np.testing.assert_array_equal(total, a + b)


def test_mlp_equals_its_onnx_twin(client):
    module, c = client
    x = np.random.default_rng(5).normal(size=(6, 8)).astype(np.float32)
    torch_probabilities, torch_class = infer(module, c, "mlp_torch", {"INPUT": x}, ["PROBABILITIES", "CLASS"])
    onnx_probabilities, onnx_class = infer(module, c, "mlp_onnx", {"INPUT": x}, ["PROBABILITIES", "CLASS"])
    np.testing.assert_allclose(torch_probabilities, onnx_probabilities, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(torch_class, onnx_class)
    assert len(set(torch_class.ravel())) > 1


def mlp_reference(x):
    logits = np.maximum(x @ MLP_WEIGHTS["w1"] + MLP_WEIGHTS["b1"], 0) @ MLP_WEIGHTS["w2"] + MLP_WEIGHTS["b2"]
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True), logits.argmax(-1)[:, None]


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_a_module_traced_at_batch_one_serves_every_batch_size(client, batch):
    module, c = client
    x = np.random.default_rng(batch).normal(size=(batch, 8)).astype(np.float32)
    probabilities, classes = infer(module, c, "traced_mlp", {"INPUT__0": x}, ["OUTPUT__0", "OUTPUT__1"])
    expected_probabilities, expected_classes = mlp_reference(x)
    np.testing.assert_allclose(probabilities, expected_probabilities, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(classes, expected_classes)


def test_tracing_froze_the_branch_its_example_took(client):
    """On a positive input both versions take the first branch; on a negative one the scripted module takes
    the second and the traced one still runs the first, which is all its graph holds."""
    module, c = client
    w = BRANCH_WEIGHT["w"]
    positive, negative = np.full((2, 4), 0.5, np.float32), np.array([[-1, -2, -3, -4], [-1, 0, 0, 0]], np.float32)
    for model in ("traced_branch", "scripted_branch"):
        (out,) = infer(module, c, model, {"INPUT__0": positive}, ["OUTPUT__0"])
        np.testing.assert_allclose(out, np.maximum(positive @ w, 0) * 2, rtol=1e-6)
    (scripted,) = infer(module, c, "scripted_branch", {"INPUT__0": negative}, ["OUTPUT__0"])
    np.testing.assert_allclose(scripted, negative @ w - 1, rtol=1e-6)
    (traced,) = infer(module, c, "traced_branch", {"INPUT__0": negative}, ["OUTPUT__0"])
    np.testing.assert_array_equal(traced, np.zeros((2, 2), np.float32))


def generated_signal(seconds=4, rate=16000):
    """Quiet noise, then a voiced sound (a 140 Hz fundamental with harmonics under a syllable-rate envelope),
    then noise again: something for the detector to change its mind about."""
    rng = np.random.default_rng(11)
    t = np.arange(seconds * rate) / rate
    voiced = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
    gate = (t > 1.0) & (t < 3.0)
    return (0.01 * rng.normal(size=t.size) + 0.3 * voiced * gate).astype(np.float32)


def recording(start_s, seconds):
    with wave.open(str(SPEECH / "sample.wav")) as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    return (frames[int(start_s * 16000):int((start_s + seconds) * 16000)] / 32768).astype(np.float32)


def vad_probabilities(module, c, model, audio):
    """Runs `model` over `audio` frame by frame, carrying the context and the state as Silero's own
    wrapper does."""
    names = {"silero_vad_torch": ("x", "output", "stateN"), "silero_vad_frame": ("input", "output", "stateN")}[model]
    state, context, found = np.zeros((2, 1, 128), np.float32), np.zeros((1, 64), np.float32), []
    for start in range(0, len(audio) - 511, 512):
        frame = np.concatenate([context, audio[None, start:start + 512]], axis=1)
        arrays = {names[0]: frame, "state": state}
        if model == "silero_vad_frame":
            arrays["sr"] = np.array([16000], np.int64)
        probability, state = infer(module, c, model, arrays, list(names[1:]))
        context = frame[:, -64:]
        found.append(float(probability[0, 0]))
    return np.array(found)


@pytest.mark.parametrize("audio", ["generated", "recording"])
def test_silero_torchscript_agrees_with_onnx(client, audio):
    module, c = client
    signal = generated_signal() if audio == "generated" else recording(5.5, 3.0)
    torch_scores = vad_probabilities(module, c, "silero_vad_torch", signal)
    onnx_scores = vad_probabilities(module, c, "silero_vad_frame", signal)
    np.testing.assert_allclose(torch_scores, onnx_scores, atol=2e-4)
    # And they say something: speech in the recording (its first turn starts at 6.69 s), silence at the start.
    if audio == "recording":
        assert torch_scores.max() > 0.8 and torch_scores[:10].max() < 0.3, torch_scores


def test_parameters_apply_and_a_bad_one_fails_the_load(client, torch_server):
    module, c = client
    x = np.array([1.5, -2], np.float32)
    (out,) = infer(module, c, "with_parameters", {"INPUT__0": x}, ["OUTPUT__0"])
    np.testing.assert_array_equal(out, x)
    message = requests.get(torch_server.url("/v2/models/bad_parameter")).json()["error"]
    assert "INFERENCE_MODE" in message and "maybe" in message


def test_requests_batch_across_two_instances(torch_server):
    client = httpclient.InferenceServerClient(torch_server.http_url, concurrency=6)
    rows = [np.full((1, 4), i, np.int32) for i in range(6)]
    pending = []
    for row in rows:
        tensor = httpclient.InferInput("INPUT__0", [1, 4], "INT32")
        tensor.set_data_from_numpy(row)
        pending.append(client.async_infer("batched", [tensor]))
    for row, request in zip(rows, pending):
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT__0"), row * 2)
    stats = client.get_inference_statistics("batched")["model_stats"][0]
    assert stats["inference_count"] == 6 and stats["execution_count"] < 6, stats
    client.close()


@pytest.mark.parametrize("model, reason", [
    ("int_argument", "An input of type 'int' was detected in the model"),
    ("too_many_inputs", "configuration expects 2 inputs, model provides 1"),
    ("bytes_input", "input 'INPUT__0' is TYPE_STRING: the PyTorch backend takes only tensors"),
    ("not_torchscript", "cannot load"),
    ("missing_file", "model.pt not found"),
])
def test_a_bad_model_fails_alone_with_its_reason(torch_server, model, reason):
    index = requests.post(torch_server.url("/v2/repository/index")).json()
    entry = next(e for e in index if e["name"] == model)
    assert entry["state"] == "UNAVAILABLE" and reason in entry["reason"], entry
    assert requests.get(torch_server.url("/v2/models/add_sub_torch/ready")).status_code == 200


@pytest.mark.parametrize("model, arrays, status, message", [
    ("wrong_dims", {"INPUT__0": np.ones((2, 4), np.float32)}, 500, "PyTorch execute failure"),
    ("wrong_output_type", {"INPUT__0": np.ones(2, np.float32)}, 400,
     "configuration expects datatype TYPE_FP32 for output 'OUTPUT__0', model provides TYPE_INT64"),
])
def test_a_bad_request_fails_alone_with_its_reason(client, model, arrays, status, message):
    module, c = client
    with pytest.raises(InferenceServerException) as failure:
        infer(module, c, model, arrays, ["OUTPUT__0"])
    assert message in failure.value.message(), failure.value.message()
    grpc_codes = {400: "StatusCode.INVALID_ARGUMENT", 500: "StatusCode.INTERNAL"}
    assert failure.value.status() == (str(status) if module is httpclient else grpc_codes[status])
    if model == "wrong_dims":
        assert "mat1 and mat2 shapes cannot be multiplied" in failure.value.message()
    a = np.ones((1, 16), np.int32)
    (total,) = infer(module, c, "add_sub_torch", {"INPUT__0": a, "INPUT__1": a}, ["OUTPUT__0"])
    np.testing.assert_array_equal(total, a * 2)


def mapped_libraries(server):
    return (pathlib.Path(f"/proc/{server.process.pid}/maps")).read_text()


def test_libtorch_is_loaded_only_with_the_first_pytorch_model(tmp_path):
    """A server that serves no PyTorch model does not carry libtorch (about 150 MB of memory)."""
    repo = tmp_path / "repo"
    for model in ("simple", "add_sub_torch"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    server = Server([repo], tmp_path, "--model-control-mode=explicit", "--load-model=simple")
    try:
        server.wait_live()
        assert "libtorch_cpu" not in mapped_libraries(server)
        assert requests.post(server.url("/v2/repository/models/add_sub_torch/load")).status_code == 200
        assert "libtorch_cpu" in mapped_libraries(server)
    finally:
        assert server.stop() == 0, server.log()


def test_without_the_library_only_pytorch_models_fail(tmp_path):
    repo = tmp_path / "repo"
    for model in ("simple", "add_sub_torch"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    missing = tmp_path / "nowhere" / "libtessera_torch.so"
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=false",
                    f"--backend-config=pytorch,library={missing}")
    try:
        server.wait_live()
        index = {e["name"]: e for e in requests.post(server.url("/v2/repository/index")).json()}
        assert index["add_sub_torch"]["state"] == "UNAVAILABLE"
        assert "cannot load the PyTorch backend library" in index["add_sub_torch"]["reason"]
        assert str(missing) in index["add_sub_torch"]["reason"]
        assert index["simple"]["state"] == "READY"
    finally:
        assert server.stop() == 0, server.log()
