"""What every job runner shares: workers, assignment, fan-out calls with cancellation, states.

A runner owns one job from start to end. It waits in PENDING for workers, assigns them their part,
and fans calls out to all of them at once, collecting replies until the job's code can decode and
cancelling the rest; a worker that fails or is unreachable is an erasure. With more workers gone
than the code tolerates the job PAUSES until they return. Subclasses say what a job's parts are
and what one round of replies means (master/gradient_runner.py, master/matmul_runner.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coded.base.errors import StorageError
from coded.base.memory import release_free_memory
from coded.base.metrics import MasterMetrics
from coded.base.words import plural
from coded.jobs.messages import Assignment
from coded.jobs.spec import CodeNetJob, GradientJob, JobSpec, SlowdownSpec, StragglerSpec, to_json, worker_needs
from coded.master.job import Job
from coded.master.links import (
    ComputeCall,
    Params,
    StageReply,
    WorkerCallError,
    WorkerForgotJob,
    WorkerRefused,
    WorkerUnreachable,
)
from coded.master.registry import WorkerRegistry
from coded.master.store import JobStore, Record
from coded.master.verification import Quarantine, verification_of

__all__ = ["Findings", "JobFailed", "JobRunner", "Reply", "Round", "RunnerSettings", "pending_reason"]

log = logging.getLogger(__name__)

#: seconds between attempts to write to a state dir that refused a write (full, read-only)
STORAGE_RETRY_S = 2.0


class JobFailed(Exception):
    """The job cannot continue; the message is the reason users see."""


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


#: what a call reports to its round: (kind, position, payload, call), kind "stage" (payload: the
#: StageReply), "done" (None) or "failed" (the WorkerCallError)
Event = tuple[str, int, Any, "ComputeCall"]


@dataclass
class Reply:
    """What one worker sent in the current round (one entry per completed stage)."""

    stages: list[StageReply]


@dataclass(frozen=True)
class Findings:
    """What checking one iteration's replies found."""

    checked: bool = False          # a surplus of replies confirmed the result
    detected: int = 0              # wrong replies detected
    corrected: int = 0             # ... that the result was decoded without
    located: tuple[int, ...] = ()  # positions whose replies were located as wrong


class Round:
    """One iteration's calls to many workers at once: replies as they arrive, more on request,
    and every call still running stopped by :meth:`close`.

    Replies reach it by callbacks (ComputeCall.listen); a waiting :meth:`until` is woken once,
    when its condition holds or every call has ended, not on every reply. ``replies`` keeps
    growing while the caller awaits (a decode in a thread); :meth:`take` freezes what a decode
    sees, so the replies it reports as used are the ones it used.

    Parameters
    ----------
    runner : JobRunner
    iteration : int
    positions : list of int
        The workers called.
    params : Params
        The round's input.
    """

    def __init__(self, runner: JobRunner, iteration: int, positions: list[int], params: Params,
                 listener: Callable[[Event], None] | None = None) -> None:
        self._runner = runner
        self._listener = listener  # hears every event first (a streamed round's assembly)
        self.replies: dict[int, Reply] = {}
        self._stages = 0  # stages received so far
        self._taken: dict[int, Reply] | None = None  # what the last take() returned
        self._stages_taken = 0  # stages that take() included
        self._ended: set[int] = set()
        self._failed: set[int] = set()  # calls that ended in an erasure
        self._closed = False
        self._error: Exception | None = None  # the listener's failure while nobody waited
        self._waiting: tuple[asyncio.Future[None], Callable[[dict[int, Reply]], bool]] | None = None
        self._calls: dict[int, ComputeCall] = {}
        for i in positions:  # a call may report at once (a broken connection): _on_event sees a partial dict
            self._calls[i] = runner._start(i, iteration, params, self._on_event)

    @property
    def running(self) -> bool:
        """Whether some call may still send stages."""
        return len(self._ended) < len(self._calls)

    @property
    def ended(self) -> frozenset[int]:
        """Positions whose calls have ended (completed, or failed)."""
        return frozenset(self._ended)

    def have(self, position: int, pieces: list[int]) -> None:
        """Tell a worker still computing that the master has these pieces (streamed rounds)."""
        call = self._calls.get(position)  # not yet there while the calls start
        if call is not None and position not in self._ended:
            call.have(pieces)

    def want(self, position: int, pieces: list[int]) -> None:
        """Ask a worker still computing for these pieces next (streamed rounds)."""
        call = self._calls.get(position)
        if call is not None and position not in self._ended:
            call.want(pieces)

    def _on_event(self, event: Event) -> None:
        if self._closed:
            return  # the round has what it needed: later stages are not counted as used
        kind, position, payload, _ = event
        if kind == "stage":
            self.replies.setdefault(position, Reply([])).stages.append(payload)
            self._stages += 1
        else:
            self._ended.add(position)
            if kind == "failed":  # stages that arrived before a failure stay usable
                self._failed.add(position)
        try:
            if self._listener is not None:
                self._listener(event)
            if self._waiting is not None and not self._waiting[0].done():
                waiter, enough = self._waiting
                # a stage can make the replies enough, or (with a listener) a call's end can
                if ((kind == "stage" or self._listener is not None) and enough(self.replies)) or not self.running:
                    waiter.set_result(None)
        except Exception as error:  # the runner's own failure: raised where it waits, not in the link
            if self._waiting is not None and not self._waiting[0].done():
                self._waiting[0].set_exception(error)
            else:
                self._error = error

    async def until(self, enough: Callable[[dict[int, Reply]], bool]) -> bool:
        """Wait until ``enough(replies)``; False when every call ended first."""
        if self._error is not None:
            raise self._error
        while not enough(self.replies):
            if not self.running:
                return False
            waiter = asyncio.get_running_loop().create_future()
            self._waiting = (waiter, enough)
            try:
                await waiter
            finally:
                self._waiting = None
        return True

    def take(self) -> dict[int, Reply]:
        """The replies so far, as a copy that later stages leave alone: what one decode uses."""
        self._taken = {position: Reply(list(reply.stages)) for position, reply in self.replies.items()}
        self._stages_taken = self._stages
        return self._taken

    async def more(self) -> bool:
        """Wait for a stage that the last :meth:`take` did not include (at once if one came while
        its decode ran); False when every call has ended without one."""
        seen = self._stages_taken
        return await self.until(lambda _: self._stages > seen)

    def close(self, used: Iterable[int] | None = None) -> None:
        """Stop the calls still running (a straggler is stopped, not cancelled: see ComputeCall);
        count every call's fate once: ``used`` when its reply was used — the last :meth:`take`
        read it (even if its call had not ended yet, or failed afterwards), or it is among
        ``used`` when the caller says — else ``failed`` for an erasure, else ``cancelled`` (a
        straggler: cut off, or its reply came after the last take)."""
        self._closed = True
        if used is None:
            used = self.replies if self._taken is None else self._taken
        used = set(used)
        for position, call in self._calls.items():
            if position not in self._ended:  # its DONE may still be on the way after a used stage
                call.stop()
            outcome = "used" if position in used else "failed" if position in self._failed else "cancelled"
            self._runner._count(position, outcome)


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
        self._assigned: dict[int, int] = {}  # position -> registry generation it was assigned at
        series = (self.job.id,)  # the job's own metric series, looked up once
        self._bytes_sent = metrics.bytes_sent.labels(*series)
        self._bytes_received = metrics.bytes_received.labels(*series)
        # wall time counts on from what the job had used when this runner started; after a master
        # restart that includes the time now spent recomputing from the checkpoint
        self.base_elapsed = job.stored.elapsed
        self.started = time.perf_counter()
        self.iteration = 0  # iterations applied to this runner's state (see _replaying)
        checks = None if isinstance(self.spec, CodeNetJob) else self.spec.checks
        self.quarantine = Quarantine(checks.quarantine_rule if checks is not None else None)

    # --- what a job kind fills in ------------------------------------------------------------------

    @abstractmethod
    async def _prepare(self) -> None:
        """Load inputs and build the code (in threads for anything slow)."""

    @abstractmethod
    async def _execute(self) -> None:
        """Run the rounds until the job is done."""

    @abstractmethod
    def _assignment(self, position: int) -> Assignment:
        """What worker ``position`` is told when it is assigned."""

    def _uploads(self, position: int) -> dict[str, np.ndarray]:
        """Named arrays sent to worker ``position`` after its assignment (none by default)."""
        return {}

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
            self._restore_checks()
            await self._acquire_workers()
            if not isinstance(self.spec, CodeNetJob):  # at 0 from the start: increase() sees the first one
                for position, name in enumerate(self.job.stored.workers):
                    self.metrics.wrong_replies.labels(self.job.id, name)
                    self.metrics.quarantines.labels(self.job.id, name)
                    self.metrics.worker_quarantined.labels(self.job.id, name).set(position in self.quarantine.out)
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

    def _elapsed(self) -> float:
        return self.base_elapsed + time.perf_counter() - self.started

    async def _set_state(self, state: str, reason: str = "") -> None:
        stored = self.job.stored
        if stored.state != state or stored.reason != reason:
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
        if state == "SUCCEEDED":
            arrays = self._result_arrays()
            await self._durably(lambda: self.store.save_result(self.job.id, arrays))
        self.job.stored.elapsed = self._elapsed()
        await self._set_state(state, reason)
        with contextlib.suppress(KeyError):
            self.metrics.last_progress.remove(self.job.id)  # a finished job is not stuck
        for position in self.quarantine.out:  # a finished job holds nobody out
            self.metrics.worker_quarantined.labels(self.job.id, self.job.stored.workers[position]).set(0)
        self.metrics.job_finished(self.job.id)
        release_free_memory()
        await self._release_workers()
        log.info("job %s %s %s", self.job.id, state.lower(), reason)

    def _replaying(self) -> bool:
        """Whether the next iteration was already recorded by a master that was then killed.

        A restarted master recomputes from the last checkpoint; the iterations its predecessor had
        recorded (and clients had seen) are applied to the state again but not recorded again, so
        the reported count never goes backwards and the history holds each iteration once.
        """
        return self.iteration < self.job.stored.iteration

    async def _record(self, record: Record) -> None:
        """Keep a finished round's record: durable in SQLite first, then metrics and watchers, so a
        killed master never loses anything a client has seen."""
        stored = self.job.stored
        stored.elapsed = self._elapsed()
        await self._durably(lambda: self.store.commit(stored, record))
        self.metrics.iteration_seconds.labels(self.job.id, self.scheme).observe(record.duration)
        self.metrics.iterations.labels(self.job.id).inc()
        self.metrics.last_progress.labels(self.job.id).set_to_current_time()
        self.job.publish(record)

    # --- checking replies ----------------------------------------------------------------------------

    def _restore_checks(self) -> None:
        """What the job checks (jobs stored by an older master lack it), and the quarantine as it was
        at the iteration this runner starts from, rebuilt from the recorded history."""
        stored = self.job.stored
        stored.checks.setdefault("verification", verification_of(self.spec).as_dict())
        self.quarantine.restore(self.store.history(self.job.id, before=self.iteration, located_only=True))

    def _usable(self, alive: list[int]) -> list[int]:
        """Alive positions that are not quarantined."""
        return [p for p in alive if p not in self.quarantine.out]

    def _removable(self, positions: frozenset[int]) -> bool:
        """Whether the job can go on without ``positions`` (quarantine asks before taking a worker out)."""
        return False

    def _too_few(self) -> str:
        """Why the alive workers are not enough, for a PAUSED job's reason."""
        checks = None if isinstance(self.spec, CodeNetJob) else self.spec.checks
        if checks is None:
            return "more than the code tolerates"
        if isinstance(self.spec, GradientJob):
            return (f"too few left to decode and check the replies: more than {self.spec.code_stragglers - 1} "
                    "are gone (code.stragglers + verify.errors)")
        return ("too few left to decode and check the replies (checking needs one more than decoding; "
                "`verify: off` runs unchecked)")

    def _apply_findings(self, iteration: int, findings: Findings, record: Record | None) -> None:
        """Count a finished iteration's located workers toward quarantine (also when replaying, so
        a resumed job decides as the uninterrupted one did) and, with its ``record``, keep what
        checking found in the record, the job's row and the metrics."""
        newly = self.quarantine.note(iteration, findings.located, self._removable)
        names = self.job.stored.workers
        for position in newly:
            log.warning("job %s: worker %s (position %d) quarantined after iteration %d: located as wrong more than "
                        "%d times within %d iterations", self.job.id, names[position], position, iteration,
                        self.quarantine.rule.limit if self.quarantine.rule else 0,
                        self.quarantine.rule.window if self.quarantine.rule else 0)
            self.metrics.worker_quarantined.labels(self.job.id, names[position]).set(1)
        if record is None:
            return
        record.checked, record.detected, record.corrected = findings.checked, findings.detected, findings.corrected
        record.located, record.quarantined = list(findings.located), newly
        stats, checks = self.job.stored.stats, self.job.stored.checks
        for name, value in (("errors_detected", findings.detected), ("errors_corrected", findings.corrected),
                            ("iterations_checked", int(findings.checked)),
                            ("iterations_unchecked", int(not findings.checked)), ("workers_quarantined", len(newly))):
            stats[name] = stats.get(name, 0) + value
        located = checks.setdefault("located", {})
        for position in findings.located:
            located[str(position)] = located.get(str(position), 0) + 1
            self.metrics.wrong_replies.labels(self.job.id, names[position]).inc()
        checks.setdefault("quarantined", {}).update({str(p): iteration for p in newly})
        for position in newly:
            self.metrics.quarantines.labels(self.job.id, names[position]).inc()
        self.metrics.errors_detected.labels(self.job.id).inc(findings.detected)
        self.metrics.errors_corrected.labels(self.job.id).inc(findings.corrected)

    # --- workers -----------------------------------------------------------------------------------

    async def _acquire_workers(self) -> None:
        stored, spec = self.job.stored, self.spec
        if len(stored.workers) != spec.workers:
            deadline = time.monotonic() + spec.timeouts.pending_s
            needs = self.needs
            while (chosen := self.registry.choose(spec.workers, needs)) is None:
                available = self.registry.available(needs)
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

    async def _assign(self, position: int) -> None:
        record = self.registry.get(self.job.stored.workers[position])
        generation = record.generation
        timeout = self.settings.assign_timeout_s
        await record.link.assign(self._assignment(position), timeout)
        uploads = self._uploads(position)
        if uploads:
            await record.link.upload(self.job.id, uploads, timeout)
        record.jobs.add(self.job.id)
        self._assigned[position] = generation

    def _trace(self, faults: StragglerSpec | SlowdownSpec) -> str:
        """An uploaded fault trace (model "trace"), or ""."""
        return self.files[str(faults.path)].read_text() if faults.model == "trace" else ""

    def _base_assignment(self, position: int, data_uploaded: bool = False, shape: tuple[int, ...] = (),
                         classes: int = 0) -> Assignment:
        faults = self.spec.faults
        return Assignment(self.job.id, position, to_json(self.spec), data_uploaded, self._trace(faults.stragglers),
                          math.prod(shape) if shape else 0, classes, shape, self._trace(faults.slowdown))

    def _alive_positions(self) -> list[int]:
        return [i for i, name in enumerate(self.job.stored.workers) if self.registry.alive(name)]

    async def _ensure_workers(self, enough: Callable[[list[int]], bool]) -> list[int]:
        """Alive, assigned positions; pauses until ``enough`` of them, fails after the timeout."""
        deadline: float | None = None
        while True:
            alive = self._alive_positions()
            stale = [i for i in alive
                     if self._assigned.get(i) != self.registry.get(self.job.stored.workers[i]).generation]
            if stale:
                results = await asyncio.gather(*(self._assign(i) for i in stale), return_exceptions=True)
                for i, result in zip(stale, results, strict=True):
                    if isinstance(result, BaseException):
                        if isinstance(result, asyncio.CancelledError):
                            raise result
                        log.warning("job %s: assigning position %d failed: %s", self.job.id, i, result)
                        if isinstance(result, WorkerRefused):
                            raise JobFailed(f"worker {self.job.stored.workers[i]} refused the job: {result}")
                        await self.registry.mark_down(self.job.stored.workers[i])
                continue
            if enough(alive):
                if self.job.state == "PAUSED":
                    await self._set_state("RUNNING")
                return alive
            gone = [self.job.stored.workers[i] for i in range(self.spec.workers) if i not in alive]
            if deadline is None:
                deadline = time.monotonic() + self.spec.timeouts.paused_s
                await self._set_state("PAUSED", f"{plural(len(gone), 'worker')} gone ({', '.join(gone)}); "
                                                f"{self._too_few()}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobFailed(f"workers {', '.join(gone)} did not return within {self.spec.timeouts.paused_s:g} s")
            await self.registry.wait_change(min(left, 1.0))

    async def _release_workers(self) -> None:
        for name in self.job.stored.workers:
            if name in self.registry:
                record = self.registry.get(name)
                record.jobs.discard(self.job.id)
                with contextlib.suppress(WorkerCallError):  # a gone worker has nothing to release
                    await record.link.release(self.job.id, timeout=2.0)

    # --- calls ---------------------------------------------------------------------------------------

    def _start(self, position: int, iteration: int, params: Params, events: Callable[[Event], None]) -> ComputeCall:
        """Start one worker's part of an iteration. Its stages, then its end (``done``) or its
        failure (``failed``), reach ``events`` as (kind, position, payload, call) on the event loop;
        a call that was stopped reports nothing more."""
        name = self.job.stored.workers[position]
        link = self.registry.get(name).link
        start = time.perf_counter()
        self._bytes_sent.inc(params.array.nbytes)
        call = link.compute(self.job.id, iteration, params, self.spec.timeouts.call_s)

        def on_stage(reply: StageReply) -> None:
            self._bytes_received.inc(reply.message.nbytes)
            events(("stage", position, reply, call))

        def on_end(error: WorkerCallError | None) -> None:
            if error is None:
                self.metrics.response_seconds.labels(name).observe(time.perf_counter() - start)
                events(("done", position, None, call))
                return
            if isinstance(error, WorkerForgotJob):
                self._assigned.pop(position, None)  # the worker lost its assignment (restarted)
            elif isinstance(error, WorkerUnreachable):
                self.registry.set_down(name)
            log.debug("job %s: worker %s failed iteration %d: %s", self.job.id, name, iteration, error)
            events(("failed", position, error, call))

        call.listen(on_stage, on_end)
        return call

    async def _gather(
        self, iteration: int, positions: list[int], params: Params, enough: Callable[[dict[int, Reply]], bool],
    ) -> dict[int, Reply] | None:
        """Call ``positions`` at once; return the replies as soon as ``enough``, stop the rest.

        None when every call ended before the replies were enough.
        """
        round_ = Round(self, iteration, positions, params)
        try:
            return round_.replies if await round_.until(enough) else None
        finally:
            round_.close()

    def _count(self, position: int, outcome: str) -> None:
        """One reply's fate in the metrics: ``used``, ``cancelled`` (a straggler) or ``failed``."""
        self.metrics.responses.labels(self.job.id, self.job.stored.workers[position], outcome).inc()
