"""The network CodeNet trains, the same on every peer: sizes, initial weights, batches, and the
nonlinear steps between coded products. Also a plain single-process training with the same math,
the reference every coded run is compared with.

The network is a bias-free MLP (as in the papers): ``s^l = W^l x^l``, ``x^(l+1) = relu(s^l)``,
softmax cross-entropy on the last layer. With ``delta = -dE/ds`` (mean over the batch) the update
is ``W^l <- W^l + lr * delta^l (x^l)^T`` and ``delta^(l-1) = (W^l)^T delta^l * [x^l > 0]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.data import Dataset, digits, gaussian_mixture
from common.data.idx import read_idx
from common.jobspec import CodeNetJob

__all__ = ["Network", "Batches", "load_codenet_data", "train_reference", "accuracy"]


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


def load_codenet_data(spec: CodeNetJob, files: Mapping[str, Path] | None = None) -> Batches:
    data = spec.data
    if data.type == "digits":
        dataset = digits(seed=data.seed)
    elif data.type == "gaussian_mixture":
        dataset = gaussian_mixture(data.samples, data.features, data.classes, seed=data.seed)
    else:
        images = read_idx((files or {})[str(data.images)])
        labels = read_idx((files or {})[str(data.labels)])
        images = images.reshape(len(images), -1).astype(np.float64) / 255.0
        if len(labels) != len(images) or labels.ndim != 1:
            raise ValueError(f"mnist: {len(images)} images but labels of shape {labels.shape}")
        cut = len(labels) - len(labels) // 7  # 60000/10000 like MNIST's own split
        order = np.random.default_rng(data.seed).permutation(len(labels))
        dataset = Dataset(images[order[:cut]], labels[order[:cut]].astype(np.int64), images[order[cut:]],
                          labels[order[cut:]].astype(np.int64), classes=int(labels.max()) + 1, name="mnist")
    if spec.optimizer.batch > len(dataset.y_train):
        raise ValueError(f"optimizer.batch: {spec.optimizer.batch} > {len(dataset.y_train)} training samples")
    return Batches(np.asarray(dataset.x_train), np.asarray(dataset.y_train, dtype=np.int64),
                   np.asarray(dataset.x_test), np.asarray(dataset.y_test, dtype=np.int64),
                   dataset.classes, spec.optimizer.batch, spec.seed)


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
        return [rng.standard_normal((out, inp)) * np.sqrt(2.0 / inp) for inp, out in zip(self.sizes[:-1], self.sizes[1:])]

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


def train_reference(spec: CodeNetJob, data: Batches, iterations: int | None = None) -> list[np.ndarray]:
    """The same training in one process with plain numpy: what an error-free coded run must equal."""
    network = Network(data.x_train.shape[1], spec.model.hidden, data.classes)
    weights = network.initial_weights(spec.seed)
    for iteration in range(spec.iterations if iterations is None else iterations):
        x, targets = data.batch(iteration)
        inputs = [x]
        for l, w in enumerate(weights):
            inputs.append(network.activate(w @ inputs[-1], l == network.layers - 1))
        delta = network.output_delta(inputs[-1], targets)
        for l in reversed(range(network.layers)):
            previous = network.hidden_delta(weights[l].T @ delta, inputs[l]) if l else None
            weights[l] = weights[l] + spec.optimizer.lr * delta @ inputs[l].T
            delta = previous
    return weights


def accuracy(weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Test accuracy of the network ``weights`` on samples x (N, features)."""
    h = x.T
    for l, w in enumerate(weights):
        h = Network.activate(w @ h, l == len(weights) - 1)
    return float(np.mean(h.argmax(axis=0) == y))
