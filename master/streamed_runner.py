"""Running a gradient job whose workers stream their pieces (coded.codes.streaming).

Every iteration calls every alive worker at once (a :class:`coded.master.streamed_round.StreamedRound`).
Each sends the partial gradient of each piece of its partitions as it finishes it, in its order
(its own partition first); the master keeps one copy of every piece, tells the workers still
computing which pieces it has (HAVE: they skip them), and once every piece is settled stops them
all and sums the pieces. A slow worker contributes what it finished; a dead one is an erasure.
Checking (``verify``) settles some pieces only with a second, agreeing copy: ``sampled`` each
piece with probability ``verify.sample`` (drawn per iteration and piece), every piece of a worker
found wrong lately, and any copy that comes after its piece was settled; ``strict`` every piece.
What one round leaves the next is kept here: the pieces' norms (the scale check's references),
the late workers (planned around) and resting ones (:class:`Rests`), the pieces' latencies.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

from coded.codes import DecodingFailure
from coded.codes.sampled import confirmations
from coded.codes.streaming import Disputed, StreamAssembly, StreamLayout
from coded.master.gradient_runner import Decoded, SynchronousRunner
from coded.master.links import Params
from coded.master.rounds import Findings
from coded.master.steering import LATENCY_WINDOW, Rests
from coded.master.streamed_round import Restart, StreamedRound, Summed

__all__ = ["StreamedRunner"]

log = logging.getLogger(__name__)


class StreamedRunner(SynchronousRunner):
    """Runs a gradient job with streamed replies."""

    def _build(self) -> int:
        """Take the job's layout (built with the spec); returns the data partitions."""
        self.layout: StreamLayout = self.spec.layout  # built with the spec
        self._norms: dict[int, float] = {}  # each piece's norm last iteration: the scale check's reference
        self._late: set[int] = set()  # workers that sent nothing in the last round: planned around
        self._rests = Rests()
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        for outcome in ("used", "checked", "spare"):  # at 0 from the start: increase() sees the first
            self.metrics.pieces.labels(self.job.id, outcome)
        self.metrics.stopped_pieces.labels(self.job.id)
        return self.layout.k

    def _partitions(self, position: int) -> tuple[int, ...]:
        return self.layout.partitions(position)

    def _can_run(self, positions: list[int]) -> bool:
        """Whether these workers can give the sum: every partition held once, twice when checked
        (so that a copy found wrong has another to take its place)."""
        return self.layout.copies(positions) >= (2 if self.spec.checks is not None else 1)

    # --- one iteration -------------------------------------------------------------------------------

    async def _round(self, positions: list[int]) -> Decoded | None:
        """One iteration: the pieces of the called workers until every one is settled. A worker
        found wrong whose pieces others had been told to skip makes the iteration start again
        without it (the findings add up)."""
        located: set[int] = set()
        suspects: set[int] = set()
        rested = self._rested(positions)
        everyone = False
        while True:  # starting again, every worker not located is called: the rest may not cover
            called = [p for p in (positions if located or everyone else rested) if p not in located]
            if located and not self.layout.copies(called):
                raise self._failure(DecodingFailure(
                    f"workers {sorted(located)} sent wrong pieces and the others do not hold every partition"))
            try:
                outcome = await self._stream(called, suspects)
            except Disputed as error:
                if set(called) >= set(positions) - located:
                    raise self._failure(error) from None
                # a resting worker (late lately: a slow link, say) holds a copy that tells which is
                # wrong: the iteration starts again with it, the disputing ones confirmed fully
                everyone = True
                suspects |= error.workers
                log.info("job %s iteration %d: %s; the iteration starts again with the resting workers %s",
                         self.job.id, self.iteration, error, sorted(set(positions) - set(called)))
                continue
            except DecodingFailure as error:
                raise self._failure(error) from None
            if not isinstance(outcome, Restart):
                return outcome if outcome is None or not located else _with_located(outcome, located)
            located |= outcome.wrong
            suspects |= outcome.disputed
            log.info("job %s iteration %d: workers %s sent wrong pieces, %s disputed ones; the iteration starts "
                     "again without the first, confirming every piece of the others", self.job.id, self.iteration,
                     sorted(outcome.wrong), sorted(outcome.disputed))

    def _rested(self, positions: list[int]) -> list[int]:
        """The workers this iteration calls: ``positions`` without the late ones resting
        (:class:`Rests`) that the others can do without; each rested worker's fate counts as
        ``cancelled``, as a straggler's."""
        called = self._rests.called(self.iteration, positions, self._can_run)
        for position in sorted(set(positions) - set(called)):
            self.count(position, "cancelled", None)
        return called

    async def _stream(self, positions: list[int], suspects: set[int]) -> Decoded | Restart | None:
        """Call ``positions`` once (a :class:`StreamedRound`): the decoded sum; or the iteration to
        start again; or None when the live workers cannot settle every piece (erasures: the
        iteration is tried again). Raises Disputed when copies disagree and none of ``positions``
        holds a third (:meth:`_round` calls the resting workers back, or fails the job)."""
        assembly = self._assembly(positions, suspects)
        streamed = StreamedRound(self, self.iteration, positions, Params(self.params), assembly, self._latencies,
                                 self.job.id)
        expected = self._late | self._rests.behind | (set(range(self.spec.workers)) - set(positions))
        outcome = await streamed.run(expected, self._accumulator(self.model.size + 1))
        if not isinstance(outcome, Summed):
            return outcome
        self._late = set(outcome.late)
        self._rests.note(self.iteration, positions, outcome.silent)
        if self.spec.verify_level:  # the next round's scale check reads them; unchecked, nothing does
            self._norms = assembly.norms()
        self._count_pieces(outcome)
        return outcome.decoded

    def _assembly(self, positions: list[int], suspects: set[int]) -> StreamAssembly:
        """A round's assembly, checking as the job checks: ``suspects`` (and the workers found wrong
        lately) have every piece confirmed."""
        level = self.spec.verify_level
        # the scale check needs last iteration's norms: without them (the first iteration, or the
        # first after a restart) a sampled check confirms every piece
        strict = level == "strict" or (level == "sampled" and not self._norms)
        return StreamAssembly(
            self.layout, positions, strict=strict, confirm=self._sampled(),
            suspects=(self.quarantine.suspects(self.iteration) | suspects) if level else (),
            tolerance=self.spec.tolerance,
            references=self._norms if level else None, spares=level is not None)

    def _sampled(self) -> frozenset[int]:
        """The pieces this iteration's sampled check confirms (none at other levels)."""
        checks = self.spec.checks
        if self.spec.verify_level != "sampled" or checks is None:
            return frozenset()
        return confirmations(self.spec.seed, self.iteration, self.layout.pieces, checks.sample)

    def _count_pieces(self, summed: Summed) -> None:
        """A summed round's decode time and pieces in the metrics."""
        self._series(self.metrics.decode_seconds, self.job.id, self.scheme).observe(summed.seconds)
        self._series(self.metrics.pieces, self.job.id, "used").inc(self.layout.pieces)
        for series, count in (((self.metrics.pieces, self.job.id, "checked"), summed.checked),
                              ((self.metrics.pieces, self.job.id, "spare"), summed.spares),
                              ((self.metrics.stopped_pieces, self.job.id), summed.decoded.stopped_pieces)):
            if count:  # the series are there from the job's start (_build)
                self._series(*series).inc(count)


def _with_located(outcome: Decoded, located: set[int]) -> Decoded:
    """An iteration's sum with the workers left out when it started again counted as located."""
    found = tuple(sorted(located | set(outcome.findings.located)))
    return dataclasses.replace(outcome, findings=Findings(outcome.findings.checked, len(found), len(found), found))
