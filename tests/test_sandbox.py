"""Hostile plugins: the `faulty` plugin loops forever, allocates past its memory cap (in its own memory or
in tensors the host holds for it), burns through its fuel budget, reads /etc/passwd, writes into its model
directory and opens a socket, on request. Each time that request fails with an error
naming the cause, the same model answers the next request, a neighbouring model never notices, and nothing
outside the sandbox is read or written."""

import socket
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, add_sub_inputs, identity_config, tensor_config

LIMITS = (
    'parameters { key: "wasm_memory_limit_mb" value: { string_value: "64" } }\n'
    'parameters { key: "wasm_execute_timeout_ms" value: { string_value: "300" } }\n'
)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sandbox")
    repo = tmp / "repo"
    config = 'backend: "wasm"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])
    add_model(repo, "hostile", config + LIMITS, plugin="faulty")
    add_model(repo, "metered", config + 'parameters { key: "wasm_fuel" value: { string_value: "1000000" } }\n', plugin="faulty")
    add_model(repo, "router", identity_config("router", "TYPE_FP32") + 'parameters { key: "wasm_memory_limit_mb" value: { string_value: "16" } }\n', plugin="identity")
    add_model(repo, "bad_limits", config + 'parameters { key: "wasm_memory_limit_mb" value: { string_value: "lots" } }\n', plugin="faulty")
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    server = Server([repo], tmp, "--exit-on-error=false", "--strict-readiness=false").wait_live()
    yield server, repo
    assert server.stop() == 0


def call(server, mode, protocol="http", model="hostile"):
    module, url = (httpclient, server.http_url) if protocol == "http" else (grpcclient, server.grpc_url)
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([mode], dtype=np.int32))
    try:
        return client.infer(model, [tensor]).as_numpy("OUTPUT")
    finally:
        client.close()


class Neighbour(threading.Thread):
    """Calls `simple` in a loop while a hostile request runs; every call must succeed."""

    def __init__(self, server):
        super().__init__()
        self.server, self.stop, self.calls, self.failures = server, threading.Event(), 0, []

    def run(self):
        client = httpclient.InferenceServerClient(self.server.http_url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = add_sub_inputs(httpclient, data)
        while not self.stop.is_set():
            try:
                out = client.infer("simple", inputs).as_numpy("OUTPUT0")
                if not np.array_equal(out, data * 2):
                    self.failures.append(f"wrong answer {out}")
            except InferenceServerException as e:
                self.failures.append(e.message())
            self.calls += 1
        client.close()


def survives(server, mode, *cause, protocol="http"):
    """Runs a hostile request beside a neighbour's traffic; checks the error, the neighbour, and the next call."""
    neighbour = Neighbour(server)
    neighbour.start()
    try:
        with pytest.raises(InferenceServerException) as caught:
            call(server, mode, protocol)
    finally:
        time.sleep(0.05)
        neighbour.stop.set()
        neighbour.join(timeout=30)
    for fragment in cause:
        assert fragment in caught.value.message(), caught.value.message()
    assert neighbour.failures == [] and neighbour.calls > 0
    np.testing.assert_array_equal(call(server, 0, protocol), [0])  # the same model serves the next request
    return caught.value.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_plugin_that_loops_forever_is_stopped_at_its_deadline(sandbox, protocol):
    server, _ = sandbox
    started = time.monotonic()
    survives(server, 3, "execute timeout of 300 ms (wasm_execute_timeout_ms)", protocol=protocol)
    assert time.monotonic() - started < 5


def test_a_plugin_that_loops_on_an_idle_server_is_stopped_at_its_deadline(sandbox):
    """The epoch ticker sleeps while no plugin runs; the call that starts the loop must wake it."""
    server, _ = sandbox
    time.sleep(1.5)  # well past the ticker's idle spell (100 ms), so it is asleep when the call comes
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as caught:
        call(server, 3, "http")
    assert "execute timeout of 300 ms (wasm_execute_timeout_ms)" in caught.value.message()
    assert time.monotonic() - started < 5
    np.testing.assert_array_equal(call(server, 0, "http"), [0])


def test_a_looping_call_does_not_hold_up_other_calls_on_its_grpc_connection(sandbox):
    """gRPC calls start inside their connection's task; one that keeps running must move off it at its first
    epoch tick, so calls behind it on the same HTTP/2 connection are answered while it still runs."""
    server, _ = sandbox
    client = grpcclient.InferenceServerClient(server.grpc_url)  # one channel: one HTTP/2 connection
    mode = grpcclient.InferInput("MODE", [1], "INT32")
    mode.set_data_from_numpy(np.array([3], dtype=np.int32))
    looped = threading.Event()
    outcome = []
    client.async_infer("hostile", [mode], callback=lambda result, error: (outcome.append(error), looped.set()))
    try:
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        for _ in range(10):
            out = client.infer("simple", add_sub_inputs(grpcclient, data)).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, data * 2)
        assert not looped.is_set(), "the calls behind the looping one were answered only after it ended"
        assert looped.wait(timeout=30)
        assert "execute timeout of 300 ms" in outcome[0].message()
    finally:
        client.close()


def test_a_plugin_that_allocates_past_its_cap_is_stopped(sandbox):
    server, _ = sandbox
    survives(server, 4, "memory limit of 64 MiB (wasm_memory_limit_mb)")


def test_tensors_a_plugin_holds_in_the_host_count_against_its_cap(sandbox):
    server, _ = sandbox
    survives(server, 7, "memory limit of 64 MiB (wasm_memory_limit_mb)", "MiB of tensors")


def test_a_plugin_past_its_fuel_budget_is_stopped(sandbox):
    server, _ = sandbox
    with pytest.raises(InferenceServerException, match=r"used up its fuel budget of 1000000 \(wasm_fuel\)"):
        call(server, 8, model="metered")
    np.testing.assert_array_equal(call(server, 0, model="metered"), [0])
    # The same work without a budget completes: the budget is the model's own setting.
    np.testing.assert_array_equal(call(server, 8), [8])


def test_tensors_a_plugin_passes_on_are_not_copied_into_it(sandbox):
    """`router` (identity) may use 16 MiB but returns a 48 MiB input as its output: the data stays in the
    host as a handle. Were it copied into the plugin, the call would fail at the memory cap."""
    server, _ = sandbox
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.random.default_rng(7).random(12 << 20, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    try:
        answer = client.infer("router", [tensor], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), data)
    finally:
        client.close()


def test_a_plugin_cannot_read_outside_its_model_directory(sandbox):
    server, _ = sandbox
    survives(server, 5, "reading /etc/passwd failed")
    assert "faulty plugin obtained" not in server.log()


def test_a_plugin_cannot_write_into_its_model_directory(sandbox):
    server, repo = sandbox
    survives(server, 6, "writing into /model failed")
    assert not list(repo.rglob("escaped.txt"))


def test_a_plugin_cannot_open_a_socket(sandbox):
    server, _ = sandbox
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        survives(server, port, f"connecting to 127.0.0.1:{port} failed")
        with pytest.raises(socket.timeout):
            listener.accept()  # nobody came
    finally:
        listener.close()


def test_a_bad_limit_setting_fails_that_model_with_its_name(sandbox):
    server, _ = sandbox
    index = {e["name"]: e for e in requests.post(server.url("/v2/repository/index")).json()}
    assert index["bad_limits"]["state"] == "UNAVAILABLE"
    assert "parameter 'wasm_memory_limit_mb' must be a whole number, got 'lots'" in index["bad_limits"]["reason"]
    assert index["hostile"]["state"] == "READY"
