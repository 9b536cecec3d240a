"""The data plane's frames: a job's rounds between the master and one worker over TCP (or TLS).

Rounds are the hot path of every job: a parameter vector out to each worker, an encoded message
back, every iteration. Over gRPC one such round trip costs 3x a framed message on a plain TCP
connection (bench/transport.py), so rounds travel as the frames defined here and the control calls
(assign, upload, release, registration) stay on gRPC. docs/dataplane.md is the specification
for other implementations; this module is the reference.

A frame is a 24-byte header, a metadata block and a payload::

    offset size  field
    0      2     magic b"CD"
    2      1     version (3)
    3      1     kind (:class:`Kind`)
    4      4     meta_length: bytes of metadata after the header (<= MAX_META)
    8      8     round: the round the frame belongs to (0 on connection-level frames)
    16     8     payload_length: bytes of payload after the metadata

all little-endian. A payload is a tensor's raw C-order bytes; the metadata of a frame with a
payload ends with the tensor's descriptor (:func:`tensor_meta`). Frames are not chunked: a
receiver refuses a frame longer than its limit before reading its payload (coded.wire.protocol
receives and sends them on a connection). On a connection that
shares memory (coded.wire.shared), a ROUND, STAGE or PART may carry its tensor there instead:
its kind has bit 7 (SHARED) set, it has no payload, and the descriptor is followed by the u64
offset of the tensor in the sender's segment (:func:`shared_meta`).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from enum import IntEnum

import numpy as np

from coded.wire.shared import Segment, SharedMemoryError
from coded.wire.status import Status
from coded.wire.tensor import TensorError

__all__ = [
    "HEADER",
    "ITERATION",
    "KINDS",
    "MAGIC",
    "MAX_MESSAGE",
    "MAX_META",
    "PART",
    "SHARED",
    "STAGE",
    "STATUS",
    "VERSION",
    "Frame",
    "Kind",
    "encode_frame",
    "have_meta",
    "hello_meta",
    "parse_have",
    "parse_hello",
    "parse_shared",
    "parse_status",
    "parse_tensor",
    "shared_meta",
    "status_meta",
    "tensor_meta",
]

MAGIC = b"CD"
#: 3 since a ROUND ends the connection's earlier rounds without a DONE (a worker of version 2
#: would keep them open, waiting for a STOP that no longer comes); 2 since DONE and ERROR carry
#: the data plane's own statuses (coded.wire.status): version 1 sent gRPC's numbers
VERSION = 3
HEADER = struct.Struct("<2sBBIQQ")
#: metadata is small (ids, numbers, an error message): more is a malformed frame
MAX_META = 1 << 16
MAX_NDIM = 8

#: dtype codes of the tensor descriptor (numpy little-endian dtypes)
DTYPES: dict[int, np.dtype] = {1: np.dtype("<f8"), 2: np.dtype("<f4"), 3: np.dtype("<i8"), 4: np.dtype("<i4")}
_CODE_OF = {dtype: code for code, dtype in DTYPES.items()}
_DESCRIPTOR = struct.Struct("<BB")
_POSITION = struct.Struct("<i")


class Kind(IntEnum):
    """What a frame is. Master to worker: HELLO, ROUND, STOP, CLOSE, HAVE, WANT; worker to master:
    READY, STAGE, PART, DONE, ERROR."""

    HELLO = 1   # meta: u16 length + job id, u16 length + token (UTF-8; empty without one), i32 position
    READY = 2   # the hello was accepted; rounds may follow
    ROUND = 3   # meta: i64 iteration + tensor descriptor; payload: the round's input
    STOP = 4    # stop round `round` (ignored when it is not computing)
    STAGE = 5   # meta: u32 stage, f64 compute seconds, f64 injected delay seconds + descriptor
    DONE = 6    # round `round` ended; meta: u32 Status (OK = completed or stopped) + UTF-8 message
    ERROR = 7   # the connection ends; meta: u32 Status + UTF-8 message
    CLOSE = 8   # no more rounds: the worker closes once the rounds under way have ended
    PART = 9    # a streamed piece: meta: u32 stage, u32 piece, f64 compute s, f64 delay s + descriptor
    HAVE = 10   # round `round`: the master has these pieces; meta: u32 count, then count u32 pieces
    WANT = 11   # round `round`: compute these pieces next, in order; meta as HAVE's


#: each kind by its number (one lookup per frame: Kind(kind) costs an enum call)
KINDS: dict[int, Kind] = {kind.value: kind for kind in Kind}
#: bit 7 of a frame's kind: its tensor lies in the sender's shared segment, at the u64 offset after
#: the descriptor, and the frame carries no payload (docs/dataplane.md, "Shared memory")
SHARED = 0x80
_OFFSET = struct.Struct("<Q")
#: READY's metadata from a worker that took a master's offer of shared memory: u8 flags, bit 0 set
READY_SHARED = b"\x01"

#: metadata layouts: ROUND's iteration, STAGE's stage and times, DONE's and ERROR's status
ITERATION = struct.Struct("<q")
STAGE = struct.Struct("<Idd")
PART = struct.Struct("<IIdd")
_COUNT = struct.Struct("<I")
STATUS = struct.Struct("<I")
_LENGTH = struct.Struct("<H")
#: the longest error message a status carries, in bytes (cut at a character boundary)
MAX_MESSAGE = 4096


def hello_meta(job_id: str, token: str | None, position: int) -> bytes:
    """HELLO's metadata: u16 length + job id, u16 length + token (UTF-8), i32 the worker's position."""
    job, secret = job_id.encode(), (token or "").encode()
    return _LENGTH.pack(len(job)) + job + _LENGTH.pack(len(secret)) + secret + _POSITION.pack(position)


def parse_hello(meta: bytes) -> tuple[str, str, int]:
    """Job id, token and position of a HELLO frame's metadata.

    Raises
    ------
    TensorError
        When the metadata is not that layout, or the job id is not 1 to 128 bytes.
    """
    fields, offset = [], 0
    for name in ("job id", "token"):
        if offset + _LENGTH.size > len(meta):
            raise TensorError(f"HELLO: missing the {name}")
        (length,) = _LENGTH.unpack_from(meta, offset)
        offset += _LENGTH.size
        if offset + length > len(meta):
            raise TensorError(f"HELLO: the {name} is cut short")
        if name == "job id" and not 1 <= length <= 128:
            raise TensorError(f"HELLO: a job id of 1 to 128 bytes (got {length})")
        try:
            fields.append(meta[offset:offset + length].decode())
        except UnicodeDecodeError:
            raise TensorError(f"HELLO: the {name} is not UTF-8") from None
        offset += length
    if len(meta) - offset != _POSITION.size:
        raise TensorError(f"HELLO: {len(meta) - offset} bytes after the token (the position takes 4)")
    (position,) = _POSITION.unpack_from(meta, offset)
    return fields[0], fields[1], position


def have_meta(pieces: Sequence[int]) -> bytes:
    """HAVE's (and WANT's) metadata: u32 count, then the pieces as u32."""
    return _COUNT.pack(len(pieces)) + struct.pack(f"<{len(pieces)}I", *pieces)


def parse_have(meta: bytes, kind: str = "HAVE") -> tuple[int, ...]:
    """The pieces of a HAVE (or WANT) frame's metadata; ``kind`` names the frame in the error.

    Raises
    ------
    TensorError
        When the metadata is not a count and that many u32.
    """
    if len(meta) < _COUNT.size:
        raise TensorError(f"{kind}: missing its count")
    (count,) = _COUNT.unpack_from(meta)
    if len(meta) != _COUNT.size + 4 * count:
        raise TensorError(f"{kind}: {len(meta) - _COUNT.size} bytes for {count} pieces")
    return struct.unpack_from(f"<{count}I", meta, _COUNT.size)


def status_meta(status: Status, message: str = "") -> bytes:
    """DONE's and ERROR's metadata: u32 status, then the message (UTF-8, at most MAX_MESSAGE
    bytes, cut at a character boundary)."""
    data = message.encode()[:MAX_MESSAGE].decode(errors="ignore").encode()
    return STATUS.pack(status) + data


def parse_status(meta: bytes) -> tuple[Status, str]:
    """Status and message of DONE's or ERROR's metadata.

    Raises
    ------
    TensorError
        When the metadata is shorter than a status, or its number is no :class:`Status`.
    """
    if len(meta) < STATUS.size:
        raise TensorError("a status frame without its code")
    (code,) = STATUS.unpack_from(meta)
    status = Status.parse(code)
    if status is None:
        raise TensorError(f"unknown status {code}")
    return status, meta[STATUS.size:].decode(errors="replace")


class Frame:
    """One received frame: ``payload`` is a uint8 array of ``payload_length`` bytes (owned);
    ``seconds`` from the read that brought its first bytes to the one that completed it (0 when
    one read brought it all): how long it took to cross the link, for a frame large beside the
    link's rate. ``shared``: its tensor lies in shared memory (:func:`parse_shared`)."""

    __slots__ = ("kind", "meta", "payload", "round", "seconds", "shared")

    def __init__(self, kind: Kind, round_id: int, meta: bytes, payload: np.ndarray, seconds: float = 0.0,
                 shared: bool = False) -> None:
        self.kind = kind
        self.round = round_id
        self.meta = meta
        self.payload = payload
        self.seconds = seconds
        self.shared = shared


def _little(array: np.ndarray) -> np.ndarray:
    """``array`` C-contiguous and little-endian (a copy only when it is not already)."""
    if array.dtype.byteorder != ">" and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))


def tensor_meta(array: np.ndarray) -> bytes:
    """The descriptor of ``array``: u8 dtype code, u8 ndim, then ndim u64 dimensions."""
    return _descriptor(array.dtype, array.shape)


# Rounds describe the same few tensors again and again, and building a descriptor took longer
# than the rest of a frame does with the caches cold, as a worker's are after the others ran
# (20-30 us against 4-8 us to copy the payload of a 101-float message; issue 23).
@functools.lru_cache(maxsize=256)
def _descriptor(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    code = _CODE_OF.get(dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype)  # sent little-endian
    if code is None:
        raise TensorError(f"dtype {dtype} has no code on the data plane (codes: "
                          f"{', '.join(f'{c}={d.str}' for c, d in DTYPES.items())})")
    return _DESCRIPTOR.pack(code, len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)


def _described(descriptor: bytes | memoryview) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape of a tensor descriptor.

    Raises
    ------
    TensorError
        When the descriptor is malformed.
    """
    if len(descriptor) < _DESCRIPTOR.size:
        raise TensorError("a tensor descriptor needs at least 2 bytes")
    code, ndim = _DESCRIPTOR.unpack_from(descriptor)
    dtype = DTYPES.get(code)
    if dtype is None:
        raise TensorError(f"unknown dtype code {code} (codes: {', '.join(map(str, DTYPES))})")
    if ndim > MAX_NDIM or len(descriptor) != _DESCRIPTOR.size + 8 * ndim:
        raise TensorError(f"a tensor descriptor of {len(descriptor)} bytes does not hold {ndim} dimensions "
                          f"(at most {MAX_NDIM})")
    return dtype, struct.unpack_from(f"<{ndim}Q", descriptor, _DESCRIPTOR.size)


def parse_tensor(descriptor: bytes | memoryview, payload: np.ndarray) -> np.ndarray:
    """The array a descriptor and a payload stand for (a view of the payload, no copy).

    Raises
    ------
    TensorError
        When the descriptor is malformed or does not fit the payload's length.
    """
    dtype, shape = _described(descriptor)
    if math.prod(shape) * dtype.itemsize != payload.nbytes:
        raise TensorError(f"shape {list(shape)} of {dtype.str} is not the payload's {payload.nbytes} bytes")
    return payload.view(dtype).reshape(shape)


def shared_meta(array: np.ndarray, offset: int) -> bytes:
    """The end of a SHARED frame's metadata: ``array``'s descriptor and its u64 offset in the segment."""
    return tensor_meta(array) + _OFFSET.pack(offset)


def parse_shared(described: bytes | memoryview, segment: Segment) -> np.ndarray:
    """The array a SHARED frame's descriptor and offset name in ``segment`` (a view, no copy).

    Raises
    ------
    TensorError
        When the descriptor is malformed, or the array does not lie aligned within the segment.
    """
    if len(described) < _OFFSET.size:
        raise TensorError("a tensor in shared memory needs its offset after the descriptor")
    (offset,) = _OFFSET.unpack_from(described, len(described) - _OFFSET.size)
    dtype, shape = _described(memoryview(described)[:len(described) - _OFFSET.size])
    try:
        return segment.array(offset, shape, dtype)
    except SharedMemoryError as error:
        raise TensorError(str(error)) from None


def encode_frame(kind: Kind, round_id: int = 0, meta: bytes = b"",
                 payload: np.ndarray | None = None, shared: bool = False) -> list[bytes | memoryview]:
    """The buffers of one frame, for ``transport.writelines``: a small payload is joined to the
    header (one write); a large one is passed as a view of the array (never copied here).
    ``shared``: a SHARED frame (its ``meta`` ends with :func:`shared_meta`; no payload)."""
    if shared:
        return [HEADER.pack(MAGIC, VERSION, kind | SHARED, len(meta), round_id, 0) + meta]
    size = 0 if payload is None else payload.nbytes
    head = HEADER.pack(MAGIC, VERSION, kind, len(meta), round_id, size) + meta
    if payload is None or size == 0:
        return [head]
    if size <= 1 << 16:
        return [head + _little(payload).tobytes()]
    return [head, _little(payload).data.cast("B")]
