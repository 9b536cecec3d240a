"""The `coded` command without a cluster: the worker's settings from its arguments, and what the
command prints of the client's plain objects (the integration tests run it against real processes)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from coded.cli.output import (
    checks_lines,
    finished_line,
    job_json,
    measures,
    status_line,
    status_row,
    worker_json,
    worker_row,
)
from coded.cli.parser import build_parser
from coded.cli.servers import worker_config
from coded.client.reports import IterationRecord, Job, JobState, Verification, WorkerInfo, WrongReplies


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
        "test": None, "workers": ["w0", "w1"], "stats": {"errors_detected": 1.0},
        "verification": {"mode": "detect", "errors": 0, "tolerance": 1e-6,
                         "summary": "one reply more than decoding needs"},
        "seconds_per_iteration": None,  # one iteration: no gap of the job's clock yet
        "wrong_replies": [{"position": 1, "worker": "w1", "located": 1, "quarantined": True, "quarantined_after": 0}],
        "history": [{"iteration": 0, "loss": None, "elapsed_s": 1.0, "duration_s": 1.0, "responders": [0],
                     "test_loss": 0.5, "test_accuracy": None, "test_auc": None, "checked": True,
                     "errors_detected": 1, "errors_corrected": 1, "located": [1], "quarantined": [1]}]}
    worker = WorkerInfo("w0", "h:1", True, 0.5, ("abc",), ("torch/lenet",), (), 71_400_000, 230_000_000)
    assert json.dumps(worker_json(worker)) == ('{"name": "w0", "address": "h:1", "alive": true, "last_seen_s": 0.5, '
                                               '"jobs": ["abc"], "models": ["torch/lenet"], "quarantined_by": [], '
                                               '"resident_bytes": 71400000, "peak_resident_bytes": 230000000, '
                                               '"unusable": "", "link_bits_per_s": 0.0}')
    assert worker_row(worker).split() == ["w0", "h:1", "alive", "torch:", "lenet", "71", "MB", "(peak", "230)",
                                          "link", "?", "jobs:", "abc"]
    # issue 56: `coded workers` shows each worker's link as the master measured it
    assert "link 95.2 Mbit/s" in worker_row(dataclasses.replace(worker, link_bits_per_s=95.2e6))
    unusable = dataclasses.replace(worker, alive=False, unusable="3 calls in a row failed")
    row = worker_row(unusable)
    assert row.endswith("jobs: abc  UNUSABLE: 3 calls in a row failed") and " gone " in row


def test_status_lines_show_what_applies_to_the_job():
    assert status_line(job()) == "abc RUNNING 2/10 loss 0.25"
    pending = job(state=JobState.PENDING, reason="waiting for 2 workers", loss=math.nan, iteration=0)
    assert status_line(pending) == "abc PENDING 0/10 (waiting for 2 workers)"
    row = status_row(pending)
    assert row.endswith("wrong 1, 1 quarantined  (waiting for 2 workers)") and "nan" not in row
    assert measures(job(kind="matvec")) == "residual 0.25" and measures(job(kind="matmul")) == ""


def test_status_and_watch_show_the_latest_test_scores_where_there_are_some():
    """Issue 40, item 3: the test scores the master evaluates, not only the training loss."""
    from coded.client.reports import Evaluation

    binary = job(test=Evaluation(299, 0.25, 0.9133, 0.97125))
    assert status_line(binary) == "abc RUNNING 2/10 loss 0.25; test loss 0.25, accuracy 0.9133, auc 0.9712"
    assert finished_line(binary).endswith(", loss 0.25; test loss 0.25, accuracy 0.9133, auc 0.9712")
    regression = job(test=Evaluation(9, 1.5, math.nan, math.nan))
    assert measures(regression) == "loss 0.25; test loss 1.5"
    codenet = job(kind="codenet", stats={"rollbacks": 1.0, "errors_corrected": 2.0},
                  test=Evaluation(20, math.nan, 0.875, math.nan))
    assert measures(codenet) == "1 rollback, 2 corrected; test accuracy 0.8750"
    assert measures(job()) == "loss 0.25"  # not evaluated yet
    assert job_json(binary)["test"] == {"iteration": 299, "loss": 0.25, "accuracy": 0.9133, "auc": 0.97125}
    assert job_json(regression)["test"]["accuracy"] is None and job_json(job())["test"] is None


def test_a_job_says_what_it_checks_in_one_line_and_in_full_with_verbose():
    """Issue 40, item 6: the checks paragraph only on request."""
    paragraph = "each iteration sums one copy of every piece; " * 20
    sampled = job(verification=Verification("sampled", 0, 1e-2, paragraph),
                  stats={"iterations_checked": 59.0, "iterations_unchecked": 41.0})
    short = checks_lines(sampled)
    assert paragraph not in "\n".join(short) and all(len(line) <= 120 for line in short)
    assert short[0].startswith("  checks: sampled: ") and "--verbose" in short[0]
    assert short[1] == "  iterations checked 59, unchecked 41; wrong replies detected 0, corrected 0"
    full = checks_lines(sampled, verbose=True)
    assert full[0] == f"  checks: sampled: {paragraph}" and full[1:] == short[1:]
    for mode in ("detect", "correct", "sampled", "strict", "unchecked", "off", "codenet"):
        line = checks_lines(job(verification=Verification(mode, 1, 0.0, paragraph)))[0]
        assert len(line) <= 120 and paragraph not in line, mode


def test_the_job_listing_shows_each_jobs_kind_and_why_a_failed_one_failed():
    """Issue 40, item 11."""
    reason = "decoding failure at iteration 7: the replies of workers [1, 4] disagree " + "x" * 200 + "\nmore"
    failed = status_row(job(state=JobState.FAILED, reason=reason))
    assert failed.split()[:3] == ["abc", "FAILED", "gradient_coding"]
    shown = failed.split("  (", 1)[1]
    assert shown.endswith("…)") and reason.startswith(shown[:-2]) and len(shown) < 100
    assert status_row(job(kind="matmul")).split()[:3] == ["abc", "RUNNING", "matmul"]
    assert "not a wait" not in status_row(job(state=JobState.SUCCEEDED, reason="not a wait"))


def test_a_jobs_status_says_which_of_its_workers_are_gone():
    """Issue 40, item 11: what `coded workers` knows, in the job's own status."""
    from coded.cli.output import workers_line

    def worker(name: str, alive: bool) -> WorkerInfo:
        return WorkerInfo(name, "h:1", alive, 0.1, (), (), ())

    running = job(workers=("w0", "w1", "w2", "w3"))
    registered = [worker("w0", True), worker("w1", False), worker("w2", True)]  # w3: not registered at all
    assert workers_line(running, registered) == "  workers: 2 of 4 alive (2 gone: w1, w3)"
    assert workers_line(running, [worker(n, True) for n in running.workers]) is None
    assert workers_line(job(state=JobState.SUCCEEDED, workers=("w0",)), []) is None  # it no longer needs them


def test_coded_submit_prints_each_problem_of_a_spec_on_a_line_of_its_own(tmp_path, capsys):
    """Issue 40: every problem of a spec at once, one line each, naming its field (the spec is
    refused before any master is reached)."""
    from coded.cli import main

    spec = tmp_path / "job.yaml"
    spec.write_text("kind: gradient_coding\nworkers: 4\ncode: {scheme: cyclic, stragglers: 5}\n"
                    "model: {type: logistic}\ndata: {type: gaussian_mixture, samples: 100, features: 4}\n"
                    "optimizer: {type: sgd, lr: -1}\niterations: 10\n")
    assert main(["submit", str(spec), "--master", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: optimizer.lr: Input should be greater than 0",
        "error: code.stragglers: must be < workers (got 5, workers=4)",
    ]
