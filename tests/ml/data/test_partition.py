"""Partitioning: every sample exactly once, balanced sizes, seeded, label-sorted on request."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coded.ml.data import partition_indices


@st.composite
def splits(draw: st.DrawFn) -> tuple[int, int, int, str, np.ndarray]:
    n = draw(st.integers(1, 400))
    k = draw(st.integers(1, n))
    seed = draw(st.integers(0, 2**32 - 1))
    order = draw(st.sampled_from(["shuffled", "sorted_by_label"]))
    labels = np.random.default_rng(seed).integers(draw(st.integers(1, 10)), size=n)
    return n, k, seed, order, labels


@given(splits())
def test_every_sample_in_exactly_one_balanced_part(split):
    n, k, seed, order, labels = split
    parts = partition_indices(n, k, seed=seed, order=order, labels=labels)
    assert len(parts) == k
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    for part in parts:
        assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
    if order == "sorted_by_label":  # each part's labels lie between its neighbours'
        for before, after in itertools.pairwise(parts):
            assert labels[before].max() <= labels[after].min()


def test_seeded():
    a, b, c = (partition_indices(100, 4, seed=s) for s in (3, 3, 4))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))
    labels = np.repeat(np.arange(4), 25)
    d, e = (partition_indices(100, 8, seed=s, order="sorted_by_label", labels=labels) for s in (3, 4))
    assert not all(np.array_equal(p, q) for p, q in zip(d, e, strict=True))  # ties are broken by the seed


def test_sorted_by_label_gives_each_part_one_class():
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(5), 40))
    parts = partition_indices(200, 5, seed=1, order="sorted_by_label", labels=labels)
    assert [np.unique(labels[p]).tolist() for p in parts] == [[0], [1], [2], [3], [4]]


def test_shuffled_ignores_labels():
    with_labels = partition_indices(50, 3, seed=2, labels=np.arange(50))
    without = partition_indices(50, 3, seed=2)
    assert all(np.array_equal(p, q) for p, q in zip(with_labels, without, strict=True))


def test_mixes_the_samples():
    parts = partition_indices(1000, 2, seed=0)
    assert 200 < np.count_nonzero(parts[0] < 500) < 300  # about half of its 500 from each half


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_samples": 3, "k": 4}, ValueError, r"k must be <= n_samples: cannot cut 3 samples into k=4 partitions"),
        ({"n_samples": 3, "k": 0}, ValueError, r"k must be >= 1 \(got 0\)"),
        ({"n_samples": 0, "k": 1}, ValueError, r"n_samples must be >= 1 \(got 0\)"),
        ({"n_samples": 3.0, "k": 1}, TypeError, r"n_samples must be an integer \(got 3.0\)"),
        ({"n_samples": 3, "k": 1, "seed": -2}, ValueError, r"seed must be >= 0 \(got -2\)"),
        ({"n_samples": 3, "k": 1, "order": "random"}, ValueError,
         r"order must be one of shuffled, sorted_by_label \(got 'random'\)"),
        ({"n_samples": 3, "k": 1, "order": "sorted_by_label"}, ValueError, "order 'sorted_by_label' needs labels"),
        ({"n_samples": 3, "k": 1, "order": "sorted_by_label", "labels": [0, 1]}, ValueError,
         r"labels must have shape \(3,\) \(got \(2,\)\)"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        partition_indices(**{"seed": 0, **kwargs})
