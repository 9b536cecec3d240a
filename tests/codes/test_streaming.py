"""Streamed replies: the layout (who holds what, in which order) and the assembly of one
iteration's pieces, checked against the plain sum of the partial gradients."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coded.codes.sampled import (
    confirmations,
    located_per_iteration,
    wrong_used_at_most,
    wrong_used_before_located,
)
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
    assembly = StreamAssembly(layout, range(6), confirm=[0])
    assert assembly.add(0, 0, g[0] + 1.0).pieces == ()  # piece 0 is drawn: it waits for a second copy
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
    assembly = StreamAssembly(layout, range(4), confirm=[1])
    assert assembly.add(1, 1, g[1] + 1.0).pieces == ()  # piece 1 is drawn: checked
    assert assembly.add(1, 2, g[2] + 1.0).pieces == (2,)  # piece 2 is not: taken as it comes
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
    assert not assembly.complete
    # piece 1's holders are worker 0 (found wrong) and worker 1, whose own copy cannot confirm itself
    assert not assembly.can_finish()
    assembly.ended(1)
    assert not assembly.can_finish()
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


# --- the sampled check ------------------------------------------------------------------------------


def test_the_sampled_draw_confirms_every_piece_at_its_share_whatever_its_position():
    """Each piece is drawn with probability share, independently of the others: per piece and in
    all, the counts over many iterations are within 5 binomial deviations of share x iterations."""
    pieces, share, iterations = 12, 0.1, 4000
    counts = np.zeros(pieces)
    for iteration in range(iterations):
        drawn = confirmations(3, iteration, pieces, share)
        assert drawn == confirmations(3, iteration, pieces, share)  # a restart draws the same
        counts[sorted(drawn)] += 1
    sigma = math.sqrt(iterations * share * (1 - share))
    assert np.all(np.abs(counts - iterations * share) <= 5 * sigma), counts
    assert abs(counts.sum() - pieces * iterations * share) <= 5 * math.sqrt(pieces) * sigma


def sampled_rounds(layout: StreamLayout, share: float, wrong_pieces, iterations: int, seed: int = 0) -> int:
    """Iterations (of ``iterations``) in which the sampled check located worker 0, which is wrong in
    the pieces ``wrong_pieces(iteration)`` of its own partition. Every worker sends its own
    partition; a piece drawn for confirmation gets copies from its other holders, in order, until
    it is settled (as the master's steering asks them)."""
    g = partials(layout, seed)
    located = 0
    for iteration in range(iterations):
        assembly = StreamAssembly(layout, range(layout.n), confirm=confirmations(seed, iteration, layout.pieces, share),
                                  spares=True)
        wrong = wrong_pieces(iteration)
        for worker in range(layout.n):
            for piece in layout.pieces_of(worker)[: layout.chunks]:
                assembly.add(worker, piece, g[piece] + (1.0 if worker == 0 and piece in wrong else 0.0))
        for _ in range(2):  # a second pass for the pieces of a worker found wrong, open again
            for piece in range(layout.pieces):
                for holder in layout.holders(piece):
                    if assembly.missing(piece) and piece not in assembly.delivered(holder):
                        assembly.add(holder, piece, g[piece])
        assert assembly.complete and np.allclose(assembly.total(), g.sum(axis=0), rtol=0, atol=1e-12) == (
            not (set(wrong) & set(assembly.used().get(0, ()))))
        located += 0 in assembly.wrong
    return located


@pytest.mark.parametrize(("share", "wrong_share", "chunks"), [(0.1, 1.0, 1), (0.2, 0.3, 2), (0.05, 1.0, 4)])
def test_a_worker_wrong_in_a_share_of_its_pieces_is_located_at_the_stated_rate(share, wrong_share, chunks):
    """located_per_iteration's formula against the assembly: worker 0 is wrong in each of its
    pieces with probability wrong_share; the share of iterations that locate it is within 5
    binomial deviations of 1 - (1 - share x wrong_share)^chunks."""
    layout = StreamLayout("cyclic", 6, 2, chunks=chunks)
    own = layout.pieces_of(0)[:chunks]
    iterations = 1500
    rng = np.random.default_rng(11)
    draws = {t: [p for p in own if rng.random() < wrong_share] for t in range(iterations)}
    found = sampled_rounds(layout, share, draws.__getitem__, iterations)
    expected = located_per_iteration(share, wrong_share, used=chunks)
    assert abs(found - iterations * expected) <= 5 * math.sqrt(iterations * expected * (1 - expected)), found


def test_a_worker_wrong_only_beyond_its_first_piece_is_located():
    """The hole of a check that confirms first pieces only: worker 0 is wrong in the last chunk of
    its partition, never the first. Drawn at share 0.25 per piece, it is located in about a
    quarter of the iterations."""
    layout = StreamLayout("cyclic", 6, 2, chunks=3)
    last = layout.pieces_of(0)[2]
    found = sampled_rounds(layout, 0.25, lambda _: [last], 400)
    assert abs(found - 100) <= 5 * math.sqrt(400 * 0.25 * 0.75), found


def test_a_late_copy_of_a_piece_settled_on_one_copy_is_compared():
    layout = StreamLayout("cyclic", 6, 2, chunks=1)
    g = partials(layout)
    assembly = StreamAssembly(layout, range(6), spares=True)
    assert assembly.add(0, 0, g[0]).pieces == (0,)  # not drawn: settled on one copy
    assert assembly.add(5, 0, g[0]).pieces == () and assembly.checked() == 1  # an agreeing spare confirms it
    other = StreamAssembly(layout, range(6), spares=True)
    other.add(0, 0, g[0] + 1.0)
    result = other.add(5, 0, g[0])  # a disagreeing one opens it again, both senders disputed
    assert result.reopened == (0,) and result.disputed == (0, 5) and not other.settled(0)
    third = other.add(4, 0, g[0])
    assert third.wrong == (0,) and other.settled(0)
    unchecked = StreamAssembly(layout, range(6))  # verify: off compares nothing
    unchecked.add(0, 0, g[0] + 1.0)
    assert unchecked.add(5, 0, g[0]).reopened == () and unchecked.settled(0)


def test_the_stated_counts_of_wrong_pieces_used_match_a_simulation():
    """wrong_used_before_located and wrong_used_at_most against draws: a wrong piece escapes
    with probability 1 - share until one is drawn."""
    share, trials = 0.1, 20_000
    escaped = np.random.default_rng(5).geometric(share, trials) - 1
    assert abs(escaped.mean() - wrong_used_before_located(share)) <= 5 * escaped.std() / math.sqrt(trials)
    assert np.mean(escaped > wrong_used_at_most(share)) <= 0.01 + 5 * math.sqrt(0.01 * 0.99 / trials)
    k = wrong_used_at_most(share)
    assert (1 - share) ** k <= 0.01 < (1 - share) ** (k - 1)  # the fewest such k
