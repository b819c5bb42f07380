"""The trace extension's `opentelemetry` mode: spans exported over OTLP/HTTP to a real receiver (an HTTP
server here decoding OpenTelemetry's protobuf messages), in the shape Triton's own tests check
(qa/L0_trace/opentelemetry_unittest.py): an `InferRequest` span with the frontend's events, a span per model
with the request's events and attributes, a `compute` span with the execution's, ensemble steps under the
ensemble's span, a client's `traceparent` continued, the resource attributes from the command line."""

import http.server
import threading

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from conftest import ROOT, Server, add_model, add_sub_inputs, wait_for

BLS_SIMPLE = (ROOT / "tests/triton_examples/qa/bls_simple.py").read_bytes()
from test_ensembles import CHAIN

ROOT_EVENTS = {
    "http": ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"],
    "grpc": ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"],
}
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01"
DATA = np.arange(16, dtype=np.int32).reshape(1, 16)


class Receiver:
    """An OTLP/HTTP trace receiver on a loopback port: keeps every exported span with its resource."""

    def __init__(self):
        self.spans = []
        self.resources = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                exported = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for resource_spans in exported.resource_spans:
                        attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                        receiver.resources.append(attributes)
                        for scope in resource_spans.scope_spans:
                            receiver.spans.extend(scope.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, count):
        """Waits until `count` spans have arrived, and returns them."""
        wait_for(lambda: len(self.spans) >= count, what=f"{count} exported spans")
        with self.lock:
            return list(self.spans)

    def clear(self):
        with self.lock:
            self.spans.clear()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


def serve(tmp_path, receiver, *flags, cache_dir=None):
    root = tmp_path / "repo"
    add_model(root, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(root, "chain", CHAIN)
    if cache_dir:
        add_model(root, "bls_simple", 'name: "bls_simple"\nbackend: "python"\n', files={"model.py": BLS_SIMPLE})
    return Server([root], tmp_path, "--trace-config=mode=opentelemetry", "--trace-config=level=TIMESTAMPS",
                  f"--trace-config=opentelemetry,url={receiver.url}", "--trace-config=opentelemetry,bsp_schedule_delay=50",
                  "--trace-config=opentelemetry,resource=service.name=test_triton",
                  "--trace-config=opentelemetry,resource=test.key=test.value", *flags, cache_dir=cache_dir).wait_live()


def connect(server, wire):
    """The client module for `wire` ("http" or "grpc") and a client of `server` over it."""
    module = httpclient if wire == "http" else grpcclient
    return module, module.InferenceServerClient(server.http_url if wire == "http" else server.grpc_url)


def events(span):
    return [event.name for event in span.events]


def attributes(span):
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def tree(spans):
    """{parent span name: sorted child span names}, as Triton's tests compare nesting."""
    names = {span.span_id: span.name for span in spans}
    children = {}
    for span in spans:
        if span.parent_span_id in names:
            children.setdefault(names[span.parent_span_id], []).append(span.name)
    return {parent: sorted(names) for parent, names in children.items()}


def check_events(spans, wire):
    for span in spans:
        expected = {"InferRequest": ROOT_EVENTS[wire], "compute": COMPUTE_EVENTS}.get(span.name, MODEL_EVENTS)
        assert events(span) == expected, (span.name, events(span))
        for event in span.events:
            assert span.start_time_unix_nano <= event.time_unix_nano <= span.end_time_unix_nano, span.name


@pytest.mark.parametrize("wire", ["http", "grpc"])
def test_a_request_is_three_nested_spans_with_tritons_events(tmp_path, receiver, wire):
    server = serve(tmp_path, receiver, "--trace-config=rate=1")
    try:
        module, client = connect(server, wire)
        client.infer("simple", add_sub_inputs(module, DATA), request_id="r1")
        spans = receiver.wait(3)
        assert sorted(span.name for span in spans) == ["InferRequest", "compute", "simple"]
        assert tree(spans) == {"InferRequest": ["simple"], "simple": ["compute"]}
        check_events(spans, wire)
        root = next(span for span in spans if span.name == "InferRequest")
        assert root.parent_span_id == b"" and len({span.trace_id for span in spans}) == 1
        model = next(span for span in spans if span.name == "simple")
        assert attributes(model) == {"triton.model_name": "simple", "triton.model_version": 1, "triton.trace_id":
                                     attributes(model)["triton.trace_id"], "triton.trace_parent_id": 0,
                                     "triton.request_id": "r1"}
        assert receiver.resources[0]["service.name"] == "test_triton"
        assert receiver.resources[0]["test.key"] == "test.value"
        client.close()
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("headers", [None, {"traceparent": TRACEPARENT}])
def test_a_streamed_request_is_traced_as_a_unary_one(tmp_path, receiver, headers):
    server = serve(tmp_path, receiver, "--trace-config=rate=1")
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        results = []
        client.start_stream(callback=lambda result, error: results.append((result, error)), headers=headers)
        client.async_stream_infer("simple", add_sub_inputs(grpcclient, DATA))
        wait_for(lambda: results, what="the streamed answer")
        client.stop_stream()
        assert results[0][1] is None
        spans = receiver.wait(3)
        assert tree(spans) == {"InferRequest": ["simple"], "simple": ["compute"]}
        check_events(spans, "grpc")
        root = next(span for span in spans if span.name == "InferRequest")
        assert root.parent_span_id.hex() == (TRACEPARENT.split("-")[2] if headers else "")
        client.close()
    finally:
        assert server.stop() == 0


def test_ensemble_steps_hang_under_the_ensembles_span(tmp_path, receiver):
    server = serve(tmp_path, receiver, "--trace-config=rate=1")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        result = client.infer("chain", add_sub_inputs(httpclient, DATA))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * DATA)
        spans = receiver.wait(6)
        assert len(spans) == 6
        assert tree(spans) == {"InferRequest": ["chain"], "chain": ["simple", "simple"], "simple": ["compute", "compute"]}
        check_events(spans, "http")
        chain = next(span for span in spans if span.name == "chain")
        steps = [span for span in spans if span.name == "simple"]
        assert all(attributes(step)["triton.trace_parent_id"] == attributes(chain)["triton.trace_id"] for step in steps)
        client.close()
    finally:
        assert server.stop() == 0


def test_a_bls_call_hangs_under_the_calling_models_span(tmp_path, receiver, component_cache):
    """Triton's own BLS model, calling an ensemble: as Triton's _test_bls_trace, with our two-step ensemble."""
    server = serve(tmp_path, receiver, "--trace-config=rate=1", cache_dir=component_cache)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = add_sub_inputs(httpclient, DATA)
        inputs.append(httpclient.InferInput("MODEL_NAME", [1], "BYTES"))
        inputs[-1].set_data_from_numpy(np.array(["chain"], dtype=np.object_))
        result = client.infer("bls_simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * DATA)  # [1, 16], as Triton answers it
        spans = receiver.wait(8)
        assert len(spans) == 8
        assert tree(spans) == {"InferRequest": ["bls_simple"], "bls_simple": ["chain", "compute"],
                               "chain": ["simple", "simple"], "simple": ["compute", "compute"]}
        check_events(spans, "http")
        client.close()
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("wire", ["http", "grpc"])
def test_a_clients_traceparent_is_continued_whatever_the_rate(tmp_path, receiver, wire):
    server = serve(tmp_path, receiver, "--trace-config=rate=0")
    try:
        module, client = connect(server, wire)
        client.infer("simple", add_sub_inputs(module, DATA))
        client.infer("simple", add_sub_inputs(module, DATA), headers={"traceparent": TRACEPARENT})
        spans = receiver.wait(3)
        root = next(span for span in spans if span.name == "InferRequest")
        assert root.trace_id.hex() == TRACEPARENT.split("-")[1]
        assert root.parent_span_id.hex() == TRACEPARENT.split("-")[2]
        client.close()
    finally:
        assert server.stop() == 0
    assert len(receiver.spans) == 3, "rate 0: only the request that carried a context is traced"


def test_spans_still_waiting_are_exported_at_shutdown(tmp_path, receiver):
    server = serve(tmp_path, receiver, "--trace-config=rate=1", "--trace-config=opentelemetry,bsp_schedule_delay=600000")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        client.infer("simple", add_sub_inputs(httpclient, DATA))
        client.close()
        assert receiver.spans == [], "a ten-minute delay: nothing exported yet"
    finally:
        assert server.stop() == 0
    assert sorted(span.name for span in receiver.spans) == ["InferRequest", "compute", "simple"]


def test_settings_name_the_mode_and_the_exporter(tmp_path, receiver):
    server = serve(tmp_path, receiver)
    try:
        settings = requests.get(server.url("/v2/trace/setting"), timeout=10).json()
        assert settings["trace_mode"] == "opentelemetry" and settings["trace_level"] == ["TIMESTAMPS"]
        assert settings["url"] == receiver.url and settings["bsp_schedule_delay"] == "50"
        assert "trace_file" not in settings and "log_frequency" not in settings
        assert settings["resource"] == ["service.name=test_triton", "test.key=test.value"]
        client = grpcclient.InferenceServerClient(server.grpc_url)
        answer = client.get_trace_settings(as_json=True)["settings"]
        assert answer["trace_mode"]["value"] == ["opentelemetry"] and answer["url"]["value"] == [receiver.url]
        assert answer["resource"]["value"] == ["service.name=test_triton", "test.key=test.value"]
        client.close()
    finally:
        assert server.stop() == 0


def test_an_unreachable_collector_costs_nothing_but_the_spans(tmp_path, receiver):
    receiver.close()
    server = serve(tmp_path, receiver, "--trace-config=rate=1")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        for _ in range(20):
            result = client.infer("simple", add_sub_inputs(httpclient, DATA))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * DATA)
        client.close()
    finally:
        assert server.stop() == 0
