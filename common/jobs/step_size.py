"""The learning rates a convex model's data allow: what ``coded submit`` checks a job's ``lr`` against.

Of a model with one affine layer (linear, logistic, softmax regression) the mean training loss
curves at most ``L = c * lambda_max(X1^T X1 / N) + l2``: ``c`` the per-sample loss's curvature in
the model's output (``Model.head_curvature``), ``X1`` the training rows with a column of ones
(the bias). On a quadratic of curvature L, gradient descent with momentum diverges above a step
that depends only on the momentum: ``2 (1 + mu) / L`` for the heavy ball (``sgd``), ``2 (1 + mu) /
((1 + 2 mu) L)`` for Nesterov's (``nesterov``, as :mod:`coded.ml.optim` steps). The losses are
not quadratics, but near their minimum they are, and a step above the bound diverges there; a
step a hundred times below it crawls. Adam scales each coordinate's step by its own history: no
such bound, and nothing is said.

lambda_max comes from power iteration on X1^T X1 / N (sparse rows stay sparse): an estimate from
below, within a few percent after POWER_STEPS steps on data whose largest eigenvalue stands
apart (the mean of the rows makes it so); the warnings leave a factor of two on either side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse

from coded.jobs.spec.learning import NesterovOptimizer, OptimizerSpec, SGDOptimizer
from coded.ml.models.base import Model

__all__ = ["POWER_STEPS", "Curvature", "curvature", "lr_warnings", "stable_lr"]

POWER_STEPS = 60
#: an lr this many times below the stable bound is worth a word: its loss falls that much slower
CRAWL = 100.0


@dataclass(frozen=True)
class Curvature:
    """``total``: L, the mean loss's largest curvature; ``second_moment``: lambda_max(X1^T X1 / N);
    ``head``: the loss's curvature in the output; ``l2``: the regularizer's (and weight decay's)."""

    total: float
    second_moment: float
    head: float
    l2: float

    def words(self) -> str:
        return (f"the mean loss curves up to about L = {self.total:.3g} ({self.head:g} x the largest eigenvalue of "
                f"the rows' second moment, {self.second_moment:.3g}" + (f", + l2 {self.l2:g}" if self.l2 else "")
                + ")")


def curvature(model: Model, x: np.ndarray | scipy.sparse.spmatrix, extra_l2: float = 0.0,
              seed: int = 0) -> Curvature | None:
    """L of ``model``'s mean loss on the rows ``x`` (N, features), dense or sparse; None for a model
    without a curvature bound (hidden layers, PyTorch: samples that are not rows) or without rows."""
    head = type(model).head_curvature
    rows = x.shape[0]
    if head is None or rows == 0 or x.ndim != 2:
        return None
    v = np.random.default_rng(seed).standard_normal(x.shape[1] + 1)
    moment = 0.0
    for _ in range(POWER_STEPS):
        v /= np.linalg.norm(v)
        u = x @ v[:-1] + v[-1]  # X1 v
        w = np.empty_like(v)
        w[:-1] = x.T @ u
        w[-1] = u.sum()
        w /= rows
        moment = float(np.linalg.norm(w))
        v = w
    l2 = model.l2 + extra_l2
    return Curvature(head * moment + l2, moment, head, l2)


def stable_lr(optimizer: OptimizerSpec, total: float) -> float | None:
    """The step above which the optimizer diverges on a quadratic of curvature ``total``; None
    for Adam (no such bound)."""
    if isinstance(optimizer, SGDOptimizer):
        return 2 * (1 + optimizer.momentum) / total
    if isinstance(optimizer, NesterovOptimizer):
        return 2 * (1 + optimizer.momentum) / ((1 + 2 * optimizer.momentum) * total)
    return None


def lr_warnings(optimizer: OptimizerSpec, model: Model, x: np.ndarray | scipy.sparse.spmatrix) -> tuple[str, ...]:
    """A warning when ``optimizer.lr`` is above the step at which its steps diverge on these rows,
    or ``CRAWL`` times below it; nothing when it lies between, or no bound is known."""
    decay = optimizer.weight_decay if isinstance(optimizer, SGDOptimizer) else 0.0
    found = curvature(model, x, decay)
    bound = None if found is None else stable_lr(optimizer, found.total)
    if found is None or bound is None:
        return ()
    momentum = f"momentum {optimizer.momentum:g}"  # type: ignore[union-attr]  # sgd and nesterov have it
    where = f"{found.words()}, and {optimizer.type} with {momentum} is unstable above lr {bound:.3g}"
    if optimizer.lr > bound:
        return (f"optimizer.lr {optimizer.lr:g} is above the step these data allow: {where}; try lr "
                f"{bound / 2:.2g}",)
    if optimizer.lr * CRAWL < bound:
        return (f"optimizer.lr {optimizer.lr:g} is {bound / optimizer.lr:.0f} times below the step these data "
                f"allow: {where}; each step goes that much less far than it could (try lr {bound / 2:.2g})",)
    return ()
