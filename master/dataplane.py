"""The master's end of the data plane (docs/dataplane.md): one connection per (job, worker).

A :class:`DataConnection` carries every round of one job on one worker. :meth:`DataConnection.start`
writes a round's input at once when the connection is up (its ROUND frame, :func:`round_frames`,
is encoded once and written to every worker), so a round costs no call set-up; replies are routed
to their :class:`DataRound` by round id, and a failed round's status becomes the links' domain
error (:func:`status_error`). When the connection fails, every round on it fails with the failure
and :mod:`coded.master.data_connections` opens a new connection for the next round.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence

import numpy as np

from coded.base.listener import Listener
from coded.master.links import ComputeCall, Params, StageReply, WorkerCallError, WorkerUnreachable, call_error
from coded.master.metrics import OpenCounts
from coded.master.shared import JobInputs, SharedMemory
from coded.wire.buffers import BufferPool
from coded.wire.frames import (
    ITERATION,
    PART,
    READY_SHARED,
    STAGE,
    Frame,
    Kind,
    encode_frame,
    have_meta,
    hello_meta,
    parse_shared,
    parse_status,
    parse_tensor,
    tensor_meta,
)
from coded.wire.protocol import FrameProtocol
from coded.wire.shared import Segment, send_offer
from coded.wire.status import Status
from coded.wire.tensor import TensorError

__all__ = ["MAX_STAGES", "STOP_GRACE_S", "DataConnection", "DataRound", "round_frames", "status_error"]

log = logging.getLogger(__name__)

#: seconds a stopped worker has to end its round before the master stops waiting for it
STOP_GRACE_S = 10.0
#: dtypes of the workers' messages: float64, or float32 for jobs with ``wire: float32``
MESSAGE_DTYPES = (np.dtype("<f8"), np.dtype("<f4"))
#: seconds to connect and be greeted
CONNECT_TIMEOUT_S = 10.0

#: stages of one round's message (a code's messages have one or two; a streamed round one per
#: piece of the worker: its partitions times the pieces of each)
MAX_STAGES = 4096


async def _local_socket(name: str) -> socket.socket | None:
    """A socket connected to the abstract Unix socket ``name``; None when this host (network
    namespace) has no such socket or cannot have one."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, "\0" + name)
    except OSError:
        sock.close()
        return None
    return sock


def status_error(meta: bytes) -> WorkerCallError | None:
    """The domain error of a DONE's or ERROR's status (None: the round completed or was stopped).

    Raises
    ------
    TensorError
        When the metadata is no status.
    """
    status, message = parse_status(meta)
    return None if status is Status.OK else call_error(status, message)


def round_frames(params: Params, iteration: int) -> Sequence[bytes | memoryview]:
    """The ROUND frame of one round: encoded once, then the same bytes go to every worker."""
    return params.form(("frames", iteration), lambda array: encode_frame(
        Kind.ROUND, params.round_id, ITERATION.pack(iteration) + tensor_meta(array), array))


class DataConnection(FrameProtocol):
    """The master's connection to one worker for one job; it counts itself into ``held`` while open."""

    def __init__(self, job_id: str, max_payload: int, held: OpenCounts, port: int = 0, position: int = 0,
                 local: bool = False, offered: tuple[JobInputs, Segment] | None = None) -> None:
        super().__init__(max_payload)
        self._held = held
        self.job_id = job_id
        self.port, self.position = port, position  # where it goes, and as which worker of the job
        self.broken: WorkerCallError | None = None
        self.local = local  # on the worker's local (Unix) socket
        self._offered = offered  # shared memory offered to the worker
        self.shared: tuple[JobInputs, Segment] | None = None  # ... and taken: the job's inputs, the replies
        self.ready = asyncio.get_running_loop().create_future()
        self._rounds: dict[int, DataRound] = {}
        self._closed: asyncio.Future[None] | None = None
        self._buffers = BufferPool()  # the worker's messages arrive in them, reused once decoded

    @classmethod
    async def open(cls, job_id: str, host: str, port: int, token: str | None, tls: ssl.SSLContext | None,
                   server_name: str, max_payload: int, held: OpenCounts, position: int = 0,
                   local: str = "", shared: SharedMemory | None = None) -> DataConnection:
        """Connect, say HELLO and wait for READY: to the worker's ``local`` abstract Unix socket
        when this host has it (the worker runs here), else to ``host:port``. On the local socket,
        ``shared`` memory is offered first (the worker's READY says whether it takes it).

        Raises
        ------
        WorkerCallError
            WorkerUnreachable when the worker cannot be reached, or the worker's refusal.
        """
        loop = asyncio.get_running_loop()
        opened: list[asyncio.Transport] = []

        async def connect() -> DataConnection:
            hostname = server_name if tls is not None else None
            sock = await _local_socket(local) if local else None
            if sock is not None:
                offered = None if shared is None else shared.offer(job_id)
                if offered is not None:
                    send_offer(sock, (offered[0].segment, offered[1]))  # one byte on a new connection: it fits
                    offered[1].close()  # the reply segment goes to this worker alone: its mapping suffices
                transport, connection = await loop.create_unix_connection(
                    lambda: cls(job_id, max_payload, held, port, position, local=True, offered=offered), sock=sock,
                    ssl=tls, server_hostname=hostname)
            else:
                transport, connection = await loop.create_connection(
                    lambda: cls(job_id, max_payload, held, port, position), host, port, ssl=tls,
                    server_hostname=hostname)
            opened.append(transport)
            connection.send(encode_frame(Kind.HELLO, meta=hello_meta(job_id, token, position)))
            await connection.ready
            return connection

        try:
            return await asyncio.wait_for(connect(), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as error:
            for transport in opened:
                transport.abort()
            raise WorkerUnreachable(f"data plane {host}:{port}: {error or type(error).__name__}") from None
        except BaseException:
            for transport in opened:
                transport.abort()
            raise

    def start_round(self, params: Params, iteration: int, timeout: float) -> DataRound:
        """Send a round's input (the parameters in the job's shared input segment when the worker
        shares memory and there is room, else as the ROUND's payload) and return the round."""
        prepared = None if self.shared is None else self.shared[0].round_frames(params, iteration)
        if prepared is None:
            return self.start(params.round_id, round_frames(params, iteration), timeout)
        frames, slot = prepared
        call = self.start(params.round_id, frames, timeout)
        call.holds = slot  # not written again while the round may read it
        return call

    def start(self, round_id: int, frames: Sequence[bytes | memoryview], timeout: float) -> DataRound:
        """Send a round's input (its encoded frames) and return the round.

        Rounds on a connection follow one another: the worker ends the rounds still open when
        the next ROUND arrives, without a DONE (docs/dataplane.md), so they end here too. Those
        are rounds the master stopped; one it still waited for would be a caller's bug, and
        fails rather than waiting for its deadline.
        """
        call = DataRound(self, round_id, timeout)
        if self.broken is not None:
            call.finish(self.broken)
            return call
        for earlier in list(self._rounds.values()):
            earlier.finish(None if earlier.stopping else WorkerCallError("ended by a later round on its connection"))
        self._rounds[round_id] = call
        self.send(frames)
        call.unsent = self.unsent()
        return call

    def stop(self, round_id: int) -> None:
        self.send(encode_frame(Kind.STOP, round_id))

    def have(self, round_id: int, pieces: Sequence[int]) -> None:
        self.send(encode_frame(Kind.HAVE, round_id, have_meta(pieces)))

    def want(self, round_id: int, pieces: Sequence[int]) -> None:
        self.send(encode_frame(Kind.WANT, round_id, have_meta(pieces)))

    def forget(self, round_id: int) -> None:
        self._rounds.pop(round_id, None)

    async def close(self, timeout: float = STOP_GRACE_S) -> None:
        """End the connection: say CLOSE, which stops the rounds still open; the worker closes once
        they have ended (or the master aborts the connection after ``timeout`` seconds)."""
        if self.transport is None or self.transport.is_closing():
            return
        self.send(encode_frame(Kind.CLOSE))
        self._closed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._closed, timeout)
        except asyncio.TimeoutError:
            self.transport.abort()

    # --- frames from the worker ----------------------------------------------------------------------

    def payload_buffer(self, length: int) -> np.ndarray:
        return self._buffers.take((length,), np.dtype(np.uint8))

    def check_header(self, kind: Kind, payload_length: int) -> None:
        if kind not in (Kind.READY, Kind.STAGE, Kind.PART, Kind.DONE, Kind.ERROR):
            raise TensorError(f"a worker does not send {kind.name} frames")
        if payload_length and kind not in (Kind.STAGE, Kind.PART):
            raise TensorError(f"a {kind.name} frame carries no payload (got {payload_length} bytes)")

    def frame_received(self, frame: Frame) -> None:
        kind = frame.kind
        if kind in (Kind.STAGE, Kind.PART):
            layout = STAGE if kind is Kind.STAGE else PART
            if len(frame.meta) < layout.size:
                raise TensorError(f"{kind.name}: metadata shorter than its stage{', piece' * (kind is Kind.PART)} "
                                  "and times")
            fields = layout.unpack_from(frame.meta)
            stage, piece = fields[0], (fields[1] if kind is Kind.PART else None)
            compute, delay = fields[-2:]
            described = memoryview(frame.meta)[layout.size:]
            if frame.shared:
                assert self.shared is not None  # shared_kinds: only once the worker took the offer
                message = parse_shared(described, self.shared[1])
            else:
                message = parse_tensor(described, frame.payload)
            if message.dtype not in MESSAGE_DTYPES:  # which of them a job takes, its runner checks
                raise TensorError(f"{kind.name}: messages are float64 or float32 (got {message.dtype})")
            call = self._rounds.get(frame.round)
            if call is not None:  # else a round given up on (stopped past its grace)
                call.push(StageReply(stage, message, compute, delay, time.perf_counter(), piece, frame.seconds,
                                     0 if frame.shared else frame.payload.size))
        elif kind is Kind.DONE:
            error = status_error(frame.meta)
            call = self._rounds.pop(frame.round, None)
            if call is not None:
                call.finish(error)
        elif kind is Kind.READY:
            if not self.ready.done():
                if self._offered is not None and frame.meta[:1] == READY_SHARED:
                    self.shared = self._offered
                    self.shared_kinds = frozenset({Kind.STAGE, Kind.PART})
                self._offered = None
                self.ready.set_result(None)
        else:  # ERROR (check_header lets nothing else through); the worker closes the connection
            error = status_error(frame.meta)
            if error is None:
                raise TensorError("an ERROR frame with status OK")
            self.fail(error)

    def refuse(self, error: Exception) -> None:
        log.warning("job %s: a worker sent a malformed frame: %s", self.job_id, error)
        self.fail(WorkerCallError(f"the worker sent a malformed frame: {error}"))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._held.connections += 1
        self._held.local += self.local

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._held.connections -= 1
        self._held.local -= self.local
        self._break(WorkerUnreachable(f"the worker ended the connection{f': {exc}' if exc else ''}"))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def fail(self, error: WorkerCallError) -> None:
        """Give the connection up: its rounds fail with ``error``."""
        self._break(error)
        if self.transport is not None:
            self.transport.abort()

    def _break(self, error: WorkerCallError) -> None:
        if self.broken is None:
            self.broken = error
        if not self.ready.done():
            self.ready.set_exception(self.broken)
            self.ready.exception()  # retrieved: whoever awaits it gets it; nobody else must
        rounds, self._rounds = self._rounds, {}
        for call in rounds.values():
            call.finish(self.broken)


class DataRound(ComputeCall):
    """One round on a data-plane connection: the stages as they arrive, then the end.

    :meth:`stop` cuts a straggler off with a STOP frame; the worker ends the round with DONE. A
    worker that has not ended it within STOP_GRACE_S, or before the connection's next round, is
    no longer waited for. An idle worker's round (``stop(idle=True)``) ends at once, without a
    frame: the worker ends it when the next ROUND (or CLOSE) arrives.
    """

    def __init__(self, connection: DataConnection, round_id: int, timeout: float) -> None:
        self._connection = connection
        self._round = round_id
        self._loop = asyncio.get_running_loop()
        self._replies: collections.deque[StageReply] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._stages = 0  # stages received, in order
        self._error: WorkerCallError | None = None
        self._timer = self._loop.call_later(timeout, self._expire, timeout)
        self.unsent = 0  # of its input, still to leave when last looked at (its deadline follows the bytes)
        self.stopping = False
        self.holds: np.ndarray | None = None  # the round's input in shared memory, kept from reuse while under way
        self._on_stage: Listener[StageReply] = Listener()
        self._on_end: Listener[WorkerCallError | None] = Listener()

    def listen(self, on_stage: Callable[[StageReply], None], on_end: Callable[[WorkerCallError | None], None]) -> None:
        if self.stopping:  # a stopped call reports nothing more
            return
        self._on_stage, self._on_end = Listener(on_stage), Listener(on_end)
        while self._replies:
            on_stage(self._replies.popleft())
        if self._ended:
            self._on_end.last(self._error)

    def received_within(self, seconds: float) -> bool:
        return time.perf_counter() - self._connection.received_at <= seconds

    def push(self, reply: StageReply) -> None:
        if reply.stage != self._stages or reply.stage >= MAX_STAGES:
            raise TensorError(f"STAGE: stage {reply.stage} of round {self._round} where stage {self._stages} "
                              f"was due (at most {MAX_STAGES})")
        self._stages += 1
        if self.stopping:
            return
        if self._on_stage.listening:
            self._on_stage(reply)
            return
        self._replies.append(reply)
        self._wake()

    def finish(self, error: WorkerCallError | None) -> None:
        if not self._ended:
            self._ended, self._error = True, error
            self._timer.cancel()
            self._connection.forget(self._round)
            self._on_stage.let_go()
            if self._on_end.listening:
                self._on_end.last(error)
                return
            self._wake()

    def _expire(self, timeout: float) -> None:
        if self.stopping:  # a stopped straggler that never said DONE: no longer waited for
            self.finish(None)
            return
        # The deadline follows the bytes, not the clock alone: a round whose input is still leaving
        # (the write buffer shrank since the last look) or whose reply is still arriving moves on a
        # slow link; it is silent only once nothing moved either way for ``timeout`` seconds.
        idle = time.perf_counter() - self._connection.received_at
        unsent = self._connection.unsent()
        if idle < timeout or unsent < self.unsent:
            self.unsent = unsent
            self._timer = self._loop.call_later(timeout - idle if idle < timeout else timeout, self._expire, timeout)
            return
        # silent past its deadline: dead, or the connection half-open; every round on it fails and
        # the next round opens a new connection
        self._connection.fail(WorkerUnreachable(f"no reply within {timeout:g} s"))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def replies(self) -> AsyncIterator[StageReply]:
        try:
            while True:
                while self._replies:
                    reply = self._replies.popleft()
                    if not self.stopping:
                        yield reply
                if self._ended:
                    if self._error is not None and not self.stopping:
                        raise self._error
                    return
                self._waiter = self._loop.create_future()
                await self._waiter
        finally:
            self._timer.cancel()
            self._connection.forget(self._round)

    def have(self, pieces: Sequence[int]) -> None:
        if not (self.stopping or self._ended):
            self._connection.have(self._round, pieces)

    def want(self, pieces: Sequence[int]) -> None:
        if not (self.stopping or self._ended):
            self._connection.want(self._round, pieces)

    def stop(self, idle: bool = False) -> None:
        if self.stopping or self._ended:
            self.stopping = True
            return
        self.stopping = True
        self._replies.clear()
        self._on_stage.let_go()
        self._on_end.let_go()
        if idle:  # nothing to cut off: no STOP, no DONE to wait for; the next ROUND ends it
            self.finish(None)
            return
        self._timer.cancel()
        self._timer = self._loop.call_later(STOP_GRACE_S, self._expire, STOP_GRACE_S)
        self._connection.stop(self._round)
