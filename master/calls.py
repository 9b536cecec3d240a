"""The master's calls to one worker: assign, upload, compute (streamed, stoppable)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import grpc
import numpy as np

from coded.v1 import peer_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc
from common.rpc import Security, aio_channel, call_metadata
from common.tensor import ChunkAssembler, to_chunks

__all__ = ["WorkerClient", "ComputeCall", "StageReply", "STOP_GRACE_S"]

log = logging.getLogger(__name__)

# Seconds a stopped worker has to end its call before the master cancels it.
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class StageReply:
    stage: int
    message: np.ndarray
    compute_seconds: float
    delay_seconds: float
    received_at: float  # time.perf_counter() when the stage was complete


class WorkerClient:
    """A channel to one worker. Every call has a deadline."""

    open_channels = 0  # across all clients: a leak shows as a count that only grows

    def __init__(self, address: str, security: Security, max_message_mb: int, max_tensor_bytes: int = 2 << 30) -> None:
        self.address = address
        self._channel = aio_channel(address, security, max_message_mb)
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)
        self.peer = peer_pb2_grpc.PeerStub(self._channel)  # the CodeNet peers this worker hosts
        self.metadata = call_metadata(security.token)
        self._max = max_tensor_bytes
        self.closed = False
        self._stops: set[asyncio.Task] = set()
        WorkerClient.open_channels += 1

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            WorkerClient.open_channels -= 1
            await self._channel.close()

    async def assign(self, request: worker_pb2.Assignment, timeout: float) -> tuple[int, ...]:
        reply = await self._stub.Assign(request, timeout=timeout, metadata=self.metadata)
        return tuple(reply.partitions)

    async def upload(self, chunks: Sequence[tensor_pb2.TensorChunk], timeout: float) -> None:
        async def requests() -> AsyncIterator[tensor_pb2.TensorChunk]:
            for chunk in chunks:
                yield chunk

        await self._stub.UploadPartitions(requests(), timeout=timeout, metadata=self.metadata)

    async def release(self, job_id: str, timeout: float = 5.0) -> None:
        await self._stub.Release(worker_pb2.ReleaseRequest(job_id=job_id), timeout=timeout, metadata=self.metadata)

    def compute(
        self, job_id: str, iteration: int, params: Sequence[tensor_pb2.TensorChunk], timeout: float
    ) -> ComputeCall:
        """Start one iteration on this worker with the parameters (pre-chunked once per iteration)."""
        # A fresh id per call: a restarted master recomputes iterations a stop may already name.
        call_id = secrets.token_hex(8)

        async def requests() -> AsyncIterator[worker_pb2.ComputeRequest]:
            for number, chunk in enumerate(params):
                if number == 0:
                    yield worker_pb2.ComputeRequest(job_id=job_id, iteration=iteration, params=chunk, call_id=call_id)
                else:
                    yield worker_pb2.ComputeRequest(params=chunk)

        call = self._stub.Compute(requests(), timeout=timeout, metadata=self.metadata)
        return ComputeCall(call, self._max, lambda: self._start_stop(job_id, call_id))

    def _start_stop(self, job_id: str, call_id: str) -> None:
        task = asyncio.create_task(self._stop(job_id, call_id))
        self._stops.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._stops.discard)

    async def _stop(self, job_id: str, call_id: str) -> None:
        try:
            await self._stub.StopCompute(worker_pb2.StopRequest(job_id=job_id, call_id=call_id),
                                         timeout=STOP_GRACE_S, metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            log.debug("worker %s did not take a stop: %s", self.address, error.code())


class ComputeCall:
    """One streamed Compute call: the stages of a worker's message as they complete.

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
        """Each stage as it completes; nothing more once :meth:`stop` was called."""
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
        finally:
            if self._grace is not None:
                self._grace.cancel()
            self._call.cancel()  # a no-op once the call has ended; needed if the reader goes away

    def stop(self) -> None:
        """Ask the worker to stop computing; the replies end soon after (idempotent)."""
        if self.stopping or self._call.done():
            return
        self.stopping = True
        self._send_stop()
        self._grace = asyncio.get_running_loop().call_later(STOP_GRACE_S, self._call.cancel)


def params_chunks(params: np.ndarray, chunk_bytes: int) -> list[tensor_pb2.TensorChunk]:
    """The parameter vector as chunks, built once per iteration and sent to every worker."""
    return list(to_chunks(params, chunk_bytes=chunk_bytes))


def is_gone(error: grpc.aio.AioRpcError) -> bool:
    """Whether a failed call means the worker process is unreachable (an erasure, not a straggler)."""
    return error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
