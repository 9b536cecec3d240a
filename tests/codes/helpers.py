"""Helpers for the code tests: encode every worker's message from random partial gradients."""

from __future__ import annotations

import numpy as np

from coded.codes import GradientCode


def messages(code: GradientCode, partials: np.ndarray) -> dict[int, np.ndarray]:
    """Each worker's message; ``partials`` is (k, l), row j the gradient of partition j."""
    return {i: code.encode(i, {j: partials[j] for j in code.partitions(i)}) for i in range(code.n)}


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())
