"""Monitoring with a real Prometheus (Debian's package, installed by `make test-monitoring`):
the configuration and rules pass promtool, the metrics pass `promtool check metrics`, and every
PromQL expression of the Grafana dashboard and of the alert rules returns data from a real cluster
running real jobs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.cluster.local import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "monitoring" / "grafana"))
from generate import expressions  # noqa: E402

pytestmark = pytest.mark.system
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, input=None)


def test_promtool_accepts_the_configuration_and_the_rules():
    config = promtool("check", "config", str(REPO / "monitoring/prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    rules = promtool("check", "rules", str(REPO / "monitoring/alerts.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    tests = promtool("test", "rules", str(REPO / "monitoring/tests/alerts_test.yml"))
    assert tests.returncode == 0, tests.stdout + tests.stderr


def query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def until(condition, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except OSError:  # Prometheus is still starting
            value = None
        if value:
            return value
        time.sleep(0.5)  # polling a condition, not waiting for time to pass
    raise AssertionError("condition not met in time")


def alert_expressions() -> list[str]:
    rules = yaml.safe_load((REPO / "monitoring/alerts.yml").read_text())
    out = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            # the series under the threshold: an alert that is not firing must still have data
            out.append(re.sub(r"\s*(>|<|==|!=|>=|<=)\s*[0-9.]+\s*$", "", " ".join(rule["expr"].split())))
    return out


def test_every_dashboard_and_alert_expression_returns_data(tmp_path):
    cluster = LocalCluster(6, tmp_path / "cluster", metrics=True)
    cluster.start()
    prometheus = None
    try:
        port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(REPO / "monitoring/alerts.yml")],
            "scrape_configs": [
                {"job_name": "coded-master", "static_configs": [{"targets": [
                    f"127.0.0.1:{cluster.metrics_ports['master']}"]}]},
                {"job_name": "coded-workers", "static_configs": [{"targets": [
                    f"127.0.0.1:{p}" for key, p in cluster.metrics_ports.items() if key != "master"]}]},
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until(lambda: len([r for r in query(port, "up") if r["value"][1] == "1"]) == 7)
        for target in ("master", 0):
            text = urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[target]}/metrics").read()
            checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60)
            assert checked.returncode == 0, checked.stdout + checked.stderr
        with cluster.client() as client:
            base = {"kind": "gradient_coding", "workers": 6, "model": {"type": "logistic"},
                    "data": {"type": "gaussian_mixture", "samples": 2000, "features": 10, "seed": 1},
                    "optimizer": {"type": "nesterov", "lr": 0.5}, "eval_every": 2, "seed": 1,
                    "stream": {}}  # the pieces panels need pieces: a job this small may be given whole replies
            stragglers = {"stragglers": {"model": "fixed", "workers": [5], "delay": 0.5}}
            job = client.wait(client.submit(yaml.safe_dump({**base, "code": {"scheme": "cyclic", "stragglers": 2},
                                                             "iterations": 20, "faults": stragglers})).id)
            assert job.state == JobState.SUCCEEDED, job.reason
            matmul = {"kind": "matmul", "workers": 6, "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 1},
                      "inputs": {"generate": {"a": [40, 30], "b": [30, 20], "seed": 1}}, "verify": {"errors": 1}}
            soft = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 10.0, "workers": [1]}}
            job = client.wait(client.submit(yaml.safe_dump({**matmul, "faults": soft})).id)
            assert job.state == JobState.SUCCEEDED, job.reason
            too_many = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 10.0,
                                        "workers": [0, 1, 2, 3]}}
            job = client.wait(client.submit(yaml.safe_dump({**matmul, "faults": too_many})).id)
            assert job.state == JobState.FAILED
            codenet = {"kind": "codenet", "code": {"m": 1, "n": 1, "t": 1}, "model": {"hidden": [8]},
                       "data": {"type": "digits"}, "optimizer": {"lr": 0.1, "batch": 4}, "iterations": 30,
                       "checkpoint_every": 5, "seed": 1,
                       "faults": {"soft_errors": {"probability": 0.05, "model": "gaussian", "scale": 10.0}}}
            job = client.wait(client.submit(yaml.safe_dump(codenet)).id)
            assert job.state == JobState.SUCCEEDED and job.stats["rollbacks"] > 0, (job.reason, dict(job.stats))
            running = client.submit(yaml.safe_dump({**base, "code": {"scheme": "cyclic", "stragglers": 2},
                                                    "iterations": 100000, "faults": stragglers}))
            until(lambda: client.get(running.id).iteration >= 10, timeout=60)
            cluster.kill_worker(4)  # gone: the running job goes on (s = 2), and a worker is down
            until(lambda: query(port, 'sum(coded_workers{alive="false"})') and
                  float(query(port, 'sum(coded_workers{alive="false"})')[0]["value"][1]) > 0)
            progressed = client.get(running.id).iteration
            until(lambda: client.get(running.id).iteration >= progressed + 20, timeout=60)
            # rates need several scrapes of the running job's series, however slow the scrapes were
            until(lambda: query(port, f'count_over_time(coded_job_iterations_total{{job_id="{running.id}"}}[1m]) >= 5'
                                f' and increase(coded_job_iterations_total{{job_id="{running.id}"}}[1m]) > 0'))
            state = client.get(running.id)
            assert state.state == JobState.RUNNING, (state.state, state.reason)
            empty = []
            for expr in expressions() + alert_expressions():
                result = query(port, expr)
                values = [float(r["value"][1]) for r in result]
                if not result or all(np.isnan(v) for v in values):
                    empty.append(expr)
            assert not empty, f"expressions with no data: {empty}"
            client.cancel(running.id)
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        cluster.stop()
