"""A job as the master holds it in memory: durable fields, live history, watchers."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

from coded.jobs.spec import JobSpec
from coded.master.store import Record, StoredJob

__all__ = ["STATES", "TERMINAL", "WATCH_BUFFER", "Job", "JobEvent"]

#: every state a job can be in, in the order of the API's JobState enum
STATES = ("PENDING", "RUNNING", "PAUSED", "SUCCEEDED", "FAILED", "CANCELLED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: events buffered per watcher before the oldest are dropped (the next event carries the state)
WATCH_BUFFER = 10_000


@dataclass(frozen=True)
class JobEvent:
    """A change of a job: a snapshot of its row, and the iteration that just finished, if any."""

    job: StoredJob
    record: Record | None = None


@dataclass
class Job:
    """One job: its durable row, its parsed spec, and its watchers."""

    stored: StoredJob
    spec: JobSpec
    watchers: set[asyncio.Queue[JobEvent]] = field(default_factory=set)
    cancel_requested: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.stored.id

    @property
    def state(self) -> str:
        return self.stored.state

    @property
    def done(self) -> bool:
        return self.stored.state in TERMINAL

    def snapshot(self) -> StoredJob:
        """A copy of the row that later changes do not touch."""
        s = self.stored
        # checks is two levels of dicts of scalars (StoredJob): copied level by level, as deepcopy
        # would, at a tenth of its cost (a snapshot is taken for every iteration a client watches)
        checks = {key: dict(value) if isinstance(value, dict) else value for key, value in s.checks.items()}
        return dataclasses.replace(s, workers=list(s.workers), stats=dict(s.stats), checks=checks)

    def publish(self, record: Record | None = None) -> None:
        """Tell every watcher about the current state (and the iteration that just finished)."""
        if not self.watchers:  # most iterations: no client watches, and a snapshot costs a copy of the row
            return
        event = JobEvent(self.snapshot(), record)
        for queue in self.watchers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)
