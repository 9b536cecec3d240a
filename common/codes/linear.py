"""Decoding weights and error location for any linear code.

Every exact code here is linear: worker p returns ``y_p = E[p] @ x`` (applied coordinate-wise to
vectors or matrices), where x stacks the unknown symbols (partial gradients, coefficient blocks,
data blocks). Decoding from responder set F means finding weights W with ``W.T @ E[F] = T`` for a
target matrix T that selects what we want (the sum of the partial gradients, the product blocks,
the data). The weights depend only on F, so they are solved once, checked, and cached; decoding is
then :func:`coded.codes.combine.weighted_sum`.

Accuracy is reported relative to the largest symbol: ``residual`` bounds the error left by
inexact weights, ``amplification * eps`` the growth of rounding errors already in the responses.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coded.base.words import plural

from .errors import DecodingFailure, IllConditionedError

__all__ = ["DECODE_SLACK", "EPS", "DecodeWeights", "LinearDecoder"]

EPS = float(np.finfo(np.float64).eps)
#: Constructors certify ``max_error`` on the responder sets they check (all of them when there are
#: few, the structurally worst ones plus a sample otherwise); decoding refuses a set only when its
#: estimate exceeds ``DECODE_SLACK * max_error``. Unchecked sets were measured at most ~5x above
#: the checked worst (bench/numerics.py), and the estimate itself is ~15x pessimistic (median).
DECODE_SLACK = 100.0


@dataclass(frozen=True)
class DecodeWeights:
    """Weights that decode one responder set.

    Attributes
    ----------
    workers : tuple of int
        The responders, ascending; row i of ``matrix`` belongs to ``workers[i]``.
    matrix : (F, T) ndarray
        Decode weights.
    residual : float
        ``max_t sum_q |(W.T @ E_F - T)[t, q]|``.
    amplification : float
        ``max_t sum_i |W[i, t]| * sum_q |E[i, q]|``: how much rounding in the responses can grow.
    """

    workers: tuple[int, ...]
    matrix: np.ndarray
    residual: float
    amplification: float

    @property
    def error_bound(self) -> float:
        """Estimated worst relative decode error in float64."""
        return self.residual + EPS * self.amplification


class LinearDecoder:
    """Solves, checks and caches decode weights of one linear code.

    Parameters
    ----------
    encoding : (P, Q) ndarray
        Row p maps the Q symbols to what worker p returns. Real or complex.
    targets : (T, Q) ndarray
        The T linear functionals of the symbols that decoding must return.
    max_error : float
        Largest acceptable :attr:`DecodeWeights.error_bound`; above it,
        :class:`IllConditionedError`.
    cache_size : int
        Responder sets whose weights are kept (least recently used are dropped).
    """

    def __init__(
        self,
        encoding: np.ndarray,
        targets: np.ndarray,
        *,
        max_error: float = 1e-6,
        cache_size: int = 4096,
    ) -> None:
        if encoding.ndim != 2 or targets.ndim != 2 or encoding.shape[1] != targets.shape[1]:
            raise ValueError(
                f"encoding (P, Q) and targets (T, Q) disagree: {encoding.shape}, {targets.shape}"
            )
        self._encoding = encoding
        self._targets = targets.astype(np.result_type(encoding.dtype, targets.dtype))
        self._row_norms = np.abs(encoding).sum(axis=1)
        self.max_error = max_error
        self._cache: OrderedDict[tuple[int, ...], DecodeWeights] = OrderedDict()
        self._cache_size = cache_size

    @property
    def encoding(self) -> np.ndarray:
        """(P, Q) ndarray: the encoding matrix."""
        return self._encoding

    def weights(self, workers: Sequence[int]) -> DecodeWeights:
        """Decode weights for a responder set (any order; duplicates are ignored).

        Raises
        ------
        IllConditionedError
            When the weights cannot decode this set to ``max_error`` in float64.
        """
        key = tuple(sorted(set(workers)))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        result = self.solve(key)
        if result.error_bound > self.max_error:
            raise IllConditionedError(
                f"decoding from workers {list(key)} would lose accuracy: estimated relative "
                f"error {result.error_bound:.1e} exceeds the limit {self.max_error:.0e}"
            )
        self._cache[key] = result
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return result

    def solve(self, workers: tuple[int, ...]) -> DecodeWeights:
        """Weights for ``workers`` without the accuracy check or the cache."""
        return self.solve_many([workers])[0]

    def solve_many(self, sets: Sequence[tuple[int, ...]]) -> list[DecodeWeights]:
        """:meth:`solve` for several responder sets of one size, factorised together.

        With exactly as many responders as unknowns the systems are square and are solved by one
        batched LU, several times faster than a least-squares solve per set (constructors check
        hundreds of sets); otherwise, or when one is singular, by least squares set by set.
        """
        ids = np.asarray(sets, dtype=np.intp).reshape(len(sets), -1)
        rows = self._encoding[ids]  # (S, F, Q)
        transposed = rows.transpose(0, 2, 1)
        targets = np.broadcast_to(self._targets.T, (len(sets), *self._targets.T.shape))
        matrix = None
        if rows.shape[1] == rows.shape[2]:
            with contextlib.suppress(np.linalg.LinAlgError):
                matrix = np.linalg.solve(transposed, targets)
        if matrix is None:
            matrix = np.stack([np.linalg.lstsq(a, b, rcond=None)[0] for a, b in zip(transposed, targets, strict=True)])
        residual = np.abs(matrix.transpose(0, 2, 1) @ rows - self._targets).sum(axis=2).max(axis=1)
        amplification = (np.abs(matrix).transpose(0, 2, 1) @ self._row_norms[ids][:, :, None]).max(axis=(1, 2))
        return [DecodeWeights(tuple(int(w) for w in workers), m, float(r), float(a))
                for workers, m, r, a in zip(ids, matrix, residual, amplification, strict=True)]

    def locate_errors(
        self, workers: Sequence[int], projections: np.ndarray, max_errors: int
    ) -> tuple[int, ...]:
        """Find the responders whose responses are wrong (probabilistic error model).

        Under the probabilistic model (wrong values are continuous random; spec/000 Theorem 3) a
        set of responses that is consistent with the code and larger than its rank contains no
        wrong one. So the smallest set S whose removal leaves the rest consistent is the set of
        wrong responders; if no S of at most ``max_errors`` works, there are more errors than
        that. Consistency is judged relative to the responses that remain, so one enormous wrong
        value (an exponent bit flip) cannot hide the others; non-finite responses are wrong.

        Parameters
        ----------
        workers : sequence of F ints
            Responders, in the order of ``projections``' rows.
        projections : (F, R) ndarray
            Each response reduced to R numbers by the same random linear maps.
        max_errors : int
            Correct at most this many; needs ``F >= rank + max_errors + 1``.

        Returns
        -------
        wrong : tuple of int
            Worker ids of the wrong responses, ascending (empty when all are consistent).

        Raises
        ------
        DecodingFailure
            When errors are detected but cannot be located within ``max_errors``.
        """
        workers = list(workers)
        rank = int(np.linalg.matrix_rank(self._encoding[workers]))
        if len(workers) - rank < max_errors + 1:
            raise ValueError(
                f"correcting {plural(max_errors, 'error')} needs at least {rank + max_errors + 1} "
                f"responses, got {len(workers)}"
            )
        values = np.asarray(projections).reshape(len(workers), -1)
        broken = [i for i in range(len(workers)) if not np.all(np.isfinite(values[i]))]
        usable = [i for i in range(len(workers)) if i not in broken]
        for size in range(0, max_errors - len(broken) + 1):
            combos = list(itertools.combinations(usable, size))
            dropped = np.array(combos, dtype=int).reshape(len(combos), size)
            mask = np.ones((len(combos), len(workers)), dtype=bool)
            mask[:, broken] = False
            mask[np.arange(len(combos))[:, None], dropped] = False
            kept = np.broadcast_to(np.arange(len(workers)), mask.shape)[mask].reshape(len(combos), -1)
            passing = np.flatnonzero(self._consistent(np.asarray(workers)[kept], values[kept]))
            if len(passing) == 1:
                return tuple(sorted(workers[i] for i in [*broken, *dropped[passing[0]]]))
            if len(passing) > 1:
                raise DecodingFailure(
                    f"errors detected but their location is ambiguous among {len(passing)} "
                    f"sets of {plural(size + len(broken), 'responder')}"
                )
        raise DecodingFailure(
            f"more than {max_errors} of {len(workers)} responses are wrong: errors detected, "
            "not correctable"
        )

    def _consistent(self, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
        """For each candidate (a stack of responder sets), whether its values fit the code.

        rows : (C, K) worker ids; values : (C, K, R). Returns (C,) bool.
        """
        encoding = self._encoding[rows]  # (C, K, Q)
        u, sing, _ = np.linalg.svd(encoding, full_matrices=True)
        floor = sing[:, :1] * encoding.shape[1] * EPS * 10
        rank = (sing > floor).sum(axis=1)
        top = sing[:, 0]
        low = np.take_along_axis(sing, np.maximum(rank - 1, 0)[:, None], axis=1)[:, 0]
        tol = np.maximum(1e-10, 100 * EPS * top / low)
        # scaled to a peak of 1 first, so that huge wrong values cannot overflow the norms
        peak = np.maximum(np.abs(values).max(axis=(1, 2), keepdims=True), np.finfo(float).tiny)
        values = values / peak
        scale = np.linalg.norm(values, axis=(1, 2))
        out = np.empty(len(rows), dtype=bool)
        for r in np.unique(rank):  # candidates of equal rank share the shape of their parity checks
            group = np.flatnonzero(rank == r)
            parity = u[group][:, :, r:]  # orthonormal columns spanning each left null space
            misfit = np.linalg.norm(parity.conj().transpose(0, 2, 1) @ values[group], axis=(1, 2))
            out[group] = misfit <= tol[group] * scale[group]
        return out
