"""The convex models: one affine layer and a loss head. They start from zero parameters."""

from __future__ import annotations

import numpy as np

from coded.base.checks import check_int

from .base import AffineModel
from .losses import logistic_loss, sigmoid, softmax, softmax_cross_entropy, squared_error

__all__ = ["LinearRegression", "LogisticRegression", "SoftmaxRegression"]


class LinearRegression(AffineModel):
    """Least squares: per-sample loss ``0.5 * (x . w + b - y)**2``.

    Parameters are ``[w (features,), b]``, size ``features + 1``.

    >>> import numpy as np
    >>> model = LinearRegression(2)
    >>> loss, grad = model.loss_and_grad(np.array([1.0, 0.0, 0.5]), np.array([[2.0, 3.0]]), np.array([1.0]))
    >>> loss, grad.tolist()
    (1.125, [3.0, 4.5, 1.5])
    """

    name = "linear"
    task = "regression"
    head_curvature = 1.0  # 0.5 (z - y)^2

    def __init__(self, features: int, l2: float = 0.0) -> None:
        super().__init__((check_int("features", features, 1), 1), l2, classes=0)

    def _head(self, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        return squared_error(z, y)

    def _output(self, z: np.ndarray) -> np.ndarray:
        return z[:, 0]


class LogisticRegression(AffineModel):
    """Binary logistic regression, labels in {0, 1}: ``P(y=1 | x) = sigmoid(x . w + b)``.

    Per-sample loss ``log(1 + exp(z)) - y z``, computed stably. Parameters are
    ``[w (features,), b]``, size ``features + 1``; :meth:`predict` gives (b, 2) probabilities.
    """

    name = "logistic"
    task = "classification"
    head_curvature = 0.25  # sigmoid(z) (1 - sigmoid(z)) <= 1/4

    def __init__(self, features: int, l2: float = 0.0) -> None:
        super().__init__((check_int("features", features, 1), 1), l2, classes=2)

    def _head(self, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        return logistic_loss(z, y)

    def _output(self, z: np.ndarray) -> np.ndarray:
        return np.column_stack([sigmoid(-z[:, 0]), sigmoid(z[:, 0])])


class SoftmaxRegression(AffineModel):
    """Multinomial logistic regression: ``P(y | x) = softmax(x W + b)``.

    Per-sample loss ``-log softmax(z)[y]`` with a shifted log-sum-exp. Parameters are
    ``[W (features, classes) row-major, b (classes,)]``, size ``(features + 1) * classes``.
    """

    name = "softmax"
    task = "classification"
    head_curvature = 0.5  # diag(p) - p p^T: its largest eigenvalue is below 1/2

    def __init__(self, features: int, classes: int, l2: float = 0.0) -> None:
        classes = check_int("classes", classes, 2)
        super().__init__((check_int("features", features, 1), classes), l2, classes=classes)

    def __repr__(self) -> str:
        return f"SoftmaxRegression(features={self.features}, classes={self.classes}, l2={self.l2})"

    def _head(self, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        return softmax_cross_entropy(z, y)

    def _output(self, z: np.ndarray) -> np.ndarray:
        return softmax(z)
