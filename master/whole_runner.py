"""Running a synchronous gradient-coding job whose workers reply whole: each reply one coded
message (in one or two stages), decoded with the job's gradient code.

Every iteration fans out to all n workers at once, decodes from the first decodable set of replies
and stops the rest (``lwpd`` and ``kasync`` run without rounds: :mod:`coded.master.async_runner`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import numpy as np

from coded.codes import CheckedGradient, CodeError, DecodingFailure, NotDecodableError
from coded.codes.verify import finite
from coded.master.calls import Reply, Round
from coded.master.gradient_runner import CodeRunner, Decoded, SynchronousRunner
from coded.master.links import Params
from coded.master.rounds import Findings
from coded.master.runner import JobFailed

__all__ = ["WholeRunner"]

log = logging.getLogger(__name__)

#: decode in a thread above this many floats, so the event loop keeps serving
DECODE_IN_THREAD = 1 << 16
#: responder sets whose decodability a job remembers (2^n at most; a few dozen in practice)
DECODABLE_SETS_KEPT = 4096


class WholeRunner(SynchronousRunner, CodeRunner):
    """Runs a synchronous gradient-coding job with whole replies, decoded with the job's code."""

    def _build(self) -> int:
        self._decodable_sets: dict[frozenset[int], bool] = {}
        return super()._build()

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
