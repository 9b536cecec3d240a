"""Shared segments (coded.wire.shared): made sealed, passed over a Unix socket, mapped as their
seals allow, and arrays in them named by offset, never outside."""

from __future__ import annotations

import mmap
import os
import socket

import numpy as np
import pytest

from coded.wire.buffers import BufferPool
from coded.wire.shared import OFFER, Segment, SharedMemoryError, available, receive_offer, send_offer

pytestmark = pytest.mark.skipif(not available(), reason="sealed memfds and descriptor passing are Linux's")


def passed(*segments: Segment) -> list[int]:
    """The segments' descriptors as a peer receives them over a local socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        send_offer(ours, segments)
        fds = receive_offer(theirs, len(segments))
    assert fds is not None
    return fds


def test_an_array_written_on_one_side_is_read_where_it_lies_on_the_other():
    segment = Segment.create("test", 1 << 20)
    fd = passed(segment)[0]
    peer = Segment.attach(fd, writable=True)
    written = peer.carve(80).view(np.float64)
    written[:] = np.arange(10.0)
    offset = peer.offset(written)
    read = segment.array(offset, (10,), np.dtype("<f8"))
    np.testing.assert_array_equal(read, np.arange(10.0))
    written[3] = -1.0  # the same memory, not a copy
    assert read[3] == -1.0
    with pytest.raises(ValueError, match="read-only"):
        read[0] = 5.0  # what the other side wrote is only read


def test_an_input_segment_is_read_only_for_the_peer():
    """F_SEAL_FUTURE_WRITE: the master writes its parameters; a worker can map them only to read."""
    segment = Segment.create("input", 1 << 16, read_only_for_others=True)
    segment.carve(8).view(np.float64)[0] = 2.5  # the creator's own mapping still writes
    fd = passed(segment)[0]
    with pytest.raises(SharedMemoryError, match="cannot map"):
        Segment.attach(os.dup(fd), writable=True)
    peer = Segment.attach(fd, writable=False)
    assert peer.array(0, (1,), np.dtype("<f8"))[0] == 2.5
    assert peer.carve(8) is None  # nothing to hand out of a segment it cannot write
    with pytest.raises(PermissionError):  # nor through the descriptor it was passed
        mmap.mmap(passed(segment)[0], 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


def test_a_segment_that_could_shrink_under_its_mapping_is_refused():
    """An access past a truncated file faults (SIGBUS): a segment must be sealed against it."""
    fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    with pytest.raises(SharedMemoryError, match="sealed against shrinking"):
        Segment.attach(fd, writable=True)


@pytest.mark.parametrize(("offset", "shape"), [(1 << 20, (1,)), ((1 << 20) - 8, (2,)), (4, (1,)), (-8, (1,))])
def test_an_array_outside_the_segment_or_misaligned_is_refused(offset, shape):
    segment = Segment.create("bounds", 1 << 20)
    with pytest.raises(SharedMemoryError, match="do not lie aligned within a segment"):
        segment.array(offset, shape, np.dtype("<f8"))


def test_a_first_byte_that_is_no_offer_is_left_for_the_connection():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        ours.sendall(b"CD\x03")  # a frame's first bytes
        assert receive_offer(theirs, 2) is None
        assert theirs.recv(3) == b"CD\x03"
    assert OFFER != b"C"


def test_an_offer_of_another_number_of_segments_is_refused():
    segment = Segment.create("one", 4096)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        send_offer(ours, [segment])
        with pytest.raises(SharedMemoryError, match="an offer of 1 segments"):
            receive_offer(theirs, 2)


def test_carved_slots_are_reused_once_nothing_holds_them_and_never_while_a_view_does():
    segment = Segment.create("pool", 1 << 20)
    pool = BufferPool(carve=segment.carve)
    first = pool.take((10,), np.dtype(np.float64))
    view = first[2:]
    del first
    second = pool.take((10,), np.dtype(np.float64))
    assert not np.shares_memory(view, second)
    del view, second
    again = pool.take((10,), np.dtype(np.float64))
    assert segment.offset(again) == 0  # the first slot, free again
    assert pool.held == 2 * 80


def test_a_full_segment_hands_out_process_memory():
    segment = Segment.create("small", 128)
    pool = BufferPool(carve=segment.carve)
    inside = pool.take((16,), np.dtype(np.float64))
    outside = pool.take((16,), np.dtype(np.float64))
    assert segment.offset(inside) == 0 and segment.offset(outside) is None
