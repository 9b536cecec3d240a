"""The master's Prometheus metrics (docs/architecture.md, "Metrics", lists them), and the counts of
what it holds open to workers that its leak gauges report."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coded.base.metrics import FAST_BUCKETS, LATENCY_BUCKETS, ProcessMetrics, Tally

__all__ = ["MasterMetrics", "OpenCounts"]


@dataclass
class OpenCounts:
    """What one master holds open to workers, counted by the links that open and close it: a leak
    shows as a count that only grows (``coded_master_worker_channels``,
    ``coded_master_data_connections``, ``coded_master_data_connections_local``)."""

    channels: int = 0      # gRPC channels, one per worker link
    connections: int = 0   # data-plane connections, one per running job and worker
    local: int = 0         # of which on a worker's local (Unix) socket


class _StateCollector(Collector):
    """Scrape-time gauges: jobs by state, workers alive (in total and each), the master's own load."""

    def __init__(self, jobs: Callable[[], dict[str, int]], workers: Callable[[], dict[str, bool]],
                 unusable: Callable[[], dict[str, str]], held: OpenCounts, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop  # scrapes run in the HTTP server's thread, not the loop's
        self._jobs = jobs
        self._workers = workers
        self._unusable = unusable
        self._held = held

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
        unusable = GaugeMetricFamily("coded_worker_unusable", "1 while a worker heartbeats but calls to it failed "
                                     "too often in a row to use it (coded workers says why)", labels=["worker"])
        for name in sorted(self._unusable()):
            unusable.add_metric([name], 1.0)
        yield unusable
        # leak detectors: these return to their idle values once jobs finish
        yield GaugeMetricFamily("coded_master_asyncio_tasks", "Asyncio tasks alive in the master",
                                value=len(asyncio.all_tasks(self._loop)))
        yield GaugeMetricFamily("coded_master_threads", "Threads alive in the master", value=threading.active_count())
        yield GaugeMetricFamily("coded_master_worker_channels", "gRPC channels the master holds open to workers",
                                value=self._held.channels)
        yield GaugeMetricFamily("coded_master_data_connections", "Data-plane connections the master holds open to "
                                "workers (one per running job and worker)", value=self._held.connections)
        yield GaugeMetricFamily("coded_master_data_connections_local", "Of coded_master_data_connections, those on "
                                "the local (Unix) socket of a worker on the master's host", value=self._held.local)


class MasterMetrics(ProcessMetrics):
    """Metrics of the master; :attr:`held` counts what it holds open to workers (its links count
    into it). Those that rounds update are tallies (:class:`coded.base.metrics.Tally`), updated on
    the event loop's thread only."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.held = OpenCounts()
        r = self.registry
        self.iteration_seconds = self._per_job(Tally(
            "coded_iteration_duration_seconds", "Wall time of one iteration", ["job_id", "scheme"],
            buckets=LATENCY_BUCKETS, registry=r))
        self.response_seconds = Tally(
            "coded_worker_response_seconds",
            "Time from sending a round to a worker to its reply: its end, or its last stage when it was "
            "stopped first (stopped before any: the time it was stopped)",
            ["worker"], buckets=LATENCY_BUCKETS, registry=r)
        self.responses = self._per_job(Tally(
            "coded_responses_total", "Worker replies by what became of them", ["job_id", "worker", "outcome"],
            registry=r))
        self.pieces = self._per_job(Tally(
            "coded_pieces_total", "Streamed pieces by what became of them: used (in the sum), checked (a second "
            "copy that confirmed a used one), spare (arrived after its piece was settled)", ["job_id", "outcome"],
            registry=r))
        self.stopped_pieces = self._per_job(Tally(
            "coded_stopped_pieces_used_total", "Streamed pieces used from workers that were stopped before they had "
            "sent all pieces of their own partition: the partial work of slow workers", ["job_id"], registry=r))
        self.decode_seconds = self._per_job(Tally(
            "coded_decode_duration_seconds", "Time to decode one iteration's messages", ["job_id", "scheme"],
            buckets=FAST_BUCKETS, registry=r))
        self.bytes_sent = self._per_job(Tally(
            "coded_master_sent_bytes_total", "Payload bytes sent to workers", ["job_id"], registry=r))
        self.bytes_received = self._per_job(Tally(
            "coded_master_received_bytes_total", "Payload bytes received from workers", ["job_id"], registry=r))
        self.loss = self._per_job(Gauge("coded_job_loss", "Latest training loss", ["job_id"], registry=r))
        self.test_accuracy = self._per_job(Gauge(
            "coded_job_test_accuracy", "Latest test accuracy", ["job_id"], registry=r))
        self.iterations = self._per_job(Tally(
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
                    unusable: Callable[[], dict[str, str]]) -> None:
        """Register scrape-time gauges: jobs by state, each worker's liveness and the unusable ones,
        the master's tasks, threads, and what it holds open (:attr:`held`: worker channels,
        data-plane connections, all and those on local sockets); must be called from the master's
        event loop thread."""
        self.registry.register(_StateCollector(jobs, workers, unusable, self.held, asyncio.get_running_loop()))
