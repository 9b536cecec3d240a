"""A round on a worker's data-plane connection as an object, and one connection's rounds
(docs/dataplane.md, "A connection").

A round is in one :class:`State` at a time; the master's frames and its own progress move it on:

=========  ====================================================  =====================================
state      what the round is doing                               what moves it on
=========  ====================================================  =====================================
COMPUTING  computed in a callback, so no frame is read            its work: ENDED (DONE), or STREAMING
           meanwhile: a whole reply at once, or a streamed        with pieces left to compute later
           round's due pieces (at first, when ROUND decides)
WAITING    its injected delay: a timer                            the timer: COMPUTING;
                                                                  STOP, CLOSE, a later ROUND: ENDED
STREAMING  a streamed round between the master's WANTs (or        WANT, or its next pass: COMPUTING;
           before its next pass, after the frames that came)      STOP, CLOSE, a later ROUND: ENDED
TASK       a task computes it (threads, slowdowns, large          its task's end: ENDED; STOP, CLOSE,
           stages)                                                a later ROUND: told to stop
ENDED      over, out of its connection's table                    nothing
=========  ====================================================  =====================================

Every way out is :meth:`Round.end`: it sends the round's DONE (not when a later ROUND let it go,
nor when its connection is gone), counts its outcome (``coded_worker_calls_total``) once, and
ends the connection when CLOSE has come and it was the last round. A round keeps no state of its
computation: what the master says to it goes to its :class:`coded.worker.streams.Orders`, and
the connection (coded.worker.dataplane) computes it through coded.worker.service.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol

from coded.base.errors import TooLarge
from coded.wire.frames import Kind, encode_frame, status_meta
from coded.wire.status import Status, status_of
from coded.wire.tensor import TensorError
from coded.worker.streams import Orders

__all__ = ["MAX_ROUNDS", "Link", "Outcome", "Round", "Rounds", "State", "failure_meta"]

log = logging.getLogger(__name__)

#: rounds of one connection under way at once: one computing, and stopped ones whose computation
#: has not yet reached its next piece of work (a ROUND ends the rounds before it)
MAX_ROUNDS = 64

#: how a round ended, the ``outcome`` label of ``coded_worker_calls_total``: ran to its end, stopped
#: (STOP, CLOSE, a later ROUND), cancelled (its connection went away), failed (DONE with an error)
Outcome = Literal["completed", "stopped", "cancelled", "failed"]

_OK = status_meta(Status.OK)

#: what a round in a callback computes: ``work(round, *args)`` ends it or leaves it STREAMING
Work = Callable[..., None]


def failure_meta(error: BaseException) -> bytes:
    """DONE's or ERROR's metadata for a failure: its status and message (coded.wire.status)."""
    status, message = status_of(error)
    if status is Status.INTERNAL:  # the master gets a generic message: the details stay in this log
        log.error("unexpected error on the data plane", exc_info=error)
    return status_meta(status, message)


class State(enum.Enum):
    """Where a round is (the module's docstring has what moves it on)."""

    COMPUTING = "computing"
    WAITING = "waiting"
    STREAMING = "streaming"
    TASK = "task"
    ENDED = "ended"


class Link(Protocol):
    """What a connection's rounds need of it."""

    def send(self, buffers: Sequence[bytes | memoryview]) -> None:
        """Write these buffers (frames), in one write."""

    def count(self, outcome: Outcome) -> None:
        """Count a round's outcome."""

    def end_connection(self) -> None:
        """Close the connection once what is buffered has been written."""


class Round:
    """One round of a connection, from its ROUND to its :meth:`end` (the module's docstring has
    its states). ``orders`` take what the master says to it: STOP, HAVE and WANT."""

    __slots__ = ("_pending", "_rounds", "_task", "_wake", "id", "orders", "state", "waited")

    def __init__(self, round_id: int, rounds: Rounds) -> None:
        self.id = round_id
        self.state = State.COMPUTING
        self.waited = True  # the master waits for its DONE (a later ROUND lets it go)
        self.orders = Orders()
        self._rounds = rounds
        self._pending: asyncio.Handle | None = None  # its delay's timer, or its next pass
        self._task: asyncio.Task[None] | None = None
        self._wake: tuple[Work, tuple[Any, ...]] | None = None  # what a WANT runs while it is STREAMING

    def __repr__(self) -> str:
        return f"Round({self.id}, {self.state.name})"

    # --- transitions ---------------------------------------------------------------------------------

    def compute(self, work: Work, *args: Any) -> None:
        """COMPUTING: ``work(self, *args)``, now, ends it or leaves it STREAMING."""
        if self._pending is not None:  # a WANT came before its next pass: this pass takes both
            self._pending.cancel()
            self._pending = None
        self.state = State.COMPUTING
        work(self, *args)

    def wait(self, delay: float, work: Work, *args: Any) -> None:
        """WAITING: its injected delay, then :meth:`compute` with ``work``; a STOP cancels it."""
        self.state = State.WAITING
        self._pending = asyncio.get_running_loop().call_later(delay, self.compute, work, *args)

    def idle(self, again: bool, work: Work, *args: Any) -> None:
        """STREAMING: the master's next WANT runs ``work(self, *args)``; so does the loop's next
        pass when ``again`` (more is asked for: after the frames that came meanwhile, a HAVE or
        a STOP)."""
        self.state = State.STREAMING
        self._wake = (work, args)
        if again:
            self._pending = asyncio.get_running_loop().call_soon(self.compute, work, *args)

    def run(self, work: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """TASK: ``work(self, *args)`` computes it in a task, which ends it; a STOP reaches it
        through its orders, also before the task begins."""
        self.state = State.TASK
        self._task = asyncio.get_running_loop().create_task(work(self, *args))

    def have(self, pieces: Iterable[int]) -> None:
        """HAVE: the master has these pieces."""
        self.orders.have(pieces)

    def want(self, pieces: Iterable[int]) -> None:
        """WANT: the master asks for these pieces next; a streamed round idle on the loop's thread
        computes them now."""
        self.orders.want(pieces)
        if self.state is State.STREAMING and self._wake is not None:
            work, args = self._wake
            self.compute(work, *args)

    def stop(self) -> None:
        """STOP, or CLOSE: a round in its delay or idle between WANTs ends at once (DONE, status
        OK); a task is told to stop at its next piece of work, and ends when it does."""
        if self.state is State.TASK:
            self.orders.stop()
        else:
            self.end("stopped")

    def supersede(self) -> None:
        """A later ROUND: the master waits for this round no more; it stops, and ends without a
        DONE (a task once it reaches its next piece of work: until then it counts against
        MAX_ROUNDS)."""
        self.waited = False
        self.stop()

    def lost(self) -> None:
        """The connection is gone: nobody wants the round any more (a task is cancelled)."""
        if self._task is not None:
            self._task.cancel()
        self.end("cancelled")

    def end(self, outcome: Outcome, error: BaseException | None = None,
            frames: Sequence[bytes | memoryview] = ()) -> None:
        """The round's one way out: ``frames`` (its last stages or pieces) and its DONE (with
        ``error``'s status, else OK) in one write, with no DONE when the master let it go (a later
        ROUND) or it was cancelled (its connection is gone); ``outcome`` counted; and, when CLOSE
        has come and it was the last round, the connection's end. An ended round ends no more (a
        task cancelled with its connection ends again as it unwinds)."""
        if self.state is State.ENDED:
            return
        self.state = State.ENDED
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        self._wake = None
        rounds = self._rounds
        del rounds._by_id[self.id]
        link = rounds.link
        link.count(outcome)
        meta = _OK if error is None else failure_meta(error)  # an unexpected error is logged, DONE or not
        if self.waited and outcome != "cancelled":
            frames = [*frames, *encode_frame(Kind.DONE, self.id, meta)]
        if frames:
            link.send(frames)
        if rounds.closing and not rounds._by_id:
            link.end_connection()


class Rounds:
    """One connection's rounds by id: rounds follow one another (a ROUND lets the rounds before it
    go), at most MAX_ROUNDS under way, none after CLOSE, after which the connection ends with
    its last round."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.closing = False  # CLOSE came
        self._by_id: dict[int, Round] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Round]:
        return iter(list(self._by_id.values()))

    def get(self, round_id: int) -> Round | None:
        """The round under way with this id; None: it ended (a frame for it crossed its DONE)."""
        return self._by_id.get(round_id)

    def admit(self, round_id: int) -> None:
        """Make way for a ROUND: the rounds before it are let go (:meth:`Round.supersede`).

        Raises
        ------
        TensorError
            After CLOSE, for round id 0, or for the id of a round under way.
        TooLarge
            With MAX_ROUNDS rounds under way once the earlier ones have been let go.
        """
        if self.closing:
            raise TensorError("a ROUND after CLOSE")
        if round_id == 0:
            raise TensorError("a ROUND needs a nonzero round id")
        if round_id in self._by_id:
            raise TensorError(f"round {round_id} is already computing")
        for earlier in self:  # rounds follow one another: the master waits for none of these
            earlier.supersede()
        if len(self._by_id) >= MAX_ROUNDS:  # stopped tasks that have not ended yet
            raise TooLarge(f"more than {MAX_ROUNDS} rounds under way on one connection")

    def open(self, round_id: int) -> Round:
        """The admitted round (:meth:`admit`), under way from now on: COMPUTING until its ROUND's
        callback decides how it is computed."""
        round_ = self._by_id[round_id] = Round(round_id, self)
        return round_

    def close(self) -> None:
        """CLOSE: every round stops (each ends with DONE), and the connection ends with the last."""
        self.closing = True
        if not self._by_id:
            self.link.end_connection()
        for round_ in self:
            round_.stop()

    def lost(self) -> None:
        """The connection is gone: every round ends, cancelled."""
        for round_ in self:
            round_.lost()
