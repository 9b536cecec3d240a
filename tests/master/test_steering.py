"""The master's steering of a streamed round, with a hand-driven clock: who computes what after
its own partition, and that a piece only a late worker can give is asked of it."""

from __future__ import annotations

import collections

import numpy as np

from coded.codes.streaming import StreamAssembly, StreamLayout
from coded.master.steering import BACKUP_AFTER, Steering


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def deliver(steering: Steering, assembly: StreamAssembly, worker: int, piece: int) -> None:
    """What the runner does when a piece arrives: add it, tell the others to skip what settled."""
    settled = assembly.add(worker, piece, np.full(3, float(piece + 1)))
    steering.delivered(worker, piece)
    steering.skips(settled.pieces)


def test_a_worker_done_with_its_own_partition_takes_the_back_of_a_slower_ones():
    layout = StreamLayout("cyclic", 6, 2, chunks=4)
    assembly = StreamAssembly(layout, range(6))
    clock = Clock()
    steering = Steering(layout, range(6), assembly, clock)
    assert steering.assign() == {}  # everyone has its own partition ahead of it
    for worker in range(6):
        if worker != 2:
            for piece in layout.pieces_of(worker)[: layout.chunks]:
                deliver(steering, assembly, worker, piece)
    wanted = steering.assign()
    # worker 2's partition is the only open one: its idle holders take one piece each from its
    # back, the last first, while worker 2 goes on from the front
    own = layout.pieces_of(2)[: layout.chunks]
    assert sorted(piece for pieces in wanted.values() for piece in pieces) == sorted(own[-len(wanted):])
    assert len(wanted) == len(layout.holders(own[0])) - 1 and 2 not in wanted
    assert all(len(pieces) == 1 for pieces in wanted.values())


def test_a_piece_only_unheard_workers_hold_is_asked_of_them_once_their_own_work_is_settled():
    """Regression: a check's second copy whose only other holders had not sent anything yet
    (late, with every piece of theirs settled by others) was never asked for: the round hung."""
    layout = StreamLayout("cyclic", 4, 2, chunks=1)  # partition p is held by workers p-2, p-1, p
    piece = 2
    late = [w for w in layout.holders(piece) if w != 2]
    assembly = StreamAssembly(layout, range(4), confirm=[piece])  # worker 2's first piece needs a second copy
    steering = Steering(layout, range(4), assembly, Clock())
    deliver(steering, assembly, 2, piece)
    assert assembly.missing(piece) == 1
    for worker in (2, 3):  # the heard workers settle everything else, late workers' own pieces included
        for other in layout.pieces_of(worker):
            if other != piece and assembly.missing(other) and other not in assembly.delivered(worker):
                deliver(steering, assembly, worker, other)
    assert [p for p in range(layout.pieces) if assembly.missing(p)] == [piece]
    wanted = steering.assign()
    assert list(wanted.values()) == [[piece]] and set(wanted) <= set(late)


def test_an_overdue_piece_gets_a_backup_from_an_idle_worker():
    layout = StreamLayout("cyclic", 3, 1, chunks=1)  # worker w holds partitions w and w+1
    assembly = StreamAssembly(layout, range(3))
    clock = Clock()
    steering = Steering(layout, range(3), assembly, clock)
    clock.now = 1.0  # pieces take a second to arrive
    deliver(steering, assembly, 0, layout.pieces_of(0)[0])
    deliver(steering, assembly, 1, layout.pieces_of(1)[0])
    # worker 2's own piece is under way: nobody duplicates it yet
    assert steering.assign() == {}
    assert steering.next_backup() == BACKUP_AFTER * 1.0 - 1.0
    clock.now = BACKUP_AFTER * 1.0 + 0.01
    wanted = steering.assign()
    assert list(wanted.values()) == [[layout.pieces_of(2)[0]]]
    assert set(wanted) == set(layout.holders(layout.pieces_of(2)[0])) - {2}


def test_a_piece_is_late_against_how_long_pieces_took_to_arrive_in_the_rounds_before():
    """On a busy machine a piece computes in a fraction of the time it takes to arrive (queueing
    for a core, the network): judged by the master's clock, the last round's arrivals say when
    a piece is overdue, and one that comes as late as they did gets no backup."""
    layout = StreamLayout("cyclic", 3, 1, chunks=1)
    latencies: collections.deque[float] = collections.deque()
    clock = Clock()
    for round_ in range(2):
        start = clock.now
        assembly = StreamAssembly(layout, range(3))
        steering = Steering(layout, range(3), assembly, clock, latencies)
        for worker in range(3):  # arriving 1, 2 and 3 s after the round's start
            clock.now = start + worker + 1.0
            if round_ == 1 and worker == 2:
                # the last round says pieces take about 2 s: at 3 s it is not overdue yet
                assert steering.assign() == {}
                assert steering.next_backup() == BACKUP_AFTER * 2.0 - 3.0
            deliver(steering, assembly, worker, layout.pieces_of(worker)[0])
        assert assembly.complete
    assert list(latencies) == [1.0, 2.0, 3.0] * 2
    # a round that starts with the history: past 3 typical pieces, the last worker's gets a backup
    assembly = StreamAssembly(layout, range(3))
    steering = Steering(layout, range(3), assembly, clock, latencies)
    start = clock.now
    for worker in (0, 1):
        clock.now = start + 1.0
        deliver(steering, assembly, worker, layout.pieces_of(worker)[0])
    clock.now = start + BACKUP_AFTER * 2.0 + 0.01
    assert list(steering.assign().values()) == [[layout.pieces_of(2)[0]]]


def test_the_partitions_of_workers_late_last_round_are_planned_onto_the_others_from_the_start():
    """Workers 0 and 1 late (as in bench.mpi's fixed stragglers): every piece of their own
    partitions is asked at once of a prompt holder, none of the late ones, spread by what each has
    ahead; asked one piece per round trip, worker 5 (partition 1's only prompt holder) would take
    four round trips."""
    layout = StreamLayout("cyclic", 6, 2, chunks=4)
    assembly = StreamAssembly(layout, range(6))
    steering = Steering(layout, range(6), assembly, Clock())
    planned = steering.anticipate({0, 1})
    late_pieces = set(layout.pieces_of(0)[:4]) | set(layout.pieces_of(1)[:4])
    assert sorted(p for pieces in planned.values() for p in pieces) == sorted(late_pieces)
    assert not set(planned) & {0, 1}
    assert all(worker in layout.holders(piece) for worker, pieces in planned.items() for piece in pieces)
    assert planned[5] == sorted(layout.pieces_of(1)[:4], reverse=True)  # from the back
    assert planned[4] == sorted(layout.pieces_of(0)[:4], reverse=True)  # the holder with less ahead
    assert steering.assign() == {}  # nobody is idle: the plan is their work
    for worker in range(2, 6):  # the prompt workers alone settle every piece
        for piece in (*layout.pieces_of(worker)[:4], *planned.get(worker, [])):
            deliver(steering, assembly, worker, piece)
    assert assembly.complete


def test_no_plan_without_late_workers_or_without_a_prompt_holder():
    layout = StreamLayout("cyclic", 3, 1, chunks=2)  # partition p is held by workers p and p-1
    steering = Steering(layout, range(3), StreamAssembly(layout, range(3)), Clock())
    assert steering.anticipate(set()) == {}
    # worker 0's partition is held by 0 and 2: with both late, nobody prompt can take it
    assert steering.anticipate({0, 2}) == {1: sorted(layout.pieces_of(2)[:2], reverse=True)}


def test_at_the_end_only_workers_still_computing_a_piece_nobody_skipped_for_them_are_busy():
    """What the round's end stops with a frame: a worker computing a piece it was not told to
    skip. Idle ones (every piece they were given delivered, or skipped) are left to the next round."""
    layout = StreamLayout("cyclic", 6, 2, chunks=1)
    assembly = StreamAssembly(layout, range(6))
    steering = Steering(layout, range(6), assembly, Clock())
    late = layout.pieces_of(0)[0]
    plan = steering.anticipate({0})  # worker 0 was late: its partition is asked of a prompt holder
    [(holder, [planned])] = plan.items()
    assert planned == late and holder != 0
    assert steering.busy() == set(range(6))  # every worker has its own partition ahead
    for worker in range(1, 6):
        deliver(steering, assembly, worker, layout.pieces_of(worker)[0])
    assert steering.busy() == {0, holder}  # worker 0 in its delay; the holder on worker 0's piece
    assembly.add(holder, late, np.ones(3))  # the last piece: the round ends without its skips
    steering.delivered(holder, late)
    assert assembly.complete and steering.busy() == {0}  # worker 0 had it ahead: it gets the STOP
    steering.skips([late])
    assert steering.busy() == set()  # told to skip it, it would compute nothing more
