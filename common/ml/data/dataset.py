"""The dataset container, argument checks and the train/test split shared by the loaders."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse

from coded.base.checks import check_int

from .sparse import csr_from_arrays, csr_over, is_sparse

__all__ = ["TEST_FRACTION", "Dataset", "hold_out", "kept_for_training", "read_only", "row_blocks", "split_off",
           "train_size", "writable"]

#: the share of generated samples that form the test set
TEST_FRACTION = 0.2
#: bytes of rows a pass over a large array works on at once (its temporaries' size)
BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class Dataset:
    """Training and test data, validated at construction; the arrays are read-only views.

    Attributes
    ----------
    x_train : (N, f) ndarray of float64, or (N, f) csr_matrix of float64
        N >= 1. Sparse data stay sparse (:mod:`coded.ml.data.sparse`): checked, in canonical CSR
        form, never densified.
    y_train : (N,) ndarray
        int64 class labels 0..classes-1, or float64 targets when ``classes == 0``.
    x_test : (M, f) ndarray or csr_matrix of float64
        M may be 0 (no test set); sparse exactly when x_train is.
    y_test : (M,) ndarray
    classes : int
        Number of classes (>= 2), or 0 for regression.
    name : str
    shape : tuple of int
        The shape of one sample before it was flattened into its f features, e.g. (C, H, W) for
        images (``prod(shape) == f``); empty for data that are feature vectors.
    scaling : ((f,) ndarray, (f,) ndarray) or None
        The training mean and standard deviation the features were standardised with, if they were.

    Raises
    ------
    TypeError
        If an array is not real numeric or ``classes`` is not an integer.
    ValueError
        For shapes that do not fit, non-finite values, labels that are not integers in
        0..classes-1, or ``classes == 1``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int
    name: str = "dataset"
    shape: tuple[int, ...] = ()
    #: (mean, std), each (f,): what the features were standardised with (x = (raw - mean) / std), or None
    scaling: tuple[np.ndarray, np.ndarray] | None = None

    def __post_init__(self) -> None:
        classes = check_int("classes", self.classes, 0)
        if classes == 1:
            raise ValueError("classes must be 0 (regression) or >= 2 (got 1)")
        features = None
        sparse = is_sparse(self.x_train)
        for split in ("train", "test"):
            x = getattr(self, f"x_{split}")
            if is_sparse(x) != sparse:
                raise ValueError("x_train and x_test must both be sparse or both dense")
            x = _csr(f"x_{split}", x) if sparse else _real(f"x_{split}", x, np.float64)
            if x.ndim != 2 or (features is not None and x.shape[1] != features):
                want = "(N, f)" if features is None else f"(M, {features}) like x_train"
                raise ValueError(f"x_{split} must have shape {want} (got {x.shape})")
            features = x.shape[1]
            y = _real(f"y_{split}", getattr(self, f"y_{split}"), np.float64)
            if y.shape != (x.shape[0],):
                raise ValueError(
                    f"y_{split} must have shape ({x.shape[0]},) to match x_{split} (got {y.shape})")
            if classes:
                y = _labels(f"y_{split}", y, classes)
            object.__setattr__(self, f"x_{split}", x if sparse else read_only(x))
            object.__setattr__(self, f"y_{split}", read_only(y))
        if len(self.y_train) == 0 or features == 0:
            raise ValueError(
                f"the training set must have samples and features (got x_train {self.x_train.shape})")
        if self.shape and math.prod(self.shape) != features:
            raise ValueError(f"a sample of shape {list(self.shape)} does not hold the {features} features")

    @property
    def sparse(self) -> bool:
        """Whether the samples are a CSR matrix."""
        return is_sparse(self.x_train)

    @property
    def features(self) -> int:
        """Number of features f."""
        return self.x_train.shape[1]

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The shape of one sample: ``shape``, or ``(features,)`` for feature vectors."""
        return self.shape or (self.features,)

    @property
    def task(self) -> str:
        """"classification" or "regression"."""
        return "classification" if self.classes else "regression"


def split_off(
    x: np.ndarray, y: np.ndarray, test_fraction: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: the last ``ceil(test_fraction * n)`` rows are the test set.

    Raises
    ------
    ValueError
        If no training sample would remain.
    """
    cut = kept_for_training(len(y), test_fraction)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def hold_out(dataset: Dataset, test_fraction: float, seed: int, in_place: bool = False) -> Dataset:
    """The dataset with a seeded random ``ceil(test_fraction * N)`` of its training rows as its test
    set (it has none yet); the training rows left keep their order. ``in_place``: the training
    rows are moved up within the dataset's own arrays (it must not be used after), so that the
    split costs the test rows' memory alone, dense or sparse.

    Raises
    ------
    ValueError
        If no training sample would remain.
    """
    samples = len(dataset.y_train)
    cut = kept_for_training(samples, test_fraction)
    test = np.random.default_rng(seed).permutation(samples)[cut:]
    keep = np.ones(samples, dtype=bool)
    keep[test] = False
    kept = np.flatnonzero(keep)
    x, y = dataset.x_train, dataset.y_train
    x_test, y_test = x[test], y[test]
    if is_sparse(x):
        x_train = _kept_csr_rows(x, kept, in_place)
    else:
        x_train = writable(x, in_place)
        # kept[i] >= i: a block reads rows at or after the rows it writes, and later blocks read
        # rows after it, so no row is overwritten before it has been moved
        for block in row_blocks(x_train, cut):
            x_train[block] = x_train[kept[block]]
        x_train = x_train[:cut]
    return Dataset(x_train, y[kept], x_test, y_test, classes=dataset.classes, name=dataset.name,
                   shape=dataset.shape)


def _kept_csr_rows(x: scipy.sparse.csr_matrix, kept: np.ndarray, in_place: bool) -> scipy.sparse.csr_matrix:
    """The rows ``kept`` (increasing) of ``x``, their values moved up within x's arrays when
    ``in_place`` (as :func:`hold_out`'s dense rows are)."""
    if not in_place:
        return x[kept]
    data, indices = writable(x.data, True), writable(x.indices, True)
    lengths = np.diff(x.indptr)[kept]
    indptr = np.zeros(len(kept) + 1, dtype=x.indptr.dtype)
    np.cumsum(lengths, out=indptr[1:])
    rows = max(1, BLOCK_BYTES // x.data.itemsize // max(1, x.nnz // max(1, x.shape[0])))
    for start in range(0, len(kept), rows):
        block = slice(start, start + rows)
        # the positions of the block's values: each row's run, indptr[r] to indptr[r + 1]
        first, sizes = x.indptr[kept[block]], lengths[block]
        runs = np.repeat(first - indptr[block.start : block.start + len(sizes)], sizes)
        target = np.arange(indptr[start], indptr[start + len(sizes)])
        data[target] = data[target + runs]
        indices[target] = indices[target + runs]
    nonzeros = int(indptr[-1])
    return csr_over(data[:nonzeros], indices[:nonzeros], indptr, (len(kept), x.shape[1]))


def row_blocks(x: np.ndarray, stop: int | None = None) -> Iterator[slice]:
    """Consecutive slices of the rows of ``x`` (n, ...) up to ``stop`` (default n), each of
    :data:`BLOCK_BYTES` at most (one row at least): a pass over a large array by them allocates a
    block's temporaries, not the array's."""
    rows = max(1, BLOCK_BYTES // max(1, x[:1].nbytes))
    end = len(x) if stop is None else stop
    return (slice(start, min(start + rows, end)) for start in range(0, end, rows))


def writable(array: np.ndarray, in_place: bool) -> np.ndarray:
    """``array`` itself, writable, when ``in_place`` and its memory may be written (a read-only
    view of a writable array, as a :class:`Dataset` holds); a copy otherwise."""
    if in_place:
        view = array.view()
        try:
            view.flags.writeable = True
            return view
        except ValueError:  # memory numpy may not write (bytes, a read-only map)
            pass
    return array.copy()


def train_size(samples: int, test_fraction: float = TEST_FRACTION) -> int:
    """How many of ``samples`` samples :func:`split_off` leaves for training."""
    return samples - math.ceil(test_fraction * samples)


def kept_for_training(samples: int, test_fraction: float) -> int:
    """:func:`train_size`, refusing a split that leaves no training sample (ValueError)."""
    cut = train_size(samples, test_fraction)
    if cut <= 0:
        raise ValueError(f"test_fraction={test_fraction} of {samples} samples leaves no training sample")
    return cut


def _real(name: str, value: Any, dtype: type) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real numeric array (got dtype {array.dtype})")
    checked = np.atleast_1d(array)
    for rows in row_blocks(checked):  # by blocks: the mask of a large array is large too
        block = checked[rows]
        if not np.isfinite(block).all():
            raise ValueError(f"{name} must be finite (found {block[~np.isfinite(block)].flat[0]})")
    return array.astype(dtype, copy=False)


def _csr(name: str, x: scipy.sparse.spmatrix) -> scipy.sparse.csr_matrix:
    """``x`` as a checked float64 CSR matrix whose arrays are read-only (shared with ``x`` where
    possible)."""
    x = x.tocsr()
    x = csr_from_arrays(x.data, x.indices, x.indptr, x.shape, name)
    for array in (x.data, x.indices, x.indptr):
        array.flags.writeable = False
    return x


def _labels(name: str, y: np.ndarray, classes: int) -> np.ndarray:
    bad = (y < 0) | (y >= classes) | (np.floor(y) != y)
    if bad.any():
        raise ValueError(f"{name} must hold integer class labels 0..{classes - 1} (got {y[bad][0]})")
    return y.astype(np.int64)


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that cannot be written through (the arrays a dataset hands out)."""
    view = array.view()
    view.flags.writeable = False
    return view
