"""The handwritten digits of scikit-learn (bundled with it: no download)."""

from __future__ import annotations

import numpy as np

from coded.base.checks import check_int, check_real

from .dataset import TEST_FRACTION, Dataset, split_off

__all__ = ["DIGITS", "DIGITS_SHAPE", "digits"]

#: scikit-learn's digits: how many, and the shape of one image
DIGITS = 1797
DIGITS_SHAPE = (1, 8, 8)


def digits(seed: int = 0, test_fraction: float = TEST_FRACTION) -> Dataset:
    """The 1797 8x8 digit images of :func:`sklearn.datasets.load_digits`, pixels scaled to [0, 1].

    The samples are shuffled by a permutation seeded by ``seed``; the last
    ``ceil(test_fraction * 1797)`` of them form the test set.

    Returns
    -------
    Dataset
        64 features (8 x 8 images: ``shape`` (1, 8, 8)), 10 classes.

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
    return Dataset(*parts, classes=10, name=f"digits(seed={seed})", shape=DIGITS_SHAPE)
