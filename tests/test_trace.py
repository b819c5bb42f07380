"""The trace extension in Triton's `triton` mode: settings over HTTP and gRPC (global and per model, set
and cleared, Triton's messages), tritonserver's trace flags, sampling by rate and count, and the trace file
with Triton's JSON records (the frontend's and the server's timestamps in order, tensors at the TENSORS
level, an ensemble's steps as its children), written every `log_frequency` traces or at shutdown."""

import json
import shutil
import subprocess

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from conftest import BINARY, ROOT, Server, add_model, add_sub_inputs, wait_for

DEFAULTS = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0", "trace_file": "",
            "trace_mode": "triton"}
SERVER_STEPS = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
                "COMPUTE_END", "REQUEST_END"]
HTTP_STEPS = ["HTTP_RECV_START", "HTTP_RECV_END", *SERVER_STEPS, "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START",
              "HTTP_SEND_END"]
GRPC_STEPS = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", *SERVER_STEPS, "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START",
              "GRPC_SEND_END"]


def repo(root):
    simple = (ROOT / "model_repository/simple/config.pbtxt").read_text()
    add_model(root, "simple", simple, plugin="add_sub")
    add_model(root, "other", simple.replace('"simple"', '"other"'), plugin="add_sub")
    return root


def infer(server, model="simple", count=1, **kwargs):
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(count):
        client.infer(model, add_sub_inputs(httpclient, data), **kwargs)
    client.close()


def records(path):
    return json.loads(path.read_text())


def timestamps(written, trace_id):
    """A trace's timestamps as (name, ns), in the order recorded."""
    return [(r["timestamps"][0]["name"], r["timestamps"][0]["ns"]) for r in written
            if r["id"] == trace_id and "timestamps" in r]


def test_settings_start_as_tritons_defaults_and_change_per_scope(tmp_path):
    server = Server([repo(tmp_path / "repo")], tmp_path).wait_live()
    try:
        url = server.url("/v2/trace/setting")
        assert requests.get(url, timeout=10).json() == DEFAULTS
        changed = requests.post(url, json={"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "5"}, timeout=10).json()
        assert changed == {**DEFAULTS, "trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "5"}
        model = server.url("/v2/models/simple/trace/setting")
        assert requests.get(model, timeout=10).json()["trace_rate"] == "5", "a model follows the global settings"
        assert requests.post(model, json={"trace_rate": "1", "trace_count": "2"}, timeout=10).json()["trace_rate"] == "1"
        assert requests.post(url, json={"trace_rate": "7"}, timeout=10).json()["trace_rate"] == "7"
        assert requests.get(model, timeout=10).json()["trace_rate"] == "1", "the model keeps its own rate"
        cleared = requests.post(model, json={"trace_rate": None}, timeout=10).json()
        assert cleared["trace_rate"] == "7" and cleared["trace_count"] == "2", cleared
        assert requests.post(url, json={"trace_level": None, "trace_rate": None}, timeout=10).json() == DEFAULTS
        client = grpcclient.InferenceServerClient(server.grpc_url)
        answer = client.update_trace_settings(model_name="other", settings={"trace_level": ["TIMESTAMPS"], "trace_count": "3"},
                                              as_json=True)["settings"]
        assert answer["trace_level"] == {"value": ["TIMESTAMPS"]} and answer["trace_count"] == {"value": ["3"]}, answer
        assert client.get_trace_settings(as_json=True)["settings"]["trace_level"] == {"value": ["OFF"]}
        cleared = client.update_trace_settings(model_name="other", settings={"trace_level": None}, as_json=True)["settings"]
        assert cleared["trace_level"] == {"value": ["OFF"]}
        client.close()
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("body, status, says", [
    ({"trace_file": "/tmp/elsewhere.json"}, 501, "trace file location can not be updated through network protocol"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF' is specified"),
    ({"trace_rate": "often"}, 400, "Unable to parse 'trace_rate', got: often"),
    ({"trace_count": "-2"}, 400, "Unable to parse 'trace_count', value is out of range [ -1,"),
    ({"log_frequency": 3}, 400, "'log_frequency' must be a string"),
    ({"trace_level": "TIMESTAMPS"}, 400, "'trace_level' must be a list of strings"),
])
def test_bad_http_changes_are_refused_and_change_nothing(tmp_path, body, status, says):
    server = Server([repo(tmp_path / "repo")], tmp_path).wait_live()
    try:
        refused = requests.post(server.url("/v2/trace/setting"), json=body, timeout=10)
        assert refused.status_code == status and says in refused.json()["error"], refused.text
        assert requests.get(server.url("/v2/trace/setting"), timeout=10).json() == DEFAULTS
        unknown = requests.get(server.url("/v2/models/nothing/trace/setting"), timeout=10)
        assert unknown.status_code == 400 and unknown.json()["error"] == "Request for unknown model : nothing"
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = service_pb2.TraceSettingRequest()
            request.settings["trace_file"].value.append("x")
            with pytest.raises(grpc.RpcError) as refused:
                stub.TraceSetting(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
            request = service_pb2.TraceSettingRequest()
            request.settings["trace_rate"].value.extend(["1", "2"])
            with pytest.raises(grpc.RpcError) as refused:
                stub.TraceSetting(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        assert server.stop() == 0


def test_the_trace_file_has_tritons_records_at_shutdown(tmp_path):
    trace_file = tmp_path / "trace.json"
    server = Server([repo(tmp_path / "repo")], tmp_path, "--trace-config", "level=TIMESTAMPS", "--trace-config", "level=TENSORS",
                    "--trace-config", "rate=2", "--trace-config", f"triton,file={trace_file}").wait_live()
    try:
        infer(server, count=6, request_id="traced")
        assert not trace_file.exists(), "log frequency 0: written at shutdown"
    finally:
        assert server.stop() == 0
    written = records(trace_file)
    openings = [r for r in written if "model_name" in r]
    assert len(openings) == 3, "every second request of six"
    assert all(r["model_name"] == "simple" and r["model_version"] == 1 and r["request_id"] == "traced" for r in openings)
    first = openings[0]["id"]
    steps = timestamps(written, first)
    assert [name for name, _ in steps] == HTTP_STEPS, steps
    assert [ns for _, ns in steps] == sorted(ns for _, ns in steps), "timestamps never go back"
    tensors = {r["tensor"]["name"]: (r["activity"], r["tensor"]) for r in written if r["id"] == first and "tensor" in r}
    assert tensors["INPUT0"] == ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": ",".join(map(str, range(16))),
                                                         "shape": "1,16", "dtype": "INT32"})
    assert tensors["OUTPUT0"][0] == "TENSOR_BACKEND_OUTPUT"
    assert tensors["OUTPUT0"][1]["data"] == ",".join(str(2 * i) for i in range(16))


def test_count_and_log_frequency_and_model_scopes(tmp_path):
    trace_file = tmp_path / "trace.json"
    server = Server([repo(tmp_path / "repo")], tmp_path, f"--trace-file={trace_file}", "--trace-log-frequency=2").wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        client.update_trace_settings(model_name="other", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                                                   "trace_count": "3"})
        infer(server, "simple", count=3)
        infer(server, "other", count=5)
        wait_for(lambda: (tmp_path / "trace.json.0").exists(), what="the first file of two traces")
        client.close()
    finally:
        assert server.stop() == 0
    first, second = records(tmp_path / "trace.json.0"), records(tmp_path / "trace.json.1")
    opened = [r["model_name"] for r in first + second if "model_name" in r]
    assert opened == ["other", "other", "other"], "only 'other' traces, and only its count of 3"
    assert sum("model_name" in r for r in first) == 2 and sum("model_name" in r for r in second) == 1


def test_grpc_requests_streams_and_ensemble_steps_are_traced(tmp_path):
    from test_ensembles import CHAIN
    trace_file = tmp_path / "trace.json"
    root = repo(tmp_path / "repo")
    add_model(root, "chain", CHAIN)
    shutil.copytree(ROOT / "model_repository/square_int32", root / "square_int32")
    server = Server([root], tmp_path, "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1",
                    f"--trace-config=triton,file={trace_file}").wait_live()
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        client.infer("simple", add_sub_inputs(grpcclient, data), request_id="plain")
        client.infer("chain", add_sub_inputs(grpcclient, data), request_id="chained")
        answers = []
        client.start_stream(callback=lambda result, error: answers.append(error))
        client.async_stream_infer("simple", add_sub_inputs(grpcclient, data), request_id="streamed")
        square = grpcclient.InferInput("IN", [1], "INT32")
        square.set_data_from_numpy(np.array([3], dtype=np.int32))
        client.async_stream_infer("square_int32", [square], request_id="squared")
        wait_for(lambda: len(answers) == 4, what="the streamed answers")
        client.stop_stream()
        assert answers == [None] * 4
        client.close()
    finally:
        assert server.stop() == 0
    written = records(trace_file)
    openings = {r["request_id"]: r for r in written if "model_name" in r and "parent_id" not in r}
    plain = openings["plain"]
    steps = timestamps(written, plain["id"])
    assert [name for name, _ in steps] == GRPC_STEPS and [ns for _, ns in steps] == sorted(ns for _, ns in steps)
    streamed = openings["streamed"]
    steps = timestamps(written, streamed["id"])
    assert [name for name, _ in steps] == GRPC_STEPS and [ns for _, ns in steps] == sorted(ns for _, ns in steps)
    # A decoupled model's responses leave while it computes: its compute is recorded when `execute` returns.
    squared = dict(timestamps(written, openings["squared"]["id"]))
    assert sorted(squared) == sorted(name for name in GRPC_STEPS if name != "INFER_RESPONSE_COMPLETE")
    order = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "REQUEST_START", "COMPUTE_START", "GRPC_SEND_START", "GRPC_SEND_END"]
    assert [squared[name] for name in order] == sorted(squared[name] for name in order)
    assert squared["COMPUTE_START"] <= squared["COMPUTE_END"] <= squared["REQUEST_END"]
    chain = openings["chained"]
    children = [r for r in written if r.get("parent_id") == chain["id"]]
    assert [(r["model_name"], r["request_id"]) for r in children] == [("simple", "chained")] * 2, written
    assert [name for name, _ in timestamps(written, children[0]["id"])] == SERVER_STEPS
    ensemble_steps = [name for name, _ in timestamps(written, chain["id"])]
    assert ensemble_steps == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START", "REQUEST_END",
                              "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"], "an ensemble computes nothing itself"


def test_generate_requests_are_traced(tmp_path):
    trace_file = tmp_path / "trace.json"
    server = Server([repo(tmp_path / "repo")], tmp_path, "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1",
                    f"--trace-config=triton,file={trace_file}").wait_live()
    try:
        for path, request_id in (("generate", "single"), ("generate_stream", "streamed")):
            body = {"id": request_id, "INPUT0": list(range(16)), "INPUT1": [1] * 16}
            answered = requests.post(server.url(f"/v2/models/simple/{path}"), json=body, timeout=10)
            assert answered.status_code == 200, answered.text
    finally:
        assert server.stop() == 0
    written = records(trace_file)
    openings = {r["request_id"]: r["id"] for r in written if "model_name" in r}
    assert [name for name, _ in timestamps(written, openings["single"])] == HTTP_STEPS
    streamed = timestamps(written, openings["streamed"])
    assert [name for name, _ in streamed] == [name for name in HTTP_STEPS if name != "INFER_RESPONSE_COMPLETE"]
    assert [ns for _, ns in streamed] == sorted(ns for _, ns in streamed)


@pytest.mark.parametrize("flag, says", [
    ("--trace-config=opentelemetry,resource=service.name", "expected resource=<key>=<value>"),
    ("--trace-config=mode=zipkin", "the mode is 'triton' or 'opentelemetry'"),
    ("--trace-config=zipkin,url=x", "the mode is 'triton' or 'opentelemetry'"),
    ("--trace-config=opentelemetry,bsp_max_queue_size=0", "out of range"),
    ("--trace-config=opentelemetry,file=x", "unknown trace setting"),
    ("--trace-config=rate=fast", "Unable to parse 'rate'"),
    ("--trace-level=OFF", None),
])
def test_trace_flags_are_checked_at_start(tmp_path, flag, says):
    if says is None:
        server = Server([repo(tmp_path / "repo")], tmp_path, flag, "--trace-rate=1").wait_live()
        try:
            assert requests.get(server.url("/v2/trace/setting"), timeout=10).json()["trace_rate"] == "1"
        finally:
            assert server.stop() == 0
        return
    done = subprocess.run([str(BINARY), "--model-repository", str(tmp_path), flag], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and says in done.stdout + done.stderr, done.stdout + done.stderr


def test_trace_is_listed_as_an_extension(tmp_path):
    server = Server([repo(tmp_path / "repo")], tmp_path).wait_live()
    try:
        assert "trace" in requests.get(server.url("/v2"), timeout=10).json()["extensions"]
    finally:
        assert server.stop() == 0


def test_a_change_to_one_model_leaves_the_others_counts(tmp_path):
    trace_file = tmp_path / "trace.json"
    server = Server([repo(tmp_path / "repo")], tmp_path, f"--trace-file={trace_file}").wait_live()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        client.update_trace_settings(model_name="other", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                                                   "trace_count": "2"})
        infer(server, "other")
        client.update_trace_settings(model_name="simple", settings={"trace_rate": "3"})
        infer(server, "other", count=3)
        client.close()
    finally:
        assert server.stop() == 0
    assert [r["model_name"] for r in records(trace_file) if "model_name" in r] == ["other", "other"]
