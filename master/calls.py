"""A round: one iteration's calls to many workers at once, and what the calls report to it.

A :class:`Round` collects the stages each call sends (:class:`StageArrived`) until its runner can
decode, then stops the calls still running; a call that fails or whose worker is unreachable
ends (:class:`CallEnded`) as an erasure. Its runner (a :class:`Caller`: the jobs' round runners,
:mod:`coded.master.rounds`) starts the calls and counts their fates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from coded.base.listener import Listener
from coded.master.links import ComputeCall, Params, StageReply, WorkerCallError

__all__ = ["CallEnded", "Caller", "Event", "Reply", "Round", "StageArrived"]


@dataclass(slots=True)  # not frozen: made per reply, and frozen ones cost more to make
class StageArrived:
    """A call sent a stage (or a streamed piece) of its reply."""

    position: int
    call: ComputeCall
    reply: StageReply


@dataclass(slots=True)  # not frozen: made per reply, and frozen ones cost more to make
class CallEnded:
    """A call ended: completed (``error`` None) or failed (an erasure; what it sent stays usable)."""

    position: int
    call: ComputeCall
    error: WorkerCallError | None = None


#: what a call reports to its round, in order: its stages, then its end
Event = StageArrived | CallEnded


class Caller(Protocol):
    """What a round needs of its runner (a :class:`RoundRunner`; tests drive their own)."""

    def call(self, position: int, iteration: int, params: Params, events: Callable[[Event], None]) -> ComputeCall:
        """Start worker ``position``'s call; its events reach ``events`` on the event loop."""

    def count(self, position: int, outcome: str, seconds: float | None) -> None:
        """Count one call's fate: ``used``, ``cancelled`` or ``failed``; ``seconds``: how long the
        worker took to reply (None when its call failed)."""


@dataclass
class Reply:
    """What one worker sent in the current round (one entry per completed stage)."""

    stages: list[StageReply]


class Round:
    """One iteration's calls to many workers at once: replies as they arrive, more on request,
    and every call still running stopped by :meth:`close`.

    Replies reach it by callbacks (ComputeCall.listen); a waiting :meth:`until` is woken once,
    when its condition holds or every call has ended, not on every reply. ``replies`` keeps
    growing while the caller awaits (a decode in a thread); :meth:`take` freezes what a decode
    sees, so the replies it reports as used are the ones it used.

    Parameters
    ----------
    runner : Caller
        Starts the calls and counts their fates.
    iteration : int
    positions : list of int
        The workers called.
    params : Params
        The round's input.
    listener : callable, optional
        Hears every event first (a streamed round's, :mod:`coded.master.streamed_round`), until
        :meth:`close`.
    """

    def __init__(self, runner: Caller, iteration: int, positions: list[int], params: Params,
                 listener: Callable[[Event], None] | None = None) -> None:
        self._runner = runner
        self._listener: Listener[Event] = Listener(listener)
        self.replies: dict[int, Reply] = {}
        self._stages = 0  # stages received so far
        self._taken: dict[int, Reply] | None = None  # what the last take() returned
        self._stages_taken = 0  # stages that take() included
        self._ended: set[int] = set()
        self._failed: set[int] = set()  # calls that ended in an erasure
        self._closed = False
        self._error: Exception | None = None  # the listener's failure while nobody waited
        self._waiting: tuple[asyncio.Future[None], Callable[[dict[int, Reply]], bool]] | None = None
        self._calls: dict[int, ComputeCall] = {}
        self._started = time.perf_counter()
        self._ended_at: dict[int, float] = {}  # when each call that completed ended
        for i in positions:  # a call may report at once (a broken connection): _on_event sees a partial dict
            self._calls[i] = runner.call(i, iteration, params, self._on_event)

    @property
    def running(self) -> bool:
        """Whether some call may still send stages."""
        return len(self._ended) < len(self._calls)

    @property
    def ended(self) -> frozenset[int]:
        """Positions whose calls have ended (completed, or failed)."""
        return frozenset(self._ended)

    def have(self, position: int, pieces: list[int]) -> None:
        """Tell a worker still computing that the master has these pieces (streamed rounds)."""
        call = self._calls.get(position)  # not yet there while the calls start
        if call is not None and position not in self._ended:
            call.have(pieces)

    def want(self, position: int, pieces: list[int]) -> None:
        """Ask a worker still computing for these pieces next (streamed rounds)."""
        call = self._calls.get(position)
        if call is not None and position not in self._ended:
            call.want(pieces)

    def _on_event(self, event: Event) -> None:
        if self._closed:
            return  # the round has what it needed: later stages are not counted as used
        position = event.position
        if isinstance(event, StageArrived):
            self.replies.setdefault(position, Reply([])).stages.append(event.reply)
            self._stages += 1
        else:
            self._ended.add(position)
            if event.error is not None:  # stages that arrived before a failure stay usable
                self._failed.add(position)
            else:
                self._ended_at[position] = time.perf_counter()
        try:
            self._listener(event)
            if self._waiting is not None and not self._waiting[0].done():
                waiter, enough = self._waiting
                # a stage can make the replies enough, or (with a listener) a call's end can
                arrived = isinstance(event, StageArrived)
                if ((arrived or self._listener.listening) and enough(self.replies)) or not self.running:
                    waiter.set_result(None)
        except Exception as error:  # the runner's own failure: raised where it waits, not in the link
            if self._waiting is not None and not self._waiting[0].done():
                self._waiting[0].set_exception(error)
            else:
                self._error = error

    async def until(self, enough: Callable[[dict[int, Reply]], bool]) -> bool:
        """Wait until ``enough(replies)``; False when every call ended first."""
        if self._error is not None:
            raise self._error
        while not enough(self.replies):
            if not self.running:
                return False
            waiter = asyncio.get_running_loop().create_future()
            self._waiting = (waiter, enough)
            try:
                await waiter
            finally:
                self._waiting = None
        return True

    def take(self) -> dict[int, Reply]:
        """The replies so far, as a copy that later stages leave alone: what one decode uses."""
        self._taken = {position: Reply(list(reply.stages)) for position, reply in self.replies.items()}
        self._stages_taken = self._stages
        return self._taken

    async def more(self) -> bool:
        """Wait for a stage that the last :meth:`take` did not include (at once if one came while
        its decode ran); False when every call has ended without one."""
        seen = self._stages_taken
        return await self.until(lambda _: self._stages > seen)

    def close(self, used: Iterable[int] | None = None, idle: Collection[int] = ()) -> None:
        """Stop the calls still running (a straggler is stopped, not cancelled: see ComputeCall);
        count every call's fate once: ``used`` when its reply was used — the last :meth:`take`
        read it (even if its call had not ended yet, or failed afterwards), or it is among
        ``used`` when the caller says — else ``failed`` for an erasure, else ``cancelled`` (a
        straggler: cut off, or its reply came after the last take). ``idle``: workers with nothing
        left to compute, whose calls are stopped without a word to them (ComputeCall.stop).

        With its fate goes how long the worker took to reply: to its end; for a call stopped or
        failed before its end, to its last stage; for one stopped before any, to now (the stop:
        a lower bound, so a straggler still shows as slow); None for one that failed before any.
        A streamed round stops every worker that is still on call when it decodes, so a worker
        that kept serving backups is timed by its last piece, not left out."""
        self._closed = True
        self._listener.let_go()  # a closed round hears nothing more: its owner (a streamed round) is freed
        if used is None:
            used = self.replies if self._taken is None else self._taken
        used = set(used)
        now = time.perf_counter()
        for position, call in self._calls.items():
            if position not in self._ended:  # its DONE may still be on the way after a used stage
                call.stop(position in idle)
            outcome = "used" if position in used else "failed" if position in self._failed else "cancelled"
            self._runner.count(position, outcome, self._reply_seconds(position, now))

    def _reply_seconds(self, position: int, now: float) -> float | None:
        """How long worker ``position`` took to reply, as :meth:`close` counts it."""
        if position in self._ended_at:
            return self._ended_at[position] - self._started
        if position in self.replies:
            return self.replies[position].stages[-1].received_at - self._started
        return None if position in self._failed else now - self._started
