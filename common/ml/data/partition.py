"""Split the training samples into the k data partitions of a gradient code."""

from __future__ import annotations

import numpy as np

from coded.base.checks import check_int

__all__ = ["ORDERS", "batch_rows", "partition_indices"]

_BATCH_SALT = 0xBA7C  # keeps the batch draws apart from other draws of the same seed

#: "shuffled": a seeded random permutation; "sorted_by_label": sorted by label (ties shuffled),
#: so each partition, and so each worker, holds few labels.
ORDERS = ("shuffled", "sorted_by_label")


def partition_indices(
    n_samples: int, k: int, seed: int, order: str = "shuffled", labels: np.ndarray | None = None
) -> list[np.ndarray]:
    """Row indices of k nearly equal partitions of ``n_samples`` samples.

    The samples are put in an order (a seeded permutation, or the label-sorted order with ties
    broken by that permutation) and cut into k contiguous runs whose sizes differ by at most one
    (the first ``n_samples mod k`` runs are one longer). Every sample is in exactly one partition.

    Parameters
    ----------
    n_samples : int
        >= 1.
    k : int
        Number of partitions, 1..n_samples.
    seed : int
        >= 0.
    order : {"shuffled", "sorted_by_label"}
    labels : (n_samples,) ndarray, optional
        Needed by "sorted_by_label" (class labels, or regression targets); ignored by "shuffled".

    Returns
    -------
    parts : list of k ndarrays of int64
        Each sorted ascending (for memory locality when indexing).

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type or value, k > n_samples, or missing/mis-shaped labels.

    >>> [p.tolist() for p in partition_indices(5, 2, seed=0, order="sorted_by_label", labels=[1, 0, 1, 0, 0])]
    [[1, 3, 4], [0, 2]]
    """
    n_samples = check_int("n_samples", n_samples, 1)
    k = check_int("k", k, 1)
    if k > n_samples:
        raise ValueError(f"k must be <= n_samples: cannot cut {n_samples} samples into k={k} partitions")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")
    permutation = np.random.default_rng(check_int("seed", seed, 0)).permutation(n_samples)
    if order == "sorted_by_label":
        if labels is None:
            raise ValueError("order 'sorted_by_label' needs labels")
        labels = np.asarray(labels)
        if labels.shape != (n_samples,):
            raise ValueError(f"labels must have shape ({n_samples},) (got {labels.shape})")
        permutation = permutation[np.argsort(labels[permutation], kind="stable")]
    return [np.sort(part).astype(np.int64) for part in np.array_split(permutation, k)]


def batch_rows(size: int, batch: int, seed: int, iteration: int, partition: int) -> np.ndarray:
    """Rows (sorted) of one partition's mini-batch at ``iteration``: epoch-wise shuffled batches.

    A function of (seed, iteration, partition, size) only, never of the worker: every worker that
    holds a partition computes the gradient of the same batch, which keeps a gradient code exact.
    The partition's ``size // batch`` batches of an epoch are disjoint slices of a permutation
    drawn from (seed, epoch, partition); the last ``size % batch`` rows of that permutation sit
    out the epoch.

    Parameters
    ----------
    size : int
        Rows of the partition, >= ``batch``.
    batch, seed, iteration, partition : int

    Returns
    -------
    (batch,) ndarray of int

    >>> epoch = [batch_rows(10, 3, seed=1, iteration=t, partition=0) for t in range(3)]
    >>> len(set(np.concatenate(epoch).tolist()))
    9
    """
    size, batch = check_int("size", size, 1), check_int("batch", batch, 1)
    if batch > size:
        raise ValueError(f"a batch of {batch} does not fit a partition of {size} rows")
    epoch, position = divmod(check_int("iteration", iteration, 0), size // batch)
    order = np.random.default_rng([seed, epoch, partition, _BATCH_SALT]).permutation(size)
    return np.sort(order[position * batch : (position + 1) * batch])

