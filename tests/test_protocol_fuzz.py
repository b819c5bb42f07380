"""A protocol fuzz of the running server, as Triton's L0_http_fuzz does with boofuzz: valid requests on every
HTTP route and every gRPC method, mutated (bytes flipped, inserted, deleted, repeated, cut short, spliced
with another request) with a fixed seed, and sent raw. Every answer must be a success or an error with a
message; afterwards the process is alive, healthy, logged no panic, and serves good requests again.

HTTP mutations hit either the body alone (Content-Length kept true, so every request must get an answer) or
the whole request, request line and headers included (then the server may also just close the connection).
"""

import json
import random
import socket

import grpc
import numpy as np
import pytest
import requests
from tritonclient.grpc import service_pb2 as pb

import tritonclient.grpc as grpcclient
from conftest import ROOT, Server, add_model, identity_config

SEED = 23
HTTP_CASES = 10000
GRPC_CASES = 10000
STREAM_MESSAGES = 2000


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    repo = tmp_path_factory.mktemp("fuzz-repo")
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(repo, "identity_bytes", identity_config("identity_bytes", "TYPE_STRING"), plugin="identity")
    add_model(repo, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"), plugin="identity")
    server = Server([repo], tmp_path_factory.mktemp("fuzz"), "--model-control-mode=explicit", "--load-model=*",
                    "--allow-client-shm=true")
    server.wait_live()
    yield server
    assert server.stop() == 0, server.log()


def mutate(rng, data, others):
    """One random mutation of `data` (bytes); `others` are the other seeds, for splicing."""
    data = bytearray(data)
    kind = rng.randrange(7)
    at = rng.randrange(len(data) + 1)
    if kind == 0 and data:  # flip bits
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # insert interesting bytes
        data[at:at] = rng.choice([b"\x00", b"\xff" * 4, b"-1", b"18446744073709551616", b'"', b"[", b"{", b"\\u0000",
                                  b"9" * 40, b"\r\n", b"%n%s", rng.randbytes(rng.randint(1, 16))])
    elif kind == 2:  # delete a range
        del data[at:at + rng.randint(1, 16)]
    elif kind == 3 and data:  # repeat a range
        end = min(len(data), at + rng.randint(1, 32))
        data[at:at] = data[at:end] * rng.randint(2, 64)
    elif kind == 4:  # cut short
        del data[at:]
    elif kind == 5:  # splice with another seed
        other = rng.choice(others)
        data = data[:at] + other[rng.randrange(len(other) + 1):]
    else:  # replace a number-like byte with another digit run
        digits = [i for i, b in enumerate(data) if 0x30 <= b <= 0x39]
        if digits:
            i = rng.choice(digits)
            data[i:i + 1] = str(rng.choice([0, -1, 2**31, 2**63, 2**64, 10**30])).encode()
    return bytes(data)


# ---------------------------------------------------------------- HTTP


def http_seeds():
    ints = list(range(16))
    infer = {"id": "1", "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": ints},
                                   {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": ints}],
             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}]}
    strings = b"".join(len(s).to_bytes(4, "little") + s for s in (b"ab", b"", b"xyz"))
    binary_header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "BYTES",
                                            "parameters": {"binary_data_size": len(strings)}}],
                                "parameters": {"binary_data_output": True}}).encode()
    floats = np.arange(4, dtype=np.float32).tobytes()
    float_header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                                           "parameters": {"binary_data_size": 16}}]}).encode()
    config = json.dumps({"name": "identity_fp32", "backend": "wasm", "max_batch_size": 0,
                         "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                         "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})
    j = lambda value: json.dumps(value).encode()
    return [
        ("GET", "/v2/health/live", b"", None), ("GET", "/v2/health/ready", b"", None), ("GET", "/v2", b"", None),
        ("GET", "/v2/models/simple", b"", None), ("GET", "/v2/models/simple/versions/1/ready", b"", None),
        ("GET", "/v2/models/simple/config", b"", None), ("GET", "/v2/models/simple/stats", b"", None),
        ("POST", "/v2/models/simple/infer", j(infer), None),
        ("POST", "/v2/models/simple/versions/1/infer", j(infer), None),
        ("POST", "/v2/models/identity_bytes/infer", binary_header + strings, len(binary_header)),
        ("POST", "/v2/models/identity_fp32/infer", float_header + floats, len(float_header)),
        ("POST", "/v2/models/simple/generate", j({"INPUT0": ints, "INPUT1": ints}), None),
        ("POST", "/v2/repository/index", j({"ready": True}), None),
        ("POST", "/v2/repository/models/identity_fp32/load", j({"parameters": {"config": config}}), None),
        ("POST", "/v2/repository/models/identity_fp32/unload", j({"parameters": {"unload_dependents": False}}), None),
        ("GET", "/v2/systemsharedmemory/status", b"", None),
        ("POST", "/v2/systemsharedmemory/region/r0/register", j({"key": "/nope", "offset": 0, "byte_size": 64}), None),
        ("POST", "/v2/systemsharedmemory/region/r0/unregister", b"", None),
        ("GET", "/v2/trace/setting", b"", None),
        ("POST", "/v2/trace/setting", j({"trace_level": ["TIMESTAMPS"], "trace_rate": "1000"}), None),
        ("POST", "/v2/models/simple/trace/setting", j({"trace_count": "-1"}), None),
        ("GET", "/v2/logging", b"", None), ("POST", "/v2/logging", j({"log_verbose_level": 0}), None),
    ]


def raw_http(method, path, body, header_length):
    extra = f"Inference-Header-Content-Length: {header_length}\r\n" if header_length is not None else ""
    head = f"{method} {path} HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def exchange(server, raw, half_close=False):
    """Sends `raw` on a new connection and returns all the server sent back. `half_close`: shut the sending
    side after the request, so that a request cut short ends at EOF (as the server, like hyper by default,
    drops a connection whose client half-closed, such a request may go unanswered)."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(raw)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def check_http_answer(answer, case):
    """An HTTP/1.x response: a known status, and an error status carries a JSON message (or, for a request
    hyper refused before any route, a bare status)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n")[0].decode()
    assert status_line.startswith(("HTTP/1.1 ", "HTTP/1.0 ")), (case, answer[:200])
    status = int(status_line.split()[1])
    assert 100 <= status < 600, (case, status_line)
    fields = dict(line.split(b":", 1) for line in head.lower().split(b"\r\n")[1:] if b":" in line)
    if status >= 400 and b"application/json" in fields.get(b"content-type", b""):
        # One response's body; what follows is the answer to whatever the rest of a mangled request was.
        length = int(fields[b"content-length"])
        assert json.loads(body[:length])["error"], (case, body)


def test_mutated_http_requests_get_answers_and_the_server_survives(target):
    rng = random.Random(SEED)
    seeds = http_seeds()
    bodies = [seed[2] for seed in seeds if seed[2]]
    statuses = {}
    for case in range(HTTP_CASES):
        method, path, body, header_length = rng.choice(seeds)
        if rng.random() < 0.7:
            body = mutate(rng, body, bodies)
            if header_length is not None and rng.random() < 0.3:
                header_length = rng.choice([0, len(body), len(body) + 1, header_length - 1, 2**64])
            answer = exchange(target, raw_http(method, path, body, header_length))
            check_http_answer(answer, (case, method, path, body[:200]))
        else:
            raw = mutate(rng, raw_http(method, path, body, header_length), bodies)
            answer = exchange(target, raw, half_close=True)
            if answer:  # the server may close a connection whose request it cannot parse
                check_http_answer(answer, (case, raw[:200]))
        if answer:
            status = int(answer.split(b" ", 2)[1])
            statuses[status] = statuses.get(status, 0) + 1
    print("HTTP answers by status:", dict(sorted(statuses.items())))
    assert statuses.get(200, 0) > HTTP_CASES // 20, statuses  # the mutations left many requests valid
    assert sum(n for s, n in statuses.items() if 400 <= s < 500) > HTTP_CASES // 4, statuses
    still_serving(target)


# ---------------------------------------------------------------- gRPC


def grpc_seeds():
    infer = pb.ModelInferRequest(model_name="simple", id="1")
    for name in ("INPUT0", "INPUT1"):
        infer.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        infer.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    infer.outputs.add(name="OUTPUT0")
    typed = pb.ModelInferRequest(model_name="identity_bytes")
    tensor = typed.inputs.add(name="INPUT0", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([b"ab", b"c"])
    typed.parameters["priority"].int64_param = 1
    load = pb.RepositoryModelLoadRequest(model_name="identity_fp32")
    load.parameters["config"].string_param = json.dumps({"name": "identity_fp32", "backend": "wasm"})
    trace = pb.TraceSettingRequest(model_name="simple")
    trace.settings["trace_rate"].value.append("100")
    log = pb.LogSettingsRequest()
    log.settings["log_verbose_level"].uint32_param = 0
    shm = pb.SystemSharedMemoryRegisterRequest(name="r0", key="/nope", offset=0, byte_size=64)
    methods = [
        ("ServerLive", pb.ServerLiveRequest()), ("ServerReady", pb.ServerReadyRequest()),
        ("ModelReady", pb.ModelReadyRequest(name="simple", version="1")), ("ServerMetadata", pb.ServerMetadataRequest()),
        ("ModelMetadata", pb.ModelMetadataRequest(name="simple")), ("ModelInfer", infer), ("ModelInfer", typed),
        ("ModelConfig", pb.ModelConfigRequest(name="simple")), ("ModelStatistics", pb.ModelStatisticsRequest(name="simple")),
        ("RepositoryIndex", pb.RepositoryIndexRequest(ready=True)), ("RepositoryModelLoad", load),
        ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="identity_fp32")),
        ("SystemSharedMemoryRegister", shm), ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
        ("TraceSetting", trace), ("LogSettings", log),
    ]
    return [(method, message.SerializeToString()) for method, message in methods]


def test_mutated_grpc_messages_get_answers_and_the_server_survives(target):
    rng = random.Random(SEED)
    seeds = grpc_seeds()
    messages = [seed[1] for seed in seeds if seed[1]]
    codes = {}
    with grpc.insecure_channel(target.grpc_url) as channel:
        calls = {method: channel.unary_unary(f"/inference.GRPCInferenceService/{method}") for method, _ in seeds}
        for case in range(GRPC_CASES):
            method, message = rng.choice(seeds)
            message = mutate(rng, message, messages)
            try:
                calls[method](message, timeout=10)
                code = grpc.StatusCode.OK
            except grpc.RpcError as error:
                code = error.code()
                # A mutated unload may leave a model unavailable (the server's answer, naming it); a broken
                # connection or no answer in time is a failure.
                assert code != grpc.StatusCode.DEADLINE_EXCEEDED, (case, method, error)
                assert code != grpc.StatusCode.UNAVAILABLE or "model" in error.details(), (case, method, error)
                assert error.details(), (case, method, message[:200], code)
            codes[code.name] = codes.get(code.name, 0) + 1
    print("gRPC answers by code:", codes)
    assert codes.get("OK", 0) > GRPC_CASES // 20, codes
    still_serving(target)


def test_mutated_stream_messages_get_answers_and_the_server_survives(target):
    """ModelStreamInfer: streams of 50 infer messages, one in ten mutated. Each message that decodes gets a
    response (a result or an error message); the first that does not ends the stream with a status saying
    so, after the answers to the messages before it."""
    rng = random.Random(SEED)
    infers = [message for method, message in grpc_seeds() if method == "ModelInfer"]
    answered, ended = 0, {}
    with grpc.insecure_channel(target.grpc_url) as channel:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                       response_deserializer=pb.ModelStreamInferResponse.FromString)
        for _ in range(STREAM_MESSAGES // 50):
            mutated = [rng.random() < 0.1 for _ in range(50)]
            sent = [mutate(rng, rng.choice(infers), infers) if m else rng.choice(infers) for m in mutated]
            responses = []
            try:
                for response in stream(iter(sent), timeout=30):
                    assert response.error_message or response.infer_response.model_name, response
                    responses.append(response)
                code = "OK"
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.INTERNAL and "decode" in error.details(), error
                code = error.code().name
            # Every message before the end was answered, and a stream ends early only on a mutated message
            # (one Python's protobuf may still accept: it keeps a field of the wrong wire type as an
            # unknown field, where prost refuses the message).
            if code == "OK":
                assert len(responses) == len(sent)
            else:
                assert len(responses) < len(sent) and mutated[len(responses)], (len(responses), mutated)
            answered += len(responses)
            ended[code] = ended.get(code, 0) + 1
    print("stream messages answered:", answered, "streams ended by:", ended)
    assert ended.get("OK") and ended.get("INTERNAL"), ended
    still_serving(target)


def still_serving(server):
    """The process is alive and logged no panic, and once every model is loaded again a good request
    succeeds over both protocols."""
    assert server.process.poll() is None, server.log()
    assert "panicked" not in server.log(), server.log()[-4000:]
    assert requests.get(server.url("/v2/health/live"), timeout=5).status_code == 200
    for model in ("simple", "identity_bytes", "identity_fp32"):
        requests.post(server.url(f"/v2/repository/models/{model}/load"), timeout=60).raise_for_status()
    ints = list(range(16))
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": ints} for n in ("INPUT0", "INPUT1")]}
    answer = requests.post(server.url("/v2/models/simple/infer"), json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [2 * x for x in ints]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    assert client.infer("simple", inputs).as_numpy("OUTPUT1").tolist() == [[0] * 16]

