"""The `coded` command without a cluster: the worker's settings from its arguments, and what the
command prints of the client's plain objects (the integration tests run it against real processes)."""

from __future__ import annotations

import json
import math

import pytest

from coded.cli.output import job_json, measures, status_line, status_row, worker_json, worker_row
from coded.cli.parser import build_parser
from coded.cli.servers import worker_config
from coded.reports import IterationRecord, Job, JobState, Verification, WorkerInfo, WrongReplies


@pytest.mark.parametrize(("argv", "environment", "device"), [
    (["--torch-device", "cuda:1"], "cuda", "cuda:1"),  # the flag wins
    ([], "cuda", "cuda"),  # $CODED_TORCH_DEVICE is its default
    ([], None, "cpu"),
])
def test_the_torch_device_is_a_setting_of_the_worker(monkeypatch, argv, environment, device):
    if environment is None:
        monkeypatch.delenv("CODED_TORCH_DEVICE", raising=False)
    else:
        monkeypatch.setenv("CODED_TORCH_DEVICE", environment)
    config = worker_config(build_parser().parse_args(["worker", "--master", "127.0.0.1:1", *argv]))
    assert config.torch_device == device and config.master == "127.0.0.1:1"


def test_advertise_auto_names_a_master_host_that_does_not_resolve():
    """What a worker pod with a wrong master Service name printed at every restart: the cause, in
    words, with the flag to fix (".invalid" never resolves, RFC 6761)."""
    args = build_parser().parse_args(["worker", "--master", "coded-master.invalid:50051", "--port", "50051",
                                      "--advertise", "auto"])
    with pytest.raises(ValueError, match=r"--advertise auto: the master's host 'coded-master.invalid' does not "
                                         r"resolve \(.+\); is --master coded-master.invalid:50051 right\?"):
        worker_config(args)
    local = worker_config(build_parser().parse_args(["worker", "--master", "127.0.0.1:1", "--port", "50051",
                                                     "--advertise", "auto"]))
    assert local.advertise == "127.0.0.1:50051"


def job(**changes: object) -> Job:
    fields: dict = dict(
        id="abc", kind="gradient_coding", state=JobState.RUNNING, spec="{}", iteration=2, iterations=10,
        elapsed_s=1.5, loss=0.25, reason="", created_unix=0.0, workers=("w0", "w1"), stats={"errors_detected": 1.0},
        verification=Verification("detect", 0, 1e-6, "one reply more than decoding needs"),
        wrong_replies=(WrongReplies(1, "w1", 1, True, 0),))
    return Job(**{**fields, **changes})


def test_json_output_of_a_job_and_a_worker():
    record = IterationRecord(0, math.nan, 1.0, (0,), 1.0, 0.5, math.nan, math.nan, (0.1,), True, 1, 1, (1,), (1,),
                             (), 0)
    assert json.loads(json.dumps(job_json(job(history=(record,))))) == {
        "id": "abc", "state": "RUNNING", "reason": "", "iterations": 2, "elapsed_s": 1.5, "final_loss": 0.25,
        "workers": ["w0", "w1"], "stats": {"errors_detected": 1.0},
        "verification": {"mode": "detect", "errors": 0, "tolerance": 1e-6,
                         "summary": "one reply more than decoding needs"},
        "wrong_replies": [{"position": 1, "worker": "w1", "located": 1, "quarantined": True, "quarantined_after": 0}],
        "history": [{"iteration": 0, "loss": None, "elapsed_s": 1.0, "duration_s": 1.0, "responders": [0],
                     "test_loss": 0.5, "test_accuracy": None, "test_auc": None, "checked": True,
                     "errors_detected": 1, "errors_corrected": 1, "located": [1], "quarantined": [1]}]}
    worker = WorkerInfo("w0", "h:1", True, 0.5, ("abc",), ("torch/lenet",), ())
    assert json.dumps(worker_json(worker)) == ('{"name": "w0", "address": "h:1", "alive": true, "last_seen_s": 0.5, '
                                               '"jobs": ["abc"], "models": ["torch/lenet"], "quarantined_by": []}')
    assert worker_row(worker).split() == ["w0", "h:1", "alive", "torch:", "lenet", "jobs:", "abc"]


def test_status_lines_show_what_applies_to_the_job():
    assert status_line(job()) == "abc RUNNING 2/10 loss 0.25"
    pending = job(state=JobState.PENDING, reason="waiting for 2 workers", loss=math.nan, iteration=0)
    assert status_line(pending) == "abc PENDING 0/10 (waiting for 2 workers)"
    row = status_row(pending)
    assert row.endswith("wrong 1, 1 quarantined  (waiting for 2 workers)") and "nan" not in row
    assert measures(job(kind="matvec")) == "residual 0.25" and measures(job(kind="matmul")) == ""
