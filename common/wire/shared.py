"""Shared memory between a master and a worker on one host: the arrays of the data plane's rounds
written once and read where they lie (docs/dataplane.md, "Shared memory").

On one host a round's bytes would otherwise cross the kernel twice per worker each way (the
sender's write and the receiver's read, each a copy of the whole array), and the master would
write the same parameters to every worker. Here the master writes each round's parameters once
into the job's *input* segment, which every local worker reads where it lies, and each worker
computes its message straight into its connection's *reply* segment, which the master decodes
from where it lies. The frames on the socket then carry only where the array is.

A :class:`Segment` is a Linux ``memfd`` (anonymous shared memory: no file in /dev/shm, nothing left
behind by a process killed at any moment; the memory goes when the last process holding it
does), sealed against shrinking and growing so that no access to it can fault, passed over the
worker's local Unix socket as a file descriptor (SCM_RIGHTS) before anything else is said. The
master seals its input segments against new writable mappings too: workers map them read-only.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import socket
import sys
from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_SEGMENT", "OFFER", "Segment", "SharedMemoryError", "available", "receive_offer", "send_offer"]

#: the first byte a master sends on a worker's local socket when it offers shared memory, with
#: the segments' file descriptors attached (a frame starts with b"C", a TLS handshake with 0x16)
OFFER = b"S"
#: the largest segment either side maps: address space, not memory (pages exist once written)
MAX_SEGMENT = 1 << 32
#: where slots start within a segment: every dtype's alignment, and a cache line
ALIGNMENT = 64
#: arrays a segment remembers having made (a round's reads name the same slots each time)
MAX_VIEWS = 1024

_SEAL_FUTURE_WRITE = 0x0010  # linux/fcntl.h; Python's fcntl does not name it
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL if hasattr(fcntl, "F_SEAL_SHRINK") else 0


class SharedMemoryError(Exception):
    """A segment that cannot be made, passed or used safely: the link uses its socket instead."""


def available() -> bool:
    """Whether this system has sealed memfds and descriptor passing (Linux)."""
    return (sys.platform.startswith("linux") and hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
            and bool(_SEALS))


class Segment:
    """A mapped memfd: arrays are carved out of it and viewed in it.

    Made by :meth:`create` (the master's side: read-write) or :meth:`attach` (a received
    descriptor, mapped as the segment's seals allow). Carving hands out aligned ranges from the
    start, never freed (a :class:`coded.wire.buffers.BufferPool` reuses them); pages cost memory
    only once written.
    """

    def __init__(self, fd: int, size: int, writable: bool) -> None:
        self.size = size
        self.writable = writable
        self._fd = -1
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED,
                              mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        self._fd = fd  # kept open while the segment may still be passed to another connection
        self._bytes = np.frombuffer(self._map, np.uint8)
        self._used = 0
        self._views: dict[tuple[int, tuple[int, ...], np.dtype], np.ndarray] = {}  # what array() made

    @classmethod
    def create(cls, name: str, size: int, read_only_for_others: bool = False) -> Segment:
        """A new segment of ``size`` bytes, sealed against shrinking and growing (and, with
        ``read_only_for_others``, against any writable mapping but this one).

        Raises
        ------
        SharedMemoryError
            When the system has no sealed memfds, or refuses one of this size.
        """
        if not available():
            raise SharedMemoryError("shared memory needs Linux's sealed memfds")
        try:
            fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError as error:
            raise SharedMemoryError(f"memfd_create: {error}") from None
        try:
            os.ftruncate(fd, size)
            segment = cls(fd, size, writable=True)
            seals = _SEALS | (_SEAL_FUTURE_WRITE if read_only_for_others else 0)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        except (OSError, ValueError) as error:
            os.close(fd)
            raise SharedMemoryError(f"a shared segment of {size} bytes: {error}") from None
        return segment

    @classmethod
    def attach(cls, fd: int, writable: bool) -> Segment:
        """Map a received segment; it takes ``fd`` over (closed if it is refused).

        Raises
        ------
        SharedMemoryError
            When it is not sealed against shrinking and growing (a peer could make an access
            fault), larger than MAX_SEGMENT, or cannot be mapped as asked.
        """
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            size = os.fstat(fd).st_size
            if seals & _SEALS != _SEALS:
                raise SharedMemoryError("a segment must be sealed against shrinking, growing and new seals")
            if not 0 < size <= MAX_SEGMENT:
                raise SharedMemoryError(f"a segment of {size} bytes (at most {MAX_SEGMENT})")
            segment = cls(fd, size, writable)
            segment.close()  # its mapping holds the memory: the descriptor is not passed on
            return segment
        except (OSError, ValueError) as error:
            os.close(fd)
            raise SharedMemoryError(f"cannot map the segment: {error}") from None
        except SharedMemoryError:
            os.close(fd)
            raise

    @property
    def fd(self) -> int:
        """Its descriptor, to pass to a peer (-1 once closed: a received segment's is at once)."""
        return self._fd

    def close(self) -> None:
        """Close its descriptor; the mapping goes with the last array viewing it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()

    def carve(self, nbytes: int) -> np.ndarray | None:
        """``nbytes`` bytes of the segment not handed out before (uint8); None when it is full
        (or read-only)."""
        start = -(-self._used // ALIGNMENT) * ALIGNMENT
        if not self.writable or start + nbytes > self.size:
            return None
        self._used = start + nbytes
        # an array of its own over the mapping (not a view of another array): views of it refer to
        # it, so whoever holds one holds it (coded.wire.buffers reuses what nobody holds)
        return np.frombuffer(self._map, np.uint8, count=nbytes, offset=start)

    def offset(self, array: np.ndarray) -> int | None:
        """Where ``array`` starts in this segment; None when it does not lie wholly in it."""
        if not array.flags.c_contiguous:
            return None
        begin = array.__array_interface__["data"][0] - self._bytes.__array_interface__["data"][0]
        if begin < 0 or begin + array.nbytes > self.size:
            return None
        return begin

    def array(self, offset: int, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
        """The array of ``shape`` and ``dtype`` at ``offset``: what the other side wrote there (a
        read-only view, no copy).

        Raises
        ------
        SharedMemoryError
            When it does not lie within the segment or is not aligned to its dtype.
        """
        key = (offset, tuple(shape), dtype)
        view = self._views.get(key)  # rounds name the same few slots again and again
        if view is not None:
            return view
        nbytes = math.prod(shape) * dtype.itemsize
        if offset % dtype.alignment or offset < 0 or offset + nbytes > self.size:
            raise SharedMemoryError(f"{nbytes} bytes at offset {offset} do not lie aligned within a segment of "
                                    f"{self.size} bytes")
        view = self._bytes[offset:offset + nbytes].view(dtype).reshape(key[1])
        view.flags.writeable = False  # what the other side wrote, to read
        if len(self._views) >= MAX_VIEWS:
            self._views.clear()
        self._views[key] = view
        return view


def send_offer(sock: socket.socket, segments: Sequence[Segment]) -> None:
    """Offer ``segments`` on a connected local socket: the byte OFFER with their descriptors
    attached, before anything else is sent on it."""
    socket.send_fds(sock, [OFFER], [segment.fd for segment in segments])


def receive_offer(sock: socket.socket, count: int) -> list[int] | None:
    """What a connecting master sent first on a local socket that has bytes to read: the
    descriptors of an offer (consumed), or None when its first byte is not OFFER (left unread).

    Raises
    ------
    SharedMemoryError
        For an offer of another number of descriptors.
    """
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return None
    if first != OFFER:
        return None
    _data, fds, _flags, _address = socket.recv_fds(sock, 1, count, socket.MSG_CMSG_CLOEXEC)
    if len(fds) != count:
        for fd in fds:
            os.close(fd)
        raise SharedMemoryError(f"an offer of {len(fds)} segments (a master offers {count})")
    return fds
