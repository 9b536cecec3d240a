"""``Model.accumulate``: scaled partial gradients added into an array the caller owns, the way a
worker builds its message (``sum_j c_j g_j``), checked against plain numpy formulas and against
the dense computation for sparse rows (whose product adds into the message without a
temporary: coded.ml.models.products)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from coded.ml.data.sparse import row_slice
from coded.ml.models import MLP, LinearRegression, LogisticRegression, SoftmaxRegression
from coded.ml.models.products import add_transposed_product


def _sparse_rows(rows: int, features: int, seed: int) -> scipy.sparse.csr_matrix:
    return scipy.sparse.random(rows, features, density=0.05, format="csr", random_state=seed) * 3.0


def test_logistic_accumulate_is_the_scaled_closed_form():
    """sum_j c_j (X_j^T (sigmoid(X_j w + b) - y_j)), and the scaled losses, written independently."""
    rng = np.random.default_rng(0)
    model = LogisticRegression(30, l2=0.0)
    params = rng.normal(scale=0.3, size=model.size)
    w, b = params[:-1], params[-1]
    out = rng.standard_normal(model.size + 1)  # what was there stays: added to
    want = out.copy()
    for scale in (0.5, -1.75, 1.0):
        x = rng.standard_normal((17, 30))
        y = rng.integers(2, size=17)
        z = x @ w + b
        residual = 1 / (1 + np.exp(-z)) - y
        want[:-2] += scale * (x.T @ residual)
        want[-2] += scale * residual.sum()
        want[-1] += scale * np.sum(np.log1p(np.exp(z)) - y * z)
        model.accumulate(params, x, y, out, scale=scale)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model", [LinearRegression(40), LogisticRegression(40), SoftmaxRegression(40, 4),
                                   MLP(40, 3, [5])], ids=repr)
def test_sparse_rows_accumulate_as_their_dense_copy(model):
    rng = np.random.default_rng(1)
    params = rng.normal(scale=0.4, size=model.size)
    x = _sparse_rows(25, 40, seed=2)
    y = rng.standard_normal(25) if model.task == "regression" else rng.integers(model.classes, size=25)
    sparse_out, dense_out = np.full(model.size + 1, 0.25), np.full(model.size + 1, 0.25)
    model.accumulate(params, x, y, sparse_out, scale=-0.6)
    model.accumulate(params, x.toarray(), y, dense_out, scale=-0.6)
    np.testing.assert_allclose(sparse_out, dense_out, rtol=1e-12, atol=1e-12)


def test_rows_sliced_out_of_a_larger_matrix():
    """A worker's pieces are rows of its partition over the partition's own arrays (indptr not
    starting at 0): the product reads exactly those rows."""
    x = _sparse_rows(50, 60, seed=4)
    dz = np.random.default_rng(5).standard_normal((12, 1))
    out = np.zeros((60, 1))
    add_transposed_product(row_slice(x, 20, 32), dz, out)
    np.testing.assert_allclose(out, x[20:32].toarray().T @ dz, rtol=1e-12, atol=1e-12)


def test_several_outputs_add_column_by_column():
    x = _sparse_rows(30, 20, seed=6)
    dz = np.random.default_rng(7).standard_normal((30, 3))
    out = np.ones((20, 3))
    add_transposed_product(x, dz, out)
    np.testing.assert_allclose(out, 1.0 + x.toarray().T @ dz, rtol=1e-12, atol=1e-12)


def test_partial_is_accumulate_into_zeros():
    rng = np.random.default_rng(8)
    model = SoftmaxRegression(12, 3, l2=0.1)
    params = rng.standard_normal(model.size)
    x, y = rng.standard_normal((9, 12)), rng.integers(3, size=9)
    out = np.zeros(model.size + 1)
    model.accumulate(params, x, y, out)
    loss, grad = model.loss_and_grad(params, x, y)
    np.testing.assert_array_equal(model.partial(params, x, y), out)
    np.testing.assert_allclose(out[:-1], grad, rtol=1e-13, atol=1e-13)
    assert out[-1] == pytest.approx(loss, rel=1e-13)


def test_an_output_of_another_shape_is_refused():
    model = LogisticRegression(4)
    with pytest.raises(ValueError, match=r"out must be float64 of shape \(6,\)"):
        model.accumulate(np.zeros(5), np.zeros((2, 4)), np.array([0, 1]), np.zeros(5))
