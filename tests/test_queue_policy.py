"""The dynamic batcher's queue policy, priority levels and preserve_ordering, observed from the client side.
Every model runs the `sleep` plugin (it pauses for the milliseconds its MS input asks, then echoes MS), on one
instance with max_batch_size 1 unless said otherwise, so that a slow first request holds the instance while
the requests behind it wait in the queue. Requests are sent a few tens of milliseconds apart so that their
arrival order is known; the order and time in which answers come back shows what the queue did."""

import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server, add_model, tensor_config

GAP = 0.05  # seconds between sends: enough for each request to reach the queue before the next


def sleep_config(name, batching, instances=1, max_batch_size=1):
    return (
        f'name: "{name}"\nbackend: "wasm"\nmax_batch_size: {max_batch_size}\n'
        + tensor_config("input", "MS", "TYPE_INT32", [1])
        + tensor_config("output", "OUT", "TYPE_INT32", [1])
        + f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        + f"dynamic_batching {{\n{batching}\n}}\n"
    )


MODELS = {
    "full": sleep_config("full", "default_queue_policy { max_queue_size: 1 }"),
    "reject": sleep_config(
        "reject", "default_queue_policy { default_timeout_microseconds: 10000000 allow_timeout_override: true }"
    ),
    "delay": sleep_config(
        "delay",
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10000000 allow_timeout_override: true }",
    ),
    "strict": sleep_config("strict", "default_queue_policy { default_timeout_microseconds: 10000000 }"),
    "priorities": sleep_config("priorities", "priority_levels: 2 default_priority_level: 2"),
    "ordered": sleep_config("ordered", "preserve_ordering: true", instances=2),
    "unordered": sleep_config("unordered", "", instances=2),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("queue_policy")
    for name, config in MODELS.items():
        add_model(tmp / "repo", name, config, plugin="sleep")
    s = Server([tmp / "repo"], tmp).wait_live()
    yield s
    assert s.stop() == 0


class Call(threading.Thread):
    """One inference on its own thread, remembering its answer (or error) and when it came back."""

    def __init__(self, server, model, ms, protocol="http", **options):
        super().__init__()
        self.server, self.model, self.ms, self.protocol, self.options = server, model, ms, protocol, options
        self.output = self.error = self.done_at = None
        self.sent_at = time.monotonic()

    def run(self):
        module = httpclient if self.protocol == "http" else grpcclient
        url = self.server.http_url if self.protocol == "http" else self.server.grpc_url
        client = module.InferenceServerClient(url)
        data = np.array([[self.ms]], dtype=np.int32)
        tensor = module.InferInput("MS", data.shape, "INT32")
        tensor.set_data_from_numpy(data)
        try:
            self.output = client.infer(self.model, [tensor], **self.options).as_numpy("OUT")
        except InferenceServerException as e:
            self.error = e
        self.done_at = time.monotonic()
        client.close()


def send_in_order(server, model, calls, protocol="http"):
    """Starts one Call per (ms, options) pair, GAP apart, and waits for all of them."""
    started = []
    for ms, options in calls:
        call = Call(server, model, ms, protocol, **options)
        call.start()
        started.append(call)
        time.sleep(GAP)
    for call in started:
        call.join(timeout=30)
        assert not call.is_alive(), "a request never came back"
    return started


def finished_order(calls):
    return [calls.index(c) for c in sorted(calls, key=lambda c: c.done_at)]


def failure_count(server, model):
    stats = requests.get(server.url(f"/v2/models/{model}/stats")).json()["model_stats"][0]
    return stats["inference_stats"]["fail"]["count"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_full_queue_refuses_at_once_with_a_message(server, protocol):
    before = failure_count(server, "full")
    busy, queued, refused = send_in_order(server, "full", [(600, {}), (0, {}), (0, {})], protocol)
    assert busy.error is None and queued.error is None
    assert refused.error is not None
    assert "Exceeds maximum queue size" in refused.error.message()
    assert "priority level 1" in refused.error.message()
    assert refused.error.status() == ("503" if protocol == "http" else "StatusCode.UNAVAILABLE")
    assert refused.done_at < busy.done_at, "the refusal must not wait for the instance"
    assert failure_count(server, "full") == before + 1


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_timeout_rejects_it_while_it_waits(server, protocol):
    busy, impatient, patient = send_in_order(server, "reject", [(800, {}), (0, {"timeout": 100_000}), (0, {})], protocol)
    assert busy.error is None and patient.error is None
    np.testing.assert_array_equal(patient.output, [[0]])
    assert impatient.error is not None and "Request timeout expired" in impatient.error.message()
    assert impatient.done_at < busy.done_at, "the rejection comes at the deadline, not when the instance frees up"


def test_a_request_cannot_override_the_timeout_unless_allowed(server):
    busy, waiting = send_in_order(server, "strict", [(400, {}), (0, {"timeout": 1000})])
    assert busy.error is None and waiting.error is None


def test_delay_moves_a_late_request_behind_the_punctual_ones(server):
    calls = send_in_order(server, "delay", [(400, {}), (100, {"timeout": 50_000}), (100, {})])
    assert all(c.error is None for c in calls)
    assert finished_order(calls) == [0, 2, 1]


def test_higher_priority_requests_are_served_first(server):
    # Level 2 is the default: the request without a priority, and one asking for a level that does not
    # exist, wait behind the level 1 request that arrived last.
    calls = send_in_order(
        server,
        "priorities",
        [(600, {}), (100, {"priority": 2}), (100, {}), (100, {"priority": 7}), (100, {"priority": 1})],
    )
    assert all(c.error is None for c in calls)
    assert finished_order(calls) == [0, 4, 1, 2, 3]


def test_preserve_ordering_answers_in_arrival_order_across_instances(server):
    # The two answers travel on two connections, so the client may read them in either order once both are
    # released; what ordering guarantees is that the quick request is not answered before the slow one is.
    slow_first = [(500, {}), (0, {})]
    slow, quick = send_in_order(server, "unordered", slow_first)
    assert quick.done_at - slow.sent_at < 0.4, "the quick request must overtake on the second instance"
    slow, quick = send_in_order(server, "ordered", slow_first)
    assert slow.error is None and quick.error is None
    assert quick.done_at - slow.sent_at >= 0.5


@pytest.mark.parametrize("value", ["-1", '"soon"', "1.5"])
def test_a_malformed_priority_or_timeout_is_a_400(server, value):
    for key in ("priority", "timeout"):
        body = f'{{"parameters": {{"{key}": {value}}}, "inputs": [{{"name": "MS", "shape": [1, 1], "datatype": "INT32", "data": [0]}}]}}'
        response = requests.post(server.url("/v2/models/full/infer"), data=body)
        assert response.status_code == 400, response.text
        assert f"'{key}' parameter must be a non-negative integer" in response.json()["error"]
