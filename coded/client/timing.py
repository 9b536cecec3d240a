"""A job's seconds per iteration and its time to a loss, read from its history: what ``coded
status``, ``watch`` and ``compare`` print, so that runs can be put side by side.

An iteration's seconds are the job's clock between the ends of two recorded iterations (its round
and everything between rounds) over the iterations between them (CodeNet jobs record their
evaluations only, every ``eval_every`` iterations); the first record, whose iteration set up the
workers' channels, is the start.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from itertools import pairwise

from coded.client.reports import Job

__all__ = ["IterationSeconds", "iteration_seconds", "seconds_to_loss"]


@dataclass(frozen=True)
class IterationSeconds:
    """Seconds per iteration over ``count`` iterations: the median, the middle half (``low``,
    ``high``: the 25th and 75th percentiles) and the last."""

    median: float
    low: float
    high: float
    last: float
    count: int

    def words(self) -> str:
        """``0.123 s per iteration (middle half 0.11-0.14 s over 49; last 0.125 s)``."""
        return (f"{self.median:.4g} s per iteration (middle half {self.low:.4g}-{self.high:.4g} s over {self.count}; "
                f"last {self.last:.4g} s)")

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def iteration_seconds(job: Job) -> IterationSeconds | None:
    """The job's seconds per iteration from its history; None before it has two iterations (or
    without its history)."""
    if len(job.history) < 2:
        return None
    # plain Python, not numpy: `coded status` would wait a tenth of a second for numpy to import
    import statistics  # (and only here: it imports fractions and decimal)

    gaps = [(b.elapsed_s - a.elapsed_s) / max(b.iteration - a.iteration, 1) for a, b in pairwise(job.history)]
    # the inclusive method interpolates between order statistics as numpy's default percentile does
    low, median, high = statistics.quantiles(gaps, n=4, method="inclusive") if len(gaps) > 1 else gaps * 3
    return IterationSeconds(median, low, high, gaps[-1], len(gaps))


def seconds_to_loss(job: Job, loss: float) -> float:
    """Seconds from the job's start until its training loss was at most ``loss`` (the job's clock at
    the end of that iteration); NaN if it never was."""
    return next((r.elapsed_s for r in job.history if r.loss <= loss), math.nan)
