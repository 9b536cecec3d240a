"""Streamed replies in-process, against real worker services: exact under late, slow, dead and
lying workers, against the uncoded run (the plain sum of every partition's gradient); what the
sampled and strict checks catch, and when."""

from __future__ import annotations

import asyncio
import collections
import copy
import gc
import weakref
from typing import Any

import pytest
import yaml

from coded.codes.sampled import confirmations
from coded.codes.streaming import STREAMED_SCHEMES
from coded.master.steering import Steering
from coded.master.streamed_round import StreamedRound
from coded.master.streamed_runner import StreamedRunner
from coded.worker.service import Stopped

from .inprocess import Cluster
from .test_verification import params, relative, run

SPEC: dict[str, Any] = {
    "kind": "gradient_coding", "workers": 6, "code": {"scheme": "cyclic", "stragglers": 2},
    "model": {"type": "logistic", "l2": 0.001},
    "data": {"type": "gaussian_mixture", "samples": 3000, "features": 12, "classes": 2, "seed": 3},
    "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 16, "eval_every": 0, "seed": 11,
}


def spec(**changes: Any) -> str:
    """SPEC changed; streamed where the code streams (said: the master would choose by its machine)."""
    out = copy.deepcopy(SPEC)
    out.update(changes)
    if out["code"]["scheme"] in STREAMED_SCHEMES:
        out.setdefault("stream", {})
    return yaml.safe_dump(out)


LATE = {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 60.0}}  # only a stop ends them in time
SLOW = {"slowdown": {"model": "fixed", "workers": [2], "factor": 2.4}}


@pytest.mark.parametrize(("workers", "code", "faults", "chunks"), [
    (6, {"scheme": "cyclic", "stragglers": 2}, LATE, 1),
    (6, {"scheme": "cyclic", "stragglers": 2}, SLOW, 1),
    (6, {"scheme": "cyclic", "stragglers": 2}, SLOW, 4),
    (6, {"scheme": "frc", "stragglers": 1}, SLOW, 4),
    (16, {"scheme": "cyclic", "stragglers": 3}, {"slowdown": {"model": "uniform", "low": 1.0, "high": 3.0}}, 2),
    (16, {"scheme": "frc", "stragglers": 2}, {"stragglers": {"model": "fixed", "workers": [0, 5], "delay": 60.0}}, 1),
])
def test_streamed_runs_end_where_uncoded_does(tmp_path, workers, code, faults, chunks):
    """Late workers send nothing in time, slow ones part of their pieces: every iteration sums one
    copy of every piece, so the run ends at the uncoded run's parameters."""
    async def body(cluster: Cluster) -> None:
        base = {"workers": workers, "iterations": 8}
        clean = await cluster.run(spec(**base, code={"scheme": "uncoded"}))
        job = await cluster.run(spec(**base, code=code, faults=faults, stream={"chunks": chunks}))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        history = cluster.service.history(job)
        for record in history:  # every piece once, from workers that hold it
            pieces = sorted(p for used in record.pieces.values() for p in used)
            assert pieces == list(range(workers * chunks))
            assert sorted(record.pieces) == record.responders
        late = set(faults.get("stragglers", {}).get("workers", []))
        assert not any(late & set(record.responders) for record in history)

    run(tmp_path, workers, body)


def test_a_killed_worker_is_an_erasure(tmp_path):
    async def body(cluster: Cluster) -> None:
        clean = await cluster.run(spec(code={"scheme": "uncoded"}, iterations=40))
        job = await cluster.service.submit(spec(iterations=40), {})
        while job.stored.iteration < 5:  # the job is under way
            await asyncio.sleep(0.01)
        cluster.worker(0, job).kill()
        assert job.task is not None
        await asyncio.wait_for(asyncio.shield(job.task), 120)
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        history = cluster.service.history(job)
        assert all(0 not in r.responders for r in history[-10:])

    run(tmp_path, 6, body)


def calls(cluster: Cluster, job: Any, position: int) -> list[int]:
    """The iterations in which a worker was called (each of its calls there was stopped)."""
    worker = cluster.worker(position, job)
    return sorted({i for j, i in worker.stopped + worker.completed if j == job.id})


def test_a_late_worker_rests_ever_longer_and_is_called_again_once_it_is_back(tmp_path):
    """Worker 1 sleeps through iterations 0-9 (a trace), then is prompt. Late again and again, it
    rests 1, 2, 4, ... iterations between calls, so it is called in only a few of the ten; once
    called after its delays end, it sends its pieces and is used from then on."""
    async def body(cluster: Cluster) -> None:
        clean = await cluster.run(spec(code={"scheme": "uncoded"}, iterations=30))
        trace = "".join(f"{i},1,60\n" for i in range(10)).encode()
        job = await cluster.run(spec(iterations=30, verify="off",
                                     faults={"stragglers": {"model": "trace", "path": "late.csv"}}),
                                {"late.csv": trace})
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        early = [i for i in calls(cluster, job, 1) if i < 10]
        assert early[0] == 0 and len(early) <= 4, early  # called at 0, 2, 5: rests of 1, 2 and 4
        history = cluster.service.history(job)
        back = [r.iteration for r in history if 1 in r.responders]
        assert back and 10 <= back[0] <= 10 + 4, back  # the first call after its rest of 4
        assert back == list(range(back[0], 30))  # and every iteration after it

    run(tmp_path, 6, body)


LIAR = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 1.0, "workers": [3]}}


def located(cluster: Cluster, job: Any) -> list[int]:
    return [r.iteration for r in cluster.service.history(job) if 3 in r.located]


def test_sampled_checking_locates_a_liar_at_a_drawn_piece_and_quarantines_it(tmp_path):
    """Worker 3 lies in every piece from iteration 2 on (iterations 0 and 1 are clean: the first
    confirms every piece). Each piece is drawn for a second copy with probability 0.5: the liar
    is located at an iteration that drew a piece of its (or on a spare copy), checked fully from
    then on, and quarantined when located more than twice in 10 iterations."""
    liar = {"soft_errors": {**LIAR["soft_errors"], "start": 2}}

    async def body(cluster: Cluster) -> None:
        job = await cluster.run(spec(workers=8, iterations=20, faults=liar, verify={"sample": 0.5}))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert job.stored.checks["verification"]["mode"] == "sampled"
        found = located(cluster, job)
        first = found[0]
        history = cluster.service.history(job)
        assert first >= 2 and all(r.checked for r in history[first:first + 3])
        assert found == [first, first + 1, first + 2]  # a suspect has every piece checked
        assert history[first + 2].quarantined == [3]
        assert all(3 not in r.responders for r in history[first:])
        # every piece of the liar used before was wrong and so was not drawn (seed 11: SPEC's)
        assert not any(confirmations(11, t, 8, 0.5) & set(history[t].pieces.get(3, ())) for t in range(2, first))

    run(tmp_path, 8, body)


def test_strict_checking_never_applies_a_wrong_piece_and_ends_where_the_clean_run_does(tmp_path):
    async def body(cluster: Cluster) -> None:
        clean = await cluster.run(spec())
        job = await cluster.run(spec(faults=LIAR, verify="strict"))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        history = cluster.service.history(job)
        assert all(r.checked for r in history)
        assert [r.iteration for r in history if r.quarantined] == [2]  # located at 0, 1, 2
        assert all(3 not in r.responders for r in history)

    run(tmp_path, 6, body)


def test_wildly_out_of_scale_pieces_are_caught_every_iteration_by_the_default_check(tmp_path):
    huge = {"soft_errors": {"probability": 0.5, "model": "gaussian", "scale": 1e9, "workers": [3]}}

    async def body(cluster: Cluster) -> None:
        clean = await cluster.run(spec())
        job = await cluster.run(spec(faults=huge, verify={"quarantine": "off"}))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        assert located(cluster, job)  # and they were there to be caught

    run(tmp_path, 6, body)


def test_a_streamed_round_once_ended_is_freed_by_reference_counting(tmp_path, monkeypatch):
    """A round kept alive by a cycle (its listener, its backup timer) would keep the job's runner
    and data until a full collection, which a busy master runs rarely. With the collector off,
    every round object is gone as soon as the runner's round returns, backup timers included."""
    made: list[weakref.ref[StreamedRound]] = []
    left: list[int] = []  # per runner round: how many of its round objects were still alive
    backups: list[float] = []
    init, run_round, next_backup = StreamedRound.__init__, StreamedRunner._round, Steering.next_backup

    def recording_init(self: StreamedRound, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    async def checked_round(self: StreamedRunner, positions: list[int]) -> Any:
        outcome = await run_round(self, positions)
        left.append(sum(r() is not None for r in made))
        made.clear()
        return outcome

    def recording_backup(self: Steering) -> float | None:
        wait = next_backup(self)
        if wait is not None:
            backups.append(wait)
        return wait

    monkeypatch.setattr(StreamedRound, "__init__", recording_init)
    monkeypatch.setattr(StreamedRunner, "_round", checked_round)
    monkeypatch.setattr(Steering, "next_backup", recording_backup)

    async def body(cluster: Cluster) -> None:
        job = await cluster.run(spec(iterations=12, faults=SLOW, stream={"chunks": 4}))
        assert job.state == "SUCCEEDED", job.stored.reason

    gc.collect()
    gc.disable()
    try:
        run(tmp_path, 6, body)
    finally:
        gc.enable()
    assert len(left) >= 12 and backups  # every iteration's round, and some set a backup timer
    assert not any(left), left


def test_a_stalled_workers_first_piece_is_used_and_counted_as_a_stopped_ones(tmp_path):
    """Worker 2 sends the first piece of its own partition, then computes nothing more until the
    master stops it; the others start each round only once that piece is in. Its partition's
    other pieces are finished by the others, its piece is used, and every round it was called in
    counts it among ``stopped_pieces``: a partial straggler's work, by construction rather than
    by relative speed."""
    async def body(cluster: Cluster) -> None:
        clean = await cluster.run(spec(code={"scheme": "uncoded"}, iterations=8))
        stalled = cluster.workers["worker-2"]
        first_sent: dict[tuple[str, int], asyncio.Event] = collections.defaultdict(asyncio.Event)
        compute = stalled.service.compute

        async def first_then_stall(job_id: str, iteration: int, params: Any, orders: Any) -> Any:
            stages = compute(job_id, iteration, params, orders)
            yield await anext(stages)  # the master has it once this generator resumes
            first_sent[(job_id, iteration)].set()
            await stages.aclose()
            await orders.stopped.wait()
            raise Stopped("stopped while stalled")

        async def after_its_first_piece(job_id: str, iteration: int) -> None:
            if (job_id, iteration) in stalled.rounds:  # it is called in this round
                await first_sent[(job_id, iteration)].wait()

        stalled.service.compute = first_then_stall
        for worker in cluster.workers.values():
            if worker is not stalled:
                worker.hold = after_its_first_piece
        job = await cluster.run(spec(iterations=8, verify="off", stream={"chunks": 4}))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        called = {i for j, i in stalled.stopped if j == job.id}
        assert called and not [i for j, i in stalled.completed if j == job.id]
        history = cluster.service.history(job)
        assert all(r.stopped_pieces >= 1 for r in history if r.iteration in called), \
            [(r.iteration, r.stopped_pieces) for r in history]

    run(tmp_path, 6, body)
