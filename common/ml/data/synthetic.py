"""Seeded synthetic datasets: Tandon et al.'s Gaussian mixture, a multi-class mixture, least squares.

Each generator is a pure function of its arguments: the same seed gives bit-identical arrays.
All samples are drawn i.i.d.; the last ``ceil(test_fraction * samples)`` form the test set.

A dataset's shared draws (its mixture's means, its regression's weights) come from one seeded
stream; its samples come in blocks of ``BLOCK_ROWS``, each block from a stream of its own (the
seed, the block). So any set of rows can be drawn alone (:meth:`Synthetic.rows`), in memory that
grows with the rows asked for, not with the dataset: a worker draws only the partitions it holds,
and every holder of a partition draws the same rows as the whole dataset holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coded.base.checks import check_int, check_real

from .dataset import TEST_FRACTION, Dataset, kept_for_training

__all__ = ["BINARY_SHIFT", "BINARY_SIGNAL", "BLOCK_ROWS", "Synthetic", "gaussian_mixture", "linear_recipe",
           "linear_regression", "mixture_recipe"]

#: Norm of beta* in the binary mixture: x . beta* has standard deviation 10 within a component.
BINARY_SIGNAL = 10.0
#: Mean of x . beta* in the two components (+-).
BINARY_SHIFT = 1.5
#: samples per block, each block drawn from its own stream: at 500 features a block is 16 MB
BLOCK_ROWS = 4096

#: draws ``count`` samples of one block from its stream: (x (count, f), y (count,))
Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Synthetic:
    """A generated dataset, drawn as asked: the whole (:meth:`dataset`), some rows (:meth:`rows`),
    or only the labels (:meth:`labels`).

    Attributes
    ----------
    samples : int
        Training and test samples together; rows ``0 .. train - 1`` are the training set.
    features : int
    classes : int
        >= 2, or 0 for regression.
    train : int
        Training samples (the rest, at the end, are the test set).
    name : str
    draw : callable
        Draws one block's samples from the block's stream (the shared draws bound in).
    seed : int
    """

    samples: int
    features: int
    classes: int
    train: int
    name: str
    draw: Draw
    seed: int

    def _block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        count = min(BLOCK_ROWS, self.samples - block * BLOCK_ROWS)
        return self.draw(np.random.default_rng([self.seed, 1, block]), count)

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Samples ``rows`` (ascending indices into 0 .. samples - 1): x (len(rows), f) float64 and
        y (len(rows),), drawing only the blocks that hold them, one at a time."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (len(rows) and (rows[0] < 0 or rows[-1] >= self.samples or np.any(np.diff(rows) <= 0))):
            raise ValueError(f"rows must be ascending indices below {self.samples}")
        x = np.empty((len(rows), self.features))
        y = np.empty(len(rows), dtype=np.int64 if self.classes else np.float64)
        if not len(rows):
            return x, y
        blocks = rows // BLOCK_ROWS
        cuts = np.flatnonzero(np.diff(blocks)) + 1
        for start, stop in zip(np.r_[0, cuts], np.r_[cuts, len(rows)], strict=True):
            block = int(blocks[start])
            bx, by = self._block(block)
            local = rows[start:stop] - block * BLOCK_ROWS
            x[start:stop], y[start:stop] = bx[local], by[local]
        return x, y

    def labels(self) -> np.ndarray:
        """The training set's labels (or targets), (train,): every block is drawn, one at a time,
        and only its labels kept."""
        blocks = -(-self.train // BLOCK_ROWS)
        return np.concatenate([self._block(b)[1] for b in range(blocks)])[: self.train]

    def dataset(self) -> Dataset:
        """The whole dataset, the training set first."""
        x, y = self.rows(np.arange(self.samples))
        return Dataset(x[: self.train], y[: self.train], x[self.train:], y[self.train:], classes=self.classes,
                       name=self.name)


def gaussian_mixture(
    samples: int, features: int, classes: int = 2, seed: int = 0, test_fraction: float = TEST_FRACTION
) -> Dataset:
    """A Gaussian mixture classification problem, drawn whole (:func:`mixture_recipe` says how).

    >>> data = gaussian_mixture(100, 5, seed=1)
    >>> data.x_train.shape, data.x_test.shape, sorted(set(data.y_train.tolist()))
    ((80, 5), (20, 5), [0, 1])
    """
    return mixture_recipe(samples, features, classes, seed, test_fraction).dataset()


def mixture_recipe(
    samples: int, features: int, classes: int = 2, seed: int = 0, test_fraction: float = TEST_FRACTION
) -> Synthetic:
    """A Gaussian mixture classification problem, to be drawn whole or in part.

    **classes == 2** (the synthetic data of Tandon et al., ICML 2017, Sec. 6):

    - ``beta* = (10 / sqrt(f)) * s`` with ``s`` uniform on {-1, +1}^f, so ``||beta*|| = 10`` (the
      shared draw);
    - ``mu = (1.5 / ||beta*||^2) * beta* = (0.15 / sqrt(f)) * s``;
    - per sample (a block's draws, in this order: the coins, then x, then y) a fair coin picks
      the component, ``x ~ N(+mu, I)`` or ``N(-mu, I)``;
    - ``y ~ Bernoulli(sigmoid(x . beta*))``, labels in {0, 1}.

    So ``x . beta* ~ N(+-1.5, 10^2)`` whatever f. This equals the generator of Tandon et al.'s
    code (``beta = s``, ``mu = +-(1.5 / f) s``, covariance ``(100 / f) I``) with the features
    rescaled by ``sqrt(f) / 10`` (identical at f = 100), which keeps them at unit variance. The
    Bayes accuracy is ``E[sigmoid(|x . beta*|)] ~ 0.946`` and logistic regression can reach it.

    **classes = C > 2**: ``y`` uniform on 0..C-1 and ``x ~ N(mu_y, I)`` with
    ``mu_c = r * q_c``, ``r = sqrt(2 ln C) + 1``. The directions ``q_c`` are orthonormal (QR of a
    Gaussian (f, C) matrix) when ``f >= C``; then the Bayes classifier is linear and its accuracy
    is ~0.92-0.93 for every C (e.g. 0.930 for C=3, 0.922 for C=10, 0.918 for C=1000). With
    ``f < C`` the ``q_c`` are independent random unit vectors and the classes overlap more.

    Parameters
    ----------
    samples : int
        Total number of samples (training + test), >= 2.
    features : int
        f >= 1.
    classes : int
        >= 2.
    seed : int
        >= 0.
    test_fraction : float
        In [0, 1): the last ``ceil(test_fraction * samples)`` samples form the test set.

    Returns
    -------
    Synthetic
        x (float64), y (int64 labels), ``classes`` as given.

    Raises
    ------
    TypeError, ValueError
        For an argument of the wrong type or out of range (naming it).
    """
    samples, features, classes, seed, train = _checked(samples, features, classes, seed, test_fraction)
    shared = np.random.default_rng([seed, 0])
    draw = _tandon(shared, features) if classes == 2 else _components(shared, features, classes)
    name = f"gaussian_mixture(samples={samples}, features={features}, classes={classes}, seed={seed})"
    return Synthetic(samples, features, classes, train, name, draw, seed)


def linear_regression(
    samples: int, features: int, noise: float = 0.1, seed: int = 0, test_fraction: float = TEST_FRACTION
) -> Dataset:
    """A least-squares problem, drawn whole (:func:`linear_recipe` says how)."""
    return linear_recipe(samples, features, noise, seed, test_fraction).dataset()


def linear_recipe(
    samples: int, features: int, noise: float = 0.1, seed: int = 0, test_fraction: float = TEST_FRACTION
) -> Synthetic:
    """A least-squares problem: ``y = x . w* + b* + noise * e``, to be drawn whole or in part.

    The shared draws: ``w* ~ N(0, I / f)`` (so ``x . w*`` has unit variance), then ``b* ~ N(0, 1)``;
    a block's: ``x ~ N(0, I)`` (count, f), then ``e ~ N(0, 1)`` (count,).

    Parameters
    ----------
    samples : int
        Total number of samples (training + test), >= 2.
    features : int
        f >= 1.
    noise : float
        Standard deviation of the noise, >= 0.
    seed : int
        >= 0.
    test_fraction : float
        In [0, 1).

    Returns
    -------
    Synthetic
        ``classes == 0``.
    """
    samples, features, _, seed, train = _checked(samples, features, 2, seed, test_fraction)
    noise = check_real("noise", noise, 0.0)
    shared = np.random.default_rng([seed, 0])
    w = shared.standard_normal(features) / np.sqrt(features)
    b = shared.standard_normal()

    def draw(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.standard_normal((count, features))
        return x, x @ w + b + noise * rng.standard_normal(count)

    name = f"linear(samples={samples}, features={features}, noise={noise:g}, seed={seed})"
    return Synthetic(samples, features, 0, train, name, draw, seed)


def _checked(samples: int, features: int, classes: int, seed: int,
             test_fraction: float) -> tuple[int, int, int, int, int]:
    """The arguments checked, and the training samples they leave."""
    samples = check_int("samples", samples, 2)
    features = check_int("features", features, 1)
    classes = check_int("classes", classes, 2)
    seed = check_int("seed", seed, 0)
    train = kept_for_training(samples, check_real("test_fraction", test_fraction, 0.0, 1.0))
    return samples, features, classes, seed, train


def _tandon(shared: np.random.Generator, features: int) -> Draw:
    beta = (BINARY_SIGNAL / np.sqrt(features)) * shared.choice([-1.0, 1.0], size=features)
    mu = (BINARY_SHIFT / BINARY_SIGNAL**2) * beta

    def draw(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        sign = rng.choice([-1.0, 1.0], size=count)
        x = rng.standard_normal((count, features)) + sign[:, None] * mu
        probability = np.exp(-np.logaddexp(0.0, -(x @ beta)))
        return x, (rng.random(count) < probability).astype(np.int64)

    return draw


def _components(shared: np.random.Generator, features: int, classes: int) -> Draw:
    if features >= classes:
        directions = np.linalg.qr(shared.standard_normal((features, classes)))[0].T
    else:
        directions = shared.standard_normal((classes, features))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    means = (np.sqrt(2.0 * np.log(classes)) + 1.0) * directions

    def draw(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(classes, size=count)
        return rng.standard_normal((count, features)) + means[y], y.astype(np.int64)

    return draw
