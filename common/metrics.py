"""Every Prometheus metric of the project, declared in one place.

Units are in the names, counters end in ``_total``, label keys are fixed, buckets explicit. Each
process (or test) builds its own :class:`MasterMetrics` / :class:`WorkerMetrics` on a registry of
its own, so nothing is global.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["MasterMetrics", "WorkerMetrics", "LATENCY_BUCKETS"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _StateCollector(Collector):
    """Scrape-time gauges: jobs by state, workers alive."""

    def __init__(self, jobs: Callable[[], dict[str, int]], workers: Callable[[], tuple[int, int]]) -> None:
        self._jobs = jobs
        self._workers = workers

    def collect(self) -> Iterable[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("coded_jobs", "Jobs known to the master, by state", labels=["state"])
        for state, count in sorted(self._jobs().items()):
            jobs.add_metric([state], count)
        yield jobs
        alive, total = self._workers()
        workers = GaugeMetricFamily("coded_workers", "Registered workers, by liveness", labels=["alive"])
        workers.add_metric(["true"], alive)
        workers.add_metric(["false"], total - alive)
        yield workers


class MasterMetrics:
    """Metrics of the master."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.iteration_seconds = Histogram(
            "coded_iteration_duration_seconds", "Wall time of one iteration", ["job", "scheme"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.response_seconds = Histogram(
            "coded_worker_response_seconds", "Time from sending an iteration to a worker to its full reply",
            ["worker"], buckets=LATENCY_BUCKETS, registry=r)
        self.responses = Counter(
            "coded_responses_total", "Worker replies by what became of them", ["job", "outcome"], registry=r)
        self.decode_seconds = Histogram(
            "coded_decode_duration_seconds", "Time to decode one iteration's messages", ["job", "scheme"],
            buckets=FAST_BUCKETS, registry=r)
        self.bytes_sent = Counter("coded_master_sent_bytes_total", "Payload bytes sent to workers", ["job"], registry=r)
        self.bytes_received = Counter(
            "coded_master_received_bytes_total", "Payload bytes received from workers", ["job"], registry=r)
        self.loss = Gauge("coded_job_loss", "Latest training loss", ["job"], registry=r)
        self.test_accuracy = Gauge("coded_job_test_accuracy", "Latest test accuracy", ["job"], registry=r)
        self.iterations = Counter("coded_job_iterations_total", "Iterations completed", ["job"], registry=r)
        self.errors_detected = Counter(
            "coded_errors_detected_total", "Wrong worker results found by decoding", ["job"], registry=r)
        self.errors_corrected = Counter(
            "coded_errors_corrected_total", "Wrong worker results decoded around", ["job"], registry=r)
        self.rollbacks = Counter(
            "coded_rollbacks_total", "CodeNet rollbacks to a checkpoint (errors beyond the code)", ["job"], registry=r)
        self.last_progress = Gauge(
            "coded_job_last_progress_timestamp_seconds", "When an unfinished job last completed an iteration",
            ["job"], registry=r)
        self.decoding_failures = Counter(
            "coded_decoding_failures_total", "Rounds with more wrong results than the code corrects", ["job"],
            registry=r)

    def watch_state(self, jobs: Callable[[], dict[str, int]], workers: Callable[[], tuple[int, int]]) -> None:
        """Register scrape-time gauges for jobs by state and workers alive."""
        self.registry.register(_StateCollector(jobs, workers))


class WorkerMetrics:
    """Metrics of a worker."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.compute_seconds = Histogram(
            "coded_worker_compute_seconds", "Time computing and encoding one stage", ["job"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.injected_delay_seconds = Histogram(
            "coded_worker_injected_delay_seconds", "Straggler delay injected into one call", ["job"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.calls = Counter(
            "coded_worker_calls_total", "Compute calls by outcome", ["job", "outcome"], registry=r)
        self.soft_errors = Counter(
            "coded_worker_soft_errors_injected_total", "Messages corrupted on purpose", ["job"], registry=r)
        self.bytes_received = Counter(
            "coded_worker_received_bytes_total", "Payload bytes received", registry=r)
        self.bytes_sent = Counter("coded_worker_sent_bytes_total", "Payload bytes sent", registry=r)
        self.running = Gauge("coded_worker_running_calls", "Compute calls in progress", registry=r)
