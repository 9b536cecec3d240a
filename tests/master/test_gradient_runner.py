"""The gradient runner in-process, against real worker services: exact under stragglers and
erasures, paused and resumed, and the asynchronous schemes."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import yaml

from coded.jobs.spec import JobSpecError
from coded.master.runner import RECORDS_TOGETHER, JobRunner

from .inprocess import Cluster

T = TypeVar("T")

SPEC: dict[str, Any] = {
    "kind": "gradient_coding", "workers": 6, "code": {"scheme": "cyclic", "stragglers": 2},
    "model": {"type": "logistic", "l2": 0.001},
    "data": {"type": "gaussian_mixture", "samples": 3000, "features": 12, "classes": 2, "seed": 3},
    "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 20, "eval_every": 0, "seed": 11,
}
SLOW = {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 60.0}}  # only a stop ends them in time
# s slow or gone workers leave exactly a decodable set: nothing to check replies with (test_verify.py
# has the checked runs)
OFF = "off"


def spec(**changes: Any) -> str:
    out = copy.deepcopy(SPEC)
    out.update(changes)
    return yaml.safe_dump(out)


def with_cluster(workers: int, tmp_path: Path, body: Callable[[Cluster], Awaitable[T]]) -> T:
    async def main() -> T:
        cluster = await Cluster(workers, tmp_path).start()
        try:
            return await body(cluster)
        finally:
            await cluster.close()

    return asyncio.run(main())


def with_live_cluster(tmp_path: Path, body: Callable[[Cluster], Awaitable[None]]) -> None:
    """Run ``body`` on 6 workers that heartbeat (liveness 0.5 s: lapses are seen within a second),
    within 60 s."""
    async def main() -> None:
        cluster = await Cluster(6, tmp_path, liveness=0.5).start()
        try:
            await asyncio.wait_for(body(cluster), 60)
        finally:
            await cluster.close()

    asyncio.run(main())


async def final_params(cluster: Cluster, text: str) -> np.ndarray:
    job = await cluster.run(text)
    assert job.state == "SUCCEEDED", job.stored.reason
    arrays = cluster.service.result(job.id)
    return np.concatenate([arrays[k].ravel() for k in sorted(arrays)])


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_coded_runs_equal_uncoded_and_the_slow_workers_are_stopped(tmp_path):
    async def body(cluster: Cluster) -> None:
        reference = await final_params(cluster, spec(code={"scheme": "uncoded"}))
        for code in ({"scheme": "cyclic", "stragglers": 2}, {"scheme": "frc", "stragglers": 2},
                     {"scheme": "ye_abbe", "stragglers": 2, "m": 2}):
            job = await cluster.run(spec(code=code, faults=SLOW, verify=OFF))
            assert job.state == "SUCCEEDED", job.stored.reason
            arrays = cluster.service.result(job.id)
            assert relative(np.concatenate([arrays[k].ravel() for k in sorted(arrays)]), reference) <= 1e-8, code
            history = cluster.service.history(job)
            assert [r.iteration for r in history] == list(range(20))
            assert all(not {1, 4} & set(r.responders) for r in history), code
            for position in (1, 4):  # never completed: cut off every iteration it was called
                slow = cluster.worker(position, job)
                assert not [c for c in slow.completed if c[0] == job.id]
                stopped = len([c for c in slow.stopped if c[0] == job.id])
                if job.spec.streamed:  # late again and again, it rests 1, 2, 4, 8 iterations between calls
                    assert 1 <= stopped <= 5, (code, stopped)
                else:  # whole replies: called every iteration
                    assert stopped >= 19, (code, stopped)

    with_cluster(6, tmp_path, body)


def test_killed_workers_are_erasures_and_one_too_many_pauses_until_one_returns(tmp_path):
    async def body(cluster: Cluster) -> None:
        reference = await final_params(cluster, spec(code={"scheme": "uncoded"}, iterations=300))
        job = await cluster.service.submit(spec(iterations=300, verify=OFF), {})
        killed: list[int] = []
        paused = False
        async for event in cluster.service.watch(job.id):
            if event.job.state == "RUNNING" and event.job.iteration >= 5 and not killed:
                killed += [0, 1]  # s of them: only erasures
                for position in killed:
                    cluster.worker(position, job).kill()
            elif event.job.iteration >= 50 and len(killed) == 2:
                killed.append(2)  # s + 1: not decodable until one returns
                cluster.worker(2, job).kill()
            elif event.job.state == "PAUSED":
                assert "3 workers gone" in event.job.reason
                paused = True
                revived = cluster.worker(1, job)
                revived.alive = True
                await cluster.registry.heartbeat(job.stored.workers[1], 0)
        assert job.state == "SUCCEEDED", job.stored.reason
        assert paused and len(killed) == 3 and cluster.worker(2, job).alive is False
        history = cluster.service.history(job)
        assert [r.iteration for r in history] == list(range(300))
        assert all(not {0, 2} & set(r.responders) for r in history[60:])
        arrays = cluster.service.result(job.id)
        assert relative(np.concatenate([arrays[k].ravel() for k in sorted(arrays)]), reference) <= 1e-8

    with_cluster(6, tmp_path, body)


@pytest.mark.parametrize("stream", ["on", "off"])
def test_a_worker_cut_off_the_network_fails_its_calls_once_its_heartbeats_lapse(tmp_path, stream):
    # A host taken off the network sends no reset: its calls neither reply nor fail. With s
    # workers killed first, the round cannot do without the cut one, so it must end its call once
    # it has missed its heartbeats (the job pauses: too few left) rather than wait for the call's
    # deadline, set here far beyond the test's own limit; back on the network, it resumes the job.
    async def body(cluster: Cluster) -> None:
        reference = await final_params(cluster, spec(code={"scheme": "uncoded"}, iterations=40))
        streamed = {} if stream == "on" else {"stream": "off"}
        job = await cluster.service.submit(spec(iterations=40, verify=OFF, timeouts={"call_s": 1e6}, **streamed), {})
        cut, paused = None, False
        async for event in cluster.service.watch(job.id):
            if event.job.state == "RUNNING" and event.job.iteration >= 5 and cut is None:
                cluster.worker(0, job).kill()
                cluster.worker(1, job).kill()
                cut = cluster.worker(2, job)
                cut.cut()
            elif event.job.state == "PAUSED" and cut is not None and cut.cut_off:
                assert "3 workers gone" in event.job.reason
                paused = True
                cut.cut_off = False  # back on the network: it heartbeats again
        assert job.state == "SUCCEEDED", job.stored.reason
        assert paused
        arrays = cluster.service.result(job.id)
        assert relative(np.concatenate([arrays[k].ravel() for k in sorted(arrays)]), reference) <= 1e-8
        assert [r.iteration for r in cluster.service.history(job)] == list(range(40))
        assert cluster.metrics.responses.labels(job.id, job.stored.workers[2], "failed").value >= 1

    with_live_cluster(tmp_path, body)


def test_an_uncoded_job_paused_by_a_dead_worker_says_it_needs_every_worker(tmp_path):
    """Issue 52: its reason read "more than -1 are gone"."""
    async def body(cluster: Cluster) -> None:
        job = await cluster.service.submit(spec(code={"scheme": "uncoded"}, iterations=10_000), {})
        async for event in cluster.service.watch(job.id):
            if event.job.state == "RUNNING" and event.job.iteration >= 3 and cluster.worker(4, job).alive:
                cluster.worker(4, job).kill()
            elif event.job.state == "PAUSED":
                assert event.job.reason == (f"1 worker gone ({job.stored.workers[4]}); its code (uncoded) needs "
                                            "every one of its 6 workers"), event.job.reason
                await cluster.service.cancel(job.id)

    with_live_cluster(tmp_path, body)


@pytest.mark.parametrize("scheme", ["uncoded", "cyclic"])
def test_a_worker_that_heartbeats_but_cannot_serve_rounds_is_left_out_or_fails_the_job(tmp_path, scheme):
    """Issue 52: each failed round marked it down, its next heartbeat brought it back, and a job that
    could not do without it stayed PAUSED for ever. Now it is unusable after UNUSABLE_AFTER failures
    in a row: a code that can leave it out goes on without it; one that cannot fails within
    timeouts.paused_s, saying why."""
    from coded.master.registry import UNUSABLE_AFTER

    async def body(cluster: Cluster) -> None:
        code = {"scheme": "uncoded"} if scheme == "uncoded" else {"scheme": "cyclic", "stragglers": 1}
        broken = "worker-3"  # the job takes all six
        cluster.workers[broken].unserving = True
        job = await cluster.service.submit(spec(code=code, iterations=1_000_000, verify=OFF,
                                                timeouts={"paused_s": 2}), {})
        since = None
        async for event in cluster.service.watch(job.id):
            if since is None and broken in cluster.registry.unusable():
                since = event.job.iteration  # from here on, no round calls it
            if since is not None and event.job.iteration >= since + 50:
                await cluster.service.cancel(job.id)
        unusable = cluster.registry.unusable()
        assert set(unusable) == {broken} and f"{UNUSABLE_AFTER} calls in a row failed" in unusable[broken]
        assert "connection refused" in unusable[broken]
        info = {w.name: w for w in cluster.registry.info()}
        assert info[broken].unusable == unusable[broken] and not info[broken].alive
        if scheme == "uncoded":
            assert job.state == "FAILED"
            assert job.stored.reason.startswith(f"workers {broken} did not return within 2 s; {broken} is unusable: "
                                                "its heartbeats arrive but"), job.stored.reason
        else:
            assert job.state == "CANCELLED", job.stored.reason
            position = job.stored.workers.index(broken)
            later = [r for r in cluster.service.history(job) if r.iteration > since + 1]
            assert len(later) >= 40 and all(position not in r.responders for r in later)
        await cluster.registry.register(broken, cluster.workers[broken].address)  # restarted: tried again
        assert cluster.registry.unusable() == {} and cluster.registry.alive(broken)

    with_live_cluster(tmp_path, body)


def test_kasync_with_k_equal_n_is_uncoded_and_lwpd_learns(tmp_path):
    async def body(cluster: Cluster) -> None:
        reference = await final_params(cluster, spec(code={"scheme": "uncoded"}))
        kasync = await final_params(cluster, spec(code={"scheme": "kasync", "stragglers": 0}))
        assert relative(kasync, reference) <= 1e-10
        job = await cluster.run(spec(workers=8, code={"scheme": "lwpd", "t": 2},
                                     optimizer={"type": "sgd", "lr": 0.5}))
        assert job.state == "SUCCEEDED", job.stored.reason
        losses = [r.loss for r in cluster.service.history(job)]
        assert len(losses) == 20 and losses[-1] < 0.8 * losses[0]

    with_cluster(8, tmp_path, body)


def test_a_finished_job_leaves_no_runner_behind_for_the_garbage_collector(tmp_path):
    # A runner held only by reference cycles (a round's callbacks) lives on, with the job's data,
    # until a full collection, which a busy master runs rarely: 20 jobs of 240 MB grew a master
    # by a dataset per job. Every job kind here must be freed by reference counting alone.
    async def body(cluster: Cluster) -> None:
        slow = {"stragglers": {"model": "fixed", "workers": [1], "delay": 60.0}}
        for changes in ({}, {"verify": "strict", "faults": slow}, {"stream": "off", "faults": slow},
                        {"code": {"scheme": "uncoded"}}):
            job = await cluster.run(spec(**changes))
            assert job.state == "SUCCEEDED", job.stored.reason
            await asyncio.sleep(0)  # the job's task has returned: nothing of it is running
            left = [o for o in gc.get_objects() if isinstance(o, JobRunner)]
            assert not left, (changes, left)

    gc.collect()
    gc.disable()
    try:
        with_cluster(6, tmp_path, body)
    finally:
        gc.enable()


@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_records_of_fast_iterations_are_kept_together_in_order_and_none_is_lost(tmp_path, monkeypatch, every):
    """RECORDS_EVERY_S 0: each record is kept on its own; an hour: the first at once, then
    RECORDS_TOGETHER at a time, and the rest at the job's end. Each transaction's job row says
    the iteration its last record finished, and watchers get every record once, in order."""
    monkeypatch.setattr("coded.master.runner.RECORDS_EVERY_S", every)
    commits: list[tuple[list[int], int]] = []

    async def body(cluster: Cluster) -> None:
        store = cluster.service.store
        commit = store.commit

        def counted(job: Any, records: Any) -> None:
            commits.append(([r.iteration for r in records], job.iteration))
            commit(job, records)

        store.commit = counted  # type: ignore[method-assign]
        job = await cluster.service.submit(spec(iterations=150, checkpoint_every=1000, verify=OFF), {})
        published = [e.record.iteration async for e in cluster.service.watch(job.id) if e.record is not None]
        assert job.state == "SUCCEEDED", job.stored.reason
        assert published == list(range(150))
        assert [r.iteration for r in cluster.service.history(job)] == list(range(150))

    with_cluster(6, tmp_path, body)
    assert [i for kept, _ in commits for i in kept] == list(range(150))
    assert all(row == kept[-1] + 1 for kept, row in commits)
    if every:  # the first at once (nothing was written for RECORDS_EVERY_S), then full transactions
        assert [len(kept) for kept, _ in commits] == [1] + [RECORDS_TOGETHER] * (149 // RECORDS_TOGETHER) + [
            149 % RECORDS_TOGETHER]
    else:
        assert [len(kept) for kept, _ in commits] == [1] * 150


def test_every_watch_ends_with_the_terminal_event(tmp_path):
    async def body(cluster: Cluster) -> None:
        job = await cluster.service.submit(spec(iterations=5), {})
        states = [event.job.state async for event in cluster.service.watch(job.id)]
        assert states[-1] == "SUCCEEDED" and "RUNNING" in states
        assert [e.job.state async for e in cluster.service.watch(job.id)] == ["SUCCEEDED"]  # after the end

    with_cluster(6, tmp_path, body)


def test_mini_batches_drawn_per_partition_keep_every_code_exact(tmp_path):
    optimizer = {"type": "sgd", "lr": 0.5, "momentum": 0.9, "weight_decay": 1e-4, "batch": 32,
                 "schedule": {"type": "cosine", "warmup": 3}}

    async def body(cluster: Cluster) -> None:
        reference = await final_params(cluster, spec(code={"scheme": "uncoded"}, optimizer=optimizer, iterations=40))
        full = await final_params(cluster, spec(code={"scheme": "uncoded"}, iterations=40,
                                                optimizer={k: v for k, v in optimizer.items() if k != "batch"}))
        assert relative(reference, full) > 1e-3  # the batches are not the full gradient
        for code in ({"scheme": "cyclic", "stragglers": 2}, {"scheme": "frc", "stragglers": 2}):
            job = await cluster.run(spec(code=code, optimizer=optimizer, faults=SLOW, iterations=40, verify=OFF))
            assert job.state == "SUCCEEDED", job.stored.reason
            arrays = cluster.service.result(job.id)
            assert relative(np.concatenate([arrays[k].ravel() for k in sorted(arrays)]), reference) <= 1e-8, code
            assert all(not {1, 4} & set(r.responders) for r in cluster.service.history(job))
        with pytest.raises(JobSpecError, match=r"^optimizer\.batch: 10000 is more than the 400 training samples"):
            await cluster.run(spec(optimizer={**optimizer, "batch": 10_000}))

    with_cluster(6, tmp_path, body)


def test_a_worker_that_sends_another_dtype_than_the_jobs_wire_fails_its_calls(tmp_path, monkeypatch):
    from . import inprocess

    replies = inprocess.InProcessCall.replies

    async def widened(self):  # worker-1 sends float64 whatever the job says
        async for reply in replies(self):
            if self._worker.address == "inproc-1":
                reply = dataclasses.replace(reply, message=reply.message.astype(np.float64))
            yield reply

    monkeypatch.setattr(inprocess.InProcessCall, "replies", widened)

    async def body(cluster: Cluster) -> None:
        reference = await final_params(cluster, spec(code={"scheme": "uncoded"}))
        for stream in ("off", {}):
            job = await cluster.run(spec(wire="float32", verify=OFF, stream=stream))
            assert job.state == "SUCCEEDED", job.stored.reason
            position = next(p for p in range(6) if cluster.worker(p, job).address == "inproc-1")
            history = cluster.service.history(job)
            assert all(position not in r.responders for r in history), stream
            arrays = cluster.service.result(job.id)
            got = np.concatenate([arrays[k].ravel() for k in sorted(arrays)])
            assert 0 < relative(got, reference) <= 1e-4, stream  # float32 rounding, not float64's exactness

    with_cluster(6, tmp_path, body)
