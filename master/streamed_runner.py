"""Running a gradient job whose workers stream their pieces (coded.codes.streaming).

Every iteration calls every alive worker at once. Each sends the partial gradient of each piece of
its partitions as it finishes it, in its order (its own partition first); the master keeps one
copy of every piece, tells the workers still computing which pieces it has (HAVE: they skip them),
and once every piece is settled stops them all and sums the pieces. A slow worker contributes
what it finished; a dead one is an erasure. Checking (``verify``) settles some pieces only with a
second, agreeing copy: ``sampled`` each piece with probability ``verify.sample`` (drawn per
iteration and piece), every piece of a worker found wrong lately, and any copy that comes after
its piece was settled; ``strict`` every piece.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from coded.codes import DecodingFailure
from coded.codes.sampled import confirmations
from coded.codes.streaming import StreamAssembly, StreamLayout
from coded.master.calls import CallEnded, Event, Round
from coded.master.gradient_runner import Decoded, GradientRunner
from coded.master.links import Params
from coded.master.rounds import Findings
from coded.master.steering import LATENCY_WINDOW, Rests, Steering

__all__ = ["StreamedRunner"]

log = logging.getLogger(__name__)


class StreamedRunner(GradientRunner):
    """Runs a gradient job with streamed replies."""

    def _build(self) -> int:
        self.layout: StreamLayout = self.spec.layout  # built with the spec
        self._norms: dict[int, float] = {}  # each piece's norm last iteration: the scale check's reference
        self._late: set[int] = set()  # workers that sent nothing in the last round: planned around
        self._rests = Rests()
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        for outcome in ("used", "checked", "spare"):  # at 0 from the start: increase() sees the first
            self.metrics.pieces.labels(self.job.id, outcome)
        self.metrics.stopped_pieces.labels(self.job.id)
        return self.layout.k

    @property
    def asynchronous(self) -> bool:
        return False

    def _partitions(self, position: int) -> tuple[int, ...]:
        return self.layout.partitions(position)

    def _can_run(self, positions: list[int]) -> bool:
        """Whether these workers can give the sum: every partition held once, twice when checked
        (so that a copy found wrong has another to take its place)."""
        return self.layout.copies(positions) >= (2 if self.spec.checks is not None else 1)

    def _removable(self, positions: frozenset[int]) -> bool:
        return self._can_run([i for i in range(self.spec.workers) if i not in positions])

    # --- one iteration -------------------------------------------------------------------------------

    async def _round(self, positions: list[int]) -> Decoded | None:
        """One iteration: the pieces of the called workers until every one is settled. A worker
        found wrong whose pieces others had been told to skip makes the iteration start again
        without it (the findings add up)."""
        located: set[int] = set()
        suspects: set[int] = set()
        rested = self._rested(positions)
        while True:  # starting again, every worker not located is called: the rest may not cover
            called = [p for p in (positions if located else rested) if p not in located]
            if located and not self.layout.copies(called):
                raise self._failure(DecodingFailure(
                    f"workers {sorted(located)} sent wrong pieces and the others do not hold every partition"))
            outcome = await self._stream(called, suspects)
            if outcome is None:
                return None
            if isinstance(outcome, Decoded):
                if located:
                    found = tuple(sorted(located | set(outcome.findings.located)))
                    findings = Findings(outcome.findings.checked, len(found), len(found), found)
                    return Decoded(outcome.decoded, outcome.responders, outcome.compute, findings, outcome.pieces,
                                   outcome.stopped_pieces)
                return outcome
            wrong, disputed = outcome
            located |= wrong
            suspects |= disputed
            log.info("job %s iteration %d: workers %s sent wrong pieces, %s disputed ones; the iteration starts "
                     "again without the first, confirming every piece of the others", self.job.id, self.iteration,
                     sorted(wrong), sorted(disputed))

    def _rested(self, positions: list[int]) -> list[int]:
        """The workers this iteration calls: ``positions`` without the late ones resting
        (:class:`Rests`) that the others can do without; each rested worker's fate counts as
        ``cancelled``, as a straggler's."""
        called = self._rests.called(self.iteration, positions, self._can_run)
        for position in sorted(set(positions) - set(called)):
            self.count(position, "cancelled", None)
        return called

    def _sampled(self) -> frozenset[int]:
        """The pieces this iteration's sampled check confirms (none at other levels)."""
        checks = self.spec.checks
        if self.spec.verify_level != "sampled" or checks is None:
            return frozenset()
        return confirmations(self.spec.seed, self.iteration, self.layout.pieces, checks.sample)

    async def _stream(self, positions: list[int], suspects: set[int]) -> Decoded | tuple[set[int], set[int]] | None:
        """Call ``positions`` once: the decoded sum; or the workers to leave out and the ones to
        suspect (every piece confirmed) when starting again; or None when the live workers cannot
        settle every piece (erasures: the iteration is tried again)."""
        level = self.spec.verify_level
        # the scale check needs last iteration's norms: without them (the first iteration, or the
        # first after a restart) a sampled check confirms every piece
        strict = level == "strict" or (level == "sampled" and not self._norms)
        assembly = StreamAssembly(
            self.layout, positions, strict=strict, confirm=self._sampled(),
            suspects=(self.quarantine.suspects(self.iteration) | suspects) if level else (),
            tolerance=self.spec.tolerance,
            references=self._norms if level else None, spares=level is not None)
        steering = Steering(self.layout, positions, assembly, latencies=self._latencies)
        spares = 0  # copies that arrived after their piece was settled
        restart: tuple[set[int], set[int]] = (set(), set())  # workers to leave out, and to suspect
        round_: Round | None = None  # set once every call has started (a call may report while they start)
        idle: set[int] = set()  # workers with nothing left to compute once the round has its pieces

        def listen(event: Event) -> None:
            nonlocal spares
            position = event.position
            if isinstance(event, CallEnded):
                assembly.ended(position)
                steering.ended(position)
            else:
                payload, piece = event.reply, event.reply.piece
                was = piece is not None and 0 <= piece < self.layout.pieces and assembly.settled(piece)
                try:
                    if piece is None:
                        raise ValueError("a whole reply in a streamed round")
                    result = assembly.add(position, piece, payload.message)
                except (ValueError, TypeError) as error:  # not a piece it holds: a broken worker
                    log.warning("job %s: worker %d sent a bad piece: %s", self.job.id, position, error)
                    result = assembly.reject(position)
                spares += was
                steering.delivered(position, payload.piece)
                if result.reopened:
                    restart[0].update(assembly.wrong)
                    restart[1].update(w for w in result.disputed if w not in assembly.wrong)
                if not assembly.complete:  # else the round ends now: those still computing get STOP
                    for worker, pieces in steering.skips(result.pieces).items():
                        if round_ is not None:
                            round_.have(worker, pieces)
            steer()

        timer: asyncio.TimerHandle | None = None

        def steer() -> None:
            """Ask idle workers for open pieces; come back when a piece under way becomes overdue."""
            nonlocal timer
            if assembly.complete or round_ is None:
                return
            for worker, pieces in steering.assign().items():
                round_.want(worker, pieces)
            wait = steering.next_backup()
            if timer is not None:
                timer.cancel()
            timer = None if wait is None else asyncio.get_running_loop().call_later(wait + 1e-3, again[0])

        # steer comes back through this list, not its own name: cleared when the round ends, it
        # leaves no cycle that would keep the round (and the job's runner and data) alive until a
        # full garbage collection
        again = [steer]

        round_ = Round(self, self.iteration, positions, Params(self.params), listen)
        used: set[int] = set()
        try:
            # stragglers are often the same from one round to the next: their partitions (late
            # the last time they were called), and those of the workers not called, are asked of
            # the others from the start (a late worker that does come is told to skip what arrived)
            expected = self._late | self._rests.behind | (set(range(self.spec.workers)) - set(positions))
            for worker, planned in steering.anticipate(expected).items():
                round_.want(worker, planned)
            steer()  # a worker with nothing of its own left (every piece skipped) takes some at once
            done = await round_.until(lambda _: assembly.complete or any(restart) or not assembly.can_finish())
            if any(restart):
                return restart
            if not assembly.complete:
                if assembly.disagreement() and not assembly.can_finish():
                    raise self._failure(assembly.failure())
                if not done or not assembly.can_finish():
                    return None
            summing = time.perf_counter()
            total = assembly.total()  # a streamed round's decode: the sum of one copy of every piece
            self._series(self.metrics.decode_seconds, self.job.id, self.scheme).observe(time.perf_counter() - summing)
            pieces = assembly.used()
            used = set(pieces)
            idle = set(positions) - steering.busy()
            self._late = {p for p in positions if not assembly.delivered(p)}
            self._rests.note(self.iteration, positions, self._late - round_.ended)
            # partial stragglers: stopped before they had sent all of their own partition's pieces
            own = {p: set(self.layout.pieces_of(p)[: self.layout.chunks]) for p in positions}
            partial = {p for p in positions if p not in round_.ended and not own[p] <= assembly.delivered(p)}
            stopped = sum(len(v) for p, v in pieces.items() if p in partial)
        finally:
            if timer is not None:
                timer.cancel()
            round_.close(used, idle)
            again.clear()  # the cycle through steer's own timer: the round is freed at once
        if level:  # the next round's scale check reads them; unchecked, nothing does
            self._norms = assembly.norms()
        wrong = tuple(sorted(assembly.wrong))
        checked = assembly.checked()
        self._series(self.metrics.pieces, self.job.id, "used").inc(self.layout.pieces)
        for series, count in (((self.metrics.pieces, self.job.id, "checked"), checked),
                              ((self.metrics.pieces, self.job.id, "spare"), spares),
                              ((self.metrics.stopped_pieces, self.job.id), stopped)):
            if count:  # the series are there from the job's start (_build)
                self._series(*series).inc(count)
        responders = sorted(used)
        compute = [sum(s.compute_seconds for s in round_.replies[p].stages) for p in responders]
        transfer = [sum(s.transfer_seconds for s in round_.replies[p].stages) for p in responders]
        findings = Findings(checked > 0, len(wrong), len(wrong), wrong)
        return Decoded(total, responders, compute, findings, {p: list(v) for p, v in pieces.items()}, stopped,
                       transfer)
