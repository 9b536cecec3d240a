"""The master's links to workers (:class:`coded.master.links.WorkerLink`): control calls over gRPC,
rounds over the data plane (:mod:`coded.master.dataplane`).

Statuses become the links' domain errors (:func:`coded.master.links.call_error`): UNAVAILABLE,
DEADLINE_EXCEEDED and CANCELLED mean the worker is unreachable (an erasure), INVALID_ARGUMENT that
it refused the request, and FAILED_PRECONDITION that it does not hold the job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence

import grpc
import numpy as np

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.master.dataplane import STOP_GRACE_S, DataConnection
from coded.master.links import (
    ComputeCall,
    Params,
    StageReply,
    WorkerCallError,
    WorkerForgotJob,
    WorkerLink,
    WorkerRefused,
    WorkerUnreachable,
    call_error,
)
from coded.master.metrics import OpenCounts
from coded.v1 import peer_pb2, peer_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc
from coded.wire.frames import ITERATION, Kind, encode_frame, tensor_meta
from coded.wire.rpc import Security, aio_channel, call_metadata
from coded.wire.tensor import DEFAULT_CHUNK_BYTES, from_chunks, to_chunks

__all__ = ["GrpcWorkerLink"]

log = logging.getLogger(__name__)

def _domain(error: grpc.aio.AioRpcError) -> WorkerCallError:
    return call_error(error.code().value[0], error.details() or "")


class GrpcWorkerLink(WorkerLink):
    """A channel to one worker; it and its data-plane connections count into ``held``."""

    def __init__(self, address: str, security: Security, max_message_mb: int, held: OpenCounts,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, max_tensor_bytes: int = 2 << 30) -> None:
        self.address = address
        self._channel = aio_channel(address, security, max_message_mb)
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)
        self._peer = peer_pb2_grpc.PeerStub(self._channel)  # the CodeNet peers this worker hosts
        self._metadata = call_metadata(security.token)
        self._chunk = chunk_bytes
        self._max = max_tensor_bytes
        self._security = security
        self._closed = False
        self._data_port = 0  # the worker's data plane, as its last assignment reply said
        self._data_socket = ""  # ... and its local (Unix) socket, tried first
        self._positions: dict[str, int] = {}  # the worker's position in each job it was assigned
        self._connections: dict[str, asyncio.Future[DataConnection]] = {}  # by job, opened or opening
        self._held = held
        held.channels += 1

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await asyncio.gather(*(self._close_connection(job) for job in list(self._connections)))
            self._held.channels -= 1
            await self._channel.close()

    async def assign(self, assignment: Assignment, timeout: float) -> tuple[int, ...]:
        request = worker_pb2.Assignment(
            job_id=assignment.job_id, worker_index=assignment.index, spec_json=assignment.spec_json,
            data_uploaded=assignment.data_uploaded, trace_csv=assignment.trace_csv, features=assignment.features,
            classes=assignment.classes, sample_shape=assignment.shape, slowdown_csv=assignment.slowdown_csv)
        try:
            reply = await self._stub.Assign(request, timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None
        if not 0 < reply.data_port < 65536:
            raise WorkerRefused(f"the worker at {self.address} has no data plane (data_port {reply.data_port})")
        self._data_port, self._data_socket = reply.data_port, reply.data_socket
        self._positions[assignment.job_id] = assignment.index
        return tuple(reply.partitions)

    async def upload(self, job_id: str, arrays: Mapping[str, np.ndarray], timeout: float) -> None:
        async def chunks() -> AsyncIterator[tensor_pb2.TensorChunk]:
            for name, array in arrays.items():
                for chunk in to_chunks(array, f"{job_id}/{name}", self._chunk):
                    yield chunk

        try:
            await self._stub.UploadPartitions(chunks(), timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None

    async def release(self, job_id: str, timeout: float) -> None:
        self._positions.pop(job_id, None)
        await self._close_connection(job_id, timeout)
        try:
            await self._stub.Release(worker_pb2.ReleaseRequest(job_id=job_id), timeout=timeout,
                                     metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None

    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        # every worker of the round gets the same frames: encoded once per round, not per worker
        frames = params.form(("frames", iteration), lambda array: encode_frame(
            Kind.ROUND, params.round_id, ITERATION.pack(iteration) + tensor_meta(array), array))
        opening = self._connections.get(job_id)
        if opening is None or not self._usable(opening, job_id):
            stale = _opened(opening) if opening is not None else None
            if stale is not None:
                stale.fail(WorkerUnreachable("replaced: the worker moved or took another position"))
            opening = self._connections[job_id] = asyncio.ensure_future(self._connect(job_id))
        if opening.done():
            return opening.result().start(params.round_id, frames, timeout)
        return _Connecting(opening, params.round_id, frames, timeout)

    def _usable(self, opening: asyncio.Future[DataConnection], job_id: str) -> bool:
        """Whether a job's connection (opened or opening) still goes to the worker as it was last
        assigned: a restarted worker listens on another port, and a port can be reused by another
        worker of the same job."""
        if not opening.done():
            return True
        connection = _opened(opening)
        return (connection is not None and connection.broken is None and connection.port == self._data_port
                and connection.position == self._positions.get(job_id))

    async def _connect(self, job_id: str) -> DataConnection:
        if not self._data_port or job_id not in self._positions:
            raise WorkerForgotJob("the worker's data plane is not known yet: assign the job first")
        host = self.address.rpartition(":")[0].strip("[]")
        return await DataConnection.open(job_id, host, self._data_port, self._security.token,
                                         self._security.client_context(), self._security.server_name, self._max,
                                         self._held, self._positions[job_id], local=self._data_socket)

    async def _close_connection(self, job_id: str, timeout: float = STOP_GRACE_S) -> None:
        opening = self._connections.pop(job_id, None)
        if opening is None:
            return
        if not opening.done():
            opening.cancel()  # it aborts what it had opened
            return
        connection = _opened(opening)
        if connection is not None:
            await connection.close(timeout)

    # --- CodeNet peers ---------------------------------------------------------------------------------

    async def start_peer(self, start: PeerStart, timeout: float) -> None:
        request = peer_pb2.CodeNetStart(job_id=start.job_id, peer=start.peer, spec_json=start.spec_json,
                                        peers=start.peers, files=dict(start.files))
        try:
            await self._peer.StartCodeNet(request, timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None

    async def peer_status(self, job_id: str, timeout: float) -> PeerStatus:
        try:
            s = await self._peer.Status(peer_pb2.PeerStatusRequest(job_id=job_id), timeout=timeout,
                                        metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None
        return PeerStatus(
            job_id=s.job_id, peer=s.peer, state=s.state, iteration=s.iteration, rollbacks=s.rollbacks,
            errors_corrected=s.errors_corrected, errors_detected=s.errors_detected, repairs=s.repairs,
            cpu_seconds=s.cpu_seconds, reason=s.reason, elapsed_s=s.elapsed_s,
            evaluations=tuple((int(i), a) for i, a in zip(s.eval_iterations, s.eval_accuracy, strict=True)))

    async def fetch_block(self, job_id: str, layer: int, version: int, timeout: float) -> np.ndarray:
        request = peer_pb2.FetchBlockRequest(job_id=job_id, layer=layer, version=version)
        try:
            chunks = [c async for c in self._peer.FetchBlock(request, timeout=timeout, metadata=self._metadata)]
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None
        return from_chunks(chunks, self._max)[""]


def _opened(opening: asyncio.Future[DataConnection]) -> DataConnection | None:
    """The connection, once it has opened; None while it opens, or when opening failed or was cancelled."""
    if not opening.done() or opening.cancelled() or opening.exception() is not None:
        return None
    return opening.result()


class _Connecting(ComputeCall):
    """A round whose connection is still opening: it starts once the connection is up."""

    def __init__(self, opening: asyncio.Future[DataConnection], round_id: int, frames: Sequence[bytes | memoryview],
                 timeout: float) -> None:
        self._opening = opening
        self._round = round_id
        self._frames = frames
        self._timeout = timeout
        self._call: ComputeCall | None = None
        self._said: list[tuple[str, Sequence[int]]] = []  # HAVE and WANT before the round started
        self.stopping = False

    async def replies(self) -> AsyncIterator[StageReply]:
        try:
            connection = await asyncio.shield(self._opening)
        except WorkerCallError:
            if self.stopping:
                return
            raise
        except asyncio.CancelledError:
            if not self._opening.cancelled():
                raise  # this round itself was cancelled
            if self.stopping:
                return
            raise WorkerUnreachable("the connection was closed while it opened (released, or the worker moved)") \
                from None
        if self.stopping:
            return
        self._call = connection.start(self._round, self._frames, self._timeout)
        for what, pieces in self._said:
            getattr(self._call, what)(pieces)
        async for reply in self._call.replies():
            yield reply

    def stop(self) -> None:
        self.stopping = True
        if self._call is not None:
            self._call.stop()

    def have(self, pieces: Sequence[int]) -> None:
        if self._call is None:
            self._said.append(("have", pieces))
        else:
            self._call.have(pieces)

    def want(self, pieces: Sequence[int]) -> None:
        if self._call is None:
            self._said.append(("want", pieces))
        else:
            self._call.want(pieces)
