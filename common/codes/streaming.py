"""Streamed replies: workers send each piece of their data as they finish it, the master sums one
copy of every piece.

A replication code (``frc``, ``cyclic``) gives each partition to s + 1 workers. Instead of one
coded message per worker at the end, a worker computes its partitions one *piece* at a time (a
partition is split into ``chunks`` pieces of its rows) in a fixed order and sends every piece's
partial gradient, uncoded, as soon as it has it. The exact gradient is the sum of one copy of
every piece, whoever computed it: the master has it as soon as every piece has arrived once, so
a slow worker contributes the pieces it finished and a fast one goes on into the partitions it
shares with slower ones. No system is solved: the decode is a sum, exact for any responders.

The order matters (Ramamoorthy, Meng and Girimaji, "Leveraging partial stragglers within
gradient coding", 2024): with the *staggered* order every partition is at a different position on
each of its holders (worker i of the cyclic code starts at its own partition i), so a healthy
round needs only the first partition of every worker, and each partition has a second holder
who reaches it next. The *sorted* order (each worker by ascending partition, as data are stored)
makes several workers start with the same partition; it is kept as the baseline it is measured
against (bench/partial.py).

Checking (:class:`StreamAssembly`): a piece that must be checked is settled only by two copies
from different workers that agree; a disagreement waits for a third copy and the odd one out is
wrong. Non-finite copies are wrong at once; a copy far out of scale must be checked. The sampled
check confirms each piece with a fixed probability, drawn per iteration and piece
(:func:`coded.codes.sampled.confirmations`), whoever sends it and wherever it sits in that worker's order; a copy
that arrives after its piece was settled on one copy is compared for free.

Pure math: numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .combine import weighted_sum
from .errors import DecodingFailure, NotDecodableError

__all__ = [
    "ORDERS",
    "STREAMED_SCHEMES",
    "Disputed",
    "Settled",
    "StreamAssembly",
    "StreamLayout",
]

#: schemes whose workers can stream: each partition is replicated, so a piece is the same on
#: every holder (the coded schemes mix partitions in every message)
STREAMED_SCHEMES = ("frc", "cyclic")
#: the orders a worker can compute its partitions in
ORDERS = ("staggered", "sorted")
#: a copy whose norm is this many times above or below its reference must be checked
SCALE_LIMIT = 1e3


class StreamLayout:
    """Who holds which partition, and in which order each worker computes its pieces.

    Parameters
    ----------
    scheme : {"frc", "cyclic"}
        Fractional repetition (groups of s + 1 workers hold the same s + 1 partitions) or cyclic
        repetition (worker i holds partitions i .. i + s mod n).
    n : int
        Workers; there are k = n partitions.
    s : int
        Each partition is held by s + 1 workers; any s can be missing.
    chunks : int
        Pieces per partition (its rows in that many slices, or its mini-batch).
    order : {"staggered", "sorted"}

    Examples
    --------
    >>> layout = StreamLayout("cyclic", n=4, s=1, chunks=2)
    >>> layout.order(3), layout.pieces_of(3), layout.holders(0)
    ((3, 0), (6, 7, 0, 1), (0, 3))
    """

    def __init__(self, scheme: str, n: int, s: int, chunks: int = 4, order: str = "staggered") -> None:
        if scheme not in STREAMED_SCHEMES:
            raise ValueError(f"only {' and '.join(STREAMED_SCHEMES)} stream their replies (got {scheme!r})")
        if not (isinstance(n, int) and isinstance(s, int) and isinstance(chunks, int)):
            raise TypeError("n, s and chunks must be integers")
        if n < 1 or not 0 <= s < n:
            raise ValueError(f"need n >= 1 and 0 <= s < n (got n={n}, s={s})")
        if not 1 <= chunks <= 64:
            raise ValueError(f"chunks must be in 1..64 (got {chunks})")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")
        if scheme == "frc" and n % (s + 1):
            raise ValueError(f"frc needs (s+1) to divide n (got n={n}, s={s}); use cyclic for these values")
        self.scheme, self.n, self.s, self.k, self.chunks, self.order_name = scheme, n, s, n, chunks, order
        if scheme == "frc":
            groups = n // (s + 1)
            # worker w is replica w // groups of group w % groups; the staggered order rotates by the replica
            starts = [(w % groups) * (s + 1) for w in range(n)]
            self._held = [tuple(range(start, start + s + 1)) for start in starts]
            staggered = [tuple(starts[w] + (w // groups + t) % (s + 1) for t in range(s + 1)) for w in range(n)]
        else:
            staggered = [tuple((i + t) % n for t in range(s + 1)) for i in range(n)]
            self._held = [tuple(sorted(parts)) for parts in staggered]
        self._order = staggered if order == "staggered" else self._held
        holders: list[list[int]] = [[] for _ in range(self.k)]
        for worker, parts in enumerate(self._held):
            for j in parts:
                holders[j].append(worker)
        # asked for at every piece that arrives: built once
        self._holders = [tuple(h) for h in holders]
        self._pieces_of = [tuple(j * chunks + c for j in self._order[w] for c in range(chunks)) for w in range(n)]

    def __repr__(self) -> str:
        return (f"StreamLayout({self.scheme!r}, n={self.n}, s={self.s}, chunks={self.chunks}, "
                f"order={self.order_name!r})")

    @property
    def pieces(self) -> int:
        """Pieces in all: k partitions times ``chunks``."""
        return self.k * self.chunks

    def partitions(self, i: int) -> tuple[int, ...]:
        """Partitions worker i holds, ascending."""
        return self._held[self._check_worker(i)]

    def order(self, i: int) -> tuple[int, ...]:
        """Partitions worker i computes, in order."""
        return self._order[self._check_worker(i)]

    def pieces_of(self, i: int) -> tuple[int, ...]:
        """Pieces worker i computes, in order: the chunks of each partition of :meth:`order`."""
        return self._pieces_of[self._check_worker(i)]

    def partition_of(self, piece: int) -> int:
        return piece // self.chunks

    def chunk_of(self, piece: int) -> int:
        return piece % self.chunks

    def holders(self, piece: int) -> tuple[int, ...]:
        """Workers holding the piece's partition, ascending."""
        if not 0 <= piece < self.pieces:
            raise ValueError(f"piece {piece} is outside 0..{self.pieces - 1}")
        return self._holders[self.partition_of(piece)]

    def copies(self, workers: Iterable[int]) -> int:
        """Copies of the least-held partition among ``workers``: 0 when they cannot give the sum,
        2 or more when they can also check every piece."""
        alive = {self._check_worker(w) for w in workers}
        return min(sum(h in alive for h in holders) for holders in self._holders)

    def _check_worker(self, i: int) -> int:
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.n:
            raise ValueError(f"worker ids must be in 0..{self.n - 1} (got {i!r})")
        return int(i)


class Disputed(DecodingFailure):
    """Copies of a piece disagree and none of the workers of the round can send a third:
    ``workers`` sent the disagreeing copies (one of them, at least, is wrong)."""

    def __init__(self, message: str, workers: frozenset[int]) -> None:
        super().__init__(message)
        self.workers = workers


@dataclass(frozen=True)
class Settled:
    """What one arrival changed: pieces newly settled, workers newly found wrong, pieces settled
    earlier and open again (by a worker found wrong, or a late copy that disagrees: other holders
    may have skipped them), and whether every piece is settled."""

    pieces: tuple[int, ...] = ()
    wrong: tuple[int, ...] = ()
    complete: bool = False
    reopened: tuple[int, ...] = ()
    disputed: tuple[int, ...] = ()  # the senders of copies that disagree about a reopened piece


@dataclass
class _Piece:
    copies: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (worker, partial), arrival order
    check: bool = False   # must be confirmed by a second copy
    accepted: int | None = None  # the worker whose copy is used
    checked: bool = False  # confirmed by an agreeing copy


class StreamAssembly:
    """One iteration's pieces as they arrive: which are settled, who was wrong, and the sum.

    Parameters
    ----------
    layout : StreamLayout
    workers : iterable of int
        The workers called this iteration.
    strict : bool
        Every piece must be confirmed by a second, agreeing copy.
    confirm : iterable of int
        Pieces that must be confirmed (the sampled check's draw, :func:`coded.codes.sampled.confirmations`).
    suspects : iterable of int
        Workers every piece of which must be confirmed (recently found wrong).
    tolerance : float
        Two copies agree when they differ by at most ``tolerance`` times the larger's 2-norm.
    references : mapping of int to float, optional
        Each piece's norm in an earlier iteration: a copy ``SCALE_LIMIT`` times above or below it
        must be confirmed.
    spares : bool
        Compare a copy that arrives after its piece was settled on one copy with that copy (it
        cost nothing more: a backup, or a race with a skip); a disagreement opens the piece again.
    """

    def __init__(self, layout: StreamLayout, workers: Iterable[int], strict: bool = False,
                 confirm: Iterable[int] = (), suspects: Iterable[int] = (), tolerance: float = 1e-6,
                 references: Mapping[int, float] | None = None, spares: bool = False) -> None:
        self.layout = layout
        self._running = set(workers)
        self._confirm = set(confirm)
        self._suspects = set(suspects)
        self._spares = spares
        self._tolerance = tolerance
        self._references = dict(references or {})
        self._pieces = [_Piece(check=strict) for _ in range(layout.pieces)]
        self._delivered: dict[int, set[int]] = {w: set() for w in self._running}
        self.wrong: set[int] = set()
        self._unsettled = layout.pieces

    # --- arrivals ----------------------------------------------------------------------------------

    def add(self, worker: int, piece: int, partial: np.ndarray) -> Settled:
        """Take worker's copy of a piece.

        Raises
        ------
        ValueError
            A worker that was not called, a piece it does not hold or sent twice.
        """
        if worker not in self._delivered:
            raise ValueError(f"worker {worker} was not called this iteration")
        if worker not in self.layout.holders(piece):
            raise ValueError(f"worker {worker} does not hold piece {piece}")
        if piece in self._delivered[worker]:
            raise ValueError(f"worker {worker} sent piece {piece} twice")
        self._delivered[worker].add(piece)
        if worker in self.wrong:
            return Settled(complete=self.complete)
        if not np.isfinite(partial).all():
            return self._found_wrong([worker])
        state = self._pieces[piece]
        if (worker in self._suspects or piece in self._confirm or self._out_of_scale(piece, partial)
                or (self._spares and self._settled(state))):
            state.check = True
        was_settled = self._settled(state)
        state.copies.append((worker, partial))
        return self._resolve(piece, state, was_settled)

    def reject(self, worker: int) -> Settled:
        """Leave every copy of a worker out (it sent something that is not a piece it holds)."""
        return self._found_wrong([worker])

    def ended(self, worker: int) -> None:
        """The worker's call ended (it went through its pieces, was stopped, or failed)."""
        self._running.discard(worker)

    def _out_of_scale(self, piece: int, partial: np.ndarray) -> bool:
        reference = self._references.get(piece)
        if not reference:
            return False
        ratio = float(np.linalg.norm(partial)) / reference
        return not 1 / SCALE_LIMIT <= ratio <= SCALE_LIMIT

    def _settled(self, state: _Piece) -> bool:
        return state.accepted is not None

    def _agree(self, a: np.ndarray, b: np.ndarray) -> bool:
        scale = max(float(np.linalg.norm(a)), float(np.linalg.norm(b)))
        return float(np.linalg.norm(a - b)) <= self._tolerance * scale

    def _resolve(self, piece: int, state: _Piece, was_settled: bool) -> Settled:
        """Settle the piece if its copies allow: one copy when unchecked; else the largest group of
        agreeing copies, when it has two and no other group is as large (the rest are wrong)."""
        copies = [(w, p) for w, p in state.copies if w not in self.wrong]
        if not state.check:
            if state.accepted is None and copies:
                state.accepted = copies[0][0]
            return self._report(piece, state, was_settled, ())
        groups: list[list[tuple[int, np.ndarray]]] = []
        for copy in copies:
            group = next((g for g in groups if self._agree(g[0][1], copy[1])), None)
            if group is None:
                groups.append([copy])
            else:
                group.append(copy)
        groups.sort(key=len, reverse=True)
        if not groups or len(groups[0]) < 2 or (len(groups) > 1 and len(groups[1]) == len(groups[0])):
            state.accepted, state.checked = None, False
            return self._report(piece, state, was_settled, ())
        state.accepted, state.checked = groups[0][0][0], True
        wrong = tuple(sorted(w for g in groups[1:] for w, _ in g))
        return self._report(piece, state, was_settled, wrong)

    def _report(self, piece: int, state: _Piece, was_settled: bool, wrong: tuple[int, ...]) -> Settled:
        now = self._settled(state)
        self._unsettled += int(was_settled) - int(now)
        # a late copy that disagrees with the one a piece was settled by opens it again: the other
        # holders may have skipped it, and the senders are suspects
        reopened = (piece,) if was_settled and not now else ()
        disputed = tuple(sorted(w for w, _ in state.copies if w not in self.wrong)) if reopened else ()
        if wrong:
            found = self._found_wrong(wrong)
            return Settled(((piece,) if now and not was_settled else ()) + found.pieces, found.wrong, found.complete,
                           found.reopened + reopened, disputed)
        return Settled((piece,) if now and not was_settled else (), (), self.complete, reopened, disputed)

    def _found_wrong(self, workers: Iterable[int]) -> Settled:
        """Leave every copy of these workers out; pieces they alone settled are open again."""
        new = set(workers) - self.wrong
        self.wrong |= new
        reopened = []
        for piece, state in enumerate(self._pieces):
            if state.accepted in new:
                state.accepted = None
                state.checked = False
                self._unsettled += 1
                reopened.append(piece)
        settled: list[int] = []
        for piece in reopened:  # another copy may settle it at once
            result = self._resolve(piece, self._pieces[piece], False)
            settled.extend(result.pieces)
        still_open = tuple(p for p in reopened if not self.settled(p))
        return Settled(tuple(settled), tuple(sorted(new)), self.complete, still_open)

    # --- state -------------------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """Every piece settled."""
        return self._unsettled == 0

    def settled(self, piece: int) -> bool:
        return self._settled(self._pieces[piece])

    def can_finish(self) -> bool:
        """Whether the workers still running can settle every open piece (holding it, not having
        sent it yet and not found wrong)."""
        for piece, state in enumerate(self._pieces):
            if self._settled(state):
                continue
            if not any(h in self._running and h not in self.wrong and piece not in self._delivered[h]
                       for h in self.layout.holders(piece) if h in self._delivered):
                return False
        return True

    def missing(self, piece: int) -> int:
        """Copies the piece still needs: 0 once settled; else 1, or 2 for a piece to confirm that
        has none (a disputed one needs 1 more)."""
        state = self._pieces[piece]
        if self._settled(state):
            return 0
        copies = sum(w not in self.wrong for w, _ in state.copies)
        return 1 if copies or not state.check else 2

    def must_check(self, piece: int) -> bool:
        return self._pieces[piece].check

    def disagreement(self) -> bool:
        """Whether some open piece has copies that disagree (rather than too few copies)."""
        return any(not self._settled(s) and len([w for w, _ in s.copies if w not in self.wrong]) >= 2
                   for s in self._pieces)

    # --- the result --------------------------------------------------------------------------------

    def total(self, out: np.ndarray | None = None) -> np.ndarray:
        """Sum of the accepted copy of every piece, in piece order (the same responders give the
        same bits); into ``out`` (float64 of a piece's length) when given.

        Raises
        ------
        NotDecodableError
            When some piece is not settled.
        """
        if not self.complete:
            missing = [p for p, s in enumerate(self._pieces) if not self._settled(s)]
            raise NotDecodableError(f"pieces {missing[:8]}{'...' if len(missing) > 8 else ''} are not settled")
        copies = [next(p for w, p in state.copies if w == state.accepted) for state in self._pieces]
        return weighted_sum(copies, np.ones((len(copies), 1)), out=out)[:, 0]

    def used(self) -> dict[int, tuple[int, ...]]:
        """Pieces used from each worker (workers none of whose pieces were used are left out)."""
        out: dict[int, list[int]] = {}
        for piece, state in enumerate(self._pieces):
            if state.accepted is not None:
                out.setdefault(state.accepted, []).append(piece)
        return {w: tuple(p) for w, p in sorted(out.items())}

    def checked(self) -> int:
        """Pieces confirmed by a second copy."""
        return sum(s.checked for s in self._pieces)

    def delivered(self, worker: int) -> set[int]:
        """The pieces a worker has sent this iteration."""
        return set(self._delivered.get(worker, ()))

    def norms(self) -> dict[int, float]:
        """Each settled piece's norm: the references of the next iteration."""
        return {piece: float(np.linalg.norm(next(p for w, p in s.copies if w == s.accepted)))
                for piece, s in enumerate(self._pieces) if s.accepted is not None}

    def failure(self) -> Disputed:
        """The error of an iteration that cannot settle a piece whose copies disagree."""
        pieces = [p for p, s in enumerate(self._pieces)
                  if not self._settled(s) and len([w for w, _ in s.copies if w not in self.wrong]) >= 2]
        piece = pieces[0]
        senders = [w for w, _ in self._pieces[piece].copies if w not in self.wrong]
        return Disputed(
            f"the copies of piece {piece} (partition {self.layout.partition_of(piece)}) from workers {senders} "
            f"disagree and no other worker can send it to tell which is wrong", frozenset(senders))
