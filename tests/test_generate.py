"""Triton's generate extension over raw HTTP: `/generate` answers one JSON object (inputs by name at the top
level, shaped from the model's metadata; outputs by name, one element as a scalar), `/generate_stream` the
same object as a Server-Sent Event. Requests refused before the model runs get a JSON error with their
status on both; a model's own failure comes on the stream as a `data: {"error": ...}` event."""

import json

import requests


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body) if not isinstance(body, bytes) else body, timeout=30)


def events(response):
    """The JSON objects of a Server-Sent Events body."""
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    chunks = [chunk for chunk in response.text.split("\n\n") if chunk]
    assert all(chunk.startswith("data: ") for chunk in chunks), response.text
    return [json.loads(chunk[len("data: "):]) for chunk in chunks]


def test_generate_maps_inputs_and_outputs_by_name(server):
    values = list(range(16))
    answer = post(server, "/v2/models/simple/generate", {"id": "g-1", "INPUT0": values, "INPUT1": [1] * 16})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["model_name"], body["model_version"]) == ("g-1", "simple", "1")
    assert body["OUTPUT0"] == [v + 1 for v in values] and body["OUTPUT1"] == [v - 1 for v in values]


def test_one_element_is_a_scalar_both_ways(server):
    answer = post(server, "/v2/models/identity_bytes/generate", {"INPUT0": "naïve café"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["OUTPUT0"] == "naïve café"
    answer = post(server, "/v2/models/identity_fp32/versions/1/generate", {"INPUT0": 2.5, "parameters": {"temperature": 0}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["OUTPUT0"] == 2.5


def test_generate_stream_sends_the_answer_as_an_event(server):
    answer = post(server, "/v2/models/simple/generate_stream", {"INPUT0": [2] * 16, "INPUT1": [3] * 16})
    assert answer.status_code == 200, answer.text
    (event,) = events(answer)
    assert event["OUTPUT0"] == [5] * 16 and event["OUTPUT1"] == [-1] * 16


def test_requests_refused_before_inference_get_a_json_error(server):
    cases = [
        ("/v2/models/simple/generate", {"INPUT0": [1] * 15, "INPUT1": [1] * 15},
         "The schema can not convert input 'INPUT0' to tensor with proper shape"),
        ("/v2/models/simple/generate_stream", {"INPUT0": [[1] * 16], "INPUT1": [1] * 16}, "a value or a 1-D array"),
        ("/v2/models/simple/generate", {"INPUT0": ["x"] * 16, "INPUT1": [1] * 16}, "is not a valid INT32 value"),
        ("/v2/models/simple/generate", {"INPUT0": [1] * 16, "INPUT1": [1] * 16, "extra": {"nested": 1}},
         "parameter 'extra' must be a bool, number or string"),
        ("/v2/models/simple/generate", {"INPUT0": [1] * 16, "parameters": 3}, "Expected JSON object for keyword: 'parameters'"),
        ("/v2/models/no_such_model/generate_stream", {"INPUT0": 1}, "no_such_model"),
        ("/v2/models/simple/generate", b"{not json", "malformed generate request JSON"),
        ("/v2/models/simple/generate", {"INPUT1": [1] * 16}, "INPUT0"),
    ]
    for path, body, message in cases:
        answer = post(server, path, body)
        assert 400 <= answer.status_code < 500, (path, body, answer.status_code, answer.text)
        assert answer.headers["content-type"].startswith("application/json")
        assert message in answer.json()["error"], (message, answer.json())
    assert post(server, "/v2/models/simple/generate", {"INPUT0": [1] * 16, "INPUT1": [1] * 16}).ok


def test_a_model_failure_on_the_stream_is_an_error_event(server):
    answer = post(server, "/v2/models/faulty/generate_stream", {"MODE": 2})
    assert answer.status_code == 200, answer.text
    (event,) = events(answer)
    assert set(event) == {"error"} and event["error"]
    plain = post(server, "/v2/models/faulty/generate", {"MODE": 2})
    assert plain.status_code >= 400 and plain.json()["error"] == event["error"]
    assert post(server, "/v2/models/faulty/generate", {"MODE": 0}).json()["OUTPUT"] == 0
