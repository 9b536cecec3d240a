"""Streamed replies: the layout (who holds what, in which order) and the assembly of one
iteration's pieces, checked against the plain sum of the partial gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coded.codes.streaming import StreamAssembly, StreamLayout

LAYOUTS = [("cyclic", 6, 2), ("cyclic", 5, 1), ("cyclic", 16, 3), ("frc", 6, 1), ("frc", 8, 3), ("cyclic", 4, 0)]


@pytest.mark.parametrize(("scheme", "n", "s"), LAYOUTS)
def test_every_partition_is_held_by_s_plus_1_workers_and_staggered_at_a_different_position_on_each(scheme, n, s):
    layout = StreamLayout(scheme, n, s, chunks=3)
    for j in range(layout.k):
        holders = layout.holders(j * 3)
        assert len(holders) == s + 1
        assert sorted(layout.order(h).index(j) for h in holders) == list(range(s + 1))  # Latin
    for i in range(n):
        assert sorted(layout.order(i)) == list(layout.partitions(i))
        assert layout.pieces_of(i) == tuple(j * 3 + c for j in layout.order(i) for c in range(3))
    firsts = {layout.order(i)[0] for i in range(n)}
    assert firsts == set(range(layout.k))  # a healthy round needs each worker's first partition only


def test_the_sorted_order_starts_several_workers_on_the_same_partition():
    layout = StreamLayout("cyclic", 6, 2, order="sorted")
    assert [layout.order(i)[0] for i in range(6)] == [0, 1, 2, 3, 0, 0]


@pytest.mark.parametrize(("args", "message"), [
    (("ye_abbe", 6, 2), "only frc and cyclic stream"),
    (("frc", 6, 3), r"frc needs \(s\+1\) to divide n"),
    (("cyclic", 6, 6), "0 <= s < n"),
])
def test_layouts_that_cannot_be_built_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        StreamLayout(*args)


def test_copies_counts_the_least_held_partition_among_workers():
    layout = StreamLayout("cyclic", 6, 2)
    assert layout.copies(range(6)) == 3
    assert layout.copies([0, 1, 2, 3]) == 1  # partition 5 is held by 3, 4, 5
    assert layout.copies([0, 2, 4]) == 1
    assert layout.copies([0, 1]) == 0


def partials(layout: StreamLayout, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((layout.pieces, 7))


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(LAYOUTS), chunks=st.integers(1, 3), seed=st.integers(0, 10_000), data=st.data())
def test_any_arrival_order_of_whole_or_partial_work_sums_to_the_plain_sum(case, chunks, seed, data):
    """Workers deliver prefixes of their orders, interleaved at random; the assembly completes
    exactly when every piece arrived once, and its total is the plain sum of the partials."""
    layout = StreamLayout(*case, chunks=chunks)
    g = partials(layout, seed)
    assembly = StreamAssembly(layout, range(layout.n))
    rng = np.random.default_rng(seed)
    progress = [0] * layout.n
    arrived: set[int] = set()
    while not assembly.complete:
        busy = [i for i in range(layout.n) if progress[i] < len(layout.pieces_of(i))]
        worker = int(rng.choice(busy))
        piece = layout.pieces_of(worker)[progress[worker]]
        progress[worker] += 1
        result = assembly.add(worker, piece, g[piece])
        arrived.add(piece)
        assert result.complete == (len(arrived) == layout.pieces)
    assert np.allclose(assembly.total(), g.sum(axis=0), rtol=0, atol=1e-12)
    used = assembly.used()
    assert sorted(itertools.chain.from_iterable(used.values())) == list(range(layout.pieces))


def test_a_checked_piece_is_settled_by_two_agreeing_copies_and_the_odd_one_out_is_wrong():
    layout = StreamLayout("cyclic", 6, 2, chunks=1)
    g = partials(layout)
    assembly = StreamAssembly(layout, range(6), check_first=[0])
    assert assembly.add(0, 0, g[0] + 1.0).pieces == ()  # worker 0's first piece waits for a second copy
    second = assembly.add(5, 0, g[0])  # worker 5 holds 5, 0, 1: they disagree
    assert second.pieces == () and second.wrong == () and assembly.disagreement()
    third = assembly.add(4, 0, g[0] * (1 + 1e-12))  # worker 4 agrees with 5 within the tolerance
    assert third.pieces == (0,) and third.wrong == (0,)
    assert assembly.wrong == {0}
    for piece in range(1, 6):
        assembly.add(piece, piece, g[piece])
    assert assembly.complete and np.allclose(assembly.total(), g.sum(axis=0), rtol=0, atol=1e-12)
    assert 0 not in assembly.used() and assembly.checked() == 1


def test_strict_confirms_every_piece():
    layout = StreamLayout("cyclic", 4, 2, chunks=1)  # partition j: workers j, j - 1, j - 2
    g = partials(layout)
    assembly = StreamAssembly(layout, range(4), strict=True)
    for worker in range(4):  # every worker's first piece: one copy each, nothing settled
        assert assembly.add(worker, worker, g[worker] + (1.0 if worker == 1 else 0.0)).pieces == ()
    assert assembly.add(0, 1, g[1]).pieces == ()  # 0 and 1 disagree on partition 1
    assert assembly.add(3, 0, g[0]).pieces == (0,)
    assert assembly.add(2, 3, g[3]).pieces == (3,)
    result = assembly.add(3, 1, g[1])  # a third copy settles partition 1 and locates worker 1
    assert result.wrong == (1,) and result.pieces == (1,)
    assert assembly.add(0, 2, g[2]).pieces == (2,)
    assert assembly.complete and assembly.checked() == 4
    assert np.allclose(assembly.total(), g.sum(axis=0), rtol=0, atol=1e-12)


def test_a_worker_found_wrong_loses_the_pieces_it_settled_unchecked():
    layout = StreamLayout("cyclic", 4, 2, chunks=1)
    g = partials(layout)
    assembly = StreamAssembly(layout, range(4), check_first=[1])
    assert assembly.add(1, 1, g[1] + 1.0).pieces == ()  # its first piece is checked
    assert assembly.add(1, 2, g[2] + 1.0).pieces == (2,)  # its second is taken as it comes
    assert assembly.add(0, 1, g[1]).pieces == ()
    result = assembly.add(3, 1, g[1])
    assert result.wrong == (1,) and result.pieces == (1,) and result.reopened == (2,)
    assert not assembly.settled(2)
    assert assembly.add(2, 2, g[2]).pieces == (2,)
    for worker, piece in ((0, 0), (3, 3)):
        assembly.add(worker, piece, g[piece])
    assert assembly.complete and np.allclose(assembly.total(), g.sum(axis=0), rtol=0, atol=1e-12)
    assert 1 not in assembly.used()


def test_non_finite_and_out_of_scale_copies_are_never_used():
    layout = StreamLayout("cyclic", 3, 1, chunks=1)
    g = partials(layout)
    references = {p: float(np.linalg.norm(g[p])) for p in range(3)}
    assembly = StreamAssembly(layout, range(3), references=references)
    bad = g[0].copy()
    bad[2] = np.nan
    assert assembly.add(0, 0, bad).wrong == (0,)
    assert assembly.add(1, 1, g[1] * 1e5).pieces == ()  # out of scale: must be confirmed
    assert assembly.add(2, 2, g[2]).pieces == (2,)
    assert assembly.add(2, 0, g[0]).pieces == (0,)
    assert not assembly.can_finish() or not assembly.complete
    assembly.ended(1)
    assert not assembly.can_finish()  # only worker 0 (wrong) and worker 1 (out of scale) held piece 1
    assert assembly.disagreement() is False  # one copy: too few, not a disagreement


def test_bad_arrivals_are_refused():
    layout = StreamLayout("cyclic", 4, 1, chunks=1)
    assembly = StreamAssembly(layout, [0, 1, 2])
    with pytest.raises(ValueError, match="was not called"):
        assembly.add(3, 3, np.zeros(2))
    with pytest.raises(ValueError, match="does not hold"):
        assembly.add(0, 2, np.zeros(2))
    assembly.add(0, 0, np.zeros(2))
    with pytest.raises(ValueError, match="twice"):
        assembly.add(0, 0, np.zeros(2))
