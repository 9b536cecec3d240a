"""CodeNet peer hosts in one process and event loop, whose peers talk directly: no gRPC.

:class:`PeerNetwork` makes real :class:`PeerHost`s by address; their transports hand messages and
blocks straight to the other hosts' peers, mapping the cases as the gRPC layer does: a host that
does not run the job yet is retried (NOT_FOUND), an unknown address is an erasure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coded.base.errors import NotFound
from coded.worker.peer.host import PeerHost
from coded.worker.peer.mailbox import Attempt, PeerMessage
from coded.worker.peer.training import CodeNetPeer
from coded.worker.peer.transport import PeerNotStarted, PeerTransport, PeerUnreachable


class PeerNetwork:
    """The peer hosts of one test, by address."""

    def __init__(self) -> None:
        self._hosts: dict[str, PeerHost] = {}

    def host(self, address: str, state_dir: Path) -> PeerHost:
        """A new host reachable at ``address``, keeping its peers' state in ``state_dir``."""
        host = PeerHost(state_dir, lambda addresses: InProcessTransport(self, addresses))
        self._hosts[address] = host
        return host

    def peer(self, address: str, job_id: str) -> CodeNetPeer:
        """The peer of ``job_id`` at ``address``.

        Raises
        ------
        PeerNotStarted
            The host at ``address`` has no peer of that job yet.
        PeerUnreachable
            No host has that address.
        """
        host = self._hosts.get(address)
        if host is None:
            raise PeerUnreachable(f"no peer host at {address}")
        try:
            return host.peer(job_id)
        except NotFound as error:
            raise PeerNotStarted(str(error)) from None


class InProcessTransport(PeerTransport):
    """A peer's transport through a :class:`PeerNetwork`, to the peers at ``addresses`` (by index)."""

    def __init__(self, network: PeerNetwork, addresses: Sequence[str]) -> None:
        self._network = network
        self._addresses = tuple(addresses)

    async def send(self, peer: int, message: PeerMessage, timeout: float) -> None:
        await self._network.peer(self._addresses[peer], message.job_id).receive(message)

    async def fetch_block(self, peer: int, job_id: str, layer: int, version: int, attempt: Attempt,
                          timeout: float) -> np.ndarray:
        # the peer's block() bounds its own wait by the job's call deadline, as the gRPC call does
        return await self._network.peer(self._addresses[peer], job_id).block(layer, version, attempt)

    async def close(self) -> None:
        """Nothing to release: no connections."""
