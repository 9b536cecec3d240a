"""PyTorch training on a real local cluster: a LeNet with mini-batches, two workers always a minute late,
coded equal to uncoded to float32 precision; the result loads into the architecture with PyTorch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from coded.client.reports import Job, JobState

from .conftest import make_spec

pytestmark = [pytest.mark.integration, pytest.mark.torch]

LENET = {"type": "torch", "name": "lenet"}
ADAM = {"type": "adam", "lr": 0.005, "batch": 32}
SLOW = {"stragglers": {"model": "fixed", "workers": [0, 1], "delay": 60.0}}


def run(client, **changes) -> tuple[Job, dict[str, np.ndarray]]:
    job = client.wait(client.submit(make_spec(model=LENET, data={"type": "digits"}, optimizer=ADAM, iterations=80,
                                              eval_every=80, seed=7, **changes)).id)
    assert job.state == JobState.SUCCEEDED, job.reason
    return client.get(job.id, history=True), client.result(job.id)


def test_a_lenet_trained_coded_with_two_slow_workers_equals_uncoded_and_loads_into_pytorch(cluster, tmp_path):
    """Bound: the workers compute in float32 from float32 copies of the parameters. Coded and
    uncoded decode the same float32-computed partial gradients, up to the float64 rounding of the
    decode (~1e-16 relative); after 80 Adam steps the parameters differ by less than 1e-6 of their
    largest value unless that rounding flipped a parameter's float32 value, and a flip moves a
    parameter by one float32 unit (6e-8 relative), which 80 steps of training cannot blow up past
    the 1e-4 asserted here."""
    local = cluster(6)
    with local.client() as client:
        _, reference = run(client, code={"scheme": "uncoded"})
        # the default check waits for the n - 2 = 4 fastest replies, which the slow workers are not among
        job, params = run(client, code={"scheme": "cyclic", "stragglers": 2}, faults=SLOW)
    scale = max(np.abs(v).max() for v in reference.values())
    difference = max(np.abs(params[k] - reference[k]).max() for k in reference)
    assert difference <= 1e-4 * scale, difference
    assert all(not {0, 1} & set(record.responders) for record in job.history)
    assert len(job.history) == 80 and job.history[-1].test_accuracy >= 0.9

    # `coded result` writes a state dict; the documented snippet loads it into the architecture
    out = tmp_path / "lenet.pt"
    written = subprocess.run([sys.executable, "-m", "coded.cli", "result", job.id, "--out", str(out),
                              "--master", local.address], capture_output=True, text=True, timeout=60)
    assert written.returncode == 0, written.stderr
    import torch

    from coded.ml.data import digits
    from coded.ml.pytorch import factory

    model = factory("lenet")((1, 8, 8), 10)
    model.load_state_dict(torch.load(out, weights_only=True))
    model.eval()
    test = digits(seed=0)  # the job's data section: {type: digits} (seed 0)
    with torch.no_grad():
        predicted = model(torch.tensor(test.x_test, dtype=torch.float32).reshape(-1, 1, 8, 8)).argmax(1).numpy()
    assert np.mean(predicted == test.y_test) == pytest.approx(job.history[-1].test_accuracy, abs=1 / len(test.y_test))


def test_a_lenet_with_dropout_trains_coded_as_uncoded_streamed_and_whole_with_the_default_check(cluster):
    """Every holder of a partition draws the same dropout masks (seeded by job seed, iteration,
    partition and row), so the copies agree: no false alarm, and the coded jobs decode the sum the
    uncoded job adds up. Bound: as above, float64 decode rounding that may flip a float32 parameter
    copy by one unit; 20 Adam steps keep that far below 1e-5 of how far training moved them."""
    from coded.ml.pytorch.model import TorchModel

    model = {"type": "torch", "name": "lenet", "args": {"dropout": 0.5}}
    spec = dict(model=model, data={"type": "digits"}, optimizer=ADAM, iterations=20, eval_every=20, seed=7)
    local = cluster(6)
    with local.client() as client:
        jobs = {}
        for name, code, stream in (("uncoded", {"scheme": "uncoded"}, None),
                                   ("streamed", {"scheme": "cyclic", "stragglers": 2}, None),
                                   ("whole", {"scheme": "cyclic", "stragglers": 2}, "off")):
            changes = {"code": code} | ({"stream": stream} if stream else {})
            job = client.wait(client.submit(make_spec(**spec, **changes)).id)
            assert job.state == JobState.SUCCEEDED, (name, job.reason)
            jobs[name] = client.get(job.id, history=True), client.result(job.id)
    start = TorchModel("lenet", (1, 8, 8), 10, {"dropout": 0.5}).arrays(
        TorchModel("lenet", (1, 8, 8), 10, {"dropout": 0.5}).init_params(np.random.default_rng(7)))
    _, reference = jobs["uncoded"]
    moved = max(np.abs(reference[k] - start[k]).max() for k in reference)
    assert moved > 1e-3  # training did move them
    for name in ("streamed", "whole"):
        job, params = jobs[name]
        assert len(job.history) == 20
        assert sum(record.errors_detected for record in job.history) == 0, name  # no false alarm
        assert max(np.abs(params[k] - reference[k]).max() for k in reference) <= 1e-5 * moved, name
