"""Matrix jobs: matmul and matvec are classes of their own, told apart by ``kind`` as users write
it; each rule they follow gives the message that names its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from coded.jobs.matrices import load_matrices
from coded.jobs.measures import LOSS_WORDS
from coded.jobs.spec import KINDS, JobSpecError, MatmulJob, MatvecJob, parse_job, to_json

MATMUL = {"kind": "matmul", "workers": 6, "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 2},
          "inputs": {"generate": {"a": [8, 6], "b": [6, 4]}}}
MATVEC = {"kind": "matvec", "workers": 6, "code": {"scheme": "gpd", "m": 2, "n": 2, "d": 1},
          "inputs": {"generate": {"a": [8, 8]}}}


def parse(spec: dict[str, Any], **changes: Any) -> MatmulJob | MatvecJob:
    job = parse_job(yaml.safe_dump({**spec, **changes}))
    assert isinstance(job, MatmulJob | MatvecJob)
    return job


def test_each_kind_is_its_own_class_and_its_json_is_what_it_was():
    matmul, matvec = parse(MATMUL), parse(MATVEC)
    assert type(matmul) is MatmulJob and KINDS["matmul"] is MatmulJob and matmul.iterations == 1
    assert type(matvec) is MatvecJob and KINDS["matvec"] is MatvecJob and matvec.iterations == 50
    assert parse(MATVEC, driver={"rounds": 7}).iterations == 7
    for job in (matmul, matvec):
        written = json.loads(to_json(job))
        assert written["kind"] == job.kind and written["driver"] is None  # the field as before
        assert parse_job(to_json(job)) == job
    assert parse(MATMUL, driver=None) == matmul  # stored specs name matmul's driver: null
    assert (LOSS_WORDS["matmul"], LOSS_WORDS["matvec"]) == (None, "residual")
    assert LOSS_WORDS.keys() == KINDS.keys()  # every kind says what it measures


@pytest.mark.parametrize(("spec", "changes", "message"), [
    (MATMUL, {"driver": {"rounds": 3}}, "driver: only matvec jobs have a driver"),
    (MATMUL, {"inputs": {"generate": {"a": [8, 6]}}}, "inputs: a matmul job needs b (a file or generate.b)"),
    (MATMUL, {"inputs": {"a": "A.npy"}}, "inputs: a matmul job needs b (a file or generate.b)"),
    (MATMUL, {"inputs": {"generate": {"a": [1 << 15, 1 << 14], "b": [1 << 14, 2]}}},
     f"inputs.generate: at most {1 << 28} elements per matrix"),
    (MATMUL, {"inputs": {"generate": {"a": [8, 6], "b": [5, 4]}}},
     "inputs.generate: inner dimensions differ: a is [8, 6], b is [5, 4]"),
    (MATVEC, {"code": {"scheme": "gpd", "m": 2, "n": 1, "d": 2}},
     "code.d: a matrix-vector product has one column block (d = 1)"),
    (MATVEC, {"inputs": {"generate": {"a": [8, 8], "b": [8, 1]}}},
     "inputs: a matvec job multiplies a by its own vectors; give no b"),
    (MATVEC, {"inputs": {"a": "A.npy", "b": "B.npy"}},
     "inputs: a matvec job multiplies a by its own vectors; give no b"),
    (MATVEC, {"inputs": {"generate": {"a": [8, 6], "symmetric": True}}}, "inputs.generate.symmetric: needs a square a"),
    (MATVEC, {"inputs": {"generate": {"a": [8, 6]}}}, "inputs.generate.a: power iteration needs a square matrix"),
    (MATMUL, {"code": {"scheme": "uncoded"}}, "verify: uncoded has no redundancy to check its product with; set "
                                              "`verify: off` to run it unchecked, or use a code (e.g. gpd)"),
    (MATMUL, {"workers": 4}, "workers: gpd needs at least 5 workers (recovery threshold 4 + 1 to check it), got 4; "
                             "or set `verify: off` to run it unchecked"),
    (MATVEC, {"verify": {"errors": 1}}, "workers: gpd needs at least 7 workers (recovery threshold 5 + 2 to check "
                                        "it), got 6"),
    (MATMUL, {"faults": {"slowdown": {"model": "fixed", "workers": [6], "factor": 2}}},
     "faults: worker 6 does not exist (workers are 0..5)"),
    (MATMUL, {"faults": {"soft_errors": {"probability": 0.1, "partition": 0}}},
     "faults.soft_errors.partition: matmul jobs have no data partitions (only gradient_coding jobs do); drop the "
     "field"),
    (MATVEC, {"faults": {"soft_errors": {"probability": 0.1, "partition": 0}}},
     "faults.soft_errors.partition: matvec jobs have no data partitions"),
    (MATVEC, {"workers": 96, "code": {"scheme": "gpd", "m": 8, "n": 8, "d": 1, "points": "chebyshev"}}, "code: "),
])
def test_each_rule_names_its_field(spec, changes, message):
    with pytest.raises(JobSpecError) as error:
        parse(spec, **changes)
    assert str(error.value).startswith(message), str(error.value)


def test_power_iteration_needs_a_square_uploaded_matrix_with_or_without_a_driver_section(tmp_path: Path):
    np.save(tmp_path / "A.npy", np.ones((4, 3)))
    for driver in ({}, {"driver": {"rounds": 5}}):
        job = parse(MATVEC, inputs={"a": "A.npy"}, **driver)
        with pytest.raises(JobSpecError, match=r"^inputs.a: power iteration needs a square matrix \(got \(4, 3\)\)"):
            load_matrices(job, {"A.npy": tmp_path / "A.npy"})
    matmul = parse(MATMUL, inputs={"a": "A.npy", "b": "A.npy"}, code={"scheme": "gpd", "m": 2, "n": 1, "d": 1})
    with pytest.raises(JobSpecError, match=r"^inputs: inner dimensions differ"):  # not a squareness rule
        load_matrices(matmul, {"A.npy": tmp_path / "A.npy"})
