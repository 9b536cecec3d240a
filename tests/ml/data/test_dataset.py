"""The Dataset container's own validation."""

from __future__ import annotations

import numpy as np
import pytest

from coded.ml.data import Dataset


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
