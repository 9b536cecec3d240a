"""The model factory: spec -> model, and its errors."""

from __future__ import annotations

import pytest

from common.models import MLP, MODEL_TYPES, LinearRegression, LogisticRegression, SoftmaxRegression, build_model


@pytest.mark.parametrize(
    ("spec", "classes", "cls", "sizes"),
    [
        ({"type": "linear"}, 0, LinearRegression, (5, 1)),
        ({"type": "logistic", "l2": 1e-4}, 2, LogisticRegression, (5, 1)),
        ({"type": "softmax", "l2": 0.0}, 3, SoftmaxRegression, (5, 3)),
        ({"type": "mlp", "hidden": [64, 32], "l2": 0.1}, 10, MLP, (5, 64, 32, 10)),
        ({"type": "mlp"}, 2, MLP, (5, 64, 2)),
    ],
)
def test_builds_the_model_the_spec_describes(spec, classes, cls, sizes):
    model = build_model(spec, features=5, classes=classes)
    assert type(model) is cls and model.layer_sizes == sizes
    assert model.name == spec["type"] and model.l2 == spec.get("l2", 0.0)


def test_every_type_is_buildable():
    classes = {"linear": 0, "logistic": 2}
    for kind in MODEL_TYPES:
        assert build_model({"type": kind}, 3, classes.get(kind, 4)).name == kind


@pytest.mark.parametrize(
    ("spec", "classes", "error", "message"),
    [
        ({"type": "svm"}, 2, ValueError, r"model type must be one of linear, logistic, softmax, mlp \(got 'svm'\)"),
        ({"l2": 0.1}, 2, ValueError, r"model type must be one of .* \(got None\)"),
        ({"type": ["mlp"]}, 2, ValueError, "model type must be one of"),
        ({"type": "logistic", "hidden": [3]}, 2, ValueError, r"unknown key 'hidden' for model type 'logistic' \(allowed: l2\)"),
        ({"type": "mlp", "dropout": 0.5}, 2, ValueError, "unknown key 'dropout' for model type 'mlp'"),
        ({"type": "logistic"}, 3, ValueError, r"'logistic' needs exactly 2 classes \(use softmax for more\) \(got classes=3\)"),
        ({"type": "logistic"}, 0, ValueError, "needs exactly 2 classes"),
        ({"type": "linear"}, 2, ValueError, r"'linear' needs regression data \(classes=0\) \(got classes=2\)"),
        ({"type": "softmax"}, 0, ValueError, r"'softmax' needs at least 2 classes \(got classes=0\)"),
        ({"type": "mlp", "hidden": [8, -1]}, 3, ValueError, r"hidden\[1\] must be >= 1"),
        ({"type": "logistic", "l2": -1}, 2, ValueError, "l2 must be finite and in \\[0, inf\\)"),
        ({"type": "softmax"}, 2.0, TypeError, "classes must be an integer"),
        ([("type", "linear")], 0, TypeError, r"model spec must be a mapping \(got list\)"),
    ],
)
def test_bad_specs(spec, classes, error, message):
    with pytest.raises(error, match=message):
        build_model(spec, features=3, classes=classes)
