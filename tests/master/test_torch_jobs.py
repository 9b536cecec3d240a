"""PyTorch jobs in the master's core: what submission refuses (each with its field), what it fills
in, and coded training that ends where uncoded training does."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from coded.jobs.spec import JobSpecError

from .inprocess import Cluster, refusal

pytestmark = pytest.mark.torch

SPEC: dict[str, Any] = {
    "kind": "gradient_coding", "workers": 4, "code": {"scheme": "cyclic", "stragglers": 1},
    "model": {"type": "torch", "name": "mlp", "args": {"hidden": [32]}}, "data": {"type": "digits", "seed": 1},
    "optimizer": {"type": "adam", "lr": 0.01, "batch": 16}, "iterations": 25, "eval_every": 25, "seed": 5,
}


def spec(model: dict[str, Any] | None = None, **changes: Any) -> str:
    out = copy.deepcopy(SPEC)
    out["model"].update(model or {})
    out.update(changes)
    return yaml.safe_dump(out)


@pytest.mark.parametrize(
    ("text", "start"),
    [
        (spec({"name": "vgg"}), "model.name: unknown architecture 'vgg' (the master has: lenet, mlp, resnet)"),
        (spec({"name": "lenet", "args": {"depth": 3}}), "model.args: lenet: lenet() got an unexpected keyword "
                                                       "argument 'depth'"),
        (spec({"name": "lenet", "args": {}}, data={"type": "gaussian_mixture", "samples": 400, "features": 12}),
         "model: lenet takes images (C, H, W) of at least 4 x 4 pixels (got samples of shape [12])"),
        (spec({"input_shape": [1, 9, 9]}), "model.input_shape: [1, 9, 9] holds 81 values, but a sample of the data "
                                           "has 64"),
        (spec({"classes": 5}), "model.classes: 5 outputs do not fit the data, whose labels go up to 9"),
        (spec(data={"type": "linear", "samples": 400, "features": 4}), "model.type: torch needs at least 2 classes "
                                                                       "(the data have no classes: regression)"),
        (spec(optimizer={"type": "adam", "lr": 0.01, "batch": 400}), "optimizer.batch: 400 is more than the 359 "
                                                                      "training samples of the smallest of the 4"),
    ],
)
def test_a_torch_job_that_does_not_fit_its_data_is_refused_naming_the_field(tmp_path: Path, text, start):
    message = refusal(tmp_path, text, {}, JobSpecError)
    assert message.startswith(start), message


def test_coded_torch_training_ends_where_uncoded_does_while_a_worker_is_slow(tmp_path: Path):
    """Float32 workers: every holder of a partition computes its partial gradient from the same
    float32 parameters and samples, so coded and uncoded decode the same sums up to float64
    rounding; the runs differ only if that rounding flips a parameter's float32 value."""
    slow = {"stragglers": {"model": "fixed", "workers": [2], "delay": 60.0}}  # only a stop ends it in time
    # the default check waits for the n - 1 = 3 fastest replies, which the slow worker is not among
    cyclic = {"scheme": "cyclic", "stragglers": 1}

    async def main() -> None:
        cluster = await Cluster(4, tmp_path).start()
        try:
            uncoded = await cluster.run(spec(code={"scheme": "uncoded"}))
            coded = await cluster.run(spec(code=cyclic, faults=slow))
            for job in (uncoded, coded):
                assert job.state == "SUCCEEDED", job.stored.reason
            model = json.loads(coded.stored.spec)["model"]  # what the data decided, filled in
            assert model["input_shape"] == [1, 8, 8] and model["classes"] == 10 and model["dtype"] == "float32"
            want, got = cluster.service.result(uncoded.id), cluster.service.result(coded.id)
            assert list(got) == ["1.weight", "1.bias", "3.weight", "3.bias"]
            assert got["1.weight"].shape == (32, 64) and got["3.bias"].shape == (10,)
            scale = max(np.abs(v).max() for v in want.values())
            assert max(np.abs(got[k] - want[k]).max() for k in want) <= 1e-6 * scale
            assert all(2 not in r.responders for r in cluster.service.history(coded))
            history = cluster.service.history(coded)
            assert history[-1].loss < 0.5 * history[0].loss and history[-1].test_accuracy >= 0.85
        finally:
            await cluster.close()

    asyncio.run(main())
