"""The docker-compose topology, run for real without Docker: every service's command and
environment, read from docker-compose.yml, runs in its own network namespace; the namespaces are
joined by veth pairs to a bridge living in a namespace of its own; service names resolve through
per-namespace hosts files (``coded.links.netns.Network``). A job runs across the hosts, one worker
host's link is cut mid-job (the job still finishes), and `tc tbf` on another makes a bandwidth
straggler; the master's metrics, scraped across the namespaces, show the first as gone and the
second as a straggler.

Everything (namespaces, links, addresses, hosts files, processes) is created and removed by the
harness, and checked to be gone; addresses exist only inside its namespaces. Needs root and
iproute2 (`make test-system`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from coded.links.netns import Network

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.system
WORKERS = 6


def compose_services() -> dict:
    tool = Path(sys.executable).parent / "docker-compose"
    rendered = subprocess.run([str(tool), "-f", str(REPO / "docker-compose.yml"), "config"], capture_output=True,
                              text=True, timeout=60, check=True, env={**os.environ, "CODED_TOKEN": "netns-test-token"})
    return yaml.safe_load(rendered.stdout)["services"]


def command(service: dict, state: Path, certs: Path) -> list[str]:
    """The service's command for the `coded` entry point, with its state dir, the certificates and
    the CA's key (made by the compose file's `certs` service there, by the same code here) moved
    into the test's."""
    args = [str(a) for a in service["command"]]
    return [str(state) if a == "/home/coded/state" else
            a.replace("/home/coded/certs", str(certs)).replace("/home/coded/ca/", f"{state / 'ca'}/") for a in args]


@pytest.fixture
def hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("this system test needs root and iproute2 (run it with `make test-system`)")
    names = ["master", *[f"worker{k}" for k in range(WORKERS)], "client"]
    made = Network(names)
    yield made
    made.close()
    assert made.leftovers() == []


def test_the_compose_topology_runs_across_namespaces_through_a_cut_link_and_a_slow_one(hosts, tmp_path):
    services = compose_services()
    certs = tmp_path / "certs"
    made = subprocess.run([sys.executable, "-m", "coded.cli", *command(services["certs"], tmp_path, certs)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert made.returncode == 0, made.stderr
    tls = ["--tls-cert", str(certs / "cert.pem"), "--tls-key", str(certs / "key.pem"),
           "--tls-ca", str(certs / "ca.pem")]
    env = {**os.environ, **{k: str(v) for k, v in services["master"]["environment"].items()},
           "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    coded = [sys.executable, "-m", "coded.cli"]
    hosts.run("master", coded + command(services["master"], tmp_path / "master", certs), env, tmp_path / "master.log")
    for k in range(WORKERS):
        hosts.run(f"worker{k}", coded + command(services["worker"], tmp_path / f"w{k}", certs), env,
                  tmp_path / f"worker{k}.log")

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return hosts.call("client", coded + list(args) + ["--master", "master:50051", *tls], env, timeout)

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # polls a condition: all workers registered
        listed = cli("workers", "--json", timeout=30)
        if listed.returncode == 0 and sum(w["alive"] for w in json.loads(listed.stdout)) == WORKERS:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"workers did not register: {listed.stdout} {listed.stderr}\n"
                             + (tmp_path / "worker0.log").read_text()[-2000:])
    workers = {w["address"].split(":")[0]: w["name"] for w in json.loads(listed.stdout)}
    assert set(workers) == {hosts.address(f"worker{k}") for k in range(WORKERS)}

    throttled, cut = "worker1", "worker4"
    hosts.shape(throttled, "2mbit", burst=16 * 1024)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "kind": "gradient_coding", "workers": WORKERS, "code": {"scheme": "cyclic", "stragglers": 2},
        "model": {"type": "logistic"},
        "data": {"type": "gaussian_mixture", "samples": 3000, "features": 4000, "seed": 1},
        "optimizer": {"type": "nesterov", "lr": 0.05}, "iterations": 40, "eval_every": 0, "seed": 3,
        "faults": {"stragglers": {"model": "shifted_exponential", "shift": 0.05, "mean": 0.01}}}))
    submitted = cli("submit", str(spec))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = json.loads(cli("status", job_id, "--json").stdout)
        if status["iterations"] >= 8:
            break
        time.sleep(0.3)
    hosts.cut(cut)  # the host drops off the network
    cut_at = json.loads(cli("status", job_id, "--json").stdout)["iterations"]
    final = cli("watch", job_id, "--json", timeout=300)
    assert final.returncode == 0, final.stdout + final.stderr
    report = json.loads(final.stdout)
    assert report["state"] == "SUCCEEDED" and report["iterations"] == 40
    index = {name: position for position, name in enumerate(report["workers"])}
    gone = index[workers[hosts.address(cut)]]
    slow = index[workers[hosts.address(throttled)]]
    history = report["history"]
    assert all(gone not in r["responders"] for r in history[cut_at + 1:])
    used = Counter(p for r in history for p in r["responders"])
    fast = [p for p in range(WORKERS) if p not in (gone, slow)]
    assert used[slow] < min(used[p] for p in fast), used  # the bandwidth straggler is cut off

    scrape = [sys.executable, "-c", "import urllib.request; print(urllib.request.urlopen("
              "'http://master:9100/metrics', timeout=10).read().decode())"]
    slow_name, gone_name = report["workers"][slow], report["workers"][gone]
    # a worker counts as gone once it has missed heartbeats for --worker-timeout (3 s); the job may
    # end sooner after the cut, so read the metrics until the master has noticed
    deadline = time.monotonic() + 30
    while True:
        page = hosts.call("client", scrape, env, timeout=30)
        assert page.returncode == 0, page.stderr
        samples = [s for family in text_string_to_metric_families(page.stdout) for s in family.samples]
        up = {s.labels["worker"]: s.value for s in samples if s.name == "coded_worker_up"}
        if up[gone_name] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    cut_off = Counter({s.labels["worker"]: s.value for s in samples if s.name == "coded_responses_total"
                       and s.labels["outcome"] == "cancelled"})
    assert up[gone_name] == 0 and up[slow_name] == 1  # gone is an erasure; slow but alive is not
    assert cut_off[slow_name] > max(cut_off[report["workers"][p]] for p in fast), cut_off  # ... but a straggler
