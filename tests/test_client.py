"""The client's own checks, before any call: files a spec names but that are missing, reported
with every other problem of the spec; the names it gives job states."""

from __future__ import annotations

import pytest

from coded.client import CodedClient, Job, JobState
from coded.jobs.spec import JobSpecError
from coded.v1 import master_pb2

SPEC = """kind: gradient_coding
workers: 3
code: {scheme: cyclic, stragglers: 1}
model: {type: logistic}
data: {type: npz, path: train.npz}
optimizer: {type: sgd, lr: 0.1}
iterations: 2
"""


def test_a_missing_file_is_named_by_its_field(tmp_path):
    (tmp_path / "job.yaml").write_text(SPEC)
    with CodedClient("127.0.0.1:1") as client, pytest.raises(JobSpecError) as error:
        client.submit_file(tmp_path / "job.yaml")  # never reaches the (absent) master
    assert str(error.value) == "data.path: cannot read 'train.npz' next to job.yaml: No such file or directory"


def test_a_missing_file_and_mistakes_in_fields_are_reported_in_one_answer(tmp_path):
    """docs/jobs.md: every problem at once. A missing file does not hide the mistakes in fields."""
    spec = (SPEC.replace("lr: 0.1", "lr: -1").replace("iterations: 2", "iterations: 0")
            .replace("data: {type: npz, path: train.npz}", "data: {type: images, format: idx, train: [x.gz, y.gz]}"))
    (tmp_path / "job.yaml").write_text(spec)
    (tmp_path / "x.gz").write_bytes(b"")  # there; y.gz is not
    with CodedClient("127.0.0.1:1") as client, pytest.raises(JobSpecError) as error:
        client.submit_file(tmp_path / "job.yaml")
    assert str(error.value).split("; ") == [
        "data.train[1]: cannot read 'y.gz' next to job.yaml: No such file or directory",
        "optimizer.lr: Input should be greater than 0",
        "iterations: Input should be greater than or equal to 1",
    ]


def test_a_missing_file_does_not_hide_the_rules_that_check_valid_fields(tmp_path):
    """The job's own rules (stragglers < workers) run once its fields are valid; a file's field
    in error would keep them from running, so they are checked again without the files."""
    (tmp_path / "job.yaml").write_text(SPEC.replace("stragglers: 1", "stragglers: 3"))
    with CodedClient("127.0.0.1:1") as client, pytest.raises(JobSpecError) as error:
        client.submit_file(tmp_path / "job.yaml")
    assert str(error.value).split("; ") == [
        "data.path: cannot read 'train.npz' next to job.yaml: No such file or directory",
        "code.stragglers: must be < workers (got 3, workers=3)",
    ]


def test_job_states_print_as_their_names_and_equal_the_api_numbers():
    assert {state.name: state.value for state in JobState} == dict(master_pb2.JobState.items())
    job = Job(master_pb2.Job(id="abc", state=master_pb2.SUCCEEDED, iteration=3))
    assert str(job.state) == f"{job.state}" == "SUCCEEDED" and f"{job.state:>10}" == " SUCCEEDED"
    assert job.state == master_pb2.SUCCEEDED and job.iteration == 3  # the message's fields, as they were
