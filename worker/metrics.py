"""The worker's Prometheus metrics (docs/architecture.md, "Metrics", lists them)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from coded.base.metrics import LATENCY_BUCKETS, ProcessMetrics, Tally

__all__ = ["WorkerMetrics"]


class WorkerMetrics(ProcessMetrics):
    """Metrics of a worker. Those a round updates are tallies (:class:`coded.base.metrics.Tally`),
    updated on the event loop's thread only."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.compute_seconds = self._per_job(Tally(
            "coded_worker_compute_seconds", "Time computing and encoding one stage", ["job_id"],
            buckets=LATENCY_BUCKETS, registry=r))
        self.injected_delay_seconds = self._per_job(Tally(
            "coded_worker_injected_delay_seconds", "Straggler delay injected into one call", ["job_id"],
            buckets=LATENCY_BUCKETS, registry=r))
        self.calls = self._per_job(Tally(
            "coded_worker_calls_total", "Rounds (data plane) by outcome", ["job_id", "outcome"], registry=r))
        self.soft_errors = self._per_job(Tally(
            "coded_worker_soft_errors_injected_total", "Messages corrupted on purpose", ["job_id"], registry=r))
        self.bytes_received = Tally("coded_worker_received_bytes_total", "Payload bytes received", registry=r)
        self.bytes_sent = Tally("coded_worker_sent_bytes_total", "Payload bytes sent", registry=r)
        self.running = Gauge("coded_worker_running_calls", "Rounds computing", registry=r)
