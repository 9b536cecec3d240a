"""The master's links to workers over gRPC (:class:`coded.master.links.WorkerLink`).

Statuses become the links' domain errors: UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED mean the
worker is unreachable (an erasure), INVALID_ARGUMENT that it refused the request, and
FAILED_PRECONDITION that it does not hold the job.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import ClassVar

import grpc
import numpy as np

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.master.links import (
    ComputeCall,
    Params,
    StageReply,
    WorkerCallError,
    WorkerForgotJob,
    WorkerLink,
    WorkerRefused,
    WorkerUnreachable,
)
from coded.v1 import peer_pb2, peer_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc
from coded.wire.rpc import Security, aio_channel, call_metadata
from coded.wire.tensor import DEFAULT_CHUNK_BYTES, ChunkAssembler, from_chunks, to_chunks

__all__ = ["STOP_GRACE_S", "GrpcWorkerLink"]

log = logging.getLogger(__name__)

# Seconds a stopped worker has to end its call before the master cancels it.
STOP_GRACE_S = 10.0

_ERRORS: Mapping[grpc.StatusCode, type[WorkerCallError]] = {
    grpc.StatusCode.UNAVAILABLE: WorkerUnreachable,
    grpc.StatusCode.DEADLINE_EXCEEDED: WorkerUnreachable,
    grpc.StatusCode.CANCELLED: WorkerUnreachable,
    grpc.StatusCode.INVALID_ARGUMENT: WorkerRefused,
    grpc.StatusCode.FAILED_PRECONDITION: WorkerForgotJob,
}


def _domain(error: grpc.aio.AioRpcError) -> WorkerCallError:
    return _ERRORS.get(error.code(), WorkerCallError)(f"{error.code().name}: {error.details()}")


class GrpcWorkerLink(WorkerLink):
    """A channel to one worker."""

    open_channels: ClassVar[int] = 0  # across all links: a leak shows as a count that only grows

    def __init__(self, address: str, security: Security, max_message_mb: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 max_tensor_bytes: int = 2 << 30) -> None:
        self.address = address
        self._channel = aio_channel(address, security, max_message_mb)
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)
        self._peer = peer_pb2_grpc.PeerStub(self._channel)  # the CodeNet peers this worker hosts
        self._metadata = call_metadata(security.token)
        self._chunk = chunk_bytes
        self._max = max_tensor_bytes
        self._closed = False
        self._stops: set[asyncio.Task] = set()
        GrpcWorkerLink.open_channels += 1

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            GrpcWorkerLink.open_channels -= 1
            await self._channel.close()

    async def assign(self, assignment: Assignment, timeout: float) -> tuple[int, ...]:
        request = worker_pb2.Assignment(
            job_id=assignment.job_id, worker_index=assignment.index, spec_json=assignment.spec_json,
            data_uploaded=assignment.data_uploaded, trace_csv=assignment.trace_csv, features=assignment.features,
            classes=assignment.classes, sample_shape=assignment.shape)
        try:
            reply = await self._stub.Assign(request, timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None
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
        try:
            await self._stub.Release(worker_pb2.ReleaseRequest(job_id=job_id), timeout=timeout,
                                     metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None

    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        # A fresh id per call: a restarted master recomputes iterations a stop may already name.
        call_id = secrets.token_hex(8)
        chunks = params.form(("grpc", self._chunk), lambda array: list(to_chunks(array, chunk_bytes=self._chunk)))

        async def requests() -> AsyncIterator[worker_pb2.ComputeRequest]:
            for number, chunk in enumerate(chunks):
                if number == 0:
                    yield worker_pb2.ComputeRequest(job_id=job_id, iteration=iteration, params=chunk, call_id=call_id)
                else:
                    yield worker_pb2.ComputeRequest(params=chunk)

        call = self._stub.Compute(requests(), timeout=timeout, metadata=self._metadata)
        return GrpcComputeCall(call, self._max, lambda: self._start_stop(job_id, call_id))

    def _start_stop(self, job_id: str, call_id: str) -> None:
        task = asyncio.create_task(self._stop(job_id, call_id))
        self._stops.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._stops.discard)

    async def _stop(self, job_id: str, call_id: str) -> None:
        try:
            await self._stub.StopCompute(worker_pb2.StopRequest(job_id=job_id, call_id=call_id),
                                         timeout=STOP_GRACE_S, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            log.debug("worker %s did not take a stop: %s", self.address, error.code())

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


class GrpcComputeCall(ComputeCall):
    """One streamed Compute call.

    :meth:`stop` cuts a straggler off by asking its worker to stop (StopCompute), so the call ends
    by itself with status OK. Cancelling the call instead, with a message in flight, leaks native
    memory in grpcio (grpc/grpc#43360; measured here: a master cutting off stragglers grew by
    ~15 MiB per 20 jobs and kept growing). A worker that has not ended the call within
    STOP_GRACE_S (unreachable, frozen) has it cancelled after all.
    """

    def __init__(self, call: grpc.aio.StreamStreamCall, max_bytes: int, send_stop: Callable[[], None]) -> None:
        self._call = call
        self._max = max_bytes
        self._send_stop = send_stop
        self.stopping = False
        self._grace: asyncio.TimerHandle | None = None

    async def replies(self) -> AsyncIterator[StageReply]:
        try:
            assembler = ChunkAssembler(self._max)
            async for reply in self._call:
                if self.stopping:
                    continue  # draining: the worker ends the call at its next chunk
                assembler.add(reply.message)
                if reply.stage_done:
                    yield StageReply(reply.stage, assembler.result(), reply.compute_seconds,
                                     reply.delay_seconds, time.perf_counter())
                    assembler = ChunkAssembler(self._max)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None
        finally:
            if self._grace is not None:
                self._grace.cancel()
            self._call.cancel()  # a no-op once the call has ended; needed if the reader goes away

    def stop(self) -> None:
        if self.stopping or self._call.done():
            return
        self.stopping = True
        self._send_stop()
        self._grace = asyncio.get_running_loop().call_later(STOP_GRACE_S, self._call.cancel)
