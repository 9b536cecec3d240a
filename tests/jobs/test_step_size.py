"""The learning rates a convex model's data allow (coded.jobs.step_size), against an eigensolver
and against gradient descent itself."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from coded.jobs.spec.learning import AdamOptimizer, NesterovOptimizer, SGDOptimizer
from coded.jobs.step_size import curvature, lr_warnings, stable_lr
from coded.ml.models import LinearRegression, LogisticRegression, SoftmaxRegression
from coded.ml.models.mlp import MLP


def _rows(seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((400, 12)) * np.linspace(0.5, 3.0, 12) + 2.0  # the mean sets lambda_max apart


@pytest.mark.parametrize(("model", "head"), [(LinearRegression(12, l2=0.1), 1.0), (LogisticRegression(12), 0.25),
                                             (SoftmaxRegression(12, 3), 0.5)])
def test_the_curvature_is_the_head_times_the_rows_largest_second_moment(model, head):
    x = _rows()
    ones = np.column_stack([x, np.ones(len(x))])
    largest = np.linalg.eigvalsh(ones.T @ ones / len(x))[-1]  # independently: an eigensolver
    found = curvature(model, x)
    assert found is not None and found.second_moment == pytest.approx(largest, rel=1e-6)
    assert found.total == pytest.approx(head * largest + model.l2, rel=1e-6)
    sparse = curvature(model, scipy.sparse.csr_matrix(x))  # the same rows, stored sparse
    assert sparse is not None and sparse.total == pytest.approx(found.total, rel=1e-9)


def test_gradient_descent_diverges_just_above_the_stable_step_and_not_below():
    """On least squares (a quadratic) the bound is exact: the job's own optimizers, stepped."""
    from coded.ml.optim import SGD, Nesterov

    x = _rows()
    y = x @ np.linspace(-1, 1, 12) + 0.3
    model = LinearRegression(12)
    found = curvature(model, x)
    assert found is not None
    for spec, make in ((SGDOptimizer(type="sgd", lr=1.0, momentum=0.5), lambda lr: SGD(lr, momentum=0.5)),
                       (NesterovOptimizer(type="nesterov", lr=1.0), lambda lr: Nesterov(lr, momentum=0.9))):
        bound = stable_lr(spec, found.total)
        assert bound is not None
        for factor, diverges in ((1.05, True), (0.95, False)):
            optimizer, w = make(factor * bound), np.zeros(13)
            with np.errstate(all="ignore"):
                for _ in range(3000):
                    _, grad = model.loss_and_grad(w, x, y)
                    w = optimizer.step(w, grad / len(x))
            assert (not np.all(np.isfinite(w)) or np.abs(w).max() > 1e6) == diverges, (spec.type, factor)


def test_submission_warnings_say_the_bound_and_what_to_try():
    """Issue 56: the user guessed a learning rate for sparse data; a step above what the data allow,
    or a hundred times below it, is named with the bound and a step to try."""
    rng = np.random.default_rng(0)
    # one-hot sparse rows, 39 stored ones each, as in the user's svmlight file
    columns = rng.integers(0, 20_000, size=(2000, 39))
    x = scipy.sparse.csr_matrix((np.ones(columns.size), columns.ravel(), np.arange(0, columns.size + 1, 39)),
                                shape=(2000, 20_000))
    model = LogisticRegression(20_000)
    found = curvature(model, x)
    assert found is not None
    bound = stable_lr(NesterovOptimizer(type="nesterov", lr=1.0), found.total)
    assert bound is not None
    high, = lr_warnings(NesterovOptimizer(type="nesterov", lr=3 * bound), model, x)
    assert high.startswith(f"optimizer.lr {3 * bound:g} is above the step these data allow") and "try lr" in high
    assert f"is unstable above lr {bound:.3g}" in high
    low, = lr_warnings(NesterovOptimizer(type="nesterov", lr=bound / 500), model, x)
    assert "500 times below" in low
    assert lr_warnings(NesterovOptimizer(type="nesterov", lr=bound / 2), model, x) == ()
    assert lr_warnings(AdamOptimizer(type="adam", lr=100.0), model, x) == ()  # no bound for Adam
    assert curvature(MLP(20_000, 2, [8]), x) is None
