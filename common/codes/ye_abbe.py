"""Ye & Abbe's communication-computation efficient gradient code (ICML 2018, Sec. 3).

Each worker holds d = s + m cyclically consecutive partitions and sends l/m numbers; the master
recovers ``sum_j g_j`` from any n - s workers. Worker i sends, for v = 0..l/m-1,

    f_i[v] = sum_{t<d} sum_{u<m} p^(u)_{i+t}(theta_i) * g_{i+t}[v*m + u]

where ``p_j = prod_{t=1}^{n-d} (x - theta_{j+t})`` vanishes at the workers that do not hold
partition j and ``p^(u)_j = p_j * q^(u)_j`` (Eq. 7) is chosen so that the top m monomial
coefficients of the degree n-s-1 interpolant are exactly the m sums we want.

Numerics (our extension, docs/codes.md): the paper's real points make every decode a real
Vandermonde solve, which loses about 1e-4 at n = 30. By default we place theta on the n-th roots
of unity and pack pairs of real gradient entries into one complex number, so a message is still
l/m floats while every decode is a unit-circle Vandermonde solve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded.base.checks import check_int

from . import points as pts
from .gradient_registry import register
from .linear_gradient import DEFAULT_MAX_ERROR, LinearGradientCode

__all__ = ["YeAbbe", "ye_abbe_coefficients"]


def ye_abbe_coefficients(n: int, s: int, m: int, theta: np.ndarray) -> np.ndarray:
    """The encoding coefficients ``C[i, j, u] = p^(u)_j(theta_i)`` on each worker's support.

    Values are computed as products of root distances (not from monomial coefficients), which is
    what keeps them accurate for large n.

    Parameters
    ----------
    n, s, m : int
        Workers, stragglers, communication reduction (d = s + m partitions per worker).
    theta : (n,) ndarray
        Distinct evaluation points, real or complex.

    Returns
    -------
    C : (n, n, m) ndarray
        Zero outside the cyclic support ``j in {i, ..., i+d-1}``.
    """
    d = s + m
    out = np.zeros((n, n, m), dtype=np.result_type(theta.dtype, np.float64))
    for j in range(n):
        roots = theta[[(j + t) % n for t in range(1, n - d + 1)]]
        # top[r] = coefficient of x^(n-d-r) in p_j (monic), for r < m
        top = np.zeros(m, dtype=out.dtype)
        top[0] = 1.0
        for root in roots:
            top[1:] = top[1:] - root * top[:-1]
        # q^(1) = 1, q^(u) = x q^(u-1) - a, a = coefficient of x^(n-d-1) in p_j q^(u-1)
        qs = [np.ones(1, dtype=out.dtype)]  # highest degree first
        for _ in range(1, m):
            q = qs[-1]
            a = sum(q[r] * top[len(q) - r] for r in range(len(q)) if len(q) - r < m)
            qs.append(np.concatenate([q, [0.0]]) - np.concatenate([np.zeros(len(q)), [a]]))
        for t in range(d):
            i = (j - t) % n
            value = np.prod(theta[i] - roots)
            for u in range(m):
                out[i, j, u] = value * np.polyval(qs[u], theta[i])
    return out


@register("ye_abbe")
class YeAbbe(LinearGradientCode):
    """Ye & Abbe's code: any n-s of n workers, d = s + m partitions each, l/m floats each.

    Parameters
    ----------
    m : int
        Communication reduction; m = 1 is a deterministic cyclic code of Tandon's kind.
    points : {"unit_circle", "chebyshev", "paper"} or sequence of n distinct reals
        Evaluation points. "unit_circle" (default) packs pairs of reals into complex numbers and
        is the accurate choice; "paper" is Ye & Abbe's +-(1 + i/2); "chebyshev" real nodes.
    max_error : float
        Refuse parameters whose worst responder set would decode less accurately than this.
    """

    def __init__(
        self,
        n: int,
        s: int = 0,
        seed: int = 0,
        m: int = 1,
        points: str | Sequence[float] = "unit_circle",
        max_error: float = DEFAULT_MAX_ERROR,
    ) -> None:
        m = check_int("communication reduction m", m, 1)
        if s + m > n:
            raise ValueError(f"ye_abbe needs d = s + m <= n (got s={s}, m={m}, n={n})")
        theta = self._points(n, points)
        coefficients = ye_abbe_coefficients(n, s, m, theta)
        support = [[(i + t) % n for t in range(s + m)] for i in range(n)]
        super().__init__(n, s, coefficients, support, max_error=max_error)
        self.theta = theta
        self.worst_error = self._refuse_if_inaccurate(seed, max_error)

    @staticmethod
    def _points(n: int, points: str | Sequence[float]) -> np.ndarray:
        named = {"unit_circle": pts.roots_of_unity, "chebyshev": pts.chebyshev, "paper": pts.ye_abbe_paper}
        if isinstance(points, str):
            if points not in named:
                raise ValueError(f"points must be one of {', '.join(named)} or n numbers (got {points!r})")
            return named[points](n)
        theta = np.asarray(points, dtype=np.float64)
        if theta.shape != (n,) or len(np.unique(theta)) != n or not np.all(np.isfinite(theta)):
            raise ValueError(f"points must be {n} distinct finite numbers (got {list(points)!r})")
        return theta
