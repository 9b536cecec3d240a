"""Steering a streamed round from the master: which piece each worker computes after its own
partition, what it may skip, when an idle worker computes a backup (:class:`Steering`), and which
late workers rest out of the next rounds (:class:`Rests`). Plain objects: a streamed round
(:mod:`coded.master.streamed_round`) drives its Steering as pieces arrive, and the streamed runner
(:mod:`coded.master.streamed_runner`) keeps the Rests from round to round."""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable, Collection, Sequence

from coded.codes.streaming import StreamAssembly, StreamLayout

__all__ = ["BACKUP_AFTER", "LATENCY_WINDOW", "MAX_REST", "Rests", "Steering"]

#: an idle worker computes a backup of a piece under way once it is this many typical pieces late
BACKUP_AFTER = 3.0
#: the pieces whose times (from their start to their arrival) make the typical piece: the last
#: few rounds' of the job
LATENCY_WINDOW = 256
#: the most iterations a late worker rests (is not called) after being late in many rounds in a
#: row; it rests 1, 2, 4, ... iterations after its 1st, 2nd, 3rd, ... late round, so a worker
#: that recovers is called again within this many
MAX_REST = 32


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
