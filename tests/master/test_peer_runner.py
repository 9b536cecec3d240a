"""The CodeNet launcher in-process: it starts real peers (talking to each other in one process),
watches them, and collects weights equal to single-process training, errors corrected on the way."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from coded.jobs.build import codenet_reference, load_codenet_data
from coded.jobs.spec import CodeNetJob, parse_job

from .inprocess import Cluster

BASE: dict[str, Any] = {
    "kind": "codenet", "strategy": "codenet", "code": {"m": 2, "n": 2, "t": 1},
    "model": {"type": "mlp", "hidden": [16]}, "data": {"type": "digits"},
    "optimizer": {"type": "sgd", "lr": 0.1, "batch": 8}, "iterations": 30, "checkpoint_every": 10,
    "eval_every": 10, "seed": 1,
}


def test_codenet_weights_equal_single_process_training_with_and_without_errors(tmp_path: Path):
    clean = yaml.safe_dump(BASE)
    noisy = yaml.safe_dump({**BASE, "faults": {"soft_errors": {"probability": 0.2, "model": "gaussian",
                                                               "scale": 10.0, "workers": [5]}}})
    parsed = parse_job(clean)
    assert isinstance(parsed, CodeNetJob)
    expected = codenet_reference(parsed, load_codenet_data(parsed))

    async def main() -> None:
        cluster = await Cluster(12, tmp_path).start()
        try:
            for text, corrected in ((clean, False), (noisy, True)):
                job = await cluster.run(text)
                assert job.state == "SUCCEEDED", job.stored.reason
                stats = job.stored.stats
                assert (stats["errors_corrected"] > 0) == corrected and stats["rollbacks"] == 0
                assert [r.iteration for r in cluster.service.history(job)] == [10, 20, 30]
                assert stats["parity_max_deviation"] <= 1e-10
                result = cluster.service.result(job.id)
                for layer, weights in enumerate(expected):
                    got = result[f"layer{layer}"]
                    assert np.abs(got - weights).max() <= 1e-8 * np.abs(weights).max(), layer
        finally:
            await cluster.close()

    asyncio.run(main())
