"""Running one gradient-coding job: acquire workers, iterate, decode, step, checkpoint.

Synchronous schemes fan every iteration out to all n workers at once, decode from the first
decodable set of replies and cancel the rest; a worker that fails or is unreachable is an
erasure. ``lwpd`` runs asynchronously: each message is applied the moment it arrives and that
worker immediately gets the current parameters.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from coded.v1 import worker_pb2
from common.codes import CodeError, GradientCode
from common.data import Dataset
from common.evaluation import evaluate
from common.jobspec import FileData, GradientJob, to_json
from common.metrics import MasterMetrics
from common.optim import build_optimizer
from common.tensor import to_chunks
from common.training import build_code, load_data, make_model, split_rows
from master.calls import StageReply, is_gone, params_chunks
from master.job import Job
from master.registry import WorkerRegistry
from master.store import Checkpoint, JobStore, Record

__all__ = ["GradientRunner", "RunnerSettings", "JobFailed"]

log = logging.getLogger(__name__)

#: decode in a thread above this many floats, so the event loop keeps serving
DECODE_IN_THREAD = 1 << 16
#: history rows written to SQLite at least this often
FLUSH_EVERY_S = 1.0


class JobFailed(Exception):
    """The job cannot continue; the message is the reason users see."""


@dataclass(frozen=True)
class RunnerSettings:
    chunk_bytes: int = 1 << 20
    assign_timeout_s: float = 120.0


@dataclass
class _Reply:
    """What one worker sent in the current iteration."""

    stages: list[StageReply]


class GradientRunner:
    """Runs a gradient-coding job to its end (or until the master stops)."""

    def __init__(self, job: Job, store: JobStore, registry: WorkerRegistry, metrics: MasterMetrics,
                 settings: RunnerSettings, files: dict[str, Path]) -> None:
        self.job = job
        self.spec: GradientJob = job.spec
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.settings = settings
        self.files = files
        self.code: GradientCode = build_code(self.spec)
        self._assigned: dict[int, int] = {}  # position -> registry generation it was assigned at
        self._last_flush = time.monotonic()

    # --- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        job = self.job
        try:
            await self._prepare()
            await self._acquire_workers()
            if self.spec.code.scheme == "lwpd":
                await self._run_async()
            else:
                await self._run_sync()
            await self._finish("SUCCEEDED", "")
        except asyncio.CancelledError:
            if job.cancel_requested:
                await self._finish("CANCELLED", "cancelled by a client")
            raise
        except JobFailed as error:
            await self._finish("FAILED", str(error))
        except Exception as error:  # noqa: BLE001 - the job fails, the master keeps running
            log.exception("job %s failed", job.id)
            await self._finish("FAILED", f"internal error: {type(error).__name__}: {error}")

    async def _prepare(self) -> None:
        spec = self.spec
        self.dataset: Dataset = await asyncio.to_thread(load_data, spec, self.files)
        self.rows = split_rows(spec, self.dataset, self.code.k)
        self.model = make_model(spec, self.dataset.features, self.dataset.classes)
        self.samples = len(self.dataset.y_train)
        self.optimizer = build_optimizer(spec.optimizer.model_dump(exclude_none=True))
        checkpoint = self.store.load_checkpoint(self.job.id)
        if checkpoint is not None and checkpoint.params.shape == (self.model.size,):
            self.params = checkpoint.params
            self.optimizer.load_state_dict(checkpoint.optimizer)
            self.job.stored.iteration = checkpoint.iteration
            self.base_elapsed = checkpoint.elapsed
            self.store.truncate_history(self.job.id, checkpoint.iteration)
            log.info("job %s resumes from its checkpoint at iteration %d", self.job.id, checkpoint.iteration)
        else:
            self.params = self.model.init_params(np.random.default_rng(spec.seed))
            self.job.stored.iteration = 0
            self.base_elapsed = 0.0
            self.store.truncate_history(self.job.id, 0)
        self.started = time.perf_counter()
        self.job.unsaved.clear()

    def _elapsed(self) -> float:
        return self.base_elapsed + time.perf_counter() - self.started

    def _set_state(self, state: str, reason: str = "") -> None:
        stored = self.job.stored
        if stored.state != state or stored.reason != reason:
            stored.state, stored.reason = state, reason
            self.store.save(stored)
            self.job.publish()

    async def _finish(self, state: str, reason: str) -> None:
        stored = self.job.stored
        if state == "SUCCEEDED":
            self._save_checkpoint()
            self.store.save_result(self.job.id, self._result_arrays())
        stored.elapsed = self._elapsed() if hasattr(self, "started") else stored.elapsed
        self._flush_history()
        self._set_state(state, reason)
        await self._release_workers()
        log.info("job %s %s %s", self.job.id, state.lower(), reason)

    def _result_arrays(self) -> dict[str, np.ndarray]:
        """Final parameters by layer: ``layer<i>.weights`` (d_in, d_out) and ``layer<i>.bias``."""
        arrays = {}
        for index, (weights, bias) in enumerate(self.model.unflatten(self.params)):
            arrays[f"layer{index}.weights"], arrays[f"layer{index}.bias"] = weights, bias
        return arrays

    # --- workers -----------------------------------------------------------------------------------

    async def _acquire_workers(self) -> None:
        stored, spec = self.job.stored, self.spec
        if len(stored.workers) != spec.workers:
            deadline = time.monotonic() + spec.timeouts.pending_s
            self._set_state("PENDING", f"waiting for {spec.workers} workers")
            while (chosen := self.registry.choose(spec.workers)) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    alive, _ = self.registry.counts()
                    raise JobFailed(f"only {alive} of the {spec.workers} workers it needs registered "
                                    f"within {spec.timeouts.pending_s:g} s")
                await self.registry.wait_change(min(left, 1.0))
            stored.workers = chosen
        else:  # resumed by a restarted master: give its workers time to re-register by themselves
            deadline = time.monotonic() + self.registry.timeout + 2.0
            while len(self._alive_positions()) < spec.workers and time.monotonic() < deadline:
                await self.registry.wait_change(max(0.0, min(1.0, deadline - time.monotonic())))
        for name in stored.workers:
            if name in self.registry:
                self.registry.get(name).jobs.add(self.job.id)
        self._set_state("RUNNING")

    async def _assign(self, position: int) -> None:
        name = self.job.stored.workers[position]
        record = self.registry.get(name)
        generation = record.generation
        request = worker_pb2.Assignment(
            job_id=self.job.id, worker_index=position, spec_json=to_json(self.spec),
            data_uploaded=isinstance(self.spec.data, FileData), trace_csv=self._trace(),
            features=self.dataset.features, classes=self.dataset.classes)
        timeout = self.settings.assign_timeout_s
        await record.client.assign(request, timeout)
        if isinstance(self.spec.data, FileData):
            chunks = []
            for j in self.code.partitions(position):
                for part, array in (("x", self.dataset.x_train[self.rows[j]]), ("y", self.dataset.y_train[self.rows[j]])):
                    chunks.extend(to_chunks(array, f"{self.job.id}/{part}/{j}", self.settings.chunk_bytes))
            await record.client.upload(chunks, timeout)
        record.jobs.add(self.job.id)
        self._assigned[position] = generation

    def _trace(self) -> str:
        stragglers = self.spec.faults.stragglers
        if stragglers.model != "trace":
            return ""
        return self.files[str(stragglers.path)].read_text()

    def _alive_positions(self) -> list[int]:
        return [i for i, name in enumerate(self.job.stored.workers) if self.registry.alive(name)]

    async def _ensure_workers(self, enough: Callable[[list[int]], bool]) -> list[int]:
        """Alive, assigned positions; pauses until ``enough`` of them, fails after the timeout."""
        deadline: float | None = None
        while True:
            alive = self._alive_positions()
            stale = [i for i in alive if self._assigned.get(i) != self.registry.get(self.job.stored.workers[i]).generation]
            if stale:
                results = await asyncio.gather(*(self._assign(i) for i in stale), return_exceptions=True)
                for i, result in zip(stale, results):
                    if isinstance(result, BaseException):
                        if isinstance(result, asyncio.CancelledError):
                            raise result
                        log.warning("job %s: assigning position %d failed: %s", self.job.id, i, result)
                        if isinstance(result, grpc.aio.AioRpcError) and result.code() == grpc.StatusCode.INVALID_ARGUMENT:
                            raise JobFailed(f"worker {self.job.stored.workers[i]} refused the job: {result.details()}")
                        await self.registry.mark_down(self.job.stored.workers[i])
                continue
            if enough(alive):
                if self.job.state == "PAUSED":
                    self._set_state("RUNNING")
                return alive
            gone = [self.job.stored.workers[i] for i in range(self.spec.workers) if i not in alive]
            if deadline is None:
                deadline = time.monotonic() + self.spec.timeouts.paused_s
                self._set_state("PAUSED", f"{len(gone)} workers gone ({', '.join(gone)}); more than the code tolerates")
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobFailed(f"workers {', '.join(gone)} did not return within {self.spec.timeouts.paused_s:g} s")
            await self.registry.wait_change(min(left, 1.0))

    async def _release_workers(self) -> None:
        for name in self.job.stored.workers:
            if name in self.registry:
                record = self.registry.get(name)
                record.jobs.discard(self.job.id)
                try:
                    await record.client.release(self.job.id, timeout=2.0)
                except grpc.aio.AioRpcError:
                    pass  # a gone worker has nothing to release

    # --- calls ---------------------------------------------------------------------------------------

    async def _call(self, position: int, iteration: int, chunks: list, queue: asyncio.Queue) -> None:
        name = self.job.stored.workers[position]
        client = self.registry.get(name).client
        start = time.perf_counter()
        sent = sum(len(c.data) for c in chunks)
        self.metrics.bytes_sent.labels(self.job.id).inc(sent)
        try:
            async for reply in client.compute(self.job.id, iteration, chunks, self.spec.timeouts.call_s):
                self.metrics.bytes_received.labels(self.job.id).inc(reply.message.nbytes)
                queue.put_nowait(("stage", position, reply))
            self.metrics.response_seconds.labels(name).observe(time.perf_counter() - start)
            queue.put_nowait(("done", position, None))
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                self._assigned.pop(position, None)  # the worker lost its assignment (restarted)
            elif is_gone(error):
                await self.registry.mark_down(name)
            log.debug("job %s: worker %s failed iteration %d: %s", self.job.id, name, iteration, error.code())
            queue.put_nowait(("failed", position, error))

    def _decodable(self, replies: dict[int, _Reply]) -> bool:
        if self.code.stages == 1:
            return self.code.decodable(replies)
        return self.code.decodable({i: len(r.stages) for i, r in replies.items()})  # type: ignore[arg-type]

    def _messages(self, replies: dict[int, _Reply]) -> dict[int, np.ndarray]:
        if self.code.stages == 1:
            return {i: r.stages[0].message for i, r in replies.items()}
        return {i: np.concatenate([s.message for s in r.stages]) for i, r in replies.items()}

    # --- synchronous schemes -----------------------------------------------------------------------

    async def _run_sync(self) -> None:
        spec, job = self.spec, self.job
        decodable = lambda alive: self.code.decodable(alive)  # noqa: E731
        while job.stored.iteration < spec.iterations:
            alive = await self._ensure_workers(decodable)
            began = time.perf_counter()
            replies = await self._gather(job.stored.iteration, alive)
            if replies is None:
                continue  # not decodable after all (calls failed): re-check the workers and retry
            gradient, loss = await self._decode(replies)
            self.params = self.optimizer.step(self.params, gradient)
            if not np.all(np.isfinite(self.params)):
                raise JobFailed(f"parameters diverged at iteration {job.stored.iteration} (lower optimizer.lr)")
            responders = sorted(replies)
            compute = [sum(s.compute_seconds for s in replies[i].stages) for i in responders]
            if self._complete_iteration(loss, time.perf_counter() - began, responders, compute):
                return

    async def _gather(self, iteration: int, positions: list[int]) -> dict[int, _Reply] | None:
        chunks = params_chunks(self.params, self.settings.chunk_bytes)
        queue: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.create_task(self._call(i, iteration, chunks, queue)) for i in positions]
        replies: dict[int, _Reply] = {}
        finished = 0
        try:
            while not self._decodable(replies):
                if finished == len(tasks):
                    return None
                kind, position, payload = await queue.get()
                if kind == "stage":
                    replies.setdefault(position, _Reply([])).stages.append(payload)
                else:
                    finished += 1
                    if kind == "failed":  # stages that arrived before a failure stay usable
                        self.metrics.responses.labels(self.job.id, "failed").inc()
            return replies
        finally:
            running = [t for t in tasks if not t.done()]
            for task in running:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.metrics.responses.labels(self.job.id, "cancelled").inc(len(running))
            self.metrics.responses.labels(self.job.id, "used").inc(len(replies))

    async def _decode(self, replies: dict[int, _Reply]) -> tuple[np.ndarray, float]:
        messages = self._messages(replies)
        size = self.model.size + 1
        start = time.perf_counter()
        try:
            if next(iter(messages.values())).size > DECODE_IN_THREAD:
                decoded = await asyncio.to_thread(self.code.decode, messages, size)
            else:
                decoded = self.code.decode(messages, size)
        except CodeError as error:
            raise JobFailed(f"decoding failed at iteration {self.job.stored.iteration}: {error}") from None
        self.metrics.decode_seconds.labels(self.job.id, self.spec.code.scheme).observe(time.perf_counter() - start)
        return self._normalise(decoded)

    def _normalise(self, decoded: np.ndarray) -> tuple[np.ndarray, float]:
        """Mean-loss gradient and loss, with the regulariser added once."""
        reg_loss, reg_grad = self.model.regularization(self.params)
        return decoded[:-1] / self.samples + reg_grad, float(decoded[-1] / self.samples + reg_loss)

    # --- bookkeeping --------------------------------------------------------------------------------

    def _complete_iteration(self, loss: float, duration: float, responders: list[int], compute: list[float]) -> bool:
        """Record an iteration; True when the job should stop early (target loss reached)."""
        spec, stored = self.spec, self.job.stored
        iteration = stored.iteration
        stored.iteration += 1
        stored.loss = loss
        stored.elapsed = self._elapsed()
        record = Record(iteration, loss, stored.elapsed, duration, responders, worker_compute=compute)
        last = stored.iteration == spec.iterations
        reached = spec.target_loss is not None and loss <= spec.target_loss
        due = spec.eval_every and (stored.iteration % spec.eval_every == 0 or last or reached)
        if due and len(self.dataset.y_test):
            scores = {k: math.nan if v is None else float(v)
                      for k, v in evaluate(self.model, self.params, self.dataset.x_test, self.dataset.y_test).items()}
            record.test_loss = scores["loss"]
            record.test_accuracy = scores.get("accuracy", math.nan)
            record.test_auc = scores.get("auc", math.nan)
            if not math.isnan(record.test_accuracy):
                self.metrics.test_accuracy.labels(self.job.id).set(record.test_accuracy)
        self.job.unsaved.append(record)
        self.metrics.iteration_seconds.labels(self.job.id, spec.code.scheme).observe(duration)
        self.metrics.iterations.labels(self.job.id).inc()
        self.metrics.loss.labels(self.job.id).set(loss)
        if stored.iteration % spec.checkpoint_every == 0 and not last:
            self._save_checkpoint()
        elif time.monotonic() - self._last_flush > FLUSH_EVERY_S:
            self._flush_history()
            self.store.save(stored)
        self.job.publish(record)
        return reached

    def _save_checkpoint(self) -> None:
        stored = self.job.stored
        self.store.save_checkpoint(self.job.id, Checkpoint(stored.iteration, self._elapsed(), self.params,
                                                           self.optimizer.state_dict()))
        self._flush_history()
        self.store.save(stored)

    def _flush_history(self) -> None:
        if self.job.unsaved:
            self.store.append_history(self.job.id, self.job.unsaved)
            self.job.unsaved.clear()
        self._last_flush = time.monotonic()

    # --- asynchronous (lwpd) -----------------------------------------------------------------------

    async def _run_async(self) -> None:
        """Apply each message on arrival; re-send that worker the current parameters at once."""
        spec, job, n = self.spec, self.job, self.spec.workers
        queue: asyncio.Queue = asyncio.Queue()
        rounds = [0] * n
        tasks: dict[int, asyncio.Task] = {}
        arrivals, loss_sum, began, responders, compute = 0, 0.0, time.perf_counter(), [], []

        def launch(position: int) -> None:
            chunks = params_chunks(self.params, self.settings.chunk_bytes)
            tasks[position] = asyncio.create_task(self._call(position, rounds[position], chunks, queue))
            rounds[position] += 1

        try:
            while job.stored.iteration < spec.iterations:
                idle = [i for i in await self._ensure_workers(bool) if i not in tasks or tasks[i].done()]
                for position in idle:
                    launch(position)
                kind, position, payload = await queue.get()
                if kind != "stage":  # the call ended: the next loop sends this worker new parameters
                    tasks.pop(position, None)
                    if kind == "failed":
                        self.metrics.responses.labels(job.id, "failed").inc()
                    continue
                self.metrics.responses.labels(job.id, "used").inc()
                contribution = self.code.update(position, payload.message)[: self.model.size + 1]
                reg_loss, reg_grad = self.model.regularization(self.params)
                self.params = self.optimizer.step(self.params, contribution[:-1] / self.samples + reg_grad / n)
                loss_sum += contribution[-1]
                arrivals += 1
                responders.append(position)
                compute.append(payload.compute_seconds)
                if arrivals % n == 0:
                    loss = float(loss_sum / self.samples + reg_loss)
                    if not np.all(np.isfinite(self.params)):
                        raise JobFailed(f"parameters diverged at iteration {job.stored.iteration} (lower optimizer.lr)")
                    if self._complete_iteration(loss, time.perf_counter() - began, responders, compute):
                        return
                    loss_sum, began, responders, compute = 0.0, time.perf_counter(), [], []
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
