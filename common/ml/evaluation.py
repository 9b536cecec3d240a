"""Test metrics of a model: mean loss, and for classifiers accuracy and ROC AUC."""

from __future__ import annotations

import numpy as np

from coded.ml.models import Model

__all__ = ["evaluate", "prepare", "roc_auc"]


def evaluate(model: Model, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """Metrics of ``model`` at ``params`` on the samples ``(x, y)``.

    Parameters
    ----------
    model : Model
    params : (size,) ndarray of float64
    x : (b, features) ndarray
    y : (b,) ndarray
        Targets, or class labels 0..C-1.

    Returns
    -------
    metrics : dict
        ``"loss"``: the mean per-sample loss, without the regularizer. Classifiers add
        ``"accuracy"`` (of the most probable class) and ``"auc"`` (see :func:`roc_auc`). Every
        metric is None when b = 0.

    Raises
    ------
    TypeError, ValueError
        As :meth:`Model.loss_and_grad` for arrays that do not fit the model.
    """
    loss = model.loss(params, x, y)
    samples = len(y)
    metrics: dict[str, float | None] = {"loss": loss / samples if samples else None}
    if model.task == "classification":
        probabilities = model.predict(params, x)
        labels = np.asarray(y).astype(np.intp)
        metrics["accuracy"] = float(np.mean(probabilities.argmax(axis=1) == labels)) if samples else None
        metrics["auc"] = roc_auc(labels, probabilities)
    return metrics


def roc_auc(labels: np.ndarray, probabilities: np.ndarray) -> float | None:
    """Area under the ROC curve; None when fewer than 2 classes occur in ``labels``.

    Binary (C = 2): the AUC of the positive-class probability. Multiclass: the macro average
    over the classes present in ``labels`` of the one-vs-rest AUCs (equal to scikit-learn's
    ``multi_class="ovr"`` macro AUC when every class is present).

    Parameters
    ----------
    labels : (b,) ndarray of int
    probabilities : (b, C) ndarray
    """
    from sklearn.metrics import roc_auc_score  # imported here: scikit-learn takes ~1 s to import (see prepare)

    present = np.unique(labels)
    if len(present) < 2:
        return None
    if probabilities.shape[1] == 2:
        return float(roc_auc_score(labels, probabilities[:, 1]))
    return float(np.mean([roc_auc_score(labels == c, probabilities[:, c]) for c in present]))


def prepare() -> None:
    """Import what evaluating takes (scikit-learn, ~1 s) now, before a job's clock runs, rather than
    in its first evaluated iteration."""
    import sklearn.metrics  # noqa: F401
