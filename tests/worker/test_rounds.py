"""A worker's round as an object (coded.worker.rounds), without sockets: each state and what moves
it on, and its one end (DONE or not, one count, the connection's end after CLOSE)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from coded.base.errors import TooLarge
from coded.wire.frames import HEADER, Kind, encode_frame, parse_status
from coded.wire.status import Status
from coded.wire.tensor import TensorError
from coded.worker.rounds import MAX_ROUNDS, Outcome, Round, Rounds, State


class FakeLink:
    """A connection that records what its rounds send, count and end."""

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []
        self.counts: list[Outcome] = []
        self.ended = 0

    def send(self, buffers: Sequence[bytes | memoryview]) -> None:
        self.writes.append([bytes(b) for b in buffers])

    def count(self, outcome: Outcome) -> None:
        self.counts.append(outcome)

    def end_connection(self) -> None:
        self.ended += 1

    def frames(self) -> list[tuple[Kind, int, bytes]]:
        """Every frame sent: its kind, round and metadata."""
        out = []
        for data in (b"".join(write) for write in self.writes):
            at = 0
            while at < len(data):
                _magic, _version, kind, meta, round_id, payload = HEADER.unpack_from(data, at)
                out.append((Kind(kind), round_id, data[at + HEADER.size:at + HEADER.size + meta]))
                at += HEADER.size + meta + payload
        return out

    def dones(self) -> list[tuple[int, Status]]:
        return [(round_id, parse_status(meta)[0]) for kind, round_id, meta in self.frames() if kind is Kind.DONE]


def rounds_of() -> tuple[Rounds, FakeLink]:
    link = FakeLink()
    return Rounds(link), link


def opened(rounds: Rounds, round_id: int) -> Round:
    rounds.admit(round_id)
    return rounds.open(round_id)


def run(coroutine) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def stage_frame(round_id: int) -> list[bytes | memoryview]:
    """What a round's work sends before its DONE (a STAGE frame; its metadata is not read here)."""
    return encode_frame(Kind.STAGE, round_id, b"stage")


def test_a_round_computed_at_once_sends_its_frames_and_done_in_one_write():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 7)
        assert round_.state is State.COMPUTING and rounds.get(7) is round_  # its ROUND's callback decides
        seen = []

        def work(r: Round, value: int) -> None:
            seen.append((r.state, value))
            r.end("completed", frames=stage_frame(r.id))

        round_.compute(work, 3)
        assert seen == [(State.COMPUTING, 3)] and round_.state is State.ENDED
        assert len(link.writes) == 1  # the stage, then DONE, in one write
        assert [(kind, round_id) for kind, round_id, _ in link.frames()] == [(Kind.STAGE, 7), (Kind.DONE, 7)]
        assert link.dones() == [(7, Status.OK)]
        assert link.counts == ["completed"] and rounds.get(7) is None and len(rounds) == 0

    run(scenario())


def test_a_waiting_round_computes_when_its_delay_is_over_and_a_stop_before_ends_it_with_done():
    async def scenario() -> None:
        rounds, link = rounds_of()
        late = opened(rounds, 1)
        seen: list[State] = []

        def work(r: Round) -> None:
            seen.append(r.state)
            r.end("completed")

        late.wait(0.01, work)
        assert late.state is State.WAITING
        await asyncio.sleep(0.05)
        assert seen == [State.COMPUTING] and late.state is State.ENDED
        stopped = opened(rounds, 2)
        stopped.wait(0.01, work)
        stopped.stop()  # in its delay: ends at once, and its timer with it
        await asyncio.sleep(0.05)
        assert seen == [State.COMPUTING] and stopped.state is State.ENDED
        assert link.dones() == [(1, Status.OK), (2, Status.OK)] and link.counts == ["completed", "stopped"]

    run(scenario())


def test_a_streaming_round_computes_at_each_want_and_in_its_next_pass():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 5)
        passes: list[tuple[int, ...]] = []

        def work(r: Round, more: bool) -> None:  # an inline streamed round's pass
            passes.append(tuple(r.orders.wanted))
            r.orders.wanted.clear()
            r.idle(more and len(passes) == 1, work, more)

        round_.want([1])  # came with the ROUND, before the first pass
        round_.compute(work, True)  # its first pass asks for another in the loop's next pass
        assert round_.state is State.STREAMING and passes == [(1,)]
        round_.want([2])  # before that next pass: this WANT computes now, and the pass is dropped
        assert passes == [(1,), (2,)]
        await asyncio.sleep(0.01)
        assert passes == [(1,), (2,)] and round_.state is State.STREAMING  # idle: nothing asked for
        round_.have([3])  # HAVE: noted, nothing computed
        assert round_.orders.skip == {3} and len(passes) == 2
        round_.want([4])
        assert passes[-1] == (4,)
        round_.stop()  # between WANTs: ends at once
        round_.want([6])  # a WANT for an ended round (the frame crossed its DONE) computes nothing
        assert len(passes) == 3 and link.dones() == [(5, Status.OK)] and link.counts == ["stopped"]

    run(scenario())


def test_a_task_is_told_to_stop_and_ends_when_it_does():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 9)
        began = asyncio.Event()

        async def computed(r: Round, label: str) -> None:
            began.set()
            await r.orders.stopped.wait()  # a computation reaching its next piece of work
            r.end("stopped")

        round_.run(computed, "x")
        assert round_.state is State.TASK
        round_.stop()  # before the task began: its orders keep it
        assert round_.state is State.TASK and round_.orders.stopped.is_set() and link.writes == []
        await began.wait()
        for _ in range(3):
            await asyncio.sleep(0)
        assert round_.state is State.ENDED and link.dones() == [(9, Status.OK)] and link.counts == ["stopped"]

    run(scenario())


def test_ending_twice_counts_once_and_sends_one_done():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 3)
        round_.end("failed", ValueError("params must be float64"))
        round_.end("completed", frames=stage_frame(3))
        round_.stop()
        round_.lost()
        assert link.counts == ["failed"] and link.dones() == [(3, Status.INVALID_ARGUMENT)]
        assert len(link.writes) == 1

    run(scenario())


def test_a_superseded_round_sends_no_done_and_a_task_counts_until_it_ends():
    async def scenario() -> None:
        rounds, link = rounds_of()
        waiting = opened(rounds, 1)
        waiting.wait(60.0, lambda r: r.end("completed"))
        task = opened(rounds, 2)  # admitting round 2 let round 1 go
        assert waiting.state is State.ENDED and link.counts == ["stopped"] and link.writes == []
        release = asyncio.Event()

        async def computed(r: Round) -> None:
            await release.wait()  # stopped, but not yet at its next piece of work
            r.end("stopped")

        task.run(computed)
        rounds.admit(3)
        assert task.state is State.TASK and task.orders.stopped.is_set() and not task.waited
        assert len(rounds) == 1  # under way until its task ends: it counts against MAX_ROUNDS
        rounds.open(3).stop()
        release.set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert task.state is State.ENDED and link.dones() == [(3, Status.OK)]  # none for rounds 1 and 2
        assert link.counts == ["stopped", "stopped", "stopped"]

    run(scenario())


def test_more_than_max_rounds_under_way_is_too_many():
    async def scenario() -> None:
        rounds, _link = rounds_of()
        hold = asyncio.Event()

        async def computed(r: Round) -> None:
            await hold.wait()
            r.end("stopped")

        for round_id in range(1, MAX_ROUNDS + 1):
            opened(rounds, round_id).run(computed)
        with pytest.raises(TooLarge, match=f"more than {MAX_ROUNDS} rounds"):
            rounds.admit(MAX_ROUNDS + 1)
        hold.set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(rounds) == 0
        opened(rounds, MAX_ROUNDS + 1)  # room again

    run(scenario())


def test_a_round_ended_while_closing_ends_the_connection_once():
    async def scenario() -> None:
        rounds, link = rounds_of()
        release = asyncio.Event()

        async def computed(r: Round) -> None:
            await release.wait()
            r.end("stopped")

        task = opened(rounds, 1)
        task.run(computed)
        rounds.close()  # the task is told to stop: the connection waits for it
        assert rounds.closing and task.orders.stopped.is_set() and link.ended == 0
        with pytest.raises(TensorError, match="a ROUND after CLOSE"):
            rounds.admit(2)
        release.set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert link.dones() == [(1, Status.OK)] and link.ended == 1
        # rounds that end at once (a delay, an idle streamed round): the last one ends it
        rounds, link = rounds_of()
        opened(rounds, 1).wait(60.0, lambda r: r.end("completed"))
        rounds.close()
        assert link.dones() == [(1, Status.OK)] and link.ended == 1
        rounds, link = rounds_of()
        rounds.close()  # none under way: at once
        assert link.ended == 1 and link.writes == []

    run(scenario())


def test_a_lost_connection_cancels_every_round_without_a_done():
    async def scenario() -> None:
        rounds, link = rounds_of()
        cancelled = asyncio.Event()

        async def computed(r: Round) -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                r.end("cancelled")  # as it unwinds: ended already, nothing more
                raise

        waiting = opened(rounds, 1)
        waiting.wait(60.0, lambda r: r.end("completed"))
        task = opened(rounds, 2)  # lets round 1 go
        task.run(computed)
        await asyncio.sleep(0)
        rounds.lost()
        await asyncio.wait_for(cancelled.wait(), 5)
        assert task.state is State.ENDED and link.writes == []
        assert link.counts == ["stopped", "cancelled"] and len(rounds) == 0

    run(scenario())


def test_a_round_needs_a_new_nonzero_id():
    async def scenario() -> None:
        rounds, _link = rounds_of()
        with pytest.raises(TensorError, match="nonzero round id"):
            rounds.admit(0)
        opened(rounds, 4).run(lambda r: asyncio.sleep(60))
        with pytest.raises(TensorError, match="round 4 is already computing"):
            rounds.admit(4)
        rounds.lost()

    run(scenario())


def test_a_stop_for_a_round_no_longer_under_way_does_not_touch_a_later_round_of_that_id():
    """A STOP for a round that ended crossed its DONE: the connection finds no round of that id and
    leaves the next round alone."""
    async def scenario() -> None:
        rounds, link = rounds_of()
        opened(rounds, 8).end("completed")
        assert rounds.get(8) is None  # what a STOP for round 8 finds now: nothing to stop
        later = opened(rounds, 9)
        later.wait(60.0, lambda r: r.end("completed"))
        assert later.state is State.WAITING and not later.orders.stopped.is_set()
        assert link.dones() == [(8, Status.OK)]
        rounds.lost()

    run(scenario())
