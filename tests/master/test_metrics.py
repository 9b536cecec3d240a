"""The master's metrics: per-job series bounded, the leak gauges counting one master's own links,
and every metric that monitoring/ (alert rules, Grafana) reads exported under its name."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from prometheus_client import generate_latest

from coded.base.metrics import FINISHED_JOBS_KEPT
from coded.master.metrics import MasterMetrics, OpenCounts
from coded.worker.metrics import WorkerMetrics

from ..base.test_metrics import job_labels

REPO = Path(__file__).resolve().parents[2]


def record(metrics: MasterMetrics, job: str) -> None:
    metrics.iteration_seconds.labels(job, "cyclic").observe(0.1)
    metrics.responses.labels(job, "w0", "used").inc()
    metrics.responses.labels(job, "w1", "cancelled").inc()
    metrics.loss.labels(job).set(0.5)
    metrics.iterations.labels(job).inc()


def test_the_master_keeps_the_series_of_the_last_finished_jobs_only():
    metrics = MasterMetrics()
    jobs = [f"job{i}" for i in range(FINISHED_JOBS_KEPT + 10)]
    for job in [*jobs, "still-running"]:
        record(metrics, job)
    for job in jobs:
        metrics.job_finished(job)
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {"still-running"}


def scrape(metrics: MasterMetrics) -> str:
    """The master's /metrics text, scrape-time gauges included (registered from a running loop)."""
    async def scraped() -> str:
        metrics.watch_state(lambda: {"RUNNING": 1}, lambda: {"worker-0": True, "worker-1": False},
                            lambda: {"worker-1": "its heartbeats arrive but 3 calls in a row failed"})
        return generate_latest(metrics.registry).decode()

    return asyncio.run(scraped())


def test_the_leak_gauges_count_what_this_master_holds_open_not_the_process():
    first, second = MasterMetrics(), MasterMetrics()  # two masters in one process (tests do this)
    first.held.channels += 3
    first.held.connections += 2
    first.held.local += 1
    assert second.held == OpenCounts()
    text = scrape(first)
    assert "coded_master_worker_channels 3.0" in text
    assert "coded_master_data_connections 2.0" in text
    assert "coded_master_data_connections_local 1.0" in text
    assert "coded_master_worker_channels 0.0" in scrape(second)
    assert 'coded_worker_unusable{worker="worker-1"} 1.0' in text and 'unusable{worker="worker-0"}' not in text


def test_every_metric_that_monitoring_reads_is_exported_under_that_name():
    master = MasterMetrics()
    record(master, "job")
    for metric in (master.decode_seconds.labels("job", "cyclic"), master.response_seconds.labels("w0")):
        metric.observe(0.01)
    worker = WorkerMetrics()
    for metric in (worker.compute_seconds, worker.injected_delay_seconds):
        metric.labels("job").observe(0.01)
    lines = (scrape(master) + generate_latest(worker.registry).decode()).splitlines()
    # samples (a histogram's _bucket, ...), and the metrics that have none yet by their declaration
    exported = {line.split("{")[0].split()[0] for line in lines if not line.startswith("#")}
    exported |= {line.split()[2] for line in lines if line.startswith("# TYPE")}
    read = set()
    for path in [REPO / "monitoring/alerts.yml", *(REPO / "monitoring/grafana/dashboards").rglob("*.json")]:
        read |= set(re.findall(r"\bcoded_[a-z_]+", path.read_text()))
    assert len(read) > 20  # the files were found and read
    assert read <= exported, sorted(read - exported)
