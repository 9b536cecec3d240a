"""The master's links to workers over gRPC (:class:`coded.master.links.WorkerLink`).

Statuses become the links' domain errors: UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED mean the
worker is unreachable (an erasure), INVALID_ARGUMENT that it refused the request, and
FAILED_PRECONDITION that it does not hold the job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
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


_CODES = {code.value[0]: code for code in grpc.StatusCode}


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
        self._sessions: dict[str, _Session] = {}
        self._open_session = self._channel.stream_stream(
            "/coded.v1.Worker/Session", request_serializer=_serialized,
            response_deserializer=worker_pb2.SessionReply.FromString)
        GrpcWorkerLink.open_channels += 1

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await asyncio.gather(*(session.close() for session in self._sessions.values()))
            self._sessions.clear()
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
        session = self._sessions.pop(job_id, None)
        if session is not None:
            await session.close()
        try:
            await self._stub.Release(worker_pb2.ReleaseRequest(job_id=job_id), timeout=timeout,
                                     metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise _domain(error) from None

    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        session = self._sessions.get(job_id)
        if session is None or session.broken is not None:
            session = self._sessions[job_id] = _Session(self._open_session(metadata=self._metadata), job_id, self._max)
        # every worker of the round gets the same bytes: serialised once per round, not per worker
        requests = params.form(("session", job_id, self._chunk), lambda array: _round_requests(
            job_id, params.round_id, iteration, array, self._chunk))
        return session.start(params.round_id, requests, timeout)

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


def _round_requests(job_id: str, round_id: str, iteration: int, array: np.ndarray, chunk_bytes: int) -> list[bytes]:
    return [worker_pb2.SessionRequest(job_id=job_id, round_id=round_id, iteration=iteration,
                                      params=chunk).SerializeToString()
            for chunk in to_chunks(array, chunk_bytes=chunk_bytes)]


def _serialized(request: bytes | worker_pb2.SessionRequest) -> bytes:
    return request if isinstance(request, bytes) else request.SerializeToString()


class _Session:
    """One job's Session stream to one worker: rounds multiplexed by round id.

    A reader task hands each reply to its round's queue. When the stream fails (the worker died,
    restarted or became unreachable), every round under way fails with the stream's error and the
    link opens a new session for the next round. The master closes its side when the job ends
    (:meth:`close`), so the stream ends with OK: never a cancelled call with messages in flight,
    which leaks native memory in grpcio (grpc/grpc#43360).
    """

    def __init__(self, call: grpc.aio.StreamStreamCall, job_id: str, max_bytes: int) -> None:
        self._requests: asyncio.Queue[bytes | worker_pb2.SessionRequest | None] = asyncio.Queue()
        self._rounds: dict[str, asyncio.Queue[worker_pb2.SessionReply | None]] = {}
        self.job_id = job_id
        self.max_bytes = max_bytes
        self.broken: WorkerCallError | None = None
        self._call = call
        self._writer = asyncio.create_task(self._write())
        self._reader = asyncio.create_task(self._read())

    async def _write(self) -> None:
        try:
            while (request := await self._requests.get()) is not None:
                await self._call.write(request)
            await self._call.done_writing()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the stream failed: the reader says how

    async def _read(self) -> None:
        try:
            async for reply in self._call:
                queue = self._rounds.get(reply.round_id)
                if queue is not None:  # else a round given up on (stopped past its grace)
                    queue.put_nowait(reply)
            self.broken = WorkerUnreachable("the worker ended the session")
        except grpc.aio.AioRpcError as error:
            self.broken = _domain(error)
        self._requests.put_nowait(None)  # the writer ends too: a broken session is replaced, never closed
        for queue in self._rounds.values():
            queue.put_nowait(None)  # wakes each round, which raises `broken`

    def start(self, round_id: str, requests: list[bytes], timeout: float) -> SessionRound:
        self._rounds[round_id] = asyncio.Queue()
        for request in requests:
            self._requests.put_nowait(request)
        return SessionRound(self, round_id, timeout)

    def stop(self, round_id: str) -> None:
        self._requests.put_nowait(worker_pb2.SessionRequest(job_id=self.job_id, round_id=round_id, stop=True))

    async def next_reply(self, round_id: str, timeout: float) -> worker_pb2.SessionReply:
        """The round's next reply; raises the stream's error, or WorkerUnreachable after ``timeout``."""
        queue = self._rounds[round_id]
        if queue.empty() and self.broken is not None:
            raise self.broken
        try:
            reply = await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            raise WorkerUnreachable(f"no reply within {timeout:g} s") from None
        if reply is None:
            assert self.broken is not None
            raise self.broken
        return reply

    def end(self, round_id: str) -> None:
        self._rounds.pop(round_id, None)

    async def close(self) -> None:
        """End the session: stop the rounds still open, close our side; the worker ends the
        stream with OK once they have ended."""
        for round_id in self._rounds:
            self.stop(round_id)
        self._requests.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), STOP_GRACE_S)
        except TimeoutError:
            self._call.cancel()  # the worker does not answer: nothing is in flight that it will read
        await asyncio.gather(self._reader, self._writer, return_exceptions=True)


class SessionRound(ComputeCall):
    """One round on a Session stream.

    :meth:`stop` cuts a straggler off with a stop message on the stream; the worker ends the round
    with ``done``. A worker that has not ended it within STOP_GRACE_S is no longer waited for.
    """

    def __init__(self, session: _Session, round_id: str, timeout: float) -> None:
        self._session = session
        self._round = round_id
        self._deadline = time.monotonic() + timeout
        self.stopping = False

    async def replies(self) -> AsyncIterator[StageReply]:
        assembler = ChunkAssembler(self._session.max_bytes)
        try:
            while True:
                try:
                    reply = await self._session.next_reply(self._round, max(self._deadline - time.monotonic(), 0.0))
                except WorkerCallError:
                    if self.stopping:
                        return  # cut off, and gone or silent: not the worker's failure
                    raise
                if reply.done:
                    if reply.error_code and not self.stopping:
                        code = _CODES.get(reply.error_code, grpc.StatusCode.UNKNOWN)
                        raise _ERRORS.get(code, WorkerCallError)(f"{code.name}: {reply.error}")
                    return
                if self.stopping:
                    continue  # draining: the worker ends the round at its next chunk
                assembler.add(reply.message)
                if reply.stage_done:
                    yield StageReply(reply.stage, assembler.result(), reply.compute_seconds, reply.delay_seconds,
                                     time.perf_counter())
                    assembler = ChunkAssembler(self._session.max_bytes)
        finally:
            self._session.end(self._round)

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self._deadline = time.monotonic() + STOP_GRACE_S
        self._session.stop(self._round)
