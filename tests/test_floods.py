"""Floods of idle and slow connections (issue #23): 2000 connections that never send a byte and 200 slowloris
connections (an HTTP/1 head, or an HTTP/2 preface, a byte a second) on both ports, reopened as soon as the
server closes them, while good HTTP and gRPC clients keep calling. Every good request is answered; the
server closes the flood's connections at its header timeout and says so in its log. How much the flood
costs a good client's latency is measured by `bench/floods.py`, against Triton, not asserted here."""

import re
import statistics
import sys
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, Server
from test_security import small_repo

sys.path.insert(0, str(ROOT / "bench"))
from flood import SLOW_HTTP, SLOW_HTTP2, Flood, raise_open_file_limit  # noqa: E402

IDLE, SLOW = 2000, 200
HEADER_TIMEOUT_S = 3


def call_both(http, grpc, inputs):
    """One good request on each protocol; returns their latencies in ms."""
    latencies = []
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        started = time.perf_counter()
        tensors = []
        for name, data in inputs.items():
            tensor = module.InferInput(name, list(data.shape), "INT32")
            tensor.set_data_from_numpy(data)
            tensors.append(tensor)
        result = client.infer("simple", tensors)
        latencies.append((time.perf_counter() - started) * 1000)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), inputs["INPUT0"] + inputs["INPUT1"])
    return latencies


def p(values, percentile):
    return statistics.quantiles(values, n=100)[percentile - 1]


def test_idle_and_slowloris_floods_are_closed_and_good_clients_are_served(tmp_path):
    if not raise_open_file_limit(IDLE + SLOW + 256):
        pytest.skip(f"the flood needs {IDLE + SLOW + 256} open files; this machine's hard limit is lower")
    repo = small_repo(tmp_path / "repo")
    server = Server([repo], tmp_path, f"--http-header-timeout-secs={HEADER_TIMEOUT_S}").wait_live()
    http = httpclient.InferenceServerClient(server.http_url, connection_timeout=10, network_timeout=10)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = {"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16), "INPUT1": np.ones((1, 16), dtype=np.int32)}
    try:
        quiet = [call_both(http, grpc, inputs) for _ in range(200)]
        flood = Flood([server.http_port, server.grpc_port], IDLE,
                      {server.http_port: SLOW_HTTP, server.grpc_port: SLOW_HTTP2}, SLOW)
        try:
            assert flood.open_count() >= IDLE + SLOW - flood.failed_connects
            flooded = []
            # Past twice the header timeout, so every flood connection is closed and reopened at least once.
            deadline = time.monotonic() + 2.5 * HEADER_TIMEOUT_S
            while time.monotonic() < deadline:
                flooded.append(call_both(http, grpc, inputs))
            assert flood.reopened["idle"] >= IDLE, flood.reopened
            assert flood.reopened["slow"] >= SLOW, flood.reopened
            assert flood.failed_connects == 0
        finally:
            flood.stop()
        for name, index in (("HTTP", 0), ("gRPC", 1)):
            print(f"{name}: quiet p50 {p([q[index] for q in quiet], 50):.2f} ms p99 {p([q[index] for q in quiet], 99):.2f} ms; "
                  f"flooded p50 {p([f[index] for f in flooded], 50):.2f} ms p99 {p([f[index] for f in flooded], 99):.2f} ms "
                  f"over {len(flooded)} requests")
        log = server.log()
        for protocol in ("HTTP", "gRPC"):
            assert re.search(rf"{protocol}: closed \d+ new connection\(s\) that did not start a request within {HEADER_TIMEOUT_S}s", log), log[-3000:]
        assert re.search(rf"HTTP: closed \d+ connection\(s\) idle or sending a request head for more than {HEADER_TIMEOUT_S}s", log)
        call_both(http, grpc, inputs)
    finally:
        http.close()
        grpc.close()
        assert server.stop() == 0, server.log()[-3000:]
