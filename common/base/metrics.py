"""The metric machinery every process shares: buckets, a process's registry whose per-job series
are bounded, and the HTTP exposition of ``/metrics``.

The metrics themselves are declared with their process: :mod:`coded.master.metrics` and
:mod:`coded.worker.metrics`. Units are in the names, counters end in ``_total``, label keys are
fixed, buckets explicit. Each process (or test) builds its own metrics on a registry of its own,
so nothing is global.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from coded.base.memory import resident_memory

__all__ = [
    "FAST_BUCKETS",
    "FINISHED_JOBS_KEPT",
    "LATENCY_BUCKETS",
    "PeakMemory",
    "ProcessMetrics",
    "Series",
    "Tally",
    "metrics_note",
    "serve_metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Series labelled with a finished job stay scrapeable for the last this-many finished jobs, so that
# Prometheus sees their final values; older ones are dropped, or a long-lived master's memory and
# every scrape would grow with each job it ever ran.
FINISHED_JOBS_KEPT = 64


class _Count:
    """One series of a counting :class:`Tally`."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Buckets:
    """One series of a histogram :class:`Tally`: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # the first bound >= value: "le"
        self.sum += value


class Tally(Collector):
    """A counter, or with ``buckets`` a histogram, for what changes at every round: a series'
    ``inc`` or ``observe`` is one or two plain additions, and the registry reads the series when
    it is scraped, in Prometheus' format (the same samples as prometheus_client's Counter and
    Histogram, without ``_created``).

    prometheus_client's own take a lock per update and a histogram one per bucket it touches: a
    worker makes five such updates per round, and they measured 5% of a round of logistic
    regression on 12,000 rows among six workers on two cores (issue 23). Only the thread that
    runs the event loop updates a tally (a scrape, from another thread, reads a consistent
    value of each number); metrics updated from other threads stay prometheus_client's.

    Parameters
    ----------
    name, documentation : str
        A counter's name ends in ``_total``.
    labelnames : sequence of str
        Without labels, the tally is its own single series (``inc`` / ``observe``).
    buckets : sequence of float, optional
        A histogram's upper bounds, ascending (+Inf is added).
    registry : CollectorRegistry, optional
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] | None = None, registry: CollectorRegistry | None = None) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = None if buckets is None else tuple(float(b) for b in buckets if b != float("inf"))
        self._series: dict[tuple[str, ...], Any] = {}
        self._single = None if self.labelnames else self.labels()
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> Any:
        """The series of these label values (made at its first use)."""
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {list(self.labelnames)}, got {list(values)}")
            series = self._series[values] = _Count() if self.bounds is None else _Buckets(self.bounds)
        return series

    def inc(self, amount: float = 1.0) -> None:
        assert self._single is not None, f"{self.name} has labels"
        self._single.inc(amount)

    def observe(self, value: float) -> None:
        assert self._single is not None, f"{self.name} has labels"
        self._single.observe(value)

    def remove_by_labels(self, labels: dict[str, str]) -> None:
        """Drop the series whose labels include these (as prometheus_client's metrics do)."""
        where = [(self.labelnames.index(key), value) for key, value in labels.items()]
        for values in list(self._series):
            if all(values[i] == value for i, value in where):
                del self._series[values]

    def describe(self) -> list[Metric]:
        return list(self.collect())  # the registry reads only its names

    def collect(self) -> Iterator[Metric]:
        series = list(self._series.items())  # list(): one step, whatever the loop adds meanwhile
        if self.bounds is None:
            counter = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for values, count in series:
                counter.add_metric(values, count.value)
            yield counter
            return
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, tallied in series:
            counts, total, running = list(tallied.counts), tallied.sum, 0
            buckets = []
            for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
                running += count
                buckets.append((floatToGoString(bound), float(running)))
            histogram.add_metric(values, buckets, total)
        yield histogram


M = TypeVar("M", Counter, Gauge, Histogram, Tally)


class Series:
    """Labelled series of metrics, each looked up once: ``series(metric, *labels)`` is
    ``metric.labels(*labels)``. A lookup takes the metric's lock and builds its key, and a round
    updates the same few series every time. Kept by what lives as long as the series it holds
    (a job's runner)."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def __call__(self, metric: Counter | Gauge | Histogram | Tally, *labels: str) -> Any:
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
        # process_resident_memory_bytes and the rest of prometheus_client's process metrics, and the peak
        ProcessCollector(registry=self.registry)
        self.registry.register(PeakMemory())
        self._finished: deque[str] = deque()
        self._lock = threading.Lock()
        self._job_metrics: list[Counter | Gauge | Histogram | Tally] = []

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


class PeakMemory(Collector):
    """``coded_process_peak_resident_memory_bytes``: the most resident memory this process has
    held (Linux's VmHWM), read at scrape time; nothing where /proc is not there."""

    def __init__(self, status: str = "/proc/self/status") -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        memory = resident_memory(self._status)
        if memory is not None:
            yield GaugeMetricFamily("coded_process_peak_resident_memory_bytes",
                                    "Most resident memory this process has held (VmHWM)", value=memory[1])


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
