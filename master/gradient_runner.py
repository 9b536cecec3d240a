"""Running a gradient-coding job: iterate, decode, step the optimizer, checkpoint.

Synchronous schemes fan every iteration out to all n workers at once, decode from the first
decodable set of replies and stop the rest. ``lwpd`` and ``kasync`` run asynchronously: messages
are applied as they arrive (lwpd: each at once; kasync: the first K together) and those workers
immediately get the current parameters.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coded.codes import CheckedGradient, CodeError, DecodingFailure, GradientCode, NotDecodableError
from coded.jobs.build import build_model, build_optimizer, load_data, split_rows
from coded.jobs.messages import Assignment
from coded.jobs.spec import GradientJob
from coded.jobs.spec.learning import UPLOADED, TorchModel
from coded.master.calls import CallEnded, Event, Reply, Round
from coded.master.links import ComputeCall, Params
from coded.master.rounds import Findings, RoundRunner
from coded.master.runner import JobFailed
from coded.master.store import Checkpoint, Evaluation, Record
from coded.ml.data import Dataset
from coded.ml.data.sparse import csr_arrays
from coded.ml.evaluation import evaluate
from coded.ml.evaluation import prepare as prepare_evaluation

__all__ = ["Decoded", "GradientRunner"]

log = logging.getLogger(__name__)

#: decode in a thread above this many floats, so the event loop keeps serving
DECODE_IN_THREAD = 1 << 16
#: responder sets whose decodability a job remembers (2^n at most; a few dozen in practice)
DECODABLE_SETS_KEPT = 4096


@dataclass(frozen=True)
class Decoded:
    """One iteration's decoded sum (gradient and loss) and what it was decoded from.

    ``responders`` are the positions whose replies were used, ascending, ``compute`` their
    compute seconds and ``transfer`` the seconds their replies took to arrive once under way
    (the links' share: :attr:`coded.wire.frames.Frame.seconds`); streamed rounds also say which
    ``pieces`` came from whom and how many of them from workers that were stopped
    (``stopped_pieces``).
    """

    decoded: np.ndarray
    responders: list[int]
    compute: list[float]
    findings: Findings
    pieces: dict[int, list[int]] = field(default_factory=dict)
    stopped_pieces: int = 0
    transfer: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, decoded: np.ndarray, replies: dict[int, Reply], findings: Findings) -> Decoded:
        """A whole-reply round's: every reply not located as wrong was used."""
        responders = sorted(i for i in replies if i not in findings.located)
        return cls(decoded, responders, [sum(s.compute_seconds for s in replies[i].stages) for i in responders],
                   findings, transfer=[sum(s.transfer_seconds for s in replies[i].stages) for i in responders])


class GradientRunner(RoundRunner):
    """Runs a gradient-coding job."""

    spec: GradientJob

    @property
    def scheme(self) -> str:
        return self.spec.code.scheme

    def _build(self) -> int:
        """Build what takes the job's replies apart (here its code); returns the data partitions."""
        self.code: GradientCode = self.spec.gradient_code  # built with the spec
        self._decodable_sets: dict[frozenset[int], bool] = {}
        return self.code.k

    @property
    def asynchronous(self) -> bool:
        return self.code.asynchronous

    def _partitions(self, position: int) -> tuple[int, ...]:
        return self.code.partitions(position)

    async def _prepare(self) -> None:
        spec = self.spec
        self._checkpointing: asyncio.Future | None = None  # the checkpoint being written
        k = self._build()
        self.dataset: Dataset = await asyncio.to_thread(load_data, spec, self.files)
        if spec.eval_every:
            await asyncio.to_thread(prepare_evaluation)
        self.rows = split_rows(spec, self.dataset, k)
        try:  # its fit to the data was checked at submission; a master restarted with other packages
            # (no PyTorch, another architecture plugin) finds out here that it cannot build the model
            self.model = await asyncio.to_thread(build_model, spec.model, self.dataset.sample_shape,
                                                 self.dataset.classes)
        except ValueError as error:
            raise JobFailed(str(error)) from None
        batch = spec.optimizer.batch
        # the decoded sum covers every partition's batch: the mean divides by all of them
        self.samples = len(self.dataset.y_train) if batch is None else batch * k
        steps_per_iteration = self.code.arrivals_per_iteration // self.code.batch if self.asynchronous else 1
        self.optimizer = build_optimizer(spec.optimizer, spec.iterations * steps_per_iteration)
        checkpoint = self.store.load_checkpoint(self.job.id)
        if checkpoint is not None and checkpoint.params.shape == (self.model.size,):
            self.params = checkpoint.params
            self.optimizer.load_state_dict(checkpoint.optimizer)
            self.iteration = checkpoint.iteration
            log.info("job %s resumes from its checkpoint at iteration %d (recorded: %d)", self.job.id,
                     checkpoint.iteration, self.job.stored.iteration)
        else:
            self.params = self.model.init_params(np.random.default_rng(spec.seed))

    async def _execute(self) -> None:
        try:
            if self.asynchronous:
                await self._run_async()
            else:
                await self._run_sync()
            await self._save_checkpoint()
        finally:  # a job that ends another way leaves no write retrying behind it
            if self._checkpointing is not None and not self._checkpointing.done():
                self._checkpointing.cancel()

    def _assignment(self, position: int) -> Assignment:
        return self._base_assignment(position, data_uploaded=isinstance(self.spec.data, UPLOADED),
                                     shape=self.dataset.sample_shape, classes=self.dataset.classes)

    def _uploads(self, position: int) -> dict[str, np.ndarray]:
        """Only the rows of the worker's partitions, for data from uploaded files; sparse rows as
        their CSR arrays (``x/<j>/data``, ``x/<j>/indices``, ``x/<j>/indptr``)."""
        if not isinstance(self.spec.data, UPLOADED):
            return {}
        arrays = {}
        for j in self._partitions(position):
            x = self.dataset.x_train[self.rows[j]]
            if self.dataset.sparse:
                arrays.update({f"x/{j}/{name}": array for name, array in csr_arrays(x).items()})
            else:
                arrays[f"x/{j}"] = x
            arrays[f"y/{j}"] = self.dataset.y_train[self.rows[j]]
        return arrays

    def _result_arrays(self) -> dict[str, np.ndarray]:
        """Final parameters by name (:meth:`coded.ml.models.Model.arrays`), and with standardised
        data what a prediction must apply to raw features first: ``normalize.mean``, ``normalize.std``."""
        arrays = self.model.arrays(self.params)
        if self.dataset.scaling is not None:
            arrays["normalize.mean"], arrays["normalize.std"] = self.dataset.scaling
        return arrays

    # --- synchronous schemes -----------------------------------------------------------------------

    def _decodable(self, replies: dict[int, Reply]) -> bool:
        if self.code.stages == 1:
            # asked at every reply of every round, about the same few sets: remembered per set
            key = frozenset(replies)
            known = self._decodable_sets.get(key)
            if known is None:
                if len(self._decodable_sets) >= DECODABLE_SETS_KEPT:
                    self._decodable_sets.clear()
                known = self._decodable_sets[key] = self.code.decodable(key)
            return known
        return self.code.decodable({i: len(r.stages) for i, r in replies.items()})

    def _surplus(self, replies: dict[int, Reply] | list[int]) -> int:
        """The code's surplus of these replies (a list: positions with every stage)."""
        if isinstance(replies, list):
            return self.code.surplus({i: self.code.stages for i in replies})
        return self.code.surplus({i: len(r.stages) for i, r in replies.items()})

    def _can_run(self, positions: list[int]) -> bool:
        """Whether these workers can give a gradient (checked, unless ``verify: off`` or the code
        cannot check)."""
        checking = self.spec.checks is not None and self.code.checkable
        return self._surplus(positions) >= (1 if checking else 0)

    def _removable(self, positions: frozenset[int]) -> bool:
        rest = [i for i in range(self.spec.workers) if i not in positions]
        if self.code.asynchronous:
            return len(rest) >= self.code.batch
        return self._can_run(rest)

    def _messages(self, replies: dict[int, Reply]) -> dict[int, np.ndarray]:
        if self.code.stages == 1:
            return {i: r.stages[0].message for i, r in replies.items()}
        return {i: np.concatenate([s.message for s in r.stages]) for i, r in replies.items()}

    async def _run_sync(self) -> None:
        spec = self.spec
        while self.iteration < spec.iterations:
            alive = self._usable(await self._ensure_workers(lambda alive: self._can_run(self._usable(alive))))
            began = time.perf_counter()
            outcome = await self._round(alive)
            if outcome is None:
                continue  # not decodable after all (calls failed): re-check the workers and retry
            gradient, loss = self._normalise(outcome.decoded)
            self.params = self.optimizer.step(self.params, gradient)
            if not np.isfinite(self.params).all():
                raise JobFailed(f"parameters diverged at iteration {self.iteration} (lower optimizer.lr)")
            if await self._complete_iteration(loss, time.perf_counter() - began, outcome):
                return

    async def _round(self, positions: list[int]) -> Decoded | None:
        """One iteration's replies, decoded and (unless ``verify: off``) checked: it waits for the
        replies the check needs, and on a disagreement for more, until the wrong ones are located.
        None when calls failed and too few replies came (the iteration is tried again)."""
        round_ = Round(self, self.iteration, positions, Params(self.params))
        try:
            if self.spec.checks is None:
                if not await round_.until(self._decodable):
                    return None
                replies = round_.take()
                return Decoded.of(await self._decode(replies), replies, Findings())
            checks = self.spec.checks
            target = min(checks.errors + 1, self._surplus(positions)) if self.code.checkable else 0
            if not await round_.until(lambda replies: self._surplus(replies) >= target):
                return None
            while True:
                replies = round_.take()
                try:
                    checked = await self._decode_checked(replies)
                except NotDecodableError as error:  # too few (finite) replies to check, or ill-conditioned
                    if await round_.more():
                        continue
                    if type(error) is NotDecodableError and not self._broken(replies):
                        return None
                    raise self._failure(error) from None
                except DecodingFailure as error:  # a disagreement: more replies may locate the wrong ones
                    if await round_.more():
                        continue
                    raise self._failure(error) from None
                wrong = len(checked.wrong)
                return Decoded.of(checked.gradient, replies, Findings(checked.checked, wrong, wrong, checked.wrong))
        finally:
            round_.close()

    def _broken(self, replies: dict[int, Reply]) -> bool:
        return any(not np.all(np.isfinite(s.message)) for r in replies.values() for s in r.stages)

    def _failure(self, error: CodeError) -> JobFailed:
        self.metrics.decoding_failures.labels(self.job.id).inc()
        hint = ""
        if isinstance(error, DecodingFailure) and isinstance(self.spec.model, TorchModel):
            # the submission check passes modules that repeat on its samples: a kernel may still not
            hint = ("; if no worker is faulty, the model may compute different gradients from the same samples "
                    "(nondeterministic: see docs/jobs.md, Models with random layers)")
        return JobFailed(f"decoding failure at iteration {self.iteration}: {error}{hint}")

    async def _decode(self, replies: dict[int, Reply]) -> np.ndarray:
        """The decoded sum, unchecked (``verify: off``)."""
        messages = self._messages(replies)
        try:
            return await self._timed(functools.partial(self.code.decode, messages, self.model.size + 1), messages)
        except CodeError as error:
            raise JobFailed(f"decoding failed at iteration {self.iteration}: {error}") from None

    async def _decode_checked(self, replies: dict[int, Reply]) -> CheckedGradient:
        messages = self._messages(replies)
        return await self._timed(functools.partial(self.code.decode_checked, messages, self.model.size + 1,
                                                   tolerance=self.spec.tolerance), messages)

    async def _timed(self, decode: functools.partial, messages: dict[int, np.ndarray]) -> Any:
        """Run a decode (in a thread when the messages are large), timed in the metrics."""
        start = time.perf_counter()
        if next(iter(messages.values())).size > DECODE_IN_THREAD:
            out = await asyncio.to_thread(decode)
        else:
            out = decode()
        self._series(self.metrics.decode_seconds, self.job.id, self.scheme).observe(time.perf_counter() - start)
        return out

    def _normalise(self, decoded: np.ndarray) -> tuple[np.ndarray, float]:
        """Mean-loss gradient and loss, with the regulariser added once."""
        reg_loss, reg_grad = self.model.regularization(self.params)
        return decoded[:-1] / self.samples + reg_grad, float(decoded[-1] / self.samples + reg_loss)

    # --- bookkeeping --------------------------------------------------------------------------------

    async def _complete_iteration(self, loss: float, duration: float, outcome: Decoded) -> bool:
        """Record an iteration; True when the job should stop early (target loss reached). Only
        what the next round depends on is done here; the record is completed and kept once the
        next round's calls have gone out (:meth:`_record`)."""
        spec = self.spec
        replaying = self._replaying()
        self.iteration += 1
        last = self.iteration == spec.iterations
        reached = spec.target_loss is not None and loss <= spec.target_loss
        newly = self._quarantine(self.iteration - 1, outcome.findings)  # the next round's workers depend on it
        if not replaying:
            record = Record(self.iteration - 1, loss, self._elapsed(), duration, outcome.responders,
                            worker_compute=outcome.compute, worker_transfer=outcome.transfer, pieces=outcome.pieces,
                            stopped_pieces=outcome.stopped_pieces)
            await self._record(record, functools.partial(self._fill_record, outcome, newly, self.params,
                                                         last or reached))
        # after the record: a checkpoint never gets ahead of the recorded history
        if self.iteration % spec.checkpoint_every == 0 and not last:
            await self._save_checkpoint(wait=False)
        return reached

    def _fill_record(self, outcome: Decoded, newly: list[int], params: np.ndarray, final: bool,
                     record: Record) -> None:
        """What an iteration's record gets once the next round is under way, just before it is
        kept: the test scores when due (of ``params``, this iteration's result), what checking
        found, and the job's counts; the job's row says the iteration is done (clients see it once
        it is durable)."""
        spec, stored = self.spec, self.job.stored
        stored.iteration, stored.loss = record.iteration + 1, record.loss
        due = spec.eval_every and ((record.iteration + 1) % spec.eval_every == 0 or final)
        if due and len(self.dataset.y_test):
            scores = {k: math.nan if v is None else float(v)
                      for k, v in evaluate(self.model, params, self.dataset.x_test, self.dataset.y_test).items()}
            record.test_loss = scores["loss"]
            record.test_accuracy = scores.get("accuracy", math.nan)
            record.test_auc = scores.get("auc", math.nan)
            stored.test = Evaluation.of(record)
            if not math.isnan(record.test_accuracy):
                self.metrics.test_accuracy.labels(self.job.id).set(record.test_accuracy)
        self._series(self.metrics.loss, self.job.id).set(record.loss)
        if outcome.pieces:  # streamed: how much of the stopped workers' partial work was used
            stats = stored.stats
            stats["pieces_used"] = stats.get("pieces_used", 0) + sum(len(p) for p in outcome.pieces.values())
            stats["stopped_pieces"] = stats.get("stopped_pieces", 0) + outcome.stopped_pieces
        self._keep_findings(outcome.findings, newly, record)

    async def _save_checkpoint(self, wait: bool = True) -> None:
        """Write a checkpoint of the current state; without ``wait``, in the background while the
        next iterations run (a write and its fsync take milliseconds). Checkpoints are written one
        at a time, in order; one that a killed master did not finish leaves the previous one, and
        a restarted master recomputes a little more (never records anything twice)."""
        if self._checkpointing is not None:
            await self._checkpointing
        checkpoint = Checkpoint(self.iteration, self.params.copy(), self.optimizer.state_dict())

        async def write() -> None:
            await self._recorded()  # never ahead of the history
            await self._durably(lambda: self.store.save_checkpoint(self.job.id, checkpoint), in_thread=True)

        self._checkpointing = asyncio.ensure_future(write())
        if wait:
            await self._checkpointing

    # --- asynchronous (lwpd, kasync) --------------------------------------------------------------

    async def _run_async(self) -> None:
        """Apply messages as they arrive: a step every ``code.batch`` arrivals (lwpd: each one),
        after which the workers whose messages it used get the current parameters at once."""
        spec, n = self.spec, self.spec.workers
        queue: asyncio.Queue[Event] = asyncio.Queue()
        rounds = [0] * n
        busy: dict[int, ComputeCall] = {}  # each worker's call under way
        launched: dict[int, float] = {}  # when each worker's latest call began
        applied: set[int] = set()  # arrived, waiting for the step that uses their message
        pending = None  # the sum of the contributions of this step
        arrivals, loss_sum, began, responders, compute = 0, 0.0, time.perf_counter(), [], []
        dropped: list[int] = []  # this iteration's non-finite messages (all that can be checked here)

        def launch(position: int) -> None:
            launched[position] = time.perf_counter()
            busy[position] = self.call(position, rounds[position], Params(self.params), queue.put_nowait)
            rounds[position] += 1

        try:
            while self.iteration < spec.iterations:
                alive = self._usable(await self._ensure_workers(lambda alive: bool(self._usable(alive))))
                idle = [i for i in alive if i not in busy and i not in applied]
                for position in idle:
                    launch(position)
                event = await queue.get()
                position = event.position
                if isinstance(event, CallEnded):  # the next loop sends this worker new parameters
                    if busy.get(position) is event.call:  # not a newer call's end
                        del busy[position]
                    if event.error is not None:
                        self.count(position, "failed", None)
                    continue
                payload = event.reply
                seconds = payload.received_at - launched[position]  # an async call's reply is one stage
                if spec.checks is not None and not np.all(np.isfinite(payload.message)):
                    dropped.append(position)  # never applied; the worker gets the parameters again
                    self.count(position, "failed", seconds)
                    continue
                self.count(position, "used", seconds)
                contribution = self.code.update(position, payload.message)[: self.model.size + 1]
                pending = contribution if pending is None else pending + contribution
                applied.add(position)
                arrivals += 1
                responders.append(position)
                compute.append(payload.compute_seconds)
                if arrivals % self.code.batch == 0:
                    reg_loss, reg_grad = self.model.regularization(self.params)
                    step = self.code.batch / self.code.arrivals_per_iteration  # the regularizer's share
                    self.params = self.optimizer.step(self.params, pending[:-1] / self.samples + reg_grad * step)
                    loss_sum += pending[-1]
                    pending = None
                    applied.clear()
                if arrivals % self.code.arrivals_per_iteration == 0:
                    loss = float(loss_sum / self.samples + reg_loss)
                    if not np.all(np.isfinite(self.params)):
                        raise JobFailed(f"parameters diverged at iteration {self.iteration} (lower optimizer.lr)")
                    findings = Findings(detected=len(dropped), located=tuple(sorted(set(dropped))))
                    if await self._complete_iteration(loss, time.perf_counter() - began,
                                                      Decoded(np.empty(0), responders, compute, findings)):
                        return
                    loss_sum, began, responders, compute, dropped = 0.0, time.perf_counter(), [], [], []
        finally:
            for call in busy.values():
                call.stop()
