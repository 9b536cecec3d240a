"""The runner of every job made of rounds (gradient and matmul jobs; CodeNet's peers run their
own): what a round needs of it.

A :class:`RoundRunner` assigns each worker its part, waits (PAUSED) while too few are alive to
decode, and starts each worker's call of a round (:mod:`coded.master.calls`: the round, and the
events its calls report), counting their fates. What checking found (:class:`Findings`) counts
toward quarantine here too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import time
import weakref
from abc import abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coded.base.listener import Listener
from coded.base.words import plural
from coded.jobs.messages import Assignment
from coded.jobs.spec import GradientJob, MatrixJob, to_json
from coded.jobs.spec.faults import SlowdownSpec, StragglerSpec
from coded.master.calls import CallEnded, Event, StageArrived
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

__all__ = ["Findings", "HeartbeatWatch", "RoundRunner"]

log = logging.getLogger(__name__)

#: how long past a worker's heartbeat lapse its calls are failed: the registry counts it gone
#: only once the lapse is over
LIVENESS_SLACK_S = 0.01
#: workers a job sends its data to at once: the master holds one array of each upload (a
#: partition), so at most this many partitions more than the data; a link is rarely faster
#: than the master can make the arrays, so more at once would not start a job sooner
UPLOADS_AT_ONCE = 2


@dataclass(frozen=True)
class Findings:
    """What checking one iteration's replies found."""

    checked: bool = False          # a surplus of replies confirmed the result
    detected: int = 0              # wrong replies detected
    corrected: int = 0             # ... that the result was decoded without
    located: tuple[int, ...] = ()  # positions whose replies were located as wrong


class HeartbeatWatch:
    """Fails a call (an erasure) once its worker has missed heartbeats for the registry's timeout
    and its call has received nothing for as long: bytes arriving are life too (on a slow link a
    worker's heartbeats can queue behind its message for longer than the timeout).

    A host cut off the network sends no reset, so its connection looks open and its call would
    hold its round until the call's deadline (``timeouts.call_s``, minutes), although the rest of
    the master knows the worker is gone. The call's ``on_end`` goes through :meth:`end`, which ends
    the watch. The watch's timer holds it only weakly: a call stopped by its round lets its
    listener go, and with it the watch (and the runner it would report to), at once.
    """

    def __init__(self, registry: WorkerRegistry, name: str, call: ComputeCall,
                 on_end: Callable[[WorkerCallError | None], None]) -> None:
        self._registry, self._name, self._call = registry, name, call
        self._on_end: Listener[WorkerCallError | None] = Listener(on_end)
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    def end(self, error: WorkerCallError | None) -> None:
        """The call's end (``error`` None when it completed); reported once."""
        if self._on_end.listening:
            if self._timer is not None:
                self._timer.cancel()
            self._on_end.last(error)

    def _arm(self) -> None:
        delay = self._registry.lapses_in(self._name) + LIVENESS_SLACK_S
        self._timer = asyncio.get_running_loop().call_later(delay, _check, weakref.ref(self))

    def check(self) -> None:
        self._timer = None
        if not self._on_end.listening or self._call.stopping:
            return
        if self._registry.alive(self._name) or self._call.received_within(self._registry.timeout):
            self._arm()  # a heartbeat came (the lapse moved on), or its message is still arriving
            return
        self._call.stop()  # it reports nothing more: this is its end
        self.end(WorkerUnreachable(f"no heartbeat for {self._registry.timeout:g} s: the worker is gone"))


def _check(watch: weakref.ref[HeartbeatWatch]) -> None:
    alive = watch()
    if alive is not None:
        alive.check()


class RoundRunner(JobRunner):
    """Runs a job made of rounds: assigns the workers their parts, calls them, checks what they
    reply and quarantines the ones found wrong too often."""

    spec: GradientJob | MatrixJob

    def __init__(self, job: Job, store: JobStore, registry: WorkerRegistry, metrics: MasterMetrics,
                 settings: RunnerSettings, files: dict[str, Path]) -> None:
        super().__init__(job, store, registry, metrics, settings, files)
        self._assigned: dict[int, int] = {}  # position -> registry generation it was assigned at
        self._uploading = asyncio.Semaphore(UPLOADS_AT_ONCE)
        self._fates: list[tuple[int, str, float | None]] = []  # replies' fates not yet counted (count)
        checks = self.spec.checks
        self.quarantine = Quarantine(checks.quarantine_rule if checks is not None else None)

    @abstractmethod
    def _assignment(self, position: int) -> Assignment:
        """What worker ``position`` is told when it is assigned."""

    def _uploads(self, position: int) -> Iterator[tuple[str, np.ndarray]]:
        """Named arrays sent to worker ``position`` after its assignment (none by default), each
        made when it is sent: a worker's share is never in the master's memory at once."""
        return iter(())

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
        assignment = self._assignment(position)
        await record.link.assign(assignment, timeout)
        if assignment.data_uploaded:
            # a few at a time: each upload holds the array it is sending, and a job assigns all
            # its workers at once
            async with self._uploading:
                await record.link.upload(self.job.id, self._uploads(position), timeout)
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
                        await self.registry.mark_down(self.job.stored.workers[i], f"assigning the job: {result}")
                continue
            if enough(alive):
                if self.job.state == "PAUSED":
                    await self._set_state("RUNNING")
                return alive
            gone = [self.job.stored.workers[i] for i in range(self.spec.workers) if i not in alive]
            unusable = self.registry.unusable()
            why = "".join(f"; {name} is unusable: {unusable[name]}" for name in gone if name in unusable)
            if deadline is None or (why and why not in self.job.stored.reason):
                deadline = deadline or time.monotonic() + self.spec.timeouts.paused_s
                await self._set_state("PAUSED", f"{plural(len(gone), 'worker')} gone ({', '.join(gone)}); "
                                                f"{self._too_few()}{why}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobFailed(f"workers {', '.join(gone)} did not return within {self.spec.timeouts.paused_s:g} s"
                                f"{why}")
            await self.registry.wait_change(min(left, 1.0))

    # --- calls ---------------------------------------------------------------------------------------

    @functools.cached_property
    def wire(self) -> np.dtype:
        """The dtype the workers' messages travel in (the job spec's rule)."""
        return self.spec.wire_dtype

    def _misfit(self, reply: StageReply) -> str | None:
        """Why ``reply`` cannot be a stage of this job's messages (None: it can be): a worker that
        sends one does not follow the spec, and its call fails, not the job. Here the dtype;
        runners that know their messages' shapes check those too."""
        if reply.message.dtype != self.wire:
            return f"the worker sent {reply.message.dtype} messages; the job's wire is {self.wire}"
        return None

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
            problem = self._misfit(reply)
            if problem is not None:
                call.stop()
                events(CallEnded(position, call, WorkerCallError(problem)))
                return
            if wire != np.float64:  # decoded in float64, from the rounded values
                reply = dataclasses.replace(reply, message=reply.message.astype(np.float64))
            events(StageArrived(position, call, reply))

        def on_end(error: WorkerCallError | None) -> None:
            if error is None:
                self.registry.served(name)
                events(CallEnded(position, call))
                return
            if isinstance(error, WorkerForgotJob):
                self._assigned.pop(position, None)  # the worker lost its assignment (restarted)
            elif isinstance(error, WorkerUnreachable):
                self.registry.set_down(name, str(error))
            log.debug("job %s: worker %s failed iteration %d: %s", self.job.id, name, iteration, error)
            events(CallEnded(position, call, error))

        call.listen(on_stage, HeartbeatWatch(self.registry, name, call, on_end).end)
        return call

    def count(self, position: int, outcome: str, seconds: float | None) -> None:
        """One reply's fate in the metrics: ``used``, ``cancelled`` (a straggler) or ``failed``;
        and how long the worker took to reply (see :meth:`coded.master.calls.Round.close`), unless its call failed
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
