"""Uploaded ``.npy`` and ``.npz`` files, read without pickle, refused with what they are instead.

``numpy.load`` tries to unpickle whatever is neither format, and refused (``allow_pickle=False``)
it advises loading the file "unsafely using allow_pickle=": advice a server must never follow,
for a text file as much as for a pickle. Here the file is identified by its first bytes, and a
``.npy`` header (format 1.0, 2.0 or 3.0: dtype, fortran_order, shape) is checked against the bytes
that follow it before any array is allocated. An ``.npz`` is a zip archive (stored or deflated)
of ``NAME.npy`` members, each read the same way. docs/jobs.md ("Uploaded files") is the contract
for clients written in other languages.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from tokenize import TokenError
from typing import IO

import numpy as np

__all__ = ["MAX_ARRAY_BYTES", "ArrayFileError", "read_arrays"]

NPY_MAGIC = b"\x93NUMPY"
#: a zip archive's first local file header, or the end record of an empty one
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
VERSIONS = ((1, 0), (2, 0), (3, 0))
#: numpy's default bound on a header (a dict of three entries fits in 128 bytes)
MAX_HEADER_BYTES = 10000
#: bound on one array, and on what an .npz member decompresses to
MAX_ARRAY_BYTES = 2 << 30
READ_BYTES = 1 << 24


class ArrayFileError(ValueError):
    """An uploaded file is not a .npy or .npz file numpy writes without pickle. The message says
    what the file is, to follow "the file" (e.g. ``is text ('1,2,3'), not ...``)."""


def read_arrays(path: str | os.PathLike[str]) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a ``.npy`` file, or the arrays of an ``.npz`` archive by member name (without
    ``.npy``), whatever the file's name says.

    Raises
    ------
    ArrayFileError
        The file is empty, not one of the two formats (text, a pickle, anything else), a format
        version other than 1.0-3.0, an array of Python objects, truncated, longer than its
        header says, or a damaged archive.
    """
    path = Path(path)
    with path.open("rb") as stream:
        head = stream.read(64)
        if head.startswith(NPY_MAGIC):
            stream.seek(0)
            return _read_npy(stream, path.stat().st_size)
    if head.startswith(ZIP_MAGICS):
        return _read_npz(path)
    raise ArrayFileError(_what_else(head))


def _what_else(head: bytes) -> str:
    """What a file that is neither format is, from its first bytes."""
    if not head:
        return "is empty (0 bytes)"
    if head[:1] == b"\x80":  # the PROTO opcode every pickle since protocol 2 starts with
        return "is a Python pickle, which is never loaded, not a .npy or .npz file"
    for cut in range(4):  # the sample may end inside a character
        try:
            text = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if all(c.isprintable() or c in "\t\r\n\ufeff" for c in text):
            return f"is text ({text[:24]!r}{'...' if len(text) > 24 else ''}), not a .npy or .npz file"
        break
    return f"is not a .npy or .npz file (it starts with {head[:8]!r})"


def _read_npy(stream: IO[bytes], size: int) -> np.ndarray:
    """The array of a .npy file of ``size`` bytes, read from ``stream`` at its start."""
    start = stream.read(len(NPY_MAGIC) + 2 + 4)
    version = tuple(start[len(NPY_MAGIC) : len(NPY_MAGIC) + 2])
    if version not in VERSIONS:
        raise ArrayFileError(f"is a .npy file of format version {'.'.join(map(str, version)) or 'missing'}, not "
                             f"one of {', '.join(f'{major}.{minor}' for major, minor in VERSIONS)}")
    length = int.from_bytes(start[len(NPY_MAGIC) + 2 :][: 2 if version == (1, 0) else 4], "little")
    if length > MAX_HEADER_BYTES:  # numpy refuses it too, advising allow_pickle=True
        raise ArrayFileError(f"has a .npy header of {length} bytes, more than {MAX_HEADER_BYTES}")
    stream.seek(len(NPY_MAGIC) + 2)
    try:  # 3.0 differs from 2.0 only by a UTF-8 header, which matters for structured dtypes' names
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(stream, max_header_size=MAX_HEADER_BYTES)
    # what numpy's header parser (tokenize, then ast.literal_eval) raises on a malformed header
    except (ValueError, SyntaxError, TypeError, TokenError, RecursionError) as error:
        raise ArrayFileError(f"has a .npy header that cannot be read ({error})") from None
    if dtype.hasobject:
        raise ArrayFileError(f"holds Python objects (dtype {dtype}), which are never unpickled")
    if dtype.itemsize == 0:
        raise ArrayFileError(f"has a .npy header whose dtype {dtype} has no size")
    if any(n < 0 for n in shape):
        raise ArrayFileError(f"has a .npy header with a negative dimension (shape {shape})")
    expected = math.prod(shape) * dtype.itemsize
    remaining = size - stream.tell()
    what = f"a {shape} {dtype} array of {expected} bytes"
    if remaining < expected:
        raise ArrayFileError(f"is truncated: its .npy header promises {what}, and {remaining} bytes follow it")
    if remaining > expected:
        raise ArrayFileError(f"has {remaining - expected} bytes more than {what}, which its .npy header promises")
    if expected > MAX_ARRAY_BYTES:
        raise ArrayFileError(f"holds {what}, more than {MAX_ARRAY_BYTES} bytes")
    # a writable array (one over bytes is not), filled piece by piece: the file is never in memory twice
    data = bytearray(expected)
    view = memoryview(data)
    filled = 0
    while filled < expected:
        piece = stream.read(min(READ_BYTES, expected - filled))
        if not piece:  # an .npz member shorter than its archive entry says
            raise ArrayFileError(f"is truncated: its .npy header promises {what}, and {filled} bytes follow it")
        view[filled : filled + len(piece)] = piece
        filled += len(piece)
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(path) as archive:
            return dict(_members(archive))
    except ArrayFileError:
        raise
    # what zipfile and zlib raise on damaged archives (OSError: a seek beyond the file;
    # NotImplementedError: a zip feature or version it lacks)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
            NotImplementedError) as error:
        raise ArrayFileError(f"is a damaged .npz (zip) archive ({error})") from None


def _members(archive: zipfile.ZipFile) -> Iterator[tuple[str, np.ndarray]]:
    names: set[str] = set()
    for info in archive.infolist():
        member = f"is an .npz archive whose member {info.filename!r}"
        name = info.filename.removesuffix(".npy")
        if name == info.filename:
            raise ArrayFileError(f"{member} is not a .npy file (members are NAME.npy files)")
        if name in names:
            raise ArrayFileError(f"{member} comes twice")
        if info.flag_bits & 0x1:
            raise ArrayFileError(f"{member} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ArrayFileError(f"{member} is compressed by zip method {info.compress_type}, not stored (0, as "
                                 "numpy.savez writes) or deflated (8, as numpy.savez_compressed writes)")
        if info.file_size > MAX_ARRAY_BYTES:
            raise ArrayFileError(f"{member} decompresses to {info.file_size} bytes, more than {MAX_ARRAY_BYTES}")
        names.add(name)
        with archive.open(info) as stream:
            if stream.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise ArrayFileError(f"{member} is not a .npy file")
            stream.seek(0)
            try:
                array = _read_npy(stream, info.file_size)
            except ArrayFileError as error:
                raise ArrayFileError(f"{member} {error}") from None
        yield name, array
