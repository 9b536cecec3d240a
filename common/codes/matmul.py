"""Polynomial-type codes for A @ B: Polynomial, MatDot, PolyDot and Generalized PolyDot.

A (N1 x N0) is split into m x n blocks A_ij and B (N0 x Nb) into n x d blocks B_jk. Worker p gets
``A_p = sum A_ij x_p^a(i,j)`` and ``B_p = sum B_jk x_p^b(j,k)`` and returns A_p @ B_p, an
evaluation of a polynomial whose coefficient at c(i,k) is the product block C_ik = sum_j A_ij B_jk.
The schemes differ only in the exponent maps (spec/000 Sec. 3):

=========== =================== ========================== ==================== =============
scheme       a(i, j)             b(j, k)                    c(i, k)              threshold R
=========== =================== ========================== ==================== =============
polynomial   i                   m k                        i + m k              m d
matdot       j                   n - 1 - j                  n - 1                2n - 1
polydot      (2n-1) i + j        n-1-j + m(2n-1) k          (2n-1) i + n-1 + m(2n-1)k   m(2n-1)d
gpd          n i + j             n-1-j + m n k              n i + n-1 + m n k    m n d + n - 1
=========== =================== ========================== ==================== =============

Decoding from any R responses interpolates the polynomial and reads the product blocks, which is
a weighted sum of the responses (:mod:`coded.codes.linear`); with R + e + 1 responses up to e
wrong ones are located on a random projection and left out (spec/000 Sec. 4.2).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from coded.base.checks import check_int

from . import points as pts
from .combine import weighted_sum
from .errors import NotDecodableError
from .linear import DECODE_SLACK, DecodeWeights, LinearDecoder

__all__ = ["MatmulCode", "matmul_code", "matmul_schemes", "recovery_threshold"]

Exponent = Callable[[int, int], int]
#: Projection bases (2 floats per result entry) kept per code up to this size.
PROJECTION_CACHE_BYTES = 1 << 20


class MatmulCode:
    """A linear code for ``A @ B`` on P workers (polynomial-type, or uncoded).

    Worker p gets ``A_p = sum_(i,j) a_coef[p, (i,j)] A_ij`` and ``B_p = sum_(j,k) b_coef[p, (j,k)] B_jk``
    and returns ``A_p @ B_p = sum_q encoding[p, q] * c_q`` for R unknown blocks c_q, of which the
    product blocks are ``C_ik = targets[(i,k)] @ c``. Build codes with :func:`matmul_code`.

    Parameters
    ----------
    scheme : str
        Name, for messages.
    m, n, d : int
        A is split m x n, B n x d.
    a_coef : (P, m*n) ndarray
    b_coef : (P, n*d) ndarray
    encoding : (P, R) ndarray
    targets : (m*d, R) ndarray
    points : (P,) ndarray or None
        Evaluation points of a polynomial code, whose clusters are checked for conditioning.
    seed : int
        Seed of the random projections used to locate wrong results.
    max_error : float
        Refuse parameters whose worst responder set decodes less accurately (relative).
    """

    def __init__(
        self,
        scheme: str,
        m: int,
        n: int,
        d: int,
        a_coef: np.ndarray,
        b_coef: np.ndarray,
        encoding: np.ndarray,
        targets: np.ndarray,
        points: np.ndarray | None = None,
        seed: int = 0,
        max_error: float = 1e-6,
    ) -> None:
        self.scheme = scheme
        self.workers, self._recovery_threshold = encoding.shape
        self.m, self.n, self.d = m, n, d
        self.points = points
        self._a = a_coef
        self._b = b_coef
        self._decoder = LinearDecoder(encoding, targets, max_error=max_error * DECODE_SLACK)
        self._rng_seed = seed
        self._projections: dict[int, np.ndarray] = {}
        self.worst_error = self._check_conditioning(points, max_error) if points is not None else 0.0

    @property
    def recovery_threshold(self) -> int:
        """R: results needed to decode with no wrong ones."""
        return self._recovery_threshold

    def __repr__(self) -> str:
        return f"MatmulCode({self.scheme!r}, workers={self.workers}, m={self.m}, n={self.n}, d={self.d})"

    # --- encoding ---------------------------------------------------------------------------------

    def encode(self, a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each worker's pair (A_p, B_p).

        Parameters
        ----------
        a : (N1, N0) ndarray
            m | N1 and n | N0.
        b : (N0, Nb) or (N0,) ndarray
            n | N0 and d | Nb; a vector needs d = 1.

        Returns
        -------
        pairs : list of P tuples ((N1/m, N0/n) ndarray, (N0/n, Nb/d) or (N0/n,) ndarray)
        """
        a = self._check_matrix("A", a, 2)
        b = self._check_matrix("B", b, (1, 2))
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"inner dimensions differ: A is {a.shape}, B is {b.shape}")
        return list(zip(self.encode_left(a), self.encode_right(b), strict=True))

    def encode_left(self, a: np.ndarray, workers: Sequence[int] | None = None) -> list[np.ndarray]:
        """Encode A once (matrix-vector mode keeps these on the workers). Shapes as in encode.

        ``workers`` restricts the output to those workers' blocks (default: all, in order).
        """
        a = self._check_matrix("A", a, 2)
        blocks = self._split(a, self.m, self.n, "A")
        return self._combine(self._rows(self._a, workers), blocks, (a.shape[0] // self.m, a.shape[1] // self.n))

    def encode_right(self, b: np.ndarray, workers: Sequence[int] | None = None) -> list[np.ndarray]:
        """Encode B (or a vector, with d = 1). Shapes and ``workers`` as in encode_left."""
        b = self._check_matrix("B", b, (1, 2))
        vector = b.ndim == 1
        if vector and self.d != 1:
            raise ValueError(f"a vector B needs d = 1 (got d={self.d})")
        b2 = b[:, None] if vector else b
        blocks = self._split(b2, self.n, self.d, "B")
        shape = (b2.shape[0] // self.n,) if vector else (b2.shape[0] // self.n, b2.shape[1] // self.d)
        return self._combine(self._rows(self._b, workers), blocks, shape)

    def _rows(self, coefficients: np.ndarray, workers: Sequence[int] | None) -> np.ndarray:
        if workers is None:
            return coefficients
        ids = [check_int("worker id", p) for p in workers]
        if any(not 0 <= p < self.workers for p in ids):
            raise ValueError(f"worker ids must be in 0..{self.workers - 1} (got {ids})")
        return coefficients[ids]

    @staticmethod
    def _combine(coefficients: np.ndarray, blocks: np.ndarray, shape: tuple[int, ...]) -> list[np.ndarray]:
        encoded = coefficients @ blocks.reshape(blocks.shape[0], -1)
        return [row.reshape(shape) for row in encoded]

    @staticmethod
    def _split(x: np.ndarray, rows: int, cols: int, name: str) -> np.ndarray:
        for axis, parts, label in ((0, rows, "rows"), (1, cols, "columns")):
            if x.shape[axis] % parts:
                raise ValueError(f"{name} has {x.shape[axis]} {label}, not divisible into {parts} blocks")
        r, c = x.shape[0] // rows, x.shape[1] // cols
        return x.reshape(rows, r, cols, c).transpose(0, 2, 1, 3).reshape(rows * cols, r, c)

    @staticmethod
    def _check_matrix(name: str, x: Any, ndim: int | tuple[int, ...]) -> np.ndarray:
        x = np.asarray(x)
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if x.ndim not in allowed or x.size == 0:
            raise ValueError(f"{name} must be a non-empty array with {' or '.join(map(str, allowed))} dimensions "
                             f"(got shape {x.shape})")
        if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
            raise TypeError(f"{name} must be a real numeric array (got {x.dtype})")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} contains NaN or infinity")
        return x.astype(np.float64, copy=False)

    # --- decoding ---------------------------------------------------------------------------------

    def decode(self, results: Mapping[int, np.ndarray], max_errors: int = 0) -> np.ndarray:
        """A @ B from coded.worker results ``{p: A_p @ B_p}``.

        Needs ``recovery_threshold`` results, plus ``max_errors + 1`` to correct up to
        ``max_errors`` wrong ones. With surplus results and ``max_errors = 0`` it still checks
        them for consistency.

        Returns
        -------
        product : (N1, Nb) or (N1,) ndarray

        Raises
        ------
        NotDecodableError
            Too few results.
        DecodingFailure
            More results are wrong than can be corrected (detected, never returned).
        """
        return self.correct(results, max_errors)[0]

    def correct(self, results: Mapping[int, np.ndarray], max_errors: int = 0) -> tuple[np.ndarray, tuple[int, ...]]:
        """Like :meth:`decode`, also returning the workers whose results were wrong."""
        max_errors = check_int("max_errors", max_errors, 0)
        arrays = self._check_results(results)
        needed = self.recovery_threshold + (max_errors + 1 if max_errors else 0)
        if len(arrays) < needed:
            raise NotDecodableError(
                f"{self.scheme} needs {needed} results"
                + (f" to correct {max_errors} wrong ones" if max_errors else "")
                + f", got {len(arrays)}"
            )
        ids = sorted(arrays)
        wrong: tuple[int, ...] = ()
        if len(ids) > self.recovery_threshold:  # surplus results: check them, correct if asked
            wrong = self._decoder.locate_errors(ids, self._project([arrays[p] for p in ids]), max_errors)
        clean = [p for p in ids if p not in wrong]
        weights = self._decoder.weights(clean)
        first = arrays[clean[0]]
        flat = weighted_sum([arrays[p].reshape(-1) for p in weights.workers], weights.matrix, by_target=True)
        r = first.shape[0]
        c = first.shape[1] if first.ndim == 2 else 1
        # flat[(i, k), (x, y)] is entry (x, y) of block C_ik
        product = flat.reshape(self.m, self.d, r, c).transpose(0, 2, 1, 3).reshape(self.m * r, self.d * c)
        return (product[:, 0] if first.ndim == 1 else product), wrong

    def _check_results(self, results: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        arrays: dict[int, np.ndarray] = {}
        for p, value in results.items():
            p = check_int("worker id", p)
            if not 0 <= p < self.workers:
                raise ValueError(f"worker id must be in 0..{self.workers - 1} (got {p})")
            arrays[p] = np.ascontiguousarray(value, dtype=np.float64)
        shapes = {a.shape for a in arrays.values()}
        if len(shapes) > 1 or any(len(s) not in (1, 2) for s in shapes):
            raise ValueError(f"results must be equally shaped vectors or matrices (got {sorted(shapes)})")
        return arrays

    def _project(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        size = arrays[0].size
        basis = self._projections.get(size)
        if basis is None:
            basis = np.random.default_rng([self._rng_seed, size]).standard_normal((size, 2))
            if basis.nbytes <= PROJECTION_CACHE_BYTES:  # a large one is drawn again: cached, it would
                self._projections[size] = basis          # pin 16 bytes per result entry for every cached code
        return np.stack([a.reshape(-1) @ basis for a in arrays])

    def decode_weights(self, workers: Sequence[int]) -> DecodeWeights:
        """The cached, checked decode weights of a responder set (its product-block rows)."""
        return self._decoder.weights(list(workers))

    def _check_conditioning(self, points: np.ndarray, max_error: float) -> float:
        """Worst error over clustered responder sets (the worst case on real points): R
        neighbouring points, or R - 1 of them and any other point; plus a seeded sample."""
        order = [int(p) for p in np.argsort(points)]
        r, p = self.recovery_threshold, self.workers
        sets = [tuple(sorted(order[start : start + r])) for start in range(p - r + 1)]
        for start in range(p - r + 2):
            window = order[start : start + r - 1]
            sets += [tuple(sorted([*window, other])) for other in range(p) if other not in window]
        rng = np.random.default_rng(self._rng_seed)
        sets += [tuple(sorted(rng.choice(p, r, replace=False))) for _ in range(min(100, p))]
        worst = max(self._decoder.solve(f).error_bound for f in sets)
        if worst > max_error:
            raise ValueError(
                f"{self.scheme} with {p} workers and recovery threshold {r} cannot decode every "
                f"responder set accurately in float64 (estimated error {worst:.1e} > "
                f"{max_error:.0e}); use fewer workers or a smaller threshold (docs/codes.md)"
            )
        return worst


def _polynomial(m: int, n: int, d: int) -> tuple[Exponent, Exponent, Exponent, int]:
    return (lambda i, j: i), (lambda j, k: m * k), (lambda i, k: i + m * k), m * d


def _matdot(m: int, n: int, d: int) -> tuple[Exponent, Exponent, Exponent, int]:
    return (lambda i, j: j), (lambda j, k: n - 1 - j), (lambda i, k: n - 1), 2 * n - 1


def _polydot(m: int, n: int, d: int) -> tuple[Exponent, Exponent, Exponent, int]:
    w = 2 * n - 1
    return (
        (lambda i, j: w * i + j),
        (lambda j, k: n - 1 - j + m * w * k),
        (lambda i, k: w * i + n - 1 + m * w * k),
        m * w * d,
    )


def _gpd(m: int, n: int, d: int) -> tuple[Exponent, Exponent, Exponent, int]:
    return (
        (lambda i, j: n * i + j),
        (lambda j, k: n - 1 - j + m * n * k),
        (lambda i, k: n * i + n - 1 + m * n * k),
        m * n * d + n - 1,
    )


_SCHEMES = {
    "polynomial": (_polynomial, ("m", "d")),
    "matdot": (_matdot, ("n",)),
    "polydot": (_polydot, ("m", "n", "d")),
    "gpd": (_gpd, ("m", "n", "d")),
}


def recovery_threshold(scheme: str, m: int = 1, n: int = 1, d: int = 1) -> int:
    """Recovery threshold of a polynomial scheme without building it (spec/000 Sec. 3).

    >>> recovery_threshold("gpd", m=2, n=2, d=2), recovery_threshold("polydot", m=2, n=2, d=2)
    (9, 12)
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown matmul scheme {scheme!r}; choose one of {', '.join(_SCHEMES)}")
    build, names = _SCHEMES[scheme]
    sizes = {"m": m, "n": n, "d": d}
    sizes.update({name: 1 for name in sizes if name not in names})
    return build(sizes["m"], sizes["n"], sizes["d"])[3]


def matmul_schemes() -> tuple[str, ...]:
    """Names accepted by :func:`matmul_code`."""
    return ("uncoded", *_SCHEMES)


def matmul_scheme_params(scheme: str) -> tuple[str, ...]:
    """The block counts a scheme takes (uncoded: none; it splits A into P row blocks).

    >>> matmul_scheme_params("matdot"), matmul_scheme_params("gpd")
    (('n',), ('m', 'n', 'd'))
    """
    if scheme == "uncoded":
        return ()
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown matmul scheme {scheme!r}; choose one of {', '.join(matmul_schemes())}")
    return _SCHEMES[scheme][1]


def matmul_code(scheme: str, workers: int, seed: int = 0, max_error: float = 1e-6, **params: int) -> MatmulCode:
    """Build a matmul code.

    Parameters
    ----------
    scheme : {"uncoded", "polynomial", "matdot", "polydot", "gpd"}
        ``uncoded`` splits A into P row blocks, one per worker, and waits for all of them.
    workers : int
        P.
    **params : int
        polynomial: m, d; matdot: n; polydot and gpd: m, n, d (missing ones default to 1).

    Examples
    --------
    >>> matmul_code("gpd", workers=10, m=2, n=2, d=2).recovery_threshold
    9
    """
    workers = check_int("workers", workers, 1)
    seed = check_int("seed", seed, 0)
    if scheme == "uncoded":
        if params:
            raise ValueError(f"scheme 'uncoded' takes no parameter {sorted(params)[0]!r} "
                             "(it splits A into P row blocks)")
        eye = np.eye(workers)
        return MatmulCode(scheme, workers, 1, 1, eye, np.ones((workers, 1)), eye, eye, seed=seed)
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown matmul scheme {scheme!r}; choose one of uncoded, {', '.join(_SCHEMES)}")
    build, names = _SCHEMES[scheme]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise ValueError(f"scheme {scheme!r} takes no parameter {unknown[0]!r} (its parameters: {', '.join(names)})")
    sizes = {name: check_int(name, params.get(name, 1), 1) for name in ("m", "n", "d")}
    sizes.update({name: 1 for name in ("m", "n", "d") if name not in names})
    m, n, d = sizes["m"], sizes["n"], sizes["d"]
    a_exp, b_exp, c_exp, threshold = build(m, n, d)
    if workers < threshold:
        raise ValueError(f"{scheme} with m={m}, n={n}, d={d} needs at least {threshold} workers "
                         f"(its recovery threshold), got {workers}")
    points = pts.chebyshev(workers)
    powers = points[:, None] ** np.arange(threshold)[None, :]
    a_coef = np.array([[powers[p, a_exp(i, j)] for i in range(m) for j in range(n)] for p in range(workers)])
    b_coef = np.array([[powers[p, b_exp(j, k)] for j in range(n) for k in range(d)] for p in range(workers)])
    targets = np.zeros((m * d, threshold))
    for i, k in itertools.product(range(m), range(d)):
        targets[i * d + k, c_exp(i, k)] = 1.0
    return MatmulCode(scheme, m, n, d, a_coef, b_coef, powers, targets, points=points, seed=seed, max_error=max_error)
