"""Seeded synthetic datasets: Tandon et al.'s Gaussian mixture, a multi-class mixture, least squares.

Each generator is a pure function of its arguments: the same seed gives bit-identical arrays.
All samples are drawn i.i.d.; the last ``ceil(test_fraction * samples)`` form the test set.
"""

from __future__ import annotations

import numpy as np

from coded.base.checks import check_int, check_real

from .dataset import TEST_FRACTION, Dataset, split_off

__all__ = ["BINARY_SHIFT", "BINARY_SIGNAL", "gaussian_mixture", "linear_regression"]

#: Norm of beta* in the binary mixture: x . beta* has standard deviation 10 within a component.
BINARY_SIGNAL = 10.0
#: Mean of x . beta* in the two components (+-).
BINARY_SHIFT = 1.5


def gaussian_mixture(
    samples: int, features: int, classes: int = 2, seed: int = 0, test_fraction: float = TEST_FRACTION
) -> Dataset:
    """A Gaussian mixture classification problem.

    **classes == 2** (the synthetic data of Tandon et al., ICML 2017, Sec. 6), in this order of draws:

    - ``beta* = (10 / sqrt(f)) * s`` with ``s`` uniform on {-1, +1}^f, so ``||beta*|| = 10``;
    - ``mu = (1.5 / ||beta*||^2) * beta* = (0.15 / sqrt(f)) * s``;
    - per sample a fair coin picks the component, ``x ~ N(+mu, I)`` or ``N(-mu, I)``;
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
    Dataset
        x (float64), y (int64 labels), ``classes`` as given.

    Raises
    ------
    TypeError, ValueError
        For an argument of the wrong type or out of range (naming it).

    >>> data = gaussian_mixture(100, 5, seed=1)
    >>> data.x_train.shape, data.x_test.shape, sorted(set(data.y_train.tolist()))
    ((80, 5), (20, 5), [0, 1])
    """
    samples = check_int("samples", samples, 2)
    features = check_int("features", features, 1)
    classes = check_int("classes", classes, 2)
    test_fraction = check_real("test_fraction", test_fraction, 0.0, 1.0)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    if classes == 2:
        x, y = _tandon(rng, samples, features)
    else:
        x, y = _components(rng, samples, features, classes)
    name = f"gaussian_mixture(samples={samples}, features={features}, classes={classes}, seed={seed})"
    return Dataset(*split_off(x, y, test_fraction), classes=classes, name=name)


def linear_regression(
    samples: int, features: int, noise: float = 0.1, seed: int = 0, test_fraction: float = TEST_FRACTION
) -> Dataset:
    """A least-squares problem: ``y = x . w* + b* + noise * e``.

    Draws, in this order: ``w* ~ N(0, I / f)`` (so ``x . w*`` has unit variance), ``b* ~ N(0, 1)``,
    ``x ~ N(0, I)`` (samples, f), ``e ~ N(0, 1)`` (samples,).

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
    Dataset
        ``classes == 0``.
    """
    samples = check_int("samples", samples, 2)
    features = check_int("features", features, 1)
    noise = check_real("noise", noise, 0.0)
    test_fraction = check_real("test_fraction", test_fraction, 0.0, 1.0)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    w = rng.standard_normal(features) / np.sqrt(features)
    b = rng.standard_normal()
    x = rng.standard_normal((samples, features))
    y = x @ w + b + noise * rng.standard_normal(samples)
    name = f"linear(samples={samples}, features={features}, noise={noise:g}, seed={seed})"
    return Dataset(*split_off(x, y, test_fraction), classes=0, name=name)


def _tandon(rng: np.random.Generator, samples: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    beta = (BINARY_SIGNAL / np.sqrt(features)) * rng.choice([-1.0, 1.0], size=features)
    mu = (BINARY_SHIFT / BINARY_SIGNAL**2) * beta
    sign = rng.choice([-1.0, 1.0], size=samples)
    x = rng.standard_normal((samples, features)) + sign[:, None] * mu
    probability = np.exp(-np.logaddexp(0.0, -(x @ beta)))
    y = (rng.random(samples) < probability).astype(np.int64)
    return x, y


def _components(
    rng: np.random.Generator, samples: int, features: int, classes: int
) -> tuple[np.ndarray, np.ndarray]:
    if features >= classes:
        directions = np.linalg.qr(rng.standard_normal((features, classes)))[0].T
    else:
        directions = rng.standard_normal((classes, features))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    means = (np.sqrt(2.0 * np.log(classes)) + 1.0) * directions
    y = rng.integers(classes, size=samples)
    x = rng.standard_normal((samples, features)) + means[y]
    return x, y.astype(np.int64)
