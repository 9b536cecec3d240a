"""The worker's end of the data plane (docs/dataplane.md): a job's rounds over one connection.

The master opens one connection per job it runs here, says HELLO (job id, token, this worker's
position in the job) and then sends each round's input as a ROUND frame. Each round is a
:class:`coded.worker.rounds.Round`, whose states and single end that module describes; this
module turns frames into its transitions. A round's computation is the service's one driver
(:meth:`coded.worker.service.WorkerService.compute_round`), which the round steps from the frame
callbacks: a round with nothing to wait for is computed in its ROUND's callback, a streamed
round's wanted pieces in their WANT's; one that waits (its injected delay, a thread for a large
message, a full link) goes on when what it waits for is there, and the connection's frames are
read meanwhile. Its encoded message goes back stage by stage (STAGE frames), or a streamed
round's pieces one by one (PART frames: its own partition, then what WANT frames ask for,
skipping those a HAVE frame says the master has), and the round ends with DONE. A STOP frame
cuts a straggler off, and so does the next ROUND, without a DONE: rounds on a connection follow
one another. CLOSE stops the rounds under way and ends the connection once they have ended.
A malformed frame ends the connection with an ERROR frame naming the problem; other connections
(other jobs) go on. Inputs arrive in, and messages are computed in, arrays the connection reuses
(:class:`coded.wire.buffers.BufferPool`).
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

from coded.base.errors import NotFound, Unauthenticated
from coded.wire.buffers import BufferPool
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
    tensor_meta,
)
from coded.wire.tensor import TensorError
from coded.worker.rounds import Outcome, Round, Rounds, failure_meta
from coded.worker.service import StageResult, WorkerService

__all__ = ["DataPlane", "WorkerConnection", "serve_data_plane"]

log = logging.getLogger(__name__)

#: seconds a new connection has to say HELLO
HELLO_TIMEOUT_S = 10.0


class WorkerConnection(FrameProtocol):
    """One master connection: one job's rounds (a :class:`coded.worker.rounds.Link` to them)."""

    def __init__(self, service: WorkerService, token: str | None, max_payload: int) -> None:
        super().__init__(max_payload)
        self._service = service
        self._token = token
        self.job_id: str | None = None
        self._rounds: Rounds | None = None  # from HELLO on
        self._hello_timer: asyncio.TimerHandle | None = None
        self.buffers = BufferPool()  # what its rounds' inputs arrive in and their messages are computed in

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._hello_timer = asyncio.get_running_loop().call_later(
            HELLO_TIMEOUT_S, self.refuse, TensorError(f"no HELLO within {HELLO_TIMEOUT_S:g} s"))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        if self._rounds is not None:  # the master is gone: nobody wants these any more
            self._rounds.lost()
            self._rounds = None  # its link back here: no cycle left for the collector

    def refuse(self, error: Exception) -> None:
        log.warning("data-plane connection of job %s refused: %s", self.job_id, error)
        self.send(encode_frame(Kind.ERROR, meta=failure_meta(error)))
        self.end_connection()

    def end_connection(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # after what is buffered has been written

    def count(self, outcome: Outcome) -> None:
        """Count a round's outcome; a failure of a job this worker does not hold (a round for a job
        nobody assigned here) makes no series."""
        assert self.job_id is not None
        if outcome != "failed" or self._service.position(self.job_id) is not None:
            self._service.metrics.calls.labels(self.job_id, outcome).inc()

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
        rounds = self._rounds
        assert rounds is not None  # check_header: nothing but HELLO before HELLO
        if frame.kind is Kind.ROUND:
            self._start_round(rounds, frame)
        elif frame.kind is Kind.CLOSE:
            rounds.close()
        elif frame.kind is Kind.STOP:
            if (round_ := rounds.get(frame.round)) is not None:  # else it ended: the STOP crossed its DONE
                round_.stop()
        else:  # HAVE or WANT (check_header lets nothing else through)
            pieces = parse_have(frame.meta, frame.kind.name)
            if (round_ := rounds.get(frame.round)) is None:
                return  # it ended
            if frame.kind is Kind.HAVE:
                round_.have(pieces)
            else:
                round_.want(pieces)

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
        self._rounds = Rounds(self)
        self.send(encode_frame(Kind.READY))

    def _start_round(self, rounds: Rounds, frame: Frame) -> None:
        rounds.admit(frame.round)
        if len(frame.meta) < ITERATION.size:
            raise TensorError("ROUND: metadata shorter than its iteration")
        (iteration,) = ITERATION.unpack_from(frame.meta)
        params = parse_tensor(memoryview(frame.meta)[ITERATION.size:], frame.payload)
        assert self.job_id is not None
        self._service.metrics.bytes_received.inc(params.nbytes)
        round_ = rounds.open(frame.round)
        try:
            computation = self._service.compute_round(self.job_id, iteration, params, round_.orders,
                                                      _Outbox(self, round_))
        except Exception as error:  # the round's failure, told to the master; the connection goes on
            round_.end("failed", error)
            return
        round_.run(computation)

    def stage_frame(self, round_id: int, result: StageResult) -> list[bytes | memoryview]:
        """A STAGE frame, or a PART frame for a streamed piece."""
        self._service.metrics.bytes_sent.inc(result.message.nbytes)
        if result.piece is None:
            kind, meta = Kind.STAGE, STAGE.pack(result.stage, result.compute_seconds, result.delay_seconds)
        else:
            kind, meta = Kind.PART, PART.pack(result.stage, result.piece, result.compute_seconds, result.delay_seconds)
        return encode_frame(kind, round_id, meta + tensor_meta(result.message), result.message)

    def payload_buffer(self, length: int) -> np.ndarray:
        return self.buffers.take((length,), np.dtype(np.uint8))


class _Outbox:
    """A round's messages on its connection: computed into the connection's buffers, sent as
    frames with the round's next write."""

    __slots__ = ("_connection", "_round")

    def __init__(self, connection: WorkerConnection, round_: Round) -> None:
        self._connection, self._round = connection, round_

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._connection.buffers.take(shape, dtype)

    def send(self, result: StageResult) -> None:
        self._round.frames.extend(self._connection.stage_frame(self._round.id, result))

    async def drain(self) -> None:
        await self._connection.drain()


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
