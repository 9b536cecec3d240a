"""How a CodeNet peer reaches the other peers of its job, whatever carries the messages.

The delivery policy is the protocol's, so it lives here for every transport: a peer whose host
has not started it yet is retried (the launcher starts all peers at once, so it soon will be);
any other peer that cannot be reached is an erasure, which the receivers' grace periods absorb.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod

import numpy as np

from coded.worker.peer.mailbox import Attempt, PeerMessage

__all__ = ["PeerNotStarted", "PeerTransport", "PeerUnreachable"]

log = logging.getLogger(__name__)


class PeerUnreachable(Exception):
    """A peer cannot be reached: what it should have got is an erasure."""


class PeerNotStarted(PeerUnreachable):
    """A peer's host does not run the job yet: worth retrying."""


class PeerTransport(ABC):
    """Messages and block fetches to the peers of one job, by peer index."""

    async def deliver(self, peer: int, message: PeerMessage, timeout: float) -> None:
        """Deliver ``message`` to ``peer``, retrying with backoff while that peer is not started,
        for up to ``timeout`` s; an unreachable peer just does not get it."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                await self.send(peer, message, timeout)
                return
            except PeerUnreachable as error:
                if not isinstance(error, PeerNotStarted) or time.monotonic() > deadline:
                    log.debug("delivery to peer %d failed: %s", peer, error)
                    return
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 2)

    @abstractmethod
    async def send(self, peer: int, message: PeerMessage, timeout: float) -> None:
        """One attempt to hand ``message`` to ``peer`` within ``timeout`` s.

        Raises
        ------
        PeerNotStarted
            The peer's host does not run the job yet.
        PeerUnreachable
            The peer cannot be reached, or refused the message.
        """

    @abstractmethod
    async def fetch_block(self, peer: int, job_id: str, layer: int, version: int, attempt: Attempt,
                          timeout: float) -> np.ndarray:
        """``peer``'s block of ``layer`` once it has completed ``version`` iterations in training
        attempt ``attempt``, within ``timeout`` s.

        Raises an exception (of the transport's or the peer's own kind) when the block cannot be
        had: the peer is unreachable, or has moved to another attempt or version. Callers treat
        that block as missing.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release the connections to the peers."""
