"""Gradient jobs on real processes against a plain numpy loop written here (issue 42): the uncoded
job and every exact code end where logistic regression's gradient descent, written out, ends.

The loop shares nothing with the master and the workers but the job's data (drawn by
``gaussian_mixture``, the job's input) and, for mini-batches, which rows a batch holds
(``batch_rows``, a rule of the job). The gradient, its scaling by the samples, and Nesterov's
update are written out below from docs/jobs.md and the optimizer's formula, so a slip in any of
them on the cluster's side (a sum divided by one sample too many, the bias left out) shows here,
where comparing a coded job with an uncoded one cannot: the two share it.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.ml.data import gaussian_mixture
from coded.ml.data.partition import batch_rows

pytestmark = pytest.mark.integration

SAMPLES, FEATURES, WORKERS, ITERATIONS, LR, MOMENTUM, SEED = 600, 6, 4, 25, 0.5, 0.9, 3


def spec(code: dict, batch: int | None = None, **changes: object) -> str:
    optimizer = {"type": "nesterov", "lr": LR, "momentum": MOMENTUM, **({"batch": batch} if batch else {})}
    return yaml.safe_dump({
        "kind": "gradient_coding", "workers": WORKERS, "code": code, "model": {"type": "logistic"},
        "data": {"type": "gaussian_mixture", "samples": SAMPLES, "features": FEATURES, "seed": SEED},
        "optimizer": optimizer, "iterations": ITERATIONS, "eval_every": 0, "seed": SEED, **changes})


def plain_loop(partitions: int, batch: int | None, used: list[list[int]] | None = None) -> np.ndarray:
    """[w, b] after ITERATIONS steps of Nesterov (v <- mu v - lr g; w <- w + mu v - lr g) on the
    mean logistic loss log(1 + e^z) - y z, z = x.w + b, from zeros: over every training row, or
    over ``batch`` rows of each of ``partitions`` contiguous runs of them (docs/jobs.md: generated
    data are cut into contiguous runs).

    With ``used`` (the runs whose gradients each step sums): the sum over those runs only,
    rescaled by partitions / len(used[t]) (docs/codes.md, ``ignore_stragglers``)."""
    data = gaussian_mixture(SAMPLES, FEATURES, seed=SEED)
    x, y = np.asarray(data.x_train), np.asarray(data.y_train, dtype=np.float64)
    runs = np.array_split(np.arange(len(y)), partitions)
    w, b = np.zeros(FEATURES), 0.0
    vw, vb = np.zeros(FEATURES), 0.0
    for t in range(ITERATIONS):
        rows = np.arange(len(y)) if batch is None else np.concatenate(
            [run[batch_rows(len(run), batch, SEED, t, j)] for j, run in enumerate(runs)])
        error = 1.0 / (1.0 + np.exp(-(x[rows] @ w + b))) - y[rows]
        if used is not None:  # the rows of the runs used; the mean is over all rows, then rescaled
            kept = np.isin(rows, np.concatenate([runs[j] for j in used[t]]))
            error = np.where(kept, error, 0.0) * partitions / len(used[t])
        gw, gb = x[rows].T @ error / len(rows), error.sum() / len(rows)
        vw, vb = MOMENTUM * vw - LR * gw, MOMENTUM * vb - LR * gb
        w, b = w + MOMENTUM * vw - LR * gw, b + MOMENTUM * vb - LR * gb
    return np.append(w, b)


def trained(client, text: str) -> np.ndarray:
    job = client.wait(client.submit(text).id)
    assert job.state == JobState.SUCCEEDED, job.reason
    result = client.result(job.id)
    return np.append(result["layer0.weights"].ravel(), result["layer0.bias"])


#: (code, the stream settings it is run with, other changes): whole replies, and for the codes
#: that stream, pieces; frc unchecked (checked, it is built for s + 1 = 3, which does not divide 4)
CODES = [({"scheme": "uncoded"}, [{}], {}), ({"scheme": "kasync", "stragglers": 0}, [{}], {}),
         ({"scheme": "ye_abbe", "stragglers": 1, "m": 2}, [{}], {}),
         ({"scheme": "cyclic", "stragglers": 1}, ["off", {"chunks": 2}], {}),
         ({"scheme": "frc", "stragglers": 1}, ["off", {"chunks": 2}], {"verify": "off"})]


@pytest.mark.parametrize("batch", [None, 40], ids=["full batch", "mini-batch"])
def test_the_uncoded_job_and_every_exact_code_end_where_the_plain_loop_ends(shared_cluster, batch):
    expected = plain_loop(WORKERS, batch)  # every code here has k = n data partitions
    assert np.abs(expected).max() > 0.1  # it learned something that a slip would change
    local = shared_cluster
    with local.client() as client:
        for code, streams, changes in CODES:
            for stream in streams:
                got = trained(client, spec(code, batch, **changes, **({"stream": stream} if stream else {})))
                assert np.allclose(got, expected, rtol=1e-9, atol=1e-12), (code, stream, np.abs(got - expected).max())


@pytest.mark.slow  # a cluster of its own: make test-slow
def test_ignore_stragglers_is_the_plain_loop_over_the_partitions_it_used(cluster):
    """Approximate, but exactly so: each step is the plain loop's gradient over the first n - s
    partitions to arrive, rescaled by n / (n - s). Worker 2 is a minute late, so no step uses it."""
    late = {"stragglers": {"model": "fixed", "workers": [2], "delay": 60.0}}
    local = cluster(WORKERS)
    with local.client() as client:
        job = client.wait(client.submit(spec({"scheme": "ignore_stragglers", "stragglers": 1}, faults=late)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        result = client.result(job.id)
    got = np.append(result["layer0.weights"].ravel(), result["layer0.bias"])
    used = [sorted(record.responders) for record in job.history]
    assert used == [[0, 1, 3]] * ITERATIONS  # worker i holds partition i (docs/codes.md)
    expected = plain_loop(WORKERS, None, used)
    assert np.allclose(got, expected, rtol=1e-9, atol=1e-12), np.abs(got - expected).max()
    assert not np.allclose(got, plain_loop(WORKERS, None), rtol=1e-3)  # and it is not the full gradient's
