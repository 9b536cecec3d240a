"""Running a gradient job whose workers stream their pieces (coded.codes.streaming).

Every iteration calls every alive worker at once. Each sends the partial gradient of each piece of
its partitions as it finishes it, in its order (its own partition first); the master keeps one
copy of every piece, tells the workers still computing which pieces it has (HAVE: they skip them),
and once every piece is settled stops them all and sums the pieces. A slow worker contributes
what it finished; a dead one is an erasure. Checking (``verify``) settles some pieces only with a
second, agreeing copy: ``sampled`` the first piece of a few workers per iteration (cycling through
all of them) and every piece of a worker found wrong lately, ``strict`` every piece.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from coded.codes import DecodingFailure
from coded.codes.streaming import StreamAssembly, StreamLayout, sample_size
from coded.jobs.build import build_layout
from coded.master.gradient_runner import Decoded, GradientRunner
from coded.master.links import Params
from coded.master.runner import Event, Findings, Round

__all__ = ["StreamedRunner"]

log = logging.getLogger(__name__)

#: salt of the permutation the sampled check cycles through
_SAMPLE_SALT = 0x5A


class StreamedRunner(GradientRunner):
    """Runs a gradient job with streamed replies."""

    def _build(self) -> int:
        self.layout: StreamLayout = build_layout(self.spec)
        self._norms: dict[int, float] = {}  # each piece's norm last iteration: the scale check's reference
        self._cycle = np.random.default_rng([self.spec.seed, _SAMPLE_SALT]).permutation(self.spec.workers)
        self._due: set[int] = set()  # workers the sampled check has to confirm a first piece of
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
        while True:
            called = [p for p in positions if p not in located]
            if located and not self.layout.copies(called):
                raise self._failure(DecodingFailure(
                    f"workers {sorted(located)} sent wrong pieces and the others do not hold every partition"))
            outcome = await self._stream(called, suspects)
            if outcome is None:
                return None
            if isinstance(outcome, Decoded):
                if located:
                    wrong = tuple(sorted(located | set(outcome.findings.located)))
                    findings = Findings(outcome.findings.checked, len(wrong), len(wrong), wrong)
                    return Decoded(outcome.decoded, outcome.responders, outcome.compute, findings, outcome.pieces,
                                   outcome.stopped_pieces)
                return outcome
            wrong, disputed = outcome
            located |= wrong
            suspects |= disputed
            log.info("job %s iteration %d: workers %s sent wrong pieces, %s disputed ones; the iteration starts "
                     "again without the first, confirming every piece of the others", self.job.id, self.iteration,
                     sorted(wrong), sorted(disputed))

    def _sampled(self, positions: Sequence[int]) -> set[int]:
        """The workers whose first piece this iteration's sampled check confirms: the next c of a
        fixed random permutation join those still due (a worker that sent nothing in its turn
        stays due), so a worker's pieces are confirmed within ceil(n / c) iterations of its turn."""
        checks = self.spec.checks
        if self.spec.verify_level != "sampled" or checks is None:
            return set()
        n = self.spec.workers
        count = sample_size(n, checks.sample)
        start = self.iteration * count
        self._due |= {int(self._cycle[(start + t) % n]) for t in range(count)}
        return self._due & set(positions)

    async def _stream(self, positions: list[int], suspects: set[int]) -> Decoded | tuple[set[int], set[int]] | None:
        """Call ``positions`` once: the decoded sum; or the workers to leave out and the ones to
        suspect (every piece confirmed) when starting again; or None when the live workers cannot
        settle every piece (erasures: the iteration is tried again)."""
        level = self.spec.verify_level
        # the scale check needs last iteration's norms: without them (the first iteration, or the
        # first after a restart) a sampled check confirms every piece
        strict = level == "strict" or (level == "sampled" and not self._norms)
        assembly = StreamAssembly(
            self.layout, positions, strict=strict, check_first=self._sampled(positions),
            suspects=(self.quarantine.suspects(self.iteration) | suspects) if level else (),
            tolerance=self.spec.tolerance,
            references=self._norms if level else None)
        told: dict[int, set[int]] = {p: set() for p in positions}  # pieces each worker was told the master has
        spares = 0  # copies that arrived after their piece was settled
        restart: tuple[set[int], set[int]] = (set(), set())  # workers to leave out, and to suspect
        round_: Round

        def tell(workers: Sequence[int]) -> None:
            """HAVE to each of ``workers``: the settled pieces among its next ones (those past the
            pieces it delivered, one partition ahead) that it was not told of yet."""
            window = self.layout.chunks + 1
            for worker in workers:
                if worker not in told or worker in round_.ended:
                    continue
                order = self.layout.pieces_of(worker)
                sent = assembly.delivered(worker)
                delivered = [i for i, piece in enumerate(order) if piece in sent]
                at = delivered[-1] + 1 if delivered else 0
                news = [piece for piece in order[at:at + window]
                        if piece not in told[worker] and assembly.settled(piece)]
                if news:
                    told[worker].update(news)
                    round_.have(worker, news)

        def listen(event: Event) -> None:
            nonlocal spares
            kind, position, payload, _ = event
            if kind != "stage":
                assembly.ended(position)
                return
            was = payload.piece is not None and 0 <= payload.piece < self.layout.pieces and \
                assembly.settled(payload.piece)
            try:
                result = assembly.add(position, payload.piece, payload.message)
            except (ValueError, TypeError) as error:  # not a piece it holds: a broken worker
                log.warning("job %s: worker %d sent a bad piece: %s", self.job.id, position, error)
                result = assembly.reject(position)
            spares += was
            if result.reopened:
                restart[0].update(assembly.wrong)
                restart[1].update(w for w in result.disputed if w not in assembly.wrong)
            holders = {h for piece in result.pieces for h in self.layout.holders(piece)}
            tell(sorted(holders | {position}))

        round_ = Round(self, self.iteration, positions, Params(self.params), listen)
        used: set[int] = set()
        try:
            done = await round_.until(lambda _: assembly.complete or any(restart) or not assembly.can_finish())
            if any(restart):
                return restart
            if not assembly.complete:
                if assembly.disagreement() and not assembly.can_finish():
                    raise self._failure(assembly.failure())
                if not done or not assembly.can_finish():
                    return None
            total = assembly.total()
            pieces = assembly.used()
            used = set(pieces)
            # partial stragglers: stopped before they had sent all of their own partition's pieces
            own = {p: set(self.layout.pieces_of(p)[: self.layout.chunks]) for p in positions}
            partial = {p for p in positions if p not in round_.ended and not own[p] <= assembly.delivered(p)}
            stopped = sum(len(v) for p, v in pieces.items() if p in partial)
        finally:
            round_.close(used)
        self._norms = assembly.norms()
        self._due -= assembly.confirmed()
        wrong = tuple(sorted(assembly.wrong))
        checked = assembly.checked()
        self.metrics.pieces.labels(self.job.id, "used").inc(self.layout.pieces)
        self.metrics.pieces.labels(self.job.id, "checked").inc(checked)
        self.metrics.pieces.labels(self.job.id, "spare").inc(spares)
        self.metrics.stopped_pieces.labels(self.job.id).inc(stopped)
        responders = sorted(used)
        compute = [sum(s.compute_seconds for s in round_.replies[p].stages) for p in responders]
        findings = Findings(checked > 0, len(wrong), len(wrong), wrong)
        return Decoded(total, responders, compute, findings, {p: list(v) for p, v in pieces.items()}, stopped)
