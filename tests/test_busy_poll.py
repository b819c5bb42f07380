"""Busy polling (`--busy-poll-us`, src/busy_poll.rs): a runtime thread spins for a moment after work before
it sleeps. Whether that makes requests faster is for the benchmarks; what a test can hold it to is that the
spinning stops: once requests stop coming, the server uses no CPU, whichever path the last ones took (a Wasm
plugin on the runtime, or ONNX Runtime's instance thread). Every other test runs with it on, so each of them
also checks that a spinning thread never keeps a request from being answered."""

import os
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, Server, add_model, add_sub_inputs

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User plus system CPU time the process has used so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND


def call(module, url, model, count):
    client = module.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = add_sub_inputs(module, a)
    for _ in range(count):
        result = client.infer(model, inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    client.close()


@pytest.mark.parametrize("flags", [(), ("--busy-poll-us", "0"), ("--busy-poll-us", "5000")],
                         ids=["default", "off", "5ms"])
def test_the_server_uses_no_cpu_once_requests_stop(tmp_path, flags):
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(repo, "simple_onnx", (ROOT / "model_repository/simple_onnx/config.pbtxt").read_text(),
              files={"model.onnx": (ROOT / "model_repository/simple_onnx/1/model.onnx").read_bytes()})
    server = Server([repo], tmp_path, *flags).wait_live()
    try:
        for model in ("simple_onnx", "simple"):
            call(httpclient, server.http_url, model, 300)
            call(grpcclient, server.grpc_url, model, 300)
        time.sleep(0.5)
        before = cpu_seconds(server.process.pid)
        time.sleep(2)
        used = cpu_seconds(server.process.pid) - before
        # A thread that kept spinning would use close to 2 s here; an idle server uses none.
        assert used < 0.2, f"an idle server used {used:.2f} s of CPU in 2 s"
    finally:
        assert server.stop() == 0, server.log()
