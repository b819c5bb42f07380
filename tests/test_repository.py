"""Model repository behaviour at start-up (control mode none): broken models fail alone with their reason,
--exit-on-error and --strict-readiness behave as in Triton, compiled plugins are cached across restarts,
guest output reaches the log, and SIGTERM stops the server cleanly."""


import requests

from conftest import ROOT, Server, add_model, identity_config


def error_of(server, model):
    response = requests.get(server.url(f"/v2/models/{model}"))
    assert response.status_code in (400, 404), response.text
    return response.json()["error"]


def test_broken_models_fail_alone_with_their_reason(server):
    assert "config.pbtxt:3:" in error_of(server, "bad_syntax") and "TYPE_NOPE" in error_of(server, "bad_syntax")
    assert "platform 'tensorrt_plan' is not available" in error_of(server, "trt_simple")
    assert "model.wasm" in error_of(server, "no_plugin")
    assert "not a valid component" in error_of(server, "not_a_component")
    assert "no version directory" in error_of(server, "no_versions")
    for model in ["bad_syntax", "trt_simple", "no_plugin", "not_a_component", "no_versions"]:
        assert requests.get(server.url(f"/v2/models/{model}/ready")).status_code == 400
    # The good models next to them serve, and the server reports itself ready (strict readiness is off).
    assert requests.get(server.url("/v2/models/simple/ready")).status_code == 200
    assert requests.get(server.url("/v2/health/ready")).status_code == 200
    log = server.log()
    assert "trt_simple" in log and "failed to load" in log


def small_repo(tmp_path, broken=False):
    repo = tmp_path / "repo"
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    if broken:
        add_model(repo, "broken", 'backend: "wasm"\nmax_batch_size: -4\n' + identity_config("x", "TYPE_FP32").split("\n", 3)[3])
    return repo


def test_exit_on_error_is_the_default(tmp_path):
    server = Server([small_repo(tmp_path, broken=True)], tmp_path)
    assert server.wait_exit(timeout=60) != 0
    log = server.log()
    assert "broken" in log and "max_batch_size must be 0 or more" in log and "exiting" in log


def test_strict_readiness_reports_not_ready_when_a_model_failed(tmp_path):
    server = Server([small_repo(tmp_path, broken=True)], tmp_path, "--exit-on-error=false")
    try:
        server.wait_live()
        assert requests.get(server.url("/v2/health/ready")).status_code == 400
        assert requests.get(server.url("/v2/models/simple/ready")).status_code == 200
    finally:
        assert server.stop() == 0


def test_restart_reuses_the_compiled_component_cache(tmp_path):
    repo = small_repo(tmp_path)
    cache = tmp_path / "component-cache"
    first = Server([repo], tmp_path, cache_dir=cache).wait_live()
    assert first.stop() == 0
    assert "compiled component in" in first.log()
    assert list((cache / "components").glob("*.cwasm")), "nothing was cached"
    second = Server([repo], tmp_path, cache_dir=cache).wait_live()
    assert requests.get(second.url("/v2/models/simple/ready")).status_code == 200
    assert second.stop() == 0
    log = second.log()
    assert "loaded compiled component from cache" in log
    assert "compiled component in" not in log


def test_corrupt_cache_entry_is_recompiled(tmp_path):
    repo = small_repo(tmp_path)
    cache = tmp_path / "component-cache"
    assert Server([repo], tmp_path, cache_dir=cache).wait_live().stop() == 0
    for entry in (cache / "components").glob("*.cwasm"):
        entry.write_bytes(b"garbage")
    server = Server([repo], tmp_path, cache_dir=cache).wait_live()
    assert requests.get(server.url("/v2/models/simple/ready")).status_code == 200
    assert server.stop() == 0
    assert "ignoring unusable cached component" in server.log()


def test_guest_stdout_goes_to_the_log_tagged_with_the_model(server):
    log = server.log()
    line = next(l for l in log.splitlines() if "faulty plugin initialised as faulty_0_0" in l)
    assert "faulty:1" in line


def test_several_repositories_and_duplicate_names(tmp_path):
    one = small_repo(tmp_path / "a")
    two = tmp_path / "b" / "repo"
    add_model(two, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    add_model(two, "echo", identity_config("echo", "TYPE_FP32"), plugin="identity")
    server = Server([one, two], tmp_path, "--exit-on-error=false").wait_live()
    try:
        assert requests.get(server.url("/v2/models/echo/ready")).status_code == 200
        assert "exists in two repositories" in error_of(server, "simple")
    finally:
        assert server.stop() == 0


def test_version_policies(tmp_path):
    repo = tmp_path / "repo"
    base = (ROOT / "model_repository/simple/config.pbtxt").read_text()
    add_model(repo, "latest", base.replace('"simple"', '"latest"'), plugin="add_sub", versions=(1, 2, 3))
    add_model(repo, "every", base.replace('"simple"', '"every"') + "version_policy: { all: {} }\n", plugin="add_sub", versions=(1, 2))
    add_model(
        repo, "chosen", base.replace('"simple"', '"chosen"') + "version_policy: { specific: { versions: [1, 3] } }\n",
        plugin="add_sub", versions=(1, 2, 3),
    )
    server = Server([repo], tmp_path).wait_live()
    try:
        versions = lambda m: requests.get(server.url(f"/v2/models/{m}")).json()["versions"]
        assert versions("latest") == ["3"]
        assert versions("every") == ["1", "2"]
        assert versions("chosen") == ["1", "3"]
        assert requests.get(server.url("/v2/models/chosen/versions/2/ready")).status_code == 400
    finally:
        assert server.stop() == 0


def test_instance_group_count_creates_that_many_instances(tmp_path):
    repo = tmp_path / "repo"
    config = 'name: "faulty"\nbackend: "wasm"\ninstance_group [ { count: 3 } ]\n' + \
        'input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    add_model(repo, "faulty", config, plugin="faulty")
    server = Server([repo], tmp_path).wait_live()
    try:
        assert requests.get(server.url("/v2/models/faulty/config")).json()["instance_group"][0]["count"] == 3
    finally:
        assert server.stop() == 0
    log = server.log()
    for i in range(3):
        assert f"initialised as faulty_0_{i}" in log
