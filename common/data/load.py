"""Build a dataset from a job specification's ``data`` section."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .dataset import Dataset
from .digits import digits
from .files import load_file
from .synthetic import gaussian_mixture, linear_regression

__all__ = ["load_dataset", "DATA_TYPES"]

#: Data type -> the function that builds it; the spec's other keys are its keyword arguments.
DATA_TYPES: Mapping[str, Callable[..., Dataset]] = {
    "gaussian_mixture": gaussian_mixture,
    "linear": linear_regression,
    "digits": digits,
    "npz": load_file,
    "csv": load_file,
}


def load_dataset(spec: Mapping[str, Any]) -> Dataset:
    """The dataset a spec describes.

    Parameters
    ----------
    spec : mapping
        ``{"type": ..., **arguments}``:

        - ``"gaussian_mixture"``: samples, features, classes, seed, test_fraction
          (:func:`~common.data.synthetic.gaussian_mixture`);
        - ``"linear"``: samples, features, noise, seed, test_fraction
          (:func:`~common.data.synthetic.linear_regression`);
        - ``"digits"``: seed, test_fraction (:func:`~common.data.digits.digits`);
        - ``"npz"``, ``"csv"``: path, task (:func:`~common.data.files.load_file`).

    Raises
    ------
    TypeError
        If ``spec`` is not a mapping, or an argument has the wrong type.
    ValueError
        For an unknown type or key, a missing required key, or a bad value.

    >>> load_dataset({"type": "linear", "samples": 10, "features": 3}).x_train.shape
    (8, 3)
    """
    if not isinstance(spec, Mapping):
        raise TypeError(f"data spec must be a mapping (got {type(spec).__name__})")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in DATA_TYPES:
        raise ValueError(f"data type must be one of {', '.join(DATA_TYPES)} (got {kind!r})")
    build = DATA_TYPES[kind]
    parameters = inspect.signature(build).parameters
    arguments = {key: value for key, value in spec.items() if key != "type"}
    allowed = set(parameters) - {"format"}  # a file's format is its type
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise ValueError(
            f"unknown key {unknown[0]!r} for data type {kind!r} (allowed: {', '.join(sorted(allowed))})")
    required = [name for name, p in parameters.items() if p.default is inspect.Parameter.empty]
    missing = [name for name in required if name not in arguments]
    if missing:
        raise ValueError(f"data type {kind!r} needs {', '.join(repr(m) for m in missing)}")
    if build is load_file:
        arguments["format"] = kind
    return build(**arguments)
