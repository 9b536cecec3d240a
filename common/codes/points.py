"""Evaluation points for polynomial codes.

Monomial Vandermonde systems on real points lose about one digit per extra unknown even on
Chebyshev nodes; on the unit circle they stay well conditioned unless many neighbouring points are
missing. Codes that may decode from many different responder sets therefore use roots of unity
when the data can be packed into complex numbers, and Chebyshev nodes in [-1, 1] otherwise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["chebyshev", "roots_of_unity", "ye_abbe_paper"]


def chebyshev(count: int) -> np.ndarray:
    """Chebyshev nodes of the first kind in (-1, 1), descending.

    Returns
    -------
    x : (count,) ndarray of float64

    Examples
    --------
    >>> chebyshev(2).round(4).tolist()
    [0.7071, -0.7071]
    """
    return np.cos(np.pi * (np.arange(count) + 0.5) / count)


def roots_of_unity(count: int) -> np.ndarray:
    """The ``count``-th roots of unity ``exp(2 pi i p / count)``, p = 0..count-1.

    Returns
    -------
    z : (count,) ndarray of complex128
    """
    return np.exp(2j * np.pi * np.arange(count) / count)


def ye_abbe_paper(count: int) -> np.ndarray:
    """The evaluation points of Ye & Abbe's experiments: +-(1 + i/2), plus 0 when count is odd.

    Kept to reproduce the paper; they are ill-conditioned beyond about 20 workers.

    Returns
    -------
    theta : (count,) ndarray of float64, ascending
    """
    half = [1.0 + i / 2 for i in range(count // 2)]
    values = [-v for v in half] + ([0.0] if count % 2 else []) + half
    return np.array(sorted(values))
