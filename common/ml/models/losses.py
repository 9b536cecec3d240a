"""Loss heads on a batch of model outputs: summed losses and their gradients, numerically stable.

Each head takes the outputs ``z`` of the last affine layer and the targets of b samples and
returns the loss summed over the samples together with ``dL/dz``. Sums, not means: the partial
gradients of disjoint batches then add up exactly to the gradient of their union.
"""

from __future__ import annotations

import numpy as np

__all__ = ["logistic_loss", "sigmoid", "softmax", "softmax_cross_entropy", "softplus", "squared_error"]


def squared_error(z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Sum of ``0.5 * (z - y)**2``.

    Parameters
    ----------
    z : (b, 1) ndarray
        Predictions.
    y : (b,) ndarray of float64
        Targets.

    Returns
    -------
    loss : float
    dz : (b, 1) ndarray
        ``z - y``.
    """
    residual = z[:, 0] - y
    return 0.5 * float(residual @ residual), residual[:, None]


def logistic_loss(z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Sum of ``log(1 + exp(z)) - y * z``, the negative log-likelihood of ``P(y=1) = sigmoid(z)``.

    Computed with ``logaddexp``, so large ``|z|`` neither overflows nor loses the loss.

    Parameters
    ----------
    z : (b, 1) ndarray
        Logits.
    y : (b,) ndarray of int
        Labels in {0, 1}.

    Returns
    -------
    loss : float
    dz : (b, 1) ndarray
        ``sigmoid(z) - y``.
    """
    logits = z[:, 0]
    log_one_plus = softplus(logits)
    loss = float(np.sum(log_one_plus) - y @ logits)
    # sigmoid(z) = exp(z - log(1 + exp(z))): the softplus the loss needed anyway, one exp more
    return loss, (np.exp(logits - log_one_plus) - y)[:, None]


def softmax_cross_entropy(z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Sum of ``-log softmax(z)[y]``, with the log-sum-exp shifted by the row maximum.

    Parameters
    ----------
    z : (b, C) ndarray
        Logits.
    y : (b,) ndarray of int
        Labels in 0..C-1.

    Returns
    -------
    loss : float
    dz : (b, C) ndarray
        ``softmax(z) - onehot(y)``.
    """
    log_p = _log_softmax(z)
    rows = np.arange(len(y))
    loss = -float(np.sum(log_p[rows, y]))
    dz = np.exp(log_p)
    dz[rows, y] -= 1.0
    return loss, dz


def softplus(z: np.ndarray) -> np.ndarray:
    """``log(1 + exp(z))`` without overflow: ``max(z, 0) + log1p(exp(-|z|))``.

    The same values as ``np.logaddexp(0, z)`` to a few units in the last place (numpy's exp and
    log1p of a whole array may run the CPU's SIMD code), at a quarter of its cost, which is most
    of a logistic-regression gradient's time.
    """
    return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))


def sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))`` without overflow; accurate for large negative ``z`` too."""
    return np.exp(-softplus(-z))


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``z`` (b, C)."""
    return np.exp(_log_softmax(z))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
