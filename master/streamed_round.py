"""One streamed round on the master: the calls of one iteration of a job whose workers stream the
pieces of their partitions (:mod:`coded.codes.streaming`), from the first ROUND to the sum.

A :class:`StreamedRound` holds the :class:`coded.master.calls.Round` of its calls, the
:class:`StreamAssembly` that keeps one copy of every piece, the :class:`Steering` that decides
who computes what next (WANT) and what the workers skip (HAVE), and the timer of the next backup.
It hears the Round's events as a method; :meth:`StreamedRound.run` returns once every piece is
settled (:class:`Summed`), once a worker found wrong makes the iteration start again
(:class:`Restart`), or once the live workers cannot settle every piece (None); it ends the round
in one place (:meth:`StreamedRound._end`). What a job keeps from round to round (the scale
check's norms, the late and resting workers, the pieces' latencies) stays with its runner
(:mod:`coded.master.streamed_runner`).
"""


from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from coded.codes.streaming import Settled, StreamAssembly
from coded.master.calls import CallEnded, Caller, Event, Reply, Round
from coded.master.gradient_runner import Decoded
from coded.master.links import Params, StageReply
from coded.master.rounds import Findings
from coded.master.steering import Steering

__all__ = ["Restart", "StreamedRound", "Summed"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restart:
    """The iteration starts again: without the ``wrong`` workers (they sent wrong pieces that
    others had been told to skip), confirming every piece of the ``disputed`` ones (they sent
    copies that disagree about a piece settled earlier)."""

    wrong: frozenset[int]
    disputed: frozenset[int]


@dataclass(frozen=True)
class Summed:
    """A round that settled every piece: the iteration's sum and what the job counts of it."""

    decoded: Decoded         # the sum of one copy of every piece, and whom each piece came from
    seconds: float           # summing the pieces: a streamed round's decode
    checked: int             # pieces confirmed by a second copy
    spares: int              # copies that arrived after their piece was settled
    late: frozenset[int]     # workers called that sent no piece
    silent: frozenset[int]   # ... whose calls had not ended either: late, not failed (they rest)


class StreamedRound:
    """One iteration's streamed calls, from their start to the sum of their pieces.

    The calls start at once (a call may report while they start: its events are taken into the
    assembly and steering; the WANTs they call for go out once every call has started, the HAVEs
    are not sent: a worker that computes a piece settled meanwhile sends a spare copy).

    Parameters
    ----------
    caller : Caller
        Starts the calls and counts their fates (the job's runner).
    iteration : int
    positions : list of int
        The workers called.
    params : Params
        The round's input.
    assembly : StreamAssembly
        This round's, checking as the job checks; the round settles it.
    latencies : deque of float
        The job's recent pieces' latencies (:class:`Steering`); this round's are appended.
    job_id : str
        For the log.
    """

    def __init__(self, caller: Caller, iteration: int, positions: list[int], params: Params,
                 assembly: StreamAssembly, latencies: collections.deque[float], job_id: str) -> None:
        self._positions = positions
        self._assembly = assembly
        self._steering = Steering(assembly.layout, positions, assembly, latencies=latencies)
        self._job_id = job_id
        self._timer: asyncio.TimerHandle | None = None  # the next backup's (Steering.next_backup)
        self._spares = 0  # copies that arrived after their piece was settled
        self._wrong: set[int] = set()  # workers to leave out when the iteration starts again
        self._disputed: set[int] = set()  # ... and workers to suspect then
        self._starting = True
        # the Round holds _heard until it closes (_end): then it lets it go, so once ended this
        # object is held by nothing but its runner
        self._round = Round(caller, iteration, positions, params, self._heard)
        self._starting = False

    async def run(self, expected: Collection[int], out: np.ndarray | None = None) -> Summed | Restart | None:
        """Run the round to its end. ``expected``: the workers expected late or not called, whose
        own partitions are asked of the others from the start; ``out``: where the pieces are summed.

        Returns
        -------
        Summed, Restart or None
            Every piece settled; the iteration to start again; or None when the live workers
            cannot settle every piece (erasures: the iteration is tried again).

        Raises
        ------
        Disputed
            When copies of a piece disagree and no worker of the round can tell which is wrong.
        """
        assembly, layout = self._assembly, self._assembly.layout
        used: set[int] = set()
        idle: set[int] = set()  # workers with nothing left to compute once the round has its pieces
        try:
            # stragglers are often the same from one round to the next: their partitions, and
            # those of the workers not called, are asked of the others from the start (a late
            # worker that does come is told to skip what arrived)
            for worker, planned in self._steering.anticipate(expected).items():
                self._round.want(worker, planned)
            self._steer()  # a worker with nothing of its own left (every piece skipped) takes some at once
            done = await self._round.until(self._over)
            if self._wrong or self._disputed:
                return Restart(frozenset(self._wrong), frozenset(self._disputed))
            if not assembly.complete:
                if assembly.disagreement() and not assembly.can_finish():
                    raise assembly.failure()
                if not done or not assembly.can_finish():
                    return None
            summing = time.perf_counter()
            total = assembly.total(out)  # a streamed round's decode: the sum of one copy of every piece
            seconds = time.perf_counter() - summing
            pieces = assembly.used()
            used = set(pieces)
            idle = set(self._positions) - self._steering.busy()
            late = frozenset(p for p in self._positions if not assembly.delivered(p))
            silent = late - self._round.ended
            # partial stragglers: stopped before they had sent all of their own partition's pieces
            partial = {p for p in self._positions if p not in self._round.ended
                       and not set(layout.pieces_of(p)[: layout.chunks]) <= assembly.delivered(p)}
            stopped = sum(len(v) for p, v in pieces.items() if p in partial)
        finally:
            self._end(used, idle)
        wrong = tuple(sorted(assembly.wrong))
        checked = assembly.checked()
        responders = sorted(used)
        replies = self._round.replies
        compute = [sum(s.compute_seconds for s in replies[p].stages) for p in responders]
        transfer = [sum(s.transfer_seconds for s in replies[p].stages) for p in responders]
        arrived = [replies[p].stages[-1].received_at for p in responders]
        wire = [sum(s.wire_bytes for s in replies[p].stages) for p in responders]
        decoded = Decoded(total, responders, compute, Findings(checked > 0, len(wrong), len(wrong), wrong),
                          {p: list(v) for p, v in pieces.items()}, stopped, transfer, arrived, wire)
        return Summed(decoded, seconds, checked, self._spares, late, silent)

    def _over(self, _replies: dict[int, Reply]) -> bool:
        """Whether the round has what it waits for: every piece, a reason to start again, or the
        knowledge that the live workers cannot settle every piece."""
        return self._assembly.complete or bool(self._wrong or self._disputed) or not self._assembly.can_finish()

    def _end(self, used: Collection[int], idle: Collection[int]) -> None:
        """End the round: no backup any more; the Round stops the calls still running and counts
        every fate (``used``: the workers whose pieces the sum used; ``idle``: the ones with
        nothing left to compute, stopped without a word to them)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._round.close(used, idle)

    # --- the calls' events ---------------------------------------------------------------------------

    def _heard(self, event: Event) -> None:
        """A call's event (the Round's listener): a piece into the assembly, or a call's end; then
        steer."""
        position = event.position
        if isinstance(event, CallEnded):
            self._assembly.ended(position)
            self._steering.ended(position)
        else:
            self._arrived(position, event.reply)
        self._steer()

    def _arrived(self, position: int, payload: StageReply) -> None:
        """A piece from a worker: settled, confirmed or found wrong; the workers that had it ahead
        of them skip it (HAVE)."""
        assembly, piece = self._assembly, payload.piece
        was = piece is not None and 0 <= piece < assembly.layout.pieces and assembly.settled(piece)
        result: Settled
        try:
            if piece is None:
                raise ValueError("a whole reply in a streamed round")
            result = assembly.add(position, piece, payload.message)
        except (ValueError, TypeError) as error:  # not a piece it holds: a broken worker
            log.warning("job %s: worker %d sent a bad piece: %s", self._job_id, position, error)
            result = assembly.reject(position)
        self._spares += was
        self._steering.delivered(position, piece)
        if result.reopened:
            self._wrong.update(assembly.wrong)
            self._disputed.update(w for w in result.disputed if w not in assembly.wrong)
        if not assembly.complete:  # else the round ends now: those still computing get STOP
            for worker, pieces in self._steering.skips(result.pieces).items():
                if not self._starting:
                    self._round.have(worker, pieces)

    def _steer(self) -> None:
        """Ask idle workers for open pieces; come back when a piece under way becomes overdue."""
        if self._assembly.complete or self._starting:
            return
        for worker, pieces in self._steering.assign().items():
            self._round.want(worker, pieces)
        wait = self._steering.next_backup()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None if wait is None else asyncio.get_running_loop().call_later(wait + 1e-3, self._steer)

