"""Wrong replies on a real local cluster: a worker that adds noise to every message never changes
the result, is located in every iteration it answers and quarantined; a bit-flipped product is
never returned; `coded status` and `coded workers` show what was found."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from coded.client.reports import JobState

from .conftest import make_spec, metric, scrape
from .test_gradient_jobs import final_params, flat
from .test_matrix_jobs import matmul_spec, npy

pytestmark = pytest.mark.integration

# whole replies, checked against the code (tests/integration/test_streamed.py: streamed ones)
BASE = {"workers": 8, "code": {"scheme": "cyclic", "stragglers": 2}, "iterations": 15, "eval_every": 0,
        "stream": "off"}
LIAR = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 1.0, "workers": [3]}}


def cli(local, *args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "coded.cli", *args, "--master", local.address],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_a_noisy_worker_is_located_corrected_quarantined_and_shown(cluster):
    local = cluster(8, metrics=True)
    with local.client() as client:
        _, clean = final_params(client, make_spec(**BASE))
        every = {**BASE, "code": {"scheme": "cyclic", "stragglers": 0}}
        job, corrected = final_params(client, make_spec(**every, faults=LIAR, verify={"errors": 1}))
        assert relative(flat(corrected), flat(clean)) <= 1e-8
        # no stragglers and errors: 1 wait for all 8 replies, so worker 3 answers every iteration until it is taken out:
        # the worker's own count of completed rounds is the number of iterations that located it
        located = [r.iteration for r in job.history if list(r.located) == [3]]
        answered = metric(scrape(local.metrics_ports[3]), "coded_worker_calls_total", job_id=job.id,
                          outcome="completed")
        assert len(located) == answered == 3 and located == [0, 1, 2]
        assert all(3 not in r.responders and r.checked for r in job.history)
        [wrong] = job.wrong_replies
        assert (wrong.position, wrong.located, wrong.quarantined, wrong.quarantined_after) == (3, 3, True, 2)
        master = scrape(local.metrics_ports["master"])
        assert metric(master, "coded_worker_quarantines_total", job_id=job.id, worker=wrong.worker) == 1
        assert metric(master, "coded_wrong_replies_total", job_id=job.id, worker=wrong.worker) == 3
        # default detection: one reply more than decoding needs; whenever worker 3's reply is among
        # them the others disagree with it, and the master waits for the eighth to locate it
        job, detected = final_params(client, make_spec(**BASE, faults=LIAR))
        assert job.verification.mode == "detect"
        assert relative(flat(detected), flat(clean)) <= 1e-8
        assert all(3 not in r.responders and r.checked for r in job.history)
    status = cli(local, "status", job.id, "--verbose")
    assert "checks: detect: each iteration waits for 6 of the 8 replies, so 2 slow or dead workers are not " \
           "waited for" in status
    workers = cli(local, "workers")
    assert f"{wrong.worker} " in workers and "QUARANTINED by" in next(
        line for line in workers.splitlines() if line.startswith(wrong.worker + " "))


def test_a_checked_job_never_waits_for_its_stragglers(shared_cluster, tmp_path):
    """The headline by default: `stragglers: 2` with the default check, two workers always a minute late.
    Every iteration is decoded and checked from the four others: had a round waited for a slow
    worker, its reply would be among the replies decoded. The submission says so, for the replies
    the master chose (streamed or whole: the faster on this machine, and neither waits)."""
    local = shared_cluster
    slow = {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 60.0}}
    spec = {"workers": 6, "code": {"scheme": "cyclic", "stragglers": 2}, "iterations": 12, "eval_every": 0}
    (tmp_path / "job.yaml").write_text(make_spec(**spec, faults=slow))
    submitted = subprocess.run([sys.executable, "-m", "coded.cli", "submit", str(tmp_path / "job.yaml"),
                                "--verbose", "--master", local.address], capture_output=True, text=True, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    with local.client() as client:
        _, reference = final_params(client, make_spec(**{**spec, "code": {"scheme": "uncoded"}}))
        job = client.wait(submitted.stdout.strip())
        assert job.state == JobState.SUCCEEDED, job.reason
        params = client.result(job.id)
    assert job.replies is not None
    if job.replies.streamed:
        assert "checks: each iteration sums one copy of every piece as the workers stream them, whoever sends it, " \
               "so slow workers' finished pieces count and up to 2 dead workers are not waited for" in submitted.stderr
        assert job.verification.mode == "sampled"
    else:
        assert "checks: each iteration waits for 4 of the 6 replies, so 2 slow or dead workers are not waited " \
               "for" in submitted.stderr
        assert job.verification.mode == "detect"
    assert all(not {1, 4} & set(r.responders) for r in job.history), [list(r.responders) for r in job.history]
    assert relative(flat(params), flat(reference)) <= 1e-8


def test_a_bit_flipped_matmul_without_verify_never_succeeds_with_a_wrong_product(shared_cluster):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((24, 16)), rng.standard_normal((16, 12))
    files = {"A.npy": npy(a), "B.npy": npy(b)}
    flips = {"soft_errors": {"probability": 1.0, "model": "bitflip", "workers": [2]}}
    local = shared_cluster
    with local.client() as client:
        for workers in (8, 6, 5):  # R = 4: room to locate (8, 6), or only to detect (5)
            job = client.wait(client.submit(matmul_spec(faults=flips, workers=workers), files).id)
            if job.state == JobState.SUCCEEDED:
                assert relative(client.result(job.id)["product"], a @ b) <= 1e-9, workers
                assert 2 not in job.history[0].responders
            else:
                assert job.state == JobState.FAILED and job.reason.startswith("decoding failure"), job.reason
        assert job.state == JobState.FAILED  # 5 = R + 1: worker 2's result is awaited, then cannot be located
