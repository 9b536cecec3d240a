"""CodeNet with real peer processes: exact without errors, corrects up to t, rolls back beyond,
keeps its parity blocks exact, and trains on when its launcher is killed."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.jobs.build import codenet_reference, load_codenet_data
from coded.jobs.spec import parse_job
from coded.ml.network import accuracy

from .conftest import follow_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # many peers on two cores: `make test-slow`

BASE = {"kind": "codenet", "strategy": "codenet", "code": {"m": 2, "n": 2, "t": 1},
        "model": {"type": "mlp", "hidden": [16]}, "data": {"type": "digits"},
        "optimizer": {"type": "sgd", "lr": 0.1, "batch": 8}, "iterations": 30, "checkpoint_every": 10,
        "eval_every": 10, "seed": 1}


def spec(**changes) -> str:
    out = {**BASE, **changes}
    return yaml.safe_dump(out)


def reference(text: str) -> list[np.ndarray]:
    parsed = parse_job(text)
    return codenet_reference(parsed, load_codenet_data(parsed))


def assert_equal_weights(result: dict, expected: list[np.ndarray]) -> None:
    for l, w in enumerate(expected):
        got = result[f"layer{l}"]
        assert np.abs(got - w).max() <= 1e-8 * np.abs(w).max(), l


def test_error_free_codenet_equals_single_process_training(shared_cluster):
    local = shared_cluster
    text = spec()
    with local.client() as client:
        job = client.wait(client.submit(text).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert job.stats["rollbacks"] == 0 and job.stats["errors_corrected"] == 0
        assert [r.iteration for r in job.history] == [10, 20, 30]
        expected = reference(text)
        assert_equal_weights(client.result(job.id), expected)
        data = load_codenet_data(parse_job(text))
        # weights equal to rounding: a prediction where two classes tie may flip, one test sample
        assert job.history[-1].test_accuracy == pytest.approx(accuracy(expected, data.x_test, data.y_test),
                                                              abs=1 / len(data.y_test))


def test_errors_within_t_are_corrected_and_beyond_t_roll_back(shared_cluster):
    local = shared_cluster
    with local.client() as client:
        # O1, O2 and O3 errors on one peer, often: at most one wrong product per block-column
        one = spec(faults={"soft_errors": {"probability": 0.2, "model": "gaussian", "scale": 10.0, "workers": [5]}})
        job = client.wait(client.submit(one).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert job.stats["errors_corrected"] > 0 and job.stats["rollbacks"] == 0
        assert_equal_weights(client.result(job.id), reference(one))
        # two peers of the same block-column wrong at once: more than t = 1, so a rollback
        two = spec(faults={"soft_errors": {"probability": 0.1, "model": "gaussian", "scale": 10.0,
                                           "workers": [0, 4]}})
        job = client.wait(client.submit(two).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert job.stats["rollbacks"] > 0
        assert_equal_weights(client.result(job.id), reference(two))


def test_replication_detects_and_uncoded_does_not(shared_cluster):
    local = shared_cluster
    with local.client() as client:
        # replication rolls back at any error, so it needs a low error rate to make progress at all
        faults = {"soft_errors": {"probability": 0.05, "model": "gaussian", "scale": 10.0, "workers": [1]}}
        job = client.wait(client.submit(spec(strategy="replication", faults=faults, checkpoint_every=5)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert job.stats["rollbacks"] > 0
        assert_equal_weights(client.result(job.id), reference(spec(strategy="replication")))
        job = client.wait(client.submit(spec(strategy="uncoded", faults=faults)).id)
        assert job.state == JobState.SUCCEEDED and job.stats["rollbacks"] == 0
        result = client.result(job.id)
        expected = reference(spec(strategy="uncoded"))
        assert max(np.abs(result[f"layer{l}"] - w).max() for l, w in enumerate(expected)) > 1e-3  # silently wrong


def test_peers_train_on_when_the_launcher_is_killed(cluster):
    local = cluster(12)
    text = spec(iterations=200, eval_every=100)
    with local.client() as client:
        job = client.submit(text)
        follow_until(client, job.id, lambda e: e.job.state == JobState.RUNNING and e.job.iteration >= 5)
        local.kill_master()
    local.start_master()
    with local.client() as client:
        final = client.wait(job.id)
        assert final.state == JobState.SUCCEEDED, final.reason
        assert final.iteration == 200
        assert_equal_weights(client.result(job.id), reference(text))
        # 200 coded updates of vectors only: every parity block is still a fresh encoding
        assert final.stats["parity_max_deviation"] <= 1e-10
