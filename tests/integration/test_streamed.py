"""Streamed replies on a real local cluster: coded jobs end at the uncoded job's parameters with
late workers, with a worker several times slow, and with a worker killed mid-job, for each code
that streams."""

from __future__ import annotations

import numpy as np
import pytest

from coded.client.reports import JobState

from .conftest import follow_until, make_spec
from .test_gradient_jobs import final_params, flat

pytestmark = pytest.mark.integration

LATE = {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 60.0}}
SLOW = {"slowdown": {"model": "fixed", "workers": [2], "factor": 3.0}}
PIECES = {"chunks": 4}  # a slow worker's partition shared piece by piece


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("code", [{"scheme": "cyclic", "stragglers": 2}, {"scheme": "frc", "stragglers": 1}])
def test_streamed_jobs_end_where_uncoded_does_with_late_slow_and_killed_workers(cluster, code):
    local = cluster(6)
    with local.client() as client:
        _, reference = final_params(client, make_spec(code={"scheme": "uncoded"}))
        # before a worker is killed: an uncoded job needs every worker
        _, uncoded = final_params(client, make_spec(code={"scheme": "uncoded"}, iterations=60))
        job, late = final_params(client, make_spec(code=code, faults=LATE, stream={}))
        assert relative(flat(late), flat(reference)) <= 1e-8
        assert all(not {1, 4} & set(r.responders) for r in job.history)  # never waited for
        assert all(sorted(p for used in r.pieces for p in used) == list(range(6)) for r in job.history)
        job, slow = final_params(client, make_spec(code=code, faults=SLOW, stream=PIECES))
        # exact whatever share of its partition the slow worker sent; that its pieces are used is
        # shown by construction in tests/master/test_streamed.py (a worker 3x slow need not send
        # one on a machine whose rounds cost more in messages than in computing)
        assert relative(flat(slow), flat(reference)) <= 1e-8
        running = client.submit(make_spec(code=code, iterations=60, stream={}))
        follow_until(client, running.id, lambda e: e.job.iteration >= 5)
        local.kill_worker(3)
        finished = client.wait(running.id)
        assert finished.state == JobState.SUCCEEDED, finished.reason
        assert 3 not in finished.history[-1].responders
        assert relative(flat(client.result(running.id)), flat(uncoded)) <= 1e-8


@pytest.mark.slow  # 16 worker processes on the machine's cores
def test_sixteen_workers_stream_exactly_with_slow_and_late_ones(cluster):
    local = cluster(16)
    faults = {"stragglers": {"model": "fixed", "workers": [3, 9], "delay": 60.0},
              "slowdown": {"model": "uniform", "low": 1.0, "high": 2.5}}
    with local.client() as client:
        _, reference = final_params(client, make_spec(workers=16, code={"scheme": "uncoded"}, iterations=15))
        for code in ({"scheme": "cyclic", "stragglers": 3}, {"scheme": "frc", "stragglers": 2}):
            job, got = final_params(client, make_spec(workers=16, code=code, iterations=15, faults=faults, stream={}))
            assert relative(flat(got), flat(reference)) <= 1e-8, code
            assert all(not {3, 9} & set(r.responders) for r in job.history)


def test_copies_that_disagree_are_settled_by_a_resting_worker_called_back(shared_cluster):
    # cyclic s = 1, strictly checked: built for s = 2, every partition on 3 of the 4 workers.
    # Worker 3 is late in every round, so it rests; worker 0 sends wrong pieces from iteration 3:
    # of the pieces it disputes, partitions 0 and 1 have their third copy on worker 3 alone
    local = shared_cluster
    code = {"scheme": "cyclic", "stragglers": 1}
    faults = {"stragglers": {"model": "fixed", "workers": [3], "delay": 0.3},
              "soft_errors": {"probability": 1.0, "model": "element", "scale": 1.0, "workers": [0], "start": 3}}
    with local.client() as client:
        _, reference = final_params(client, make_spec(workers=4, code={"scheme": "uncoded"}, iterations=12))
        job, got = final_params(client, make_spec(workers=4, code=code, iterations=12, faults=faults, stream={},
                                                  verify="strict"))
        history = client.get(job.id, history=True).history
    assert relative(flat(got), flat(reference)) <= 1e-8
    assert any(0 in record.located for record in history)
