"""Inputs of matrix jobs: uploaded .npy files or seeded generators, validated.

Any shapes whose inner dimensions agree: the code pads what its block splits need
(:meth:`coded.codes.MatmulCode.encode`) and crops the product back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coded.base.npy import ArrayFileError, read_arrays
from coded.jobs.spec import JobSpecError, MatrixJob
from coded.jobs.spec.matrix import GenerateSpec

__all__ = ["generate", "load_matrices"]


#: What an uploaded matrix must be (docs/jobs.md, "Uploaded files"), after what it is not.
ACCEPTED = ("save it with numpy.save(file, array, allow_pickle=False); accepted: a .npy file (format 1.0, 2.0 or "
            "3.0) of real numbers (integers or floats of either byte order, C or Fortran order), or an .npz "
            "archive holding one such array (docs/jobs.md, \"Uploaded files\")")


def _load_npy(path: Path, field: str) -> np.ndarray:
    """A .npy array, or the single array of an .npz archive (never unpickled), as float64."""
    try:
        loaded = read_arrays(path)
    except ArrayFileError as error:
        raise JobSpecError(f"{field}: {path} {error}: {ACCEPTED}") from None
    if isinstance(loaded, dict) and len(loaded) != 1:
        raise JobSpecError(f"{field}: {path} is an .npz archive of {len(loaded)} arrays "
                           f"({', '.join(sorted(loaded)) or 'none'}), not one: {ACCEPTED}")
    array = next(iter(loaded.values())) if isinstance(loaded, dict) else loaded
    if array.dtype.kind not in "iuf":
        raise JobSpecError(f"{field}: {path} holds {array.dtype} values, not real numbers: {ACCEPTED}")
    return array.astype(np.float64, copy=False)


def generate(spec: GenerateSpec) -> tuple[np.ndarray, np.ndarray | None]:
    """Seeded standard-normal matrices (B when ``spec.b`` gives its shape); for ``symmetric`` an A
    with eigenvalues 2 and [-1, 1].

    The symmetric matrix has a spectral gap of 2, so power iteration gains a factor 2 per round.
    """
    rng = np.random.default_rng(spec.seed)
    if spec.symmetric:
        size = spec.a[0]
        basis, _ = np.linalg.qr(rng.standard_normal((size, size)))
        values = np.concatenate([[2.0], rng.uniform(-1.0, 1.0, size - 1)])
        a = (basis * values) @ basis.T
    else:
        a = rng.standard_normal(tuple(spec.a))
    b = rng.standard_normal(tuple(spec.b)) if spec.b is not None else None
    return a, b


def load_matrices(spec: MatrixJob, files: Mapping[str, Path]) -> tuple[np.ndarray, np.ndarray | None]:
    """A and B (None for matvec; possibly a vector) of a job, checked: finite, dimensions agree.

    Raises
    ------
    JobSpecError
        Naming the input that is wrong.
    """
    if spec.inputs.generate is not None:
        a, b = generate(spec.inputs.generate)
    else:
        a = _load_npy(files[str(spec.inputs.a)], "inputs.a")
        b = _load_npy(files[str(spec.inputs.b)], "inputs.b") if spec.inputs.b is not None else None
    if a.ndim != 2 or a.size == 0:
        raise JobSpecError(f"inputs.a: must be a non-empty matrix (got shape {a.shape})")
    if b is not None and (b.ndim not in (1, 2) or b.size == 0):
        raise JobSpecError(f"inputs.b: must be a non-empty matrix or vector (got shape {b.shape})")
    for name, array in (("inputs.a", a), ("inputs.b", b)):
        if array is not None and not np.all(np.isfinite(array)):
            raise JobSpecError(f"{name}: contains NaN or infinity")
    if b is not None and a.shape[1] != b.shape[0]:
        raise JobSpecError(f"inputs: inner dimensions differ: a is {a.shape}, b is {b.shape}")
    if spec.square and a.shape[0] != a.shape[1]:
        raise JobSpecError(f"inputs.a: power iteration needs a square matrix (got {a.shape})")
    return a, b

