"""A job's code is built once per process that needs it: the master's parse at submission builds
it, and the submission's checks and the job's runner use that one (a restarted master builds none
for finished jobs); a worker's assignment builds its own once (a retaken position none more); the
client's parse builds none."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from coded import codes
from coded.codes.streaming import StreamLayout
from coded.jobs.messages import Assignment
from coded.jobs.spec import JobSpecError, parse_job, to_json
from coded.master.metrics import MasterMetrics
from coded.master.registry import WorkerRegistry
from coded.master.service import MasterService
from coded.master.store import JobStore
from coded.worker.metrics import WorkerMetrics
from coded.worker.service import WorkerService

GRADIENT = {"kind": "gradient_coding", "workers": 6, "code": {"scheme": "cyclic", "stragglers": 2},
            "model": {"type": "logistic"}, "data": {"type": "gaussian_mixture", "samples": 300, "features": 5},
            "optimizer": {"type": "sgd", "lr": 0.1}, "iterations": 2}
MATRIX = {"workers": 6, "code": {"scheme": "gpd", "m": 2, "n": 2, "d": 1}, "inputs": {"generate": {"a": [8, 8]}}}
JOBS = {
    "whole replies": ({**GRADIENT, "stream": "off"}, {"gradient_code": 1}),
    "streamed": ({**GRADIENT, "stream": {}}, {"layout": 1}),  # no coded messages: the layout alone
    # the master's choice: the layout, and the code only if it chooses whole replies
    "replies chosen": (GRADIENT, {"layout": 1}),
    "matmul": ({**MATRIX, "kind": "matmul", "inputs": {"generate": {"a": [8, 8], "b": [8, 3]}}}, {"matmul_code": 1}),
    "matvec": ({**MATRIX, "kind": "matvec"}, {"matmul_code": 1}),
}


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Codes and layouts built from now on, by what built them."""
    counted: collections.Counter[str] = collections.Counter()

    def counting(name: str, build: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return build(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(codes, "gradient_code", counting("gradient_code", codes.gradient_code))
    monkeypatch.setattr(codes, "matmul_code", counting("matmul_code", codes.matmul_code))
    monkeypatch.setattr(StreamLayout, "__init__", counting("layout", StreamLayout.__init__))
    return counted


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_master_builds_a_jobs_code_once_for_its_checks_and_its_runner(tmp_path: Path, builds, name):
    spec, built = JOBS[name]
    # no workers come: the runner prepares the job (its code, data, model), then fails at once
    text = yaml.safe_dump({**spec, "timeouts": {"pending_s": 0.01}})

    def master() -> MasterService:
        return MasterService(JobStore(tmp_path), WorkerRegistry(lambda address: None), MasterMetrics())

    async def main() -> tuple[str, bool]:
        service = master()
        try:
            job = await service.submit(text, {})
            assert job.task is not None
            await job.task
            return job.stored.reason, job.stored.checks.get("replies", {}).get("streamed", False)
        finally:
            await service.close()

    async def restart() -> str:
        service = master()
        try:
            await service.recover()
            (job,) = service.jobs()
            return job.state
        finally:
            await service.close()

    reason, streamed = asyncio.run(main())
    assert reason.startswith("only 0 of the 6 workers it needs registered")
    if name == "replies chosen" and not streamed:  # whole replies chosen: their code too, once
        built = {**built, "gradient_code": 1}
    assert builds == built
    before = dict(builds)
    assert asyncio.run(restart()) == "FAILED"
    # a finished job: no code built (a streamed job's layout is cheap, and checked by every parse)
    assert {name: count for name, count in builds.items() if name != "layout"} == \
        {name: count for name, count in before.items() if name != "layout"}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_a_worker_builds_a_jobs_code_once_and_a_retaken_position_reuses_it(builds, name):
    spec, built = JOBS[name]
    text = to_json(parse_job(yaml.safe_dump(spec)))
    builds.clear()  # the master's, above

    async def main() -> None:
        service = WorkerService(WorkerMetrics())
        for index in (1, 1):  # a position, then the same position retaken
            await service.assign(Assignment("job", index, text, features=5, classes=2))

    asyncio.run(main())
    assert builds == built


def test_the_clients_parse_leaves_the_code_to_the_master(builds):
    text = yaml.safe_dump({**GRADIENT, "stream": "off"})
    spec = parse_job(text, build_code=False)
    assert builds == {}
    assert spec.gradient_code.k == 6 and builds == {"gradient_code": 1}  # built when first needed, then kept
    assert spec.gradient_code is spec.gradient_code and builds == {"gradient_code": 1}
    # what the master refuses is still refused there, and everything else here
    frc = yaml.safe_dump({**GRADIENT, "stream": "off", "code": {"scheme": "frc", "stragglers": 2}})
    assert parse_job(frc, build_code=False).code.scheme == "frc"
    with pytest.raises(JobSpecError, match=r"^code: frc needs \(s\+1\) to divide n"):
        parse_job(frc)
    with pytest.raises(JobSpecError, match=r"^iterations: "):
        parse_job(yaml.safe_dump({**GRADIENT, "iterations": 0}), build_code=False)


def test_a_copy_of_a_spec_keeps_its_code_and_specs_compare_by_their_fields():
    spec = parse_job(yaml.safe_dump({**GRADIENT, "stream": "off"}))
    again = parse_job(to_json(spec))
    assert again == spec and again.gradient_code is not spec.gradient_code  # each parse builds its own
    assert spec.model_copy(update={"name": "renamed"}).gradient_code is spec.gradient_code
    assert np.array_equal(again.gradient_code.coefficients, spec.gradient_code.coefficients)
