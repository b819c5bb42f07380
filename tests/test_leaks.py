"""Memory under sustained good traffic and under failing instances (issue #23), the short version CI runs;
`bench/leaks.py` (`scripts/dev bench-leaks`) runs 100k requests a kind with perf_analyzer. Each kind of
request (simple, identity with large BYTES and with 8 MiB FP32 tensors, a Python model, ONNX) is sent over
HTTP and gRPC until the server's memory has settled (the warm-up), then as many again: resident memory must
end within 10% of its post-warm-up value. Plugins that trap or run past their execute timeout are restarted
each time, and 1000 of either must not grow memory either.

Inside a plugin's sandbox: a Python model's large outputs must not leak there (componentize-py's bindings
leak every `bytes` they lower; the runtime hands large tensors over as strings), and an instance whose
memory grows anyway (a model's own leak) is replaced between requests at `wasm_memory_recycle_mb` rather
than failing one when it reaches its limit."""

import shutil
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, tensor_config

KINDS = {
    # kind: (model, requests a protocol after the warm-up, half as many as the warm-up)
    "simple": ("simple", 1500),
    "bytes": ("identity_bytes", 300),
    "fp32_8mib": ("identity_fp32", 60),
    "python": ("add_sub_python", 600),
    "onnx": ("simple_onnx", 1500),
}


def inputs_for(kind, module):
    """The request's inputs and the outputs it must answer with."""
    def tensor(name, data, datatype):
        t = module.InferInput(name, list(data.shape), datatype)
        t.set_data_from_numpy(data, **({"binary_data": True} if module is httpclient else {}))
        return t

    if kind in ("simple", "python", "onnx"):
        a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 3, dtype=np.int32)
        return [tensor("INPUT0", a, "INT32"), tensor("INPUT1", b, "INT32")], {"OUTPUT0": a + b, "OUTPUT1": a - b}
    if kind == "bytes":
        # 256 strings of 4 KiB: 1 MiB a request.
        data = np.array([bytes([i % 251]) * 4096 for i in range(256)], dtype=np.object_)
        return [tensor("INPUT0", data, "BYTES")], {"OUTPUT0": data}
    data = np.random.default_rng(0).random((1, 2 << 20), dtype=np.float32)  # 8 MiB
    return [tensor("INPUT0", data, "FP32")], {"OUTPUT0": data}


def send(server, kind, count, threads=2):
    """`count` requests of `kind` over each protocol (`threads` clients each), every answer checked."""
    model, _ = KINDS[kind]
    failures = []

    def run(module, url, n):
        client = module.InferenceServerClient(url, **({"network_timeout": 60} if module is httpclient else {}))
        inputs, expected = inputs_for(kind, module)
        try:
            for _ in range(n):
                result = client.infer(model, inputs)
                for name, want in expected.items():
                    got = result.as_numpy(name)
                    if not np.array_equal(got.reshape(want.shape), want):
                        failures.append(f"{kind}: wrong {name}")
        except InferenceServerException as e:
            failures.append(f"{kind}: {e}")
        finally:
            client.close()

    workers = [threading.Thread(target=run, args=(module, url, count // threads))
               for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == [], failures[:3]


def send_in_rounds(server, kind, count, rounds=4):
    """Sends `count` requests of `kind` in `rounds`; the server's resident memory after each round. The
    allocator keeps some of what the last requests freed until it next allocates, and how much depends on
    where they ended (with 8 MiB tensors one sample differed from the next by up to 50 MiB, the server idle
    in between), so the tests compare the highest of several samples: what leaked raises every later one."""
    samples = []
    for _ in range(rounds):
        send(server, kind, count // rounds)
        samples.append(server.rss_kib())
    return samples


def check_growth(what, settled, after):
    """Within 10% of the settled value (the issue's bound), and within 16 MiB: over a few thousand requests
    10% of a server holding the Python runtime (~400 MiB) would hide a leak of kilobytes a request."""
    grown = after - settled
    assert after <= settled * 1.10 and grown <= 16 * 1024, f"{what}: resident memory grew from {settled} KiB to {after} KiB"


# 4 MiB of known bytes a request (every byte value, so the text they travel as is not ASCII).
LARGE_OUTPUTS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        data = np.arange(1 << 20, dtype=np.uint32).view(np.uint8)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", data)]) for _ in requests]
"""

# Keeps 2 MiB a request for good, and answers how many calls this instance has served.
LEAKY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.kept = []

    def execute(self, requests):
        self.kept.append(bytearray(2 << 20))
        calls = np.array([len(self.kept)], dtype=np.uint8)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", calls)]) for _ in requests]
"""


def python_config(name, recycle_mb):
    """A Python model with a 64 MiB sandbox, replaced at `recycle_mb` (0: never)."""
    return (f'name: "{name}"\nbackend: "python"\n' + tensor_config("input", "INPUT", "TYPE_UINT8", [1])
            + tensor_config("output", "OUTPUT", "TYPE_UINT8", [-1])
            + 'parameters { key: "wasm_memory_limit_mb" value: { string_value: "64" } }\n'
            + f'parameters {{ key: "wasm_memory_recycle_mb" value: {{ string_value: "{recycle_mb}" }} }}\n')


@pytest.fixture(scope="module")
def leak_server(tmp_path_factory, component_cache):
    tmp = tmp_path_factory.mktemp("leaks")
    repo = tmp / "repo"
    for model in ("simple", "identity_bytes", "identity_fp32", "add_sub_python", "simple_onnx"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    faults = tensor_config("input", "MODE", "TYPE_INT32", [1]) + tensor_config("output", "OUTPUT", "TYPE_INT32", [1])
    add_model(repo, "faulty", 'backend: "wasm"\n' + faults, plugin="faulty")
    add_model(repo, "faulty_timeout", 'backend: "wasm"\n' + faults
              + 'parameters { key: "wasm_execute_timeout_ms" value: { string_value: "5" } }\n', plugin="faulty")
    server = Server([repo], tmp, cache_dir=component_cache).wait_live(timeout=600)
    yield server
    assert server.stop() == 0, server.log()[-3000:]


@pytest.fixture(scope="module")
def sandbox_server(tmp_path_factory, component_cache):
    """The Python models that grow their sandboxes, on a server of their own (the resident-memory checks
    above run without them)."""
    tmp = tmp_path_factory.mktemp("sandbox_leaks")
    for name, recycle_mb, model_py in (("large_outputs", 0, LARGE_OUTPUTS), ("leaky", 48, LEAKY), ("leaky_kept", 0, LEAKY)):
        add_model(tmp / "repo", name, python_config(name, recycle_mb), files={"model.py": model_py.encode()})
    server = Server([tmp / "repo"], tmp, cache_dir=component_cache).wait_live(timeout=600)
    yield server
    assert server.stop() == 0, server.log()[-3000:]


@pytest.mark.parametrize("kind", list(KINDS))
def test_memory_returns_after_sustained_good_requests(leak_server, kind):
    _, count = KINDS[kind]
    # The warm-up's first round also holds what the server's start left to settle. It has twice the rounds of
    # the measured part, so that the allocator's high-water mark for this traffic is reached in it (with 8 MiB
    # tensors a warm-up of four rounds once left it 16.2 MiB short of a later round's).
    settled = max(send_in_rounds(leak_server, kind, 2 * count, rounds=8)[1:])
    after = max(send_in_rounds(leak_server, kind, count))
    print(f"{kind}: {settled / 1024:.1f} MiB after the warm-up, {after / 1024:.1f} MiB after {2 * count} more requests")
    check_growth(kind, settled, after)


@pytest.mark.parametrize("model, mode, error", [("faulty", 1, "trap"), ("faulty_timeout", 3, "execute timeout")])
def test_1000_traps_or_timeouts_do_not_grow_memory(leak_server, model, mode, error):
    client = grpcclient.InferenceServerClient(leak_server.grpc_url)
    request = grpcclient.InferInput("MODE", [1], "INT32")
    request.set_data_from_numpy(np.array([mode], dtype=np.int32))

    def fail(times):
        for _ in range(times):
            with pytest.raises(InferenceServerException, match=error):
                client.infer(model, [request])

    try:
        fail(100)
        settled = leak_server.rss_kib()
        fail(1000)
        after = leak_server.rss_kib()
        # And the model still answers.
        request.set_data_from_numpy(np.array([0], dtype=np.int32))
        assert client.infer(model, [request]).as_numpy("OUTPUT").tolist() == [0]
    finally:
        client.close()
    print(f"{model}: {settled / 1024:.1f} MiB after 100 failures, {after / 1024:.1f} MiB after 1000 more")
    check_growth(model, settled, after)


def call_python(server, model, times):
    """The answers of `times` requests to a Python model over gRPC, or the first error."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    request = grpcclient.InferInput("INPUT", [1], "UINT8")
    request.set_data_from_numpy(np.array([1], dtype=np.uint8))
    try:
        return [client.infer(model, [request]).as_numpy("OUTPUT") for _ in range(times)]
    finally:
        client.close()


def test_large_python_outputs_do_not_leak_in_the_sandbox(sandbox_server):
    """60 outputs of 4 MiB through a 64 MiB sandbox that is never recycled: each used to stay behind."""
    expected = np.arange(1 << 20, dtype=np.uint32).view(np.uint8)
    answers = call_python(sandbox_server, "large_outputs", 60)
    assert all(np.array_equal(answer, expected) for answer in answers)
    assert not [line for line in sandbox_server.log().splitlines() if "re-creating" in line and "large_outputs" in line]


def test_an_instance_whose_memory_grows_is_replaced_between_requests(sandbox_server):
    """2 MiB kept a request: with recycling at 48 MiB of 64 every request succeeds and the instance starts
    over (its call count drops back); without it, a request fails at the limit."""
    counts = [int(answer[0]) for answer in call_python(sandbox_server, "leaky", 60)]
    restarts = [i for i in range(1, len(counts)) if counts[i] < counts[i - 1]]
    assert restarts and max(counts) < 32, counts
    assert "re-creating the instance: its memory grew to" in sandbox_server.log()
    with pytest.raises(InferenceServerException, match="memory limit of 64 MiB"):
        call_python(sandbox_server, "leaky_kept", 60)
