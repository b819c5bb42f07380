"""Zero-downtime reloads: 16 client threads (half HTTP, half gRPC) call a model in a loop while it is reloaded
20 times (explicit load with a changed config, or poll mode picking up a changed config.pbtxt) and then
unloaded. No request may fail before the unload begins; every request sent after it completes must get the
clean not-ready / unknown-model error; and every request sent is accounted for as one or the other."""

import json
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, Server, add_model, add_sub_inputs

CONCURRENCY = 16
RELOADS = 20
CLEAN_REJECTIONS = ("has no available versions", "unknown model")


class Load:
    """CONCURRENCY threads calling `model` until stopped, each outcome kept with its start and end time."""

    def __init__(self, server, model):
        self.server, self.model = server, model
        self.outcomes = []  # (started, finished, error message or None)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(CONCURRENCY)]

    def loop(self, index):
        module, url = (httpclient, self.server.http_url) if index % 2 == 0 else (grpcclient, self.server.grpc_url)
        client = module.InferenceServerClient(url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = add_sub_inputs(module, data)
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                result = client.infer(self.model, inputs).as_numpy("OUTPUT0")
                error = None if np.array_equal(result, data * 2) else f"wrong answer {result}"
            except InferenceServerException as e:
                error = e.message() or str(e)
            with self.lock:
                self.outcomes.append((started, time.monotonic(), error))
        client.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=30)

    def successes(self):
        return sum(1 for o in self.outcomes if o[2] is None)


def check(load, unload_started, unload_done):
    before = [o for o in load.outcomes if o[1] < unload_started]
    failed_before = [o[2] for o in before if o[2] is not None]
    assert failed_before == [], f"{len(failed_before)} requests failed before the unload: {failed_before[:3]}"
    assert load.successes() > 5 * RELOADS, "too few requests ran for the test to mean anything"
    after = [o for o in load.outcomes if o[0] > unload_done]
    assert after, "no request was sent after the unload"
    assert all(o[2] is not None and any(r in o[2] for r in CLEAN_REJECTIONS) for o in after), after[:3]
    unclean = [o[2] for o in load.outcomes if o[2] is not None and not any(r in o[2] for r in CLEAN_REJECTIONS)]
    assert unclean == []
    assert load.successes() + sum(1 for o in load.outcomes if o[2] is not None) == len(load.outcomes)


def repository(tmp_path, model):
    repo = tmp_path / "repo"
    if model == "simple":
        add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    else:
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    return repo


@pytest.mark.parametrize("model", ["simple", "simple_onnx"])
def test_explicit_reloads_under_load_lose_nothing(tmp_path, model):
    server = Server([repository(tmp_path, model)], tmp_path, "--model-control-mode=explicit", f"--load-model={model}").wait_live()
    try:
        control = httpclient.InferenceServerClient(server.http_url)
        config = control.get_model_config(model)
        count = config["instance_group"][0]["count"]
        with Load(server, model) as load:
            time.sleep(0.3)
            for i in range(RELOADS):
                # A real change each time, so each reload loads new instances and retires the old ones.
                config["instance_group"][0]["count"] = count + 1 - i % 2
                control.load_model(model, config=json.dumps(config))
            assert control.get_model_config(model)["instance_group"][0]["count"] == count
            unload_started = time.monotonic()
            control.unload_model(model)
            unload_done = time.monotonic()
            time.sleep(0.3)
        check(load, unload_started, unload_done)
        assert server.log().count("version retired") >= RELOADS
    finally:
        assert server.stop() == 0


def test_poll_reloads_under_load_lose_nothing(tmp_path):
    repo = repository(tmp_path, "simple")
    config_file = repo / "simple" / "config.pbtxt"
    original = config_file.read_text()
    server = Server([repo], tmp_path, "--model-control-mode=poll", "--repository-poll-secs=1").wait_live()
    try:
        control = httpclient.InferenceServerClient(server.http_url)
        with Load(server, "simple") as load:
            for i in range(RELOADS):
                count = 2 + i % 2
                config_file.write_text(original + f"instance_group [ {{ count: {count} }} ]\n")
                deadline = time.monotonic() + 15
                while control.get_model_config("simple")["instance_group"][0]["count"] != count:
                    assert time.monotonic() < deadline, f"reload {i} was not picked up"
                    time.sleep(0.05)
            unload_started = time.monotonic()
            shutil.rmtree(repo / "simple")
            deadline = time.monotonic() + 15
            while any(m["name"] == "simple" for m in control.get_model_repository_index()):
                assert time.monotonic() < deadline, "the removal was not picked up"
                time.sleep(0.05)
            unload_done = time.monotonic()
            time.sleep(0.3)
        check(load, unload_started, unload_done)
    finally:
        assert server.stop() == 0
