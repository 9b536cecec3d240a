"""Feature scales of tabular data: standardising with the training rows' statistics, and how far
apart the scales of a file's columns are (one learning rate cannot suit features whose scales
differ by orders of magnitude: steps that suit the largest crawl on the smallest, and steps that
suit the smallest diverge on the largest)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dataset import Dataset

__all__ = ["SPREAD_WARNING", "Spread", "spread", "standardize"]

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
    std = np.asarray(x, dtype=np.float64).std(axis=0)
    varying = np.flatnonzero(std > 0)
    if varying.size < 2:
        return None
    wide, narrow = varying[np.argmax(std[varying])], varying[np.argmin(std[varying])]
    return Spread(int(wide), float(std[wide]), int(narrow), float(std[narrow]))


def standardize(dataset: Dataset) -> Dataset:
    """Each feature minus its training mean, over its training standard deviation (constant
    features: only centred); the test rows with the same statistics, so that they never inform
    the training.

    Raises
    ------
    ValueError
        For sparse data: centring would make every row dense.
    """
    if dataset.sparse:
        raise ValueError("standardize centres each feature, which would make sparse data dense (every row would "
                         "store every feature): scale sparse features before writing the file")
    mean = dataset.x_train.mean(axis=0)
    std = dataset.x_train.std(axis=0)
    std[std == 0] = 1.0
    return Dataset((dataset.x_train - mean) / std, dataset.y_train, (dataset.x_test - mean) / std, dataset.y_test,
                   classes=dataset.classes, name=dataset.name, shape=dataset.shape, scaling=(mean, std))
