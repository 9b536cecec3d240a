"""A sparse batch's transposed product added into an array the caller owns.

A logistic regression on one-hot data (the gradient coding papers' workload) has hundreds of
thousands of weights and a few dozen stored values per sample, so the backward pass's
``x.T @ dz`` is a product whose result is as long as the model and whose work is the batch's
stored values. scipy's operator returns a new array of the model's length each time, which a
worker then copies into its message: two passes over the model's length (and the pages of a
new array) per batch, where the arithmetic touches a few percent of it. scipy's compiled kernel
(``csc_matvecs``, which ``x.T @ dz`` itself runs) adds into a given array: here it adds straight
into the message, so a batch costs its stored values and nothing of the model's length.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse

try:  # scipy's compiled kernels; private, so the public operator stands in where they are not
    from scipy.sparse import _sparsetools
except ImportError:  # pragma: no cover - every scipy this project supports has them
    _sparsetools = None

__all__ = ["add_transposed_product"]


def add_transposed_product(x: scipy.sparse.csr_matrix, dz: np.ndarray, out: np.ndarray) -> None:
    """``out += x.T @ dz`` without a temporary of ``out``'s size.

    Parameters
    ----------
    x : (b, f) csr_matrix of float64
        Its ``indptr`` may start above 0 (rows sliced out of a larger matrix over the same
        ``data`` and ``indices``).
    dz : (b, c) ndarray of float64
    out : (f, c) C-contiguous ndarray of float64
        Added to in place.
    """
    rows, columns = x.shape
    outputs = dz.shape[1]
    if _sparsetools is None or not out.flags.c_contiguous:
        out += x.T @ dz
        return
    dz = np.ascontiguousarray(dz, dtype=np.float64)
    indptr, indices = x.indptr, x.indices
    if indptr.dtype != indices.dtype:  # the kernel takes one index type
        indptr = indptr.astype(indices.dtype)
    # x.T is the CSC matrix of shape (f, b) over x's own arrays
    if outputs == 1:
        _sparsetools.csc_matvec(columns, rows, indptr, indices, x.data, dz.reshape(-1), out.reshape(-1))
    else:
        _sparsetools.csc_matvecs(columns, rows, outputs, indptr, indices, x.data, dz.reshape(-1), out.reshape(-1))
