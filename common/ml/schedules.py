"""Learning-rate schedules: the factor the base learning rate is multiplied by at each step.

A schedule is a pure function of the step number (0-based, the optimizer's step counter), so a
run resumed from a checkpoint continues with exactly the same learning rates.

>>> s = Cosine(total=100, warmup=10, floor=0.1)
>>> [round(s(t), 3) for t in (0, 9, 10, 99)]
[0.1, 1.0, 1.0, 0.1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coded.base.checks import check_int, check_real

__all__ = ["Constant", "Cosine", "Schedule", "Step"]


@dataclass(frozen=True)
class Schedule:
    """Constant factor 1, after a linear warm-up over the first ``warmup`` steps.

    During warm-up, step t (0-based) has factor (t + 1) / warmup, so the first step is not a
    zero step and step ``warmup - 1`` reaches the full rate.
    """

    warmup: int = 0

    def __post_init__(self) -> None:
        check_int("warmup", self.warmup, 0)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return self._after_warmup(step - self.warmup)

    def _after_warmup(self, step: int) -> float:
        return 1.0


Constant = Schedule


@dataclass(frozen=True)
class Step(Schedule):
    """Multiply by ``gamma`` every ``every`` steps after the warm-up."""

    every: int = 1
    gamma: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("every", self.every, 1)
        check_real("gamma", self.gamma, 0.0, low_open=True)

    def _after_warmup(self, step: int) -> float:
        return float(self.gamma ** (step // self.every))


@dataclass(frozen=True)
class Cosine(Schedule):
    """Half a cosine from 1 down to ``floor`` over the ``total - warmup`` steps after the warm-up."""

    total: int = 1
    floor: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("total", self.total, 1)
        check_real("floor", self.floor, 0.0, 1.0 + 1e-12)

    def _after_warmup(self, step: int) -> float:
        span = max(self.total - self.warmup - 1, 1)
        progress = min(step / span, 1.0)
        return self.floor + (1.0 - self.floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
