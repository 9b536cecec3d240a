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

import asyncio
import collections
import logging
import statistics
import time
from collections.abc import Callable, Collection, Sequence

import numpy as np

from coded.codes import DecodingFailure
from coded.codes.streaming import StreamAssembly, StreamLayout, sample_size
from coded.master.gradient_runner import Decoded, GradientRunner
from coded.master.links import Params
from coded.master.rounds import CallEnded, Event, Findings, Round

__all__ = ["Rests", "Steering", "StreamedRunner"]

log = logging.getLogger(__name__)

#: salt of the permutation the sampled check cycles through
_SAMPLE_SALT = 0x5A
#: an idle worker computes a backup of a piece under way once it is this many typical pieces late
BACKUP_AFTER = 3.0
#: the pieces whose times (from their start to their arrival) make the typical piece: the last
#: few rounds' of the job
LATENCY_WINDOW = 256
#: the most iterations a late worker rests (is not called) after being late in many rounds in a
#: row; it rests 1, 2, 4, ... iterations after its 1st, 2nd, 3rd, ... late round, so a worker
#: that recovers is called again within this many
MAX_REST = 32


class StreamedRunner(GradientRunner):
    """Runs a gradient job with streamed replies."""

    def _build(self) -> int:
        self.layout: StreamLayout = self.spec.layout  # built with the spec
        self._norms: dict[int, float] = {}  # each piece's norm last iteration: the scale check's reference
        self._cycle = np.random.default_rng([self.spec.seed, _SAMPLE_SALT]).permutation(self.spec.workers)
        self._due: set[int] = set()  # workers the sampled check has to confirm a first piece of
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
        self._due -= assembly.confirmed()
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


class Rests:
    """Which late workers a streamed job leaves out of its next rounds.

    A worker late in a round (it sent nothing, and its call had not ended) is usually late in the
    next ones too: asleep, or far slower than the others. Calling it anyway costs the machine
    its wakeups (the round's input, the skips, the stop) for nothing. So it rests: it is not
    called for 1 iteration after its first late round in a row, 2 after its second, then 4, ...,
    at most MAX_REST; the round it is called in again shows whether it is back (a piece from it
    ends its rests). Its partitions are planned onto the others meanwhile
    (:meth:`Steering.anticipate`).
    """

    def __init__(self) -> None:
        self._late_rounds: dict[int, int] = {}  # late workers: how many of their rounds in a row
        self._until: dict[int, int] = {}  # the first iteration a resting worker is called again

    @property
    def behind(self) -> set[int]:
        """The workers late the last time they were called."""
        return set(self._late_rounds)

    def called(self, iteration: int, positions: Sequence[int], enough: Callable[[list[int]], bool]) -> list[int]:
        """``positions`` without the workers resting at ``iteration``, as long as ``enough`` of
        them remain (the longest-late rest first)."""
        called = list(positions)
        for position in sorted(positions, key=lambda p: -self._late_rounds.get(p, 0)):
            if self._until.get(position, 0) > iteration:
                rest = [p for p in called if p != position]
                if enough(rest):
                    called = rest
        return called

    def note(self, iteration: int, positions: Sequence[int], late: Collection[int]) -> None:
        """After iteration ``iteration``'s round with ``positions`` called: ``late`` rest again,
        twice as long as last time; the others are back."""
        for position in positions:
            if position in late:
                rounds = self._late_rounds[position] = self._late_rounds.get(position, 0) + 1
                self._until[position] = iteration + 1 + min(1 << (rounds - 1), MAX_REST)
            else:
                self._late_rounds.pop(position, None)
                self._until.pop(position, None)


class Steering:
    """What each worker of a streamed round computes after its own partition, and what it can
    skip: the master's side of the work, decided as pieces arrive.

    Every worker starts with its own partition's pieces. A worker that has sent them (and what
    it was asked for) is idle, and takes the open piece it holds that nobody is computing: from
    the back of a slower worker's partition (the slow one goes on from the front, so they meet in
    the middle), or a second copy a check needs; when only pieces under way are open, it computes
    one of those too (a backup of the slowest). Pieces settled meanwhile are skipped by whoever
    had them ahead (HAVE).

    Parameters
    ----------
    layout : StreamLayout
    workers : iterable of int
        The workers called.
    assembly : StreamAssembly
        The round's pieces: which are settled, and how many copies each still needs.
    clock : callable
        The master's clock, in seconds.
    latencies : deque of float, optional
        How long recent pieces took, from when their worker began them (as far as the master
        knows: the round's start, its previous piece's arrival, or the WANT) to their arrival;
        this round's are appended. The job's runner keeps it from round to round: a piece is
        late against what the master sees (computing, queueing for a core, the network), not
        against the worker's computing alone, which on a busy machine is a fraction of it and
        would make every round compute backups nobody needs.
    """

    def __init__(self, layout: StreamLayout, workers: Sequence[int], assembly: StreamAssembly,
                 clock: Callable[[], float] = time.monotonic,
                 latencies: collections.deque[float] | None = None) -> None:
        self._layout = layout
        self._assembly = assembly
        self._clock = clock
        self._running = set(workers)
        start = clock()
        self._since = dict.fromkeys(workers, start)  # when each worker began what it computes now
        self._latencies = collections.deque(maxlen=LATENCY_WINDOW) if latencies is None else latencies
        # the typical piece of the rounds before this one, once: the median of a long window at
        # every arrival would cost more than the rest of the steering
        self._typical = statistics.median(self._latencies) if self._latencies else None
        # what each worker has ahead of it, in order: its own partition's pieces, then what it was asked
        self._holds = {w: layout.pieces_of(w) for w in workers}  # every piece each worker holds, in its order
        self._ahead: dict[int, list[int]] = {w: list(self._holds[w][: layout.chunks]) for w in workers}
        self._skipped: dict[int, set[int]] = {w: set() for w in workers}
        # each running worker's ahead without its skipped, kept at every change of either: read at
        # every arrival for every worker, it was most of a round's steering cost when rebuilt per read
        self._todo: dict[int, list[int]] = {w: list(self._ahead[w]) for w in workers}
        self._heard: set[int] = set()  # workers that sent a piece: alive and computing, not late

    def delivered(self, worker: int, piece: int | None) -> None:
        """A piece arrived from a worker."""
        ahead = self._ahead.get(worker)
        if ahead is not None and piece in ahead:
            ahead.remove(piece)
            self._refresh(worker)
        now = self._clock()
        self._latencies.append(now - self._since[worker])
        self._since[worker] = now
        self._heard.add(worker)

    def ended(self, worker: int) -> None:
        """A worker's call ended: nothing it had ahead of it will come."""
        self._running.discard(worker)
        self._ahead.pop(worker, None)
        self._todo.pop(worker, None)

    def busy(self) -> set[int]:
        """The running workers computing a piece the master has not told them to skip: at the
        round's end, a STOP saves their work; the others wait for a WANT, or sit in a delay,
        and the next round ends their calls as well as a STOP would."""
        return {worker for worker in self._running if self._pending(worker)}

    def _refresh(self, worker: int) -> None:
        """Recompute what ``_pending`` returns for a worker after its ahead or skipped changed."""
        self._todo[worker] = [p for p in self._ahead[worker] if p not in self._skipped[worker]]

    def _pending(self, worker: int) -> Sequence[int]:
        """What a running worker will still compute, in order (without what it skips); not to be
        changed by the caller."""
        return self._todo.get(worker, ())

    def anticipate(self, late: Collection[int]) -> dict[int, list[int]]:
        """Plan the own partitions of workers expected to be late, or not called, onto their
        other holders, after those holders' own: asked one piece at a time once idle, such a
        partition would cost a round trip per piece, and a partition with one prompt holder left
        takes them all. The fewest-held pieces go first, each to the holder with the least ahead
        of it, a partition from its back (a late worker that does come goes on from its front).

        Returns
        -------
        dict of int to list of int
            The pieces asked of each worker (its WANT), in order.
        """
        chunks = self._layout.chunks
        pieces = [piece for worker in sorted(late) for piece in self._layout.pieces_of(worker)[:chunks]]
        prompt = {piece: [h for h in self._layout.holders(piece) if h in self._running and h not in late]
                  for piece in pieces}
        out: dict[int, list[int]] = {}
        for piece in sorted(pieces, key=lambda p: (len(prompt[p]), -p)):
            if prompt[piece]:
                worker = min(prompt[piece], key=lambda h: (len(self._ahead[h]), h))
                self._ahead[worker].append(piece)
                self._refresh(worker)
                out.setdefault(worker, []).append(piece)
        return out

    def skips(self, settled: Sequence[int]) -> dict[int, list[int]]:
        """The workers that had these newly settled pieces ahead of them, and which they skip."""
        out: dict[int, list[int]] = {}
        for piece in settled:
            for worker in self._layout.holders(piece):
                if worker in self._running and piece in self._pending(worker):
                    self._skipped[worker].add(piece)
                    self._refresh(worker)
                    out.setdefault(worker, []).append(piece)
        return out

    def _overdue(self) -> float | None:
        """How long a piece may be under way before an idle worker computes a backup of it: a few
        times the typical piece, the last rounds' (in the job's first round, this round's so far;
        None before any piece arrived)."""
        typical = self._typical
        if typical is None and self._latencies:
            typical = statistics.median(self._latencies)
        return None if typical is None else BACKUP_AFTER * typical

    def _idle(self, worker: int) -> bool:
        """Running, with nothing ahead of it, not found wrong, and either heard from or told to
        skip everything it had: a worker that sent nothing yet may be late, but once its own work
        is all settled by others, a piece only it can give must wait for it."""
        return (worker in self._running and not self._pending(worker) and worker not in self._assembly.wrong
                and (worker in self._heard or bool(self._skipped[worker])))

    def next_backup(self) -> float | None:
        """Seconds until a piece under way becomes overdue while a worker is idle (None: no such)."""
        overdue = self._overdue()
        if overdue is None or not any(self._idle(w) for w in self._running):
            return None
        now = self._clock()
        waits = [self._since[w] + overdue - now for w in self._running if self._pending(w)]
        future = [wait for wait in waits if wait > 0]  # those overdue already had their chance
        return min(future) if future else None

    def assign(self) -> dict[int, list[int]]:
        """One piece for each idle worker, if any piece it holds is open."""
        # workers heard from first: the others may be late, so they take only what is left
        idle = sorted((w for w in self._running if self._idle(w)), key=lambda w: (w not in self._heard, w))
        if not idle:
            return {}
        under_way, planned, overdue = self._work(self._overdue())
        out: dict[int, list[int]] = {}
        for worker in idle:
            piece = self._choose(worker, under_way, planned, overdue)
            if piece is not None:
                self._ahead[worker].append(piece)
                self._refresh(worker)
                self._since[worker] = self._clock()  # it starts on it now
                under_way[piece] = under_way.get(piece, 0) + 1  # its next piece, as the next idle worker sees it
                out[worker] = [piece]
        return out

    def _work(self, overdue_after: float | None) -> tuple[dict[int, int], dict[int, int], set[int]]:
        """The work of the running workers: each piece under way (a worker's next) and by how
        many; each piece planned later and how far back in a worker's queue (the furthest); the
        pieces under way for longer than ``overdue_after`` (under way only in name)."""
        under_way: dict[int, int] = {}
        planned: dict[int, int] = {}
        overdue: set[int] = set()
        now = self._clock()
        for other in self._running:
            pending = self._pending(other)
            if pending:
                if overdue_after is not None and now - self._since[other] > overdue_after:
                    overdue.add(pending[0])
                else:
                    under_way[pending[0]] = under_way.get(pending[0], 0) + 1
                for position, piece in enumerate(pending[1:], start=1):
                    planned[piece] = max(planned.get(piece, 0), position)
        return under_way, planned, overdue

    def _choose(self, worker: int, under_way: dict[int, int], planned: dict[int, int], overdue: set[int]) -> int | None:
        """The open piece an idle worker computes next (see :meth:`_work` for the arguments)."""
        assembly = self._assembly
        best: tuple[int, int] | None = None  # (priority, piece): the larger, the better
        backup: int | None = None
        delivered = assembly.delivered(worker)
        for piece in self._holds[worker]:
            missing = assembly.missing(piece)
            if not missing or piece in delivered:
                continue
            if under_way.get(piece, 0) >= missing:
                continue
            if piece in overdue:
                backup = piece if backup is None else backup  # a backup of a piece taking too long
                continue
            # the further back in another worker's queue, the longer it would wait there
            priority = planned.get(piece, 1_000_000)
            if best is None or priority > best[0]:
                best = (priority, piece)
        if best is not None:
            return best[1]
        return backup
