"""CodeNet's network against oracles that share none of its code (issue 42): its backprop against
finite differences of a loss written here, and its training against an accuracy floor."""

from __future__ import annotations

import numpy as np

from coded.ml.data import gaussian_mixture
from coded.ml.network import Batches, Network, accuracy, train_reference


def mean_cross_entropy(weights: list[np.ndarray], x: np.ndarray, targets: np.ndarray) -> float:
    """The bias-free ReLU network's mean softmax cross-entropy over the columns of ``x``
    (features, B), written out: h <- max(W h, 0) below the last layer, then a softmax."""
    h = x
    for w in weights[:-1]:
        h = np.maximum(w @ h, 0.0)
    s = weights[-1] @ h
    log_p = s - s.max(axis=0) - np.log(np.exp(s - s.max(axis=0)).sum(axis=0))
    return float(-(targets * log_p).sum() / x.shape[1])


def test_one_step_of_the_reference_is_lr_times_minus_the_finite_difference_gradient():
    rng = np.random.default_rng(0)
    data = Batches(rng.standard_normal((40, 5)), rng.integers(0, 3, 40), np.zeros((0, 5)), np.zeros(0, int),
                   classes=3, size=8, seed=1)
    hidden, lr, seed = [4, 3], 0.1, 2
    start = Network(5, hidden, 3).initial_weights(seed)
    stepped = train_reference(data, hidden, lr, seed, iterations=1)
    x, targets = data.batch(0)
    eps = 1e-6
    for layer, w in enumerate(start):
        for index in np.ndindex(w.shape):
            plus = [a.copy() for a in start]
            minus = [a.copy() for a in start]
            plus[layer][index] += eps
            minus[layer][index] -= eps
            gradient = (mean_cross_entropy(plus, x, targets) - mean_cross_entropy(minus, x, targets)) / (2 * eps)
            assert np.isclose((stepped[layer][index] - w[index]) / lr, -gradient, rtol=1e-5, atol=1e-8), \
                (layer, index)


def test_the_reference_training_learns_a_separable_mixture():
    data = gaussian_mixture(1200, 10, classes=3, seed=4)
    batches = Batches(np.asarray(data.x_train), np.asarray(data.y_train), np.asarray(data.x_test),
                      np.asarray(data.y_test), classes=3, size=32, seed=5)
    untrained = accuracy(Network(10, [16], 3).initial_weights(6), batches.x_test, batches.y_test)
    trained = accuracy(train_reference(batches, [16], 0.1, 6, 300), batches.x_test, batches.y_test)
    # independently: the test set's majority class is the floor that learning nothing reaches
    majority = np.bincount(batches.y_test).max() / len(batches.y_test)
    assert trained >= 0.8 and trained > majority + 0.3 and trained > untrained, (trained, majority, untrained)
