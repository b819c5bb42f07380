"""Sequence batching (#20), over HTTP and gRPC with the real tritonclient: Triton's messages for bad sequence
requests, a START on a running sequence, idle sequences released, sequences waiting for a free slot, every
form of control input and an implicit state reaching a Python model, batches formed across sequences
(`oldest`), thousands of short sequences leaving no slot or memory behind, and reloads and unloads ending
sequences without losing other requests. Triton's example clients run in test_triton_examples.py, the
Silero VAD stream in test_sequence_vad.py."""

import concurrent.futures
import re
import shutil
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, tensor_config, wait_for

SIMPLE_SEQUENCE = (ROOT / "model_repository" / "simple_sequence" / "config.pbtxt").read_text()

CONTROLS_MODEL = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            total = (get("COUNT") + get("INPUT")).astype(np.int32)
            outputs = [pb_utils.Tensor("TOTAL", total), pb_utils.Tensor("COUNT_OUT", total),
                       pb_utils.Tensor("START_SEEN", get("START")), pb_utils.Tensor("END_SEEN", get("END")),
                       pb_utils.Tensor("READY_SEEN", get("READY")), pb_utils.Tensor("CORRID_SEEN", get("CORRID")),
                       pb_utils.Tensor("CORRELATION_ID", np.array([request.correlation_id()], dtype=np.uint64)),
                       pb_utils.Tensor("FLAGS", np.array([request.flags()], dtype=np.uint32))]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''

BLS_MODEL = b'''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Forwards each step to simple_dyna_sequence under the sequence's own id and flags (BLS)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(1, 1)
            call = pb_utils.InferenceRequest(model_name="simple_dyna_sequence", inputs=[pb_utils.Tensor("INPUT", value)],
                                             requested_output_names=["OUTPUT"], correlation_id=request.correlation_id(),
                                             flags=request.flags())
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            output = pb_utils.get_output_tensor_by_name(answer, "OUTPUT").as_numpy().reshape(1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
'''

BLS_CONFIG = ('backend: "python"\nmax_batch_size: 0\nsequence_batching { }\n'
              + tensor_config("input", "INPUT", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]))

CONTROLS_CONFIG = """backend: "python"
max_batch_size: 0
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0.5, 1.5 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 7, 9 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT32 } ] }
  ]
  state [ { input_name: "COUNT" output_name: "COUNT_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "TOTAL" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "START_SEEN" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "END_SEEN" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "READY_SEEN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "CORRID_SEEN" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "CORRELATION_ID" data_type: TYPE_UINT64 dims: [ 1 ] },
  { name: "FLAGS" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""


ACCUMULATOR_MODEL = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = (pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()
                     + pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", total),
                                                         pb_utils.Tensor("COUNT_OUT", total)]))
        return responses
'''


def accumulator_config(initial):
    """A Python model summing INPUT (INT32 [2]) into the state COUNT, which starts as `initial` says."""
    return ('backend: "python"\nmax_batch_size: 0\nsequence_batching {\n'
            f'  state [ {{ input_name: "COUNT" output_name: "COUNT_OUT" data_type: TYPE_INT32 dims: [ -1 ] {initial} }} ]\n}}\n'
            + tensor_config("input", "INPUT", "TYPE_INT32", [2]) + tensor_config("output", "TOTAL", "TYPE_INT32", [2]))


ENSEMBLE_CONFIG = ('platform: "ensemble"\nmax_batch_size: 8\n'
                   + tensor_config("input", "INPUT", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])
                   + 'ensemble_scheduling { step [ { model_name: "simple_dyna_sequence" model_version: -1 '
                     'input_map { key: "INPUT" value: "INPUT" } output_map { key: "OUTPUT" value: "OUTPUT" } } ] }\n')


COUNTER_MODEL = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled and sequential: each request sends INPUT responses, counting on from the sequence's last."""

    def initialize(self, args):
        self.counts = {}

    def execute(self, requests):
        for request in requests:
            sender, sequence, flags = request.get_response_sender(), request.correlation_id(), request.flags()
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.counts[sequence] = 0
            for _ in range(int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0])):
                self.counts[sequence] += 1
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array([self.counts[sequence]], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.counts[sequence]
        return None
'''

COUNTER_CONFIG = ('backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
                  'sequence_batching { }\n' + tensor_config("input", "INPUT", "TYPE_INT32", [1])
                  + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]))


def variant(name, *replacements):
    """simple_sequence's config under another name, with (old, new) text replacements."""
    config = SIMPLE_SEQUENCE.replace('name: "simple_sequence"', f'name: "{name}"')
    for old, new in replacements:
        assert old in config, old
        config = config.replace(old, new)
    return config


@pytest.fixture(scope="module")
def sequence_server(tmp_path_factory, component_cache):
    tmp = tmp_path_factory.mktemp("sequence")
    repo = tmp / "repo"
    for name in ("simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    graph = {"model.onnx": (ROOT / "model_repository/simple_sequence/1/model.onnx").read_bytes()}
    add_model(repo, "short_idle", variant("short_idle", ("sequence_batching {", "sequence_batching {\n"
                                                         "  max_sequence_idle_microseconds: 1000000\n"
                                                         "  oldest { max_candidate_sequences: 1024 }")),
              files=graph)
    add_model(repo, "one_slot", variant("one_slot", ("max_batch_size: 8", "max_batch_size: 1")), files=graph)
    add_model(repo, "reloadable", variant("reloadable"), files=graph)
    add_model(repo, "fill_slots", variant("fill_slots", ("max_batch_size: 8", "max_batch_size: 2"), (
        "sequence_batching {", "sequence_batching {\n  direct { max_queue_delay_microseconds: 400000 "
                               "minimum_slot_utilization: 1.0 }")), files=graph)
    add_model(repo, "controls", CONTROLS_CONFIG, files={"model.py": CONTROLS_MODEL})
    add_model(repo, "bls_sequence", BLS_CONFIG, files={"model.py": BLS_MODEL})
    add_model(repo, "sequence_ensemble", ENSEMBLE_CONFIG)
    add_model(repo, "counter", COUNTER_CONFIG, files={"model.py": COUNTER_MODEL})
    add_model(repo, "decoupled_state", COUNTER_CONFIG.replace("sequence_batching { }", (
        'sequence_batching { state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ] }')),
        files={"model.py": COUNTER_MODEL})
    from_file = 'initial_state [ { name: "start" data_type: TYPE_INT32 dims: [ 2 ] data_file: "count.bin" } ]'
    for name, initial in (("from_zeros", from_file.replace('data_file: "count.bin"', "zero_data: true")),
                          ("from_file", from_file), ("short_file", from_file), ("no_initial", "")):
        model = add_model(repo, name, accumulator_config(initial), files={"model.py": ACCUMULATOR_MODEL})
        (model / "initial_state").mkdir()
        values = [100, 200] if name != "short_file" else [100]
        (model / "initial_state" / "count.bin").write_bytes(np.array(values, dtype="<i4").tobytes())
    server = Server([repo], tmp, "--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false",
                    "--strict-readiness=false", cache_dir=component_cache)
    server.wait_live(timeout=600)
    yield server
    assert server.stop() == 0, server.log()


def client_for(server, protocol):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.http_url)
    return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)


def send(module, client, model, value, **sequence):
    """One INT32 [1, 1] INPUT to `model` with the given sequence arguments; OUTPUT as an int."""
    data = np.array([[value]], dtype=np.int32)
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(data)
    return int(client.infer(model, [tensor], **sequence).as_numpy("OUTPUT")[0][0])


def active_sequences(server, model):
    """The `tessera_sequence_active` gauge of `model` version 1."""
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).text
    match = re.search(rf'tessera_sequence_active{{model="{model}",version="1"}} (\d+)', text)
    return int(match.group(1)) if match else 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_sequence_requests_get_tritons_messages(sequence_server, protocol):
    module, client = client_for(sequence_server, protocol)
    model = "simple_dyna_sequence"
    cases = [
        ({}, f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": 77},
         f"inference request for sequence 77 to model '{model}' must specify the START flag on the first request "
         "of the sequence"),
        ({"sequence_id": "abc", "sequence_start": True},
         f"sequence batching control 'CORRID' data-type is 'BYTES', but model '{model}' expects 'UINT64'"),
    ]
    for sequence, message in cases:
        with pytest.raises(InferenceServerException, match=re.escape(message)):
            send(module, client, model, 1, **sequence)
    # A string id where the model takes strings is fine; an integer one is refused the other way round.
    assert send(module, client, "simple_string_dyna_sequence", 4, sequence_id="31", sequence_start=True,
                sequence_end=True) == 4 + 31
    with pytest.raises(InferenceServerException, match="data-type is 'UINT64', but model"):
        send(module, client, "simple_string_dyna_sequence", 4, sequence_id=31, sequence_start=True)
    # Two rows at once: the sequence batcher takes one step of a sequence at a time.
    data = np.array([[1], [2]], dtype=np.int32)
    tensor = module.InferInput("INPUT", [2, 1], "INT32")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException, match="must specify batch-size 1 due to requirements of sequence"):
        client.infer(model, [tensor], sequence_id=5, sequence_start=True)
    # The server kept serving: a proper sequence still runs.
    assert send(module, client, model, 3, sequence_id=9, sequence_start=True, sequence_end=True) == (3 + 1 + 9)


def test_sequence_parameters_of_the_wrong_type_are_refused_over_raw_http(sequence_server):
    url = sequence_server.url("/v2/models/simple_sequence/infer")
    body = {"inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}]}
    for parameters, message in [({"sequence_id": 5, "sequence_start": 1}, "'sequence_start' parameter, expected bool"),
                                ({"sequence_id": 1.5}, "'sequence_id' parameter, expected int64_param or string")]:
        answer = requests.post(url, json={**body, "parameters": parameters}, timeout=10)
        assert answer.status_code == 400, answer.text
        assert message in answer.json()["error"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_start_on_a_running_sequence_starts_it_again(sequence_server, protocol):
    module, client = client_for(sequence_server, protocol)
    model, sid = "simple_string_dyna_sequence", "123" if protocol == "http" else "124"
    assert send(module, client, model, 5, sequence_id=sid, sequence_start=True) == 5
    assert send(module, client, model, 3, sequence_id=sid) == 8
    assert send(module, client, model, 10, sequence_id=sid, sequence_start=True) == 10
    assert send(module, client, model, 1, sequence_id=sid, sequence_end=True) == 11 + int(sid)
    # Ended: the id is free, and a request without START is refused again.
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        send(module, client, model, 1, sequence_id=sid)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_idle_sequence_is_released_and_its_later_request_refused(sequence_server, protocol):
    module, client = client_for(sequence_server, protocol)
    sid = 42 if protocol == "http" else 43
    assert send(module, client, "short_idle", 4, sequence_id=sid, sequence_start=True) == 5
    assert active_sequences(sequence_server, "short_idle") == 1
    # Its client went quiet (as one that vanished): after max_sequence_idle_microseconds (1 s) the slot is freed.
    wait_for(lambda: active_sequences(sequence_server, "short_idle") == 0, timeout=5, what="the idle release")
    with pytest.raises(InferenceServerException, match=f"sequence {sid} to model 'short_idle' must specify the START"):
        send(module, client, "short_idle", 4, sequence_id=sid)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_sequence_waits_for_a_free_slot(sequence_server, protocol):
    """`one_slot` has one instance with one slot: a second sequence waits in the backlog until the first ends."""
    module, client = client_for(sequence_server, protocol)
    assert send(module, client, "one_slot", 1, sequence_id=1, sequence_start=True) == 2
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        _, other = client_for(sequence_server, protocol)
        waiting = pool.submit(send, module, other, "one_slot", 10, sequence_id=2, sequence_start=True, sequence_end=True)
        time.sleep(0.5)
        assert not waiting.done(), "the second sequence should wait while the only slot is held"
        assert active_sequences(sequence_server, "one_slot") == 2
        assert send(module, client, "one_slot", 7, sequence_id=1, sequence_end=True) == 7
        assert waiting.result(timeout=10) == 11
    assert active_sequences(sequence_server, "one_slot") == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_controls_and_state_reach_a_python_model(sequence_server, protocol):
    """START as fp32, END as bool, READY as int32 (7/9), CORRID as UINT32; an INT32 implicit state that sums
    INPUT over the sequence; `correlation_id()` and `flags()` as Triton's python backend gives them."""
    module, client = client_for(sequence_server, protocol)
    # Past 32 bits over gRPC (whose client sends int64); past 63 bits over HTTP (JSON numbers are unbounded).
    sid = 2**64 - 3 if protocol == "http" else 2**40 + 5

    def step(value, **flags):
        tensor = module.InferInput("INPUT", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        result = client.infer("controls", [tensor], sequence_id=sid, **flags)
        return {name: result.as_numpy(name)[0] for name in
                ("TOTAL", "START_SEEN", "END_SEEN", "READY_SEEN", "CORRID_SEEN", "CORRELATION_ID", "FLAGS")}

    first = step(5, sequence_start=True)
    assert (first["TOTAL"], first["START_SEEN"], first["END_SEEN"], first["READY_SEEN"]) == (5, 1.5, False, 9)
    assert first["CORRID_SEEN"] == sid % 2**32 and first["CORRELATION_ID"] == sid and first["FLAGS"] == 1
    middle = step(6)
    assert (middle["TOTAL"], middle["START_SEEN"], middle["END_SEEN"], middle["FLAGS"]) == (11, 0.5, False, 0)
    last = step(-1, sequence_end=True)
    assert (last["TOTAL"], last["END_SEEN"], last["FLAGS"]) == (10, True, 2)
    # The state starts from zeros again with the next sequence of the same id.
    assert step(2, sequence_start=True, sequence_end=True)["TOTAL"] == 2


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_python_model_calls_a_sequence_model_under_its_own_sequence(sequence_server, protocol):
    """BLS requests carry `correlation_id` and `flags` (InferenceRequest's arguments, as in Triton)."""
    module, client = client_for(sequence_server, protocol)

    def step(value, **flags):
        tensor = module.InferInput("INPUT", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        return int(client.infer("bls_sequence", [tensor], sequence_id=4242, **flags).as_numpy("OUTPUT")[0])

    assert [step(5, sequence_start=True), step(3), step(1, sequence_end=True)] == [6, 3, 1 + 4242]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_initial_states_come_from_zero_data_or_a_data_file(sequence_server, protocol):
    module, client = client_for(sequence_server, protocol)

    def step(model, values, **flags):
        tensor = module.InferInput("INPUT", [2], "INT32")
        tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
        return client.infer(model, [tensor], sequence_id=31, **flags).as_numpy("TOTAL").tolist()

    for model, start in (("from_zeros", [0, 0]), ("from_file", [100, 200])):
        assert step(model, [1, 2], sequence_start=True) == [start[0] + 1, start[1] + 2]
        assert step(model, [1, 1], sequence_end=True) == [start[0] + 2, start[1] + 3]
    # Variable dims with no initial state, and a file too short for the dims: the model fails to load,
    # saying why, with Triton's message; the others serve.
    index = {m["name"]: m for m in requests.post(sequence_server.url("/v2/repository/index"), timeout=5).json()}
    assert "without an 'initial_state'" in index["no_initial"]["reason"], index["no_initial"]
    assert "initial_state setting expects 8 bytes, but the data provided from count.binonly has 4 bytes" in \
        index["short_file"]["reason"], index["short_file"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_ensemble_passes_its_sequence_to_its_steps(sequence_server, protocol):
    """As in Triton, the ensemble request's correlation id and flags go with each step's request."""
    module, client = client_for(sequence_server, protocol)
    sid = 6100 if protocol == "http" else 6101
    assert send(module, client, "sequence_ensemble", 5, sequence_id=sid, sequence_start=True) == 6
    assert send(module, client, "sequence_ensemble", 3, sequence_id=sid) == 3
    assert send(module, client, "sequence_ensemble", 1, sequence_id=sid, sequence_end=True) == 1 + sid
    with pytest.raises(InferenceServerException, match=f"sequence {sid} to model 'simple_dyna_sequence' must specify"):
        send(module, client, "sequence_ensemble", 1, sequence_id=sid)


def test_direct_waits_for_its_slots_to_fill_up_to_the_queue_delay(sequence_server):
    """`fill_slots`: two slots, `minimum_slot_utilization: 1.0`, a 400 ms queue delay: a lone step waits out
    the delay; two sequences stepping together run at once, as one batch."""
    module, client = client_for(sequence_server, "grpc")
    started = time.monotonic()
    assert send(module, client, "fill_slots", 1, sequence_id=1, sequence_start=True, sequence_end=True) == 2
    assert time.monotonic() - started >= 0.35
    barrier = threading.Barrier(2)

    def step(sid):
        _, own = client_for(sequence_server, "grpc")
        barrier.wait(timeout=10)
        return send(module, own, "fill_slots", sid, sequence_id=sid, sequence_start=True, sequence_end=True)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert list(pool.map(step, [10, 20])) == [11, 21]
    stats = requests.get(sequence_server.url("/v2/models/fill_slots/stats"), timeout=5).json()["model_stats"][0]
    assert {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]} == {1: 1, 2: 1}


def test_a_decoupled_sequence_model_streams_each_steps_responses(sequence_server):
    """Two sequences interleaved on one gRPC stream, each step answered with several responses from the
    model's own per-sequence count; a step's responses all come before its sequence's next step runs."""
    answers, errors = {}, []
    done = threading.Event()

    def collect(result, error):
        if error is not None:  # reported by the assertion below: this runs on the client's thread
            errors.append(error)
            return
        response = result.get_response()
        if response.outputs:
            answers.setdefault(response.id, []).append(int(result.as_numpy("OUTPUT")[0]))
        if response.parameters["triton_final_response"].bool_param:
            answers.setdefault(response.id, [])
            if len(answers) == 5:
                done.set()

    client = grpcclient.InferenceServerClient(sequence_server.grpc_url)
    client.start_stream(callback=collect)
    steps = [("a1", 1, 2, True, False), ("b1", 2, 1, True, False), ("a2", 1, 3, False, False),
             ("b2", 2, 2, False, True), ("a3", 1, 1, False, True)]
    try:
        for request_id, sid, value, start, end in steps:
            tensor = grpcclient.InferInput("INPUT", [1], "INT32")
            tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
            client.async_stream_infer("counter", [tensor], request_id=request_id, sequence_id=sid,
                                      sequence_start=start, sequence_end=end, enable_empty_final_response=True)
        assert done.wait(timeout=30), (answers, errors)
    finally:
        client.stop_stream()
        client.close()
    assert answers == {"a1": [1, 2], "b1": [1], "a2": [3, 4, 5], "b2": [2, 3], "a3": [6]}
    index = {m["name"]: m for m in requests.post(sequence_server.url("/v2/repository/index"), timeout=5).json()}
    assert "implicit state of a decoupled model is not supported" in index["decoupled_state"]["reason"]
    # Over HTTP infer a decoupled model is refused, as Triton refuses it.
    http = httpclient.InferenceServerClient(sequence_server.http_url)
    tensor = httpclient.InferInput("INPUT", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="decoupled"):
        http.infer("counter", [tensor], sequence_id=3, sequence_start=True)


def test_oldest_batches_steps_of_different_sequences(sequence_server):
    """Eight sequences step at once on simple_dyna_sequence (`oldest`, a 10 ms queue delay): each gets its own
    answers, and steps of different sequences share executions."""
    model = "simple_dyna_sequence"
    before = requests.get(sequence_server.url(f"/v2/models/{model}/stats"), timeout=5).json()["model_stats"][0]
    barrier = threading.Barrier(8)

    def run_sequence(index):
        module, client = client_for(sequence_server, "grpc")
        sid = 5000 + index
        outputs = []
        for step, value in enumerate([index, 1, 2, 3]):
            barrier.wait(timeout=10)
            outputs.append(send(module, client, model, value, sequence_id=sid, sequence_start=step == 0,
                                sequence_end=step == 3))
        return outputs

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run_sequence, range(8)))
    for index, outputs in enumerate(results):
        assert outputs == [index + 1, 1, 2, 3 + 5000 + index], (index, outputs)
    after = requests.get(sequence_server.url(f"/v2/models/{model}/stats"), timeout=5).json()["model_stats"][0]
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 32 and executions < 32, (inferences, executions)


def test_thousands_of_short_sequences_leave_no_slot_or_memory_behind(sequence_server):
    module, _ = client_for(sequence_server, "grpc")

    def run(first, count):
        client = grpcclient.InferenceServerClient(sequence_server.grpc_url)
        for sid in range(first, first + count):
            assert send(module, client, "simple_sequence", sid % 100, sequence_id=sid, sequence_start=True,
                        sequence_end=True) == sid % 100 + 1
        client.close()

    run(100_000, 300)  # warm up: allocator pools, connections
    baseline = sequence_server.rss_kib()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: run(200_000 + i * 1000, 750), range(4)))
    assert active_sequences(sequence_server, "simple_sequence") == 0
    grown = sequence_server.rss_kib() - baseline
    assert grown < 20_000, f"resident memory grew by {grown} KiB over 3000 sequences"
    # Sequences whose clients vanish mid-way are released at the idle timeout, all of them. Their STARTs go
    # out on one stream, all at once, well within the one-second idle timeout.
    answered = []
    client = grpcclient.InferenceServerClient(sequence_server.grpc_url)
    client.start_stream(callback=lambda result, error: answered.append(error or result))
    for sid in range(1, 301):
        tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[0]], dtype=np.int32))
        client.async_stream_infer("short_idle", [tensor], sequence_id=sid, sequence_start=True)
    wait_for(lambda: len(answered) == 300, timeout=10, what="300 answers")
    assert all(not isinstance(a, InferenceServerException) for a in answered), answered[:3]
    assert active_sequences(sequence_server, "short_idle") == 300
    client.stop_stream()
    client.close()
    wait_for(lambda: active_sequences(sequence_server, "short_idle") == 0, timeout=10, what="300 idle releases")


def test_reload_and_unload_end_sequences_and_lose_no_other_request(sequence_server):
    module, client = client_for(sequence_server, "grpc")
    assert send(module, client, "reloadable", 1, sequence_id=8, sequence_start=True) == 2
    stop, failures, completed = threading.Event(), [], [0]

    def other_sequences():
        other = grpcclient.InferenceServerClient(sequence_server.grpc_url)
        sid = 900_000
        while not stop.is_set():
            sid += 1
            try:
                assert send(module, other, "simple_dyna_sequence", 2, sequence_id=sid, sequence_start=True) == 3
                assert send(module, other, "simple_dyna_sequence", 1, sequence_id=sid, sequence_end=True) == 1 + sid
                completed[0] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported below
                failures.append(repr(e))
        other.close()

    worker = threading.Thread(target=other_sequences)
    worker.start()
    config = sequence_server.repositories[0] / "reloadable" / "config.pbtxt"
    config.write_text(variant("reloadable", ("max_batch_size: 8", "max_batch_size: 4")))
    client.load_model("reloadable")
    # A reload replaces the version: the sequence it ran is gone, and its next request says how to go on.
    with pytest.raises(InferenceServerException, match="sequence 8 to model 'reloadable' must specify the START"):
        send(module, client, "reloadable", 1, sequence_id=8)
    assert send(module, client, "reloadable", 1, sequence_id=8, sequence_start=True) == 2
    client.unload_model("reloadable")
    with pytest.raises(InferenceServerException, match="reloadable"):
        send(module, client, "reloadable", 1, sequence_id=8)
    stop.set()
    worker.join(timeout=30)
    assert not failures, failures[:3]
    assert completed[0] > 0
    client.load_model("reloadable")
