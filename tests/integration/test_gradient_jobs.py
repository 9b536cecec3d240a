"""Gradient-coding jobs on a real local cluster: exact under stragglers, cancellation, every scheme."""

from __future__ import annotations

import io
import itertools
import re

import grpc
import numpy as np
import pytest

from coded.client.reports import Job, JobState

from .conftest import make_spec, metric, scrape, wait_until

pytestmark = pytest.mark.integration

SLOW = {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 60.0}}


def final_params(client, spec: str) -> tuple[Job, dict[str, np.ndarray]]:
    job = client.wait(client.submit(spec).id)
    assert job.state == JobState.SUCCEEDED, job.reason
    return job, client.result(job.id)


def flat(arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([arrays[k].ravel() for k in sorted(arrays)])


def test_coded_runs_match_uncoded_while_two_workers_are_slow(cluster):
    local = cluster(6, metrics=True)
    with local.client() as client:
        # a slow worker does not change an uncoded run, which waits for it (and counts its reply once)
        slightly_slow = {"stragglers": {"model": "fixed", "workers": [2], "delay": 0.05}}
        uncoded, reference = final_params(client, make_spec(code={"scheme": "uncoded"}, faults=slightly_slow))
        coded_jobs = []
        for code in ({"scheme": "cyclic", "stragglers": 2}, {"scheme": "frc", "stragglers": 2},
                     {"scheme": "ye_abbe", "stragglers": 2, "m": 2}):
            # unchecked: the two slow workers leave exactly a decodable set (checked runs: test_verification.py)
            job, params = final_params(client, make_spec(code=code, faults=SLOW, verify="off"))
            coded_jobs.append(job.id)
            difference = np.abs(flat(params) - flat(reference)).max() / np.abs(flat(reference)).max()
            assert difference <= 1e-8, (code, difference)
            # the slow workers never made it into a decoded set
            assert all(not {1, 4} & set(record.responders) for record in job.history), code
            assert [r.iteration for r in job.history] == list(range(30))
    # their calls were cut off: the master stopped the slow workers' calls in every round, and every
    # call that reached a slow worker ended stopped (none completed, none was cancelled). A call
    # stopped while its connection still opened never reaches the worker, so the worker's count
    # can be lower than the master's. A worker has ended all of a job's calls once the master's
    # data connections to it are closed (it closes its end only then).
    assert wait_until(lambda: metric(scrape(local.metrics_ports["master"]), "coded_master_data_connections") == 0)
    master = scrape(local.metrics_ports["master"])
    for position in range(6):  # every reply of the uncoded job used, none also counted as cancelled
        assert metric(master, "coded_responses_total", job_id=uncoded.id, worker=f"worker-{position}") == \
            metric(master, "coded_responses_total", job_id=uncoded.id, worker=f"worker-{position}", outcome="used") \
            == 30, position
    for position in (1, 4):
        worker = scrape(local.metrics_ports[position])
        for job_id in coded_jobs:
            called = metric(master, "coded_responses_total", job_id=job_id, worker=f"worker-{position}")
            assert called == metric(master, "coded_responses_total", job_id=job_id, worker=f"worker-{position}",
                                    outcome="cancelled") == 30
            calls = {outcome: metric(worker, "coded_worker_calls_total", job_id=job_id, outcome=outcome)
                     for outcome in ("completed", "stopped", "cancelled", "failed")}
            assert 0 < calls["stopped"] == sum(calls.values()) <= called, (position, calls)


@pytest.mark.parametrize(
    "code",
    [
        {"scheme": "ignore_stragglers", "stragglers": 2},
        {"scheme": "partial", "stragglers": 1, "alpha": 2.0},
        {"scheme": "ye_abbe", "stragglers": 1, "m": 3, "points": "chebyshev"},
        {"scheme": "lwpd", "t": 2},
        {"scheme": "kasync", "stragglers": 2},
    ],
)
def test_every_other_scheme_runs_end_to_end(shared_cluster, code):
    workers = 8 if code["scheme"] == "lwpd" else 6
    local = shared_cluster
    optimizer = {"type": "sgd", "lr": 0.5} if code["scheme"] == "lwpd" else {"type": "nesterov", "lr": 0.5}
    with local.client() as client:
        job = client.wait(client.submit(make_spec(workers=workers, code=code, optimizer=optimizer,
                                                  iterations=15, eval_every=5)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        losses = [r.loss for r in job.history]
        assert len(losses) == 15 and losses[-1] < losses[0]
        assert job.history[-1].test_accuracy > 0.6


def test_kasync_waiting_for_all_is_plain_gradient_descent_and_with_k_it_steps_every_k(shared_cluster):
    """K = n: every step waits for all n fresh gradients, so K-async SGD is the uncoded run exactly.
    K < n with one worker a minute late: a step every K arrivals from the five others, never
    waiting for the late one, whose gradient never arrives within the job."""
    local = shared_cluster
    with local.client() as client:
        _, reference = final_params(client, make_spec(code={"scheme": "uncoded"}))
        _, kasync = final_params(client, make_spec(code={"scheme": "kasync", "stragglers": 0}))
        assert np.abs(flat(kasync) - flat(reference)).max() <= 1e-10 * np.abs(flat(reference)).max()
        late = {"stragglers": {"model": "fixed", "workers": [2], "delay": 60.0}}
        job, _ = final_params(client, make_spec(code={"scheme": "kasync", "stragglers": 2}, faults=late))
        assert len(job.history) == 30
        assert all(len(r.responders) == 4 for r in job.history)  # K = n - s messages per step
        assert all(2 not in r.responders for r in job.history)
        assert job.history[-1].loss < job.history[0].loss


def test_softmax_mlp_on_uploaded_npz(shared_cluster, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 5))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=y)
    local = shared_cluster
    spec = make_spec(workers=4, code={"scheme": "cyclic", "stragglers": 1}, model={"type": "mlp", "hidden": [8]},
                     data={"type": "npz", "path": "train.npz"}, iterations=10)
    with local.client() as client:
        job = client.wait(client.submit(spec, {"train.npz": buffer.getvalue()}).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        result = client.result(job.id)
        assert sum(a.size for a in result.values()) == 5 * 8 + 8 + 8 * 3 + 3


def test_bad_requests_get_clear_statuses_and_the_cluster_keeps_serving(shared_cluster):
    local = shared_cluster
    with local.client() as client:
        cases = [
            (make_spec(code={"scheme": "cyclic", "stragglers": 6}), "code.stragglers"),
            (make_spec(optimizer={"type": "sgd", "lr": -1}), "optimizer.lr"),
            ("kind: gradient_coding\nworkers: [", "not valid YAML"),
            (make_spec(data={"type": "npz", "path": "missing.npz"}), "was not uploaded"),
        ]
        for text, words in cases:
            with pytest.raises(grpc.RpcError) as caught:
                client.submit(text)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in caught.value.details()
        with pytest.raises(grpc.RpcError) as caught:
            client.submit(make_spec(data={"type": "npz", "path": "bad.npz"}), {"bad.npz": b"not an npz file"})
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("data.path: 'bad.npz': the file is text ('not an npz file'), not a "
                                                 ".npy or .npz file: save one with numpy.savez(file, x=x, y=y)")
        with pytest.raises(grpc.RpcError) as caught:
            client.get("nope")
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as caught:
            client.result("nope")
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        job = client.wait(client.submit(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1},
                                                  iterations=5)).id)
        assert job.state == JobState.SUCCEEDED


def test_cli_submit_wait_json_and_result(shared_cluster, tmp_path):
    import json
    import subprocess
    import sys

    local = shared_cluster
    spec = tmp_path / "job.yaml"
    spec.write_text(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1}, iterations=6))
    run = subprocess.run([sys.executable, "-m", "coded.cli", "submit", str(spec), "--master", local.address,
                          "--wait", "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["state"] == "SUCCEEDED" and report["iterations"] == 6
    assert {"id", "elapsed_s", "final_loss", "history"} <= set(report)
    assert [r["iteration"] for r in report["history"]] == list(range(6))
    assert all({"loss", "elapsed_s", "responders"} <= set(r) for r in report["history"])
    out = tmp_path / "w.npz"
    run = subprocess.run([sys.executable, "-m", "coded.cli", "result", report["id"], "--master", local.address,
                          "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    with np.load(out) as saved:
        assert sum(saved[k].size for k in saved.files) == 13
    bad = tmp_path / "bad.yaml"
    bad.write_text(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1}, iterations=0))  # one problem
    run = subprocess.run([sys.executable, "-m", "coded.cli", "submit", str(bad), "--master", local.address],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "iterations" in run.stderr
    run = subprocess.run([sys.executable, "-m", "coded.cli", "status", "--master", local.address],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and report["id"] in run.stdout
    assert list(itertools.islice(run.stdout.splitlines(), 1))


def test_mini_batch_sgd_stays_exact_on_real_processes(shared_cluster):
    """Every worker holding a partition draws the same mini-batch of it (from the job's seed, the
    iteration and the partition), so cyclic with two slow workers ends where uncoded does."""
    local = shared_cluster
    optimizer = {"type": "sgd", "lr": 0.5, "momentum": 0.9, "batch": 32, "schedule": {"type": "step", "every": 10,
                                                                                    "gamma": 0.5}}
    slow = {"stragglers": {"model": "fixed", "workers": [0, 1], "delay": 60.0}}  # never waited for
    with local.client() as client:
        _, reference = final_params(client, make_spec(code={"scheme": "uncoded"}, optimizer=optimizer, iterations=20))
        job, coded = final_params(client, make_spec(code={"scheme": "cyclic", "stragglers": 2}, optimizer=optimizer,
                                                    iterations=20, faults=slow, verify="off"))
    assert np.abs(flat(coded) - flat(reference)).max() <= 1e-8 * np.abs(flat(reference)).max()
    assert all(not {0, 1} & set(r.responders) for r in job.history)


def test_a_csv_whose_scales_differ_warns_and_normalize_standardize_trains_on_it(shared_cluster):
    """Columns three orders of magnitude apart: the submission warns and names them; with
    ``normalize: standardize`` the same learning rate trains (the raw columns make it oscillate),
    and the result carries the statistics a prediction applies to raw features first."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((600, 3)) * [1.0, 1000.0, 0.5] + [0.0, 300.0, 1.0]
    y = (x[:, 0] + x[:, 1] / 1000 - 2 * (x[:, 2] - 1) > 0).astype(int)
    text = "\n".join(",".join(f"{v:.6g}" for v in [*row, label]) for row, label in zip(x, y, strict=True)) + "\n"
    files = {"rows.csv": text.encode()}
    base = dict(workers=3, code={"scheme": "uncoded"}, optimizer={"type": "sgd", "lr": 0.5}, iterations=40,
                model={"type": "logistic"})
    local = shared_cluster
    with local.client() as client:
        raw = client.submit(make_spec(data={"type": "csv", "path": "rows.csv", "test_fraction": 0}, **base), files)
        # the scales, and the step they allow: lr 0.5 is far above it on the raw columns (they oscillate)
        assert len(raw.warnings) == 2
        assert re.search(r"scales differ by a factor of 2\.\d+e\+03 \(standard deviation of column 1: .*column 2: .*"
                         r"normalize: standardize", raw.warnings[0]), raw.warnings
        assert raw.warnings[1].startswith("optimizer.lr 0.5 is above the step these data allow"), raw.warnings
        scaled = client.submit(make_spec(data={"type": "csv", "path": "rows.csv", "test_fraction": 0,
                                               "normalize": "standardize"}, **base), files)
        assert scaled.warnings == ()
        raw, scaled = client.wait(raw.id), client.wait(scaled.id)
        assert raw.state == scaled.state == JobState.SUCCEEDED
        result = client.result(scaled.id)
    rows = np.loadtxt(io.StringIO(text), delimiter=",")[:, :3]  # the file, read independently
    assert np.allclose(result["normalize.mean"], rows.mean(axis=0), rtol=1e-5)
    assert np.allclose(result["normalize.std"], rows.std(axis=0), rtol=1e-5)
    assert scaled.loss < 0.5 * raw.loss, (scaled.loss, raw.loss)
