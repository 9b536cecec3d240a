"""Running a coded matrix job: ``matmul`` (one product) or ``matvec`` (a product per round).

The master encodes A (and B) once and streams each worker its blocks. A round sends every worker
the same input (nothing for matmul, the vector x for matvec; workers encode x themselves), waits
for R + e + 1 results (R the recovery threshold, e = ``verify.errors``, 0 by default; R alone with
``verify: off``), checks that they agree, and on a disagreement waits for more results until the
wrong ones are located (or fails with a decoding failure), stops the rest, and decodes the product.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator

import numpy as np

from coded.codes import CodeError, DecodingFailure, MatmulCode, NotDecodableError
from coded.jobs.matrices import load_matrices
from coded.jobs.messages import Assignment
from coded.jobs.spec import MatmulJob, MatrixJob, MatvecJob
from coded.master.calls import Round
from coded.master.links import Params, StageReply
from coded.master.rounds import Findings, RoundRunner
from coded.master.runner import JobFailed
from coded.master.store import Record

__all__ = ["MatmulRunner", "MatrixRunner", "MatvecRunner"]

log = logging.getLogger(__name__)


class MatrixRunner(RoundRunner):
    """What running a matmul and a matvec job share: the encoded inputs and the checked rounds."""

    spec: MatrixJob

    @property
    def scheme(self) -> str:
        return self.spec.code.scheme

    async def _prepare(self) -> None:
        spec = self.spec
        self.code: MatmulCode = spec.matmul_code  # built with the spec
        a, b = await asyncio.to_thread(load_matrices, spec, self.files)
        self.vector_input = b is not None and b.ndim == 1
        if b is not None and self.vector_input:
            b = b[:, None]
        self.columns = a.shape[1]  # of A: the length of matvec's x
        self.shape = (a.shape[0], b.shape[1]) if b is not None else (a.shape[0],)
        self._left = await asyncio.to_thread(self.code.encode_left, a)
        self._right = await asyncio.to_thread(self.code.encode_right, b) if b is not None else None
        # what every worker's product is: A_p times B_p, or times its encoding of the vector
        right = self._right[0] if self._right is not None else self.code.encode_right(
            self.code.pad_right(np.zeros(self.columns)), [0])[0]
        self._result_shape = (self._left[0].shape[0], *right.shape[1:])
        self.needed = spec.needed(self.code.recovery_threshold)
        # with quarantined workers out, a round still needs R (+ 1 to check)
        self.least = self.code.recovery_threshold + (1 if spec.checks is not None else 0)

    def _assignment(self, position: int) -> Assignment:
        return self._base_assignment(position, data_uploaded=True)

    def _uploads(self, position: int) -> Iterator[tuple[str, np.ndarray]]:
        yield "a", self._left[position]
        if self._right is not None:
            yield "b", self._right[position]

    def _removable(self, positions: frozenset[int]) -> bool:
        return self.spec.workers - len(positions) >= self.least

    def _misfit(self, reply: StageReply) -> str | None:
        if (problem := super()._misfit(reply)) is not None:
            return problem
        if reply.stage != 0:
            return f"the worker sent stage {reply.stage}; a product is one stage"
        if reply.message.shape != self._result_shape:
            return f"the worker sent a product of shape {reply.message.shape}; the code's is {self._result_shape}"
        return None

    async def _round(self, iteration: int, vector: np.ndarray) -> tuple[np.ndarray, list[int], Findings]:
        """One product: the decoded matrix (matmul) or vector (matvec) of ``self.shape``, the workers
        whose results were used, and what checking found."""
        while True:
            alive = self._usable(await self._ensure_workers(lambda alive: len(self._usable(alive)) >= self.least))
            target = min(self.needed, len(alive))
            round_ = Round(self, iteration, alive, Params(vector))
            try:
                if not await round_.until(lambda replies: len(replies) >= target):  # noqa: B023 (awaited here)
                    continue
                product, used, wrong = await self._checked(iteration, round_)
                if product is not None:
                    break
            finally:
                round_.close()
        checked = self.spec.checks is not None
        return product, used, Findings(checked, len(wrong), len(wrong), wrong)

    async def _checked(self, iteration: int, round_: Round) -> tuple[np.ndarray | None, list[int], tuple[int, ...]]:
        """Decode the round's results, correcting as many wrong ones as the surplus allows; on a
        disagreement wait for more results. Returns the product, the workers whose results it used
        and the wrong ones; (None, [], ()) when too few came (the round is retried)."""
        while True:
            results = {p: reply.stages[0].message for p, reply in round_.take().items()}
            # R + e + 1 results correct e; with R + 1, the check only detects
            errors = max(0, len(results) - self.code.recovery_threshold - 1) if self.spec.checks is not None else 0
            start = time.perf_counter()
            try:
                product, wrong = await asyncio.to_thread(self.code.correct, results, errors, self.shape)
            except (DecodingFailure, NotDecodableError) as error:
                if await round_.more():
                    continue
                if type(error) is NotDecodableError:
                    return None, [], ()  # calls failed: too few results
                self.metrics.decoding_failures.labels(self.job.id).inc()
                raise JobFailed(self._failure(iteration, error)) from None
            self.metrics.decode_seconds.labels(self.job.id, self.scheme).observe(time.perf_counter() - start)
            if wrong:
                log.warning("job %s round %d: corrected wrong results of workers %s", self.job.id, iteration,
                            [self.job.stored.workers[p] for p in wrong])
            return product, sorted(p for p in results if p not in wrong), wrong

    @staticmethod
    def _failure(iteration: int, error: CodeError) -> str:
        what = "decoding failure" if isinstance(error, DecodingFailure) else "decoding failed"
        return f"{what} in round {iteration}: {error}"

    async def _complete(self, loss: float, duration: float, responders: list[int], findings: Findings) -> None:
        stored = self.job.stored
        replaying = self._replaying()
        self.iteration += 1
        if replaying:  # matrix jobs restart from their first round; rounds already recorded stay so
            self._apply_findings(self.iteration - 1, findings, None)
            return
        record = Record(self.iteration - 1, loss, self._elapsed(), duration, responders)
        self._apply_findings(self.iteration - 1, findings, record)
        stored.iteration, stored.loss = self.iteration, loss
        if not math.isnan(loss):
            self.metrics.loss.labels(self.job.id).set(loss)
        await self._record(record)


class MatmulRunner(MatrixRunner):
    """Runs a matmul job: one product."""

    spec: MatmulJob

    async def _execute(self) -> None:
        began = time.perf_counter()
        self.product, responders, findings = await self._round(0, np.zeros(0))
        await self._complete(math.nan, time.perf_counter() - began, responders, findings)

    def _result_arrays(self) -> dict[str, np.ndarray]:
        return {"product": self.product[:, 0] if self.vector_input else self.product}


class MatvecRunner(MatrixRunner):
    """Runs a matvec job: power iteration, a product A x per round."""

    spec: MatvecJob

    async def _prepare(self) -> None:
        await super()._prepare()
        x = np.random.default_rng(self.spec.seed).standard_normal(self.columns)
        self.vector = x / np.linalg.norm(x)
        self.eigenvalue = math.nan

    async def _execute(self) -> None:
        driver = self.spec.driven
        for iteration in range(driver.rounds):
            began = time.perf_counter()
            y, responders, findings = await self._round(iteration, self.code.pad_right(self.vector))
            norm = float(np.linalg.norm(y))
            if not math.isfinite(norm) or norm == 0.0:
                raise JobFailed(f"power iteration broke down at round {iteration} (A x = 0 or not finite)")
            self.eigenvalue = float(self.vector @ y)
            residual = float(np.linalg.norm(y - self.eigenvalue * self.vector) / norm)
            self.vector = y / norm
            await self._complete(residual, time.perf_counter() - began, responders, findings)
            if residual <= driver.tolerance:
                return

    def _result_arrays(self) -> dict[str, np.ndarray]:
        return {"vector": self.vector, "eigenvalue": np.array(self.eigenvalue)}
