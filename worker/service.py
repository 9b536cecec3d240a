"""The worker's logic, independent of gRPC: assignments, data, and the one driver that computes a
round's messages (:meth:`WorkerService.compute_round`).

What the master says to a round under way reaches its computation through the round's
:class:`coded.worker.streams.Orders` (coded.worker.rounds keeps one per round of a data-plane
connection): the service keeps no state per round, only each job's computations under way, which
its release stops."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from coded.base.errors import NotFound, TooLarge
from coded.base.memory import release_free_memory
from coded.codes.verify import finite
from coded.jobs.build import build_model, load_partitions
from coded.jobs.faults import faults_of
from coded.jobs.messages import Assignment
from coded.jobs.spec import GradientJob, JobSpec, MatrixJob, parse_job, to_json
from coded.worker.jobs import Cancelled, GradientShare, PartitionShare, Share, StreamedShare
from coded.worker.matrices import MATRIX_SHARES
from coded.worker.metrics import WorkerMetrics
from coded.worker.streams import Orders
from coded.worker.threads import busy_threads, timed

__all__ = ["INLINE_WORK", "Outbox", "StageResult", "Stopped", "WorkerService"]

log = logging.getLogger(__name__)


#: a unit of at most this many multiply-adds (about a millisecond of one core) is computed on the
#: event loop: handing it to a thread and back costs 0.2-1 ms of latency per round on a busy machine
INLINE_WORK = 2e6
FLOAT64 = np.dtype(np.float64)


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
        self._jobs: dict[str, Share] = {}
        self._max_jobs = max_jobs
        self.running = 0  # rounds computing (coded_worker_running_calls reads it when scraped)
        metrics.running.set_function(lambda: self.running)
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
            job.hold(await asyncio.to_thread(self._generated_rows, job))
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
        for orders in list(self._under_way.get(job_id, ())):
            orders.stop()
        if self._jobs.pop(job_id, None) is not None:
            self.metrics.job_finished(job_id)
            release_free_memory()  # the job's partitions, freed with it

    def _job(self, job_id: str) -> Share:
        job = self._jobs.get(job_id)
        if job is None:  # the worker restarted, or the job was released: the master assigns it again
            raise NotFound(f"job {job_id} is not assigned to this worker")
        return job

    def compute_round(self, job_id: str, iteration: int, params: np.ndarray, orders: Orders,
                      outbox: Outbox) -> Coroutine[Any, Any, None]:
        """The computation of one round: the one driver of every kind of round (whole replies,
        streamed pieces, matrix products). Its messages go to ``outbox`` as they are computed.

        Each unit the job's share says is next (:meth:`coded.worker.jobs.Share.next_unit`) is
        computed on the calling thread when it is about a millisecond of work or less
        (``INLINE_WORK``: handing it to a thread and back would cost more), or when no stop can
        cut the round short (an uncoded job: the master waits for it); in a thread otherwise, so
        that whoever runs the round reads the stop that cuts a straggler off meanwhile. Between
        units small enough to compute inline, it lets the loop read the master's frames (a HAVE,
        a STOP) about every INLINE_WORK. It waits for its injected delay (a timer), the master's
        next WANT (a streamed round with nothing asked for), a thread, a partial straggler's
        slowdown and a full link: the one who runs it steps it up to its first wait at once
        (coded.worker.rounds) or runs it as a task (:meth:`compute`).

        Raises
        ------
        NotFound
            The job is not held here, or its data have not arrived (raised by this call, before
            any delay; so is ValueError for ``params`` that do not fit the job).
        Stopped
            From the computation, when ``orders`` are stopped (or the job released): at once at
            a wait, a thread at its next chunk of work.
        """
        job = self._job(job_id)
        self._check_ready(job, job_id, params)
        return self._compute(job, job_id, iteration, params, orders, outbox)

    async def _compute(self, job: Share, job_id: str, iteration: int, params: np.ndarray, orders: Orders,
                       outbox: Outbox) -> None:
        delay = job.stragglers.delay(iteration, job.index)
        slowed = job.slowed(iteration)
        delays = self.metrics.injected_delay_seconds.labels(job_id)
        under_way = self._under_way.setdefault(job_id, set())
        under_way.add(orders)
        self.running += 1
        inline = 0.0  # work computed on the calling thread since the loop last read frames
        try:
            # straggler model "cpu": threads spin beside it (a plain position has none to start)
            with contextlib.nullcontext() if job.plain else busy_threads(job.stragglers.busy_threads(job.index)):
                while True:
                    if orders.stopped.is_set():
                        raise Stopped
                    if inline > INLINE_WORK and not job.over(orders):
                        await asyncio.sleep(0)  # the frames that came meanwhile: a HAVE, a WANT, a STOP
                        inline = 0.0
                        continue
                    unit = job.next_unit(orders)
                    if unit is None:
                        if job.over(orders):
                            return
                        await orders.more_wanted()
                        inline = 0.0
                        continue
                    wait = delay * unit.delay
                    if wait:
                        await asyncio.sleep(wait)
                        inline = 0.0
                    if unit.delay:
                        delays.observe(wait)
                    stop, out = job.stop_flag(unit, orders), outbox.buffer(unit.shape, FLOAT64)
                    try:
                        if not slowed and (unit.work <= INLINE_WORK or job.waited_for):
                            began = time.thread_time()  # what timed() measures, without its call
                            message = job.compute(unit, iteration, params, stop, out)
                            seconds = time.thread_time() - began
                            inline += unit.work
                        else:
                            message, seconds = await self._in_thread(
                                functools.partial(timed, job.compute, unit, iteration, params, stop, out), orders)
                            inline = 0.0
                    except Cancelled:
                        if orders.stopped.is_set():
                            raise Stopped from None
                        job.computed(unit, orders)  # the master has it: skipped
                        continue
                    if orders.stopped.is_set():  # while its thread computed: nothing more is sent
                        raise Stopped
                    result = self._result(job, job_id, message, seconds, orders.sent, iteration, wait,
                                          unit.number if unit.piece else None, outbox)
                    fresh = job.computed(unit, orders)
                    if not job.plain:
                        await self._slow_down(job, iteration, seconds)
                    if not fresh:
                        continue
                    orders.sent += 1
                    outbox.send(result)
                    if outbox.full:
                        await outbox.drain()
        finally:
            orders.cancel.set()  # a thread still on one of its units stops at its next chunk
            self.running -= 1
            under_way.discard(orders)
            if not under_way and self._under_way.get(job_id) is under_way:
                del self._under_way[job_id]

    @staticmethod
    async def _in_thread(work: Callable[[], tuple[np.ndarray, float]], orders: Orders) -> tuple[np.ndarray, float]:
        """``work`` in a thread; meanwhile the round is ``computing`` (a stop tells the thread to
        stop at its next chunk, and the round ends once it has)."""
        orders.computing = True
        try:
            return await asyncio.to_thread(work)
        finally:
            orders.computing = False

    async def compute(self, job_id: str, iteration: int, params: np.ndarray,
                      orders: Orders | None = None) -> AsyncIterator[StageResult]:
        """:meth:`compute_round` as a task, its messages as they come (a whole reply stage by stage,
        a streamed job's pieces one by one); what the master says to it goes to ``orders`` (also
        before it begins; without: a computation only the job's release stops). The master's core
        tests run rounds this way (tests/master/inprocess.py); the data plane steps them.

        Raises
        ------
        Stopped
            When ``orders`` are stopped (or the job released).
        """
        orders = Orders() if orders is None else orders
        results: asyncio.Queue[StageResult | None] = asyncio.Queue()
        task = asyncio.ensure_future(self.compute_round(job_id, iteration, params, orders, _Queued(results)))
        task.add_done_callback(lambda _: results.put_nowait(None))

        def stopped() -> None:
            if not orders.computing:  # a round whose thread computes ends once the thread has stopped
                task.cancel()

        orders.on_stop(stopped)
        try:
            while (result := await results.get()) is not None:
                yield result
            if task.cancelled():
                raise Stopped
            task.result()  # its failure, if it failed
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _check_ready(self, job: Share, job_id: str, params: np.ndarray) -> None:
        """Raise unless the job's data have arrived and ``params`` fit it."""
        if not job.ready:  # held in part: the master assigns it again, with the data
            raise NotFound(f"job {job_id}: the data of this worker's part have not arrived")
        job.check_input(params)
        if not finite(params):
            raise ValueError("the input contains NaN or infinity")

    def _result(self, job: Share, job_id: str, message: np.ndarray, seconds: float, stage: int, iteration: int,
                delay: float, piece: int | None, outbox: Outbox) -> StageResult:
        """A computed stage or piece, counted in the metrics (on the event loop's thread: they are
        tallies), with its injected soft error, in the job's wire dtype."""
        self.metrics.compute_seconds.labels(job_id).observe(seconds)
        number = stage if piece is None else piece
        if not job.plain and job.soft_errors.corrupt(message, job.index, iteration, number,
                                                     partitions=job.message_partitions(number)):
            self.metrics.soft_errors.labels(job_id).inc()
        if message.dtype != job.wire:  # rounded once, after the float64 computation (and its soft error)
            wire = outbox.buffer(message.shape, job.wire)
            np.copyto(wire, message, casting="same_kind")
            message = wire
        return StageResult(stage, message, seconds, delay, piece)

    @staticmethod
    async def _slow_down(job: Share, iteration: int, seconds: float) -> None:
        """A partial straggler (faults.slowdown): what took ``seconds`` takes ``factor`` times as
        long. It waits rather than spins, as a slower machine of its own would not take another
        worker's core."""
        factor = job.slowdowns.factor(iteration, job.index)
        if factor > 1:
            await asyncio.sleep((factor - 1) * seconds)


class Outbox(Protocol):
    """Where a round's messages go: arrays to compute them into, and their sending."""

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array of ``shape`` to write a message into (its contents undefined)."""

    def send(self, result: StageResult) -> None:
        """Send a computed message (a stage, or a streamed piece)."""

    @property
    def full(self) -> bool:
        """Whether the link takes no more for now (:meth:`drain` waits until it does)."""

    async def drain(self) -> None:
        """Until the link takes more: a large message leaves before the next is queued."""


class _Queued:
    """An outbox into a queue (:meth:`WorkerService.compute`)."""

    def __init__(self, queue: asyncio.Queue[StageResult | None]) -> None:
        self._queue = queue

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def send(self, result: StageResult) -> None:
        self._queue.put_nowait(result)

    full = False

    async def drain(self) -> None:
        return None
