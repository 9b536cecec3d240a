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
import os
import secrets
import socket
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coded.base.errors import NotFound, Unauthenticated
from coded.wire.buffers import BufferPool
from coded.wire.frames import (
    ITERATION,
    PART,
    READY_SHARED,
    STAGE,
    Frame,
    Kind,
    encode_frame,
    parse_have,
    parse_hello,
    parse_shared,
    parse_tensor,
    shared_meta,
    tensor_meta,
)
from coded.wire.protocol import FrameProtocol
from coded.wire.shared import Segment, SharedMemoryError, receive_offer
from coded.wire.shared import available as shared_memory_available
from coded.wire.tensor import TensorError
from coded.worker.rounds import Outcome, Round, Rounds, failure_meta
from coded.worker.service import StageResult, WorkerService

__all__ = ["DataPlane", "WorkerConnection", "serve_data_plane"]

log = logging.getLogger(__name__)

#: seconds a new connection has to say HELLO
HELLO_TIMEOUT_S = 10.0


class WorkerConnection(FrameProtocol):
    """One master connection: one job's rounds (a :class:`coded.worker.rounds.Link` to them)."""

    def __init__(self, service: WorkerService, token: str | None, max_payload: int,
                 segments: tuple[Segment, Segment] | None = None, hello_within: float = HELLO_TIMEOUT_S) -> None:
        super().__init__(max_payload)
        self._service = service
        self._token = token
        self.job_id: str | None = None
        self._rounds: Rounds | None = None  # from HELLO on
        self._hello_timer: asyncio.TimerHandle | None = None
        self._hello_within = hello_within  # what is left of the HELLO's time once the connection is made
        self._segments = segments  # the master's offer: its input segment, this connection's reply segment
        self._inputs = BufferPool()  # rounds' inputs sent as payloads arrive in these
        self.messages = BufferPool()  # rounds' messages are computed in these (the reply segment's, once shared)
        self._sent: list[np.ndarray] = []  # messages sent in shared memory, which the master reads until its next ROUND

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._hello_timer = asyncio.get_running_loop().call_later(
            self._hello_within, self.refuse, TensorError(f"no HELLO within {HELLO_TIMEOUT_S:g} s"))

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
        if self._segments is None:
            self.send(encode_frame(Kind.READY))
            return
        # the master is who it says it is: the rounds' arrays go through the segments it offered
        self.shared_kinds = frozenset({Kind.ROUND})
        self.messages = BufferPool(carve=self._segments[1].carve)
        self.send(encode_frame(Kind.READY, meta=READY_SHARED))

    def _start_round(self, rounds: Rounds, frame: Frame) -> None:
        rounds.admit(frame.round)
        if len(frame.meta) < ITERATION.size:
            raise TensorError("ROUND: metadata shorter than its iteration")
        (iteration,) = ITERATION.unpack_from(frame.meta)
        described = memoryview(frame.meta)[ITERATION.size:]
        if frame.shared:
            assert self._segments is not None  # shared_kinds: only once the connection shares memory
            params = parse_shared(described, self._segments[0])
        else:
            params = parse_tensor(described, frame.payload)
        self._sent.clear()  # a ROUND: the master needs nothing more of the rounds before it
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
        message = result.message
        if result.piece is None:
            kind, meta = Kind.STAGE, STAGE.pack(result.stage, result.compute_seconds, result.delay_seconds)
        else:
            kind, meta = Kind.PART, PART.pack(result.stage, result.piece, result.compute_seconds, result.delay_seconds)
        offset = None if self._segments is None or not self.shared_kinds else self._segments[1].offset(message)
        if offset is None:  # not shared, or a message that did not fit in the segment
            return encode_frame(kind, round_id, meta + tensor_meta(message), message)
        self._sent.append(message)
        return encode_frame(kind, round_id, meta + shared_meta(message, offset), shared=True)

    def payload_buffer(self, length: int) -> np.ndarray:
        return self._inputs.take((length,), np.dtype(np.uint8))


class _Outbox:
    """A round's messages on its connection: computed into the connection's buffers, sent as
    frames with the round's next write."""

    __slots__ = ("_connection", "_round")

    def __init__(self, connection: WorkerConnection, round_: Round) -> None:
        self._connection, self._round = connection, round_

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._connection.messages.take(shape, dtype)

    def send(self, result: StageResult) -> None:
        self._round.frames.extend(self._connection.stage_frame(self._round.id, result))

    @property
    def full(self) -> bool:
        return self._connection.paused

    async def drain(self) -> None:
        await self._connection.drain()


@dataclass
class DataPlane:
    """The worker's data-plane servers: TCP (or TLS) on ``port``, and on Linux the same protocol on
    an abstract Unix socket named ``local`` (without its leading NUL byte) for a master on the same
    host: what MPI does for peers on one node, the kernel's cheapest path (a send on it costs a
    sixth of one through loopback TCP, measured in the issue 23 notes); there the master may offer
    shared memory (coded.wire.shared) before anything else."""

    tcp: asyncio.Server
    port: int
    unix: LocalServer | None = None
    local: str = ""  # the Unix socket's abstract name; "" without one

    @property
    def shares(self) -> bool:
        """Whether a master on this host may offer shared memory on the local socket."""
        return self.unix is not None and self.unix.shares

    def close(self) -> None:
        self.tcp.close()
        if self.unix is not None:
            self.unix.close()


class LocalServer:
    """The local socket's listener: it reads what a master sends first, an offer of shared memory
    (its segments' descriptors, which only a Unix socket can carry), before the connection's frames
    (or TLS) begin. Each connection then is a :class:`WorkerConnection` as on TCP.

    Parameters
    ----------
    listener : socket.socket
        Bound and listening, non-blocking.
    connection : callable
        Makes a connection's protocol: ``connection(segments, hello_within)``.
    tls : ssl.SSLContext or None
    shared : bool
        Whether offers of shared memory are taken (else the offer's byte is refused as a frame).
    """

    def __init__(self, listener: socket.socket, connection: Callable[..., WorkerConnection],
                 tls: ssl.SSLContext | None, shared: bool) -> None:
        self._listener, self._connection, self._tls, self._shared = listener, connection, tls, shared
        self._admitting: set[asyncio.Task[None]] = set()
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    @property
    def shares(self) -> bool:
        return self._shared

    def close(self) -> None:
        self._accepting.cancel()
        for task in self._admitting:
            task.cancel()
        self._listener.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            sock, _ = await loop.sock_accept(self._listener)
            task = loop.create_task(self._admit(sock))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        segments = None
        try:
            if self._shared:
                segments = await self._offer(sock)
            left = max(HELLO_TIMEOUT_S - (loop.time() - began), 0.0)
            await loop.connect_accepted_socket(lambda: self._connection(segments, left), sock, ssl=self._tls)
        except (OSError, ssl.SSLError, SharedMemoryError, asyncio.TimeoutError) as error:
            log.warning("local data-plane connection refused: %s", error)
            sock.close()

    @staticmethod
    async def _offer(sock: socket.socket) -> tuple[Segment, Segment] | None:
        """The master's offer, once its first byte is there (within HELLO_TIMEOUT_S: else none)."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(sock.fileno(), ready)
        try:
            await asyncio.wait_for(readable, HELLO_TIMEOUT_S)
        except asyncio.TimeoutError:
            return None  # silent: the connection's HELLO timer refuses it at once
        finally:
            loop.remove_reader(sock.fileno())
        fds = receive_offer(sock, 2)
        if fds is None:
            return None
        try:
            inputs = Segment.attach(fds[0], writable=False)
        except SharedMemoryError:
            os.close(fds[1])
            raise
        return inputs, Segment.attach(fds[1], writable=True)


async def serve_data_plane(service: WorkerService, host: str, port: int, token: str | None,
                           tls: ssl.SSLContext | None, max_payload: int, shared: bool = True) -> DataPlane:
    """Listen for the master's data-plane connections (TCP and, on Linux, the local socket, where
    a master may offer shared memory unless ``shared`` is False)."""
    loop = asyncio.get_running_loop()

    def connection(segments: tuple[Segment, Segment] | None = None,
                   hello_within: float = HELLO_TIMEOUT_S) -> WorkerConnection:
        return WorkerConnection(service, token, max_payload, segments, hello_within)

    try:
        tcp = await loop.create_server(connection, host, port, ssl=tls, reuse_address=True)
    except OSError as error:  # the port taken, or the host not this machine's: said as the metrics port says it
        why = os.strerror(error.errno) if error.errno else str(error)  # asyncio's strerror repeats the address
        raise OSError(f"cannot listen on {host}:{port} (data plane): {why.lower()}") from None
    port = tcp.sockets[0].getsockname()[1]
    if not sys.platform.startswith("linux"):  # abstract sockets are Linux's
        return DataPlane(tcp, port)
    # a random name: no other process can have taken it, and a master that reaches a socket of
    # this name reaches this worker (a master elsewhere, or in another network namespace, finds
    # none and uses TCP); the token and HELLO hold here as on TCP, and so does TLS
    local = f"coded-data-{secrets.token_hex(16)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + local)
    listener.listen(128)
    listener.setblocking(False)
    return DataPlane(tcp, port, LocalServer(listener, connection, tls, shared and shared_memory_available()), local)
