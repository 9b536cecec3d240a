"""Every Prometheus metric of the project, declared in one place.

Units are in the names, counters end in ``_total``, label keys are fixed, buckets explicit. Each
process (or test) builds its own :class:`MasterMetrics` / :class:`WorkerMetrics` on a registry of
its own, so nothing is global.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "FINISHED_JOBS_KEPT",
    "LATENCY_BUCKETS",
    "MasterMetrics",
    "WorkerMetrics",
    "metrics_note",
    "serve_metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Series labelled with a finished job stay scrapeable for the last this-many finished jobs, so that
# Prometheus sees their final values; older ones are dropped, or a long-lived master's memory and
# every scrape would grow with each job it ever ran.
FINISHED_JOBS_KEPT = 64

M = TypeVar("M", Counter, Gauge, Histogram)


class _JobSeries:
    """Drops the series of jobs that finished long ago (see FINISHED_JOBS_KEPT)."""

    registry: CollectorRegistry

    def __init__(self) -> None:
        self._finished: deque[str] = deque()
        self._lock = threading.Lock()
        self._job_metrics: list[Counter | Gauge | Histogram] = []

    def _per_job(self, metric: M) -> M:
        """Register a metric whose first label is ``job_id``."""
        self._job_metrics.append(metric)
        return metric

    def job_finished(self, job_id: str) -> None:
        """Mark ``job_id``'s series for removal after FINISHED_JOBS_KEPT more jobs finish."""
        with self._lock:
            if job_id in self._finished:
                return
            self._finished.append(job_id)
            expired = [self._finished.popleft() for _ in range(len(self._finished) - FINISHED_JOBS_KEPT)]
        for old in expired:
            for metric in self._job_metrics:
                metric.remove_by_labels({"job_id": old})


class _StateCollector(Collector):
    """Scrape-time gauges: jobs by state, workers alive (in total and each), the master's own load."""

    def __init__(self, jobs: Callable[[], dict[str, int]], workers: Callable[[], dict[str, bool]],
                 channels: Callable[[], int], connections: Callable[[], tuple[int, int]],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop  # scrapes run in the HTTP server's thread, not the loop's
        self._jobs = jobs
        self._workers = workers
        self._channels = channels
        self._connections = connections

    def collect(self) -> Iterable[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("coded_jobs", "Jobs known to the master, by state", labels=["state"])
        for state, count in sorted(self._jobs().items()):
            jobs.add_metric([state], count)
        yield jobs
        alive = self._workers()
        workers = GaugeMetricFamily("coded_workers", "Registered workers, by liveness", labels=["alive"])
        workers.add_metric(["true"], sum(alive.values()))
        workers.add_metric(["false"], len(alive) - sum(alive.values()))
        yield workers
        up = GaugeMetricFamily("coded_worker_up", "1 while a registered worker heartbeats and answers calls",
                               labels=["worker"])
        for name, is_alive in sorted(alive.items()):
            up.add_metric([name], float(is_alive))
        yield up
        # leak detectors: these return to their idle values once jobs finish
        yield GaugeMetricFamily("coded_master_asyncio_tasks", "Asyncio tasks alive in the master",
                                value=len(asyncio.all_tasks(self._loop)))
        yield GaugeMetricFamily("coded_master_threads", "Threads alive in the master", value=threading.active_count())
        yield GaugeMetricFamily("coded_master_worker_channels", "gRPC channels the master holds open to workers",
                                value=self._channels())
        connections, local = self._connections()
        yield GaugeMetricFamily("coded_master_data_connections", "Data-plane connections the master holds open to "
                                "workers (one per running job and worker)", value=connections)
        yield GaugeMetricFamily("coded_master_data_connections_local", "Of coded_master_data_connections, those on "
                                "the local (Unix) socket of a worker on the master's host", value=local)


class MasterMetrics(_JobSeries):
    """Metrics of the master."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.iteration_seconds = self._per_job(Histogram(
            "coded_iteration_duration_seconds", "Wall time of one iteration", ["job_id", "scheme"],
            buckets=LATENCY_BUCKETS, registry=r))
        self.response_seconds = Histogram(
            "coded_worker_response_seconds", "Time from sending an iteration to a worker to its full reply",
            ["worker"], buckets=LATENCY_BUCKETS, registry=r)
        self.responses = self._per_job(Counter(
            "coded_responses_total", "Worker replies by what became of them", ["job_id", "worker", "outcome"],
            registry=r))
        self.pieces = self._per_job(Counter(
            "coded_pieces_total", "Streamed pieces by what became of them: used (in the sum), checked (a second "
            "copy that confirmed a used one), spare (arrived after its piece was settled)", ["job_id", "outcome"],
            registry=r))
        self.stopped_pieces = self._per_job(Counter(
            "coded_stopped_pieces_used_total", "Streamed pieces used from workers that were stopped before they had "
            "sent all pieces of their own partition: the partial work of slow workers", ["job_id"], registry=r))
        self.decode_seconds = self._per_job(Histogram(
            "coded_decode_duration_seconds", "Time to decode one iteration's messages", ["job_id", "scheme"],
            buckets=FAST_BUCKETS, registry=r))
        self.bytes_sent = self._per_job(Counter(
            "coded_master_sent_bytes_total", "Payload bytes sent to workers", ["job_id"], registry=r))
        self.bytes_received = self._per_job(Counter(
            "coded_master_received_bytes_total", "Payload bytes received from workers", ["job_id"], registry=r))
        self.loss = self._per_job(Gauge("coded_job_loss", "Latest training loss", ["job_id"], registry=r))
        self.test_accuracy = self._per_job(Gauge(
            "coded_job_test_accuracy", "Latest test accuracy", ["job_id"], registry=r))
        self.iterations = self._per_job(Counter(
            "coded_job_iterations_total", "Iterations completed", ["job_id"], registry=r))
        self.errors_detected = self._per_job(Counter(
            "coded_errors_detected_total", "Wrong worker results found by decoding", ["job_id"], registry=r))
        self.errors_corrected = self._per_job(Counter(
            "coded_errors_corrected_total", "Wrong worker results decoded around", ["job_id"], registry=r))
        self.rollbacks = self._per_job(Counter(
            "coded_rollbacks_total", "CodeNet rollbacks to a checkpoint (errors beyond the code)", ["job_id"],
            registry=r))
        self.last_progress = self._per_job(Gauge(
            "coded_job_last_progress_timestamp_seconds", "When an unfinished job last completed an iteration",
            ["job_id"], registry=r))
        self.storage_errors = Counter(
            "coded_master_storage_errors_total", "Writes the state dir refused (full, read-only); jobs wait and retry",
            registry=r)
        self.decoding_failures = self._per_job(Counter(
            "coded_decoding_failures_total", "Rounds with more wrong results than the code corrects", ["job_id"],
            registry=r))
        self.wrong_replies = self._per_job(Counter(
            "coded_wrong_replies_total", "Worker replies located as wrong (non-finite, or inconsistent with the "
            "others) and left out", ["job_id", "worker"], registry=r))
        self.quarantines = self._per_job(Counter(
            "coded_worker_quarantines_total", "Workers taken out of a job for being located as wrong too often",
            ["job_id", "worker"], registry=r))
        self.worker_quarantined = self._per_job(Gauge(
            "coded_worker_quarantined", "1 while an unfinished job holds the worker out (quarantined)",
            ["job_id", "worker"], registry=r))

    def watch_state(self, jobs: Callable[[], dict[str, int]], workers: Callable[[], dict[str, bool]],
                    channels: Callable[[], int], connections: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        """Register scrape-time gauges: jobs by state, each worker's liveness, the master's tasks,
        threads, worker channels and data-plane connections (all, and those on local sockets; must
        be called from the master's event loop thread)."""
        self.registry.register(_StateCollector(jobs, workers, channels, connections, asyncio.get_running_loop()))


class WorkerMetrics(_JobSeries):
    """Metrics of a worker."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.compute_seconds = self._per_job(Histogram(
            "coded_worker_compute_seconds", "Time computing and encoding one stage", ["job_id"],
            buckets=LATENCY_BUCKETS, registry=r))
        self.injected_delay_seconds = self._per_job(Histogram(
            "coded_worker_injected_delay_seconds", "Straggler delay injected into one call", ["job_id"],
            buckets=LATENCY_BUCKETS, registry=r))
        self.calls = self._per_job(Counter(
            "coded_worker_calls_total", "Rounds (data plane) by outcome", ["job_id", "outcome"], registry=r))
        self.soft_errors = self._per_job(Counter(
            "coded_worker_soft_errors_injected_total", "Messages corrupted on purpose", ["job_id"], registry=r))
        self.bytes_received = Counter(
            "coded_worker_received_bytes_total", "Payload bytes received", registry=r)
        self.bytes_sent = Counter("coded_worker_sent_bytes_total", "Payload bytes sent", registry=r)
        self.running = Gauge("coded_worker_running_calls", "Rounds computing", registry=r)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> WSGIServer:
    """Serve ``/metrics`` from a daemon thread; port 0 picks a free port (``server.server_port``).

    Raises
    ------
    OSError
        "cannot listen on host:port (metrics): ..." when the port is taken.
    """
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        raise OSError(f"cannot listen on {host}:{port} (metrics): {(error.strerror or str(error)).lower()}") from None
    return server


def metrics_note(server: WSGIServer | None) -> str:
    """`` (metrics on port P)`` for a process's start-up line (``coded local`` reads it), or nothing."""
    return "" if server is None else f" (metrics on port {server.server_port})"
