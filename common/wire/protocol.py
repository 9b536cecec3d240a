"""A data-plane connection's frames received into buffers it owns, and sent (coded.wire.frames has
the frames themselves).

Small frames are parsed out of one staging buffer; a payload larger than that buffer is received
straight into its own array (no copy after the kernel's), which a side may take from arrays it
reuses (:meth:`FrameProtocol.payload_buffer`). A malformed frame ends the connection through
:meth:`FrameProtocol.refuse`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Sequence
from typing import cast

import numpy as np

from coded.base.errors import TooLarge
from coded.wire.frames import HEADER, KINDS, MAGIC, MAX_META, SHARED, VERSION, Frame, Kind
from coded.wire.tensor import TensorError

__all__ = ["STAGING_BYTES", "FrameProtocol"]

#: receive buffer for small frames; a payload that does not fit is received straight into its array
STAGING_BYTES = 1 << 18
_NO_PAYLOAD = np.empty(0, np.uint8)
_NO_PAYLOAD.flags.writeable = False


class FrameProtocol(asyncio.BufferedProtocol):
    """Receives frames into buffers it owns and hands each to :meth:`frame_received`.

    Small frames are parsed out of one staging buffer; a payload larger than that buffer is
    received straight into its own array (no copy after the kernel's). A malformed frame ends the
    connection through :meth:`refuse`.

    Parameters
    ----------
    max_payload : int
        Largest payload accepted, in bytes; a longer frame is refused before its payload is read.
    """

    def __init__(self, max_payload: int) -> None:
        self.max_payload = max_payload
        self.transport: asyncio.Transport | None = None
        self._staging = bytearray(STAGING_BYTES)
        self._view = memoryview(self._staging)
        self._start = 0  # first unparsed byte in the staging buffer
        self._end = 0    # end of the received bytes in it
        self._large: np.ndarray | None = None  # the payload being received straight into its array
        self._large_got = 0
        self._pending: tuple[Kind, int, bytes] | None = None  # the header and meta of that payload
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self._since = 0.0  # time.perf_counter() of the read that brought the first bytes of the frame at _start
        self.received_at = 0.0  # time.perf_counter() of the last read: a peer still sending is alive

    # --- what a side fills in ----------------------------------------------------------------------

    def frame_received(self, frame: Frame) -> None:
        raise NotImplementedError

    def refuse(self, error: Exception) -> None:
        """A malformed frame arrived: the side reports and ends the connection."""
        raise NotImplementedError

    #: kinds this side takes as SHARED frames (those its peer may put in shared memory, once the
    #: connection shares memory)
    shared_kinds: frozenset[Kind] = frozenset()

    def check_header(self, kind: Kind, payload_length: int) -> None:
        """Raise TensorError for a frame this side never takes, before a byte of its payload is
        read or buffered (the kinds it receives and which of them carry payloads)."""

    def payload_buffer(self, length: int) -> np.ndarray:
        """The array a payload of ``length`` bytes is received into (uint8, owned by the frame
        from then on): a new one, unless a side reuses its arrays (coded.wire.buffers)."""
        return np.empty(length, np.uint8)

    # --- sending -------------------------------------------------------------------------------------

    def send(self, buffers: Sequence[bytes | memoryview]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(buffers)

    def unsent(self) -> int:
        """Bytes written that the kernel has not taken yet (the transport's write buffer): while
        they shrink, a slow link is moving them."""
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    @property
    def paused(self) -> bool:
        """Whether the transport's write buffer is above its high-water mark (:meth:`drain` waits)."""
        return self._paused

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark (a large message
        is not queued on top of another). Every waiter of the connection waits for the same
        resumption."""
        if self._paused and self.transport is not None and not self.transport.is_closing():
            if self._drained is None or self._drained.done():
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)

    # --- receiving -----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        with contextlib.suppress(OSError, AttributeError):  # small frames leave at once
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return self._large.data[self._large_got:]
        if self._end == len(self._staging):  # full: move the unparsed tail to the front
            self._compact()
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        now = self.received_at = time.perf_counter()
        if self._large is not None:
            self._large_got += nbytes
            if self._large_got == self._large.nbytes:
                assert self._pending is not None
                kind, round_id, meta = self._pending
                payload, self._large, self._pending = self._large, None, None
                self._deliver(Frame(kind, round_id, meta, payload, now - self._since))
            return
        if self._start == self._end:  # a new frame starts in this read
            self._since = now
        self._end += nbytes
        try:
            self._parse(now)
        except (TensorError, TooLarge) as error:
            self._start = self._end = 0
            self.refuse(error)

    def _parse(self, now: float) -> None:
        view, size = self._view, HEADER.size
        while self._end - self._start >= size:
            magic, version, kind, meta_length, round_id, payload_length = HEADER.unpack_from(view, self._start)
            if magic != MAGIC or version != VERSION:
                raise TensorError(f"not a data-plane frame of version {VERSION} (magic {bytes(magic)!r}, "
                                  f"version {version})")
            frame_kind = KINDS.get(kind & ~SHARED)  # one lookup per frame: Kind(kind) costs an enum call
            if frame_kind is None:
                raise TensorError(f"unknown frame kind {kind}")
            shared = bool(kind & SHARED)
            if shared and (frame_kind not in self.shared_kinds or payload_length):
                raise TensorError(f"a {frame_kind.name} frame in shared memory, which "
                                  + ("carries no payload" if frame_kind in self.shared_kinds
                                     else "this connection does not take"))
            if meta_length > MAX_META:
                raise TensorError(f"frame metadata of {meta_length} bytes (at most {MAX_META})")
            if payload_length > self.max_payload:
                raise TooLarge(f"a frame of {payload_length} payload bytes exceeds this side's limit of "
                               f"{self.max_payload}")
            self.check_header(frame_kind, payload_length)
            body = self._start + size
            length = size + meta_length + payload_length
            if self._end - self._start >= length:
                meta = bytes(view[body:body + meta_length])
                data = body + meta_length
                if payload_length:
                    payload = self.payload_buffer(payload_length)
                    payload[:] = np.frombuffer(view[data:data + payload_length], np.uint8)
                else:
                    payload = _NO_PAYLOAD
                self._start += length
                self._deliver(Frame(frame_kind, round_id, meta, payload, now - self._since, shared))
                if self.transport is not None and self.transport.is_closing():
                    return  # refused: what follows is not read
                self._since = now  # the next frame's first bytes came with this read (or just before)
                continue
            if length > len(self._staging) and self._end - body >= meta_length:
                # a large payload: its own array, receiving the rest straight into it
                data = body + meta_length
                self._large = self.payload_buffer(payload_length)
                self._large[:self._end - data] = np.frombuffer(view[data:self._end], np.uint8)
                self._large_got = self._end - data
                self._pending = (frame_kind, round_id, bytes(view[body:data]))
                self._start = self._end = 0
                return
            if self._start + min(length, size + meta_length) > len(self._staging):
                self._compact()  # make room for the rest of the frame (or of its metadata)
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _compact(self) -> None:
        tail = self._end - self._start
        self._view[:tail] = self._view[self._start:self._end]
        self._start, self._end = 0, tail

    def _deliver(self, frame: Frame) -> None:
        try:
            self.frame_received(frame)
        except (TensorError, TooLarge) as error:  # the frame's fault; anything else is this side's bug
            self.refuse(error)
