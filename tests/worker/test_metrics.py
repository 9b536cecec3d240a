"""The worker's per-job metric series are bounded too."""

from __future__ import annotations

from prometheus_client import generate_latest

from coded.base.metrics import FINISHED_JOBS_KEPT
from coded.worker.metrics import WorkerMetrics

from ..base.test_metrics import job_labels


def test_the_worker_drops_old_jobs_series_and_keeps_its_totals():
    metrics = WorkerMetrics()
    for i in range(FINISHED_JOBS_KEPT + 1):
        metrics.calls.labels(f"job{i}", "completed").inc()
        metrics.compute_seconds.labels(f"job{i}").observe(0.01)
        metrics.job_finished(f"job{i}")
    metrics.bytes_sent.inc(10)
    text = generate_latest(metrics.registry).decode()
    assert job_labels(text) == {f"job{i}" for i in range(1, FINISHED_JOBS_KEPT + 1)}
    assert "coded_worker_sent_bytes_total 10.0" in text
