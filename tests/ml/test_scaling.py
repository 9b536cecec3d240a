"""Feature scales: standardising with the training rows' statistics, and the spread that warns."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from coded.ml.data import Dataset
from coded.ml.data import dataset as dataset_module
from coded.ml.data.scaling import spread, standardize


def test_standardize_uses_the_training_statistics_for_both_splits():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 3)) * [1.0, 1e3, 1e-3] + [5.0, -2e3, 0.0]
    x_test = rng.standard_normal((7, 3))
    data = standardize(Dataset(x, rng.integers(2, size=50), x_test, rng.integers(2, size=7), classes=2))
    # independently: column by column, with the population standard deviation of the training rows
    for j in range(3):
        mean, std = x[:, j].mean(), x[:, j].std()
        assert np.allclose(data.x_train[:, j], (x[:, j] - mean) / std)
        assert np.allclose(data.x_test[:, j], (x_test[:, j] - mean) / std)
    assert data.scaling is not None and np.allclose(data.scaling[1], x.std(axis=0))


def test_a_constant_feature_is_only_centred_and_sparse_data_are_refused():
    x = np.column_stack([np.full(4, 3.0), np.arange(4.0)])
    data = standardize(Dataset(x, np.zeros(4, int), x[:0], np.zeros(0, int), classes=2))
    assert np.array_equal(data.x_train[:, 0], np.zeros(4))
    sparse = Dataset(scipy.sparse.csr_matrix(x), np.zeros(4, int), scipy.sparse.csr_matrix(x[:0]), np.zeros(0, int),
                     classes=2)
    with pytest.raises(ValueError, match="make sparse data dense"):
        standardize(sparse)


def test_the_spread_names_the_widest_and_the_narrowest_varying_columns():
    x = np.column_stack([np.arange(6.0), np.full(6, 2.0), 1e4 * np.arange(6.0) % 7, 1e-2 * np.arange(6.0)])
    found = spread(x)
    assert (found.widest, found.narrowest) == (2, 3)  # the constant column 1 does not count
    assert found.ratio == pytest.approx(x[:, 2].std() / x[:, 3].std())
    assert spread(np.column_stack([np.arange(3.0), np.ones(3)])) is None


def test_standardizing_in_place_by_blocks_scales_the_dataset_s_own_rows(monkeypatch):
    monkeypatch.setattr(dataset_module, "BLOCK_BYTES", 2 * 3 * 8)  # two rows a block: 50 rows in 25 passes
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 3)) * [2.0, 1e3, 1e-3] + [5.0, -2e3, 1.0]
    x_test = rng.standard_normal((7, 3))
    own, own_test = x.copy(), x_test.copy()
    data = standardize(Dataset(own, np.zeros(50, int), own_test, np.zeros(7, int), classes=2), in_place=True)
    mean, std = x.mean(axis=0), x.std(axis=0)  # numpy's own, over the whole array at once
    assert np.allclose(data.x_train, (x - mean) / std) and np.allclose(data.x_test, (x_test - mean) / std)
    assert np.shares_memory(data.x_train, own) and np.shares_memory(data.x_test, own_test)
