"""load_dataset dispatch and the Dataset container's own validation."""

from __future__ import annotations

import numpy as np
import pytest

from common.data import DATA_TYPES, Dataset, digits, gaussian_mixture, linear_regression, load_dataset


def same(a: Dataset, b: Dataset) -> bool:
    names = ("x_train", "y_train", "x_test", "y_test")
    return all(np.array_equal(getattr(a, n), getattr(b, n)) for n in names) and a.classes == b.classes


@pytest.mark.parametrize(
    ("spec", "direct"),
    [
        ({"type": "gaussian_mixture", "samples": 500, "features": 6, "classes": 3, "seed": 1},
         lambda: gaussian_mixture(500, 6, classes=3, seed=1)),
        ({"type": "gaussian_mixture", "samples": 500, "features": 6}, lambda: gaussian_mixture(500, 6)),
        ({"type": "linear", "samples": 300, "features": 4, "noise": 0.3, "seed": 2, "test_fraction": 0.5},
         lambda: linear_regression(300, 4, noise=0.3, seed=2, test_fraction=0.5)),
        ({"type": "digits", "seed": 3}, lambda: digits(seed=3)),
    ],
)
def test_generated_types(spec, direct):
    assert same(load_dataset(spec), direct())


def test_file_types(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.eye(4), y=np.array([0.5, 1.0, 2.0, 3.0]))
    data = load_dataset({"type": "npz", "path": str(tmp_path / "d.npz"), "task": "regression"})
    assert data.classes == 0 and data.features == 4
    (tmp_path / "upload.bin").write_text("0,0,0\n0,1,1\n1,0,1\n", encoding="utf-8")
    data = load_dataset({"type": "csv", "path": tmp_path / "upload.bin"})  # format from the type
    assert data.classes == 2 and data.x_train.shape == (3, 2)
    assert set(DATA_TYPES) == {"gaussian_mixture", "linear", "digits", "npz", "csv"}


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ({"type": "mnist"}, ValueError, r"data type must be one of gaussian_mixture, linear, digits, npz, csv \(got 'mnist'\)"),
        ({"samples": 10}, ValueError, r"data type must be one of .* \(got None\)"),
        ({"type": "digits", "samples": 10}, ValueError, r"unknown key 'samples' for data type 'digits' \(allowed: seed, test_fraction\)"),
        ({"type": "linear", "samples": 10, "features": 2, "classes": 2}, ValueError, "unknown key 'classes' for data type 'linear'"),
        ({"type": "csv", "path": "a.csv", "format": "npz"}, ValueError, r"unknown key 'format' for data type 'csv' \(allowed: path, task\)"),
        ({"type": "npz"}, ValueError, "data type 'npz' needs 'path'"),
        ({"type": "gaussian_mixture", "features": 3}, ValueError, "data type 'gaussian_mixture' needs 'samples'"),
        ({"type": "gaussian_mixture", "samples": "many", "features": 3}, TypeError, "samples must be an integer"),
        ("digits", TypeError, r"data spec must be a mapping \(got str\)"),
    ],
)
def test_bad_specs(spec, error, message):
    with pytest.raises(error, match=message):
        load_dataset(spec)


def test_dataset_validates_and_converts():
    data = Dataset(np.ones((3, 2), dtype=np.float32), np.array([0.0, 1.0, 2.0]), np.ones((1, 2)), np.array([1]), classes=3)
    assert data.x_train.dtype == np.float64 and data.y_train.dtype == np.int64
    assert (data.features, data.task, data.name) == (2, "classification", "dataset")
    regression = Dataset(np.ones((2, 1)), np.array([0.5, 1.5]), np.ones((0, 1)), np.ones(0), classes=0)
    assert regression.task == "regression" and regression.y_train.dtype == np.float64


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((np.ones((2, 2)), np.array([0, 1]), np.ones((0, 2)), np.ones(0), 1), ValueError, r"classes must be 0 \(regression\) or >= 2 \(got 1\)"),
        ((np.ones((2, 2)), np.array([0, 2]), np.ones((0, 2)), np.ones(0), 2), ValueError, r"y_train must hold integer class labels 0..1 \(got 2.0\)"),
        ((np.ones((2, 2)), np.array([0, 1]), np.ones((1, 2)), np.array([0.5]), 2), ValueError, "y_test must hold integer class labels"),
        ((np.ones((2, 0)), np.array([0, 1]), np.ones((0, 0)), np.ones(0), 2), ValueError, "the training set must have samples and features"),
        ((np.array([["a", "b"]]), np.array([0]), np.ones((0, 2)), np.ones(0), 0), TypeError, r"x_train must be a real numeric array \(got dtype <U1\)"),
        ((np.ones((2, 2)), np.array([0, 1]), np.ones((0, 2)), np.ones(0), 2.0), TypeError, r"classes must be an integer \(got 2.0\)"),
    ],
)
def test_dataset_errors(arguments, error, message):
    with pytest.raises(error, match=message):
        Dataset(*arguments)
