"""MNIST's IDX files (images and labels), parsed without pickle and validated."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

__all__ = ["read_idx"]

_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MAX_BYTES = 1 << 30


def read_idx(path: str | Path) -> np.ndarray:
    """The array in an IDX file (optionally gzipped).

    Raises
    ------
    ValueError
        Naming the file: bad magic number, unknown type, sizes that disagree with the header.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _TYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    dims = raw[3]
    header = 4 + 4 * dims
    if dims == 0 or len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(dims))
    dtype = np.dtype(_TYPES[raw[2]])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if expected > MAX_BYTES or len(raw) - header != expected:
        raise ValueError(f"{path}: {len(raw) - header} data bytes, shape {list(shape)} needs {expected}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
