"""Replicas behind a load balancer (issue #24), as a Deployment behind a Service runs them: three Tessera
processes on loopback behind HAProxy (Debian's), which health-checks each on `/v2/health/ready` and balances
HTTP and gRPC (HTTP/2) over them, while tritonclient threads call through it. One replica is drained with
SIGTERM (it reports not ready while still serving for `--exit-drain-secs`, HAProxy's health check takes it
out, then its ports close and it finishes what it holds): no request may fail. Then
another is killed with SIGKILL mid-run: only requests it held may fail, and the clients see them as
connection errors (HAProxy's 502/503, gRPC UNAVAILABLE). A Prometheus (Debian's) scrapes the replicas and
evaluates the autoscaling rule shipped in deploy/kubernetes (prometheus-adapter's query, the HPA's target):
idle it implies the minimum replica count, under a queueing load the maximum."""

import math
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from conftest import ROOT, Server, add_model, add_sub_inputs, free_ports, wait_for
from test_security import small_repo

DEPLOY = ROOT / "deploy" / "kubernetes"
REPLICAS = 3


def haproxy_config(http_port, grpc_port, replicas):
    servers_http = "\n".join(f"  server r{i} 127.0.0.1:{r.http_port} check" for i, r in enumerate(replicas))
    servers_grpc = "\n".join(f"  server r{i} 127.0.0.1:{r.grpc_port} proto h2 check port {r.http_port} check-proto h1"
                             for i, r in enumerate(replicas))
    checks = ("  balance roundrobin\n  option httpchk GET /v2/health/ready\n  http-check expect status 200\n"
              "  default-server inter 100ms fall 1 rise 2\n")
    return f"""global
  maxconn 1000
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  retries 3
  option redispatch
  retry-on conn-failure empty-response response-timeout
frontend http
  bind 127.0.0.1:{http_port}
  default_backend replicas_http
frontend grpc
  bind 127.0.0.1:{grpc_port} proto h2
  default_backend replicas_grpc
backend replicas_http
{checks}{servers_http}
backend replicas_grpc
{checks}{servers_grpc}
"""


def prometheus_config(replicas):
    targets = ", ".join(f'"127.0.0.1:{r.metrics_port}"' for r in replicas)
    # Each replica is a pod of the default namespace, as Kubernetes service discovery would label it.
    return f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tessera
    static_configs:
      - targets: [{targets}]
        labels:
          namespace: default
    relabel_configs:
      - source_labels: [__address__]
        target_label: pod
"""


def implied_replicas(prometheus_port):
    """The replica count the HPA in deploy/kubernetes would ask for now: prometheus-adapter's rule (its
    metricsQuery, for every pod of the namespace) evaluated by Prometheus, each pod's value against the HPA's
    AverageValue target, within its bounds."""
    rule = yaml.safe_load(yaml.safe_load((DEPLOY / "prometheus-adapter-rules.yaml").read_text())["data"]["config.yaml"])["rules"][0]
    hpa = yaml.safe_load((DEPLOY / "hpa.yaml").read_text())["spec"]
    query = rule["metricsQuery"].replace("<<.LabelMatchers>>", 'namespace="default",pod!=""').replace("<<.GroupBy>>", "pod")
    answer = requests.get(f"http://127.0.0.1:{prometheus_port}/api/v1/query", params={"query": query}, timeout=10).json()
    assert answer["status"] == "success", answer
    values = [float(sample["value"][1]) for sample in answer["data"]["result"]]
    target = float(hpa["metrics"][0]["pods"]["target"]["averageValue"])
    desired = math.ceil(sum(values) / target) if values else 0
    return min(max(desired, hpa["minReplicas"]), hpa["maxReplicas"]), values


class Traffic:
    """Client threads calling through the load balancer until stopped; every outcome kept with its time."""

    def __init__(self, http_url, grpc_url, threads=6, slow_threads=4):
        self.outcomes, self.lock, self.stopping = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.call, args=(i, http_url, grpc_url, False)) for i in range(threads)]
        # Slow requests (the sleep model, one instance a replica) make requests queue, for the autoscaling rule.
        self.threads += [threading.Thread(target=self.call, args=(i, http_url, grpc_url, True)) for i in range(slow_threads)]
        for thread in self.threads:
            thread.start()

    def call(self, index, http_url, grpc_url, slow):
        module, url = (httpclient, http_url) if index % 2 == 0 else (grpcclient, grpc_url)
        client = module.InferenceServerClient(url, **({"network_timeout": 30} if module is httpclient else {}))
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                if slow:
                    ms = module.InferInput("MS", [1], "INT32")
                    ms.set_data_from_numpy(np.array([20], dtype=np.int32))
                    ok = client.infer("sleep", [ms]).as_numpy("OUT").tolist() == [20]
                else:
                    ok = np.array_equal(client.infer("simple", add_sub_inputs(module, data)).as_numpy("OUTPUT0"), data * 2)
                outcome = "ok" if ok else "wrong answer"
            except Exception as e:  # what a failed call raises differs by client
                outcome = f"{type(e).__name__}: {e}"
                client.close()
                client = module.InferenceServerClient(url, **({"network_timeout": 30} if module is httpclient else {}))
            with self.lock:
                self.outcomes.append((started, time.monotonic(), outcome))
        client.close()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)


def test_three_replicas_behind_haproxy_drain_die_and_autoscale(tmp_path):
    for tool in ("haproxy", "prometheus"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian's package; `scripts/dev setup` installs it)")
    repo = small_repo(tmp_path / "repo")
    add_model(repo, "sleep", 'backend: "wasm"\ninstance_group [ { count: 1 } ]\n', plugin="sleep")
    # A drain of a second, as deploy/kubernetes has one of 5: HAProxy checks every 100 ms.
    replicas = [Server([repo], tmp_path, "--exit-drain-secs=1", cache_dir=tmp_path / "cache") for _ in range(REPLICAS)]
    processes = []
    traffic = None
    try:
        for replica in replicas:
            replica.wait_live()
        lb_http, lb_grpc, prometheus_port = free_ports(3)
        (tmp_path / "haproxy.cfg").write_text(haproxy_config(lb_http, lb_grpc, replicas))
        (tmp_path / "prometheus.yml").write_text(prometheus_config(replicas))
        haproxy_log = open(tmp_path / "haproxy.log", "w")
        processes.append(subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=haproxy_log,
                                          stderr=subprocess.STDOUT))
        prometheus_log = open(tmp_path / "prometheus.log", "w")
        processes.append(subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                           f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                           f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                                          stdout=prometheus_log, stderr=subprocess.STDOUT))

        def balanced():
            try:
                return requests.get(f"http://127.0.0.1:{lb_http}/v2/health/ready", timeout=1).status_code == 200
            except requests.ConnectionError:
                return False

        wait_for(balanced, timeout=30, what="HAProxy to find the replicas ready")

        def scraped():
            try:
                up = requests.get(f"http://127.0.0.1:{prometheus_port}/api/v1/query", params={"query": "up"}, timeout=1).json()
                return len([s for s in up["data"]["result"] if s["value"][1] == "1"]) == REPLICAS
            except (requests.ConnectionError, ValueError, KeyError):
                return False

        wait_for(scraped, timeout=60, what="Prometheus to scrape the three replicas")
        # Idle: the rule asks for the minimum.
        time.sleep(3)
        assert implied_replicas(prometheus_port)[0] == 1

        traffic = Traffic(f"127.0.0.1:{lb_http}", f"127.0.0.1:{lb_grpc}")
        # Under a load that queues, the rule asks for the maximum.
        wait_for(lambda: implied_replicas(prometheus_port)[0] == 3, timeout=30, what="the autoscaling rule to ask for 3 replicas")

        drained_at = time.monotonic()
        replicas[0].process.send_signal(signal.SIGTERM)
        assert replicas[0].wait_exit(timeout=30) == 0
        time.sleep(2)
        killed_at = time.monotonic()
        replicas[1].process.kill()
        replicas[1].wait_exit(timeout=30)
        time.sleep(2)
        traffic.stop()
        outcomes, clients = traffic.outcomes, len(traffic.threads)
        traffic = None

        before_kill = [o for o in outcomes if o[1] < killed_at]
        failed_before_kill = [o[2] for o in before_kill if o[2] != "ok"]
        assert failed_before_kill == [], f"{len(failed_before_kill)} of {len(before_kill)} failed before the kill: {failed_before_kill[:3]}"
        assert len([o for o in before_kill if o[0] > drained_at]) > 20, "too little traffic while one replica drained"
        # Only requests the killed replica held may fail: at most one per client thread, and as connection errors.
        failed = [o[2] for o in outcomes if o[2] != "ok"]
        assert len(failed) <= clients, failed
        for message in failed:
            assert any(word in message.lower() for word in ("502", "503", "unavailable", "connection", "reset", "closed")), message
        after_kill = [o for o in outcomes if o[0] > killed_at + 0.5]
        assert after_kill and all(o[2] == "ok" for o in after_kill), [o[2] for o in after_kill if o[2] != "ok"][:3]
        print(f"{len(outcomes)} requests, {len(failed)} failed (all at the SIGKILL)")
    finally:
        if traffic is not None:
            traffic.stop()
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
            else:
                replica.log_file.close()
