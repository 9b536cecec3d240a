"""What every gradient job's runner shares: the data, the model and its parameters, the
optimizer's step, the iteration's record (test scores, what checking found), checkpoints.

Three runners, one per way a job's replies become the optimizer's steps, chosen once by
:func:`coded.master.runners.runner_for`. Synchronous jobs (:class:`SynchronousRunner`) call the alive workers every
iteration (a round), take the sum of the partial gradients it gives and step the optimizer:
:class:`coded.master.whole_runner.WholeRunner` decodes whole coded messages with the job's gradient
code, :class:`coded.master.streamed_runner.StreamedRunner` sums streamed pieces.
:class:`coded.master.async_runner.AsyncRunner` runs ``lwpd`` and ``kasync``: messages applied as
they arrive, no round.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from coded.codes import CodeError, DecodingFailure, GradientCode
from coded.codes.verify import finite
from coded.jobs.build import build_model, build_optimizer, load_data, split_rows
from coded.jobs.messages import Assignment
from coded.jobs.spec import GradientJob
from coded.jobs.spec.learning import UPLOADED, TorchModel
from coded.jobs.uploads import partition_arrays
from coded.master.calls import Reply
from coded.master.links import StageReply
from coded.master.rounds import Findings, RoundRunner
from coded.master.runner import JobFailed
from coded.master.store import Checkpoint, Evaluation, Record
from coded.ml.data import Dataset
from coded.ml.evaluation import evaluate
from coded.wire.buffers import BufferPool

__all__ = ["CodeRunner", "Decoded", "GradientRunner", "SynchronousRunner"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decoded:
    """One iteration's decoded sum (gradient and loss) and what it was decoded from.

    ``responders`` are the positions whose replies were used, ascending, ``compute`` their
    compute seconds, ``transfer`` the seconds their replies took to arrive once under way
    (the links' share: :attr:`coded.wire.frames.Frame.seconds`) of their ``wire_bytes``, and
    ``arrived`` when each one's last stage had arrived (``time.perf_counter()``); streamed rounds
    also say which ``pieces`` came from whom and how many of them from workers that were stopped
    (``stopped_pieces``).
    """

    decoded: np.ndarray
    responders: list[int]
    compute: list[float]
    findings: Findings
    pieces: dict[int, list[int]] = field(default_factory=dict)
    stopped_pieces: int = 0
    transfer: list[float] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    wire_bytes: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, decoded: np.ndarray, replies: dict[int, Reply], findings: Findings) -> Decoded:
        """A whole-reply round's: every reply not located as wrong was used."""
        responders = sorted(i for i in replies if i not in findings.located)
        return cls(decoded, responders, [sum(s.compute_seconds for s in replies[i].stages) for i in responders],
                   findings, transfer=[sum(s.transfer_seconds for s in replies[i].stages) for i in responders],
                   arrived=[replies[i].stages[-1].received_at for i in responders],
                   wire_bytes=[sum(s.wire_bytes for s in replies[i].stages) for i in responders])


class GradientRunner(RoundRunner):
    """Runs a gradient job; a subclass says how its iterations run (:meth:`_iterate`) and which
    workers can run them (:meth:`_can_run`)."""

    spec: GradientJob

    @property
    def scheme(self) -> str:
        return self.spec.code.scheme

    @abstractmethod
    def _build(self) -> int:
        """Build what takes the job's replies apart; returns the data partitions."""

    @abstractmethod
    def _partitions(self, position: int) -> tuple[int, ...]:
        """The data partitions worker ``position`` holds."""

    @abstractmethod
    def _can_run(self, positions: list[int]) -> bool:
        """Whether these workers can give the iteration's sum (checked, when the job checks)."""

    @abstractmethod
    async def _iterate(self) -> None:
        """Run the iterations left, each recorded (:meth:`_complete_iteration`)."""

    def _steps_per_iteration(self) -> int:
        """The optimizer's steps in one iteration: one, after the round's sum."""
        return 1

    def _stage_lengths(self) -> tuple[int, ...] | None:
        """Floats in each stage of a worker's message (None: any number of stages of l + 1 floats,
        a streamed job's pieces)."""
        return None

    @functools.cached_property
    def _lengths(self) -> tuple[int, ...] | None:
        """:meth:`_stage_lengths`, asked at every reply: worked out once (the model is built)."""
        return self._stage_lengths()

    def _misfit(self, reply: StageReply) -> str | None:
        """A stage the job's messages do not have, or one of another length: a worker that sends it
        fails its call (the decode would fail the job)."""
        if (problem := super()._misfit(reply)) is not None:
            return problem
        lengths = self._lengths
        if lengths is not None and reply.stage >= len(lengths):
            return f"the worker sent stage {reply.stage}; the job's messages have {len(lengths)}"
        expected = self.model.size + 1 if lengths is None else lengths[reply.stage]
        if reply.message.shape != (expected,):
            return (f"the worker sent a message of shape {reply.message.shape} at stage {reply.stage}; the job's "
                    f"is ({expected},)")
        return None

    def _removable(self, positions: frozenset[int]) -> bool:
        return self._can_run([i for i in range(self.spec.workers) if i not in positions])

    def _too_few(self) -> str:
        if self.spec.checks is None:
            return super()._too_few()
        tolerated = self.spec.code_stragglers - 1
        if tolerated < 1:  # uncoded, or a code with no straggler to spare beside its check
            return f"its code ({self.spec.code.scheme}) needs every one of its {self.spec.workers} workers"
        return (f"too few left to decode and check the replies: more than {tolerated} "
                "are gone (code.stragglers + verify.errors)")

    async def _prepare(self) -> None:
        spec = self.spec
        self._checkpointing: asyncio.Future | None = None  # the checkpoint being written
        # the rounds' parameters and decoded sums: a few arrays of the model's size, reused
        self._arrays = BufferPool()
        k = self._build()
        self.dataset: Dataset = await asyncio.to_thread(load_data, spec, self.files)
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
        self.optimizer = build_optimizer(spec.optimizer, spec.iterations * self._steps_per_iteration())
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
            await self._iterate()
            await self._save_checkpoint()
        finally:  # a job that ends another way leaves no write retrying behind it
            if self._checkpointing is not None and not self._checkpointing.done():
                self._checkpointing.cancel()

    def _assignment(self, position: int) -> Assignment:
        return self._base_assignment(position, data_uploaded=isinstance(self.spec.data, UPLOADED),
                                     shape=self.dataset.sample_shape, classes=self.dataset.classes)

    def _uploads(self, position: int) -> Iterator[tuple[str, np.ndarray]]:
        """Only the rows of the worker's partitions, for data from uploaded files, one partition
        made at a time (:mod:`coded.jobs.uploads` names them)."""
        for j in self._partitions(position):
            yield from partition_arrays(j, self.dataset.x_train[self.rows[j]], self.dataset.y_train[self.rows[j]])

    def _result_arrays(self) -> dict[str, np.ndarray]:
        """Final parameters by name (:meth:`coded.ml.models.Model.arrays`), and with standardised
        data what a prediction must apply to raw features first: ``normalize.mean``, ``normalize.std``."""
        arrays = self.model.arrays(self.params)
        if self.dataset.scaling is not None:
            arrays["normalize.mean"], arrays["normalize.std"] = self.dataset.scaling
        return arrays

    def _failure(self, error: CodeError) -> JobFailed:
        """The job's failure on a decoding failure at this iteration (counted in the metrics)."""
        self.metrics.decoding_failures.labels(self.job.id).inc()
        hint = ""
        if isinstance(error, DecodingFailure) and isinstance(self.spec.model, TorchModel):
            # the submission check passes modules that repeat on its samples: a kernel may still not
            hint = ("; if no worker is faulty, the model may compute different gradients from the same samples "
                    "(nondeterministic: see docs/jobs.md, Models with random layers)")
        return JobFailed(f"decoding failure at iteration {self.iteration}: {error}{hint}")

    def _accumulator(self, size: int) -> np.ndarray:
        """An array to decode a round's sum into: one of the runner's, reused once nothing holds it."""
        return self._arrays.take((size,), np.dtype(np.float64))

    def _normalise(self, decoded: np.ndarray) -> tuple[np.ndarray, float]:
        """Mean-loss gradient and loss, with the regulariser added once: in the decoded sum itself
        (a decode's own array; a copy where it is not writable)."""
        if not decoded.flags.writeable:
            decoded = decoded.copy()
        gradient = decoded[:-1]
        gradient /= self.samples
        reg_loss = self.model.add_regularization(self.params, gradient)
        return gradient, float(decoded[-1] / self.samples + reg_loss)

    # --- bookkeeping --------------------------------------------------------------------------------

    async def _complete_iteration(self, loss: float, began: float, outcome: Decoded) -> bool:
        """Record an iteration that began at ``began`` (``time.perf_counter()``, before its calls went
        out); True when the job should stop early (target loss reached). Only what the next round
        depends on is done here; the record is completed and kept once the next round's calls have
        gone out (:meth:`_record`)."""
        spec = self.spec
        replaying = self._replaying()
        self.iteration += 1
        last = self.iteration == spec.iterations
        reached = spec.target_loss is not None and loss <= spec.target_loss
        newly = self._quarantine(self.iteration - 1, outcome.findings)  # the next round's workers depend on it
        if not replaying:
            record = Record(self.iteration - 1, loss, self._elapsed(), time.perf_counter() - began, outcome.responders,
                            worker_compute=outcome.compute, worker_transfer=outcome.transfer, pieces=outcome.pieces,
                            stopped_pieces=outcome.stopped_pieces, worker_reply=[a - began for a in outcome.arrived])
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
        it is durable), and each responder's link the rate its reply crossed it at."""
        spec, stored = self.spec, self.job.stored
        stored.iteration, stored.loss = record.iteration + 1, record.loss
        for position, seconds, size in zip(outcome.responders, outcome.transfer, outcome.wire_bytes, strict=False):
            self.registry.observe_link(stored.workers[position], size, seconds)
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


class SynchronousRunner(GradientRunner):
    """Every iteration one round of the alive workers (:meth:`_round`), then a step of the
    optimizer with the sum it gives."""

    @abstractmethod
    async def _round(self, positions: list[int]) -> Decoded | None:
        """One iteration's sum from the workers at ``positions``; None when calls failed and too
        few replies came (the iteration is tried again)."""

    async def _iterate(self) -> None:
        """Every iteration a round (:meth:`_round`), then a step of the optimizer with its sum."""
        spec = self.spec
        while self.iteration < spec.iterations:
            alive = self._usable(await self._ensure_workers(lambda alive: self._can_run(self._usable(alive))))
            began = time.perf_counter()
            outcome = await self._round(alive)
            if outcome is None:
                continue  # not decodable after all (calls failed): re-check the workers and retry
            gradient, loss = self._normalise(outcome.decoded)
            self.params = self.optimizer.step(self.params, gradient, out=self._arrays.take(self.params.shape,
                                                                                         np.dtype(np.float64)))
            if not finite(self.params):
                raise JobFailed(f"parameters diverged at iteration {self.iteration} (lower optimizer.lr)")
            if await self._complete_iteration(loss, began, outcome):
                return


class CodeRunner(GradientRunner):
    """A job whose workers reply whole: messages of the job's gradient code (built with the spec),
    one per stage."""

    def _build(self) -> int:
        """Take the job's code (built with the spec); returns the data partitions."""
        self.code: GradientCode = self.spec.gradient_code
        return self.code.k

    def _partitions(self, position: int) -> tuple[int, ...]:
        return self.code.partitions(position)

    def _stage_lengths(self) -> tuple[int, ...]:
        return self.code.stage_sizes(self.model.size + 1)  # the gradient and the loss
