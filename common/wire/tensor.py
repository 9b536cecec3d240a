"""The one conversion boundary between numpy arrays and protobuf tensors.

Arrays travel as raw little-endian bytes with a dtype string and a shape; nothing is pickled.
Arrays larger than one gRPC message travel as a stream of :class:`TensorChunk` messages; the
receiver preallocates the array from the first chunk's header and copies each chunk into place,
so a received array costs exactly one copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from coded.base.errors import TensorError
from coded.v1 import tensor_pb2

__all__ = [
    "ALLOWED_DTYPES",
    "DEFAULT_CHUNK_BYTES",
    "ChunkAssembler",
    "TensorError",
    "from_chunks",
    "from_proto",
    "to_chunks",
    "to_proto",
]

#: dtypes that may cross the wire (little-endian where it matters). Anything else is refused.
ALLOWED_DTYPES = frozenset({"<f8", "<f4", "<i8", "<i4", "|u1", "|i1", "|b1"})
#: Default payload per chunk. gRPC's default message limit is 4 MiB; we stay well below the
#: configured limit (see --max-message-mb) and large enough that per-message overhead is small.
DEFAULT_CHUNK_BYTES = 1 << 20


def _wire_dtype(array: np.ndarray) -> np.dtype:
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    if dtype.str not in ALLOWED_DTYPES:
        raise TensorError(f"dtype {array.dtype} cannot be sent (allowed: {', '.join(sorted(ALLOWED_DTYPES))})")
    return dtype


def _check_header(dtype: str, shape: Iterable[int], max_bytes: int) -> tuple[np.dtype, tuple[int, ...]]:
    if dtype not in ALLOWED_DTYPES:
        raise TensorError(f"unsupported dtype {dtype!r} (allowed: {', '.join(sorted(ALLOWED_DTYPES))})")
    shape = tuple(int(d) for d in shape)
    if len(shape) > 8 or any(d < 0 for d in shape):
        raise TensorError(f"invalid shape {list(shape)}")
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > max_bytes:
        raise TensorError(f"tensor of shape {list(shape)} ({size} bytes) exceeds the limit of {max_bytes} bytes")
    return np.dtype(dtype), shape


def to_proto(array: np.ndarray) -> tensor_pb2.Tensor:
    """An array as one Tensor message (small arrays only; see :func:`to_chunks`)."""
    array = np.asarray(array)
    dtype = _wire_dtype(array)
    return tensor_pb2.Tensor(
        dtype=dtype.str, shape=array.shape, data=np.ascontiguousarray(array, dtype=dtype).tobytes()
    )


def from_proto(message: tensor_pb2.Tensor, max_bytes: int = 1 << 30) -> np.ndarray:
    """The array of a Tensor message (read-only view of its bytes)."""
    dtype, shape = _check_header(message.dtype, message.shape, max_bytes)
    expected = math.prod(shape) * dtype.itemsize
    if len(message.data) != expected:
        raise TensorError(f"tensor data has {len(message.data)} bytes, shape {list(shape)} of {dtype} needs {expected}")
    return np.frombuffer(message.data, dtype=dtype).reshape(shape)


def to_chunks(
    array: np.ndarray, name: str = "", chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tensor_pb2.TensorChunk]:
    """Split an array into chunks; the first carries dtype and shape. Always at least one chunk."""
    array = np.asarray(array)
    dtype = _wire_dtype(array)
    raw = np.ascontiguousarray(array, dtype=dtype).reshape(-1).view(np.uint8).data
    offset = 0
    while True:
        piece = raw[offset : offset + chunk_bytes]
        header: dict[str, Any] = {"dtype": dtype.str, "shape": array.shape} if offset == 0 else {}
        yield tensor_pb2.TensorChunk(name=name, offset=offset, data=bytes(piece), **header)
        offset += len(piece)
        if offset >= len(raw):
            return


class ChunkAssembler:
    """Reassembles one array from its chunks, in order, validating every step.

    Parameters
    ----------
    max_bytes : int
        Largest array accepted.
    """

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self._max_bytes = max_bytes
        self._buffer: np.ndarray | None = None
        self._array: np.ndarray | None = None
        self._filled = 0
        self.name = ""

    @property
    def started(self) -> bool:
        return self._array is not None

    @property
    def complete(self) -> bool:
        return self._array is not None and self._filled == self._buffer.size  # type: ignore[union-attr]

    def add(self, chunk: tensor_pb2.TensorChunk) -> None:
        """Add the next chunk; raises TensorError when it does not fit the stream."""
        if self._array is None:
            if chunk.offset != 0 or not chunk.dtype:
                raise TensorError("the first chunk of a tensor must carry its dtype and shape at offset 0")
            dtype, shape = _check_header(chunk.dtype, chunk.shape, self._max_bytes)
            self._array = np.empty(shape, dtype=dtype)
            self._buffer = self._array.reshape(-1).view(np.uint8)
            self.name = chunk.name
        elif chunk.dtype or chunk.shape:
            raise TensorError(f"tensor {self.name!r}: a later chunk carries a header")
        assert self._buffer is not None
        if chunk.offset != self._filled:
            raise TensorError(f"tensor {self.name!r}: chunk at offset {chunk.offset}, expected {self._filled}")
        end = self._filled + len(chunk.data)
        if end > self._buffer.size:
            raise TensorError(f"tensor {self.name!r}: chunks exceed the {self._buffer.size} bytes of its shape")
        self._buffer[self._filled : end] = np.frombuffer(chunk.data, dtype=np.uint8)
        self._filled = end

    def result(self) -> np.ndarray:
        """The assembled array; raises TensorError when chunks are missing."""
        if self._array is None or not self.complete:
            got = 0 if self._buffer is None else self._filled
            need = "?" if self._buffer is None else self._buffer.size
            raise TensorError(f"tensor {self.name!r} is truncated: {got} of {need} bytes arrived")
        return self._array


def from_chunks(chunks: Iterable[tensor_pb2.TensorChunk], max_bytes: int = 1 << 30) -> dict[str, np.ndarray]:
    """Named arrays from a stream of chunks (arrays one after another)."""
    arrays: dict[str, np.ndarray] = {}
    current: ChunkAssembler | None = None
    for chunk in chunks:
        if current is None or (current.complete and chunk.offset == 0):
            if current is not None:
                arrays[current.name] = current.result()
            current = ChunkAssembler(max_bytes)
        current.add(chunk)
    if current is not None:
        arrays[current.name] = current.result()
    return arrays
