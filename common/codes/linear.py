"""Decoding weights and error location for any linear code.

Every exact code here is linear: worker p returns ``y_p = E[p] @ x`` (applied coordinate-wise to
vectors or matrices), where x stacks the unknown symbols (partial gradients, coefficient blocks,
data blocks). Decoding from responder set F means finding weights W with ``W.T @ E[F] = T`` for a
target matrix T that selects what we want (the sum of the partial gradients, the product blocks,
the data). The weights depend only on F, so they are solved once, checked, and cached; decoding is
then :func:`common.codes.combine.weighted_sum`.

Accuracy is reported relative to the largest symbol: ``residual`` bounds the error left by
inexact weights, ``amplification * eps`` the growth of rounding errors already in the responses.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DecodingFailure, IllConditionedError

__all__ = ["EPS", "DecodeWeights", "LinearDecoder"]

EPS = float(np.finfo(np.float64).eps)


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
        rows = self._encoding[list(workers)]
        matrix = np.linalg.lstsq(rows.T, self._targets.T, rcond=None)[0]
        residual = float(np.abs(matrix.T @ rows - self._targets).sum(axis=1).max())
        amplification = float((np.abs(matrix).T @ self._row_norms[list(workers)]).max())
        return DecodeWeights(workers, matrix, residual, amplification)

    def locate_errors(
        self, workers: Sequence[int], projections: np.ndarray, max_errors: int
    ) -> tuple[int, ...]:
        """Find the responders whose responses are wrong (probabilistic error model).

        Under the probabilistic model (wrong values are continuous random; spec/000 Theorem 3) a
        set of responses consistent with the code and larger than its rank contains no wrong one.
        So the smallest set S whose removal leaves the rest consistent is the set of wrong
        responders; if no S of at most ``max_errors`` works, there are more errors than that.

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
        rows = self._encoding[workers]
        u, sing, _ = np.linalg.svd(rows, full_matrices=True)
        rank = int(np.sum(sing > sing[0] * len(workers) * EPS * 10))
        cond = float(sing[0] / sing[rank - 1])
        parity = u[:, rank:].conj().T  # orthonormal rows spanning the left null space
        if len(workers) - rank < max_errors + 1:
            raise ValueError(
                f"correcting {max_errors} errors needs at least {rank + max_errors + 1} "
                f"responses, got {len(workers)}"
            )
        syndrome = parity @ projections
        scale = float(np.linalg.norm(projections))
        tol = max(1e-10, 100 * EPS * cond) * max(scale, np.finfo(float).tiny)
        if np.linalg.norm(syndrome) <= tol:
            return ()
        for size in range(1, max_errors + 1):
            supports = np.array(list(itertools.combinations(range(len(workers)), size)))
            columns = parity[:, supports].transpose(1, 0, 2)  # (C, h, size)
            fit = columns @ (np.linalg.pinv(columns) @ syndrome)
            misfit = np.linalg.norm(syndrome - fit, axis=(1, 2))
            passing = np.flatnonzero(misfit <= tol)
            if len(passing) == 1:
                return tuple(sorted(workers[i] for i in supports[passing[0]]))
            if len(passing) > 1:
                raise DecodingFailure(
                    f"errors detected but their location is ambiguous among {len(passing)} "
                    f"sets of {size} responders"
                )
        raise DecodingFailure(
            f"more than {max_errors} of {len(workers)} responses are wrong: errors detected, "
            "not correctable"
        )
