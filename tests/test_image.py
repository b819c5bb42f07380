"""The container image (`scripts/dev image`, issue #24), run as a container runtime runs it: unpacked from its
OCI layout with umoci and started by runc, with the model repository mounted read-only at /models, a
read-only root filesystem, as the image's non-root user, on the host's network so the test reaches its ports.
tritonclient then calls a Wasm, an ONNX and a Python model over HTTP and gRPC, `tessera healthcheck` answers
inside the container (the image has no shell or curl), and SIGTERM stops it cleanly."""

import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, add_sub_inputs, free_ports, wait_until_answers

IMAGE = ROOT / ".cache" / "image"
VERSION = next(line.split('"')[1] for line in (ROOT / "Cargo.toml").read_text().splitlines() if line.startswith("version = "))


def run(*command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, timeout=kwargs.pop("timeout", 120), **kwargs)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture
def bundle(tmp_path, component_cache):
    if not (IMAGE / "oci" / "index.json").exists():
        pytest.skip("no image built: `scripts/dev image` builds it (the test command does)")
    if os.geteuid() != 0 or not shutil.which("umoci") or not shutil.which("runc"):
        pytest.skip("running the image needs root, umoci and runc (`scripts/dev image` installs them)")
    bundle = tmp_path / "bundle"
    run("umoci", "unpack", "--image", f"{IMAGE / 'oci'}:tessera:{VERSION}", str(bundle))
    return bundle


def test_the_image_serves_a_mounted_repository_read_only_as_non_root(bundle, tmp_path, component_cache):
    models = tmp_path / "models"
    for model in ("simple", "simple_onnx", "add_sub_python"):
        shutil.copytree(ROOT / "model_repository" / model, models / model)
    http, grpc, metrics = free_ports(3)
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    entrypoint = config["process"]["args"]
    assert entrypoint == ["/opt/tessera/bin/tessera", "--model-repository=/models"], entrypoint
    config["process"]["args"] = entrypoint + [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
    config["process"]["terminal"] = False
    config["root"]["readonly"] = True
    # The host's network, so the test reaches the ports on loopback.
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
    config["mounts"] += [
        {"destination": "/models", "type": "bind", "source": str(models), "options": ["rbind", "ro"]},
        # The compiled-plugin cache: this test session's, so the Python runtime is not compiled again.
        {"destination": "/var/cache/tessera", "type": "bind", "source": str(component_cache), "options": ["rbind", "rw"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=64m"]},
    ]
    config_path.write_text(json.dumps(config))
    os.chmod(component_cache, 0o777)
    name = f"tessera-smoke-{os.getpid()}"
    log = open(tmp_path / "container.log", "w")
    container = subprocess.Popen(["runc", "run", "--bundle", str(bundle), name], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
    try:
        wait_until_answers(f"http://127.0.0.1:{http}/v2/health/ready", container, tmp_path / "container.log", timeout=300)
        state = json.loads(run("runc", "state", name))
        status = pathlib.Path(f"/proc/{state['pid']}/status").read_text()
        assert next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1] == "65532"
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        for module, url in ((httpclient, f"127.0.0.1:{http}"), (grpcclient, f"127.0.0.1:{grpc}")):
            client = module.InferenceServerClient(url)
            for model in ("simple", "simple_onnx", "add_sub_python"):
                result = client.infer(model, add_sub_inputs(module, data))
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2, err_msg=model)
            client.close()
        # The exec probe, inside the container.
        run("runc", "exec", name, "/opt/tessera/bin/tessera", "healthcheck", f"--http-port={http}")
        # Nothing can be written outside the mounts.
        refused = subprocess.run(["runc", "exec", name, "/opt/tessera/bin/tessera", "--model-repository=/models", "--log-file=/opt/x.log"],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "Read-only file system" in refused.stdout + refused.stderr
        run("runc", "kill", name, "TERM")
        assert container.wait(timeout=60) == 0, (tmp_path / "container.log").read_text()
        assert "stopped" in (tmp_path / "container.log").read_text()
    finally:
        if container.poll() is None:
            subprocess.run(["runc", "kill", name, "KILL"], capture_output=True)
            container.wait(timeout=30)
        subprocess.run(["runc", "delete", "--force", name], capture_output=True)
        log.close()
