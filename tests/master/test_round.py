"""A round's replies while its decode awaits: what the decode used, and what counts as more.

The runner's calls are replaced by ones the test drives, so replies can arrive at exactly the
moment that matters: between a decode's start and its end.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest

from coded.master import calls
from coded.master.calls import CallEnded, Event, Round, StageArrived
from coded.master.links import StageReply, WorkerUnreachable


class DrivenCall:
    stopped = idle = False

    def stop(self, idle: bool = False) -> None:
        self.stopped = True
        self.idle = idle


class DrivenRunner:
    """What Round needs of a runner: start calls, count each reply's fate."""

    def __init__(self) -> None:
        self.events: dict[int, Callable[[Event], None]] = {}
        self.calls: dict[int, DrivenCall] = {}
        self.fates: Counter[tuple[int, str]] = Counter()
        self.seconds: dict[int, float | None] = {}

    def call(self, position: int, iteration: int, params: object, events: Callable[[Event], None]) -> DrivenCall:
        self.events[position], self.calls[position] = events, DrivenCall()
        return self.calls[position]

    def count(self, position: int, outcome: str, seconds: float | None) -> None:
        self.fates[position, outcome] += 1
        self.seconds[position] = seconds

    def stage(self, position: int, at: float = 0.0) -> None:
        """Worker ``position`` sends its one stage, received at ``at`` (its DONE has not arrived yet)."""
        call = self.calls[position]
        self.events[position](StageArrived(position, call, StageReply(0, np.full(3, float(position)), 0.0, 0.0, at)))

    def reply(self, position: int) -> None:
        """Worker ``position`` sends its one stage and ends."""
        self.stage(position)
        self.events[position](CallEnded(position, self.calls[position]))

    def fail(self, position: int) -> None:
        """Worker ``position``'s call ends in an erasure (its connection broke)."""
        self.events[position](CallEnded(position, self.calls[position], WorkerUnreachable("connection lost")))


def decoding_the_first_two() -> tuple[DrivenRunner, Round]:
    """A round of 4 workers in which workers 0 and 1 have replied."""
    runner = DrivenRunner()
    round_ = Round(runner, 0, [0, 1, 2, 3], params=None)  # type: ignore[arg-type]
    for position in (0, 1):
        runner.reply(position)
    return runner, round_


def test_replies_that_come_while_a_decode_runs_are_more_and_are_not_reported_as_used():
    async def scenario() -> None:
        runner, round_ = decoding_the_first_two()
        taken = round_.take()
        for position in (2, 3):  # the decode of ``taken`` runs in a thread meanwhile: every call ends
            runner.reply(position)
        assert sorted(taken) == [0, 1]  # the decode's replies stay what it decoded
        # the decode found a disagreement: two replies it has not seen are waiting, not "no more"
        assert await asyncio.wait_for(round_.more(), timeout=5)
        assert sorted(round_.take()) == [0, 1, 2, 3]
        assert not await asyncio.wait_for(round_.more(), timeout=5)  # now every call has ended
        round_.close()
        assert runner.fates == Counter({(p, "used"): 1 for p in range(4)})

    asyncio.run(scenario())


def test_a_reply_after_the_last_take_counts_as_a_stragglers_and_running_calls_are_stopped():
    async def scenario() -> None:
        runner, round_ = decoding_the_first_two()
        round_.take()
        runner.reply(2)  # came while the decode of 0 and 1 ran, which then succeeded
        round_.close()
        assert runner.fates == Counter({(0, "used"): 1, (1, "used"): 1, (2, "cancelled"): 1, (3, "cancelled"): 1})
        assert runner.calls[3].stopped and not runner.calls[2].stopped

    asyncio.run(scenario())


def test_a_used_reply_whose_call_has_not_ended_counts_once_as_used():
    """Uncoded waits for every reply: the slowest one's stage is decoded before its DONE arrives.
    Counted once, as used (it was counted as used and as cancelled), and its call is still stopped."""
    async def scenario() -> None:
        runner, round_ = decoding_the_first_two()
        runner.reply(2)
        runner.stage(3)
        assert await asyncio.wait_for(round_.until(lambda replies: len(replies) == 4), timeout=5)
        round_.take()
        round_.close()
        assert runner.fates == Counter({(p, "used"): 1 for p in range(4)})
        assert runner.calls[3].stopped

    asyncio.run(scenario())


def test_each_call_counts_once_when_it_fails_before_or_after_its_reply_was_used():
    async def scenario() -> None:
        runner, round_ = decoding_the_first_two()
        runner.stage(2)
        round_.take()
        runner.fail(2)  # after the decode read its reply: still used, not also failed
        runner.fail(3)  # no reply at all: an erasure
        round_.close()
        assert runner.fates == Counter({(0, "used"): 1, (1, "used"): 1, (2, "used"): 1, (3, "failed"): 1})

    asyncio.run(scenario())


def test_each_worker_is_timed_to_its_end_its_last_stage_or_its_stop(monkeypatch: pytest.MonkeyPatch):
    """A streamed round stops every worker still on call when it decodes: those are timed too,
    by their last stage, and one that sent nothing by the stop (else a straggler, and every
    worker of a streamed round, would be missing from coded_worker_response_seconds)."""
    clock = SimpleNamespace(now=10.0)
    monkeypatch.setattr(calls, "time", SimpleNamespace(perf_counter=lambda: clock.now))

    async def scenario() -> None:
        runner = DrivenRunner()
        round_ = Round(runner, 0, [0, 1, 2, 3, 4], params=None)  # type: ignore[arg-type]
        clock.now = 11.0
        runner.reply(0)  # ended at 11
        runner.stage(1, at=12.0)  # a piece, then kept on call (serving backups) until the stop
        runner.stage(4, at=12.5)
        clock.now = 13.0
        runner.fail(3)  # gone before it sent anything
        runner.fail(4)  # gone after a stage
        clock.now = 15.0
        round_.take()
        round_.close(idle={1})  # stops 1 (idle: without a word to it) and 2 at 15
        assert runner.seconds == {0: 1.0, 1: 2.0, 2: 5.0, 3: None, 4: 2.5}
        assert runner.calls[1].stopped and runner.calls[1].idle
        assert runner.calls[2].stopped and not runner.calls[2].idle
        assert not runner.calls[0].stopped  # it had ended

    asyncio.run(scenario())
