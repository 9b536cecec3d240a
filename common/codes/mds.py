"""Real-valued systematic MDS codes that locate and correct wrong symbols.

An (r, k) code maps k data symbols (numbers, vectors or matrices) to r coded symbols; any k of
them determine the data. Under the probabilistic error model of spec/000 Theorem 3 (wrong symbols
carry continuous random errors) it corrects up to r - k - 1 wrong symbols without knowing how many
there are, and detects any larger number: it never returns wrong data silently.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from coded.base.checks import check_int
from coded.base.words import plural

from . import points as pts
from .errors import DecodingFailure, NotDecodableError
from .linear import LinearDecoder

__all__ = ["DecodingFailure", "SystematicMDS"]


def _lagrange_rows(nodes: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``out[p, q]`` = the Lagrange basis polynomial of ``nodes[q]`` evaluated at ``at[p]``."""
    out = np.ones((len(at), len(nodes)))
    for q, node in enumerate(nodes):
        for other in np.delete(nodes, q):
            out[:, q] *= (at - other) / (node - other)
    return out


class SystematicMDS:
    """Systematic real (r, k) MDS code.

    The generator evaluates the degree < k polynomial through the k data symbols at r Chebyshev
    nodes; the k systematic nodes are spread over [-1, 1] so that every k x k submatrix is
    invertible and well conditioned.

    Parameters
    ----------
    k : int
        Data symbols.
    r : int
        Coded symbols, r >= k; rows 0..k-1 are the data themselves.
    seed : int
        Seed of the random projections used to locate errors.

    Examples
    --------
    >>> code = SystematicMDS(2, 5)
    >>> y = code.encode(np.array([1.0, 2.0]))
    >>> y[3] += 7.0
    >>> x, wrong = code.decode(y)
    >>> x.round(12).tolist(), wrong
    ([1.0, 2.0], (3,))
    """

    def __init__(self, k: int, r: int, seed: int = 0, max_error: float = 1e-8) -> None:
        self.k = check_int("k", k, 1)
        self.r = check_int("r", r, 1)
        if r < k:
            raise ValueError(f"an (r, k) code needs r >= k (got r={r}, k={k})")
        nodes = pts.chebyshev(r)
        systematic = np.round(np.linspace(0, r - 1, k)).astype(int) if k > 1 else np.array([r // 2])
        parity = np.setdiff1d(np.arange(r), systematic)
        order = np.concatenate([systematic, parity])
        self.generator = _lagrange_rows(nodes[systematic], nodes[order])
        self.generator[:k] = np.eye(k)  # exact, not merely to rounding
        self._decoder = LinearDecoder(self.generator, np.eye(k), max_error=max_error)
        self._seed = seed

    @property
    def max_errors(self) -> int:
        """Wrong symbols corrected when all r are present: r - k - 1 (0 when r = k)."""
        return max(self.r - self.k - 1, 0)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Coded symbols.

        Parameters
        ----------
        x : (k, ...) ndarray

        Returns
        -------
        y : (r, ...) ndarray; ``y[:k] == x``
        """
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 0 or x.shape[0] != self.k:
            raise ValueError(f"expected {self.k} data symbols along axis 0 (got shape {x.shape})")
        return np.tensordot(self.generator, x, axes=1)

    def decode(self, y: np.ndarray, erased: Iterable[int] = ()) -> tuple[np.ndarray, tuple[int, ...]]:
        """Data and the positions of wrong symbols.

        Parameters
        ----------
        y : (r, ...) ndarray
            Received symbols; rows listed in ``erased`` are ignored.
        erased : iterable of int
            Symbols that did not arrive.

        Returns
        -------
        x : (k, ...) ndarray
        error_positions : tuple of int, ascending

        Raises
        ------
        NotDecodableError
            Fewer than k symbols are left.
        DecodingFailure
            More than ``(r - erased) - k - 1`` symbols are wrong.
        """
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 0 or y.shape[0] != self.r:
            raise ValueError(f"expected {self.r} coded symbols along axis 0 (got shape {y.shape})")
        erased = {check_int("erased position", e) for e in erased}
        present = [p for p in range(self.r) if p not in erased]
        if len(present) < self.k:
            raise NotDecodableError(f"need {plural(self.k, 'symbol')}, {len(present)} "
                                    f"{'is' if len(present) == 1 else 'are'} left")
        flat = y.reshape(self.r, -1)
        wrong: tuple[int, ...] = ()
        if len(present) > self.k:
            wrong = self._decoder.locate_errors(present, self._project(flat[present]), len(present) - self.k - 1)
        clean = [p for p in present if p not in wrong]
        weights = self._decoder.weights(clean)
        x = weights.matrix.T @ flat[list(weights.workers)]
        return x.reshape((self.k, *y.shape[1:])), wrong

    def _project(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[1] <= 2:
            return rows
        rng = np.random.default_rng([self._seed, rows.shape[1]])
        return rows @ rng.standard_normal((rows.shape[1], 2))
