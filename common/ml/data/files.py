"""User data from ``.npz`` or ``.csv`` files, validated; nothing is ever unpickled."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from coded.base.npy import ArrayFileError, read_arrays

from .dataset import Dataset
from .sparse import CSR_MEMBERS, csr_from_members, is_sparse
from .svmlight import read_svmlight

__all__ = ["FORMATS", "TASKS", "load_file"]

FORMATS = ("npz", "csv", "svmlight")
TASKS = ("classification", "regression")
_NPZ_KEYS = ("x", "y", "x_test", "y_test")
#: the members of a sparse (CSR) .npz: scipy.sparse.save_npz's, and the labels
_CSR_NPZ_KEYS = ("format", "shape", *CSR_MEMBERS, "y")
#: How to write what an npz data file must be (docs/jobs.md, "Uploaded files").
SAVE_NPZ = ('save one with numpy.savez(file, x=x, y=y) from arrays of numbers, or a sparse x with numpy.savez(file, '
            'format="csr", shape=x.shape, data=x.data, indices=x.indices, indptr=x.indptr, y=y) '
            '(docs/jobs.md, "Uploaded files")')


def load_file(
    path: str | os.PathLike[str], task: str = "classification", format: str | None = None,
    features: int | None = None, zero_based: bool = False,
) -> Dataset:
    """A dataset from a file.

    - ``.npz``: arrays ``x`` (N, f) and ``y`` (N,), optionally ``x_test`` and ``y_test`` (both or
      neither); no other arrays. Or a sparse x in CSR as ``scipy.sparse.save_npz`` writes it
      (members ``format`` = "csr", ``shape``, ``data``, ``indices``, ``indptr``) with ``y`` beside
      it: ``scipy.sparse.load_npz`` reads the same file. Never unpickled
      (:func:`coded.base.npy.read_arrays`).
    - ``.csv``: numbers separated by commas, one sample per line, the label in the last column;
      the first line may be a header (it is one if any of its fields is not a number).
    - svmlight/libsvm text (:func:`coded.ml.data.svmlight.read_svmlight`): sparse. Binary labels
      written -1/+1 become 0/1.

    Without test arrays (and always for CSV, svmlight and sparse .npz) the test set is empty.

    Parameters
    ----------
    path : str or path-like
    task : {"classification", "regression"}
        Classification labels must be integers 0..C-1; C = largest label + 1 (at least 2).
    format : {"npz", "csv", "svmlight"}, optional
        Default: from the file name's suffix.
    features, zero_based
        svmlight only: the number of features (default: the largest index + 1) and whether
        indices start at 0 (default: at 1, as libsvm writes them).

    Returns
    -------
    Dataset
        Named after the file.

    Raises
    ------
    ValueError
        Naming the file and the problem: unreadable or malformed content, non-numeric or
        non-finite values, shapes that do not fit, labels that are not class labels.
    OSError
        If the file cannot be opened.
    """
    path = Path(path)
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)} (got {task!r})")
    if format is None:
        suffix = path.suffix.lower().lstrip(".")
        format = "svmlight" if suffix in ("svm", "libsvm") else suffix
    if format not in FORMATS:
        raise ValueError(f"{path}: format must be one of {', '.join(FORMATS)} (got {format!r})")
    try:
        if format == "svmlight":
            x, y = read_svmlight(path, features, zero_based)
            if task == "classification" and set(np.unique(y)) == {-1.0, 1.0}:
                y = (y > 0).astype(np.int64)
            arrays = {"x": x, "y": y}
        else:
            arrays = _read_npz(path) if format == "npz" else _read_csv(path)
        for name, array in arrays.items():
            if not is_sparse(array) and array.dtype.kind not in "biuf":
                raise ValueError(f"{name} must be numeric (got dtype {array.dtype})")
        x, y = arrays["x"], arrays["y"]
        x_test = arrays.get("x_test", x[:0] if is_sparse(x) else np.empty((0, x.shape[1] if x.ndim == 2 else 0)))
        y_test = arrays.get("y_test", np.empty(0))
        classes = _classes(y, y_test) if task == "classification" else 0
        return Dataset(x, y, x_test, y_test, classes=classes, name=path.name)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def _read_npz(path: Path) -> dict[str, Any]:
    try:
        loaded = read_arrays(path)
    except ArrayFileError as error:
        raise ValueError(f"the file {error}: {SAVE_NPZ}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"not an .npz archive (a single .npy array?): {SAVE_NPZ}")
    names = set(loaded)
    if names & set(CSR_MEMBERS):
        return _sparse_npz(loaded)
    unknown = sorted(names - set(_NPZ_KEYS))
    if unknown:
        raise ValueError(f"unknown array(s) {unknown} (allowed: {', '.join(_NPZ_KEYS)})")
    if not {"x", "y"} <= names or ("x_test" in names) != ("y_test" in names):
        raise ValueError(f"needs arrays x and y, and x_test with y_test or neither (got {sorted(names)})")
    return loaded


def _sparse_npz(loaded: dict[str, np.ndarray]) -> dict[str, Any]:
    """x (CSR) and y of a sparse .npz's members."""
    unknown = sorted(set(loaded) - set(_CSR_NPZ_KEYS))
    if unknown:
        raise ValueError(f"unknown array(s) {unknown} beside a sparse x (allowed: {', '.join(_CSR_NPZ_KEYS)})")
    missing = [name for name in ("shape", *CSR_MEMBERS, "y") if name not in loaded]
    if missing:
        raise ValueError(f"a sparse x needs the arrays shape, {', '.join(CSR_MEMBERS)} and y (missing "
                         f"{', '.join(missing)}): {SAVE_NPZ}")
    if "format" in loaded and loaded["format"].dtype.kind in "SU":
        kind = str(loaded["format"].astype(str))
        if kind != "csr":
            raise ValueError(f"the sparse x is stored as {kind!r}; only 'csr' is read (save x.tocsr())")
    shape = loaded["shape"]
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise ValueError(f"shape must be two integers (got {shape.dtype} {shape.shape})")
    columns = int(shape[1])
    x = csr_from_members(loaded, columns, "x")
    if x.shape[0] != int(shape[0]):
        raise ValueError(f"shape says {int(shape[0])} rows, indptr holds {x.shape[0]}")
    return {"x": x, "y": loaded["y"]}


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    with path.open(encoding="utf-8-sig") as stream:  # -sig: a byte-order mark is not a header
        first = stream.readline()
    header = not all(_is_number(field) for field in first.split(","))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": reported below
            table = np.loadtxt(path, delimiter=",", skiprows=int(header), ndmin=2, dtype=np.float64,
                               encoding="utf-8-sig")
    except ValueError as error:
        raise ValueError(f"not a rectangular table of numbers ({error})") from None
    if table.shape[0] == 0:
        raise ValueError("has no data rows")
    if table.shape[1] < 2:
        raise ValueError(
            f"needs at least one feature column and the label column (got {table.shape[1]} column)")
    return {"x": table[:, :-1], "y": table[:, -1]}


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _classes(*labels: np.ndarray) -> int:
    values = np.concatenate([np.asarray(y, dtype=np.float64).ravel() for y in labels])
    bad = ~np.isfinite(values) | (values < 0) | (np.floor(values) != values)
    if bad.any():
        first = int(np.argmax(bad))
        problem = f"example {first + 1} has {values[first]:g}"
        if values[first] == -1:  # a file of -1/+1 labels with another label in it: name that one too
            other = ~np.isin(values, (-1.0, 1.0))
            if other.any():
                problem += f" and example {int(np.argmax(other)) + 1} has {values[int(np.argmax(other))]:g}"
        raise ValueError(f"classification labels must be integers >= 0, or every one -1 or +1 (taken as 0 and 1): "
                         f"{problem} (examples counted from 1, training rows first)")
    classes = int(values.max()) + 1 if values.size else 0
    if classes < 2:
        raise ValueError(f"classification needs labels of at least 2 classes (largest label: {classes - 1})")
    return classes
