"""Inputs of matrix jobs: uploaded .npy files or seeded generators, validated.

Any shapes whose inner dimensions agree: the code pads what its block splits need
(:meth:`coded.codes.MatmulCode.encode`) and crops the product back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coded.jobs.spec import GenerateSpec, JobSpecError, MatmulJob

__all__ = ["generate", "load_matrices"]


def _load_npy(path: Path, field: str) -> np.ndarray:
    """A .npy array, or the single array of an .npz archive (never unpickled)."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                if len(loaded.files) != 1:
                    raise ValueError(f"an .npz input holds exactly one array (this one: {loaded.files})")
                loaded = loaded[loaded.files[0]]
        array = loaded
    except (ValueError, OSError, EOFError) as error:
        raise JobSpecError(f"{field}: not a readable .npy array ({error})") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "iuf":
        raise JobSpecError(f"{field}: must be a real numeric .npy array (got {getattr(array, 'dtype', type(array))})")
    return array.astype(np.float64, copy=False)


def generate(spec: GenerateSpec, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Seeded standard-normal matrices; for ``symmetric`` a matrix with eigenvalues 2 and [-1, 1].

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
    b = rng.standard_normal(tuple(spec.b)) if spec.b is not None and kind == "matmul" else None
    return a, b


def load_matrices(spec: MatmulJob, files: Mapping[str, Path]) -> tuple[np.ndarray, np.ndarray | None]:
    """A and B (None for matvec; possibly a vector) of a job, checked: finite, dimensions agree.

    Raises
    ------
    JobSpecError
        Naming the input that is wrong.
    """
    if spec.inputs.generate is not None:
        a, b = generate(spec.inputs.generate, spec.kind)
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
    if spec.kind == "matvec" and spec.driver is not None and a.shape[0] != a.shape[1]:
        raise JobSpecError(f"inputs.a: power iteration needs a square matrix (got {a.shape})")
    return a, b

