"""Faults a production deployment meets (issue #23): SIGTERM under load, SIGKILL while the plugin cache is
being written, broken model directories, and abuse of the repository API (oversized payloads, rapid
load/unload cycles under traffic). Each fault fails only what it touches, with a reason; the server keeps
serving, and nothing is lost but the clean "unavailable" answers."""

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import threading
import time

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, add_sub_inputs, identity_config, tensor_config, wait_for
from test_security import SIMPLE_CONFIG, assert_serving, index, small_repo

# --- SIGTERM under load ----------------------------------------------------------------------------------


# What a client may see once the server stops: its connection refused, closed or reset, or gRPC's
# UNAVAILABLE — never a wrong answer, a server error or a hang.
STOPPED = ("connection refused", "connection reset", "connection closed", "remote end closed", "connection aborted", "broken pipe",
           "statuscode.unavailable")


class Callers:
    """Threads calling `simple` over HTTP and gRPC (new connections each time on some, kept on others)
    until the server goes away; every outcome is kept."""

    def __init__(self, server, count=6):
        self.server, self.outcomes, self.lock = server, [], threading.Lock()
        self.threads = [threading.Thread(target=self.call, args=(i,)) for i in range(count)]
        for thread in self.threads:
            thread.start()

    def call(self, index):
        module, url = (httpclient, self.server.http_url) if index % 2 == 0 else (grpcclient, self.server.grpc_url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        client, failures_in_a_row = None, 0
        while failures_in_a_row < 20:
            if client is None or index % 4 < 2:
                if client is not None:
                    client.close()
                client = module.InferenceServerClient(url, **({"network_timeout": 30} if module is httpclient else {}))
            try:
                result = client.infer("simple", add_sub_inputs(module, data)).as_numpy("OUTPUT0")
                outcome, failures_in_a_row = ("ok" if np.array_equal(result, data * 2) else f"wrong answer {result}"), 0
            except Exception as e:  # the client's own exceptions for a closed or refused connection vary
                outcome, failures_in_a_row = f"{type(e).__name__}: {e}", failures_in_a_row + 1
                client.close()
                client = None
                time.sleep(0.01)
            with self.lock:
                self.outcomes.append((time.monotonic(), outcome))
        if client is not None:
            client.close()

    def join(self):
        for thread in self.threads:
            thread.join(timeout=60)


def test_sigterm_under_load_finishes_in_flight_refuses_new_and_exits_0(tmp_path):
    repo = small_repo(tmp_path / "repo")
    add_model(repo, "sleep", 'backend: "wasm"\n', plugin="sleep")
    server = Server([repo], tmp_path).wait_live()
    callers = Callers(server)
    # A connection that never sends a byte must not hold up the exit (it used to, until its header timeout).
    silent = socket.create_connection(("127.0.0.1", server.http_port))
    answer = {}
    body = {"inputs": [{"name": "MS", "shape": [1], "datatype": "INT32", "data": [1500]}]}
    in_flight = threading.Thread(
        target=lambda: answer.update(r=requests.post(server.url("/v2/models/sleep/infer"), json=body, timeout=30)))
    time.sleep(1)
    in_flight.start()
    time.sleep(0.3)
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.wait_exit(timeout=20) == 0, server.log()[-3000:]
    exited = time.monotonic() - signalled
    callers.join()
    in_flight.join()
    silent.close()
    # The request in flight when the signal came was answered, and the exit did not wait for more.
    assert answer["r"].status_code == 200, answer["r"].text
    assert answer["r"].json()["outputs"][0]["data"] == [1500]
    assert exited < 5, f"exit took {exited:.1f} s"
    before = [o for t, o in callers.outcomes if t < signalled]
    after = [o for t, o in callers.outcomes if t > signalled]
    assert before and all(o == "ok" for o in before), [o for o in before if o != "ok"][:3]
    assert after, "no request was refused after the signal"
    unclean = [o for o in after if o != "ok" and not any(word in o.lower() for word in STOPPED)]
    assert unclean == [], unclean[:5]
    assert "shutting down" in server.log() and "stopped" in server.log()


def test_a_drain_serves_not_ready_before_the_ports_close(tmp_path):
    repo = small_repo(tmp_path / "repo")
    server = Server([repo], tmp_path, "--exit-drain-secs=3").wait_live()
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    wait_for(lambda: requests.get(server.url("/v2/health/ready"), timeout=2).status_code == 400, what="not ready")
    # Not ready, not live, and still answering inference on both protocols until the drain ends.
    assert requests.get(server.url("/v2/health/live"), timeout=2).status_code == 400
    assert_serving(server)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    np.testing.assert_array_equal(grpc_client.infer("simple", add_sub_inputs(grpcclient, data)).as_numpy("OUTPUT0"), data * 2)
    grpc_client.close()
    assert time.monotonic() - signalled < 3
    assert server.wait_exit(timeout=20) == 0
    assert 3 <= time.monotonic() - signalled < 8
    assert "draining: reporting not ready and still serving for 3s (--exit-drain-secs)" in server.log()
    server.log_file.close()


# --- SIGKILL while the plugin cache is written ------------------------------------------------------------


def entries(components):
    """The cache's entries (temporary files, `.tmp-…`, are not entries)."""
    return [p for p in components.glob("*.cwasm") if not p.name.startswith(".tmp-")]


def intact(entry):
    """Whether a cache entry is whole: its first 32 bytes are the SHA-256 of the rest (see backends/wasm/cache.rs)."""
    data = entry.read_bytes()
    return len(data) > 32 and hashlib.sha256(data[32:]).digest() == data[:32]


def test_sigkill_while_the_cache_is_written_leaves_nothing_half_written(tmp_path):
    repo = small_repo(tmp_path / "repo")
    # Four more plugins, so that each start writes five entries.
    add_model(repo, "identity", identity_config("identity", "TYPE_FP32"), plugin="identity")
    add_model(repo, "sleep", 'backend: "wasm"\n', plugin="sleep")
    add_model(repo, "faulty", 'backend: "wasm"\n' + tensor_config("input", "MODE", "TYPE_INT32", [1])
              + tensor_config("output", "OUTPUT", "TYPE_INT32", [1]), plugin="faulty")
    add_model(repo, "stream_sum", 'backend: "wasm"\n' + tensor_config("input", "IN", "TYPE_INT32", [1])
              + tensor_config("output", "COUNT", "TYPE_INT32", [1]) + tensor_config("output", "SUM", "TYPE_INT32", [1]),
              plugin="stream_sum")
    cache = tmp_path / "cache"
    components = cache / "components"
    # Kill the server the moment a cache entry is being written (its temporary file exists); several tries,
    # since a write lasts milliseconds.
    caught = left_over = 0
    for attempt in range(10):
        shutil.rmtree(cache, ignore_errors=True)
        (tmp_path / f"kill{attempt}").mkdir()
        server = Server([repo], tmp_path / f"kill{attempt}", "--exit-on-error=false", cache_dir=cache)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.process.poll() is None:
            if components.is_dir() and any(p.name.startswith(".tmp-") for p in components.iterdir()):
                server.process.send_signal(signal.SIGKILL)
                caught += 1
                break
        server.process.kill()
        server.process.wait()
        server.log_file.close()
        assert all(intact(entry) for entry in entries(components)), "a cache entry was left half-written"
        left_over += any(p.name.startswith(".tmp-") for p in components.iterdir()) if components.is_dir() else 0
        if left_over >= 2:
            break
    # A temporary file left behind shows the kill landed mid-write.
    assert left_over, f"no kill landed while an entry was being written ({caught} kills tried)"
    # Restarted on what the last kill left: ready, the leftovers swept, every entry whole.
    restarted = Server([repo], tmp_path, "--exit-on-error=false", cache_dir=cache).wait_live()
    try:
        assert_serving(restarted)
        wait_for(lambda: all(m["state"] == "READY" for m in index(restarted).values()), what="every model ready")
        assert not [p for p in components.iterdir() if p.name.startswith(".tmp-")]
        assert all(intact(entry) for entry in entries(components))
    finally:
        assert restarted.stop() == 0
    # And started again: every plugin now comes from the cache.
    again = Server([repo], tmp_path, cache_dir=cache).wait_live()
    try:
        assert_serving(again)
        log = again.log()
        assert "loaded compiled component from cache" in log and "compiled component in" not in log, log[-3000:]
    finally:
        assert again.stop() == 0


# --- broken model directories ---------------------------------------------------------------------------


def drops_file_permissions():
    """A prefix that runs the server without the power to ignore file permissions (root has it)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a mode-000 directory cannot be made unreadable to the server")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def copy_as(repo, source, name):
    shutil.copytree(ROOT / "model_repository" / source, repo / name)
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{source}"', f'name: "{name}"'))
    return repo / name


def test_broken_model_directories_fail_alone_with_their_reason(tmp_path):
    repo = small_repo(tmp_path / "repo")
    prefix = drops_file_permissions()
    unreadable_model = copy_as(repo, "simple", "unreadable_model")
    unreadable_version = copy_as(repo, "simple", "unreadable_version")
    unreadable_config = copy_as(repo, "simple", "unreadable_config")
    truncated = copy_as(repo, "simple_onnx", "truncated_onnx")
    with open(truncated / "1" / "model.onnx", "r+b") as model:
        model.truncate(os.path.getsize(truncated / "1" / "model.onnx") // 2)
    add_model(repo, "garbage_wasm", SIMPLE_CONFIG.replace('name: "simple"', 'name: "garbage_wasm"'),
              files={"model.wasm": os.urandom(1 << 20)})
    huge = "dims: [ 9223372036854775807, 9223372036854775807 ]"
    absurd_onnx = copy_as(repo, "simple_onnx", "absurd_onnx")
    (absurd_onnx / "config.pbtxt").write_text((absurd_onnx / "config.pbtxt").read_text().replace("dims: [ 16 ]", huge))
    add_model(repo, "absurd_dims", SIMPLE_CONFIG.replace('name: "simple"', 'name: "absurd_dims"').replace("dims: [ 16 ]", huge),
              plugin="add_sub")
    add_model(repo, "absurd_instances", SIMPLE_CONFIG.replace('name: "simple"', 'name: "absurd_instances"')
              + "instance_group [ { count: 100000 } ]\n", plugin="add_sub")
    os.chmod(unreadable_model, 0)
    os.chmod(unreadable_version / "1", 0)
    os.chmod(unreadable_config / "config.pbtxt", 0)
    server = Server([repo], tmp_path, "--exit-on-error=false", "--strict-readiness=false", wrapper=prefix).wait_live()
    try:
        models = index(server)
        reasons = {
            "unreadable_model": "Permission denied",
            "unreadable_version": "Permission denied",
            "unreadable_config": "Permission denied",
            "truncated_onnx": "Protobuf parsing failed",
            "garbage_wasm": "model.wasm",
            "absurd_onnx": "in the config (batch dimension included) but [-1, 16] in the graph",
            "absurd_instances": "instance",
        }
        for name, reason in reasons.items():
            assert models[name]["state"] == "UNAVAILABLE", models[name]
            assert reason in models[name]["reason"], models[name]
        assert models["simple"]["state"] == "READY"
        assert_serving(server)
        # Absurd dims are only a signature (as in Triton): the model serves, and a request that declares that
        # shape is refused for its size, without allocating it.
        assert models["absurd_dims"]["state"] == "READY"
        declared = [{"name": n, "shape": [1, 2**63 - 1, 2**63 - 1], "datatype": "INT32", "data": [1]} for n in ("INPUT0", "INPUT1")]
        response = requests.post(server.url("/v2/models/absurd_dims/infer"), json={"inputs": declared}, timeout=10)
        assert response.status_code == 400 and "error" in response.json(), response.text
        assert server.rss_kib() < 1024 * 1024 and server.threads() < 200, (server.rss_kib(), server.threads())
    finally:
        for path in (unreadable_model, unreadable_version / "1"):
            os.chmod(path, 0o755)
        assert server.stop() == 0


# --- repository API abuse -------------------------------------------------------------------------------


def test_a_50_mb_load_payload_is_refused_or_fails_that_model_and_leaves_nothing(tmp_path):
    repo = small_repo(tmp_path / "repo")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    server = Server([repo], tmp_path, "--model-control-mode=explicit", "--load-model=simple",
                    env={"TMPDIR": str(scratch)}).wait_live()
    try:
        garbage = os.urandom(50 << 20)
        config = json.dumps({"name": "big", "backend": "wasm", "max_batch_size": 0,
                             "input": [{"name": "I", "data_type": "TYPE_INT32", "dims": [1]}],
                             "output": [{"name": "O", "data_type": "TYPE_INT32", "dims": [1]}]})
        # Over HTTP the base64 body (67 MB) is past --http-max-input-size: refused before it is read whole.
        body = {"parameters": {"config": config, "file:1/model.wasm": base64.b64encode(garbage).decode()}}
        response = requests.post(server.url("/v2/repository/models/big/load"), json=body, timeout=60)
        assert response.status_code == 413 and "--http-max-input-size" in response.text, response.text[:300]
        # Over gRPC the raw 50 MB is taken, written to a scratch directory, fails as a plugin, and is removed.
        channel = grpc.insecure_channel(server.grpc_url, options=[("grpc.max_send_message_length", 64 << 20)])
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.RepositoryModelLoadRequest(model_name="big")
        request.parameters["config"].string_param = config
        request.parameters["file:1/model.wasm"].bytes_param = garbage
        with pytest.raises(grpc.RpcError) as failed:
            stub.RepositoryModelLoad(request, timeout=120)
        assert "model.wasm" in failed.value.details(), failed.value.details()
        channel.close()
        assert index(server)["big"]["state"] == "UNAVAILABLE"
        assert list(scratch.iterdir()) == [], list(scratch.iterdir())
        assert not (repo / "big").exists()
        assert_serving(server)
    finally:
        assert server.stop() == 0


def test_supplied_files_go_to_a_private_directory_no_one_could_plant(tmp_path):
    """Supplied files used to be written under `$TMPDIR/tessera-<pid>-load-<n>`, a name another local user
    could create first as a symlink to a directory of theirs (or read, the directory being world-readable)."""
    repo = small_repo(tmp_path / "repo")
    scratch, elsewhere = tmp_path / "scratch", tmp_path / "elsewhere"
    scratch.mkdir()
    elsewhere.mkdir()
    server = Server([repo], tmp_path, "--model-control-mode=explicit", "--load-model=simple",
                    env={"TMPDIR": str(scratch)}).wait_live()
    try:
        for n in range(10):
            (scratch / f"tessera-{server.process.pid}-load-{n}").symlink_to(elsewhere)
        wasm = (repo / "simple" / "1" / "model.wasm").read_bytes()
        body = {"parameters": {"config": json.dumps({"name": "uploaded", "backend": "wasm", "max_batch_size": 8,
                                                     "input": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
                                                     "output": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")]}),
                               "file:1/model.wasm": base64.b64encode(wasm).decode()}}
        response = requests.post(server.url("/v2/repository/models/uploaded/load"), json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert list(elsewhere.iterdir()) == []
        private = [p for p in scratch.iterdir() if not p.is_symlink()]
        assert len(private) == 1 and private[0].stat().st_mode & 0o777 == 0o700, private
        assert (private[0] / "uploaded" / "1" / "model.wasm").read_bytes() == wasm
    finally:
        assert server.stop() == 0


CLEAN = ("unknown model", "has no available versions", "is not ready", "unavailable")


def test_50_rapid_load_unload_cycles_under_traffic_lose_nothing(tmp_path):
    repo = small_repo(tmp_path / "repo")
    add_model(repo, "cycled", SIMPLE_CONFIG.replace('name: "simple"', 'name: "cycled"'), plugin="add_sub")
    server = Server([repo], tmp_path, "--model-control-mode=explicit", "--load-model=simple").wait_live()
    outcomes = {"simple": [], "cycled": []}
    stopping = threading.Event()

    def call(model, module, url):
        client = module.InferenceServerClient(url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        while not stopping.is_set():
            try:
                result = client.infer(model, add_sub_inputs(module, data)).as_numpy("OUTPUT0")
                outcomes[model].append("ok" if np.array_equal(result, data * 2) else f"wrong answer {result}")
            except InferenceServerException as e:
                outcomes[model].append(e.message() or str(e))
        client.close()

    callers = [threading.Thread(target=call, args=(model, module, url)) for model in outcomes
               for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url))]
    control = httpclient.InferenceServerClient(server.http_url)
    try:
        for thread in callers:
            thread.start()
        for _ in range(50):
            control.load_model("cycled")
            control.unload_model("cycled")
        stopping.set()
        for thread in callers:
            thread.join(timeout=30)
        assert outcomes["simple"] and all(o == "ok" for o in outcomes["simple"]), \
            [o for o in outcomes["simple"] if o != "ok"][:3]
        unclean = [o for o in outcomes["cycled"] if o != "ok" and not any(c in o.lower() for c in CLEAN)]
        assert unclean == [], unclean[:3]
        assert "ok" in outcomes["cycled"], "no request reached the cycled model while it was loaded"
        assert server.log().count("model unloaded") >= 50 or server.log().count("unloaded") >= 50
        assert_serving(server)
    finally:
        stopping.set()
        control.close()
        assert server.stop() == 0
