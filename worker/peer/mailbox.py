"""The inbox of one CodeNet peer: the other peers' messages, by training attempt and step.

Each training attempt is (epoch, checkpoint) (docs/codenet.md, "Failures and rollback"): messages
of an abandoned attempt are dropped, messages of a later one wait until this peer gets there, and
a ROLLBACK to a later attempt stays pending until the peer's next wait raises it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

import numpy as np

__all__ = ["Attempt", "Mailbox", "PeerMessage", "Phase", "Rollback", "Step", "attempt_of"]

log = logging.getLogger(__name__)

#: a training attempt, ordered: see :func:`attempt_of`
Attempt = tuple[int, int]


def attempt_of(epoch: int, target: int) -> Attempt:
    """The order of training attempts: a later epoch, or the same epoch from an earlier checkpoint.

    Two peers may decide a rollback in the same epoch from different checkpoints (one had saved a
    newer one); everybody then follows the earlier checkpoint, which every peer still has.
    """
    return (epoch, -target)


class Phase(IntEnum):
    """What a message carries (peer.proto's ``Phase``, same values)."""

    FORWARD = 1   # products W_ij x_j, then the decoded next input
    BACKWARD = 2  # products W_ij^T delta_i, then the decoded previous delta
    ROLLBACK = 3  # every peer returns to a checkpoint


@dataclass(frozen=True, eq=False, kw_only=True)
class PeerMessage:
    """A message between the peers of a job (peer.proto's ``PeerMessage``, field for field).

    ``epoch`` and ``rollback_to`` name the sender's training attempt (:func:`attempt_of`); in a
    ROLLBACK they are the new epoch and the checkpoint iteration to return to, and ``reason``
    says why. ``decoded`` marks a decoding peer's vector (else a product), with ``wrong`` the
    peers whose products it located as wrong. A ROLLBACK carries no ``tensor`` (an empty one).
    """

    job_id: str
    sender: int
    iteration: int = 0
    epoch: int = 0
    layer: int = 0
    phase: Phase
    decoded: bool = False
    tensor: np.ndarray = field(default_factory=lambda: np.empty(0))
    wrong: tuple[int, ...] = ()
    rollback_to: int = 0
    reason: str = ""

    @property
    def attempt(self) -> Attempt:
        return attempt_of(self.epoch, self.rollback_to)


class Step(NamedTuple):
    """The messages a peer waits for together: one phase of one layer in one iteration, products
    or decoded vectors."""

    iteration: int
    layer: int
    phase: Phase
    decoded: bool


class Rollback(Exception):
    """Return to the checkpoint at ``target`` and continue in epoch ``epoch``."""

    def __init__(self, target: int, epoch: int, reason: str) -> None:
        super().__init__(reason)
        self.target, self.epoch, self.reason = target, epoch, reason

    @property
    def attempt(self) -> Attempt:
        return attempt_of(self.epoch, self.target)


class Mailbox:
    """Messages that arrived for peer ``owner`` of ``peers``, by (attempt, step) and sender."""

    def __init__(self, owner: int, peers: int) -> None:
        self.owner, self.peers = owner, peers
        self._attempt = attempt_of(0, 0)
        self._messages: dict[tuple[Attempt, Step], dict[int, PeerMessage]] = defaultdict(dict)
        self._arrived = asyncio.Condition()
        self._rollback: Rollback | None = None  # the latest attempt some peer rolled back to

    @property
    def attempt(self) -> Attempt:
        """The attempt this peer trains in: its messages are the ones waited for."""
        return self._attempt

    async def receive(self, message: PeerMessage) -> None:
        """File a message from another peer (or the owner itself)."""
        async with self._arrived:
            if message.phase == Phase.ROLLBACK:
                rollback = Rollback(message.rollback_to, message.epoch, message.reason)
                if rollback.attempt > self._attempt and (self._rollback is None
                                                         or rollback.attempt > self._rollback.attempt):
                    self._rollback = rollback
            elif message.attempt >= self._attempt:  # a later attempt's messages wait
                step = Step(message.iteration, message.layer, message.phase, message.decoded)
                self._messages[(message.attempt, step)][message.sender] = message
            self._arrived.notify_all()

    async def wait(self, step: Step, want: int, grace: float, timeout: float) -> dict[int, PeerMessage]:
        """The current attempt's messages of ``step`` by sender, once ``want`` of them arrived, or
        ``grace`` s after the first one did (the missing senders are erasures).

        Raises
        ------
        Rollback
            A rollback to a later attempt is pending, or arrives while waiting.
        TimeoutError
            Not a single message arrived within ``timeout`` s.
        """
        key = (self._attempt, step)
        async with self._arrived:
            first: float | None = None
            while True:
                if self._rollback is not None:
                    raise self._rollback
                got = self._messages.get(key, {})
                if len(got) >= want:
                    return dict(got)
                if got and first is None:
                    first = time.monotonic()
                left = timeout if first is None else first + grace - time.monotonic()
                if left <= 0:
                    log.warning("codenet peer %d: %s: %d of %d messages after %.0f s; going on without %s",
                                self.owner, step, len(got), want, grace, sorted(set(range(self.peers)) - set(got)))
                    return dict(got)
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    if first is None:
                        raise TimeoutError(f"no message of {step} within {timeout:g} s") from None

    def forget(self, iteration: int) -> None:
        """Drop the messages of completed iterations up to ``iteration`` and of earlier attempts."""
        for key in [key for key in self._messages if key[0] < self._attempt or key[1].iteration <= iteration]:
            del self._messages[key]

    async def move_to(self, attempt: Attempt) -> None:
        """Enter ``attempt`` (after a rollback): earlier attempts' messages go, and a pending
        rollback to a still later attempt (another peer's, from an earlier checkpoint) stays."""
        async with self._arrived:
            self._attempt = attempt
            if self._rollback is not None and self._rollback.attempt <= attempt:
                self._rollback = None
            for key in [key for key in self._messages if key[0] < attempt]:
                del self._messages[key]
