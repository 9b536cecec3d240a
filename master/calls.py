"""The master's calls to one worker: assign, upload, compute (streamed, cancellable)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
import numpy as np

from coded.v1 import peer_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc
from common.rpc import Security, aio_channel, call_metadata
from common.tensor import ChunkAssembler, to_chunks

__all__ = ["WorkerClient", "StageReply"]


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

    async def compute(
        self, job_id: str, iteration: int, params: Sequence[tensor_pb2.TensorChunk], timeout: float
    ) -> AsyncIterator[StageReply]:
        """Send the parameters (pre-chunked once per iteration), yield each stage as it completes.

        Cancelling the consuming task cancels the RPC, and the worker stops computing.
        """

        async def requests() -> AsyncIterator[worker_pb2.ComputeRequest]:
            for number, chunk in enumerate(params):
                if number == 0:
                    yield worker_pb2.ComputeRequest(job_id=job_id, iteration=iteration, params=chunk)
                else:
                    yield worker_pb2.ComputeRequest(params=chunk)

        call = self._stub.Compute(requests(), timeout=timeout, metadata=self.metadata)
        try:
            assembler = ChunkAssembler(self._max)
            async for reply in call:
                assembler.add(reply.message)
                if reply.stage_done:
                    yield StageReply(reply.stage, assembler.result(), reply.compute_seconds,
                                     reply.delay_seconds, time.perf_counter())
                    assembler = ChunkAssembler(self._max)
        finally:
            call.cancel()


def params_chunks(params: np.ndarray, chunk_bytes: int) -> list[tensor_pb2.TensorChunk]:
    """The parameter vector as chunks, built once per iteration and sent to every worker."""
    return list(to_chunks(params, chunk_bytes=chunk_bytes))


def is_gone(error: grpc.aio.AioRpcError) -> bool:
    """Whether a failed call means the worker process is unreachable (an erasure, not a straggler)."""
    return error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
