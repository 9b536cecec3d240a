"""The Dataset container's own validation, and holding out a test set."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from coded.ml.data import Dataset
from coded.ml.data import dataset as dataset_module
from coded.ml.data.dataset import hold_out


def test_dataset_validates_and_converts():
    data = Dataset(np.ones((3, 2), dtype=np.float32), np.array([0.0, 1.0, 2.0]), np.ones((1, 2)), np.array([1]),
                   classes=3)
    assert data.x_train.dtype == np.float64 and data.y_train.dtype == np.int64
    assert (data.features, data.task, data.name) == (2, "classification", "dataset")
    regression = Dataset(np.ones((2, 1)), np.array([0.5, 1.5]), np.ones((0, 1)), np.ones(0), classes=0)
    assert regression.task == "regression" and regression.y_train.dtype == np.float64


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((np.ones((2, 2)), np.array([0, 1]), np.ones((0, 2)), np.ones(0), 1), ValueError,
         r"classes must be 0 \(regression\) or >= 2 \(got 1\)"),
        ((np.ones((2, 2)), np.array([0, 2]), np.ones((0, 2)), np.ones(0), 2), ValueError,
         r"y_train must hold integer class labels 0..1 \(got 2.0\)"),
        ((np.ones((2, 2)), np.array([0, 1]), np.ones((1, 2)), np.array([0.5]), 2), ValueError,
         "y_test must hold integer class labels"),
        ((np.ones((2, 0)), np.array([0, 1]), np.ones((0, 0)), np.ones(0), 2), ValueError,
         "the training set must have samples and features"),
        ((np.array([["a", "b"]]), np.array([0]), np.ones((0, 2)), np.ones(0), 0), TypeError,
         r"x_train must be a real numeric array \(got dtype <U1\)"),
        ((np.ones((2, 2)), np.array([0, 1]), np.ones((0, 2)), np.ones(0), 2.0), TypeError,
         r"classes must be an integer \(got 2.0\)"),
    ],
)
def test_dataset_errors(arguments, error, message):
    with pytest.raises(error, match=message):
        Dataset(*arguments)


def _file_like(rows: int, features: int, sparse: bool) -> Dataset:
    """A dataset whose arrays sit in writable memory it does not own, as a loaded file's do."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, features)) * (rng.random((rows, features)) < (0.3 if sparse else 1.1))
    y = rng.integers(0, 3, rows)
    if sparse:
        csr = scipy.sparse.csr_matrix(x)
        x = scipy.sparse.csr_matrix((np.frombuffer(bytearray(csr.data.tobytes())),
                                     np.frombuffer(bytearray(csr.indices.tobytes()), dtype=csr.indices.dtype),
                                     csr.indptr), shape=csr.shape)
        empty = x[:0]
    else:
        x = np.frombuffer(bytearray(x.tobytes())).reshape(rows, features)
        empty = np.empty((0, features))
    return Dataset(x, y, empty, y[:0], classes=3)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("fraction", [0.25, 0.75])  # 0.75: fewer than half the values stay (scipy would copy)
def test_holding_out_keeps_the_other_rows_in_order_and_moves_them_in_place_when_asked(sparse, in_place, fraction,
                                                                                      monkeypatch):
    monkeypatch.setattr(dataset_module, "BLOCK_BYTES", 3 * 8 * 7)  # blocks of 3 rows: moves cross blocks
    data = _file_like(101, 7, sparse)
    x = data.x_train.toarray() if sparse else np.array(data.x_train)
    y = np.array(data.y_train)
    held = hold_out(data, fraction, seed=5, in_place=in_place)
    # independently: the seeded permutation's last ceil(fraction * 101) rows are the test set
    test = np.random.default_rng(5).permutation(101)[101 - int(np.ceil(fraction * 101)):]
    train = np.setdiff1d(np.arange(101), test)
    dense = (lambda m: m.toarray()) if sparse else np.asarray
    assert np.array_equal(dense(held.x_test), x[test]) and np.array_equal(held.y_test, y[test])
    assert np.array_equal(dense(held.x_train), x[train]) and np.array_equal(held.y_train, y[train])
    source = data.x_train.data if sparse else data.x_train
    kept = held.x_train.data if sparse else held.x_train
    assert np.shares_memory(kept, source) == in_place
    if not in_place:  # the dataset it was given is untouched
        assert np.array_equal(dense(data.x_train), x)


def test_holding_out_refuses_a_split_with_no_training_row():
    with pytest.raises(ValueError, match="leaves no training sample"):
        hold_out(_file_like(3, 2, False), 1.0, seed=0)


def test_a_value_that_is_not_finite_is_found_in_any_block(monkeypatch):
    monkeypatch.setattr(dataset_module, "BLOCK_BYTES", 16)  # one row of two features per block
    x = np.ones((9, 2))
    x[7, 1] = np.inf
    with pytest.raises(ValueError, match="x_train must be finite"):
        Dataset(x, np.zeros(9), np.ones((0, 2)), np.zeros(0), classes=0)
