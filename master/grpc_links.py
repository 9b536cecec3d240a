"""The master's links to workers (:class:`coded.master.links.WorkerLink`): the control calls over
gRPC; rounds go to the worker's data plane (:mod:`coded.master.data_connections`).

A call the worker failed carries the status it raised (:mod:`coded.wire.status`), which becomes the
links' domain error (:func:`coded.master.links.call_error`) as on the data plane. A call gRPC
itself failed (the worker never answered) is an erasure when the worker is unreachable
(UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED), else a plain failure.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
import numpy as np

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.master.data_connections import DataConnections
from coded.master.links import ComputeCall, Params, WorkerCallError, WorkerLink, WorkerUnreachable, call_error
from coded.master.metrics import OpenCounts
from coded.master.shared import SharedMemory
from coded.v1 import peer_pb2, peer_pb2_grpc, worker_pb2, worker_pb2_grpc
from coded.wire.control import assignment_proto, peer_start_proto, peer_status_of
from coded.wire.rpc import Security, aio_channel, call_metadata, raised_status
from coded.wire.tensor import DEFAULT_CHUNK_BYTES, from_chunks
from coded.wire.uploads import upload_chunks

__all__ = ["GrpcWorkerLink", "link_error"]

#: gRPC's own failures of a call that mean the worker cannot be reached
_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})


def link_error(error: grpc.aio.AioRpcError) -> WorkerCallError:
    """The domain error of a failed control call."""
    details = error.details() or ""
    status = raised_status(error)
    if status is not None:
        return call_error(status, details)
    code = error.code()
    return (WorkerUnreachable if code in _UNREACHABLE else WorkerCallError)(f"{code.name}: {details}")


class GrpcWorkerLink(WorkerLink):
    """A channel to one worker; it and its data-plane connections count into ``held``."""

    def __init__(self, address: str, security: Security, max_message_mb: int, held: OpenCounts,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, max_tensor_bytes: int = 2 << 30,
                 shared: SharedMemory | None = None) -> None:
        self.address = address
        self._channel = aio_channel(address, security, max_message_mb)
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)
        self._peer = peer_pb2_grpc.PeerStub(self._channel)  # the CodeNet peers this worker hosts
        self._metadata = call_metadata(security.token)
        self._chunk = chunk_bytes
        self._max = max_tensor_bytes
        self._data = DataConnections(address, security.token, security.client_context, security.server_name,
                                     max_tensor_bytes, held, shared)
        self._closed = False
        self._held = held
        held.channels += 1

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._data.close()
            self._held.channels -= 1
            await self._channel.close()

    async def assign(self, assignment: Assignment, timeout: float) -> tuple[int, ...]:
        try:
            reply = await self._stub.Assign(assignment_proto(assignment), timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise link_error(error) from None
        self._data.assigned(assignment.job_id, assignment.index, reply.data_port, reply.data_socket,
                            reply.shared_memory)
        return tuple(reply.partitions)

    async def upload(self, job_id: str, arrays: Iterable[tuple[str, np.ndarray]], timeout: float) -> None:
        try:
            await self._stub.UploadPartitions(upload_chunks(job_id, arrays, self._chunk), timeout=timeout,
                                              metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise link_error(error) from None

    async def release(self, job_id: str, timeout: float) -> None:
        await self._data.release(job_id, timeout)
        try:
            await self._stub.Release(worker_pb2.ReleaseRequest(job_id=job_id), timeout=timeout,
                                     metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise link_error(error) from None

    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        return self._data.compute(job_id, iteration, params, timeout)

    # --- CodeNet peers ---------------------------------------------------------------------------------

    async def start_peer(self, start: PeerStart, timeout: float) -> None:
        try:
            await self._peer.StartCodeNet(peer_start_proto(start), timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise link_error(error) from None

    async def peer_status(self, job_id: str, timeout: float) -> PeerStatus:
        try:
            status = await self._peer.Status(peer_pb2.PeerStatusRequest(job_id=job_id), timeout=timeout,
                                             metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise link_error(error) from None
        return peer_status_of(status)

    async def fetch_block(self, job_id: str, layer: int, version: int, timeout: float) -> np.ndarray:
        request = peer_pb2.FetchBlockRequest(job_id=job_id, layer=layer, version=version)
        try:
            chunks = [c async for c in self._peer.FetchBlock(request, timeout=timeout, metadata=self._metadata)]
        except grpc.aio.AioRpcError as error:
            raise link_error(error) from None
        return from_chunks(chunks, self._max)[""]

