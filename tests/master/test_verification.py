"""Checking replies in-process, against real worker services: a lying worker is located, decoded
around and quarantined; default detection never applies a wrong gradient nor returns a wrong
product; quarantine survives a master restart as the uninterrupted job decided it."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from coded.master.service import MasterService
from coded.master.store import JobStore

from .inprocess import Cluster
from .test_matmul_runner import FILES, A, B, matmul_spec

SPEC: dict[str, Any] = {
    "kind": "gradient_coding", "workers": 8, "code": {"scheme": "cyclic", "stragglers": 2},
    "model": {"type": "logistic", "l2": 0.001},
    "data": {"type": "gaussian_mixture", "samples": 2000, "features": 10, "classes": 2, "seed": 3},
    "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 12, "eval_every": 0, "seed": 5,
    "stream": "off",  # whole replies, checked against the code (tests/master/test_streamed.py: streamed)
}
LIAR = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 1.0, "workers": [3]}}


def spec(**changes: Any) -> str:
    out = copy.deepcopy(SPEC)
    out.update(changes)
    return yaml.safe_dump(out)


def params(cluster: Cluster, job_id: str) -> np.ndarray:
    arrays = cluster.service.result(job_id)
    return np.concatenate([arrays[k].ravel() for k in sorted(arrays)])


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def run(tmp_path: Path, workers: int, body: Any) -> None:
    async def main() -> None:
        cluster = await Cluster(workers, tmp_path).start()
        try:
            await body(cluster)
        finally:
            await cluster.close()

    asyncio.run(main())


def test_a_lying_worker_is_located_corrected_and_quarantined(tmp_path):
    async def body(cluster: Cluster) -> None:
        clean = await cluster.run(spec())
        assert clean.state == "SUCCEEDED", clean.stored.reason
        assert all(r.checked and not r.located for r in cluster.service.history(clean))
        job = await cluster.run(spec(faults=LIAR, verify={"errors": 1}, code={"scheme": "cyclic", "stragglers": 0}))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        history = cluster.service.history(job)
        # no stragglers and errors: 1 waits for all 8 (the code is built for s = 2): worker 3 answers,
        # is located in every iteration until it is
        # taken out after being located more than twice (the default limit) within 10 iterations
        assert [r.located for r in history] == [[3]] * 3 + [[]] * 9
        assert [r.quarantined for r in history] == [[], [], [3]] + [[]] * 9
        assert all(3 not in r.responders for r in history) and all(r.checked for r in history)
        assert job.stored.checks["quarantined"] == {"3": 2} and job.stored.checks["located"] == {"3": 3}
        assert job.stored.stats["errors_corrected"] == 3 and job.stored.stats["workers_quarantined"] == 1
        name = job.stored.workers[3]
        assert cluster.metrics.wrong_replies.labels(job.id, name)._value.get() == 3
        assert cluster.metrics.quarantines.labels(job.id, name)._value.get() == 1
        assert cluster.service.quarantined_by() == {name: [job.id]}
        # after the quarantine it is not even called
        assert len([c for c in cluster.worker(3, job).completed if c[0] == job.id]) == 3

    run(tmp_path, 8, body)


def test_default_detection_waits_for_more_replies_and_never_applies_a_wrong_gradient(tmp_path):
    # one straggler not waited for: 7 replies decode and check (the code is built for s = 2); worker
    # 7 replies last (a gate, not a delay), so the first 7 replies hold worker 3's: a disagreement,
    # settled by waiting for worker 7
    one = {"scheme": "cyclic", "stragglers": 1}

    async def body(cluster: Cluster) -> None:
        cluster.reply_last(7)
        clean = await cluster.run(spec(code=one))
        job = await cluster.run(spec(faults=LIAR, code=one))
        assert job.state == "SUCCEEDED", job.stored.reason
        assert job.stored.checks["verification"]["mode"] == "detect"
        assert relative(params(cluster, job.id), params(cluster, clean.id)) <= 1e-8
        history = cluster.service.history(job)
        assert [r.located for r in history[:3]] == [[3]] * 3 and history[2].quarantined == [3]
        assert all(7 in r.responders for r in history[:3])  # it waited for the eighth reply
        assert all(r.checked and not r.located and 3 not in r.responders for r in history[3:])
        # frc with no straggler is built for s = 1 and holds each partition twice: it sees the
        # disagreement, cannot tell which of the two replicas is wrong, and fails instead of guessing
        job = await cluster.run(spec(code={"scheme": "frc", "stragglers": 0}, faults=LIAR))
        assert job.state == "FAILED", job.stored.reason
        assert job.stored.reason.startswith("decoding failure at iteration 0: ")
        assert "wrong" in job.stored.reason and job.stored.iteration == 0
        assert cluster.metrics.decoding_failures.labels(job.id)._value.get() == 1

    run(tmp_path, 8, body)


def test_a_bit_flipped_product_is_never_returned_unchecked(tmp_path):
    flips = {"soft_errors": {"probability": 1.0, "model": "bitflip", "workers": [2]}}

    async def body(cluster: Cluster) -> None:
        # no verify section: R = 4 + 1 results are checked, a disagreement waits for a sixth
        job = await cluster.run(matmul_spec(faults=flips), FILES)
        assert job.state == "SUCCEEDED", job.stored.reason
        assert relative(cluster.service.result(job.id)["product"], A @ B) <= 1e-9
        record = cluster.service.history(job)[0]
        assert record.checked and record.located == [2] and 2 not in record.responders
        # with R + 1 workers there is nobody to wait for: detected, a decoding failure, no product
        job = await cluster.run(matmul_spec(faults=flips, workers=5), FILES)
        assert job.state == "FAILED" and job.stored.reason.startswith("decoding failure in round 0")
        # verify: off says so, and is what the old behaviour was
        job = await cluster.run(matmul_spec(verify="off", workers=4), FILES)
        assert job.state == "SUCCEEDED" and job.stored.checks["verification"]["mode"] == "off"
        assert not cluster.service.history(job)[0].checked

    run(tmp_path, 8, body)


def test_codes_without_redundancy_say_what_they_check(tmp_path):
    async def body(cluster: Cluster) -> None:
        for code, mode in (({"scheme": "uncoded"}, "unchecked"), ({"scheme": "kasync", "stragglers": 2}, "unchecked"),
                           ({"scheme": "cyclic", "stragglers": 2}, "detect")):
            job = await cluster.run(spec(code=code, iterations=3))
            assert job.state == "SUCCEEDED", job.stored.reason
            verification = job.stored.checks["verification"]
            assert verification["mode"] == mode, verification
            assert all(r.checked == (mode == "detect") for r in cluster.service.history(job))
            assert ("non-finite" in verification["summary"]) == (mode == "unchecked")

    run(tmp_path, 8, body)


def test_quarantine_survives_a_master_restart_as_the_uninterrupted_job_decided(tmp_path):
    text = spec(faults=LIAR, verify={"errors": 1}, iterations=30, checkpoint_every=5)

    async def body(cluster: Cluster) -> None:
        reference = await cluster.run(text)
        assert reference.state == "SUCCEEDED", reference.stored.reason
        job = await cluster.service.submit(text, {})
        async for event in cluster.service.watch(job.id):
            if event.job.iteration >= 12:
                break
        await cluster.service.close()  # the master stops; its job stays RUNNING in the state dir
        cluster.service = MasterService(JobStore(tmp_path / "master"), cluster.registry, cluster.metrics)
        await cluster.service.recover()
        resumed = cluster.service.get(job.id)
        assert resumed.task is not None
        await asyncio.wait_for(asyncio.shield(resumed.task), 120)
        assert resumed.state == "SUCCEEDED", resumed.stored.reason
        assert np.array_equal(params(cluster, job.id), params(cluster, reference.id))
        history = cluster.service.history(resumed)
        assert [r.iteration for r in history] == list(range(30))
        assert [r.located for r in history] == [[3]] * 3 + [[]] * 27
        assert resumed.stored.checks["quarantined"] == {"3": 2}
        # the resumed runner never called the quarantined worker
        assert len([c for c in cluster.worker(3, resumed).completed if c[0] == job.id]) == 3

    run(tmp_path, 8, body)
