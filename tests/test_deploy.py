"""The Kubernetes and KServe manifests (`deploy/`, issue #24): valid offline against Kubernetes' schemas and
KServe's CRDs (`../shared/kserve/validate_manifests.py`, strict: unknown fields refused), the few rules only
KServe's webhook or the API server's Go code check, and the command lines they give the container, which
must start Tessera and answer the probes they declare."""

import os
import functools
import http.server
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading

import pytest
import requests
import yaml

from conftest import BINARY, KSERVE_STORAGE_PYTHON, ROOT, Server, add_sub_inputs, free_ports, wait_until_answers
from test_security import small_repo

DEPLOY = ROOT / "deploy"
# KServe's CRDs and the validator live beside the checkout (they are data, not the project's);
# TESSERA_KSERVE_TOOLS points elsewhere.
KSERVE_TOOLS = pathlib.Path(os.environ.get("TESSERA_KSERVE_TOOLS") or ROOT.parent / "shared" / "kserve")


def documents(path):
    return [d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d]


def kustomized(tmp_path):
    """deploy/kubernetes as `kubectl kustomize` renders it, written to a file."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: deploy/kubernetes is a kustomization and needs it to render")
    rendered = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "kubernetes")], capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    out = tmp_path / "kubernetes.yaml"
    out.write_text(rendered.stdout)
    return out


def by_kind(paths):
    found = {}
    for path in paths:
        for document in documents(path):
            found.setdefault(document["kind"], []).append(document)
    return found


def test_the_manifests_validate_offline_against_kubernetes_and_kserve(tmp_path):
    if not (KSERVE_TOOLS / "validate_manifests.py").exists():
        pytest.skip(f"KServe's CRDs and validator are not at {KSERVE_TOOLS}")
    files = [kustomized(tmp_path), *sorted((DEPLOY / "kserve").glob("*.yaml"))]
    checked = subprocess.run([sys.executable, str(KSERVE_TOOLS / "validate_manifests.py"), "--crds", str(KSERVE_TOOLS), *map(str, files)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    kinds = re.findall(r"^ok +\S+ (\w+)/", checked.stdout, re.M)
    assert sorted(kinds) == sorted(["ConfigMap", "Service", "PersistentVolumeClaim", "Deployment", "HorizontalPodAutoscaler",
                                    "ClusterServingRuntime", "InferenceService"]), checked.stdout
    # The validator itself refuses what it should (a field KServe does not have), so a pass means something.
    broken = tmp_path / "broken.yaml"
    runtime = documents(DEPLOY / "kserve/clusterservingruntime.yaml")[0]
    runtime["spec"]["protocolVersion"] = ["v2"]
    broken.write_text(yaml.safe_dump(runtime))
    refused = subprocess.run([sys.executable, str(KSERVE_TOOLS / "validate_manifests.py"), "--crds", str(KSERVE_TOOLS), str(broken)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "protocolVersion" in refused.stdout + refused.stderr


def test_the_rules_only_kserves_webhook_and_the_api_server_check(tmp_path):
    kinds = by_kind([kustomized(tmp_path), *sorted((DEPLOY / "kserve").glob("*.yaml"))])
    (runtime,), (service,) = kinds["ClusterServingRuntime"], kinds["InferenceService"]
    spec = runtime["spec"]
    # The container KServe merges the predictor into, and the protocols the ports speak.
    assert [c["name"] for c in spec["containers"]] == ["kserve-container"]
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    # Model formats: no format listed twice, and one chosen automatically has a priority (KServe refuses
    # autoSelect formats without one when several runtimes support it).
    formats = [(f["name"], f.get("version")) for f in spec["supportedModelFormats"]]
    assert len(formats) == len(set(formats))
    assert all(f.get("priority", 0) >= 1 for f in spec["supportedModelFormats"] if f.get("autoSelect"))
    # The InferenceService names this runtime and a format it supports, from a storage KServe can download.
    predictor = service["spec"]["predictor"]
    assert predictor["model"]["runtime"] == runtime["metadata"]["name"]
    assert predictor["model"]["modelFormat"]["name"] in {name for name, _ in formats}
    assert re.match(r"^(gs|s3|pvc|https?|hf|oci|hdfs|webhdfs|azure)://", predictor["model"]["storageUri"])
    # KEDA is an autoscaler class only in Standard (raw Deployment) mode; an external Prometheus metric needs
    # its server and query, and an AverageValue target its averageValue.
    annotations = service["metadata"]["annotations"]
    assert annotations["serving.kserve.io/autoscalerClass"] == "keda"
    assert annotations["serving.kserve.io/deploymentMode"] in ("Standard", "RawDeployment")
    assert predictor["minReplicas"] <= predictor["maxReplicas"]
    for metric in predictor["autoScaling"]["metrics"]:
        external = metric["external"]
        assert metric["type"] == "External" and external["metric"]["backend"] == "prometheus"
        assert external["metric"]["serverAddress"].startswith("http") and "nv_inference_queue_duration_us" in external["metric"]["query"]
        assert external["target"]["type"] == "AverageValue" and float(external["target"]["averageValue"]) > 0
    # The HPA: a Pods metric takes only an AverageValue target, and it scales the Deployment that exists.
    (hpa,), (deployment,) = kinds["HorizontalPodAutoscaler"], kinds["Deployment"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert all(m["type"] == "Pods" and m["pods"]["target"]["type"] == "AverageValue" for m in hpa["spec"]["metrics"])
    # The adapter rule makes the metric the HPA asks for.
    (rules,) = kinds["ConfigMap"]
    rule = yaml.safe_load(rules["data"]["config.yaml"])["rules"][0]
    assert rule["name"]["as"] == hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]


def container_args(document, repository, cache, ports):
    """The container's arguments, with its paths and ports made this test's."""
    container = (document["spec"].get("template", {}).get("spec") or document["spec"])["containers"][0]
    args = []
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        if flag in ("--model-repository", "--model-store"):
            value = str(repository)
        elif flag == "--cache-dir":
            value = str(cache)
        elif flag in ports:
            value = str(ports[flag])
        args.append(f"{flag}={value}" if _ else arg)
    return container, args


@pytest.mark.parametrize("manifest", ["kubernetes/deployment.yaml", "kserve/clusterservingruntime.yaml"])
def test_the_container_command_lines_start_tessera_and_answer_the_probes(tmp_path, manifest):
    repository = small_repo(tmp_path / "models")
    document = documents(DEPLOY / manifest)[0]
    http, grpc, metrics = free_ports(3)
    declared = {"--http-port": http, "--grpc-port": grpc, "--metrics-port": metrics}
    container, args = container_args(document, repository, tmp_path / "cache", declared)
    # Ports the manifest does not set are tritonserver's defaults (8000, 8001, 8002): moved to free ones.
    args += [f"{flag}={port}" for flag, port in declared.items() if not any(a.startswith(flag + "=") for a in args)]
    log = open(tmp_path / "tessera.log", "w")
    process = subprocess.Popen([str(BINARY), *args, "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                                "--metrics-address=127.0.0.1"], stdout=log, stderr=subprocess.STDOUT)
    try:
        for probe in ("readinessProbe", "livenessProbe"):
            path = container[probe]["httpGet"]["path"]
            wait_until_answers(f"http://127.0.0.1:{http}{path}", process, tmp_path / "tessera.log")
        assert requests.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5).status_code == 200
        # SIGTERM, as the kubelet sends it: out well within the grace period.
        grace = document["spec"].get("template", {}).get("spec", {}).get("terminationGracePeriodSeconds", 30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=grace) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def test_kserves_storage_initializer_fetches_a_repository_tessera_serves(tmp_path):
    """What KServe does before the runtime starts: its storage initializer (kserve-storage, as in KServe's
    storage-initializer container) downloads `storageUri`, a repository tarball over HTTP here, and unpacks it
    into /mnt/models; the runtime's command line then serves it."""
    source = small_repo(tmp_path / "source")
    shutil.copytree(ROOT / "model_repository/simple_onnx", source / "simple_onnx")
    site = tmp_path / "site"
    site.mkdir()
    with tarfile.open(site / "repository.tar.gz", "w:gz") as tar:
        for model in source.iterdir():
            tar.add(model, arcname=model.name)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    mounted = tmp_path / "mnt" / "models"
    mounted.mkdir(parents=True)
    try:
        uri = f"http://127.0.0.1:{files.server_address[1]}/repository.tar.gz"
        fetched = subprocess.run([str(KSERVE_STORAGE_PYTHON), "-c", "import sys\nfrom kserve_storage import Storage\n"
                                  "Storage.download(sys.argv[1], sys.argv[2])", uri, str(mounted)],
                                 capture_output=True, text=True, timeout=120)
        assert fetched.returncode == 0, fetched.stderr
    finally:
        files.shutdown()
    assert sorted(p.name for p in mounted.iterdir()) == ["simple", "simple_onnx"]
    runtime = documents(DEPLOY / "kserve/clusterservingruntime.yaml")[0]
    _, args = container_args(runtime, mounted, tmp_path / "cache", {})
    # Server gives free ports of its own instead of the runtime's.
    args = [a for a in args if not a.startswith(("--http-port=", "--grpc-port="))]
    server = Server([], tmp_path, *args).wait_live()
    try:
        import numpy as np
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient

        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            client = module.InferenceServerClient(url)
            for model in ("simple", "simple_onnx"):
                result = client.infer(model, add_sub_inputs(module, data))
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
            client.close()
    finally:
        assert server.stop() == 0


def test_kserves_own_triton_runtime_arguments_start_tessera(tmp_path):
    """KServe's stock `kserve-tritonserver` runtime gives the container `tritonserver` and its flags as
    arguments; in Tessera's image they follow the entrypoint, so `tessera tritonserver …` must serve."""
    repository = small_repo(tmp_path / "mnt" / "models")
    http, grpc, metrics = free_ports(3)
    # KServe's config/runtimes/kserve-tritonserver.yaml, with free ports for its 8080 and 9000.
    args = ["tritonserver", f"--model-store={repository}", f"--grpc-port={grpc}", f"--http-port={http}",
            "--allow-grpc=true", "--allow-http=true", f"--metrics-port={metrics}", f"--cache-dir={tmp_path / 'cache'}"]
    log = open(tmp_path / "tessera.log", "w")
    process = subprocess.Popen([str(BINARY), *args], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_answers(f"http://127.0.0.1:{http}/v2/models/simple/ready", process, tmp_path / "tessera.log")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
