"""A worker's round as an object (coded.worker.rounds), without sockets: its computation stepped
with no task, each state and what moves it on, and its one end (DONE or not, one count, the
connection's end after CLOSE)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from coded.base.errors import TooLarge
from coded.wire.frames import HEADER, Kind, encode_frame, parse_status
from coded.wire.status import Status
from coded.wire.tensor import TensorError
from coded.worker.rounds import MAX_ROUNDS, Outcome, Round, Rounds, State
from coded.worker.service import Stopped


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
    """What a round's computation sends before its DONE (a STAGE frame; its metadata is not read here)."""
    return encode_frame(Kind.STAGE, round_id, b"stage")


async def sends_a_stage(r: Round, *waits: asyncio.Future | None) -> None:
    """A round's computation: it waits for each of ``waits`` (None: the loop's next pass), then
    sends a stage; a stop while a thread computes (a future marked ``computing``) raises Stopped."""
    for wait in waits:
        if wait is None:
            await asyncio.sleep(0)
        else:
            await wait
        if r.orders.stopped.is_set():
            raise Stopped
    r.frames.extend(stage_frame(r.id))


def thread(r: Round) -> asyncio.Future:
    """A future standing for a thread computing one of the round's messages."""
    r.orders.computing = True
    future = asyncio.get_running_loop().create_future()
    future.add_done_callback(lambda _: setattr(r.orders, "computing", False))
    return future


def test_a_round_with_nothing_to_wait_for_sends_its_frames_and_done_in_one_write():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 7)
        assert round_.state is State.COMPUTING and rounds.get(7) is round_
        round_.run(sends_a_stage(round_))
        assert round_.state is State.ENDED
        assert len(link.writes) == 1  # the stage, then DONE, in one write
        assert [(kind, round_id) for kind, round_id, _ in link.frames()] == [(Kind.STAGE, 7), (Kind.DONE, 7)]
        assert link.dones() == [(7, Status.OK)]
        assert link.counts == ["completed"] and rounds.get(7) is None and len(rounds) == 0

    run(scenario())


def test_a_waiting_round_goes_on_when_what_it_waits_for_is_there_and_a_stop_before_ends_it_with_done():
    async def scenario() -> None:
        rounds, link = rounds_of()
        late = opened(rounds, 1)
        late.run(sends_a_stage(late, asyncio.ensure_future(asyncio.sleep(0.01))))
        assert late.state is State.WAITING and link.writes == []
        await asyncio.sleep(0.05)
        assert late.state is State.ENDED
        delay = asyncio.get_running_loop().create_future()
        stopped = opened(rounds, 2)
        stopped.run(sends_a_stage(stopped, delay))
        stopped.stop()  # in its delay: ends at once, and what it waited for with it
        assert stopped.state is State.ENDED and delay.cancelled()
        assert link.dones() == [(1, Status.OK), (2, Status.OK)] and link.counts == ["completed", "stopped"]
        assert [kind for kind, _, _ in link.frames()] == [Kind.STAGE, Kind.DONE, Kind.DONE]

    run(scenario())


def test_frames_of_a_computation_are_written_at_its_next_wait():
    """A streamed round sends each piece computed inline with the round's next write: the pieces
    of one pass together, before it waits for the master's next WANT."""
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 5)

        async def streamed(r: Round) -> None:
            for _ in range(2):
                r.frames.extend(stage_frame(r.id))
                r.frames.extend(stage_frame(r.id))
                await r.orders.more_wanted()

        round_.want([1])  # a WANT before the computation waits for one does not count for that wait
        round_.run(streamed(round_))
        assert round_.state is State.WAITING and len(link.writes) == 1 and len(link.frames()) == 2
        round_.have([3])  # HAVE: noted, nothing computed
        assert round_.orders.skip == {3} and round_.state is State.WAITING
        round_.want([4])
        await asyncio.sleep(0)  # the WANT's wake-up: the next pass
        assert len(link.writes) == 2 and len(link.frames()) == 4 and round_.state is State.WAITING
        round_.stop()  # between WANTs: ends at once
        round_.want([6])  # a WANT for an ended round (the frame crossed its DONE) computes nothing
        assert link.dones() == [(5, Status.OK)] and link.counts == ["stopped"] and len(link.frames()) == 5

    run(scenario())


def test_a_round_whose_thread_computes_is_told_to_stop_and_ends_when_the_thread_has():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 9)
        computing = thread(round_)
        round_.run(sends_a_stage(round_, computing))
        round_.stop()
        assert round_.state is State.WAITING and round_.orders.cancel.is_set() and link.writes == []
        computing.set_result(None)  # the thread returns at its next chunk
        await asyncio.sleep(0)
        assert round_.state is State.ENDED and link.dones() == [(9, Status.OK)] and link.counts == ["stopped"]
        assert [kind for kind, _, _ in link.frames()] == [Kind.DONE]  # nothing it computed is sent

    run(scenario())


def test_ending_twice_counts_once_and_sends_one_done():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 3)
        round_.end("failed", ValueError("params must be float64"))
        round_.end("completed")
        round_.stop()
        round_.lost()
        assert link.counts == ["failed"] and link.dones() == [(3, Status.INVALID_ARGUMENT)]
        assert len(link.writes) == 1

    run(scenario())


def test_a_computation_that_raises_fails_its_round_and_the_connection_goes_on():
    async def scenario() -> None:
        rounds, link = rounds_of()
        round_ = opened(rounds, 4)

        async def fails() -> None:
            await asyncio.sleep(0)
            raise ValueError("the input contains NaN or infinity")

        round_.run(fails())
        await asyncio.sleep(0)
        assert link.dones() == [(4, Status.INVALID_ARGUMENT)] and link.counts == ["failed"] and link.ended == 0

    run(scenario())


def test_a_superseded_round_sends_no_done_and_one_whose_thread_computes_counts_until_it_has_stopped():
    async def scenario() -> None:
        rounds, link = rounds_of()
        waiting = opened(rounds, 1)
        waiting.run(sends_a_stage(waiting, asyncio.get_running_loop().create_future()))
        computing = opened(rounds, 2)  # admitting round 2 let round 1 go
        assert waiting.state is State.ENDED and link.counts == ["stopped"] and link.writes == []
        busy = thread(computing)
        computing.run(sends_a_stage(computing, busy))
        rounds.admit(3)
        assert computing.state is State.WAITING and computing.orders.stopped.is_set() and not computing.waited
        assert len(rounds) == 1  # under way until its thread stops: it counts against MAX_ROUNDS
        rounds.open(3).stop()
        busy.set_result(None)
        await asyncio.sleep(0)
        assert computing.state is State.ENDED and link.dones() == [(3, Status.OK)]  # none for rounds 1 and 2
        assert link.counts == ["stopped", "stopped", "stopped"]

    run(scenario())


def test_more_than_max_rounds_under_way_is_too_many():
    async def scenario() -> None:
        rounds, _link = rounds_of()
        threads = []
        for round_id in range(1, MAX_ROUNDS + 1):
            round_ = opened(rounds, round_id)
            threads.append(thread(round_))
            round_.run(sends_a_stage(round_, threads[-1]))
        with pytest.raises(TooLarge, match=f"more than {MAX_ROUNDS} rounds"):
            rounds.admit(MAX_ROUNDS + 1)
        for busy in threads:
            busy.set_result(None)
        await asyncio.sleep(0)
        assert len(rounds) == 0
        opened(rounds, MAX_ROUNDS + 1)  # room again

    run(scenario())


def test_a_round_ended_while_closing_ends_the_connection_once():
    async def scenario() -> None:
        rounds, link = rounds_of()
        computing = opened(rounds, 1)
        busy = thread(computing)
        computing.run(sends_a_stage(computing, busy))
        rounds.close()  # the round is told to stop: the connection waits for its thread
        assert rounds.closing and computing.orders.stopped.is_set() and link.ended == 0
        with pytest.raises(TensorError, match="a ROUND after CLOSE"):
            rounds.admit(2)
        busy.set_result(None)
        await asyncio.sleep(0)
        assert link.dones() == [(1, Status.OK)] and link.ended == 1
        # rounds that end at once (a delay, an idle streamed round): the last one ends it
        rounds, link = rounds_of()
        waiting = opened(rounds, 1)
        waiting.run(sends_a_stage(waiting, asyncio.get_running_loop().create_future()))
        rounds.close()
        assert link.dones() == [(1, Status.OK)] and link.ended == 1
        rounds, link = rounds_of()
        rounds.close()  # none under way: at once
        assert link.ended == 1 and link.writes == []

    run(scenario())


def test_a_lost_connection_cancels_every_round_without_a_done_and_their_computations_unwind():
    async def scenario() -> None:
        rounds, link = rounds_of()
        unwound = []

        async def computation(r: Round, wait: asyncio.Future) -> None:
            try:
                await wait
            finally:
                unwound.append(r.id)

        waiting = opened(rounds, 1)
        waiting.run(computation(waiting, asyncio.get_running_loop().create_future()))
        computing = opened(rounds, 2)  # lets round 1 go
        busy = thread(computing)
        computing.run(computation(computing, busy))
        rounds.lost()
        assert computing.state is State.ENDED and computing.orders.cancel.is_set() and busy.cancelled()
        assert unwound == [1, 2] and link.writes == []
        assert link.counts == ["stopped", "cancelled"] and len(rounds) == 0

    run(scenario())


def test_a_round_needs_a_new_nonzero_id():
    async def scenario() -> None:
        rounds, _link = rounds_of()
        with pytest.raises(TensorError, match="nonzero round id"):
            rounds.admit(0)
        round_ = opened(rounds, 4)
        round_.run(sends_a_stage(round_, thread(round_)))
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
        later.run(sends_a_stage(later, asyncio.get_running_loop().create_future()))
        assert later.state is State.WAITING and not later.orders.stopped.is_set()
        assert link.dones() == [(8, Status.OK)]
        rounds.lost()

    run(scenario())
