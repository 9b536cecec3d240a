"""Rests: a late worker is left out of ever more iterations, never so many that the others lack a
partition, and is called every iteration again once it sends a piece."""

from __future__ import annotations

import itertools

from coded.codes.streaming import StreamLayout
from coded.master.steering import MAX_REST, Rests


def test_a_worker_late_in_every_round_it_is_called_rests_1_2_4_iterations_up_to_the_cap():
    rests, everyone = Rests(), list(range(6))
    called_at = []
    for iteration in range(400):
        called = rests.called(iteration, everyone, lambda rest: True)
        if 0 in called:
            called_at.append(iteration)
        rests.note(iteration, called, late={0} & set(called))
    gaps = [b - a - 1 for a, b in itertools.pairwise(called_at)]  # iterations rested between calls
    assert gaps[:6] == [1, 2, 4, 8, 16, 32] and set(gaps[5:]) == {MAX_REST}
    assert rests.behind == {0}


def test_a_piece_ends_the_rests_and_others_are_never_left_out():
    rests = Rests()
    rests.note(0, range(6), late={2, 3})
    assert rests.called(1, range(6), lambda rest: True) == [0, 1, 4, 5]
    assert rests.called(2, range(6), lambda rest: True) == list(range(6))  # rested its 1 iteration
    rests.note(2, range(6), late={3})  # worker 2 sent a piece: back
    assert rests.behind == {3}
    assert rests.called(3, range(6), lambda rest: True) == [0, 1, 2, 4, 5]
    assert rests.called(4, range(6), lambda rest: True) == [0, 1, 2, 4, 5]  # 2 iterations now
    assert rests.called(5, range(6), lambda rest: True) == list(range(6))


def test_late_workers_rest_only_while_the_others_hold_every_partition():
    """cyclic s = 2 on 6 workers: partition p is held by workers p - 2, p - 1 and p (mod 6). Of
    workers 0, 1 and 2, late together, two may rest (partition 2 keeps a copy); with a second
    copy of every partition needed (checking), one."""
    layout = StreamLayout("cyclic", 6, 2, chunks=1)
    assert layout.copies([3, 4, 5]) == 0 and layout.copies([2, 3, 4, 5]) == 1  # an independent look at the layout
    rests = Rests()
    rests.note(0, range(6), late={0, 1, 2})
    assert rests.called(1, range(6), lambda rest: layout.copies(rest) >= 1) == [2, 3, 4, 5]
    assert rests.called(1, range(6), lambda rest: layout.copies(rest) >= 2) == [1, 2, 3, 4, 5]
