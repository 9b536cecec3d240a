"""The exact gradient codes' one machinery: messages as fixed linear maps of the partial gradients.

Every exact scheme (uncoded, frc, cyclic, ye_abbe, and partial's coded stage) is a
:class:`LinearGradientCode` of its own coefficients: one encoding, one decode path
(:mod:`coded.codes.linear`), one check of replies, and one refusal of parameters float64 cannot
decode accurately.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from coded.base.checks import check_int

from .combine import weighted_sum
from .gradient import GradientCode
from .linear import DECODE_SLACK, DecodeWeights, LinearDecoder
from .verify import ConsistencyCheck

__all__ = ["LinearGradientCode"]

#: Default accuracy a code must guarantee on every responder set it accepts (relative to the
#: largest partial-gradient entry); constructors refuse parameters that cannot meet it.
DEFAULT_MAX_ERROR = 1e-6
#: Up to this many responder sets, constructors check all of them; above, a structured sample.
EXHAUSTIVE_CHECK = 2000
#: Work a constructor may spend checking its conditioning, in responder sets x n^3 (about 3 s of
#: one core): a master validates every spec it is sent, so a code whose check would cost more is
#: refused instead (measured: cyclic n=200, s=50 took 19 minutes of CPU before this bound).
MAX_CHECK_WORK = 3e9


class LinearGradientCode(GradientCode):
    """A gradient code whose messages are fixed linear maps of the partial gradients.

    Worker i sends ``f_i[v] = sum_j sum_u C[i, j, u] * g_j[v*m + u]`` (Ye & Abbe's form; Tandon's
    codes are m = 1). With complex coefficients, pairs of reals are packed into one complex number
    first, so a message of L complex values is 2L floats. Decoding solves weights W_F with
    ``sum_i W_F[i, u] C[i, j, u'] = [u == u']`` for all j: one path for every exact scheme.

    Parameters
    ----------
    n, s : int
        Workers and stragglers tolerated.
    coefficients : (n, k, m) ndarray, real or complex
        C; zero outside each worker's support.
    support : sequence of n sequences of int
        Partitions of each worker.
    max_error : float
        Accuracy every accepted responder set must reach (relative to the largest entry).
    """

    def __init__(
        self,
        n: int,
        s: int,
        coefficients: np.ndarray,
        support: Sequence[Sequence[int]],
        *,
        max_error: float = DEFAULT_MAX_ERROR,
    ) -> None:
        super().__init__(n, s, coefficients.shape[1])
        self._coefficients = coefficients
        self._support = tuple(tuple(sorted(int(j) for j in row)) for row in support)
        self._m = coefficients.shape[2]
        self._complex = bool(np.iscomplexobj(coefficients))
        self._pack = 2 * self._m if self._complex else self._m
        targets = np.tile(np.eye(self._m), (1, self.k))
        self._decoder = LinearDecoder(coefficients.reshape(n, -1), targets, max_error=max_error * DECODE_SLACK)
        self._checker = ConsistencyCheck(self._decoder, self.surplus) if s >= 1 else None

    @property
    def coefficients(self) -> np.ndarray:
        """(n, k, m) ndarray: the encoding coefficients C."""
        return self._coefficients

    @property
    def m(self) -> int:
        """Communication reduction: each message is about l/m floats."""
        return self._m

    def partitions(self, i: int) -> tuple[int, ...]:
        return self._support[self._check_worker(i)]

    def message_size(self, l: int) -> int:
        l = check_int("gradient length", l, 1)
        return math.ceil(l / self._pack) * (self._pack // self._m)

    def stage_scales(self, i: int, stage: int) -> dict[int, float] | None:
        """Tandon et al.'s codes (and uncoded): m = 1 and real coefficients, so a message is
        ``sum_j C[i, j] g_j``; Ye & Abbe's (m > 1) mixes coordinates and is no such sum."""
        i = self._check_worker(i)
        if stage != 0:
            raise ValueError(f"{self.scheme} messages have a single stage (got stage {stage})")
        if self._m != 1 or self._complex:
            return None
        return {j: float(self._coefficients[i, j, 0]) for j in self._support[i]}

    def gradient_size(self, message_length: int) -> int:
        return message_length * self._m

    def decode_weights(self, workers: Iterable[int]) -> DecodeWeights:
        """The cached, checked decode weights for a decodable responder set."""
        return self._decoder.weights(list(workers))

    def worst_error_bound(self, sets: Iterable[Sequence[int]]) -> float:
        """Largest estimated decode error over responder sets (no accuracy check)."""
        return max(self._decoder.solve(tuple(sorted(f))).error_bound for f in sets)

    def rounding_error(self, eps: float) -> float:
        """Estimated worst relative decode error over :meth:`check_sets` when every message carries
        relative rounding ``eps``: each set's residual plus ``eps`` x its amplification (the
        float64 bound of :attr:`DecodeWeights.error_bound` with the wire's eps)."""
        return max(w.residual + eps * w.amplification for w in self._decoder.solve_many(self.check_sets()))

    def check_work(self, sets: Sequence[Sequence[int]]) -> float:
        """The work of checking ``sets`` in the units of MAX_CHECK_WORK; ValueError above it."""
        work = len(sets) * float(self.n) ** 3
        if work > MAX_CHECK_WORK:
            raise ValueError(
                f"{self.scheme} with n={self.n}, s={self.s} has {len(sets)} responder sets of {self.n} workers, "
                f"too many to check quickly for accuracy (the limit is {MAX_CHECK_WORK:.0e} sets x n^3); use "
                "fewer workers or stragglers"
            )
        return work

    def check_sets(self, seed: int = 0, samples: int = 200) -> list[tuple[int, ...]]:
        """Responder sets of size n-s that a conditioning check should cover.

        All of them when there are at most ``EXHAUSTIVE_CHECK``; otherwise every set missing a
        cyclic run of s workers (the worst case of the cyclic polynomial codes), or a run of s+1
        with one worker present, plus a seeded random sample.
        """
        n, s = self.n, self.s
        if math.comb(n, s) <= EXHAUSTIVE_CHECK:
            return list(itertools.combinations(range(n), n - s))
        everyone = set(range(n))
        runs = [everyone - {(a + t) % n for t in range(s)} for a in range(n)]
        gapped = [everyone - {(a + t) % n for t in range(s + 1) if t != gap} for a in range(n) for gap in range(1, s)]
        rng = np.random.default_rng(seed)
        sampled = [set(rng.choice(n, n - s, replace=False).tolist()) for _ in range(samples)]
        return [tuple(sorted(found)) for found in runs + gapped + sampled]

    def _encode(self, i: int, partials: Sequence[np.ndarray]) -> np.ndarray:
        l = partials[0].size
        whole = l - l % self._pack  # whole blocks are encoded in place; the tail, zero-padded, apart
        coefficients = self._coefficients[i, list(self._support[i]), :]
        message = self._blocks(partials[0][:whole]) @ coefficients[0]
        for t in range(1, len(partials)):
            message += self._blocks(partials[t][:whole]) @ coefficients[t]
        if whole < l:
            tail = np.zeros((len(partials), self._pack))
            for t, partial in enumerate(partials):
                tail[t, : l - whole] = partial[whole:]
            message = np.concatenate([message, sum(self._blocks(tail[t]) @ coefficients[t] for t in range(len(tail)))])
        return message.view(np.float64) if self._complex else message

    def _blocks(self, flat: np.ndarray) -> np.ndarray:
        """A whole number of blocks of a partial gradient as (blocks, m) values of the field (a view)."""
        return (flat.view(np.complex128) if self._complex else flat).reshape(-1, self._m)

    def _decode(self, messages: dict[int, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        weights = self._decoder.weights(list(messages))
        return self._combine(weights, [self._in_field(np.ascontiguousarray(messages[w], dtype=np.float64))
                                       for w in weights.workers], out)

    def _combine(self, weights: DecodeWeights, symbols: Sequence[np.ndarray],
                 out: np.ndarray | None = None) -> np.ndarray:
        if self._complex:  # a complex sum, viewed as the reals it packs
            return np.ascontiguousarray(weighted_sum(list(symbols), weights.matrix).reshape(-1)).view(np.float64)
        return weighted_sum(list(symbols), weights.matrix, out=out).reshape(-1)  # element v*m + u, no copy

    def _in_field(self, message: np.ndarray) -> np.ndarray:
        return message.view(np.complex128) if self._complex else message

    def _consistency(self) -> ConsistencyCheck | None:
        return self._checker

    def _check_messages(self, arrays: Mapping[int, np.ndarray]) -> None:
        super()._check_messages(arrays)
        length = next(iter(arrays.values())).shape[0]
        if self._complex and length % 2:
            raise ValueError(f"{self.scheme} messages have an even length (got {length})")

    def _refuse_if_inaccurate(self, seed: int, max_error: float, margin: float = 1.0) -> float:
        """Worst estimated error over :meth:`check_sets`; ValueError above ``max_error / margin``."""
        sets = self.check_sets(seed)
        self.check_work(sets)
        worst = self.worst_error_bound(sets)
        if worst > max_error / margin:
            raise ValueError(
                f"{self.scheme} with n={self.n}, s={self.s}, m={self.m} cannot decode every set of "
                f"{self.n - self.s} responders accurately in float64: estimated error {worst:.1e} "
                f"> max_error={max_error:.0e} (see docs/codes.md for the limits)"
            )
        return worst
