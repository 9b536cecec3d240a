"""What a worker keeps of a round while it computes it: what the master said to it (a STOP, which
may come before the computation begins; for a streamed round the pieces wanted and the pieces the
master has) and its progress, and the flags that tell a piece's computation to stop. The round
itself, its states and its end, is coded.worker.rounds'; how it is computed, coded.worker.service's."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["Abandon", "Orders", "StopFlag"]


@dataclass(eq=False)
class Orders:
    """What the master said to one round, kept from its ROUND on (a STOP, a HAVE or a WANT can
    come before its computation begins): whether it stopped the round; for a streamed round the
    pieces it wants next and the pieces it has. The round's progress too: the pieces it computed
    and how many messages it sent (the next one's stage number).

    ``cancel`` is the flag a computation on another thread polls between chunks of work; a stop
    sets it, and tells whoever runs the round (:meth:`on_stop`). While a thread computes one of
    the round's units (``computing``), the round is under way until the thread has stopped.
    """

    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    cancel: StopFlag = field(default_factory=lambda: StopFlag())
    wanted: collections.deque[int] = field(default_factory=collections.deque)
    skip: set[int] = field(default_factory=set)
    asked: asyncio.Event | None = None  # made when the round first waits for a WANT
    held: frozenset[int] = frozenset()  # every piece the worker holds (set by begin)
    done: set[int] = field(default_factory=set)
    sent: int = 0
    computing: bool = False  # a thread computes one of its units
    _listeners: list[Callable[[], None]] = field(default_factory=list)

    def on_stop(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` once, when the round is stopped."""
        self._listeners.append(listener)

    def stop(self) -> None:
        """STOP (or CLOSE, a later ROUND, the job's release): the computation ends at its next
        piece of work, or as soon as it begins."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.cancel.set()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    def have(self, pieces: Iterable[int]) -> None:
        """HAVE: the master has these pieces: skip them (and stop computing one under way)."""
        self.skip.update(pieces)

    def want(self, pieces: Iterable[int]) -> None:
        """WANT: compute these pieces next (after the worker's own partition), in this order."""
        self.wanted.extend(pieces)
        if self.asked is not None:
            self.asked.set()

    def begin(self, own: Iterable[int], held: Iterable[int]) -> None:
        """A streamed round begins: ``own`` pieces first (before what a late worker's WANT asked
        for already), of the pieces ``held``."""
        self.held = frozenset(held)
        self.wanted.extendleft(reversed(list(own)))

    def next_piece(self) -> int | None:
        """The next piece to compute: the first one asked for that it holds and has neither
        computed nor been told to skip (None: no such piece is asked for now)."""
        while self.wanted:
            piece = self.wanted.popleft()
            if piece in self.held and piece not in self.skip and piece not in self.done:
                return piece
        return None

    def exhausted(self) -> bool:
        """Whether nothing is left that a streamed round could send: every piece it holds computed
        or skipped."""
        return self.done | self.skip >= self.held

    async def more_wanted(self) -> None:
        """Until the master's next WANT (or the stop that ends the round)."""
        if self.asked is None:
            self.asked = asyncio.Event()
        self.asked.clear()
        await self.asked.wait()


class StopFlag:
    """What a computation polls between chunks of work, from any thread (a bool under the GIL: a
    threading.Event's lock and condition cost more to make than a small round's computing)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set



class Abandon:
    """Tells a computation to stop: the round was stopped, or the master has the piece already."""

    __slots__ = ("_cancel", "_piece", "_skip")

    def __init__(self, cancel: StopFlag, skip: set[int], piece: int) -> None:
        self._cancel, self._skip, self._piece = cancel, skip, piece

    def is_set(self) -> bool:
        return self._cancel.is_set() or self._piece in self._skip
