"""What every job runner shares: the job's life from PENDING to its end, its workers, its states
and its durable records.

A runner owns one job from start to end. It waits in PENDING for workers, runs the job
(subclasses: :class:`coded.master.rounds.RoundRunner` for jobs made of rounds of calls,
master/peer_runner.py for CodeNet's peers), keeps every finished iteration durably before anyone
sees it, and waits (PAUSED) while the state dir refuses writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coded.base.errors import StorageError
from coded.base.metrics import Series
from coded.base.words import plural
from coded.jobs.spec import JobSpec, worker_needs
from coded.master.job import Job
from coded.master.links import WorkerCallError
from coded.master.metrics import MasterMetrics
from coded.master.registry import WorkerRegistry
from coded.master.store import JobStore, Record

__all__ = ["JobFailed", "JobRunner", "RunnerSettings", "pending_reason"]

log = logging.getLogger(__name__)

#: seconds between attempts to write to a state dir that refused a write (full, read-only)
STORAGE_RETRY_S = 2.0
#: records of fast iterations are written together (JobRunner._record): at most this many in one
#: transaction, and none waits longer than RECORDS_EVERY_S seconds
RECORDS_TOGETHER = 64
RECORDS_EVERY_S = 0.05


class JobFailed(Exception):
    """The job cannot continue; the message is the reason users see."""


def never_enough(settings: RunnerSettings, registry: WorkerRegistry, spec: JobSpec) -> str | None:
    """Why a job can never get its workers, on a cluster of fixed workers that have all registered
    and of which too few are alive (None: it may, or workers may still come)."""
    fixed = settings.fixed_workers
    needs = worker_needs(spec)
    available = registry.available(needs)
    if fixed is None or len(registry.all()) < fixed or available >= spec.workers:
        return None
    gone = fixed - sum(registry.alive(r.name) for r in registry.all())
    return (f"the job needs {plural(spec.workers, 'worker')}{f' with {needs}' if needs else ''} and only {available} "
            f"of this cluster's {fixed} can take it ({gone} gone); its workers are fixed (coded local), so none "
            "will come: restart the cluster with enough workers, or submit the job for fewer")


def pending_reason(spec: JobSpec, available: int) -> str:
    """Why a job is PENDING, for every client: the workers it waits for, how many of those that
    could take it are alive now, and, when too few, how long it waits (timeouts.pending_s)."""
    needs = worker_needs(spec)
    text = (f"waiting for {plural(spec.workers, 'worker')}{f' with {needs}' if needs else ''} "
            f"({available} registered and alive)")
    if available < spec.workers:
        text += f"; it fails if they are not there within {spec.timeouts.pending_s:g} s (timeouts.pending_s)"
    return text


@dataclass(frozen=True)
class RunnerSettings:
    assign_timeout_s: float = 120.0
    #: the bandwidth of the workers' links (``coded master --link``; None: not told): what a job's
    #: rounds are predicted to take, and how its workers reply, is chosen for it
    link_bits_per_s: float | None = None
    #: the cluster is this many workers and no other will register (``coded master --fixed-workers``,
    #: which ``coded local`` sets): once they all have, a job that needs more than are alive fails at once
    fixed_workers: int | None = None


class JobRunner(ABC):
    """Runs one job to its end (or until the master stops; then a restarted master resumes it)."""

    def __init__(self, job: Job, store: JobStore, registry: WorkerRegistry, metrics: MasterMetrics,
                 settings: RunnerSettings, files: dict[str, Path]) -> None:
        self.job = job
        self.spec: JobSpec = job.spec
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.settings = settings
        self.files = files
        # wall time counts on from what the job had used when this runner started; after a master
        # restart that includes the time now spent recomputing from the checkpoint
        self.base_elapsed = job.stored.elapsed
        self.started = time.perf_counter()
        self.iteration = 0  # iterations applied to this runner's state (see _replaying)
        self._series = Series()  # the job's series, looked up once
        self._recording: asyncio.Future[None] | None = None  # the task keeping the records (_record)
        self._unkept: list[tuple[Record, Callable[[Record], None] | None]] = []  # records it has to keep
        self._keep_now = asyncio.Event()  # they are to be kept at once (_recorded)
        self._writing = False  # it is writing them (and retrying: the state dir refuses writes)
        self._kept_at = -math.inf  # when it last wrote (time.monotonic)

    # --- what a job kind fills in ------------------------------------------------------------------

    @abstractmethod
    async def _prepare(self) -> None:
        """Load inputs and build the code (in threads for anything slow)."""

    @abstractmethod
    async def _execute(self) -> None:
        """Run the rounds until the job is done."""

    @abstractmethod
    def _result_arrays(self) -> dict[str, np.ndarray]:
        """Named arrays a client gets from GetResult."""

    @property
    @abstractmethod
    def scheme(self) -> str:
        """The metric label of the job's code."""

    @property
    def needs(self) -> str | None:
        """What the job's workers must list among their models (None: any worker will do)."""
        return worker_needs(self.spec)

    # --- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        job = self.job
        try:
            await self._prepare()
            await self._acquire_workers()
            self.metrics.last_progress.labels(self.job.id).set_to_current_time()
            await self._execute()
            await self._finish("SUCCEEDED", "")
        except asyncio.CancelledError:
            if job.cancel_requested:
                await self._finish("CANCELLED", "cancelled by a client")
            raise
        except JobFailed as error:
            await self._finish("FAILED", str(error))
        except Exception as error:  # the job fails, the master keeps running
            log.exception("job %s failed", job.id)
            await self._finish("FAILED", f"internal error: {type(error).__name__}: {error}")
        finally:  # a master stopping mid-job: the records under way are written, not cut off
            self._keep_now.set()
            if self._recording is not None:
                await asyncio.gather(self._recording, return_exceptions=True)

    def _elapsed(self) -> float:
        return self.base_elapsed + time.perf_counter() - self.started

    async def _set_state(self, state: str, reason: str = "") -> None:
        stored = self.job.stored
        if stored.state != state or stored.reason != reason:
            await self._recorded()  # the iterations done so far are kept, and seen, before the new state
            stored.state, stored.reason = state, reason
            await self._durably(lambda: self.store.save(stored))
            self.job.publish()

    async def _durably(self, write: Callable[[], None], in_thread: bool = False) -> None:
        """Run a state-dir write (``in_thread``: off the event loop, for slow ones). While the disk
        refuses it (full, read-only) the job waits, shown as PAUSED with the reason, and retries:
        nothing is lost, nothing is half-written, and the job goes on where it stopped once the
        operator frees the disk."""
        stored, waited = self.job.stored, False
        while True:
            try:
                if in_thread:
                    await asyncio.to_thread(write)
                else:
                    write()
                break
            except StorageError as error:
                if not waited:
                    log.error("job %s waits for its state dir: %s", self.job.id, error)
                waited = True
                self.metrics.storage_errors.inc()
                held = stored.state, stored.reason
                stored.state, stored.reason = "PAUSED", f"{error}; retrying every {STORAGE_RETRY_S:g} s"
                self.job.publish()
                try:
                    await asyncio.sleep(STORAGE_RETRY_S)
                finally:
                    stored.state, stored.reason = held
        if waited:
            log.info("job %s: its state dir takes writes again", self.job.id)
            self.job.publish()

    async def _finish(self, state: str, reason: str) -> None:
        try:
            await self._recorded()
        except Exception:  # its failure is the job's, which ends now anyway
            log.exception("job %s: its last records were not kept", self.job.id)
            self._recording = None
        if state == "SUCCEEDED":
            arrays = self._result_arrays()
            await self._durably(lambda: self.store.save_result(self.job.id, arrays))
        self.job.stored.elapsed = self._elapsed()
        await self._set_state(state, reason)
        with contextlib.suppress(KeyError):
            self.metrics.last_progress.remove(self.job.id)  # a finished job is not stuck
        self.metrics.job_finished(self.job.id)
        await self._release_workers()
        log.info("job %s %s %s", self.job.id, state.lower(), reason)

    def _replaying(self) -> bool:
        """Whether the next iteration was already recorded by a master that was then killed.

        A restarted master recomputes from the last checkpoint; the iterations its predecessor had
        recorded (and clients had seen) are applied to the state again but not recorded again, so
        the reported count never goes backwards and the history holds each iteration once.
        """
        return self.iteration < self.job.stored.iteration

    async def _record(self, record: Record, fill: Callable[[Record], None] | None = None) -> None:
        """Keep a finished round's record: durable in SQLite first, then metrics and watchers, so a
        killed master never loses anything a client has seen.

        The work is off the iteration's critical path: a task does it once this one next waits,
        which is after the next round's inputs have gone out, while the workers compute; ``fill``
        completes the record there first (what evaluating and counting add to it). Records of
        fast iterations are written together, one transaction for up to RECORDS_TOGETHER of them
        or RECORDS_EVERY_S seconds (a commit costs more master CPU than the rest of a small
        iteration's bookkeeping). A checkpoint and the job's end wait until they are kept
        (:meth:`_recorded`), so no checkpoint gets ahead of them, and while the state dir refuses
        writes the job waits here.
        """
        keeper = self._recording
        if keeper is not None and keeper.done():
            keeper.result()  # what failed it fails the job here
        elif keeper is not None and (self._writing or len(self._unkept) >= RECORDS_TOGETHER):
            await self._recorded()
        self.job.stored.elapsed = self._elapsed()
        self._unkept.append((record, fill))
        if keeper is None or keeper.done():
            self._recording = asyncio.ensure_future(self._keep())

    async def _recorded(self) -> None:
        """Keep the records waiting now, and wait until they are durable and published."""
        if self._recording is not None:
            if not self._recording.done():
                self._keep_now.set()
            await self._recording

    async def _keep(self) -> None:
        stored = self.job.stored
        try:
            while self._unkept:
                wait = self._kept_at + RECORDS_EVERY_S - time.monotonic()
                if wait > 0 and not self._keep_now.is_set():
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._keep_now.wait(), wait)
                kept, self._unkept = self._unkept, []
                for record, fill in kept:
                    if fill is not None:
                        fill(record)
                records = [record for record, _ in kept]
                self._writing = True
                await self._durably(functools.partial(self.store.commit, stored, records))
                self._writing = False
                self._kept_at = time.monotonic()
                seconds = self._series(self.metrics.iteration_seconds, self.job.id, self.scheme)
                for record in records:
                    seconds.observe(record.duration)
                    self.job.publish(record)
                self._series(self.metrics.iterations, self.job.id).inc(len(records))
                self._series(self.metrics.last_progress, self.job.id).set_to_current_time()
        finally:
            self._writing = False
            self._keep_now.clear()

    # --- workers -----------------------------------------------------------------------------------

    async def _acquire_workers(self) -> None:
        stored, spec = self.job.stored, self.spec
        if len(stored.workers) != spec.workers:
            deadline = time.monotonic() + spec.timeouts.pending_s
            needs = self.needs
            while (chosen := self.registry.choose(spec.workers, needs)) is None:
                available = self.registry.available(needs)
                never = never_enough(self.settings, self.registry, spec)
                if never is not None:
                    raise JobFailed(never)
                await self._set_state("PENDING", pending_reason(spec, available))  # watchers see the count change
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobFailed(f"only {available} of the {plural(spec.workers, 'worker')} it needs"
                                    f"{f' (with {needs})' if needs else ''} registered within "
                                    f"{spec.timeouts.pending_s:g} s")
                await self.registry.wait_change(min(left, 1.0))
            stored.workers = chosen
        else:  # resumed by a restarted master: give its workers time to re-register by themselves
            deadline = time.monotonic() + self.registry.timeout + 2.0
            while len(self._alive_positions()) < spec.workers and time.monotonic() < deadline:
                await self.registry.wait_change(max(0.0, min(1.0, deadline - time.monotonic())))
        for name in stored.workers:
            if name in self.registry:
                self.registry.get(name).jobs.add(self.job.id)
        await self._set_state("RUNNING")

    def _alive_positions(self) -> list[int]:
        return [i for i, name in enumerate(self.job.stored.workers) if self.registry.alive(name)]

    async def _release_workers(self) -> None:
        for name in self.job.stored.workers:
            if name in self.registry:
                record = self.registry.get(name)
                record.jobs.discard(self.job.id)
                with contextlib.suppress(WorkerCallError):  # a gone worker has nothing to release
                    await record.link.release(self.job.id, timeout=2.0)
