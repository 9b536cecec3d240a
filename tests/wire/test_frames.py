"""The data plane's frames (docs/dataplane.md): encoding, reassembly from any split of the byte
stream (small frames from the staging buffer, large payloads straight into their arrays), and
refusal of malformed or oversized frames before their payload is read."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from coded.base.errors import TooLarge
from coded.wire.frames import (
    DTYPES,
    HEADER,
    MAX_MESSAGE,
    VERSION,
    Frame,
    Kind,
    encode_frame,
    parse_status,
    parse_tensor,
    status_meta,
    tensor_meta,
)
from coded.wire.protocol import STAGING_BYTES, FrameProtocol
from coded.wire.status import Status
from coded.wire.tensor import TensorError


class Recorder(FrameProtocol):
    """A receiving end that keeps what arrives."""

    def __init__(self, max_payload: int = 1 << 30) -> None:
        super().__init__(max_payload)
        self.frames: list[Frame] = []
        self.refused: list[Exception] = []

    def frame_received(self, frame: Frame) -> None:
        self.frames.append(frame)

    def refuse(self, error: Exception) -> None:
        self.refused.append(error)


def feed(protocol: FrameProtocol, data: bytes, cuts: list[int]) -> None:
    """Deliver ``data`` through get_buffer/buffer_updated in pieces ending at ``cuts`` (and never
    more than the buffer the protocol offers, as a transport would)."""
    position = 0
    for end in [*sorted(set(cuts)), len(data)]:
        while position < end:
            buffer = protocol.get_buffer(-1)
            size = min(len(buffer), end - position)
            buffer[:size] = data[position:position + size]
            protocol.buffer_updated(size)
            position += size


def wire(*frames: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(part) for frame in frames for part in frame)


arrays = st.sampled_from(sorted(DTYPES.values(), key=str)).flatmap(
    lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9)))


@given(array=arrays)
def test_a_tensor_round_trips_through_its_descriptor(array):
    payload = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8).copy()
    back = parse_tensor(tensor_meta(array), payload)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_big_endian_arrays_travel_little_endian():
    array = np.arange(6, dtype=">f8").reshape(2, 3)
    parts = encode_frame(Kind.STAGE, 5, tensor_meta(array), array)
    protocol = Recorder()
    feed(protocol, wire(parts), [])
    frame = protocol.frames[0]
    np.testing.assert_array_equal(parse_tensor(frame.meta, frame.payload), array)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=6), data=st.data())
def test_frames_reassemble_from_any_split_of_the_stream(sizes, data):
    arrays_sent = [np.arange(size, dtype=np.float64) * (index + 1) for index, size in enumerate(sizes)]
    stream = wire(*(encode_frame(Kind.STAGE, index + 1, tensor_meta(a), a) for index, a in enumerate(arrays_sent)))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    protocol = Recorder()
    feed(protocol, stream, cuts)
    assert not protocol.refused
    assert [f.round for f in protocol.frames] == list(range(1, len(sizes) + 1))
    for frame, sent in zip(protocol.frames, arrays_sent, strict=True):
        np.testing.assert_array_equal(parse_tensor(frame.meta, frame.payload), sent)


def test_a_payload_larger_than_the_staging_buffer_arrives_whole_after_small_frames():
    big = np.random.default_rng(0).standard_normal(3 * STAGING_BYTES // 8 + 11)
    small = np.arange(4.0)
    stream = wire(encode_frame(Kind.STAGE, 1, tensor_meta(small), small),
                  encode_frame(Kind.STAGE, 2, tensor_meta(big), big),
                  encode_frame(Kind.DONE, 2, struct.pack("<I", 0)))
    protocol = Recorder()
    feed(protocol, stream, list(range(0, len(stream), 70_001)))
    assert [(f.kind, f.round) for f in protocol.frames] == [(Kind.STAGE, 1), (Kind.STAGE, 2), (Kind.DONE, 2)]
    np.testing.assert_array_equal(parse_tensor(protocol.frames[1].meta, protocol.frames[1].payload), big)


@pytest.mark.parametrize(("header", "message"), [
    (HEADER.pack(b"XX", VERSION, Kind.ROUND, 0, 1, 0), "not a data-plane frame"),
    (HEADER.pack(b"CD", 2, Kind.ROUND, 0, 1, 0), "version 3"),  # version 2 waited for a STOP after each round
    (HEADER.pack(b"CD", VERSION, 99, 0, 1, 0), "unknown frame kind 99"),
    (HEADER.pack(b"CD", VERSION, Kind.ROUND, 1 << 20, 1, 0), "metadata of 1048576 bytes"),
])
def test_malformed_headers_are_refused_naming_the_problem(header, message):
    protocol = Recorder()
    feed(protocol, header + bytes(64), [])
    assert not protocol.frames and len(protocol.refused) == 1
    assert isinstance(protocol.refused[0], TensorError) and message in str(protocol.refused[0])


def test_an_oversized_payload_is_refused_before_it_is_read():
    protocol = Recorder(max_payload=1000)
    feed(protocol, HEADER.pack(b"CD", VERSION, Kind.ROUND, 0, 1, 10**12), [])  # 1 TB announced, nothing sent
    assert isinstance(protocol.refused[0], TooLarge) and "exceeds this side's limit of 1000" in str(protocol.refused[0])


@pytest.mark.parametrize("status", list(Status))
def test_a_status_and_its_message_survive_their_metadata(status):
    assert parse_status(status_meta(status, "wrong: é")) == (status, "wrong: é")


def test_a_status_message_is_cut_at_a_character_boundary_and_an_unknown_status_is_refused():
    status, message = parse_status(status_meta(Status.INVALID_ARGUMENT, "é" * MAX_MESSAGE))
    assert status is Status.INVALID_ARGUMENT and message == "é" * (MAX_MESSAGE // 2)
    with pytest.raises(TensorError, match="unknown status 99"):
        parse_status(struct.pack("<I", 99))
    with pytest.raises(TensorError, match="without its code"):
        parse_status(b"\x00")


@pytest.mark.parametrize(("descriptor", "payload", "message"), [
    (b"\x09\x01" + struct.pack("<Q", 1), 8, "unknown dtype code 9"),
    (b"\x01\x02" + struct.pack("<Q", 1), 8, "does not hold 2 dimensions"),
    (b"\x01\x01" + struct.pack("<Q", 3), 16, "is not the payload's 16 bytes"),
    (b"\x01\x09" + struct.pack("<9Q", *[1] * 9), 8, "at most 8"),
    (b"\x01", 8, "at least 2 bytes"),
])
def test_malformed_descriptors_are_refused(descriptor, payload, message):
    with pytest.raises(TensorError, match=message):
        parse_tensor(descriptor, np.zeros(payload, np.uint8))


def test_object_and_complex_arrays_have_no_code():
    with pytest.raises(TensorError, match="has no code"):
        tensor_meta(np.zeros(2, np.complex128))
