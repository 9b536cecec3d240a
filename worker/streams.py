"""What a worker keeps of a round while it computes it: what the master said to it (a STOP, which
may come before the computation begins; for a streamed round the pieces wanted and the pieces the
master has) and a streamed round's progress, a streamed round computed on the event loop's
thread, and the flags that tell a piece's computation to stop. The round itself, its states and
its end, is coded.worker.rounds'."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from coded.worker.jobs import StreamedShare

__all__ = ["NEVER", "Abandon", "InlineRound", "Orders"]


@dataclass(eq=False)
class Orders:
    """What the master said to one round, kept from its ROUND on (a STOP, a HAVE or a WANT can
    come before its computation begins): whether it stopped the round; for a streamed round the
    pieces it wants next and the pieces it has. A streamed round's progress too: the pieces it
    computed, and how many it sent (the next one's stage number)."""

    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    wanted: collections.deque[int] = field(default_factory=collections.deque)
    skip: set[int] = field(default_factory=set)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    held: frozenset[int] = frozenset()  # every piece the worker holds (set by begin)
    done: set[int] = field(default_factory=set)
    sent: int = 0

    def stop(self) -> None:
        """STOP (or CLOSE, a later ROUND, the job's release): the computation ends at its next
        piece of work, or as soon as it begins."""
        self.stopped.set()

    def have(self, pieces: Iterable[int]) -> None:
        """HAVE: the master has these pieces: skip them (and stop computing one under way)."""
        self.skip.update(pieces)

    def want(self, pieces: Iterable[int]) -> None:
        """WANT: compute these pieces next (after the worker's own partition), in this order."""
        self.wanted.extend(pieces)
        self.asked.set()

    def begin(self, job: StreamedShare) -> None:
        """Put the worker's own partition first (before what a late worker's WANT asked for
        already)."""
        own = job.layout.pieces_of(job.index)
        self.held = frozenset(own)
        self.wanted.extendleft(reversed(own[: job.layout.chunks]))

    def next_piece(self) -> int | None:
        """The next piece to compute: the first one asked for that it holds and has neither
        computed nor been told to skip (None: no such piece is asked for now)."""
        while self.wanted:
            piece = self.wanted.popleft()
            if piece in self.held and piece not in self.skip and piece not in self.done:
                return piece
        return None

    def exhausted(self) -> bool:
        """Whether nothing is left that it could send: every piece it holds computed or skipped."""
        return self.done | self.skip >= self.held


@dataclass
class InlineRound:
    """A streamed round computed on the event loop's thread as the master's frames come
    (:meth:`coded.worker.service.WorkerService.stream_inline`): its input, its injected delay, how
    many pieces make about ``INLINE_WORK`` (coded.worker.service), and its orders."""

    iteration: int
    params: np.ndarray
    delay: float
    batch: int
    orders: Orders
    begun: bool = False  # its delay is over


#: the flag of a piece computed inline: nothing can stop it, no frame is read while it computes
NEVER = threading.Event()


class Abandon:
    """Tells a computation to stop: the round was stopped, or the master has the piece already."""

    __slots__ = ("_cancel", "_piece", "_skip")

    def __init__(self, cancel: threading.Event, skip: set[int], piece: int) -> None:
        self._cancel, self._skip, self._piece = cancel, skip, piece

    def is_set(self) -> bool:
        return self._cancel.is_set() or self._piece in self._skip
