"""Lightweight projective derivative codes, C(2k, k, t) (LWPD Sec. 3.2).

n = 2k workers, k data partitions, t a power of two with 2 <= t <= k/2. Worker r < k holds the
window of t partitions starting at (r // t) * t; worker r >= k holds the same window shifted
cyclically by t/2. Its row of C is a row of the orthonormal Hadamard block X(t) on that window.

Messages are 1/t of the gradient: the gradient h of the worker's own data is cut into t equal
coordinate groups G_0..G_{t-1}, and worker i sends ``m_i = sum_{j in window} C[i, j] h[G_(j mod t)]``.
Since the rows of one block are orthonormal on their window, the t workers of a block together
return exactly the gradient of that block's data, and every partition is in one unshifted and one
shifted block. So ``update(i, m_i) = 1/2 * sum_j C[i, j] m_i`` scattered to G_(j mod t) is an
additive contribution the master applies the moment m_i arrives, and the n contributions sum to
the exact gradient. Anything less is the paper's lossy estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from coded.base.checks import check_int

from .combine import weighted_sum
from .errors import NotDecodableError
from .gradient import GradientCode, summed
from .gradient_registry import register

__all__ = ["LWPD", "hadamard_block", "lwpd_matrix"]


def hadamard_block(t: int) -> np.ndarray:
    """X(t): the Sylvester Hadamard matrix divided by sqrt(t); orthonormal.

    Returns
    -------
    X : (t, t) ndarray
        ``X[a, b] = (-1)^popcount(a & b) / sqrt(t)``.
    """
    a = np.arange(t)
    parity = np.vectorize(lambda v: bin(v).count("1") % 2)(a[:, None] & a[None, :])
    return (1.0 - 2.0 * parity) / math.sqrt(t)


def _power_of_two(name: str, value: int) -> int:
    value = check_int(name, value, 1)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two (got {value})")
    return value


def lwpd_matrix(k: int, t: int) -> np.ndarray:
    """The generator C(2k, k, t): row r is worker r's direction.

    Returns
    -------
    C : (2k, k) ndarray
        Unit rows with t entries +-1/sqrt(t) on a cyclic window; ``C.T @ C = 2 I``.
    """
    x = hadamard_block(t)
    c = np.zeros((2 * k, k))
    for r in range(2 * k):
        block, row = divmod(r % k, t)
        start = block * t + (t // 2 if r >= k else 0)
        c[r, [(start + q) % k for q in range(t)]] = x[row]
    return c


@register("lwpd")
class LWPD(GradientCode):
    """C(2k, k, t) LWPD code for asynchronous training (s is ignored; n must be 2k).

    Parameters
    ----------
    t : int
        Weight: partitions per worker and the message-size divisor; power of two, 2 <= t <= n/4.
    """

    uses_stragglers = False

    exact = False
    asynchronous = True

    def __init__(self, n: int, s: int = 0, seed: int = 0, t: int = 2) -> None:
        n = _power_of_two("workers n (lwpd needs n = 2k, k a power of two)", n)
        t = _power_of_two("weight t", t)
        k = n // 2
        if not 2 <= t <= k // 2:
            raise ValueError(f"lwpd needs 2 <= t <= n/4 (got t={t}, n={n}); "
                             "at t = n/2 the shifted half repeats the first")
        super().__init__(n, 0, k)
        self.t = t
        self.matrix = lwpd_matrix(k, t)
        self._windows = tuple(tuple(int(j) for j in np.flatnonzero(row)) for row in self.matrix)

    def partitions(self, i: int) -> tuple[int, ...]:
        return tuple(sorted(self._windows[self._check_worker(i)]))

    def message_size(self, l: int) -> int:
        return math.ceil(check_int("gradient length", l, 1) / self.t)

    def gradient_size(self, message_length: int) -> int:
        return message_length * self.t

    def _decodable(self, workers: frozenset[int]) -> bool:
        return len(workers) == self.n

    def _groups(self, i: int) -> list[int]:
        """Coordinate group of each window entry of worker i, in window order."""
        return [j % self.t for j in self._windows[i]]

    def _encode(self, i: int, partials: Sequence[np.ndarray]) -> np.ndarray:
        h = summed(partials)
        size = math.ceil(h.size / self.t)
        padded = np.zeros(size * self.t)
        padded[: h.size] = h
        groups = padded.reshape(self.t, size)
        coefficients = self.matrix[i, list(self._windows[i])]
        return coefficients @ groups[self._groups(i)]

    def update(self, i: int, message: np.ndarray) -> np.ndarray:
        """Worker i's additive contribution to the gradient estimate.

        Parameters
        ----------
        message : (L,) ndarray
            Worker i's message.

        Returns
        -------
        contribution : (t * L,) ndarray
            The n contributions of one iteration sum to the exact gradient (padded to t * L).
        """
        i = self._check_worker(i)
        message = np.asarray(message, dtype=np.float64)
        if message.ndim != 1:
            raise ValueError(f"an lwpd message is 1-D (got shape {message.shape})")
        out = np.empty((self.t, message.size))
        for j, group in zip(self._windows[i], self._groups(i), strict=True):
            np.multiply(message, 0.5 * self.matrix[i, j], out=out[group])
        return out.reshape(-1)

    def decode(self, messages: Mapping[int, np.ndarray], length: int | None = None,
               out: np.ndarray | None = None) -> np.ndarray:
        """The additive estimate from whatever arrived; exact only when all n did (decodable)."""
        if not messages:
            raise NotDecodableError("no messages to decode")
        arrays = {self._check_worker(w): np.asarray(m) for w, m in messages.items()}
        self._check_messages(arrays)
        return self._decode(arrays)[: length or None]

    def _decode(self, messages: dict[int, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        return self.estimate(messages)

    def estimate(self, messages: dict[int, np.ndarray]) -> np.ndarray:
        """Sum of the contributions of whatever arrived (exact only when all n did)."""
        ids = sorted(messages)
        size = np.asarray(messages[ids[0]]).size
        out = np.zeros((self.t, size))
        for group in range(self.t):
            rows = [(i, j) for i in ids for j, g in zip(self._windows[i], self._groups(i), strict=True) if g == group]
            weights = np.array([[0.5 * self.matrix[i, j]] for i, j in rows])
            out[group] = weighted_sum([np.asarray(messages[i], np.float64) for i, _ in rows], weights)[:, 0]
        return out.reshape(-1)
