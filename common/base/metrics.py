"""The metric machinery every process shares: buckets, a process's registry whose per-job series
are bounded, and the HTTP exposition of ``/metrics``.

The metrics themselves are declared with their process: :mod:`coded.master.metrics` and
:mod:`coded.worker.metrics`. Units are in the names, counters end in ``_total``, label keys are
fixed, buckets explicit. Each process (or test) builds its own metrics on a registry of its own,
so nothing is global.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = [
    "FAST_BUCKETS",
    "FINISHED_JOBS_KEPT",
    "LATENCY_BUCKETS",
    "ProcessMetrics",
    "Series",
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


class Series:
    """Labelled series of metrics, each looked up once: ``series(metric, *labels)`` is
    ``metric.labels(*labels)``. A lookup takes the metric's lock and builds its key, and a round
    updates the same few series every time. Kept by what lives as long as the series it holds
    (a job's runner, a job held by a worker)."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def __call__(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


class ProcessMetrics:
    """The metrics of one process on a registry of its own (``registry``, or a new one); the series
    of jobs that finished long ago are dropped (see FINISHED_JOBS_KEPT)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
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
