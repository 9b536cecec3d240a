"""Polynomial-type codes for A @ B: Polynomial, MatDot, PolyDot and Generalized PolyDot.

A (N1 x N0) is split into m x n blocks A_ij and B (N0 x Nb) into n x d blocks B_jk. Worker p gets
an encoded pair (A_p, B_p) of the shapes of one block and returns A_p @ B_p, an evaluation of a
polynomial whose coefficients at c(i, k) are the product blocks C_ik = sum_j A_ij B_jk. The
schemes differ only in the spacing w of their exponents (spec/000 Sec. 3):

=========== ============ ============ ======================== ========================
scheme       a(i, j)      b(j, k)      c(i, k)                  threshold R
=========== ============ ============ ======================== ========================
polynomial   i            m k          i + m k                  m d            (w = 1)
matdot       j            n-1-j        n-1                      2n - 1         (m = d = 1)
polydot      w i + j      n-1-j + mwk  w i + n-1 + m w k        m (2n-1) d     (w = 2n-1)
gpd          w i + j      n-1-j + mwk  w i + n-1 + m w k        m n d + n - 1  (w = n)
=========== ============ ============ ======================== ========================

Evaluation points (``points``):

- ``"unit_circle"`` (default): z_p = exp(2 pi i p / P), embedded as real rotations of sub-blocks
  (:mod:`coded.codes.embedding`), so workers store and multiply real blocks of the same size as
  with real points while every decode is a well-conditioned unit-circle Vandermonde solve. Blocks
  need an even number of rows (and of inner columns when n > 1, of B columns when d > 1);
- ``"chebyshev"``: real Chebyshev nodes and monomials, the original construction. Any block size,
  but real Vandermonde systems lose about a digit per unknown: refused beyond ~25 workers.

Each construction is a :class:`~coded.codes.linear_matmul.MatmulCode` of its own coefficients,
which pads, encodes, decodes and corrects the same way for every scheme.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from coded.base.checks import check_int

from . import points as pts
from .embedding import unit_circle_code
from .linear_matmul import MatmulCode

__all__ = ["matmul_code", "matmul_points", "matmul_scheme_params", "matmul_schemes", "recovery_threshold"]


def _spacing(scheme: str, m: int, n: int, d: int) -> int:
    """w: the exponent distance between the row blocks of A (table above)."""
    return {"polynomial": 1, "matdot": n, "polydot": 2 * n - 1, "gpd": n}[scheme]


_SCHEMES: dict[str, tuple[str, ...]] = {
    "polynomial": ("m", "d"),
    "matdot": ("n",),
    "polydot": ("m", "n", "d"),
    "gpd": ("m", "n", "d"),
}
POINTS = ("unit_circle", "chebyshev")


def _threshold(m: int, n: int, d: int, w: int) -> int:
    return m * w * d + 2 * n - 1 - w


def _sizes(scheme: str, params: Mapping[str, int], check: bool) -> tuple[int, int, int]:
    names = _SCHEMES[scheme]
    sizes = {name: (check_int(name, params.get(name, 1), 1) if check else params.get(name, 1))
             for name in ("m", "n", "d")}
    sizes.update({name: 1 for name in ("m", "n", "d") if name not in names})
    return sizes["m"], sizes["n"], sizes["d"]


def recovery_threshold(scheme: str, m: int = 1, n: int = 1, d: int = 1) -> int:
    """Recovery threshold of a polynomial scheme without building it (spec/000 Sec. 3).

    >>> recovery_threshold("gpd", m=2, n=2, d=2), recovery_threshold("polydot", m=2, n=2, d=2)
    (9, 12)
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown matmul scheme {scheme!r}; choose one of {', '.join(_SCHEMES)}")
    m, n, d = _sizes(scheme, {"m": m, "n": n, "d": d}, check=False)
    return _threshold(m, n, d, _spacing(scheme, m, n, d))


def matmul_schemes() -> tuple[str, ...]:
    """Names accepted by :func:`matmul_code`."""
    return ("uncoded", *_SCHEMES)


def matmul_points() -> tuple[str, ...]:
    """Evaluation points accepted by :func:`matmul_code`, the default first."""
    return POINTS


def matmul_scheme_params(scheme: str) -> tuple[str, ...]:
    """The block counts a scheme takes (uncoded: none; it splits A into P row blocks).

    >>> matmul_scheme_params("matdot"), matmul_scheme_params("gpd")
    (('n',), ('m', 'n', 'd'))
    """
    if scheme == "uncoded":
        return ()
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown matmul scheme {scheme!r}; choose one of {', '.join(matmul_schemes())}")
    return _SCHEMES[scheme]


def matmul_code(
    scheme: str,
    workers: int,
    seed: int = 0,
    max_error: float = 1e-6,
    points: str = "unit_circle",
    **params: int,
) -> MatmulCode:
    """Build a matmul code.

    Parameters
    ----------
    scheme : {"uncoded", "polynomial", "matdot", "polydot", "gpd"}
        ``uncoded`` splits A into P row blocks, one per worker, and waits for all of them.
    workers : int
        P.
    seed : int
        Seed of the error-location projections and of the sampled conditioning check.
    max_error : float
        Refuse the parameters (ValueError) when a checked responder set is estimated to decode
        less accurately than this (relative to the largest product entry).
    points : {"unit_circle", "chebyshev"}
        Evaluation points (module docstring): unit circle through rotation embeddings (default),
        or the original real Chebyshev nodes.
    **params : int
        polynomial: m, d; matdot: n; polydot and gpd: m, n, d (missing ones default to 1).

    Examples
    --------
    >>> matmul_code("gpd", workers=10, m=2, n=2, d=2).recovery_threshold
    9
    >>> matmul_code("gpd", workers=64, m=4, n=2, d=7).recovery_threshold
    57
    """
    workers = check_int("workers", workers, 1)
    seed = check_int("seed", seed, 0)
    if points not in POINTS:
        raise ValueError(f"points must be one of {', '.join(POINTS)} (got {points!r})")
    if scheme == "uncoded":
        if params:
            raise ValueError(f"scheme 'uncoded' takes no parameter {sorted(params)[0]!r} "
                             "(it splits A into P row blocks)")
        eye = np.eye(workers)
        return MatmulCode(scheme, workers, 1, 1, eye[:, None, :], np.ones((workers, 1, 1)), eye, eye, seed=seed)
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown matmul scheme {scheme!r}; choose one of uncoded, {', '.join(_SCHEMES)}")
    unknown = sorted(set(params) - set(_SCHEMES[scheme]))
    if unknown:
        raise ValueError(f"scheme {scheme!r} takes no parameter {unknown[0]!r} "
                         f"(its parameters: {', '.join(_SCHEMES[scheme])})")
    m, n, d = _sizes(scheme, params, check=True)
    w = _spacing(scheme, m, n, d)
    threshold = _threshold(m, n, d, w)
    if workers < threshold:
        raise ValueError(f"{scheme} with m={m}, n={n}, d={d} needs at least {threshold} workers "
                         f"(its recovery threshold), got {workers}")
    if points == "unit_circle":
        a_coef, b_coef, encoding, targets, z, embedding = unit_circle_code(workers, m, n, d, w)
        return MatmulCode(scheme, m, n, d, a_coef, b_coef, encoding, targets, points=z, seed=seed,
                          max_error=max_error, embedding=embedding)
    x = pts.chebyshev(workers)
    powers = x[:, None] ** np.arange(threshold)[None, :]
    a_coef = np.stack([powers[:, w * i + j] for i in range(m) for j in range(n)], axis=1)[:, None, :]
    b_coef = np.stack([powers[:, n - 1 - j + m * w * k] for j in range(n) for k in range(d)], axis=1)[:, None, :]
    targets = np.zeros((m * d, threshold))
    for i, k in itertools.product(range(m), range(d)):
        targets[i * d + k, w * i + n - 1 + m * w * k] = 1.0
    return MatmulCode(scheme, m, n, d, a_coef, b_coef, powers, targets, points=x, seed=seed, max_error=max_error)
