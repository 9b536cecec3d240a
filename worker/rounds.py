"""A round on a worker's data-plane connection as an object, and one connection's rounds
(docs/dataplane.md, "A connection").

A round's computation is one coroutine (:meth:`coded.worker.service.WorkerService.compute_round`),
which the round steps itself, with no task: its ROUND's callback runs it up to its first wait, and
whatever it waits for (a timer, the master's next WANT, a thread, a full link) steps it on. A round
with nothing to wait for (no delay, small messages) is computed in that one callback, its messages
and its DONE in one write. A round is in one :class:`State` at a time:

=========  ====================================================  =====================================
state      what the round is doing                               what moves it on
=========  ====================================================  =====================================
COMPUTING  its computation runs, on the loop's thread: no         a wait: WAITING; its end: ENDED
           frame is read meanwhile
WAITING    its computation waits: for its injected delay, the    what it waits for: COMPUTING;
           master's next WANT, a full link, the loop's next      STOP, CLOSE, a later ROUND: ENDED
           pass, or a thread computing one of its messages       (a thread's round once the thread
                                                                 has stopped, at its next chunk)
ENDED      over, out of its connection's table                   nothing
=========  ====================================================  =====================================

Every way out is :meth:`Round.end`: it sends the round's DONE (not when a later ROUND let it go,
nor when its connection is gone), counts its outcome (``coded_worker_calls_total``) once, and
ends the connection when CLOSE has come and it was the last round. What the master says to a
round goes to its :class:`coded.worker.streams.Orders`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, Literal, Protocol

from coded.base.errors import TooLarge
from coded.wire.frames import Kind, encode_frame, status_meta
from coded.wire.status import Status, status_of
from coded.wire.tensor import TensorError
from coded.worker.service import Stopped
from coded.worker.streams import Orders

__all__ = ["MAX_ROUNDS", "Link", "Outcome", "Round", "Rounds", "State", "failure_meta"]

log = logging.getLogger(__name__)

#: rounds of one connection under way at once: one computing, and stopped ones whose thread has
#: not yet reached its next piece of work (a ROUND ends the rounds before it)
MAX_ROUNDS = 64

#: how a round ended, the ``outcome`` label of ``coded_worker_calls_total``: ran to its end, stopped
#: (STOP, CLOSE, a later ROUND), cancelled (its connection went away), failed (DONE with an error)
Outcome = Literal["completed", "stopped", "cancelled", "failed"]

_OK = status_meta(Status.OK)


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
    its states). ``orders`` take what the master says to it: STOP, HAVE and WANT; ``frames`` what
    its computation has to send, written at its next wait (or its end) in one write."""

    __slots__ = ("_computation", "_rounds", "_soon", "_waiting", "frames", "id", "orders", "state", "waited")

    def __init__(self, round_id: int, rounds: Rounds) -> None:
        self.id = round_id
        self.state = State.COMPUTING
        self.waited = True  # the master waits for its DONE (a later ROUND lets it go)
        self.orders = Orders()
        self.frames: list[bytes | memoryview] = []
        self._rounds = rounds
        self._computation: Coroutine[Any, Any, None] | None = None
        self._waiting: asyncio.Future[Any] | None = None  # what its computation awaits
        self._soon: asyncio.Handle | None = None  # its computation's next step in the loop's next pass
        self.orders.on_stop(self._stopped)

    def __repr__(self) -> str:
        return f"Round({self.id}, {self.state.name})"

    # --- its computation ---------------------------------------------------------------------------

    def run(self, computation: Coroutine[Any, Any, None]) -> None:
        """Compute the round: ``computation`` at once, up to its first wait."""
        self._computation = computation
        self._step()

    def _step(self, error: BaseException | None = None) -> None:
        """Run the computation to its next wait (or its end), resumed normally or with ``error``."""
        computation = self._computation
        assert computation is not None
        self.state = State.COMPUTING
        self._waiting = self._soon = None
        try:
            awaited = computation.send(None) if error is None else computation.throw(error)
        except StopIteration:
            self.end("completed")
            return
        except asyncio.CancelledError:
            self.end("stopped")
            return
        except Stopped:
            self.end("stopped")
            return
        except Exception as failure:  # the round's failure, told to the master; the connection goes on
            self.end("failed", failure)
            return
        self.state = State.WAITING
        self._flush()
        if awaited is None:  # a bare yield: the loop's next pass, after the frames that came meanwhile
            self._soon = asyncio.get_running_loop().call_soon(self._step)
        else:  # an asyncio future: its end steps the computation on (what a task does)
            awaited._asyncio_future_blocking = False
            self._waiting = awaited
            awaited.add_done_callback(self._woken)

    def _woken(self, future: asyncio.Future[Any]) -> None:
        if future is self._waiting:
            self._step()

    def _stopped(self) -> None:
        """The orders were stopped (STOP, CLOSE, a later ROUND, the job's release): a computation
        that waits for a timer, a WANT or the link ends now; one whose thread computes ends when
        the thread has stopped (its flag is set), at its next chunk of work."""
        if self._computation is None:  # stopped before it began (its ROUND's callback failed it, or a test)
            self.end("stopped")
        elif self.state is State.WAITING and not self.orders.computing:
            self._interrupt(asyncio.CancelledError())

    def _interrupt(self, error: BaseException) -> None:
        """Give up what the computation waits for and resume it with ``error``."""
        if self._waiting is not None:
            self._waiting.remove_done_callback(self._woken)
            self._waiting.cancel()
        if self._soon is not None:
            self._soon.cancel()
        self._step(error)

    def _flush(self) -> None:
        if self.frames:
            frames, self.frames = self.frames, []
            self._rounds.link.send(frames)

    # --- what the master says ----------------------------------------------------------------------

    def stop(self) -> None:
        """STOP, or CLOSE: the round ends (DONE, status OK), at once or when its thread has stopped."""
        self.orders.stop()

    def supersede(self) -> None:
        """A later ROUND: the master waits for this round no more; it stops, and ends without a
        DONE (a thread's round once the thread has stopped: until then it counts against
        MAX_ROUNDS)."""
        self.waited = False
        self.orders.stop()

    def have(self, pieces: Sequence[int]) -> None:
        """HAVE: the master has these pieces."""
        self.orders.have(pieces)

    def want(self, pieces: Sequence[int]) -> None:
        """WANT: the master asks for these pieces next (a computation waiting for them goes on)."""
        self.orders.want(pieces)

    def lost(self) -> None:
        """The connection is gone: nobody wants the round any more."""
        if self.state is State.ENDED:
            return
        if self._waiting is not None:
            self._waiting.remove_done_callback(self._woken)
            self._waiting.cancel()
        if self._soon is not None:
            self._soon.cancel()
        self.orders.cancel.set()
        self.frames = []
        if self._computation is not None:
            self._computation.close()  # its finally blocks run now
        self.end("cancelled")

    def end(self, outcome: Outcome, error: BaseException | None = None) -> None:
        """The round's one way out: its frames not yet written and its DONE (with ``error``'s
        status, else OK) in one write, with no DONE when the master let it go (a later ROUND) or
        it was cancelled (its connection is gone); ``outcome`` counted; and, when CLOSE has come
        and it was the last round, the connection's end. An ended round ends no more."""
        if self.state is State.ENDED:
            return
        self.state = State.ENDED
        self._waiting = self._soon = None
        rounds = self._rounds
        del rounds._by_id[self.id]
        link = rounds.link
        link.count(outcome)
        meta = _OK if error is None else failure_meta(error)  # an unexpected error is logged, DONE or not
        frames, self.frames = self.frames, []
        if not self.waited or outcome == "cancelled":
            frames = [] if outcome == "cancelled" else frames
        else:
            frames.extend(encode_frame(Kind.DONE, self.id, meta))
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
        if len(self._by_id) >= MAX_ROUNDS:  # stopped rounds whose threads have not stopped yet
            raise TooLarge(f"more than {MAX_ROUNDS} rounds under way on one connection")

    def open(self, round_id: int) -> Round:
        """The admitted round (:meth:`admit`), under way from now on."""
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
