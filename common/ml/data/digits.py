"""The handwritten digits of scikit-learn (bundled with it: no download)."""

from __future__ import annotations

import numpy as np

from coded.base.checks import check_int, check_real

from .dataset import Dataset, split_off

__all__ = ["digits"]


def digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """The 1797 8x8 digit images of :func:`sklearn.datasets.load_digits`, pixels scaled to [0, 1].

    The samples are shuffled by a permutation seeded by ``seed``; the last
    ``ceil(test_fraction * 1797)`` of them form the test set.

    Returns
    -------
    Dataset
        64 features, 10 classes.

    >>> data = digits()
    >>> data.x_train.shape, data.x_test.shape, data.classes
    ((1437, 64), (360, 64), 10)
    """
    from sklearn.datasets import load_digits  # imported here: scikit-learn takes ~1 s to import

    rng = np.random.default_rng(check_int("seed", seed, 0))
    test_fraction = check_real("test_fraction", test_fraction, 0.0, 1.0)
    x, y = load_digits(return_X_y=True)
    order = rng.permutation(len(y))
    parts = split_off(x[order] / 16.0, y[order], test_fraction)
    return Dataset(*parts, classes=10, name=f"digits(seed={seed})")
