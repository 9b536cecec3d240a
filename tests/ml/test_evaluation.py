"""Test metrics against direct computations and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from coded.ml.evaluation import evaluate, roc_auc
from coded.ml.models import MLP, LinearRegression, LogisticRegression, SoftmaxRegression


def test_regression_loss_is_the_mean_half_squared_error():
    rng = np.random.default_rng(0)
    x, y, params = rng.standard_normal((40, 3)), rng.standard_normal(40), rng.standard_normal(4)
    metrics = evaluate(LinearRegression(3, l2=5.0), params, x, y)  # the regularizer is left out
    assert metrics == {"loss": pytest.approx(np.mean(0.5 * (x @ params[:3] + params[3] - y) ** 2))}


def test_binary_metrics():
    rng = np.random.default_rng(1)
    x, y, params = rng.standard_normal((200, 4)), rng.integers(2, size=200), rng.standard_normal(5)
    positive = 1 / (1 + np.exp(-(x @ params[:4] + params[4])))
    metrics = evaluate(LogisticRegression(4, l2=3.0), params, x, y)
    assert metrics["loss"] == pytest.approx(log_loss(y, positive))
    assert metrics["accuracy"] == pytest.approx(np.mean((positive > 0.5) == y))
    assert metrics["auc"] == pytest.approx(roc_auc_score(y, positive))


@pytest.mark.parametrize("model", [SoftmaxRegression(5, 4), MLP(5, 4, [6])], ids=["softmax", "mlp"])
def test_multiclass_metrics(model):
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((300, 5)), rng.integers(4, size=300)
    params = rng.standard_normal(model.size)
    probabilities = model.predict(params, x)
    metrics = evaluate(model, params, x, y)
    assert set(metrics) == {"loss", "accuracy", "auc"}
    assert metrics["loss"] == pytest.approx(log_loss(y, probabilities, labels=range(4)))
    assert metrics["accuracy"] == pytest.approx(np.mean(probabilities.argmax(axis=1) == y))
    assert metrics["auc"] == pytest.approx(roc_auc_score(y, probabilities, multi_class="ovr", average="macro"))


def test_auc_over_the_classes_present():
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.ones(4), size=50)
    labels = rng.choice([0, 2], size=50)
    expected = np.mean([roc_auc_score(labels == c, probabilities[:, c]) for c in (0, 2)])
    assert roc_auc(labels, probabilities) == pytest.approx(expected)
    assert roc_auc(np.ones(50, dtype=int), probabilities) is None


def test_auc_with_tied_scores_matches_scikit_learn():
    rng = np.random.default_rng(4)
    positive = rng.integers(5, size=500) / 4.0  # five distinct scores: every one tied many times
    labels = (rng.random(500) < 0.3 + 0.4 * positive).astype(int)
    assert roc_auc(labels, np.c_[1 - positive, positive]) == pytest.approx(roc_auc_score(labels, positive))
    assert roc_auc(labels, np.full((500, 2), 0.5)) == pytest.approx(0.5)


def test_auc_of_probabilities_that_are_not_finite_is_none():
    probabilities = np.array([[0.2, 0.8], [np.nan, np.nan], [0.9, 0.1]])
    assert roc_auc(np.array([1, 0, 0]), probabilities) is None


def test_single_class_and_empty_sets():
    model, params = LogisticRegression(2), np.array([1.0, 0.0, 0.0])
    metrics = evaluate(model, params, np.ones((3, 2)), np.ones(3, dtype=int))
    assert metrics["auc"] is None and metrics["accuracy"] == 1.0
    empty = evaluate(model, params, np.empty((0, 2)), np.empty(0, dtype=int))
    assert empty == {"loss": None, "accuracy": None, "auc": None}
    assert evaluate(LinearRegression(2), params, np.empty((0, 2)), np.empty(0)) == {"loss": None}


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match=r"y must hold class labels 0\.\.1"):
        evaluate(LogisticRegression(2), np.zeros(3), np.ones((2, 2)), np.array([0, 2]))
    with pytest.raises(ValueError, match=r"x must have shape \(b, 2\)"):
        evaluate(LogisticRegression(2), np.zeros(3), np.ones((2, 3)), np.array([0, 1]))
