"""Tandon et al.'s two-stage scheme for alpha-partial stragglers (Sec. 4).

A partial straggler is at most alpha times slower than the others, so its early work is still
useful. The data are split into n "coded" partitions, placed by an s-robust code, and
n(s+1)/(alpha-1) "naive" partitions, (s+1)/(alpha-1) per worker, disjoint. Each worker first
sends the plain sum of its naive partitions (stage 1), then its coded message (stage 2). The
master needs every worker's stage 1 and any n-s workers' stage 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from coded.base.checks import check_int

from .combine import weighted_sum
from .errors import DecodingFailure, NotDecodableError
from .gradient import CheckedGradient, GradientCode, summed
from .gradient_registry import gradient_code, register
from .linear_gradient import LinearGradientCode
from .verify import DEFAULT_TOLERANCE

__all__ = ["PartialStragglers"]


@register("partial")
class PartialStragglers(GradientCode):
    """Two-stage code for alpha-partial stragglers.

    Parameters
    ----------
    alpha : float
        Slowdown bound, > 1; (s+1)/(alpha-1) must be an integer (naive partitions per worker).
    base : {"cyclic", "frc", "ye_abbe"}
        s-robust code for the coded partitions (ye_abbe is used with m = 1).

    Messages are ``[naive sum (l floats), coded message]``; a worker that only finished stage 1
    sends the first l floats. Partitions 0..n-1 are the coded ones; worker i's naive partitions
    are n + i*r .. n + (i+1)*r - 1 with r = (s+1)/(alpha-1).
    """

    stages = 2

    def __init__(self, n: int, s: int = 0, seed: int = 0, alpha: float = 2.0, base: str = "cyclic") -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 1:
            raise ValueError(f"alpha must be a number > 1 (got {alpha!r})")
        ratio = (s + 1) / (alpha - 1)
        naive = round(ratio)
        if naive < 1 or abs(ratio - naive) > 1e-9:
            raise ValueError(
                f"partial needs (s+1)/(alpha-1) to be a positive integer (got {ratio:g} for s={s}, "
                f"alpha={alpha}); e.g. alpha = 1 + (s+1)/r for r naive partitions per worker"
            )
        if base not in ("cyclic", "frc", "ye_abbe"):
            raise ValueError(f"base must be cyclic, frc or ye_abbe (got {base!r})")
        super().__init__(n, s, n + n * naive)
        self.alpha = float(alpha)
        self.naive_per_worker = naive
        self.base: LinearGradientCode = gradient_code(base, n=n, s=s, seed=seed)  # type: ignore[assignment]

    def partitions(self, i: int) -> tuple[int, ...]:
        i = self._check_worker(i)
        r = self.naive_per_worker
        return self.base.partitions(i) + tuple(range(self.n + i * r, self.n + (i + 1) * r))

    def naive_partitions(self, i: int) -> tuple[int, ...]:
        """The partitions worker i sums in stage 1."""
        return self.partitions(i)[len(self.base.partitions(i)) :]

    def stage_partitions(self, i: int) -> tuple[tuple[int, ...], ...]:
        return (self.naive_partitions(i), self.base.partitions(i))

    def encode_stage(self, i: int, stage: int, partials: Mapping[int, np.ndarray]) -> np.ndarray:
        """Stage 0: the plain sum of the naive partitions; stage 1: the base code's message."""
        i = self._check_worker(i)
        if stage not in (0, 1):
            raise ValueError(f"partial messages have stages 0 and 1 (got {stage})")
        wanted = self.stage_partitions(i)[stage]
        if set(partials) != set(wanted):
            raise ValueError(f"stage {stage} of worker {i} needs partitions {list(wanted)}, got {sorted(partials)}")
        if stage == 1:
            return self.base.encode(i, partials)
        return np.sum([np.asarray(partials[j], dtype=np.float64) for j in wanted], axis=0)

    def stage_scales(self, i: int, stage: int) -> dict[int, float] | None:
        """Stage 0 sums its naive partitions; stage 1 is the base code's message."""
        i = self._check_worker(i)
        if stage not in (0, 1):
            raise ValueError(f"partial messages have stages 0 and 1 (got {stage})")
        if stage == 0:
            return dict.fromkeys(self.naive_partitions(i), 1.0)
        return self.base.stage_scales(i, 0)

    def message_size(self, l: int) -> int:
        l = check_int("gradient length", l, 1)
        return l + self.base.message_size(l)

    def stage_sizes(self, l: int) -> tuple[int, int]:
        """Floats in stage 1 and stage 2 of a message."""
        return (l, self.base.message_size(l))

    def decodable(self, workers: Iterable[int] | Mapping[int, int]) -> bool:
        """``workers``: ids with both stages, or a mapping of id to stages received (0, 1 or 2)."""
        stages = dict(workers) if isinstance(workers, Mapping) else {w: 2 for w in workers}
        stages = {self._check_worker(w): int(c) for w, c in stages.items()}
        return self._decodable_stages(stages)

    def _decodable_stages(self, stages: Mapping[int, int]) -> bool:
        first = {w for w, c in stages.items() if c >= 1}
        both = [w for w, c in stages.items() if c >= 2]
        return first == set(range(self.n)) and self.base.decodable(both)

    def _decodable(self, workers: frozenset[int]) -> bool:
        return self._decodable_stages({w: 2 for w in workers})

    def surplus(self, workers: Iterable[int] | Mapping[int, int]) -> int:
        """Surplus of the second stages (``workers`` as in :meth:`decodable`); -1 when not
        decodable. Only the coded stage has redundancy to check."""
        stages = dict(workers) if isinstance(workers, Mapping) else {w: 2 for w in workers}
        stages = {self._check_worker(w): int(c) for w, c in stages.items()}
        if not self._decodable_stages(stages):
            return -1
        return self.base.surplus(w for w, c in stages.items() if c >= 2)

    def _consistency(self) -> None:
        return None  # checked through the base code, stage by stage (decode_checked)

    @property
    def checkable(self) -> bool:
        """Whether the coded stage can be checked (the naive stage never can: each naive
        partition is on one worker)."""
        return self.base.checkable

    def decode(self, messages: Mapping[int, np.ndarray], length: int | None = None,
               out: np.ndarray | None = None) -> np.ndarray:
        """Decode from stage-1-only (l floats) and complete (message_size(l) floats) messages."""
        arrays, stages, l = self._split(messages)
        naive = self._naive_sum(arrays, l, out)
        naive += self.base.decode({w: a[l:] for w, a in arrays.items() if stages[w] == 2}, length=l)
        return naive[: length or None]

    def decode_checked(self, messages: Mapping[int, np.ndarray], length: int | None = None, *,
                       max_errors: int | None = None, tolerance: float = DEFAULT_TOLERANCE,
                       out: np.ndarray | None = None) -> CheckedGradient:
        """Decode with the coded stage checked by the base code (see GradientCode.decode_checked).

        The naive stage has no redundancy: a non-finite one fails the decode (DecodingFailure),
        finite wrong values in it cannot be noticed.
        """
        arrays, stages, l = self._split(messages)
        broken = sorted(w for w, a in arrays.items() if not np.all(np.isfinite(a[:l])))
        if broken:
            raise DecodingFailure(f"the first stage of workers {broken} is not finite, and partial needs every "
                                  "worker's first stage (each naive partition is on one worker)")
        naive = self._naive_sum(arrays, l, out)
        coded = self.base.decode_checked({w: a[l:] for w, a in arrays.items() if stages[w] == 2}, length=l,
                                         max_errors=max_errors, tolerance=tolerance)
        naive += coded.gradient
        return CheckedGradient(naive[: length or None], coded.wrong, coded.checked, coded.used, coded.misfit,
                               coded.scale)

    @staticmethod
    def _naive_sum(arrays: dict[int, np.ndarray], l: int, out: np.ndarray | None = None) -> np.ndarray:
        return weighted_sum([a[:l] for a in arrays.values()], np.ones((len(arrays), 1)), out=out)[:, 0]

    def _split(self, messages: Mapping[int, np.ndarray]) -> tuple[dict[int, np.ndarray], dict[int, int], int]:
        """Validated messages, the stages each holds, and l; NotDecodableError when not decodable."""
        arrays = {self._check_worker(w): np.asarray(m, dtype=np.float64) for w, m in messages.items()}
        if not arrays or any(a.ndim != 1 for a in arrays.values()):
            raise NotDecodableError("partial needs 1-D messages from every worker")
        l = self._stage1_length(sorted({a.shape[0] for a in arrays.values()}))
        stages = {w: 2 if a.shape[0] > l else 1 for w, a in arrays.items()}
        if not self._decodable_stages(stages):
            raise NotDecodableError(
                f"partial (n={self.n}, s={self.s}) needs stage 1 from all {self.n} workers and stage 2 "
                f"from any {self.n - self.s}; got stage 1 from {sorted(stages)} and stage 2 from "
                f"{sorted(w for w, c in stages.items() if c == 2)}"
            )
        return arrays, stages, l

    def _stage1_length(self, sizes: list[int]) -> int:
        # A complete message is l + base.message_size(l), i.e. 2l or 2l + 1 floats.
        l = sizes[0] if len(sizes) == 2 else sizes[0] // 2
        if len(sizes) > 2 or l < 1 or self.message_size(l) != sizes[-1]:
            raise ValueError(f"message lengths {sizes} are neither stage 1 (l) nor complete messages")
        return l

    def _encode(self, i: int, partials: Sequence[np.ndarray]) -> np.ndarray:
        held = len(self.base.partitions(i))
        coded = self.base.encode(i, dict(zip(self.base.partitions(i), partials[:held], strict=True)))
        return np.concatenate([summed(partials[held:]), coded])

    def _decode(self, messages: dict[int, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        return self.decode(messages, out=out)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["alpha"] = self.alpha
        info["data_per_worker_coded_part"] = len(self.base.partitions(0)) / self.k
        return info

    def expected_fraction(self) -> float:
        """Fraction of the data per worker, (s+1) alpha / (n (s + alpha)) (Tandon Sec. 4)."""
        return (self.s + 1) * self.alpha / (self.n * (self.s + self.alpha))

