"""A job as the master holds it in memory: durable fields, live history, watchers."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from coded.v1 import master_pb2
from common.jobspec import GradientJob
from master.store import Record, StoredJob

__all__ = ["Job", "TERMINAL", "record_proto"]

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: events buffered per watcher before the oldest are dropped (the next event carries the state)
WATCH_BUFFER = 10_000


def record_proto(record: Record) -> master_pb2.IterationRecord:
    return master_pb2.IterationRecord(
        iteration=record.iteration, loss=record.loss, elapsed_s=record.elapsed, responders=record.responders,
        duration_s=record.duration, test_loss=record.test_loss, test_accuracy=record.test_accuracy,
        test_auc=record.test_auc, worker_compute_s=record.worker_compute)


@dataclass
class Job:
    """One job: its durable row, its parsed spec, and its watchers."""

    stored: StoredJob
    spec: GradientJob
    watchers: set[asyncio.Queue] = field(default_factory=set)
    cancel_requested: bool = False
    task: asyncio.Task | None = None

    @property
    def id(self) -> str:
        return self.stored.id

    @property
    def state(self) -> str:
        return self.stored.state

    @property
    def done(self) -> bool:
        return self.stored.state in TERMINAL

    def proto(self, history: list[Record] | None = None) -> master_pb2.Job:
        s = self.stored
        job = master_pb2.Job(
            id=s.id, kind=s.kind, state=master_pb2.JobState.Value(s.state), spec=s.spec, iteration=s.iteration,
            iterations=s.iterations, elapsed_s=s.elapsed, loss=s.loss if not math.isnan(s.loss) else math.nan,
            reason=s.reason, created_unix=s.created, workers=s.workers, stats=s.stats)
        if history is not None:
            job.history.extend(record_proto(r) for r in history)
        return job

    def publish(self, record: Record | None = None) -> None:
        """Tell every watcher about the current state (and the iteration that just finished)."""
        event = master_pb2.JobEvent(job=self.proto())
        if record is not None:
            event.record.CopyFrom(record_proto(record))
        for queue in self.watchers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)
