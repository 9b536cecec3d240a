"""Tandon et al.'s gradient codes and the two baselines every comparison needs.

- ``uncoded``: partition i on worker i; wait for all n.
- ``ignore_stragglers``: the same placement; use the first n-s and rescale (approximate).
- ``frc``: fractional repetition (Tandon Sec. 3.1), needs (s+1) | n.
- ``cyclic``: cyclic repetition with a random B (Tandon Sec. 3.2, Algorithm 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from coded.base.checks import check_int

from .combine import weighted_sum
from .gradient import GradientCode
from .gradient_registry import register
from .linear_gradient import DEFAULT_MAX_ERROR, EXHAUSTIVE_CHECK, MAX_CHECK_WORK, LinearGradientCode

__all__ = ["CyclicRepetition", "FractionalRepetition", "IgnoreStragglers", "KAsync", "Uncoded", "cyclic_b"]


@register("uncoded")
class Uncoded(LinearGradientCode):
    """No redundancy: worker i sends g_i and the master waits for all n (s is ignored)."""

    uses_stragglers = False

    def __init__(self, n: int, s: int = 0, seed: int = 0, max_error: float = DEFAULT_MAX_ERROR) -> None:
        super().__init__(n, 0, np.eye(n)[:, :, None], [(i,) for i in range(n)], max_error=max_error)


@register("ignore_stragglers")
class IgnoreStragglers(GradientCode):
    """Worker i sends g_i; the master sums the first n-s and rescales by n/|F| (approximate).

    This is batch SGD on a random (n-s)/n of the data (Chen et al. 2016); it loses the
    stragglers' data, which hurts when the stragglers hold different data (Tandon Sec. 5).
    """

    exact = False

    def __init__(self, n: int, s: int = 0, seed: int = 0) -> None:
        super().__init__(n, s, n)

    def partitions(self, i: int) -> tuple[int, ...]:
        return (self._check_worker(i),)

    def message_size(self, l: int) -> int:
        return check_int("gradient length", l, 1)

    def _encode(self, i: int, partials: Sequence[np.ndarray]) -> np.ndarray:
        return partials[0].copy()

    def stage_scales(self, i: int, stage: int) -> dict[int, float] | None:
        i = self._check_worker(i)
        if stage != 0:
            raise ValueError(f"{self.scheme} messages have a single stage (got stage {stage})")
        return {i: 1.0}

    def _decode(self, messages: dict[int, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        scale = np.full((len(messages), 1), self.n / len(messages))
        # in worker order, not arrival order: the same responders give bit-identical sums
        return weighted_sum([np.asarray(messages[w], np.float64) for w in sorted(messages)], scale, out=out)[:, 0]


@register("kasync")
class KAsync(IgnoreStragglers):
    """K-asynchronous SGD (Dutta et al. 2018), the LWPD paper's baseline; K = n - s.

    Worker i sends g_i at the parameters it last received. The master steps with the first K
    gradients to arrive, scaled to the whole data (n/K), whatever parameters they were computed
    at; those K workers get the new parameters, the others keep computing on older ones.
    Asynchronous and approximate.
    """

    asynchronous = True

    @property
    def batch(self) -> int:
        return self.n - self.s

    @property
    def arrivals_per_iteration(self) -> int:
        return self.batch

    def update(self, i: int, message: np.ndarray) -> np.ndarray:
        """Worker i's contribution to the step: (L,) ndarray, its gradient times n/K."""
        return np.asarray(message, np.float64) * (self.n / self.batch)


@register("frc")
class FractionalRepetition(LinearGradientCode):
    """Fractional repetition: s+1 replicas of a disjoint split (Tandon Eq. 5-6).

    Worker w holds partitions r(s+1) .. r(s+1)+s with r = w mod n/(s+1), and sends their plain
    sum. Any s stragglers leave a replica of every group.
    """

    def __init__(self, n: int, s: int = 0, seed: int = 0, max_error: float = DEFAULT_MAX_ERROR) -> None:
        if n % (s + 1):
            raise ValueError(
                f"frc needs (s+1) to divide n (got n={n}, s={s}); use cyclic or ye_abbe for these values"
            )
        self._groups = n // (s + 1)
        support = [tuple(range((w % self._groups) * (s + 1), (w % self._groups + 1) * (s + 1))) for w in range(n)]
        coefficients = np.zeros((n, n, 1))
        for w, row in enumerate(support):
            coefficients[w, list(row), 0] = 1.0
        super().__init__(n, s, coefficients, support, max_error=max_error)

    def _decodable(self, workers: frozenset[int]) -> bool:
        return {w % self._groups for w in workers} == set(range(self._groups))

    def _requirement(self) -> str:
        return f"it needs one worker w of every class w mod {self._groups}"

    def _surplus(self, workers: frozenset[int]) -> int:
        # losing r replies keeps a worker of every group when each group has r + 1
        counts = [0] * self._groups
        for w in workers:
            counts[w % self._groups] += 1
        return min(counts) - 1


def cyclic_b(n: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """Tandon's Algorithm 2: a random cyclic B with ``1`` in the span of any n-s rows.

    Returns
    -------
    B : (n, n) ndarray
        Row i is supported on partitions i..i+s (mod n), with B[i, i] = 1.
    """
    b = np.zeros((n, n))
    if s == 0:
        return np.eye(n)
    h = rng.standard_normal((s, n))
    h[:, n - 1] = -h[:, : n - 1].sum(axis=1)  # H @ 1 = 0, so 1 is in null(H) = span of the rows
    for i in range(n):
        cols = [(i + t) % n for t in range(s + 1)]
        b[i, cols[0]] = 1.0
        b[i, cols[1:]] = np.linalg.solve(h[:, cols[1:]], -h[:, cols[0]])
    return b


@register("cyclic")
class CyclicRepetition(LinearGradientCode):
    """Cyclic repetition with Tandon's random B (Algorithm 2).

    B is random, so some draws decode some responder sets inaccurately. The constructor checks the
    responder sets (all of them when there are few) and redraws B up to ``draws`` times, keeping
    the best draw; it refuses when even that one misses ``max_error``. When it can only sample the
    responder sets, a random B has no structurally worst set to check, so it asks for 100 times
    more headroom (a sample of 200 sets was measured to understate the worst by up to 200x).
    """

    def __init__(
        self, n: int, s: int = 0, seed: int = 0, max_error: float = DEFAULT_MAX_ERROR, draws: int = 20
    ) -> None:
        draws = check_int("draws", draws, 1)
        rng = np.random.default_rng(seed)
        support = [tuple((i + t) % n for t in range(s + 1)) for i in range(n)]
        best: tuple[float, np.ndarray] | None = None
        for draw in range(draws):
            b = cyclic_b(n, s, rng)
            super().__init__(n, s, b[:, :, None], support, max_error=max_error)
            sets = self.check_sets(seed)
            if draw == 0:  # the draws share one budget of checking work (MAX_CHECK_WORK)
                draws = min(draws, max(1, int(MAX_CHECK_WORK // self.check_work(sets))))
            worst = self.worst_error_bound(sets)
            if best is None or worst < best[0]:
                best = (worst, b)
            if worst <= max_error / 100:
                break
        assert best is not None
        super().__init__(n, s, best[1][:, :, None], support, max_error=max_error)
        self.worst_error = best[0]
        sampled_only = math.comb(n, s) > EXHAUSTIVE_CHECK
        if best[0] > (max_error / 100 if sampled_only else max_error):
            raise ValueError(
                f"cyclic found no well-conditioned random B for n={n}, s={s} in {draws} draws "
                f"(best estimated error {best[0]:.1e} > {max_error:.0e}); "
                "use ye_abbe with m=1, its deterministic counterpart"
            )

    @property
    def b(self) -> np.ndarray:
        """(n, n) ndarray: Tandon's encoding matrix B."""
        return self.coefficients[:, :, 0]
