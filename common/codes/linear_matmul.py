"""The linear code for A @ B that every matmul scheme is: encoding blocks, decoding the product.

A code is a set of coefficient matrices (:func:`coded.codes.matmul.matmul_code` builds those of the
polynomial-type schemes and of the uncoded baseline); encoding, decoding and correcting wrong
results are the same for every scheme, here.

Inputs of any shape are accepted: ``encode`` appends zero rows and columns up to
:attr:`MatmulCode.size_multiples` (zeros add nothing to the product) and ``decode`` crops the
product back to the shape of the inputs, so the result is exactly A @ B.

Decoding from any R responses solves for the product blocks, which is a weighted sum of the
responses (:mod:`coded.codes.linear`); with R + e + 1 responses up to e wrong ones are located
on a random projection and left out (spec/000 Sec. 4.2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coded.base.checks import check_int
from coded.base.words import plural

from .embedding import REAL, Embedding
from .errors import NotDecodableError
from .linear import DECODE_SLACK, DecodeWeights, LinearDecoder

__all__ = ["MatmulCode"]

#: Random responder sets the constructor checks besides the structurally worst ones.
RANDOM_CHECKS = 100
#: Responder sets whose weights the constructor solves in one batch.
CHECK_BATCH = 32
#: Projection bases (2 floats per result entry) kept per code up to this size.
PROJECTION_CACHE_BYTES = 1 << 20


class MatmulCode:
    """A linear code for ``A @ B`` on P workers (polynomial-type, or uncoded).

    A block A_ij is split into ``embedding.rows x embedding.inner`` sub-blocks and B_jk into
    ``embedding.inner x embedding.cols`` (1 x 1 for real points). Worker p's A_p is made of the
    sub-blocks ``sum a_coef[p, s, :] * (sub-blocks of A)`` and likewise B_p; its result, packed
    by ``embedding.pack`` into a message, is ``sum_q encoding[p, q] * c_q`` for R unknown symbols
    c_q, of which the product blocks are ``C_ik = targets[i*d + k] @ c`` (unpacked by
    ``embedding.unpack``). Build codes with :func:`coded.codes.matmul_code`.

    Parameters
    ----------
    scheme : str
        Name, for messages.
    m, n, d : int
        A is split m x n, B n x d.
    a_coef : (P, rows*inner, m*n*rows*inner) ndarray
    b_coef : (P, inner*cols, n*d*inner*cols) ndarray
    encoding : (P, R) ndarray, real or complex
    targets : (m*d, R) ndarray
    embedding : Embedding
        Sub-block split and result packing (default: plain real blocks).
    points : (P,) ndarray or None
        Evaluation points of a polynomial code, whose clusters are checked for conditioning.
    seed : int
        Seed of the random projections used to locate wrong results, and of the checked sample.
    max_error : float
        Refuse parameters whose worst checked responder set decodes less accurately (relative).
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
        embedding: Embedding = REAL,
    ) -> None:
        self.scheme = scheme
        self.workers, self._recovery_threshold = encoding.shape
        self.m, self.n, self.d = m, n, d
        self.points = points
        self.embedding = embedding
        self._a = a_coef
        self._b = b_coef
        self._decoder = LinearDecoder(encoding, targets, max_error=max_error * DECODE_SLACK)
        self._rng_seed = seed
        self._projections: dict[int, np.ndarray] = {}
        # rows of the A and columns of the B encoded last (None: none, or B was a vector): the
        # product decode crops to by default
        self._encoded_rows: int | None = None
        self._encoded_columns: int | None = None
        self.worst_error = self._check_conditioning(points, max_error) if points is not None else 0.0

    @property
    def recovery_threshold(self) -> int:
        """R: results needed to decode with no wrong ones."""
        return self._recovery_threshold

    @property
    def size_multiples(self) -> tuple[int, int, int]:
        """What encode pads N1 (rows of A), N0 (inner) and Nb (columns of B) to multiples of."""
        e = self.embedding
        return self.m * e.rows, self.n * e.inner, self.d * e.cols

    def __repr__(self) -> str:
        return f"MatmulCode({self.scheme!r}, workers={self.workers}, m={self.m}, n={self.n}, d={self.d})"

    # --- encoding ---------------------------------------------------------------------------------

    def encode(self, a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each worker's pair (A_p, B_p).

        A and B are padded with zero rows and columns up to :attr:`size_multiples`: N1', N0' and
        Nb' below are N1, N0 and Nb rounded up to them. The code remembers N1 and Nb, so that
        :meth:`decode` returns exactly A @ B.

        Parameters
        ----------
        a : (N1, N0) ndarray
        b : (N0, Nb) or (N0,) ndarray
            A vector needs d = 1.

        Returns
        -------
        pairs : list of P tuples ((N1'/m, N0'/n) ndarray, (N0'/n, Nb'/d) or (N0'/n,) ndarray)

        Examples
        --------
        >>> from coded.codes import matmul_code
        >>> mm = matmul_code("matdot", workers=7, n=3)
        >>> a, b = np.arange(36.0).reshape(4, 9), np.ones((9, 5))
        >>> pairs = mm.encode(a, b)  # the 9 inner columns padded to 12: 3 blocks of 2 halves
        >>> pairs[0][0].shape, pairs[0][1].shape
        ((4, 4), (4, 5))
        >>> results = {p: x @ y for p, (x, y) in enumerate(pairs)}
        >>> bool(np.allclose(mm.decode(results), a @ b))
        True
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
        rows, inner, _ = self.size_multiples
        e = self.embedding
        sub = self._split(_pad(a, rows, inner), (self.m, e.rows), (self.n, e.inner))
        blocks = self._combine(self._rows(self._a, workers), sub, (e.rows, e.inner))
        self._encoded_rows = a.shape[0]
        return blocks

    def encode_right(self, b: np.ndarray, workers: Sequence[int] | None = None) -> list[np.ndarray]:
        """Encode B (or a vector, with d = 1). Shapes and ``workers`` as in encode_left."""
        b = self._check_matrix("B", b, (1, 2))
        vector = b.ndim == 1
        padded = self._pad_right(b)
        e = self.embedding
        sub = self._split(padded[:, None] if vector else padded, (self.n, e.inner), (self.d, e.cols))
        blocks = self._combine(self._rows(self._b, workers), sub, (e.inner, e.cols))
        self._encoded_columns = None if vector else b.shape[1]
        return [block[:, 0] for block in blocks] if vector else blocks

    def pad_right(self, b: np.ndarray) -> np.ndarray:
        """B (N0, Nb) or a vector (N0,) as encode_right pads it: (N0', Nb') or (N0',) float64.

        Matrix-vector mode sends every worker the padded vector, which each encodes for itself.
        """
        return self._pad_right(self._check_matrix("B", b, (1, 2)))

    def _pad_right(self, b: np.ndarray) -> np.ndarray:
        if b.ndim == 1 and self.d != 1:
            raise ValueError(f"a vector B needs d = 1 (got d={self.d})")
        _, inner, columns = self.size_multiples
        return _pad(b[:, None], inner, 1)[:, 0] if b.ndim == 1 else _pad(b, inner, columns)

    def _rows(self, coefficients: np.ndarray, workers: Sequence[int] | None) -> np.ndarray:
        if workers is None:
            return coefficients
        ids = [check_int("worker id", p) for p in workers]
        if any(not 0 <= p < self.workers for p in ids):
            raise ValueError(f"worker ids must be in 0..{self.workers - 1} (got {ids})")
        return coefficients[ids]

    @staticmethod
    def _combine(coefficients: np.ndarray, sub: np.ndarray, parts: tuple[int, int]) -> list[np.ndarray]:
        """Blocks ``(parts[0] * r, parts[1] * c)`` from coefficients (W, S, K) and sub-blocks (K, r, c)."""
        count, r, c = sub.shape
        encoded = coefficients.reshape(-1, count) @ sub.reshape(count, -1)
        blocks = encoded.reshape(-1, parts[0], parts[1], r, c).transpose(0, 1, 3, 2, 4)
        return list(blocks.reshape(-1, parts[0] * r, parts[1] * c))

    @staticmethod
    def _split(x: np.ndarray, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
        """Sub-blocks (blocks * halves on each axis, r, c), block-major then half-major, of a padded x."""
        (m, u), (n, v) = rows, cols
        r, c = x.shape[0] // (m * u), x.shape[1] // (n * v)
        return x.reshape(m, u, r, n, v, c).transpose(0, 3, 1, 4, 2, 5).reshape(m * n * u * v, r, c)

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

    def decode(self, results: Mapping[int, np.ndarray], max_errors: int = 0,
               shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A @ B from coded.worker results ``{p: A_p @ B_p}``.

        Needs ``recovery_threshold`` results, plus ``max_errors + 1`` to correct up to
        ``max_errors`` wrong ones. With surplus results and ``max_errors = 0`` it still checks
        them for consistency.

        Parameters
        ----------
        results : {int: (N1'/m, Nb'/d) or (N1'/m,) ndarray}
        max_errors : int
        shape : (N1, Nb) or (N1,), optional
            The product's shape before padding (see :meth:`encode`). Default: the rows of the A
            and the columns of the B this code encoded last, or the whole padded product where
            it encoded none. A code shared between inputs of several shapes (as processes cache
            codes) must be given the shape.

        Returns
        -------
        product : (N1, Nb) or (N1,) ndarray

        Raises
        ------
        NotDecodableError
            Too few results.
        IllConditionedError
            The responder set cannot be decoded accurately in float64.
        DecodingFailure
            More results are wrong than can be corrected (detected, never returned).
        ValueError
            ``shape`` does not pad to the product of the results' blocks.
        """
        return self.correct(results, max_errors, shape)[0]

    def correct(self, results: Mapping[int, np.ndarray], max_errors: int = 0,
                shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, tuple[int, ...]]:
        """Like :meth:`decode`, also returning the workers whose results were wrong."""
        max_errors = check_int("max_errors", max_errors, 0)
        arrays = self._check_results(results)
        needed = self.recovery_threshold + (max_errors + 1 if max_errors else 0)
        if len(arrays) < needed:
            raise NotDecodableError(
                f"{self.scheme} needs {needed} results"
                + (f" to correct {plural(max_errors, 'wrong one')}" if max_errors else "")
                + f", got {len(arrays)}"
            )
        ids = sorted(arrays)
        block = arrays[ids[0]].shape
        e = self.embedding
        if block[0] % e.rows or (block[1] if len(block) == 2 else 1) % e.cols:
            raise ValueError(f"results of shape {block} are not products of this code's blocks "
                             f"(rows a multiple of {e.rows}, columns of {e.cols})")
        crop = self._crop(block, shape)
        wrong: tuple[int, ...] = ()
        if len(ids) > self.recovery_threshold:  # surplus results: check them, correct if asked
            wrong = self._decoder.locate_errors(ids, self._project([arrays[p] for p in ids]), max_errors)
        weights = self._decoder.weights([p for p in ids if p not in wrong])
        product = e.combine([arrays[p] for p in weights.workers], weights.matrix, self.m, self.d)
        return product[crop], wrong

    def _crop(self, block: tuple[int, ...], shape: tuple[int, ...] | None) -> tuple[slice, ...]:
        """The slices that crop the product of results of shape ``block`` to ``shape``."""
        padded = tuple(blocks * size for blocks, size in zip((self.m, self.d), block, strict=False))
        steps = (self.size_multiples[0], self.size_multiples[2])[: len(block)]
        if shape is None:
            remembered = (self._encoded_rows, self._encoded_columns)[: len(block)]
            shape = tuple(whole if size is None else size for size, whole in zip(remembered, padded, strict=True))
        shape = tuple(check_int("shape", size, 1) for size in shape)
        if len(shape) != len(padded) or any(math.ceil(size / step) * step != whole
                                            for size, step, whole in zip(shape, steps, padded, strict=True)):
            raise ValueError(f"shape {shape} does not fit results whose product is {padded} (padded to multiples "
                             f"of {steps}); give decode the shape of the product of the inputs they come from")
        return tuple(slice(0, size) for size in shape)

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

    def _project(self, results: Sequence[np.ndarray]) -> np.ndarray:
        """Each result's message reduced to 2 numbers by the same random linear maps."""
        units, unit = self.embedding.units(results[0].shape)
        size = units * unit
        basis = self._projections.get(size)
        if basis is None:
            basis = np.random.default_rng([self._rng_seed, size]).standard_normal((size, 2))
            if basis.nbytes <= PROJECTION_CACHE_BYTES:  # a large one is drawn again: cached, it would
                self._projections[size] = basis          # pin 16 bytes per result entry for every cached code
        return self.embedding.project(list(results), basis)

    def decode_weights(self, workers: Sequence[int]) -> DecodeWeights:
        """The cached, checked decode weights of a responder set (its product-block rows)."""
        return self._decoder.weights(list(workers))

    def error_bound(self, workers: Sequence[int]) -> float:
        """Estimated worst relative decode error of a responder set, without the accuracy check."""
        return self._decoder.solve(tuple(sorted(set(workers)))).error_bound

    def _check_conditioning(self, points: np.ndarray, max_error: float) -> float:
        """Worst error over the structurally worst responder sets plus a seeded sample.

        Decoding is hardest when the responders' points bunch together, leaving a wide gap: R
        neighbouring points (cyclically, by angle on the circle or by value on the line), or
        R - 1 of them and any other point. On the P-th roots of unity, turning a set by one
        position scales the encoding's columns by unit-modulus factors, which leaves the error
        estimate unchanged, so one starting point stands for all P."""
        r, p = self.recovery_threshold, self.workers
        roots = np.iscomplexobj(points) and np.allclose(points, np.exp(2j * np.pi * np.arange(p) / p))
        order = [int(q) for q in np.argsort(np.angle(points) if np.iscomplexobj(points) else points)]
        windows = [[order[(start + t) % p] for t in range(r - 1)] for start in range(1 if roots else p)]
        sets = [tuple(sorted([*window, other])) for window in windows for other in range(p) if other not in window]
        rng = np.random.default_rng(self._rng_seed)
        sets += [tuple(sorted(rng.choice(p, r, replace=False).tolist())) for _ in range(min(RANDOM_CHECKS, p))]
        unique = list(dict.fromkeys(sets))
        worst = 0.0
        for start in range(0, len(unique), CHECK_BATCH):  # the bunched sets first: a refusal stops early
            batch = self._decoder.solve_many(unique[start : start + CHECK_BATCH])
            worst = max([worst, *(weights.error_bound for weights in batch)])
            if worst > max_error:
                raise ValueError(
                    f"{self.scheme} with {p} workers and recovery threshold {r} cannot decode every "
                    f"responder set accurately in float64 (estimated error {worst:.1e} > "
                    f"{max_error:.0e}); use fewer workers or a smaller threshold (docs/codes.md)"
                )
        return worst


def _pad(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``x`` (r, c) with zero rows and columns appended up to multiples of ``rows`` and ``cols``."""
    shape = (math.ceil(x.shape[0] / rows) * rows, math.ceil(x.shape[1] / cols) * cols)
    if shape == x.shape:
        return x
    out = np.zeros(shape)
    out[: x.shape[0], : x.shape[1]] = x
    return out
