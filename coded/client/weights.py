"""A job's result in the files other tools load, chosen by the file's suffix.

``.npz`` holds every array and ``.npy`` a result of one array (a product); for models,
``.safetensors`` and ``.pt`` hold the parameters as a state dict that
``nn.Module.load_state_dict`` takes. Neither needs pickle to read: safetensors is a JSON header and
raw little-endian bytes (written here; read by the safetensors package, a dependency of the base
install: ``safetensors.numpy.load_file`` without torch), and ``.pt`` is ``torch.save`` of a dict of
tensors, which ``torch.load(path, weights_only=True)`` reads.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = ["SUFFIXES", "check_suffix", "write_result", "write_safetensors"]

SUFFIXES = (".npz", ".npy", ".safetensors", ".pt")
#: the formats that hold several named arrays
SEVERAL = (".npz", ".safetensors", ".pt")
_SAFETENSORS_DTYPES = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<i8"): "I64"}


def write_safetensors(path: Path, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Write ``arrays`` (float64, float32 or int64) in the safetensors format.

    The file is an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape
    and byte range in the data, plus ``__metadata__``: string to string), padded with spaces to a
    multiple of 8 bytes, then the tensors' bytes in C order, in the order of ``arrays``.
    """
    header: dict[str, object] = {"__metadata__": dict(metadata or {})}
    blobs, offset = [], 0
    for name, array in arrays.items():
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        if data.dtype not in _SAFETENSORS_DTYPES:
            raise TypeError(f"{name}: dtype {array.dtype} has no safetensors code here")
        header[name] = {"dtype": _SAFETENSORS_DTYPES[data.dtype], "shape": list(data.shape),
                        "data_offsets": [offset, offset + data.nbytes]}
        blobs.append(data.tobytes())
        offset += data.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            out.write(blob)


def check_suffix(path: Path) -> None:
    """Refuse, before anything is fetched, a file this process cannot write.

    Raises
    ------
    ValueError
        For a suffix that is none of :data:`SUFFIXES`, or ``.pt`` without PyTorch here (the message
        says what to write or install instead).
    """
    suffix = Path(path).suffix
    if suffix not in SUFFIXES:
        raise ValueError(f"--out: write a {' or '.join(SUFFIXES)} file (got {Path(path).name!r})")
    if suffix == ".pt" and importlib.util.find_spec("torch") is None:
        raise ValueError(f"--out {Path(path).name}: a .pt file is written by PyTorch, which is not installed here; "
                         "write .safetensors instead (the same state dict, loaded by safetensors.torch.load_file), "
                         "or install the torch extra: pip install 'coded-computing[torch]'")


def write_result(path: Path, arrays: Mapping[str, np.ndarray], dtype: str = "float64",
                 metadata: Mapping[str, str] | None = None) -> str:
    """Write a result by the suffix of ``path``; returns a one-line description of what was written.

    Parameters
    ----------
    dtype : {"float64", "float32"}
        What the state-dict formats store the parameters as (a torch model's compute dtype).
    metadata : mapping of str to str
        Kept in a safetensors header (e.g. the job and its model section).

    Raises
    ------
    ValueError
        For a suffix that is none of :data:`SUFFIXES`, ``.pt`` without PyTorch, or ``.npy`` for
        several arrays (a .npy file holds one, and the rest would be lost).
    """
    path = Path(path)
    check_suffix(path)
    suffix = path.suffix
    if suffix == ".npy":
        if len(arrays) != 1:
            raise ValueError(f"--out {path.name}: a .npy file holds one array, and this result has {len(arrays)} "
                             f"({', '.join(arrays)}); write {' or '.join(SEVERAL)} to keep them all")
        [(name, array)] = arrays.items()
        np.save(path, array)
        return f"{name} {tuple(array.shape)}"
    if suffix == ".npz":
        np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub matches **arrays to allow_pickle
    else:
        state = {name: np.asarray(array, dtype=dtype) for name, array in arrays.items()}
        if suffix == ".safetensors":
            write_safetensors(path, state, metadata)
        else:
            import torch  # only here: the client needs PyTorch for .pt alone

            torch.save({name: torch.from_numpy(array) for name, array in state.items()}, path)
    return ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
