"""Running a gradient-coding job whose workers reply whole: each reply one coded message (in one
or two stages), decoded with the job's gradient code.

Synchronous schemes fan every iteration out to all n workers at once, decode from the first
decodable set of replies and stop the rest. ``lwpd`` and ``kasync`` run asynchronously: messages
are applied as they arrive (lwpd: each at once; kasync: the first K together) and those workers
immediately get the current parameters.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import numpy as np

from coded.codes import CheckedGradient, CodeError, DecodingFailure, GradientCode, NotDecodableError
from coded.codes.verify import finite
from coded.master.calls import CallEnded, Event, Reply, Round
from coded.master.gradient_runner import Decoded, GradientRunner
from coded.master.links import ComputeCall, Params
from coded.master.rounds import Findings
from coded.master.runner import JobFailed

__all__ = ["WholeRunner"]

log = logging.getLogger(__name__)

#: decode in a thread above this many floats, so the event loop keeps serving
DECODE_IN_THREAD = 1 << 16
#: responder sets whose decodability a job remembers (2^n at most; a few dozen in practice)
DECODABLE_SETS_KEPT = 4096


class WholeRunner(GradientRunner):
    """Runs a gradient-coding job with whole replies, decoded with the job's code."""

    def _build(self) -> int:
        """Build the job's code (built with the spec); returns the data partitions."""
        self.code: GradientCode = self.spec.gradient_code  # built with the spec
        self._decodable_sets: dict[frozenset[int], bool] = {}
        return self.code.k

    def _partitions(self, position: int) -> tuple[int, ...]:
        return self.code.partitions(position)

    def _stage_lengths(self) -> tuple[int, ...]:
        return self.code.stage_sizes(self.model.size + 1)  # the gradient and the loss

    def _steps_per_iteration(self) -> int:
        """A synchronous scheme's one step; an asynchronous one's, one per ``code.batch`` arrivals."""
        return self.code.arrivals_per_iteration // self.code.batch if self.code.asynchronous else 1

    async def _iterate(self) -> None:
        if self.code.asynchronous:
            await self._run_async()
        else:
            await super()._iterate()

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
        if self.code.asynchronous:  # a step needs code.batch arrivals
            return len([i for i in range(self.spec.workers) if i not in positions]) >= self.code.batch
        return super()._removable(positions)

    def _messages(self, replies: dict[int, Reply]) -> dict[int, np.ndarray]:
        if self.code.stages == 1:
            return {i: r.stages[0].message for i, r in replies.items()}
        return {i: np.concatenate([s.message for s in r.stages]) for i, r in replies.items()}

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
        return any(not finite(s.message) for r in replies.values() for s in r.stages)

    async def _decode(self, replies: dict[int, Reply]) -> np.ndarray:
        """The decoded sum, unchecked (``verify: off``)."""
        messages = self._messages(replies)
        out = self._accumulator(self._decoded_size(messages))
        try:
            return await self._timed(functools.partial(self.code.decode, messages, self.model.size + 1, out), messages)
        except CodeError as error:
            raise JobFailed(f"decoding failed at iteration {self.iteration}: {error}") from None

    async def _decode_checked(self, replies: dict[int, Reply]) -> CheckedGradient:
        messages = self._messages(replies)
        out = self._accumulator(self._decoded_size(messages))
        return await self._timed(functools.partial(self.code.decode_checked, messages, self.model.size + 1,
                                                   tolerance=self.spec.tolerance, out=out), messages)

    def _decoded_size(self, messages: dict[int, np.ndarray]) -> int:
        """Floats a decode of these messages gives, padding included."""
        return self.code.gradient_size(next(iter(messages.values())).shape[0])

    async def _timed(self, decode: functools.partial, messages: dict[int, np.ndarray]) -> Any:
        """Run a decode (in a thread when the messages are large), timed in the metrics."""
        start = time.perf_counter()
        if next(iter(messages.values())).size > DECODE_IN_THREAD:
            out = await asyncio.to_thread(decode)
        else:
            out = decode()
        self._series(self.metrics.decode_seconds, self.job.id, self.scheme).observe(time.perf_counter() - start)
        return out

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
                if spec.checks is not None and not finite(payload.message):
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
                    if not finite(self.params):
                        raise JobFailed(f"parameters diverged at iteration {self.iteration} (lower optimizer.lr)")
                    findings = Findings(detected=len(dropped), located=tuple(sorted(set(dropped))))
                    if await self._complete_iteration(loss, time.perf_counter() - began,
                                                      Decoded(np.empty(0), responders, compute, findings)):
                        return
                    loss_sum, began, responders, compute, dropped = 0.0, time.perf_counter(), [], [], []
        finally:
            for call in busy.values():
                call.stop()
