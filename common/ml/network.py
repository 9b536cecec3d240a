"""The network CodeNet trains, the same on every peer: sizes, initial weights, batches, and the
nonlinear steps between coded products. Also a plain single-process training with the same math,
the reference every coded run is compared with.

The network is a bias-free MLP (as in the papers): ``s^l = W^l x^l``, ``x^(l+1) = relu(s^l)``,
softmax cross-entropy on the last layer. With ``delta = -dE/ds`` (mean over the batch) the update
is ``W^l <- W^l + lr * delta^l (x^l)^T`` and ``delta^(l-1) = (W^l)^T delta^l * [x^l > 0]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Batches", "Network", "accuracy", "train_reference"]


@dataclass(frozen=True)
class Batches:
    """Training and test data; batch k is a function of (seed, k) only, so a rollback replays it."""

    x_train: np.ndarray  # (N, features)
    y_train: np.ndarray  # (N,) labels
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int
    size: int
    seed: int

    def batch(self, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """Inputs (features, B) and one-hot targets (classes, B) of an iteration."""
        rows = np.random.default_rng([self.seed, iteration]).choice(len(self.y_train), self.size, replace=False)
        return self.x_train[rows].T.copy(), np.eye(self.classes)[self.y_train[rows]].T


class Network:
    """Layer sizes, initial weights and the steps between products, for one job."""

    def __init__(self, features: int, hidden: Sequence[int], classes: int) -> None:
        self.sizes = (features, *hidden, classes)

    @property
    def layers(self) -> int:
        return len(self.sizes) - 1

    def initial_weights(self, seed: int) -> list[np.ndarray]:
        """He-normal W^l of shape (N_l, N_(l-1)), from the job seed alone."""
        rng = np.random.default_rng([seed, 0xC0DE])
        return [rng.standard_normal((out, inp)) * np.sqrt(2.0 / inp)
                for inp, out in zip(self.sizes[:-1], self.sizes[1:], strict=True)]

    @staticmethod
    def activate(s: np.ndarray, last: bool) -> np.ndarray:
        """x^(l+1) from s^l: relu, or the softmax probabilities of the last layer."""
        if not last:
            return np.maximum(s, 0.0)
        z = s - s.max(axis=0, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=0, keepdims=True)

    @staticmethod
    def output_delta(probabilities: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """delta^L = -dE/ds^L for the mean cross-entropy over the batch."""
        return (targets - probabilities) / targets.shape[1]

    @staticmethod
    def hidden_delta(c: np.ndarray, x: np.ndarray) -> np.ndarray:
        """delta^(l-1) = c^l * relu'(s^(l-1)), with relu' read off x^l = relu(s^(l-1))."""
        return c * (x > 0)


def train_reference(data: Batches, hidden: Sequence[int], lr: float, seed: int, iterations: int) -> list[np.ndarray]:
    """The same training in one process with plain numpy: what an error-free coded run must equal."""
    network = Network(data.x_train.shape[1], hidden, data.classes)
    weights = network.initial_weights(seed)
    for iteration in range(iterations):
        x, targets = data.batch(iteration)
        inputs = [x]
        for l, w in enumerate(weights):
            inputs.append(network.activate(w @ inputs[-1], l == network.layers - 1))
        delta = network.output_delta(inputs[-1], targets)
        for l in reversed(range(network.layers)):
            step = lr * delta @ inputs[l].T
            if l:  # the delta of the layer below, from the weights before this step
                delta = network.hidden_delta(weights[l].T @ delta, inputs[l])
            weights[l] = weights[l] + step
    return weights


def accuracy(weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Test accuracy of the network ``weights`` on samples x (N, features)."""
    h = x.T
    for l, w in enumerate(weights):
        h = Network.activate(w @ h, l == len(weights) - 1)
    return float(np.mean(h.argmax(axis=0) == y))
