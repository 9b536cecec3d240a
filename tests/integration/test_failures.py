"""Crashes: killed workers are erasures, too many pause the job, a killed master resumes it."""

from __future__ import annotations

import numpy as np
import pytest

from coded.v1 import master_pb2

from .conftest import follow_until, make_spec

pytestmark = pytest.mark.integration

# Every call takes at least 50 ms, so a job of 40 iterations runs for a few seconds.
PACED = {"stragglers": {"model": "shifted_exponential", "shift": 0.05, "mean": 0.01}}


def test_killing_s_workers_does_not_stop_the_job(cluster):
    local = cluster(6)
    with local.client() as client:
        job = client.submit(make_spec(iterations=40, faults=PACED))
        follow_until(client, job.id, lambda e: e.job.iteration >= 5)
        local.kill_worker(2)
        local.kill_worker(5)
        final = client.wait(job.id)
        assert final.state == master_pb2.SUCCEEDED, final.reason
        assert [r.iteration for r in final.history] == list(range(40))
        assert all(not {2, 5} & set(r.responders) for r in final.history[-10:])


def test_killing_s_plus_1_pauses_and_a_restarted_worker_resumes(cluster):
    local = cluster(6)
    with local.client() as client:
        job = client.submit(make_spec(iterations=40, faults=PACED))
        follow_until(client, job.id, lambda e: e.job.iteration >= 5)
        for index in (0, 1, 3):
            local.kill_worker(index)
        paused = follow_until(client, job.id, lambda e: e.job.state == master_pb2.PAUSED)
        assert "3 workers gone" in paused.job.reason
        stuck_at = paused.job.iteration
        local.start_workers([1])
        resumed = follow_until(client, job.id, lambda e: e.job.state == master_pb2.RUNNING)
        assert resumed.job.iteration == stuck_at
        final = client.wait(job.id)
        assert final.state == master_pb2.SUCCEEDED, final.reason
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
        assert final.state == master_pb2.FAILED
        assert "did not return within 1 s" in final.reason
        # the master still serves other jobs once workers are back
        local.start_workers([0, 1])
        local.wait_for_workers(4)
        again = client.wait(client.submit(make_spec(workers=4, code={"scheme": "cyclic", "stragglers": 1},
                                                    iterations=3)).id)
        assert again.state == master_pb2.SUCCEEDED


def test_pending_until_enough_workers_register(cluster):
    local = cluster(2)
    with local.client() as client:
        job = client.submit(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1}, iterations=5))
        pending = follow_until(client, job.id, lambda e: e.job.state == master_pb2.PENDING and e.job.reason)
        assert pending.job.reason == "waiting for 3 workers"
        local.start_workers([2])
        final = client.wait(job.id)
        assert final.state == master_pb2.SUCCEEDED


def test_a_killed_master_resumes_its_running_job_from_the_checkpoint(cluster):
    local = cluster(6)
    spec = make_spec(iterations=40, checkpoint_every=5, faults=PACED)
    with local.client() as client:
        job = client.submit(spec)
        follow_until(client, job.id, lambda e: e.job.iteration >= 12)
        local.kill_master()
    local.start_master()
    with local.client() as client:
        final = client.wait(job.id)
        assert final.state == master_pb2.SUCCEEDED, final.reason
        assert [r.iteration for r in final.history] == list(range(40))
        resumed = client.result(job.id)
        # the same job, uninterrupted, ends at the same parameters (the code is exact)
        again = client.wait(client.submit(spec).id)
        reference = client.result(again.id)
    for name in reference:
        np.testing.assert_allclose(resumed[name], reference[name], rtol=1e-8, atol=1e-12)
