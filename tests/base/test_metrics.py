"""Per-job metric series are bounded: a long-lived process does not grow with every job it ran."""

from __future__ import annotations

from prometheus_client import Counter, generate_latest

from coded.base.metrics import FINISHED_JOBS_KEPT, ProcessMetrics


def job_labels(text: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        if line.startswith("#") or 'job_id="' not in line:
            continue
        found.add(line.split('job_id="', 1)[1].split('"', 1)[0])
    return found


def test_a_process_keeps_the_series_of_the_last_finished_jobs_only():
    metrics = ProcessMetrics()
    calls = metrics._per_job(Counter("calls_total", "Calls", ["job_id"], registry=metrics.registry))
    jobs = [f"job{i}" for i in range(FINISHED_JOBS_KEPT + 10)]
    for job in [*jobs, "still-running"]:
        calls.labels(job).inc()
    for job in jobs:
        metrics.job_finished(job)
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {"still-running"}
    metrics.job_finished(jobs[-1])  # finishing twice (a retried release) does not evict another job
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {"still-running"}
