"""Ensembles (`platform: "ensemble"`), as Triton runs them: steps over other models by tensor name, run as
soon as their inputs exist, concurrently where independent, pruned where no requested output needs them;
validated at load time with Triton's messages; following their composing models' loads and unloads. Every
test runs the real binary over real plugins and calls it with tritonclient."""

import concurrent.futures
import json
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, add_sub_inputs, tensor_config, wait_for


def ensemble_config(name, inputs, outputs, steps, max_batch_size=0):
    """An ensemble config: `inputs`/`outputs` are (name, config type, dims); `steps` are
    (model, {model input: ensemble tensor}, {model output: ensemble tensor})."""
    text = f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
    text += "".join(tensor_config("input", n, t, d) for n, t, d in inputs)
    text += "".join(tensor_config("output", n, t, d) for n, t, d in outputs)
    text += "ensemble_scheduling {\n  step [\n"
    rendered = []
    for model, input_map, output_map in steps:
        maps = "".join(f'      input_map {{ key: "{k}" value: "{v}" }}\n' for k, v in input_map.items())
        maps += "".join(f'      output_map {{ key: "{k}" value: "{v}" }}\n' for k, v in output_map.items())
        rendered.append(f'    {{\n      model_name: "{model}"\n      model_version: -1\n{maps}    }}')
    return text + ",\n".join(rendered) + "\n  ]\n}\n"


ADD_SUB = [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]
ADD_SUB_OUT = [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])]
# simple twice: (a+b) + (a-b) = 2a and (a+b) - (a-b) = 2b.
CHAIN = ensemble_config(
    "chain",
    ADD_SUB,
    ADD_SUB_OUT,
    [
        ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "sum", "OUTPUT1": "difference"}),
        ("simple", {"INPUT0": "sum", "INPUT1": "difference"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
    ],
    max_batch_size=8,
)
MS = [("MS", "TYPE_INT32", [1])]


def sleep_config(name, extra=""):
    return (
        f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: 0\n'
        + tensor_config("input", "MS", "TYPE_INT32", [1])
        + tensor_config("output", "OUT", "TYPE_INT32", [1])
        + extra
    )


# Each broken ensemble and the message Triton gives for it (core's model_config_utils.cc and
# ensemble_utils.cc), as the repository index must show it.
BROKEN = {
    "bad_missing_model": (
        ensemble_config("bad_missing_model", ADD_SUB, ADD_SUB_OUT, [
            ("ghost", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "ensemble 'bad_missing_model' depends on 'ghost' which has no loaded version.",
    ),
    "bad_unmapped_output": (
        ensemble_config("bad_unmapped_output", ADD_SUB, ADD_SUB_OUT + [("EXTRA", "TYPE_INT32", [16])], [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "ensemble output 'EXTRA' for ensemble bad_unmapped_output' is not used",
    ),
    "bad_produced_twice": (
        ensemble_config("bad_produced_twice", ADD_SUB, ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "spare"}),
        ], 8),
        "ensemble tensor 'OUTPUT0' can appear in an output map only once for ensemble 'bad_produced_twice' step 1",
    ),
    "bad_cycle": (
        ensemble_config("bad_cycle", ADD_SUB, ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "loop"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
            ("simple", {"INPUT0": "OUTPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "loop", "OUTPUT1": "unused"}),
        ], 8),
        "output 'OUTPUT0' for ensemble 'bad_cycle' is not written",
    ),
    "bad_unconnected": (
        ensemble_config("bad_unconnected", ADD_SUB[:1], ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "ghost_tensor"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "output 'OUTPUT0' for ensemble 'bad_unconnected' is not written: at least one of its depending tensors, "
        "'ghost_tensor', is not connected",
    ),
    "bad_data_type": (
        ensemble_config("bad_data_type", [("INPUT0", "TYPE_FP32", [16]), ADD_SUB[1]], ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "in ensemble bad_data_type, ensemble tensor INPUT0: inconsistent data type: TYPE_FP32 is inferred from "
        "model bad_data_type while TYPE_INT32 is inferred from model simple",
    ),
    "bad_shape": (
        ensemble_config("bad_shape", [("INPUT0", "TYPE_INT32", [8]), ADD_SUB[1]], ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "in ensemble bad_shape, ensemble tensor INPUT0: inconsistent shape: [-1,8] is inferred from model "
        "bad_shape while [-1,16] is inferred from model simple",
    ),
    "bad_batch_size": (
        ensemble_config("bad_batch_size", ADD_SUB, ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 16),
        "ensemble bad_batch_size allows maximum batch size 16, but it contains model simple which only allows "
        "maximum batch size to be 8",
    ),
    "bad_step_input": (
        ensemble_config("bad_step_input", ADD_SUB, ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1", "INPUT7": "INPUT1"},
             {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "in ensemble bad_step_input, ensemble tensor INPUT1 is mapping to non-existing input INPUT7 in model simple",
    ),
    "bad_unmapped_input": (
        ensemble_config("bad_unmapped_input", ADD_SUB[:1], ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8),
        "in ensemble bad_unmapped_input, input INPUT1 in model simple is not mapped to any ensemble tensors",
    ),
    "bad_instance_group": (
        CHAIN.replace('name: "chain"', 'name: "bad_instance_group"') + "instance_group [ { count: 2 } ]\n",
        "instance group should not be specified for ensemble 'bad_instance_group'",
    ),
}


def ensemble_repository(root):
    """The composing models (simple, two sleepers, faulty, identity_bytes) and the ensembles over them."""
    add_model(root, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(root, "chain", CHAIN)
    for sleeper in ("sleep_a", "sleep_b"):
        add_model(root, sleeper, sleep_config(sleeper), plugin="sleep")
    add_model(root, "diamond", ensemble_config(
        "diamond", MS, [("A", "TYPE_INT32", [1]), ("B", "TYPE_INT32", [1])],
        [("sleep_a", {"MS": "MS"}, {"OUT": "A"}), ("sleep_b", {"MS": "MS"}, {"OUT": "B"})],
    ))
    add_model(root, "faulty", 'backend: "wasm"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1])
              + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]), plugin="faulty")
    add_model(root, "through_faulty", ensemble_config(
        "through_faulty", [("MODE", "TYPE_INT32", [1])], [("OUTPUT", "TYPE_INT32", [1])],
        [("faulty", {"MODE": "MODE"}, {"OUTPUT": "OUTPUT"})],
    ))
    add_model(root, "identity_bytes", 'name: "identity_bytes"\nbackend: "wasm"\nmax_batch_size: 0\n'
              + tensor_config("input", "INPUT0", "TYPE_STRING", [-1])
              + tensor_config("output", "OUTPUT0", "TYPE_STRING", [-1]), plugin="identity")
    add_model(root, "bytes_twice", ensemble_config(
        "bytes_twice", [("INPUT0", "TYPE_STRING", [-1])], [("OUTPUT0", "TYPE_STRING", [-1])],
        [("identity_bytes", {"INPUT0": "INPUT0"}, {"OUTPUT0": "middle"}),
         ("identity_bytes", {"INPUT0": "middle"}, {"OUTPUT0": "OUTPUT0"})],
    ))
    for name, (config, _) in BROKEN.items():
        add_model(root, name, config)
    return root


@pytest.fixture(scope="module")
def ensemble_server(tmp_path_factory):
    repo = ensemble_repository(tmp_path_factory.mktemp("ensembles"))
    server = Server([repo], tmp_path_factory.mktemp("ensemble-server"), "--exit-on-error=false",
                    "--strict-readiness=false")
    server.wait_live()
    yield server
    assert server.stop() == 0, server.log()


def index_of(server):
    return {entry["name"]: entry for entry in requests.post(server.url("/v2/repository/index"), json={}).json()}


def statistics(server, model):
    stats = requests.get(server.url(f"/v2/models/{model}/stats")).json()["model_stats"]
    return stats[0] if stats else None


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_chain_runs_its_steps_in_order(ensemble_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = ensemble_server.http_url if protocol == "http" else ensemble_server.grpc_url
    client = module.InferenceServerClient(url)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    inputs = add_sub_inputs(module, a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("chain", inputs, request_id="chain-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)
    response = result.get_response()
    assert (response["id"] if protocol == "http" else response.id) == "chain-7"
    metadata = client.get_model_metadata("chain")
    platform = metadata["platform"] if protocol == "http" else metadata.platform
    assert platform == "ensemble"
    client.close()


def test_the_ensemble_and_each_step_count_as_triton_counts_them(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    before_simple = statistics(ensemble_server, "simple")
    before_chain = statistics(ensemble_server, "chain")
    data = np.ones((3, 16), dtype=np.int32)
    for _ in range(4):
        client.infer("chain", add_sub_inputs(httpclient, data))
    simple, chain = statistics(ensemble_server, "simple"), statistics(ensemble_server, "chain")
    # Each ensemble request of batch 3 is one execution of 3 inferences of the ensemble and two requests
    # (two executions, six inferences) of its composing model.
    assert int(chain["inference_stats"]["success"]["count"]) - int(before_chain["inference_stats"]["success"]["count"]) == 4
    assert chain["execution_count"] - before_chain["execution_count"] == 4
    assert chain["inference_count"] - before_chain["inference_count"] == 12
    assert int(simple["inference_stats"]["success"]["count"]) - int(before_simple["inference_stats"]["success"]["count"]) == 8
    assert simple["execution_count"] - before_simple["execution_count"] == 8
    assert simple["inference_count"] - before_simple["inference_count"] == 24
    assert any(b["batch_size"] == 3 for b in chain["batch_stats"])
    client.close()


def test_independent_steps_run_at_the_same_time(ensemble_server):
    client = grpcclient.InferenceServerClient(ensemble_server.grpc_url)
    ms = grpcclient.InferInput("MS", [1], "INT32")
    ms.set_data_from_numpy(np.array([400], dtype=np.int32))
    started = time.monotonic()
    result = client.infer("diamond", [ms])
    elapsed = time.monotonic() - started
    assert result.as_numpy("A").tolist() == [400] and result.as_numpy("B").tolist() == [400]
    # Two 400 ms steps one after the other would take 800 ms.
    assert elapsed < 0.75, f"the two independent steps took {elapsed:.3f}s: they ran one after the other"
    client.close()


def test_a_step_that_feeds_no_requested_output_does_not_run(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    before_a, before_b = statistics(ensemble_server, "sleep_a"), statistics(ensemble_server, "sleep_b")
    ms = httpclient.InferInput("MS", [1], "INT32")
    ms.set_data_from_numpy(np.array([1], dtype=np.int32))
    result = client.infer("diamond", [ms], outputs=[httpclient.InferRequestedOutput("A")])
    assert result.as_numpy("A").tolist() == [1] and result.as_numpy("B") is None
    after_a, after_b = statistics(ensemble_server, "sleep_a"), statistics(ensemble_server, "sleep_b")
    assert after_a["inference_count"] == before_a["inference_count"] + 1
    assert after_b["inference_count"] == before_b["inference_count"]
    client.close()


def test_bytes_flow_through_steps_unchanged(ensemble_server):
    for module, url in ((httpclient, ensemble_server.http_url), (grpcclient, ensemble_server.grpc_url)):
        client = module.InferenceServerClient(url)
        words = np.array(["héllo".encode(), b"", b"\x00\xffbinary", "世界".encode()], dtype=np.object_)
        tensor = module.InferInput("INPUT0", [4], "BYTES")
        tensor.set_data_from_numpy(words)
        assert client.infer("bytes_twice", [tensor]).as_numpy("OUTPUT0").tolist() == words.tolist()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_failing_step_fails_the_request_naming_the_step(ensemble_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(ensemble_server.http_url if protocol == "http" else ensemble_server.grpc_url)
    mode = module.InferInput("MODE", [1], "INT32")
    mode.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException) as failure:
        client.infer("through_faulty", [mode])
    message = str(failure.value)
    assert "in ensemble 'through_faulty', step 'faulty' failed" in message
    assert "faulty plugin asked to fail this request" in message
    mode.set_data_from_numpy(np.array([0], dtype=np.int32))
    assert client.infer("through_faulty", [mode]).as_numpy("OUTPUT").tolist() == [0]
    client.close()


def test_a_request_the_ensemble_refuses_names_the_ensemble(ensemble_server):
    response = requests.post(ensemble_server.url("/v2/models/chain/infer"), json={
        "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}],
    })
    assert response.status_code == 400
    assert "chain" in response.json()["error"] and "INPUT1" in response.json()["error"]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_invalid_ensemble_fails_with_tritons_message(ensemble_server, name):
    entry = index_of(ensemble_server)[name]
    assert entry["state"] == "UNAVAILABLE"
    # Config-level errors come after the config file's path and line, as every config error does.
    assert entry["reason"].endswith(BROKEN[name][1]), entry["reason"]
    # The others keep serving.
    assert index_of(ensemble_server)["chain"]["state"] == "READY"


def test_explicit_mode_loads_the_composing_models_and_follows_them(tmp_path):
    repo = ensemble_repository(tmp_path / "repo")
    server = Server([repo], tmp_path, "--model-control-mode=explicit").wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert index_of(server)["simple"].get("state", "") == ""
        client.load_model("chain")
        assert client.is_model_ready("chain") and client.is_model_ready("simple")
        data = np.ones((1, 16), dtype=np.int32)
        assert client.infer("chain", add_sub_inputs(httpclient, data)).as_numpy("OUTPUT0").tolist() == [[2] * 16]

        client.unload_model("simple")
        wait_for(lambda: not client.is_model_ready("chain"), what="the ensemble to stop serving")
        entry = index_of(server)["chain"]
        assert entry["state"] == "UNAVAILABLE"
        assert "depends on 'simple'" in entry["reason"], entry
        with pytest.raises(InferenceServerException):
            client.infer("chain", add_sub_inputs(httpclient, data))

        client.load_model("simple")
        wait_for(lambda: client.is_model_ready("chain"), what="the ensemble to serve again")
        assert client.infer("chain", add_sub_inputs(httpclient, data)).as_numpy("OUTPUT1").tolist() == [[2] * 16]

        # An ensemble whose composing model is missing fails with the reason; the server keeps serving.
        with pytest.raises(InferenceServerException, match="failed to load 'bad_missing_model'.*'ghost'"):
            client.load_model("bad_missing_model")
        assert client.is_model_ready("chain")
        client.close()
    finally:
        assert server.stop() == 0, server.log()


def test_an_ensemble_that_uses_itself_is_refused(tmp_path):
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    # Each is valid on its own: simple, then the other ensemble.
    for name, other in (("loop_a", "loop_b"), ("loop_b", "loop_a")):
        add_model(repo, name, ensemble_config(name, ADD_SUB, ADD_SUB_OUT, [
            ("simple", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "x", "OUTPUT1": "y"}),
            (other, {"INPUT0": "x", "INPUT1": "y"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
        ], 8))
    server = Server([repo], tmp_path, "--model-control-mode=explicit").wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException, match="circular dependency between ensembles"):
            client.load_model("loop_a")
        client.load_model("simple")
        assert client.is_model_ready("simple")
        client.close()
    finally:
        assert server.stop() == 0, server.log()


def test_reloading_a_composing_model_fails_no_ensemble_request(tmp_path):
    repo = ensemble_repository(tmp_path / "repo")
    server = Server([repo], tmp_path, "--model-control-mode=explicit").wait_live()
    try:
        control = httpclient.InferenceServerClient(server.http_url)
        control.load_model("chain")
        stop, failures, answered = threading.Event(), [], [0]

        def call():
            client = grpcclient.InferenceServerClient(server.grpc_url)
            data = np.arange(16, dtype=np.int32).reshape(1, 16)
            while not stop.is_set():
                try:
                    out = client.infer("chain", add_sub_inputs(grpcclient, data)).as_numpy("OUTPUT0")
                    assert out.tolist() == (2 * data).tolist()
                    answered[0] += 1
                except Exception as e:  # noqa: BLE001 - every failure is the test's finding
                    failures.append(str(e))
            client.close()

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            callers = [pool.submit(call) for _ in range(4)]
            for batch in (4, 8, 4):
                control.load_model("simple", config=simple_config_json(batch))
                time.sleep(0.3)
            stop.set()
            for caller in callers:
                caller.result()
        assert failures == [], failures[:3]
        assert answered[0] > 20
        control.close()
    finally:
        assert server.stop() == 0, server.log()


def simple_config_json(max_batch_size):
    """`simple`'s config, with another max_batch_size, as the JSON of a load's config override."""
    def tensors(names):
        return [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in names]

    return json.dumps({
        "name": "simple", "backend": "wasm", "max_batch_size": max_batch_size,
        "input": tensors(["INPUT0", "INPUT1"]), "output": tensors(["OUTPUT0", "OUTPUT1"]),
    })


def test_requests_from_ensembles_and_clients_batch_together(tmp_path):
    """The step goes through its model's dynamic batcher: with the batcher told to wait for 6 requests
    (Triton's TRITONSERVER_DELAY_SCHEDULER), three ensemble requests and three direct ones form one batch."""
    repo = tmp_path / "repo"
    add_model(repo, "batched_sleep", 'name: "batched_sleep"\nbackend: "wasm"\nmax_batch_size: 8\n'
              + tensor_config("input", "MS", "TYPE_INT32", [1]) + tensor_config("output", "OUT", "TYPE_INT32", [1])
              + "dynamic_batching { max_queue_delay_microseconds: 5000000 }\n", plugin="sleep")
    add_model(repo, "via_ensemble", ensemble_config(
        "via_ensemble", MS, [("OUT", "TYPE_INT32", [1])], [("batched_sleep", {"MS": "MS"}, {"OUT": "OUT"})], 8))
    server = Server([repo], tmp_path, env={"TRITONSERVER_DELAY_SCHEDULER": "6"}).wait_live()
    try:
        def call(model, value):
            client = httpclient.InferenceServerClient(server.http_url)
            ms = httpclient.InferInput("MS", [1, 1], "INT32")
            ms.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            out = client.infer(model, [ms]).as_numpy("OUT").tolist()
            client.close()
            return out

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            calls = [pool.submit(call, model, i) for i, model in enumerate(["via_ensemble", "batched_sleep"] * 3)]
            assert [c.result(timeout=30) for c in calls] == [[[i]] for i in range(6)]
        stats = statistics(server, "batched_sleep")
        assert stats["inference_count"] == 6 and stats["execution_count"] == 1, stats
    finally:
        assert server.stop() == 0, server.log()


def test_an_optional_input_left_out_is_left_out_of_the_step(tmp_path):
    repo = tmp_path / "repo"
    identity = ('name: "two_in"\nbackend: "wasm"\nmax_batch_size: 0\n'
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },'
                ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] optional: true } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },'
                ' { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
    add_model(repo, "two_in", identity, plugin="identity")
    config = ensemble_config("optional_through", [("A", "TYPE_FP32", [-1]), ("B", "TYPE_FP32", [-1])],
                             [("X", "TYPE_FP32", [-1])], [("two_in", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "X"})])
    add_model(repo, "optional_through", config.replace('name: "B" data_type: TYPE_FP32 dims: [ -1 ]',
                                                       'name: "B" data_type: TYPE_FP32 dims: [ -1 ] optional: true'))
    server = Server([repo], tmp_path).wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        a = httpclient.InferInput("A", [3], "FP32")
        a.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
        assert client.infer("optional_through", [a]).as_numpy("X").tolist() == [1, 2, 3]
        b = httpclient.InferInput("B", [1], "FP32")
        b.set_data_from_numpy(np.array([9], dtype=np.float32))
        assert client.infer("optional_through", [a, b]).as_numpy("X").tolist() == [1, 2, 3]
        client.close()
    finally:
        assert server.stop() == 0, server.log()
