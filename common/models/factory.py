"""Build a model from a job specification's ``model`` section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.checks import check_int

from .base import Model
from .linear import LinearRegression, LogisticRegression, SoftmaxRegression
from .mlp import MLP

__all__ = ["build_model", "MODEL_TYPES"]

#: Spec keys each model type accepts besides "type".
MODEL_TYPES: Mapping[str, frozenset[str]] = {
    "linear": frozenset({"l2"}),
    "logistic": frozenset({"l2"}),
    "softmax": frozenset({"l2"}),
    "mlp": frozenset({"l2", "hidden"}),
}
#: The classes each model type fits: (lowest, highest, the requirement in words).
_CLASSES: Mapping[str, tuple[int, float, str]] = {
    "linear": (0, 0, "regression data (classes=0)"),
    "logistic": (2, 2, "exactly 2 classes (use softmax for more)"),
    "softmax": (2, float("inf"), "at least 2 classes"),
    "mlp": (2, float("inf"), "at least 2 classes"),
}


def build_model(spec: Mapping[str, Any], features: int, classes: int) -> Model:
    """The model a spec describes, sized for the data.

    Parameters
    ----------
    spec : mapping
        ``{"type": "linear" | "logistic" | "softmax" | "mlp", "l2": float, "hidden": [int, ...]}``;
        ``l2`` is optional (default 0), ``hidden`` is for "mlp" only (default ``[64]``).
    features : int
        Number of input features.
    classes : int
        Number of classes of the data; 0 for regression data.

    Raises
    ------
    TypeError
        If ``spec`` is not a mapping, or a value has the wrong type.
    ValueError
        For an unknown type or key, or a model that does not fit the data (logistic needs
        2 classes, softmax and mlp at least 2, linear regression data).

    >>> build_model({"type": "mlp", "hidden": [8, 8]}, features=4, classes=3)
    MLP(features=4, classes=3, hidden=[8, 8], l2=0.0)
    """
    if not isinstance(spec, Mapping):
        raise TypeError(f"model spec must be a mapping (got {type(spec).__name__})")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in MODEL_TYPES:
        raise ValueError(f"model type must be one of {', '.join(MODEL_TYPES)} (got {kind!r})")
    unknown = sorted(set(spec) - MODEL_TYPES[kind] - {"type"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} for model type {kind!r} "
                         f"(allowed: {', '.join(sorted(MODEL_TYPES[kind]))})")
    classes = check_int("classes", classes, 0)
    low, high, need = _CLASSES[kind]
    if not low <= classes <= high:
        raise ValueError(f"model type {kind!r} needs {need} (got classes={classes})")
    l2 = spec.get("l2", 0.0)
    if kind == "linear":
        return LinearRegression(features, l2)
    if kind == "logistic":
        return LogisticRegression(features, l2)
    if kind == "softmax":
        return SoftmaxRegression(features, classes, l2)
    return MLP(features, classes, spec.get("hidden", [64]), l2)

