"""The dynamic batcher, made deterministic with Triton's test hook TRITONSERVER_DELAY_SCHEDULER (hold the
first batch of each model until that many requests are queued): the expected batch sizes form, visible in
batch_stats and in the batch-size histogram, and every request still gets its own answer."""

import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from conftest import ROOT, Server, add_model, identity_config

HELD = 6


@pytest.fixture(scope="module")
def batching(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batching")
    repo = tmp / "repo"
    simple = (ROOT / "model_repository/simple/config.pbtxt").read_text()
    add_model(repo, "batched", simple.replace('"simple"', '"batched"')
              + "dynamic_batching { max_queue_delay_microseconds: 2000000 }\n", plugin="add_sub")
    add_model(repo, "preferred", simple.replace('"simple"', '"preferred"')
              + "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 }\n", plugin="add_sub")
    add_model(repo, "shapes", identity_config("shapes", "TYPE_FP32").replace("max_batch_size: 0", "max_batch_size: 8")
              + "dynamic_batching { max_queue_delay_microseconds: 1000 }\n", plugin="identity")
    import shutil

    shutil.copytree(ROOT / "model_repository/simple_onnx", repo / "onnx_batched")
    config = repo / "onnx_batched" / "config.pbtxt"
    config.write_text(config.read_text().replace('"simple_onnx"', '"onnx_batched"') + "dynamic_batching { }\n")
    server = Server([repo], tmp, env={"TRITONSERVER_DELAY_SCHEDULER": str(HELD)}).wait_live()
    yield server
    assert server.stop() == 0


def send_together(server, model, arrays):
    """Sends one request per array, each a few milliseconds after the one before so that they reach the queue
    in list order; returns each request's OUTPUT0 (or its error)."""
    results = [None] * len(arrays)

    def call(i):
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
        names = ["INPUT0", "INPUT1"] if model != "shapes" else ["INPUT0"]
        inputs = []
        for name in names:
            t = httpclient.InferInput(name, arrays[i].shape, "INT32" if arrays[i].dtype == np.int32 else "FP32")
            t.set_data_from_numpy(arrays[i])
            inputs.append(t)
        results[i] = client.infer(model, inputs).as_numpy("OUTPUT0")
        client.close()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=60)
    return results


def batch_sizes(server, model):
    stats = requests.get(server.url(f"/v2/models/{model}/stats")).json()["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}, stats


def test_held_requests_run_as_one_batch_and_each_gets_its_rows(batching):
    arrays = [np.full((1, 16), i, dtype=np.int32) for i in range(HELD)]
    results = send_together(batching, "batched", arrays)
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, arrays[i] * 2)
    sizes, stats = batch_sizes(batching, "batched")
    assert sizes == {HELD: 1}
    assert stats["execution_count"] == 1 and stats["inference_count"] == HELD
    metrics = requests.get(f"http://127.0.0.1:{batching.metrics_port}/metrics").text
    assert 'tessera_batch_size_bucket{model="batched",version="1",le="4"} 0' in metrics
    assert 'tessera_batch_size_bucket{model="batched",version="1",le="8"} 1' in metrics


def test_a_preferred_size_dispatches_at_once(batching):
    arrays = [np.full((1, 16), i, dtype=np.int32) for i in range(HELD)]
    results = send_together(batching, "preferred", arrays)
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, arrays[i] * 2)
    assert batch_sizes(batching, "preferred")[0] == {4: 1, 2: 1}


def test_requests_of_different_shapes_are_not_batched_together(batching):
    arrays = [np.full((1, 4), i, dtype=np.float32) for i in range(4)] + [np.full((1, 7), i, dtype=np.float32) for i in range(2)]
    results = send_together(batching, "shapes", arrays)
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, arrays[i])
    assert batch_sizes(batching, "shapes")[0] == {4: 1, 2: 1}


def test_batches_of_multi_row_requests_on_onnx(batching):
    arrays = [np.arange(16 * rows, dtype=np.int32).reshape(rows, 16) + i for i, rows in enumerate([1, 2, 1, 3, 1, 1])]
    results = send_together(batching, "onnx_batched", arrays)
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, arrays[i] * 2)
    sizes, _ = batch_sizes(batching, "onnx_batched")
    assert sum(size * count for size, count in sizes.items()) == 9
    assert max(sizes) == 8  # the six requests hold 9 rows: one batch fills max_batch_size, the rest follow
