"""The worker's logic, independent of gRPC: assignments, data, computing encoded messages.

What the master says to a round under way reaches its computation through the round's
:class:`coded.worker.streams.Orders` (coded.worker.rounds keeps one per round of a data-plane
connection): the service keeps no state per round, only each job's computations under way, which
its release stops."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass

import numpy as np

from coded.base.errors import NotFound, TooLarge
from coded.base.memory import release_free_memory
from coded.jobs.build import build_model, load_partitions
from coded.jobs.faults import faults_of
from coded.jobs.messages import Assignment
from coded.jobs.spec import GradientJob, JobSpec, MatrixJob, parse_job, to_json
from coded.worker.jobs import (
    MATRIX_SHARES,
    Cancelled,
    Flag,
    GradientShare,
    PartitionShare,
    Share,
    StagedShare,
    StreamedShare,
)
from coded.worker.metrics import WorkerMetrics
from coded.worker.streams import NEVER, Abandon, InlineRound, Orders
from coded.worker.threads import busy_threads, timed

__all__ = ["StageResult", "Stopped", "WorkerService"]

log = logging.getLogger(__name__)


#: a stage of at most this many multiply-adds (about a millisecond of one core) is computed on the
#: event loop: handing it to a thread and back costs 0.2-1 ms of latency per round on a busy machine
INLINE_WORK = 2e6


class Stopped(Exception):
    """The master stopped this computation: it has enough replies without it."""


@dataclass(frozen=True)
class StageResult:
    """One stage of a worker's message for one iteration; ``piece`` names a streamed piece."""

    stage: int
    message: np.ndarray
    compute_seconds: float
    delay_seconds: float
    piece: int | None = None


class WorkerService:
    """Jobs assigned to this worker and the computation of their messages.

    Parameters
    ----------
    metrics : WorkerMetrics
    max_jobs : int
        Assignments held at once; more is refused (TooLarge).
    torch_device : str
        Where torch models compute ("cpu", "cuda", "cuda:1").
    """

    def __init__(self, metrics: WorkerMetrics, max_jobs: int = 64, torch_device: str = "cpu") -> None:
        self.metrics = metrics
        self._torch_device = torch_device
        self._jobs: dict[str, StagedShare | StreamedShare] = {}
        self._max_jobs = max_jobs
        self.running = 0
        self._under_way: dict[str, set[Orders]] = {}  # job id -> the orders of its computations under way

    def jobs(self) -> list[str]:
        return sorted(self._jobs)

    def position(self, job_id: str) -> int | None:
        """This worker's position in a job it holds (None: it does not hold it)."""
        job = self._jobs.get(job_id)
        return None if job is None else job.index

    async def assign(self, assignment: Assignment) -> tuple[int, ...]:
        """Take (or retake) a position in a job; returns the partitions it holds (gradient jobs)."""
        job_id, index = assignment.job_id, assignment.index
        if job_id not in self._jobs and len(self._jobs) >= self._max_jobs:
            raise TooLarge(f"this worker already holds {self._max_jobs} jobs")
        spec = await self._spec(assignment)
        if not 0 <= index < spec.workers:
            raise ValueError(f"worker_index {index} is outside 0..{spec.workers - 1}")
        faults = faults_of(spec.faults, spec.seed, spec.workers, assignment.trace_csv, assignment.slowdown_csv)
        stragglers, soft_errors, slowdowns = faults.stragglers, faults.soft_errors, faults.slowdowns
        if isinstance(spec, MatrixJob):
            self._jobs[job_id] = MATRIX_SHARES[type(spec)](spec, index, stragglers, soft_errors, slowdowns,
                                                           code=spec.matmul_code)
            log.info("assigned %s job %s position %d", spec.kind, job_id, index)
            return ()
        if not isinstance(spec, GradientJob):
            raise ValueError(f"kind {spec.kind}: CodeNet peers are started with StartCodeNet, not assigned")
        # in a thread: a torch model imports PyTorch (seconds, the first time) and runs a trial batch
        model = await asyncio.to_thread(build_model, spec.model, assignment.shape or (assignment.features,),
                                        assignment.classes, self._torch_device)
        job: GradientShare | StreamedShare
        if spec.streamed:
            job = StreamedShare(spec, index, stragglers, soft_errors, slowdowns, model=model, layout=spec.layout)
        else:
            job = GradientShare(spec, index, stragglers, soft_errors, slowdowns, model=model, code=spec.gradient_code)
        if not assignment.data_uploaded:
            job.rows = await asyncio.to_thread(self._generated_rows, job)
        self._jobs[job_id] = job
        log.info("assigned job %s position %d (partitions %s%s)", job_id, index, job.partitions,
                 ", streamed" if spec.streamed else "")
        return job.partitions

    async def _spec(self, assignment: Assignment) -> JobSpec:
        """The assignment's spec: the one this worker holds for the job when it is the same (a
        retaken position), else parsed, which builds the job's code (seconds for large codes)."""
        held = self._jobs.get(assignment.job_id)
        if held is not None and to_json(held.spec) == assignment.spec_json:
            return held.spec
        return await asyncio.to_thread(parse_job, assignment.spec_json)

    @staticmethod
    def _generated_rows(job: PartitionShare) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        return load_partitions(job.spec, job.k, job.partitions)

    def upload(self, job_id: str, arrays: dict[str, np.ndarray]) -> None:
        """Store uploaded arrays of a job (partitions, or encoded blocks)."""
        self._job(job_id).accept(arrays)

    def release(self, job_id: str) -> None:
        """Forget a job; its computations under way stop (their stops may not have arrived yet)."""
        for orders in self._under_way.get(job_id, ()):
            orders.stop()
        if self._jobs.pop(job_id, None) is not None:
            self.metrics.job_finished(job_id)
            release_free_memory()  # the job's partitions, freed with it

    def _job(self, job_id: str) -> StagedShare | StreamedShare:
        job = self._jobs.get(job_id)
        if job is None:  # the worker restarted, or the job was released: the master assigns it again
            raise NotFound(f"job {job_id} is not assigned to this worker")
        return job

    async def compute(self, job_id: str, iteration: int, params: np.ndarray,
                      orders: Orders | None = None) -> AsyncIterator[StageResult]:
        """The message of one iteration, stage by stage (a streamed job's: piece by piece); what
        the master says to it goes to ``orders`` (also before it begins; without: a computation
        only the job's release stops).

        Raises
        ------
        Stopped
            When ``orders`` are stopped (or the job released); the computing thread stops at its
            next partition.
        """
        orders = Orders() if orders is None else orders
        job = self._job(job_id)
        if isinstance(job, StreamedShare):
            stages = self._pieces(job, job_id, iteration, params, orders)
        else:
            stages = self._stages(job, job_id, iteration, params)
        under_way = self._under_way.setdefault(job_id, set())
        under_way.add(orders)
        waits: tuple[asyncio.Future, ...] = ()
        try:
            while True:
                step = asyncio.ensure_future(anext(stages))
                waits = (step, asyncio.ensure_future(orders.stopped.wait()))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise Stopped
                waits[1].cancel()
                try:
                    result = step.result()
                except StopAsyncIteration:
                    return
                yield result
        finally:
            under_way.discard(orders)
            if not under_way:  # the set in the table, as long as it holds this computation's orders
                del self._under_way[job_id]
            for wait in waits:
                wait.cancel()  # a step under way: interrupts the injected delay or the wait for the thread
            await asyncio.gather(*waits, return_exceptions=True)
            await stages.aclose()

    def inline_delay(self, job_id: str, iteration: int, params: np.ndarray) -> float | None:
        """Whether a round is computed at once, on the calling thread (:meth:`compute_now`): when
        all it may wait for is its injected delay (no busy threads, no slowdown) and either every
        stage is small enough that a thread hop would cost more than the work (INLINE_WORK), or
        no stop can come to cut the round short (an uncoded job: the master waits for it). Then the
        delay in seconds (0.0: none), which the caller waits out (a timer, cancelled by a stop:
        no task, no thread); else None, and :meth:`compute` runs the round.

        Raises
        ------
        ValueError
            For ``params`` that do not fit the job (checked here, before any delay).
        """
        job = self._job(job_id)
        if isinstance(job, StreamedShare):
            return None  # piece by piece, taking the master's HAVE and STOP in between
        if (not job.ready or job.slowed(iteration)
                or (not job.waited_for
                    and any(job.stage_work(stage) > INLINE_WORK for stage in range(len(job.stage_weights()))))):
            return None  # compute() checks the rest
        self._check_input(job, params)
        return job.stragglers.delay(iteration, job.index)

    def compute_now(self, job_id: str, iteration: int, params: np.ndarray, delay: float = 0.0) -> list[StageResult]:
        """The whole message of a round that :meth:`inline_delay` allows, at once, ``delay``
        seconds (its injected delay) after it arrived. Nothing can stop it: it is over before a
        stop could be read."""
        job = self._job(job_id)  # released meanwhile: NotFound
        assert isinstance(job, StagedShare)  # as when inline_delay() let it through
        weights = job.stage_weights()
        total = sum(weights) or 1
        delays = self.metrics.injected_delay_seconds.labels(job_id)
        results = []
        for stage, weight in enumerate(weights):
            stage_delay = delay * weight / total  # as compute() spreads it
            delays.observe(stage_delay)
            results.append(self._stage(job, job_id, stage, iteration, params, None, stage_delay))
        return results

    def stream_inline(self, job_id: str, iteration: int, params: np.ndarray, orders: Orders) -> InlineRound | None:
        """Whether a streamed round is computed on the calling thread, piece by piece as the
        master's frames come (:meth:`stream_now`), with no task: when its pieces are small enough
        that a thread hop would cost more than the work (INLINE_WORK) and all it may wait for is
        its injected delay. Then the round to pass to :meth:`stream_now`, whose ``delay`` (0.0:
        none) the caller waits out (a timer, cancelled by a stop) first; else None, and
        :meth:`compute` runs the round. What the master says to the round goes to ``orders``.

        Raises
        ------
        ValueError
            For ``params`` that do not fit the job (checked here, before any delay).
        """
        job = self._job(job_id)
        if (not isinstance(job, StreamedShare) or not job.ready
                or job.slowed(iteration) or (work := job.piece_work()) > INLINE_WORK):
            return None
        self._check_input(job, params)
        orders.begin(job)
        delay = job.stragglers.delay(iteration, job.index)
        return InlineRound(iteration, params, delay, max(1, int(INLINE_WORK // max(work, 1.0))), orders)

    def stream_now(self, job_id: str, round_: InlineRound) -> tuple[list[StageResult], bool, bool]:
        """An inline round's next pieces (:meth:`stream_inline`): at first its own partition's
        (once its delay is over), then what a WANT asked for, without those a HAVE said the
        master has; none when nothing is asked for now. At most about INLINE_WORK of them per
        call, so that the caller reads the master's frames (a HAVE, a STOP) at least that often.
        Also whether more is asked for, and whether the round is over (nothing is left that it
        could send)."""
        job = self._job(job_id)  # released meanwhile: NotFound
        assert isinstance(job, StreamedShare)  # as when stream_inline() made the round
        stream = round_.orders
        if not round_.begun:
            round_.begun = True
            self.metrics.injected_delay_seconds.labels(job_id).observe(round_.delay)
        results = []
        for _ in range(round_.batch):
            piece = stream.next_piece()
            if piece is None:
                break
            delay = round_.delay if stream.sent == 0 else 0.0
            results.append(self._piece(job, job_id, stream.sent, piece, round_.iteration, round_.params, NEVER,
                                       delay))
            stream.done.add(piece)
            stream.sent += 1
        return results, bool(stream.wanted), stream.exhausted()

    def _check_ready(self, job: Share, job_id: str, params: np.ndarray) -> None:
        """Raise unless the job's data have arrived and ``params`` fit it."""
        if not job.ready:  # held in part: the master assigns it again, with the data
            raise NotFound(f"job {job_id}: the data of this worker's part have not arrived")
        self._check_input(job, params)

    @staticmethod
    def _check_input(job: Share, params: np.ndarray) -> None:
        """Raise ValueError for ``params`` that do not fit ``job`` or are not finite."""
        job.check_input(params)
        if not np.isfinite(params).all():
            raise ValueError("the input contains NaN or infinity")

    def _stage(self, job: StagedShare, job_id: str, stage: int, iteration: int, params: np.ndarray,
               cancel: threading.Event | None, delay: float) -> StageResult:
        """Compute one stage on the event loop's thread, with its metrics and injected soft errors."""
        message, seconds = timed(job.compute_stage, stage, iteration, params, cancel or NEVER)
        return self._result(job, job_id, message, seconds, stage, iteration, delay)

    def _result(self, job: Share, job_id: str, message: np.ndarray, seconds: float, stage: int, iteration: int,
                delay: float, piece: int | None = None) -> StageResult:
        """A computed stage or piece, counted in the metrics (on the event loop's thread: they are
        tallies), with its injected soft error."""
        self.metrics.compute_seconds.labels(job_id).observe(seconds)
        number = stage if piece is None else piece
        if not job.plain and job.soft_errors.corrupt(message, job.index, iteration, number,
                                                     partitions=job.message_partitions(number)):
            self.metrics.soft_errors.labels(job_id).inc()
        if message.dtype != job.wire:  # rounded once, after the float64 computation (and its soft error)
            message = message.astype(job.wire)
        return StageResult(stage, message, seconds, delay, piece)

    async def _stages(self, job: StagedShare, job_id: str, iteration: int,
                      params: np.ndarray) -> AsyncGenerator[StageResult, None]:
        """The stages of :meth:`compute`. Cancelling stops it between partitions."""
        self._check_ready(job, job_id, params)
        weights = job.stage_weights()
        total = sum(weights) or 1
        delay = job.stragglers.delay(iteration, job.index)
        with self._computing(job) as cancel:
            for stage, weight in enumerate(weights):
                stage_delay = delay * weight / total
                if stage_delay:
                    await asyncio.sleep(stage_delay)
                self.metrics.injected_delay_seconds.labels(job_id).observe(stage_delay)
                work = functools.partial(timed, job.compute_stage, stage, iteration, params, cancel)
                # a small stage here (the thread hop would cost more than the work); else in a
                # thread, so that the loop takes the stop that cuts a straggler off
                message, seconds = work() if job.stage_work(stage) <= INLINE_WORK else await asyncio.to_thread(work)
                result = self._result(job, job_id, message, seconds, stage, iteration, stage_delay)
                await self._slow_down(job, iteration, result.compute_seconds)
                yield result

    @contextlib.contextmanager
    def _computing(self, job: Share) -> Iterator[threading.Event]:
        """One round's computation under way: counted as running, with the job's busy threads
        (straggler model "cpu"); the event it yields stops the computing thread at its next
        chunk of work when the round is cancelled or closed."""
        cancel = threading.Event()
        self.running += 1
        self.metrics.running.inc()
        try:
            with busy_threads(job.stragglers.busy_threads(job.index)):
                yield cancel
        except (asyncio.CancelledError, GeneratorExit, Cancelled):
            cancel.set()
            raise
        finally:
            self.running -= 1
            self.metrics.running.dec()

    @staticmethod
    async def _slow_down(job: Share, iteration: int, seconds: float) -> None:
        """A partial straggler (faults.slowdown): what took ``seconds`` takes ``factor`` times as
        long. It waits rather than spins, as a slower machine of its own would not take another
        worker's core."""
        factor = job.slowdowns.factor(iteration, job.index)
        if factor > 1:
            await asyncio.sleep((factor - 1) * seconds)

    def _piece(self, job: StreamedShare, job_id: str, stage: int, piece: int, iteration: int, params: np.ndarray,
               abandon: Flag, delay: float) -> StageResult:
        """Compute one streamed piece on the event loop's thread, with its metrics and soft errors."""
        message, seconds = timed(job.compute_piece, piece, iteration, params, abandon)
        return self._result(job, job_id, message, seconds, stage, iteration, delay, piece)

    async def _pieces(self, job: StreamedShare, job_id: str, iteration: int, params: np.ndarray,
                      stream: Orders) -> AsyncGenerator[StageResult, None]:
        """The pieces of a streamed round: this worker's own partition (the first of its order),
        then the pieces the master asks for (``Orders.want``), as they come, until the round is
        stopped; pieces the master has (``Orders.have``) are skipped."""
        self._check_ready(job, job_id, params)
        stream.begin(job)
        small = job.piece_work() <= INLINE_WORK
        delay = job.stragglers.delay(iteration, job.index)
        with self._computing(job) as cancel:
            if delay:  # a late worker: its whole delay before its first piece
                await asyncio.sleep(delay)
            self.metrics.injected_delay_seconds.labels(job_id).observe(delay)
            while True:
                piece = stream.next_piece()
                if piece is None:
                    if stream.exhausted():
                        return  # nothing left that it could send
                    stream.asked.clear()
                    await stream.asked.wait()  # the master's next WANT, or the stop that ends the round
                    continue
                work = functools.partial(timed, job.compute_piece, piece, iteration, params,
                                         Abandon(cancel, stream.skip, piece))
                try:
                    message, seconds = work() if small else await asyncio.to_thread(work)
                except Cancelled:
                    if piece in stream.skip and not cancel.is_set():
                        continue  # another worker delivered it meanwhile
                    raise
                result = self._result(job, job_id, message, seconds, stream.sent, iteration,
                                      delay if stream.sent == 0 else 0.0, piece)
                stream.done.add(piece)
                await self._slow_down(job, iteration, result.compute_seconds)
                if piece in stream.skip:
                    continue
                stream.sent += 1
                yield result
                await asyncio.sleep(0)  # take the HAVE, WANT and STOP frames that came while it computed
