"""Crashes: killed workers are erasures, too many pause the job, a killed master resumes it."""

from __future__ import annotations

import itertools
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from coded.client.reports import JobEvent, JobState

from .conftest import follow_until, make_spec, wait_until

pytestmark = pytest.mark.integration

# Every call takes at least 50 ms, so a job of 40 iterations runs for a few seconds.
PACED = {"stragglers": {"model": "shifted_exponential", "shift": 0.05, "mean": 0.01}}


def test_killing_s_workers_does_not_stop_the_job(cluster):
    # unchecked: checking needs one reply more than decoding, so a checked job tolerates s - 1 dead
    # workers (test_killing_s_plus_1_pauses... and tests/master/test_verification.py)
    local = cluster(6)
    with local.client() as client:
        job = client.submit(make_spec(iterations=40, faults=PACED, verify="off"))
        follow_until(client, job.id, lambda e: e.job.iteration >= 5)
        local.kill_worker(2)
        local.kill_worker(5)
        final = client.wait(job.id)
        assert final.state == JobState.SUCCEEDED, final.reason
        assert [r.iteration for r in final.history] == list(range(40))
        assert all(not {2, 5} & set(r.responders) for r in final.history[-10:])


def test_killing_s_plus_1_pauses_and_a_restarted_worker_resumes(cluster):
    """Checked (the default), cyclic n = 6, `stragglers: 2` goes on, checked, without two dead
    workers (its code is built for s = 3) and pauses when a third dies."""
    local = cluster(6)
    with local.client() as client:
        job = client.submit(make_spec(iterations=40, faults=PACED))
        follow_until(client, job.id, lambda e: e.job.iteration >= 5)
        for index in (0, 3):
            local.kill_worker(index)
        killed_at = client.get(job.id).iteration
        going_on = follow_until(client, job.id, lambda e: e.record is not None and e.job.iteration >= killed_at + 5)
        assert going_on.job.state == JobState.RUNNING
        assert not {0, 3} & set(going_on.record.responders)
        local.kill_worker(5)
        paused = follow_until(client, job.id, lambda e: e.job.state == JobState.PAUSED)
        assert "3 workers gone" in paused.job.reason and "check" in paused.job.reason
        stuck_at = paused.job.iteration
        local.start_workers([3])
        resumed = follow_until(client, job.id, lambda e: e.job.state == JobState.RUNNING)
        assert resumed.job.iteration == stuck_at
        final = client.wait(job.id)
        assert final.state == JobState.SUCCEEDED, final.reason
        assert [r.iteration for r in final.history] == list(range(40))


def test_a_paused_job_fails_with_a_reason_after_its_timeout(cluster):
    local = cluster(4)
    with local.client() as client:
        spec = make_spec(workers=4, code={"scheme": "cyclic", "stragglers": 1}, iterations=40, faults=PACED,
                         timeouts={"paused_s": 1.0})
        job = client.submit(spec)
        follow_until(client, job.id, lambda e: e.job.iteration >= 3)
        local.kill_worker(0)
        local.kill_worker(1)
        final = client.wait(job.id)
        assert final.state == JobState.FAILED
        assert "did not return within 1 s" in final.reason
        # the master still serves other jobs once workers are back
        local.start_workers([0, 1])
        local.wait_for_workers(4)
        again = client.wait(client.submit(make_spec(workers=4, code={"scheme": "cyclic", "stragglers": 1},
                                                    iterations=3)).id)
        assert again.state == JobState.SUCCEEDED


def test_pending_until_enough_workers_register(cluster):
    local = cluster(2)
    with local.client() as client:
        job = client.submit(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1}, iterations=5))
        pending = follow_until(client, job.id, lambda e: e.job.state == JobState.PENDING and e.job.reason)
        assert pending.job.reason == ("waiting for 3 workers (2 registered and alive); it fails if they are not "
                                      "there within 600 s (timeouts.pending_s)")
        local.start_workers([2])
        final = client.wait(job.id)
        assert final.state == JobState.SUCCEEDED


def test_a_killed_master_resumes_exactly_and_its_count_never_goes_back(cluster):
    """SIGKILL of the master mid-job: the restarted master resumes from the checkpoint, a client
    watching across the restart never sees the iteration count go down, the history holds every
    iteration once, and the parameters are bit for bit those of an uninterrupted run (the fixed
    slow worker and `stragglers: 1` make every iteration decode and check the same five replies)."""
    local = cluster(6)
    slow = {"stragglers": {"model": "fixed", "workers": [0], "delay": 30.0}}
    spec = make_spec(iterations=400, checkpoint_every=100, faults=slow, code={"scheme": "cyclic", "stragglers": 1},
                     stream={})
    seen: list[int] = []
    reached = threading.Event()

    def follow(event: JobEvent) -> None:
        seen.append(event.job.iteration)
        if event.job.iteration >= 130:  # past the first checkpoint (100)
            reached.set()

    with local.client() as client, local.client() as watching, ThreadPoolExecutor(1) as pool:
        job = client.submit(spec)
        watcher = pool.submit(watching.wait, job.id, follow)  # one watch, across the restart
        assert reached.wait(120), seen
        local.kill_master()
        killed_at = seen[-1]
        local.start_master()
        final = watcher.result(timeout=300)
    assert killed_at < 400  # mid-job (and, almost always, between checkpoints: iterations are replayed)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert all(a <= b for a, b in itertools.pairwise(seen)), seen
    assert [r.iteration for r in final.history] == list(range(400))
    # streamed: every piece once, never from the slow worker (whose 30 s delay outlasts every iteration)
    assert all(0 not in r.responders and sorted(p for used in r.pieces for p in used) == list(range(6))
               for r in final.history)
    with local.client() as client:
        resumed = client.result(job.id)
        reference = client.result(client.wait(client.submit(spec).id).id)
    assert resumed.keys() == reference.keys()
    for name in reference:
        assert np.array_equal(resumed[name], reference[name]), name


def test_on_a_cluster_of_fixed_workers_a_job_that_needs_a_gone_one_is_refused_at_once(cluster):
    """`coded local` starts its master with --fixed-workers: once a worker is gone, a job that
    needs more workers than are alive is refused at submission, naming why, instead of waiting
    timeouts.pending_s (600 s) for a worker that will never come; smaller jobs still run."""
    local = cluster(3, master_args=["--fixed-workers", "3"])
    with local.client() as client:
        local.kill_worker(2)
        assert wait_until(lambda: sum(w.alive for w in client.workers()) == 2, timeout=60)
        with pytest.raises(grpc.RpcError) as refused:
            client.submit(make_spec(workers=3, code={"scheme": "uncoded"}, iterations=3))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert re.search(r"needs 3 workers and only 2 of this cluster's 3 can take it \(1 gone\).*none will come",
                         refused.value.details()), refused.value.details()
        job = client.wait(client.submit(make_spec(workers=2, code={"scheme": "uncoded"}, iterations=3)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
