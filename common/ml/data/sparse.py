"""Sparse data: CSR matrices checked once, built from raw arrays, sliced without copies.

Sparse inputs (one-hot categorical features, text, click logs) travel and are computed on as CSR
(``scipy.sparse.csr_matrix``: ``data``, ``indices``, ``indptr``) from the upload to the worker's
gradient: no step densifies them. A check here turns what scipy would accept silently or fail on
deep inside a product (an index past the last column, a decreasing ``indptr``, NaN) into one
error that names the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse

__all__ = ["CSR_MEMBERS", "csr_arrays", "csr_from_arrays", "csr_from_members", "is_sparse", "nonzeros_per_row",
           "row_slice"]

#: the arrays of a CSR matrix as they cross the network and sit in an .npz file (scipy's own
#: ``save_npz`` names, ``format`` and ``shape`` aside)
CSR_MEMBERS = ("data", "indices", "indptr")
_INDEX_DTYPES = (np.int32, np.int64)


def is_sparse(x: Any) -> bool:
    """Whether ``x`` is a scipy sparse matrix or array."""
    return scipy.sparse.issparse(x)


def csr_from_arrays(data: Any, indices: Any, indptr: Any, shape: tuple[int, int], name: str = "x"
                    ) -> scipy.sparse.csr_matrix:
    """A checked CSR matrix of ``shape`` from its three arrays (shared, not copied, when they
    already have the right dtypes).

    Parameters
    ----------
    data : (nnz,) array_like of real numbers
        Converted to float64.
    indices : (nnz,) array_like of int
        Column of each value, ``0 <= index < shape[1]``.
    indptr : (shape[0] + 1,) array_like of int
        Row i's values are ``data[indptr[i]:indptr[i + 1]]``; starts at 0, never decreases, ends at nnz.
    shape : (rows, columns)
    name : str
        What the error messages call the matrix.

    Returns
    -------
    csr_matrix of float64
        Its column indices sorted within each row and without duplicates (scipy's canonical
        form, which later products rely on).

    Raises
    ------
    ValueError
        Naming the first offending row: wrong dtypes or lengths, an index out of range, a
        decreasing ``indptr``, a value that is not finite.
    """
    rows, columns = (int(v) for v in shape)
    if rows < 0 or columns < 0:
        raise ValueError(f"{name}: shape must be two non-negative sizes (got {tuple(shape)})")
    data, indices, indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
    for array, label in ((data, "data"), (indices, "indices"), (indptr, "indptr")):
        if array.ndim != 1:
            raise ValueError(f"{name}: {label} must be one-dimensional (got shape {array.shape})")
    if data.dtype.kind not in "biuf":
        raise ValueError(f"{name}: data must be real numbers (got dtype {data.dtype})")
    for array, label in ((indices, "indices"), (indptr, "indptr")):
        if array.dtype.kind not in "iu":
            raise ValueError(f"{name}: {label} must be integers (got dtype {array.dtype})")
    if len(indptr) != rows + 1:
        raise ValueError(f"{name}: indptr has {len(indptr)} entries; {rows} rows need {rows + 1}")
    if len(indices) != len(data):
        raise ValueError(f"{name}: {len(indices)} indices for {len(data)} values")
    if indptr[0] != 0 or indptr[-1] != len(data):
        raise ValueError(f"{name}: indptr must start at 0 and end at the number of values, {len(data)} "
                         f"(got {indptr[0]} ... {indptr[-1]})")
    steps = np.diff(indptr)
    if (steps < 0).any():
        raise ValueError(f"{name}: indptr decreases at row {int(np.argmax(steps < 0))}")
    bad = (indices < 0) | (indices >= columns)
    if bad.any():
        at = int(np.argmax(bad))
        raise ValueError(f"{name}: column index {int(indices[at])} in row {_row_of(indptr, at)} is out of range "
                         f"(the matrix has {columns} columns: 0..{columns - 1})")
    data = data.astype(np.float64, copy=False)
    finite = np.isfinite(data)
    if not finite.all():
        at = int(np.argmin(finite))
        raise ValueError(f"{name}: row {_row_of(indptr, at)} holds {data[at]}; values must be finite")
    index_dtype = np.int32 if max(columns, len(data)) < np.iinfo(np.int32).max else np.int64
    matrix = csr_over(data, indices.astype(index_dtype, copy=False), indptr.astype(index_dtype, copy=False),
                      (rows, columns))
    matrix.sum_duplicates()  # sorts the indices too (in place: only when they are not sorted already)
    return matrix


def _row_of(indptr: np.ndarray, position: int) -> int:
    """The row holding the ``position``-th stored value."""
    return int(np.searchsorted(indptr, position, side="right")) - 1


def csr_arrays(x: scipy.sparse.spmatrix) -> dict[str, np.ndarray]:
    """``data``, ``indices`` and ``indptr`` of ``x`` in CSR (views when it already is CSR)."""
    x = x.tocsr()
    return {"data": x.data, "indices": x.indices, "indptr": x.indptr}


def csr_from_members(arrays: Mapping[str, np.ndarray], columns: int, name: str) -> scipy.sparse.csr_matrix:
    """A CSR matrix with ``columns`` columns from the members ``data``, ``indices``, ``indptr``."""
    missing = [member for member in CSR_MEMBERS if member not in arrays]
    if missing:
        raise ValueError(f"{name}: a sparse matrix needs {', '.join(CSR_MEMBERS)} (missing {', '.join(missing)})")
    indptr = arrays["indptr"]
    return csr_from_arrays(arrays["data"], arrays["indices"], indptr, (max(len(indptr) - 1, 0), columns), name)


def row_slice(x: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of ``x`` (a dense array, or CSR) without copying their values: a view
    of a dense array; for CSR a matrix over x's own ``data`` and ``indices``, where scipy's
    slicing copies them (a worker's whole partition, at every round)."""
    if not is_sparse(x):
        return x[start:stop]
    start, stop, _ = slice(start, stop).indices(x.shape[0])
    if start == 0 and stop == x.shape[0]:  # a whole partition in one chunk: x itself (a new matrix costs ~0.1 ms)
        return x
    stop = max(start, stop)
    begin, end = int(x.indptr[start]), int(x.indptr[stop])
    return csr_over(x.data[begin:end], x.indices[begin:end], x.indptr[start : stop + 1] - begin,
                    (stop - start, x.shape[1]))


def csr_over(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
             shape: tuple[int, int]) -> scipy.sparse.csr_matrix:
    """A CSR matrix of ``shape`` over these arrays themselves, views included: assigned, not given
    to scipy's constructor, whose format check "prunes" a view of less than half its array into
    a copy."""
    out = scipy.sparse.csr_matrix(shape, dtype=data.dtype)
    out.data, out.indices, out.indptr = data, indices, indptr
    return out


def nonzeros_per_row(x: Any) -> float:
    """Mean stored values per row of a sparse matrix; the number of columns of a dense one."""
    if is_sparse(x):
        return x.nnz / max(x.shape[0], 1)
    return float(np.shape(x)[1])
