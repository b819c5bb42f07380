"""The logging extension (`/v2/logging`, gRPC `LogSettings`) with Triton's shapes and codes, through
tritonclient and raw requests, and what its changes do to the running server's log."""

import json
import re

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from conftest import ROOT, Server, add_model, add_sub_inputs, wait_for

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True, "log_verbose_level": 0,
            "log_format": "default"}


@pytest.fixture
def server(tmp_path):
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    server = Server([repo], tmp_path).wait_live()
    yield server
    assert server.stop() == 0


def infer(server):
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    client.infer("simple", add_sub_inputs(httpclient, data))
    client.close()


def test_settings_are_read_and_changed_over_http(server):
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_log_settings() == DEFAULTS
    changed = client.update_log_settings({"log_verbose_level": 1, "log_info": False, "log_warning": None})
    assert changed == {**DEFAULTS, "log_verbose_level": 1, "log_info": False}
    assert requests.get(server.url("/v2/logging"), timeout=10).json() == changed
    # An empty body changes nothing and answers the settings.
    assert requests.post(server.url("/v2/logging"), timeout=10).json() == changed
    client.close()


def test_changes_take_effect_in_the_running_log(server):
    client = httpclient.InferenceServerClient(server.http_url)
    infer(server)
    assert "inference request" not in server.log()
    client.update_log_settings({"log_verbose_level": 1})
    infer(server)
    wait_for(lambda: "inference request" in server.log(), what="a verbose line")
    client.update_log_settings({"log_verbose_level": 0, "log_format": "json"})
    record = json.loads(server.log().splitlines()[-1])  # the change is logged, in the new format
    assert record["level"] == "INFO" and "log settings changed" in record["message"] and record["pid"] > 0, record
    assert record["file"] == "service.rs" and record["line"] > 0, record
    before = server.log()
    client.update_log_settings({"log_info": True})
    assert server.log() == before, "a change that changes nothing is not logged"
    client.update_log_settings({"log_format": "ISO8601"})
    assert re.match(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ service.rs:\d+\] "log settings changed', server.log().splitlines()[-1])
    client.update_log_settings({"log_info": False})
    quiet_from = len(server.log())
    client.update_log_settings({"log_format": "default"})
    assert server.log()[quiet_from:] == "", "with log_info off, an informational line is not written"
    client.update_log_settings({"log_info": True})
    assert re.match(r'^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ service.rs:\d+\] "log settings changed', server.log()[quiet_from:])
    client.close()


@pytest.mark.parametrize("body, status, says", [
    ({"log_file": "/tmp/elsewhere.log"}, 501, "log file location can not be updated through network protocol"),
    ({"log_info": "yes"}, 400, "'log_info' must be a boolean"),
    ({"log_verbose_level": -1}, 400, "'log_verbose_level' must be an unsigned integer"),
    ({"log_verbose_level": 1.5}, 400, "'log_verbose_level' must be an unsigned integer"),
    ({"log_format": "syslog"}, 503, "invalid argument for --log_format, got: syslog"),
    ({"log_format": 1}, 400, "'log_format' must be a string"),
])
def test_bad_http_changes_answer_tritons_codes_and_change_nothing(server, body, status, says):
    answer = requests.post(server.url("/v2/logging"), json={"log_verbose_level": 3, **body}, timeout=10)
    assert answer.status_code == status and says in answer.json()["error"], answer.text
    assert requests.get(server.url("/v2/logging"), timeout=10).json() == DEFAULTS


def test_a_body_that_is_not_a_json_object_is_400(server):
    for body in (b"[1]", b"{", b"\xff"):
        answer = requests.post(server.url("/v2/logging"), data=body, timeout=10)
        assert answer.status_code == 400 and "error" in answer.json(), answer.text


def test_settings_are_read_and_changed_over_grpc(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.get_log_settings(as_json=True)["settings"]["log_format"] == {"string_param": "default"}
    changed = client.update_log_settings({"log_verbose_level": 2, "log_error": False, "log_format": "json"}, as_json=True)
    settings = changed["settings"]
    assert settings["log_verbose_level"] == {"uint32_param": 2} and settings["log_error"] == {"bool_param": False}
    assert settings["log_format"] == {"string_param": "json"} and settings["log_info"] == {"bool_param": True}
    assert requests.get(server.url("/v2/logging"), timeout=10).json()["log_format"] == "json"
    client.close()


@pytest.mark.parametrize("settings, code, says", [
    ({"log_file": service_pb2.LogSettingsRequest.SettingValue(string_param="x")}, grpc.StatusCode.UNIMPLEMENTED,
     "log file location can not be updated"),
    ({"log_info": service_pb2.LogSettingsRequest.SettingValue(uint32_param=1)}, grpc.StatusCode.INVALID_ARGUMENT,
     "expect boolean for 'log_info'"),
    ({"log_verbose_level": service_pb2.LogSettingsRequest.SettingValue(bool_param=True)},
     grpc.StatusCode.INVALID_ARGUMENT, "expect int32 for 'log_verbose_level'"),
    ({"log_format": service_pb2.LogSettingsRequest.SettingValue(string_param="xml")}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid argument for log_format, got: xml"),
    ({"log_warning": service_pb2.LogSettingsRequest.SettingValue()}, grpc.StatusCode.INVALID_ARGUMENT,
     "expect boolean for 'log_warning'"),
])
def test_bad_grpc_changes_answer_tritons_codes(server, settings, code, says):
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.LogSettings(service_pb2.LogSettingsRequest(settings=settings), timeout=10)
        assert refused.value.code() == code and says in refused.value.details(), refused.value
    assert requests.get(server.url("/v2/logging"), timeout=10).json() == DEFAULTS


def test_logging_is_listed_as_an_extension(server):
    assert "logging" in requests.get(server.url("/v2"), timeout=10).json()["extensions"]
