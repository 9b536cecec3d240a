"""The worker's end of the data plane (docs/dataplane.md): a job's rounds over one connection.

The master opens one connection per job it runs here, says HELLO (job id, token, this worker's
position in the job) and then sends each round's input as a ROUND frame. A round with nothing to
wait for but its injected delay (a timer) and about a millisecond of work per stage or piece is
computed in the frame callbacks: a whole round at once, a streamed round's own partition in its
ROUND's callback and each wanted piece in its WANT's. Any other round runs as a task, so that
the connection's frames are read while it computes. Its encoded message goes back stage by stage
(STAGE frames), or a streamed round's pieces one by one (PART frames: its own partition, then
what WANT frames ask for, skipping those a HAVE frame says the master has), and the round ends
with DONE. A STOP frame cuts a straggler off, and so does the next ROUND, without a DONE: rounds
on a connection follow one another. CLOSE stops the rounds under way and ends the connection
once they have ended.
A malformed frame ends the connection with an ERROR frame naming the problem; other connections
(other jobs) go on.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import ssl
import sys
from dataclasses import dataclass

import numpy as np

from coded.base.errors import NotFound, TooLarge, Unauthenticated
from coded.wire.frames import (
    ITERATION,
    PART,
    STAGE,
    Frame,
    FrameProtocol,
    Kind,
    encode_frame,
    parse_have,
    parse_hello,
    parse_tensor,
    status_meta,
    tensor_meta,
)
from coded.wire.status import Status, status_of
from coded.wire.tensor import TensorError
from coded.worker.service import StageResult, Stopped, WorkerService

__all__ = ["MAX_ROUNDS", "DataPlane", "WorkerConnection", "serve_data_plane"]

log = logging.getLogger(__name__)

#: rounds of one connection under way at once: one computing, and stopped ones whose computation
#: has not yet reached its next piece of work (a ROUND ends the rounds before it)
MAX_ROUNDS = 64
#: seconds a new connection has to say HELLO
HELLO_TIMEOUT_S = 10.0

_DONE = status_meta(Status.OK)


def _failure_meta(error: BaseException) -> bytes:
    """DONE's or ERROR's metadata for a failure: its status and message (coded.wire.status)."""
    status, message = status_of(error)
    if status is Status.INTERNAL:  # the master gets a generic message: the details stay in this log
        log.error("unexpected error on the data plane", exc_info=error)
    return status_meta(status, message)


class WorkerConnection(FrameProtocol):
    """One master connection: one job's rounds."""

    def __init__(self, service: WorkerService, token: str | None, max_payload: int) -> None:
        super().__init__(max_payload)
        self._service = service
        self._token = token
        self.job_id: str | None = None
        # a round under way: a task; a delay's timer; or (None) a streamed round computed in the
        # frame callbacks, idle between the master's WANTs (WorkerService.stream_inline)
        self._rounds: dict[int, asyncio.Task | asyncio.TimerHandle | None] = {}
        self._superseded: set[int] = set()  # tasks ended by a later ROUND: no DONE when they end
        self._closing = False
        self._hello_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._hello_timer = asyncio.get_running_loop().call_later(
            HELLO_TIMEOUT_S, self.refuse, TensorError(f"no HELLO within {HELLO_TIMEOUT_S:g} s"))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        for round_id, task in self._rounds.items():  # the master is gone: nobody wants these any more
            if task is not None:
                task.cancel()
            if self.job_id is not None:
                self._service.forget(self.job_id, str(round_id))

    def refuse(self, error: Exception) -> None:
        log.warning("data-plane connection of job %s refused: %s", self.job_id, error)
        self.send(encode_frame(Kind.ERROR, meta=_failure_meta(error)))
        self._end_connection()

    def _end_connection(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # after what is buffered has been written

    def check_header(self, kind: Kind, payload_length: int) -> None:
        if self.job_id is None and kind is not Kind.HELLO:
            raise TensorError(f"the first frame must be HELLO (got {kind.name})")
        if kind not in (Kind.HELLO, Kind.ROUND, Kind.STOP, Kind.CLOSE, Kind.HAVE, Kind.WANT):
            raise TensorError(f"a master does not send {kind.name} frames")
        if payload_length and kind is not Kind.ROUND:
            raise TensorError(f"a {kind.name} frame carries no payload (got {payload_length} bytes)")

    def frame_received(self, frame: Frame) -> None:
        if frame.kind is Kind.HELLO:
            if self.job_id is not None:
                raise TensorError("a second HELLO on one connection")
            self._hello(frame)
            return
        assert self.job_id is not None  # check_header: nothing but HELLO before HELLO
        if frame.kind is Kind.ROUND:
            self._start_round(frame)
        elif frame.kind is Kind.STOP:
            self._stop(frame.round)
        elif frame.kind is Kind.HAVE:
            self._service.have(self.job_id, str(frame.round), parse_have(frame.meta))
        elif frame.kind is Kind.WANT:
            self._service.want(self.job_id, str(frame.round), parse_have(frame.meta))
            if frame.round in self._rounds and self._rounds[frame.round] is None:  # inline, past its delay
                self._stream_now(frame.round)
        else:  # CLOSE (check_header lets nothing else through)
            self._closing = True
            for round_id in list(self._rounds):  # the master waits for none of them any more
                self._stop(round_id)
            if not self._rounds:
                self._end_connection()

    def _hello(self, frame: Frame) -> None:
        job_id, token, position = parse_hello(frame.meta)
        if self._token and not hmac.compare_digest(token.encode(), self._token.encode()):
            self.refuse(Unauthenticated("missing or wrong token"))
            return
        held = self._service.position(job_id)
        if held is not None and held != position:  # a connection meant for another worker
            # the port was reused by another of the job's workers: the master assigns the job again
            self.refuse(NotFound(f"this worker holds job {job_id} at position {held}, not {position}"))
            return
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        self.job_id = job_id
        self.send(encode_frame(Kind.READY))

    def _start_round(self, frame: Frame) -> None:
        if self._closing:
            raise TensorError("a ROUND after CLOSE")
        if frame.round == 0:
            raise TensorError("a ROUND needs a nonzero round id")
        if frame.round in self._rounds:
            raise TensorError(f"round {frame.round} is already computing")
        for earlier in list(self._rounds):  # rounds follow one another: the master waits for none of these
            self._stop(earlier, done=False)
        if len(self._rounds) >= MAX_ROUNDS:  # stopped tasks that have not ended yet
            raise TooLarge(f"more than {MAX_ROUNDS} rounds under way on one connection")
        if len(frame.meta) < ITERATION.size:
            raise TensorError("ROUND: metadata shorter than its iteration")
        (iteration,) = ITERATION.unpack_from(frame.meta)
        params = parse_tensor(memoryview(frame.meta)[ITERATION.size:], frame.payload)
        assert self.job_id is not None
        self._service.metrics.bytes_received.inc(params.nbytes)
        call_id = str(frame.round)
        try:
            streamed = self._service.stream_inline(self.job_id, call_id, iteration, params)
            delay = None if streamed is not None else self._service.inline_delay(self.job_id, iteration, params)
        except Exception as error:  # the round's failure, told to the master; the connection goes on
            self._failed(frame.round, error)
            return
        loop = asyncio.get_running_loop()
        if streamed:  # a late worker: its pieces once its delay is over, unless a STOP comes first
            self._rounds[frame.round] = loop.call_later(streamed, self._stream_now, frame.round)
        elif streamed is not None:
            self._rounds[frame.round] = None
            self._stream_now(frame.round)
        elif delay is None:  # it waits (threads, slowdowns): a task, so other rounds and stops go on
            self._service.expect(self.job_id, call_id)  # its HAVE, WANT, STOP may come before the task runs
            self._rounds[frame.round] = loop.create_task(self._round(self.job_id, frame.round, iteration, params))
        elif delay:  # a straggler: a timer that a STOP cancels (most of them are stopped)
            self._rounds[frame.round] = loop.call_later(delay, self._compute_now, frame.round, iteration, params, delay)
        else:
            self._compute_now(frame.round, iteration, params, 0.0)

    def _compute_now(self, round_id: int, iteration: int, params: np.ndarray, delay: float) -> None:
        """A round computed at once (WorkerService.compute_now): its stages and DONE in one write."""
        self._rounds.pop(round_id, None)
        assert self.job_id is not None
        try:
            results = self._service.compute_now(self.job_id, iteration, params, delay)
        except Exception as error:  # the round's failure, told to the master; the connection goes on
            self._failed(round_id, error)
            return
        frames = [part for result in results for part in self._stage_frame(round_id, result)]
        self.send([*frames, *encode_frame(Kind.DONE, round_id, _DONE)])
        self._service.metrics.calls.labels(self.job_id, "completed").inc()
        if self._closing and not self._rounds:
            self._end_connection()

    def _stream_now(self, round_id: int) -> None:
        """An inline streamed round's next pieces (WorkerService.stream_now) as PART frames in one
        write, with DONE once it has nothing left to send. A round with more to compute goes on
        in the loop's next pass, after the frames that came meanwhile (a HAVE, a STOP)."""
        assert self.job_id is not None
        if round_id not in self._rounds or isinstance(self._rounds[round_id], asyncio.Task):
            return  # stopped (or failed) since this call was scheduled
        self._rounds[round_id] = None  # past its delay: a WANT computes at once
        try:
            results, more, over = self._service.stream_now(self.job_id, str(round_id))
        except Exception as error:  # the round's failure, told to the master; the connection goes on
            self._forget_round(round_id)
            self._failed(round_id, error)
            return
        frames = [part for result in results for part in self._stage_frame(round_id, result)]
        if over:
            self._forget_round(round_id)
            frames.extend(encode_frame(Kind.DONE, round_id, _DONE))
            self._service.metrics.calls.labels(self.job_id, "completed").inc()
        if frames:
            self.send(frames)
        if over and self._closing and not self._rounds:
            self._end_connection()
        elif more and not over:
            asyncio.get_running_loop().call_soon(self._stream_now, round_id)

    def _forget_round(self, round_id: int) -> None:
        """A round that ended without a task: out of the connection, its stream out of the service."""
        assert self.job_id is not None
        self._rounds.pop(round_id, None)
        self._service.forget(self.job_id, str(round_id))

    def _failed(self, round_id: int, error: Exception) -> None:
        assert self.job_id is not None
        if self._service.position(self.job_id) is not None:  # no series for job ids nobody assigned
            self._service.metrics.calls.labels(self.job_id, "failed").inc()
        self.send(encode_frame(Kind.DONE, round_id, _failure_meta(error)))

    def _stop(self, round_id: int, done: bool = True) -> None:
        """STOP: a round still in its injected delay, or an inline streamed round, ends at once; a
        computing one is stopped. ``done``: the round ends with DONE (not when a later ROUND ends it)."""
        assert self.job_id is not None
        if round_id not in self._rounds or isinstance(self._rounds[round_id], asyncio.Task):
            if not done and round_id in self._rounds:
                self._superseded.add(round_id)
            self._service.stop(self.job_id, str(round_id))
            return
        waiting = self._rounds[round_id]
        if waiting is not None:  # a timer (uvloop has its own class)
            waiting.cancel()
        self._forget_round(round_id)
        self._service.metrics.calls.labels(self.job_id, "stopped").inc()
        if done:
            self.send(encode_frame(Kind.DONE, round_id, _DONE))
        if self._closing and not self._rounds:
            self._end_connection()

    def _stage_frame(self, round_id: int, result: StageResult) -> list[bytes | memoryview]:
        """A STAGE frame, or a PART frame for a streamed piece."""
        self._service.metrics.bytes_sent.inc(result.message.nbytes)
        if result.piece is None:
            kind, meta = Kind.STAGE, STAGE.pack(result.stage, result.compute_seconds, result.delay_seconds)
        else:
            kind, meta = Kind.PART, PART.pack(result.stage, result.piece, result.compute_seconds, result.delay_seconds)
        return encode_frame(kind, round_id, meta + tensor_meta(result.message), result.message)

    async def _round(self, job_id: str, round_id: int, iteration: int, params: np.ndarray) -> None:
        """One round: its stages as STAGE frames, then DONE (with the error if it failed)."""
        outcome, error = "failed", None
        metrics = self._service.metrics
        try:
            async for result in self._service.compute(job_id, iteration, params, str(round_id)):
                self.send(self._stage_frame(round_id, result))
                await self.drain()  # a large message leaves before the next stage is queued
            outcome = "completed"
        except Stopped:
            outcome = "stopped"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as failure:  # the round's failure, told to the master; the connection goes on
            error = failure
        finally:
            self._rounds.pop(round_id, None)
            superseded = round_id in self._superseded
            self._superseded.discard(round_id)
            self._service.forget(job_id, str(round_id))
            metrics.calls.labels(job_id, outcome).inc()
        if not superseded:  # else the master stopped waiting for it when it sent the next round
            self.send(encode_frame(Kind.DONE, round_id, _DONE if error is None else _failure_meta(error)))
        if self._closing and not self._rounds:
            self._end_connection()


@dataclass
class DataPlane:
    """The worker's data-plane servers: TCP (or TLS) on ``port``, and on Linux the same protocol on
    an abstract Unix socket named ``local`` (without its leading NUL byte) for a master on the same
    host: what MPI does for peers on one node, the kernel's cheapest path (a send on it costs a
    sixth of one through loopback TCP, measured in the issue 23 notes)."""

    tcp: asyncio.Server
    port: int
    unix: asyncio.Server | None = None
    local: str = ""  # the Unix socket's abstract name; "" without one

    def close(self) -> None:
        self.tcp.close()
        if self.unix is not None:
            self.unix.close()


async def serve_data_plane(service: WorkerService, host: str, port: int, token: str | None,
                           tls: ssl.SSLContext | None, max_payload: int) -> DataPlane:
    """Listen for the master's data-plane connections (TCP and, on Linux, the local socket)."""
    loop = asyncio.get_running_loop()

    def connection() -> WorkerConnection:
        return WorkerConnection(service, token, max_payload)

    tcp = await loop.create_server(connection, host, port, ssl=tls, reuse_address=True)
    port = tcp.sockets[0].getsockname()[1]
    if not sys.platform.startswith("linux"):  # abstract sockets are Linux's
        return DataPlane(tcp, port)
    # a random name: no other process can have taken it, and a master that reaches a socket of
    # this name reaches this worker (a master elsewhere, or in another network namespace, finds
    # none and uses TCP); the token and HELLO hold here as on TCP, and so does TLS
    local = f"coded-data-{secrets.token_hex(16)}"
    unix = await loop.create_unix_server(connection, "\0" + local, ssl=tls)
    return DataPlane(tcp, port, unix, local)
