"""Synthetic and bundled datasets: determinism, shapes, labels, difficulty, errors."""

from __future__ import annotations

import socket
import tracemalloc

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LinearRegression as LeastSquares
from sklearn.linear_model import LogisticRegression as SkLogistic

from coded.ml.data import Dataset, digits, gaussian_mixture, linear_recipe, linear_regression, mixture_recipe
from coded.ml.data.synthetic import BLOCK_ROWS

ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def same(a: Dataset, b: Dataset) -> bool:
    return all(np.array_equal(getattr(a, name), getattr(b, name)) for name in ARRAYS)


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: gaussian_mixture(300, 7, seed=seed),
        lambda seed: gaussian_mixture(300, 7, classes=4, seed=seed),
        lambda seed: gaussian_mixture(300, 3, classes=6, seed=seed),
        lambda seed: linear_regression(300, 7, seed=seed),
        lambda seed: digits(seed=seed),
    ],
    ids=["binary", "multiclass", "few_features", "linear", "digits"],
)
def test_deterministic_given_the_seed(make):
    assert same(make(5), make(5))
    assert not same(make(5), make(6))


@pytest.mark.parametrize(("samples", "fraction", "train", "test"),
                         [(1000, 0.2, 800, 200), (11, 0.25, 8, 3), (2, 0.2, 1, 1), (50, 0.0, 50, 0)])
def test_split_sizes(samples, fraction, train, test):
    for data in (gaussian_mixture(samples, 4, test_fraction=fraction),
                 linear_regression(samples, 4, test_fraction=fraction)):
        assert data.x_train.shape == (train, 4) and data.y_train.shape == (train,)
        assert data.x_test.shape == (test, 4) and data.y_test.shape == (test,)
        assert data.features == 4 and data.x_train.dtype == np.float64


@pytest.mark.parametrize("classes", [2, 3, 7])
def test_labels(classes):
    data = gaussian_mixture(2000, 10, classes=classes, seed=3)
    assert data.classes == classes and data.task == "classification"
    for y in (data.y_train, data.y_test):
        assert y.dtype == np.int64
        assert set(np.unique(y).tolist()) == set(range(classes))
    counts = np.bincount(data.y_train) / len(data.y_train)
    assert counts.min() > 0.6 / classes and counts.max() < 1.4 / classes


def test_binary_mixture_is_tandons_model():
    """x . beta* ~ N(+-1.5, 10^2), unit-variance features, labels Bernoulli(sigmoid(x . beta*))."""
    data = gaussian_mixture(40000, 50, seed=4, test_fraction=0.0)
    assert data.x_train.std(axis=0) == pytest.approx(np.ones(50), abs=0.03)
    model = SkLogistic(C=1e6, max_iter=2000).fit(data.x_train, data.y_train)
    beta = model.coef_[0]
    assert np.linalg.norm(beta) == pytest.approx(10.0, rel=0.1)
    assert np.abs(beta).std() / np.abs(beta).mean() < 0.1  # beta* = (10/sqrt(f)) * signs
    assert abs(model.intercept_[0]) < 0.3


@pytest.mark.parametrize(("classes", "features", "low", "high"),
                         [(2, 20, 0.90, 0.97), (3, 10, 0.88, 0.96), (10, 20, 0.86, 0.95)])
def test_linear_classifier_is_good_but_not_perfect(classes, features, low, high):
    data = gaussian_mixture(12000, features, classes=classes, seed=7)
    model = SkLogistic(max_iter=2000).fit(data.x_train, data.y_train)
    assert low < model.score(data.x_test, data.y_test) < high


def test_linear_regression_data():
    data = linear_regression(5000, 8, noise=0.5, seed=2)
    assert data.classes == 0 and data.task == "regression" and data.y_train.dtype == np.float64
    fit = LeastSquares().fit(data.x_train, data.y_train)
    assert np.std(data.y_test - fit.predict(data.x_test)) == pytest.approx(0.5, rel=0.1)
    exact = linear_regression(50, 3, noise=0.0, seed=2)
    fit = LeastSquares().fit(exact.x_train, exact.y_train)
    np.testing.assert_allclose(fit.predict(exact.x_test), exact.y_test, atol=1e-10)


def test_digits_loads_offline(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("digits must not touch the network")

    monkeypatch.setattr(socket, "socket", no_network)
    data = digits(seed=1, test_fraction=0.25)
    assert data.x_train.shape == (1347, 64) and data.x_test.shape == (450, 64)
    assert data.classes == 10 and set(np.unique(data.y_train).tolist()) == set(range(10))
    assert data.x_train.min() == 0.0 and data.x_train.max() == 1.0
    bundled = load_digits()
    labels = np.concatenate([data.y_train, data.y_test])
    np.testing.assert_array_equal(np.sort(labels), np.sort(bundled.target))  # a permutation of all 1797
    pixels = np.concatenate([data.x_train, data.x_test]).sum()
    assert pixels == pytest.approx(bundled.data.sum() / 16.0)


def test_arrays_are_read_only():
    data = gaussian_mixture(20, 2)
    with pytest.raises(ValueError, match="read-only"):
        data.x_train[0, 0] = 1.0
    rows = data.x_train[[0, 1]]
    rows[0, 0] = 1.0  # indexing gives writable copies


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: gaussian_mixture(1, 3), ValueError, r"samples must be >= 2 \(got 1\)"),
        (lambda: gaussian_mixture(100.0, 3), TypeError, r"samples must be an integer \(got 100.0\)"),
        (lambda: gaussian_mixture(100, 0), ValueError, r"features must be >= 1 \(got 0\)"),
        (lambda: gaussian_mixture(100, 3, classes=1), ValueError, r"classes must be >= 2 \(got 1\)"),
        (lambda: gaussian_mixture(100, 3, seed=-1), ValueError, r"seed must be >= 0 \(got -1\)"),
        (lambda: gaussian_mixture(100, 3, test_fraction=1.0), ValueError,
         r"test_fraction must be finite and in \[0, 1\) \(got 1.0\)"),
        (lambda: linear_regression(100, 3, test_fraction="0.2"), TypeError, "test_fraction must be a real number"),
        (lambda: linear_regression(100, 3, noise=-1.0), ValueError,
         r"noise must be finite and in \[0, inf\) \(got -1.0\)"),
        (lambda: linear_regression(3, 3, test_fraction=0.9), ValueError,
         "test_fraction=0.9 of 3 samples leaves no training sample"),
        (lambda: digits(seed=1.5), TypeError, "seed must be an integer"),
    ],
)
def test_bad_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("recipe", [
    lambda: mixture_recipe(3 * BLOCK_ROWS + 17, 4, seed=2),
    lambda: mixture_recipe(3 * BLOCK_ROWS + 17, 4, classes=5, seed=2),
    lambda: linear_recipe(3 * BLOCK_ROWS + 17, 4, seed=2),
], ids=["binary", "multiclass", "linear"])
def test_rows_drawn_alone_are_the_rows_of_the_whole_dataset(recipe):
    made = recipe()
    whole = made.dataset()
    x = np.concatenate([whole.x_train, whole.x_test])
    y = np.concatenate([whole.y_train, whole.y_test])
    # within a block, across a block's edge, one row, the last block (shorter), none
    for rows in ([5, 6, 7], [BLOCK_ROWS - 2, BLOCK_ROWS - 1, BLOCK_ROWS, 2 * BLOCK_ROWS + 9], [0],
                 [3 * BLOCK_ROWS, made.samples - 1], []):
        got_x, got_y = made.rows(np.array(rows, dtype=np.int64))
        assert np.array_equal(got_x, x[rows]) and np.array_equal(got_y, y[rows]), rows
    assert np.array_equal(made.labels(), whole.y_train)
    with pytest.raises(ValueError, match="ascending"):
        made.rows(np.array([3, 2]))
    with pytest.raises(ValueError, match="ascending"):
        made.rows(np.array([made.samples]))


def test_drawing_rows_takes_memory_for_the_rows_and_one_block_not_the_dataset():
    features = 64
    made = mixture_recipe(40 * BLOCK_ROWS, features, seed=1)  # 80 MB of x in all
    rows = np.arange(7 * BLOCK_ROWS + 100, 8 * BLOCK_ROWS + 300)  # across two blocks
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        x, _ = made.rows(rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    block = BLOCK_ROWS * features * 8
    # a block and its draw's temporaries (the means added, the rows taken) at a time
    assert x.nbytes < peak <= x.nbytes + 5 * block < made.samples * features * 8 / 4, (peak, x.nbytes, block)
