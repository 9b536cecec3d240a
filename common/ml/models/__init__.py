"""Models whose losses and gradients are sums over samples, on one flat float64 parameter vector.

Sums make the partial gradients of disjoint data partitions add up exactly to the full-data
gradient; the master divides by the number of training samples and adds
:meth:`Model.regularization` once. Pure numpy: no I/O.

>>> import numpy as np
>>> from coded.ml.models import LogisticRegression
>>> model = LogisticRegression(features=3, l2=1e-4)
>>> params = model.init_params(np.random.default_rng(0))
>>> loss, grad = model.loss_and_grad(params, np.ones((4, 3)), np.array([0, 1, 1, 0]))
>>> round(loss, 6), grad.shape
(2.772589, (4,))
"""

from .base import AffineModel, Layer, Model
from .linear import LinearRegression, LogisticRegression, SoftmaxRegression
from .mlp import MLP
from .seeds import draw_seed

__all__ = [
    "MLP",
    "AffineModel",
    "Layer",
    "LinearRegression",
    "LogisticRegression",
    "Model",
    "SoftmaxRegression",
    "draw_seed",
]
