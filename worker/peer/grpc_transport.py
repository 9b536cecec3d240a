"""The CodeNet peers' transport over gRPC (the ``Peer`` service), and its message conversions."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np

from coded.v1 import peer_pb2, peer_pb2_grpc
from coded.wire.rpc import Security, aio_channel, call_metadata, raised_status
from coded.wire.status import Status
from coded.wire.tensor import from_chunks, from_proto, to_proto
from coded.worker.peer.mailbox import Attempt, PeerMessage, Phase
from coded.worker.peer.transport import PeerNotStarted, PeerTransport, PeerUnreachable

__all__ = ["GrpcPeerTransport", "message_from_proto", "message_to_proto"]


def message_to_proto(message: PeerMessage) -> peer_pb2.PeerMessage:
    """The wire form of a peer message; a ROLLBACK leaves the tensor unset, as peer.proto describes it."""
    return peer_pb2.PeerMessage(
        job_id=message.job_id, sender=message.sender, iteration=message.iteration, epoch=message.epoch,
        layer=message.layer, phase=message.phase.name, decoded=message.decoded,
        tensor=None if message.phase == Phase.ROLLBACK else to_proto(message.tensor),
        wrong=message.wrong, rollback_to=message.rollback_to, reason=message.reason)


def message_from_proto(message: peer_pb2.PeerMessage) -> PeerMessage:
    """A peer message from the wire.

    Raises
    ------
    ValueError
        An unknown phase, or a malformed tensor (:class:`coded.wire.tensor.TensorError`).
    """
    return PeerMessage(
        job_id=message.job_id, sender=message.sender, iteration=message.iteration, epoch=message.epoch,
        layer=message.layer, phase=Phase(message.phase), decoded=message.decoded,
        tensor=from_proto(message.tensor) if message.HasField("tensor") else np.empty(0),
        wrong=tuple(message.wrong), rollback_to=message.rollback_to, reason=message.reason)


class GrpcPeerTransport(PeerTransport):
    """Reaches the peers at ``addresses`` (by index) through their workers' ``Peer`` service.

    Channels open on first use, so a transport that is never used costs nothing.
    """

    def __init__(self, addresses: Sequence[str], security: Security) -> None:
        self._addresses = tuple(addresses)
        self._security = security
        self._channels: dict[int, grpc.aio.Channel] = {}

    def _stub(self, peer: int) -> peer_pb2_grpc.PeerStub:
        if peer not in self._channels:
            self._channels[peer] = aio_channel(self._addresses[peer], self._security)
        return peer_pb2_grpc.PeerStub(self._channels[peer])

    async def send(self, peer: int, message: PeerMessage, timeout: float) -> None:
        try:
            await self._stub(peer).Deliver(message_to_proto(message), timeout=timeout,
                                           metadata=call_metadata(self._security.token))
        except grpc.aio.AioRpcError as error:
            # NOT_FOUND: the peer's worker has no peer of this job yet (see PeerHost.peer)
            started = raised_status(error) is not Status.NOT_FOUND
            raise (PeerUnreachable if started else PeerNotStarted)(error.code().name) from error

    async def fetch_block(self, peer: int, job_id: str, layer: int, version: int, attempt: Attempt,
                          timeout: float) -> np.ndarray:
        epoch, rollback_to = attempt[0], -attempt[1]  # the inverse of attempt_of
        request = peer_pb2.FetchBlockRequest(job_id=job_id, layer=layer, version=version, same_attempt=True,
                                             epoch=epoch, rollback_to=rollback_to)
        chunks = [c async for c in self._stub(peer).FetchBlock(request, timeout=timeout,
                                                                metadata=call_metadata(self._security.token))]
        return from_chunks(chunks)[""]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
