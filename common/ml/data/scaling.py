"""Feature scales of tabular data: standardising with the training rows' statistics, and how far
apart the scales of a file's columns are (one learning rate cannot suit features whose scales
differ by orders of magnitude: steps that suit the largest crawl on the smallest, and steps that
suit the smallest diverge on the largest)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dataset import Dataset, row_blocks, writable

__all__ = ["SPREAD_WARNING", "Spread", "column_moments", "spread", "standardize"]

#: a ratio of the largest to the smallest feature standard deviation worth a warning: two orders
SPREAD_WARNING = 100.0


@dataclass(frozen=True)
class Spread:
    """The widest and the narrowest non-constant features (0-based columns) and their standard
    deviations over the training rows."""

    widest: int
    widest_std: float
    narrowest: int
    narrowest_std: float

    @property
    def ratio(self) -> float:
        return self.widest_std / self.narrowest_std


def spread(x: np.ndarray) -> Spread | None:
    """How far apart the columns' scales are, for dense ``x`` (n, f); None when fewer than two
    columns vary."""
    std = column_moments(np.asarray(x, dtype=np.float64))[1]
    varying = np.flatnonzero(std > 0)
    if varying.size < 2:
        return None
    wide, narrow = varying[np.argmax(std[varying])], varying[np.argmin(std[varying])]
    return Spread(int(wide), float(std[wide]), int(narrow), float(std[narrow]))


def column_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's mean and population standard deviation, (f,) each, of dense ``x`` (n, f)
    with n >= 1, computed over blocks of rows (two passes): the memory of a block, never of
    another ``x``, which ``x.std(axis=0)`` would allocate."""
    total = np.zeros(x.shape[1])
    for rows in row_blocks(x):
        total += x[rows].sum(axis=0)
    mean = total / len(x)
    squares = np.zeros(x.shape[1])
    for rows in row_blocks(x):
        squares += ((x[rows] - mean) ** 2).sum(axis=0)
    return mean, np.sqrt(squares / len(x))


def standardize(dataset: Dataset, in_place: bool = False) -> Dataset:
    """Each feature minus its training mean, over its training standard deviation (constant
    features: only centred); the test rows with the same statistics, so that they never inform
    the training. ``in_place``: the dataset's own arrays are scaled (it must not be used after),
    for a caller that loaded them and holds no other copy.

    Raises
    ------
    ValueError
        For sparse data: centring would make every row dense.
    """
    if dataset.sparse:
        raise ValueError("standardize centres each feature, which would make sparse data dense (every row would "
                         "store every feature): scale sparse features before writing the file")
    mean, std = column_moments(dataset.x_train)
    std[std == 0] = 1.0
    x_train, x_test = writable(dataset.x_train, in_place), writable(dataset.x_test, in_place)
    for x in (x_train, x_test):
        for rows in row_blocks(x):
            x[rows] -= mean
            x[rows] /= std
    return Dataset(x_train, dataset.y_train, x_test, dataset.y_test, classes=dataset.classes, name=dataset.name,
                   shape=dataset.shape, scaling=(mean, std))
