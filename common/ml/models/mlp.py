"""A multilayer perceptron: ReLU hidden layers and a softmax cross-entropy output."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded.base.checks import check_int

from .base import AffineModel
from .losses import softmax, softmax_cross_entropy

__all__ = ["MLP"]


class MLP(AffineModel):
    """``softmax(A_L(relu(... relu(A_1(x)))))`` with affine layers ``A_l(h) = h W_l + b_l``.

    Parameters
    ----------
    features : int
    classes : int
        At least 2.
    hidden : sequence of int
        Widths of the hidden layers, in order (may be empty: then this is softmax regression).
    l2 : float
        Weight decay on every W_l, not on the biases.

    Notes
    -----
    Parameters are laid out as described in :mod:`coded.ml.models.base`: for each layer in order,
    ``W_l (d_{l-1}, d_l)`` row-major then ``b_l (d_l,)``, with ``d = (features, *hidden, classes)``.
    :meth:`init_params` draws He-normal weights ``W_l ~ N(0, 2 / d_{l-1})`` and zero biases.
    The ReLU derivative at exactly 0 is taken as 0.

    >>> model = MLP(4, 3, hidden=[5])
    >>> model.size, model.layer_sizes
    (43, (4, 5, 3))
    """

    name = "mlp"
    task = "classification"

    def __init__(self, features: int, classes: int, hidden: Sequence[int], l2: float = 0.0) -> None:
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence):
            raise TypeError(f"hidden must be a sequence of layer widths (got {hidden!r})")
        widths = [check_int(f"hidden[{i}]", width, 1) for i, width in enumerate(hidden)]
        classes = check_int("classes", classes, 2)
        super().__init__((check_int("features", features, 1), *widths, classes), l2, classes=classes)

    def __repr__(self) -> str:
        hidden = list(self.layer_sizes[1:-1])
        return f"MLP(features={self.features}, classes={self.classes}, hidden={hidden}, l2={self.l2})"

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        params = super().init_params(rng)
        for weights, _ in self.unflatten(params):
            weights[...] = rng.standard_normal(weights.shape) * np.sqrt(2.0 / weights.shape[0])
        return params

    def _head(self, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        return softmax_cross_entropy(z, y)

    def _output(self, z: np.ndarray) -> np.ndarray:
        return softmax(z)
