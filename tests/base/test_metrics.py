"""Per-job metric series are bounded: a long-lived process does not grow with every job it ran."""

from __future__ import annotations

from prometheus_client import generate_latest

from coded.base.metrics import FINISHED_JOBS_KEPT, MasterMetrics, WorkerMetrics


def job_labels(text: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        if line.startswith("#") or 'job_id="' not in line:
            continue
        found.add(line.split('job_id="', 1)[1].split('"', 1)[0])
    return found


def record_master(metrics: MasterMetrics, job: str) -> None:
    metrics.iteration_seconds.labels(job, "cyclic").observe(0.1)
    metrics.responses.labels(job, "w0", "used").inc()
    metrics.responses.labels(job, "w1", "cancelled").inc()
    metrics.loss.labels(job).set(0.5)
    metrics.iterations.labels(job).inc()


def test_master_keeps_the_series_of_the_last_finished_jobs_only():
    metrics = MasterMetrics()
    jobs = [f"job{i}" for i in range(FINISHED_JOBS_KEPT + 10)]
    for job in jobs:
        record_master(metrics, job)
    running = "still-running"
    record_master(metrics, running)
    for job in jobs:
        metrics.job_finished(job)
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {running}
    metrics.job_finished(jobs[-1])  # finishing twice (a retried release) does not evict another job
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {running}


def test_worker_drops_old_jobs_series_too():
    metrics = WorkerMetrics()
    for i in range(FINISHED_JOBS_KEPT + 1):
        metrics.calls.labels(f"job{i}", "completed").inc()
        metrics.compute_seconds.labels(f"job{i}").observe(0.01)
        metrics.job_finished(f"job{i}")
    metrics.bytes_sent.inc(10)
    text = generate_latest(metrics.registry).decode()
    assert job_labels(text) == {f"job{i}" for i in range(1, FINISHED_JOBS_KEPT + 1)}
    assert "coded_worker_sent_bytes_total 10.0" in text
