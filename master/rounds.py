"""Rounds: one iteration's calls to many workers at once, what the calls report to them, and the
runner of every job made of rounds (gradient and matmul jobs; CodeNet's peers run their own).

A :class:`RoundRunner` assigns each worker its part, waits (PAUSED) while too few are alive to
decode, and fans calls out to all of them at once; a :class:`Round` collects the stages each call
sends (:class:`StageArrived`) until the job's code can decode, then stops the calls still
running; a call that fails or whose worker is unreachable ends (:class:`CallEnded`) as an
erasure. What checking found (:class:`Findings`) counts toward quarantine here too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from coded.base.words import plural
from coded.jobs.messages import Assignment
from coded.jobs.spec import GradientJob, MatrixJob, to_json
from coded.jobs.spec.faults import SlowdownSpec, StragglerSpec
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
from coded.master.metrics import MasterMetrics
from coded.master.registry import WorkerRegistry
from coded.master.runner import JobFailed, JobRunner, RunnerSettings
from coded.master.store import JobStore, Record
from coded.master.verification import Quarantine, verification_of

__all__ = ["CallEnded", "Caller", "Event", "Findings", "Reply", "Round", "RoundRunner", "StageArrived"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageArrived:
    """A call sent a stage (or a streamed piece) of its reply."""

    position: int
    call: ComputeCall
    reply: StageReply


@dataclass(frozen=True)
class CallEnded:
    """A call ended: completed (``error`` None) or failed (an erasure; what it sent stays usable)."""

    position: int
    call: ComputeCall
    error: WorkerCallError | None = None


#: what a call reports to its round, in order: its stages, then its end
Event = StageArrived | CallEnded


class Caller(Protocol):
    """What a round needs of its runner (a :class:`RoundRunner`; tests drive their own)."""

    def call(self, position: int, iteration: int, params: Params, events: Callable[[Event], None]) -> ComputeCall:
        """Start worker ``position``'s call; its events reach ``events`` on the event loop."""

    def count(self, position: int, outcome: str, seconds: float | None) -> None:
        """Count one call's fate: ``used``, ``cancelled`` or ``failed``; ``seconds``: how long the
        worker took to reply (None when its call failed)."""


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
    runner : Caller
        Starts the calls and counts their fates.
    iteration : int
    positions : list of int
        The workers called.
    params : Params
        The round's input.
    """

    def __init__(self, runner: Caller, iteration: int, positions: list[int], params: Params,
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
        self._started = time.perf_counter()
        self._ended_at: dict[int, float] = {}  # when each call that completed ended
        for i in positions:  # a call may report at once (a broken connection): _on_event sees a partial dict
            self._calls[i] = runner.call(i, iteration, params, self._on_event)

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
        position = event.position
        if isinstance(event, StageArrived):
            self.replies.setdefault(position, Reply([])).stages.append(event.reply)
            self._stages += 1
        else:
            self._ended.add(position)
            if event.error is not None:  # stages that arrived before a failure stay usable
                self._failed.add(position)
            else:
                self._ended_at[position] = time.perf_counter()
        try:
            if self._listener is not None:
                self._listener(event)
            if self._waiting is not None and not self._waiting[0].done():
                waiter, enough = self._waiting
                # a stage can make the replies enough, or (with a listener) a call's end can
                arrived = isinstance(event, StageArrived)
                if ((arrived or self._listener is not None) and enough(self.replies)) or not self.running:
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

    def close(self, used: Iterable[int] | None = None, idle: Collection[int] = ()) -> None:
        """Stop the calls still running (a straggler is stopped, not cancelled: see ComputeCall);
        count every call's fate once: ``used`` when its reply was used — the last :meth:`take`
        read it (even if its call had not ended yet, or failed afterwards), or it is among
        ``used`` when the caller says — else ``failed`` for an erasure, else ``cancelled`` (a
        straggler: cut off, or its reply came after the last take). ``idle``: workers with nothing
        left to compute, whose calls are stopped without a word to them (ComputeCall.stop).

        With its fate goes how long the worker took to reply: to its end; for a call stopped or
        failed before its end, to its last stage; for one stopped before any, to now (the stop:
        a lower bound, so a straggler still shows as slow); None for one that failed before any.
        A streamed round stops every worker that is still on call when it decodes, so a worker
        that kept serving backups is timed by its last piece, not left out."""
        self._closed = True
        self._listener = None  # it closes over this round (a streamed round's): no cycle left behind
        if used is None:
            used = self.replies if self._taken is None else self._taken
        used = set(used)
        now = time.perf_counter()
        for position, call in self._calls.items():
            if position not in self._ended:  # its DONE may still be on the way after a used stage
                call.stop(position in idle)
            outcome = "used" if position in used else "failed" if position in self._failed else "cancelled"
            self._runner.count(position, outcome, self._reply_seconds(position, now))

    def _reply_seconds(self, position: int, now: float) -> float | None:
        """How long worker ``position`` took to reply, as :meth:`close` counts it."""
        if position in self._ended_at:
            return self._ended_at[position] - self._started
        if position in self.replies:
            return self.replies[position].stages[-1].received_at - self._started
        return None if position in self._failed else now - self._started


class RoundRunner(JobRunner):
    """Runs a job made of rounds: assigns the workers their parts, calls them, checks what they
    reply and quarantines the ones found wrong too often."""

    spec: GradientJob | MatrixJob

    def __init__(self, job: Job, store: JobStore, registry: WorkerRegistry, metrics: MasterMetrics,
                 settings: RunnerSettings, files: dict[str, Path]) -> None:
        super().__init__(job, store, registry, metrics, settings, files)
        self._assigned: dict[int, int] = {}  # position -> registry generation it was assigned at
        self._fates: list[tuple[int, str, float | None]] = []  # replies' fates not yet counted (count)
        checks = self.spec.checks
        self.quarantine = Quarantine(checks.quarantine_rule if checks is not None else None)

    @abstractmethod
    def _assignment(self, position: int) -> Assignment:
        """What worker ``position`` is told when it is assigned."""

    def _uploads(self, position: int) -> dict[str, np.ndarray]:
        """Named arrays sent to worker ``position`` after its assignment (none by default)."""
        return {}

    async def _acquire_workers(self) -> None:
        self._restore_checks()
        await super()._acquire_workers()
        self.metrics.errors_detected.labels(self.job.id)  # at 0 from the start: increase() sees the first
        self.metrics.errors_corrected.labels(self.job.id)
        for position, name in enumerate(self.job.stored.workers):
            self.metrics.wrong_replies.labels(self.job.id, name)
            self.metrics.quarantines.labels(self.job.id, name)
            self.metrics.worker_quarantined.labels(self.job.id, name).set(position in self.quarantine.out)

    async def _finish(self, state: str, reason: str) -> None:
        for position in self.quarantine.out:  # a finished job holds nobody out
            self.metrics.worker_quarantined.labels(self.job.id, self.job.stored.workers[position]).set(0)
        await super()._finish(state, reason)

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
        if self.spec.checks is None:
            return "more than the code tolerates"
        if isinstance(self.spec, GradientJob):
            return (f"too few left to decode and check the replies: more than {self.spec.code_stragglers - 1} "
                    "are gone (code.stragglers + verify.errors)")
        return ("too few left to decode and check the replies (checking needs one more than decoding; "
                "`verify: off` runs unchecked)")

    def _apply_findings(self, iteration: int, findings: Findings, record: Record | None) -> None:
        """Count a finished iteration's located workers toward quarantine (also when replaying, so
        a resumed job decides as the uninterrupted one did) and, with its ``record``, keep what
        checking found (:meth:`_keep_findings`)."""
        newly = self._quarantine(iteration, findings)
        if record is not None:
            self._keep_findings(findings, newly, record)

    def _quarantine(self, iteration: int, findings: Findings) -> list[int]:
        """Count a finished iteration's located workers toward quarantine; the workers it takes
        out of the job now (before the next round chooses its workers)."""
        newly = self.quarantine.note(iteration, findings.located, self._removable)
        names = self.job.stored.workers
        for position in newly:
            log.warning("job %s: worker %s (position %d) quarantined after iteration %d: located as wrong more than "
                        "%d times within %d iterations", self.job.id, names[position], position, iteration,
                        self.quarantine.rule.limit if self.quarantine.rule else 0,
                        self.quarantine.rule.window if self.quarantine.rule else 0)
            self.metrics.worker_quarantined.labels(self.job.id, names[position]).set(1)
        return newly

    def _keep_findings(self, findings: Findings, newly: list[int], record: Record) -> None:
        """Keep what checking found, and the workers it quarantined (``newly``), in the iteration's
        record, the job's row and the metrics."""
        names = self.job.stored.workers
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
        checks.setdefault("quarantined", {}).update({str(p): record.iteration for p in newly})
        for position in newly:
            self.metrics.quarantines.labels(self.job.id, names[position]).inc()
        if findings.detected:  # the series are there from the job's start (_acquire_workers)
            self._series(self.metrics.errors_detected, self.job.id).inc(findings.detected)
            self._series(self.metrics.errors_corrected, self.job.id).inc(findings.corrected)

    # --- workers -----------------------------------------------------------------------------------

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

    # --- calls ---------------------------------------------------------------------------------------

    @property
    def wire(self) -> np.dtype:
        """The dtype the workers' messages travel in (gradient jobs' ``wire``; float64 otherwise)."""
        return self.spec.wire_dtype if isinstance(self.spec, GradientJob) else np.dtype(np.float64)

    def call(self, position: int, iteration: int, params: Params, events: Callable[[Event], None]) -> ComputeCall:
        """Start one worker's part of an iteration. Its stages, then its end or its failure, reach
        ``events`` as :class:`StageArrived` and :class:`CallEnded` on the event loop; a call that
        was stopped reports nothing more."""
        name = self.job.stored.workers[position]
        link = self.registry.get(name).link
        self._series(self.metrics.bytes_sent, self.job.id).inc(params.array.nbytes)
        call = link.compute(self.job.id, iteration, params, self.spec.timeouts.call_s)
        wire = self.wire

        def on_stage(reply: StageReply) -> None:
            self._series(self.metrics.bytes_received, self.job.id).inc(reply.message.nbytes)
            if reply.message.dtype != wire:  # a worker that does not follow the spec: its call fails
                call.stop()
                events(CallEnded(position, call, WorkerCallError(
                    f"the worker sent {reply.message.dtype} messages; the job's wire is {wire}")))
                return
            if wire != np.float64:  # decoded in float64, from the rounded values
                reply = dataclasses.replace(reply, message=reply.message.astype(np.float64))
            events(StageArrived(position, call, reply))

        def on_end(error: WorkerCallError | None) -> None:
            if error is None:
                events(CallEnded(position, call))
                return
            if isinstance(error, WorkerForgotJob):
                self._assigned.pop(position, None)  # the worker lost its assignment (restarted)
            elif isinstance(error, WorkerUnreachable):
                self.registry.set_down(name)
            log.debug("job %s: worker %s failed iteration %d: %s", self.job.id, name, iteration, error)
            events(CallEnded(position, call, error))

        call.listen(on_stage, on_end)
        return call

    def count(self, position: int, outcome: str, seconds: float | None) -> None:
        """One reply's fate in the metrics: ``used``, ``cancelled`` (a straggler) or ``failed``;
        and how long the worker took to reply (see :meth:`Round.close`), unless its call failed
        before any. Counted in the event loop's next pass: a round is closed on the way from one
        iteration to the next, and the next round's calls go out first."""
        self._fates.append((position, outcome, seconds))
        if len(self._fates) == 1:
            asyncio.get_running_loop().call_soon(self._count_fates)

    def _count_fates(self) -> None:
        fates, self._fates = self._fates, []
        names = self.job.stored.workers
        for position, outcome, seconds in fates:
            self._series(self.metrics.responses, self.job.id, names[position], outcome).inc()
            if seconds is not None:
                self._series(self.metrics.response_seconds, names[position]).observe(seconds)
