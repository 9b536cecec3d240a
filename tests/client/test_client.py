"""The client's own checks, before any call: files a spec names but that are missing, reported
with every other problem of the spec; the names it gives job states; what it reads of the master's
replies, as plain objects."""

from __future__ import annotations

import dataclasses
import math

import pytest

from coded.client import CodedClient
from coded.client.convert import event_of, job_of, workers_of
from coded.client.reports import (
    TERMINAL_STATES,
    Evaluation,
    IterationRecord,
    Job,
    JobEvent,
    JobState,
    Verification,
    WorkerInfo,
    WrongReplies,
)
from coded.jobs.spec import JobSpecError
from coded.master.convert import event_proto, job_proto, worker_protos
from coded.master.job import JobEvent as MasterEvent
from coded.master.registry import WorkerInfo as RegisteredWorker
from coded.master.store import Evaluation as StoredEvaluation
from coded.master.store import Record, StoredJob
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


def test_job_states_are_the_api_names_and_print_as_them():
    assert [state.value for state in JobState] == list(master_pb2.JobState.keys())
    job = job_of(master_pb2.Job(id="abc", state=master_pb2.SUCCEEDED, iteration=3))
    assert job.state == JobState.SUCCEEDED == "SUCCEEDED" and job.state in TERMINAL_STATES
    assert str(job.state) == f"{job.state}" == "SUCCEEDED" and f"{job.state:>10}" == " SUCCEEDED"
    assert job.iteration == 3 and job.history == () and job.wrong_replies == ()


def stored_job(kind: str = "gradient_coding", spec: str = '{"model":{"type":"logistic"}}') -> StoredJob:
    return StoredJob(id="abc", kind=kind, spec=spec, state="RUNNING", iterations=10, created=1.5e9, iteration=2,
                     elapsed=3.25, loss=0.5, reason="", workers=["w0", "w1", "w2"],
                     stats={"errors_detected": 1.0},
                     checks={"verification": {"mode": "detect", "errors": 0, "tolerance": 1e-6, "summary": "s"},
                             "located": {"1": 2}, "quarantined": {"1": 1}},
                     test=StoredEvaluation(1, 0.625, 0.875, 0.9))


def test_what_the_master_sends_the_client_reads_as_plain_objects():
    """The master's conversions (coded.master.convert) and the client's (coded.client.convert) agree on
    every field: a job with its history, wrong replies and streamed pieces; an event; workers."""
    records = [Record(0, 0.75, 1.0, 1.0, [0, 2], test_loss=1.5, test_accuracy=0.5, test_auc=0.25,
                      worker_compute=[0.5, 0.25], checked=True, pieces={0: [0, 1], 2: [2]}, stopped_pieces=1,
                      worker_transfer=[0.125, 0.0625], worker_reply=[0.75, 0.875]),
               Record(1, 0.5, 2.0, 1.0, [0, 1], test_loss=0.625, test_accuracy=0.875, test_auc=0.9, detected=1,
                      corrected=1, located=[1], quarantined=[1])]
    job = job_of(job_proto(stored_job(), records))
    assert job == Job(
        id="abc", kind="gradient_coding", state=JobState.RUNNING, spec='{"model":{"type":"logistic"}}', iteration=2,
        iterations=10, elapsed_s=3.25, loss=0.5, reason="", created_unix=1.5e9, workers=("w0", "w1", "w2"),
        stats={"errors_detected": 1.0}, verification=Verification("detect", 0, 1e-6, "s"),
        wrong_replies=(WrongReplies(1, "w1", 2, True, 1),), test=Evaluation(1, 0.625, 0.875, 0.9), history=(
            IterationRecord(0, 0.75, 1.0, (0, 2), 1.0, 1.5, 0.5, 0.25, (0.5, 0.25), True, 0, 0, (), (), ((0, 1), (2,)),
                            1, (0.125, 0.0625), (0.75, 0.875)),
            IterationRecord(1, 0.5, 2.0, (0, 1), 1.0, 0.625, 0.875, 0.9, (), False, 1, 1, (1,), (1,), (), 0)))
    event = event_of(event_proto(MasterEvent(stored_job(), records[1])))
    assert event == JobEvent(dataclasses.replace(job, history=()), job.history[1])
    assert event_of(event_proto(MasterEvent(stored_job()))).record is None
    unmeasured = job_of(job_proto(dataclasses.replace(stored_job(), loss=math.nan),
                                  [Record(0, math.nan, 1.0, 1.0, [0])]))
    assert math.isnan(unmeasured.loss) and all(math.isnan(getattr(unmeasured.history[0], name))
                                               for name in ("loss", "test_loss", "test_accuracy", "test_auc"))
    [worker] = workers_of(master_pb2.ListWorkersReply(workers=worker_protos(
        [RegisteredWorker("w1", "h:1", True, 0.5, ("abc",), ("torch/lenet",))], {"w1": ["abc"]})))
    assert worker == WorkerInfo("w1", "h:1", True, 0.5, ("abc",), ("torch/lenet",), ("abc",))


def test_a_result_says_what_its_parameters_are_computed_in():
    torch = '{"kind":"gradient_coding","model":{"dtype":"float32","name":"lenet","type":"torch"}}'
    job = job_of(job_proto(stored_job(spec=torch)))
    assert job.model == {"dtype": "float32", "name": "lenet", "type": "torch"} and job.parameters_dtype == "float32"
    assert job_of(job_proto(stored_job(spec='{"model":{"type":"mlp"}}'))).parameters_dtype == "float64"
    matmul = job_of(job_proto(stored_job("matmul", '{"kind":"matmul"}')))
    assert matmul.model == {} and matmul.parameters_dtype == "float64"
