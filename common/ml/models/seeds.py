"""The seeds of models' random layers (dropout), the same on every holder of a partition."""

from __future__ import annotations

import numpy as np

from coded.base.checks import check_int

__all__ = ["draw_seed"]

_DRAW_SALT = 0x6472_6F70  # "drop": the draws of random layers, apart from the batches (coded.ml.data.batch_rows)


def draw_seed(seed: int, iteration: int, partition: int, row: int) -> int:
    """The seed of the random layers (dropout) for the samples from ``row`` on of a partition's
    rows at ``iteration`` (its mini-batch when the job has one).

    A function of those numbers only, never of the worker: every holder of a partition draws the
    same dropout masks for it, so its copies agree and a code decodes the sum that an uncoded job
    computing the same slices adds up.

    Returns
    -------
    int
        In [0, 2**63).

    >>> draw_seed(7, 0, 1, 0) == draw_seed(7, 0, 1, 0) != draw_seed(7, 0, 1, 128)
    True
    """
    words = [check_int(name, value, 0) for name, value in
             (("seed", seed), ("iteration", iteration), ("partition", partition), ("row", row))]
    return int(np.random.SeedSequence([*words, _DRAW_SALT]).generate_state(1, np.uint64)[0] >> np.uint64(1))
