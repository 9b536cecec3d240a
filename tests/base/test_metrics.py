"""Per-job metric series are bounded: a long-lived process does not grow with every job it ran;
tallies expose what prometheus_client's own metrics would."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from coded.base.metrics import FINISHED_JOBS_KEPT, LATENCY_BUCKETS, ProcessMetrics, Tally


def job_labels(text: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        if line.startswith("#") or 'job_id="' not in line:
            continue
        found.add(line.split('job_id="', 1)[1].split('"', 1)[0])
    return found


@pytest.mark.parametrize("kind", [Counter, Tally])
def test_a_process_keeps_the_series_of_the_last_finished_jobs_only(kind):
    metrics = ProcessMetrics()
    calls = metrics._per_job(kind("calls_total", "Calls", ["job_id"], registry=metrics.registry))
    jobs = [f"job{i}" for i in range(FINISHED_JOBS_KEPT + 10)]
    for job in [*jobs, "still-running"]:
        calls.labels(job).inc()
    for job in jobs:
        metrics.job_finished(job)
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {"still-running"}
    metrics.job_finished(jobs[-1])  # finishing twice (a retried release) does not evict another job
    assert job_labels(generate_latest(metrics.registry).decode()) == set(jobs[10:]) | {"still-running"}


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a registry but the ``_created`` times, by name and labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples if not s.name.endswith("_created")}


def test_tallies_expose_the_samples_prometheus_clients_metrics_expose_for_the_same_updates():
    """The same observations (edges of buckets included) and increments, made on a tally and
    on prometheus_client's Histogram and Counter: the same samples, in the text format too."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    values = [*LATENCY_BUCKETS, 0.0, 1e-9, 61.0, *np.random.default_rng(3).exponential(0.05, 500)]
    for registry, histogram, counter in ((ours, Tally, Tally), (theirs, Histogram, Counter)):
        seconds = histogram("t_seconds", "Seconds", ["job_id"], buckets=LATENCY_BUCKETS, registry=registry)
        calls = counter("t_calls_total", "Calls", ["job_id", "outcome"], registry=registry)
        sent = counter("t_sent_bytes_total", "Bytes", registry=registry)
        for i, value in enumerate(values):
            seconds.labels(f"job{i % 3}").observe(float(value))
            calls.labels(f"job{i % 2}", "completed" if i % 5 else "stopped").inc()
            sent.inc(8 * i)
    assert samples(ours) == pytest.approx(samples(theirs))
    text = [line for line in generate_latest(theirs).decode().splitlines() if "_created" not in line]
    assert generate_latest(ours).decode().splitlines() == text


def test_a_tally_refuses_wrong_labels_and_a_name_taken():
    registry = CollectorRegistry()
    calls = Tally("t_calls_total", "Calls", ["job_id", "outcome"], registry=registry)
    with pytest.raises(ValueError, match="takes labels"):
        calls.labels("job")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("t_calls_total", "Calls again", registry=registry)


def test_a_process_shows_its_resident_memory_and_its_peak_which_holds_after_freeing():
    metrics = ProcessMetrics()

    def sample(name: str) -> float:
        value = metrics.registry.get_sample_value(name)
        assert value is not None, name
        return value

    before = sample("coded_process_peak_resident_memory_bytes")
    block = np.ones(200 * 2**20 // 8)  # 200 MiB, every page touched
    held = sample("process_resident_memory_bytes")
    peak = sample("coded_process_peak_resident_memory_bytes")
    # the kernel's memory counters are batched per thread (up to a few hundred KiB behind), and
    # the two metrics read different ones (/proc/self/status, /proc/self/stat)
    slack = 2**20
    # the process may have peaked higher before (earlier tests): the peak never falls below it
    assert peak >= held - slack and held >= block.nbytes and peak >= before - slack
    del block
    assert sample("coded_process_peak_resident_memory_bytes") >= peak - slack
    assert sample("process_resident_memory_bytes") < held - 0.9 * 200 * 2**20  # returned to the system
