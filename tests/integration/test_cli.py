"""The `coded` command as a new user meets it, with real processes: the job id as soon as a job is
accepted, Ctrl-C that says the job goes on, a job short of workers that says so, results that
keep every array, an unreachable master in one line, and status lines that fit each kind of job.
The Python client of the README reads $CODED_TOKEN and names job states."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

from coded.client.client import CodedClient, unreachable
from coded.client.reports import JobState
from coded.cluster.local import free_port
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import sync_channel

from .conftest import follow_until, make_spec

pytestmark = pytest.mark.integration
TOKEN = "token-of-the-readme-tour"


def coded(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coded.cli", *args], capture_output=True, text=True, timeout=180)


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "coded.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def write(path: Path, spec: str) -> str:
    path.write_text(spec)
    return str(path)


def test_the_readme_client_reads_the_token_and_master_from_the_environment_and_names_states(
        cluster, tmp_path, monkeypatch):
    local = cluster(2, token=TOKEN)
    spec = write(tmp_path / "job.yaml", make_spec(workers=2, code={"scheme": "cyclic", "stragglers": 0},
                                                  iterations=3))
    monkeypatch.delenv("CODED_TOKEN", raising=False)
    with CodedClient(local.address) as client, pytest.raises(grpc.RpcError) as refused:
        client.jobs()
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED  # the token is what lets it in
    monkeypatch.setenv("CODED_TOKEN", TOKEN)
    monkeypatch.setenv("CODED_MASTER", local.address)
    with CodedClient() as client:  # as the README's snippet, the address from $CODED_MASTER
        job = client.submit_file(spec)
        final = client.wait(job.id)
        params = client.result(job.id)
    assert final.state == JobState.SUCCEEDED == "SUCCEEDED"
    assert str(final.state) == f"{final.state}" == "SUCCEEDED"
    assert set(params) == {"layer0.weights", "layer0.bias"}


def test_ctrl_c_during_submit_wait_says_the_job_goes_on_and_how_to_follow_or_cancel_it(cluster, tmp_path):
    local = cluster(1)
    spec = write(tmp_path / "job.yaml", make_spec(workers=2, code={"scheme": "cyclic", "stragglers": 0}))
    process = start("submit", spec, "--wait", "--master", local.address)
    try:
        accepted = process.stderr.readline()  # printed once the master has accepted the job
        job_id = re.match(r"submitted (\w+) PENDING: waiting for 2 workers", accepted).group(1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    where = f"--master {local.address}"
    assert err.strip().splitlines()[-1] == (f"interrupted: job {job_id} goes on running on the master; "
                                            f"`coded watch {job_id} {where}` follows it again, "
                                            f"`coded cancel {job_id} {where}` cancels it")
    with local.client() as client:
        assert client.get(job_id).state == JobState.PENDING  # only the client stopped
        assert client.cancel(job_id).state == JobState.CANCELLED


def test_a_job_short_of_workers_says_how_many_are_alive_and_how_long_it_waits(cluster, tmp_path):
    local = cluster(1)
    spec = write(tmp_path / "job.yaml", make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1},
                                                  iterations=3, timeouts={"pending_s": 120}))
    submitted = coded("submit", spec, "--master", local.address)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()

    def waiting(alive: int) -> str:
        return (f"waiting for 3 workers ({alive} registered and alive); it fails if they are not there within "
                "120 s (timeouts.pending_s)")

    assert submitted.stderr.splitlines()[0] == f"submitted {job_id} PENDING: {waiting(1)}"
    listed = coded("status", "--master", local.address).stdout.splitlines()
    [line] = [line for line in listed if line.startswith(job_id)]
    assert line.endswith(f"  ({waiting(1)})") and "nan" not in line
    assert coded("status", job_id, "--master", local.address).stdout.splitlines()[0] == \
        f"{job_id} PENDING 0/3 ({waiting(1)})"
    watch = start("watch", job_id, "--master", local.address)
    try:
        assert watch.stderr.readline().rstrip("\n") == f"{job_id} PENDING: {waiting(1)}"
        local.start_workers([1])
        assert watch.stderr.readline().rstrip("\n") == f"{job_id} PENDING: {waiting(2)}"  # as the count changes
        local.start_workers([2])
        assert watch.stderr.readline().rstrip("\n") == f"{job_id} RUNNING"
        out, _ = watch.communicate(timeout=120)
    finally:
        watch.kill()
    assert watch.returncode == 0 and out.startswith(f"{job_id} SUCCEEDED after 3 iterations, "), out


def test_each_kind_of_job_shows_what_applies_to_it_and_a_npy_file_never_drops_arrays(cluster, tmp_path):
    local = cluster(2)
    gradient = coded("submit", write(tmp_path / "g.yaml", make_spec(workers=2, code={"scheme": "uncoded"},
                                                                    verify="off", iterations=2)),
                     "--wait", "--master", local.address)
    assert gradient.returncode == 0, gradient.stderr
    gradient_id = gradient.stdout.split()[0]
    per = r"[\d.e-]+ s per iteration \(middle half [\d.e-]+-[\d.e-]+ s over \d+; last [\d.e-]+ s\)"
    assert re.fullmatch(rf"{gradient_id} SUCCEEDED after 2 iterations, [\d.]+ s, {per}, loss [\d.e-]+; "
                        r"test loss [\d.e-]+, accuracy [\d.]+, auc [\d.]+\n", gradient.stdout)
    matmul = coded("submit", write(tmp_path / "m.yaml", yaml.safe_dump({
        "kind": "matmul", "workers": 2, "code": {"scheme": "polynomial", "m": 1, "d": 1},
        "inputs": {"generate": {"a": [6, 4], "b": [4, 3]}}})), "--wait", "--master", local.address)
    assert matmul.returncode == 0, matmul.stderr
    matmul_id = matmul.stdout.split()[0]
    assert re.fullmatch(rf"{matmul_id} SUCCEEDED after 1 iteration, [\d.]+ s\n", matmul.stdout)  # no loss nan
    codenet = coded("submit", write(tmp_path / "c.yaml", yaml.safe_dump({
        "kind": "codenet", "strategy": "uncoded", "code": {"m": 1, "n": 1, "t": 0}, "decoders": 1,
        "model": {"hidden": [8]}, "data": {"type": "digits"}, "iterations": 4, "eval_every": 2})),
        "--wait", "--master", local.address)
    assert codenet.returncode == 0, codenet.stderr
    codenet_id = codenet.stdout.split()[0]
    assert re.fullmatch(rf"{codenet_id} SUCCEEDED after 4 iterations, [\d.]+ s, {per}, 0 rollbacks, 0 corrected; "
                        r"test accuracy [\d.]+\n", codenet.stdout)
    status = coded("status", "--master", local.address).stdout
    assert "nan" not in status
    lines = {line.split()[0]: line for line in status.splitlines()}
    assert " loss " in lines[gradient_id] and " 0 rollbacks, 0 corrected; test accuracy " in lines[codenet_id]
    assert re.search(r"1/1 +checks", lines[matmul_id])

    out = tmp_path / "w.npy"
    refused = coded("result", gradient_id, "--out", str(out), "--master", local.address)
    assert refused.returncode == 2 and not out.exists()
    assert refused.stderr == ("error: --out w.npy: a .npy file holds one array, and this result has 2 "
                              "(layer0.weights, layer0.bias); write .npz or .safetensors or .pt to keep them all\n")
    product = coded("result", matmul_id, "--out", str(tmp_path / "C.npy"), "--master", local.address)
    assert product.returncode == 0 and product.stdout.startswith("wrote ") and (tmp_path / "C.npy").exists()


def test_a_pt_file_without_pytorch_is_refused_before_anything_is_fetched(tmp_path):
    # the command as it runs where PyTorch is not installed, whether or not it is here: an entry
    # of None in sys.modules is how Python marks a module that cannot be imported
    without_torch = "import sys; sys.modules['torch'] = None; from coded.cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", without_torch, "result", "abc", "--out", str(tmp_path / "W.pt"),
                          "--master", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=180)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and not (tmp_path / "W.pt").exists()
    assert run.stderr.startswith("error: --out W.pt: a .pt file is written by PyTorch, which is not installed here; "
                                 "write .safetensors instead")
    assert "pip install 'coded-computing[torch]'" in run.stderr


def test_an_unreachable_master_is_one_line_that_says_whether_it_refused_or_timed_out():
    refused = f"127.0.0.1:{free_port()}"
    run = coded("status", "--master", refused)
    assert run.returncode == 2
    assert run.stderr == (f"error: cannot reach the master at {refused}: the connection was refused: nothing "
                          "listens on that port (is `coded master` running there? --master or $CODED_MASTER "
                          "sets the address)\n")
    with socket.socket() as silent:  # the kernel completes connections to it; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        quiet = f"127.0.0.1:{silent.getsockname()[1]}"
        # gRPC gives up on such a connection after 20 s by default (the command's deadline is 60 s);
        # after 1 s here, for the same error sooner
        with grpc.insecure_channel(quiet, options=[("grpc.min_reconnect_backoff_ms", 1000)]) as channel, \
                pytest.raises(grpc.RpcError) as caught:
            master_pb2_grpc.MasterStub(channel).ListJobs(master_pb2.ListJobsRequest(), timeout=60)
    assert unreachable(caught.value, quiet) == (f"cannot reach the master at {quiet}: timed out: something "
                                                "accepted the connection but never answered as a gRPC server")


def test_workers_shows_the_pytorch_architectures_each_worker_builds(cluster):
    local = cluster(1)
    # two workers as they register, one with PyTorch and a plugin and one without: what worker-0
    # builds depends on the extras installed here, so the verdict reads these two only
    registered = {"gpu-box": ["torch/resnet", "torch/lenet", "torch/widenet"], "cpu-box": []}
    with sync_channel(local.address) as channel:
        for port, (name, models) in enumerate(registered.items(), start=1):
            master_pb2_grpc.MasterStub(channel).RegisterWorker(master_pb2.RegisterWorkerRequest(
                name=name, address=f"127.0.0.1:{port}", models=models), timeout=10)
    run = coded("workers", "--master", local.address)
    assert run.returncode == 0, run.stderr
    lines = {line.split()[0]: line for line in run.stdout.splitlines()}
    assert " torch: lenet, resnet, widenet " in lines["gpu-box"] and " numpy only " in lines["cpu-box"]
    assert "worker-0" in lines
    # the two registered by hand never heartbeat: their memory is not known
    assert " memory ? " in lines["gpu-box"] and " memory ? " in lines["cpu-box"]


def test_workers_shows_each_workers_memory_as_its_heartbeat_says(cluster):
    """Issue 41: a worker's resident and peak memory, from its heartbeats, against /proc's."""
    local = cluster(1)
    with local.client() as client:
        deadline = time.monotonic() + 60
        while not any(w.resident_bytes for w in client.workers()):  # until its first heartbeat
            assert time.monotonic() < deadline, "no heartbeat with the worker's memory in 60 s"
            time.sleep(0.1)
    run = coded("workers", "--json", "--master", local.address)
    assert run.returncode == 0, run.stderr
    (worker,) = json.loads(run.stdout)
    # read after the report: VmHWM only grows, and a heartbeat sent between an earlier read and the
    # report could carry a peak one page above it (seen in 2 of 15 runs)
    (process,) = local.workers.values()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{process.pid}/status").read_text().splitlines())
    hwm = int(status["VmHWM"].split()[0]) * 1024
    # an idle worker's heap is tens of MB; the peak it reported is its VmHWM then, at most today's
    assert 10e6 < worker["resident_bytes"] <= worker["peak_resident_bytes"] <= hwm
    text = coded("workers", "--master", local.address).stdout
    assert re.search(r"^worker-0 .* \d+ MB \(peak \d+\) +link \? +jobs: -$", text, re.MULTILINE), text


def test_status_and_watch_show_the_test_scores_of_the_result_and_the_checks_in_one_line(cluster, tmp_path):
    """Issue 40, items 3 and 6: the test loss, accuracy and AUC that `coded status` and `coded
    watch` show are the result's on the test split (computed here with scikit-learn), and what the
    job checks is one line unless --verbose asks for all of it."""
    from sklearn.metrics import log_loss, roc_auc_score

    from coded.ml.data.synthetic import gaussian_mixture

    local = cluster(2)
    spec = write(tmp_path / "job.yaml", make_spec(workers=2, code={"scheme": "cyclic", "stragglers": 0},
                                                  stream={"chunks": 2}, iterations=5))
    submitted = coded("submit", spec, "--wait", "--master", local.address)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[0]
    with local.client() as client:
        job, arrays = client.get(job_id), client.result(job_id)
    [checks] = [line for line in submitted.stderr.splitlines() if line.startswith("checks: ")]
    assert job.verification.mode == "sampled" and job.verification.summary not in checks and len(checks) < 150
    verbose = coded("status", job_id, "--verbose", "--master", local.address)
    assert f"  checks: sampled: {job.verification.summary}\n" in verbose.stdout

    data = gaussian_mixture(3000, 12, 2, seed=3)  # BASE_SPEC's data
    p = 1 / (1 + np.exp(-(data.x_test @ arrays["layer0.weights"][:, 0] + arrays["layer0.bias"][0])))
    expected = {"loss": log_loss(data.y_test, p), "accuracy": np.mean((p > 0.5) == data.y_test),
                "auc": roc_auc_score(data.y_test, p)}
    status = coded("status", job_id, "--master", local.address).stdout.splitlines()[0]
    watch = coded("watch", job_id, "--master", local.address).stdout.splitlines()[0]
    for line in (submitted.stdout.splitlines()[0], status, watch):
        shown = re.search(r"; test loss (\S+), accuracy (\S+), auc (\S+)$", line)
        assert shown is not None, line
        loss, accuracy, auc = map(float, shown.groups())
        assert loss == pytest.approx(expected["loss"], rel=1e-5)
        assert accuracy == pytest.approx(expected["accuracy"], abs=1e-4)
        assert auc == pytest.approx(expected["auc"], abs=1e-4)


def test_the_listing_shows_kinds_and_failures_and_a_jobs_status_its_gone_workers(cluster, tmp_path):
    """Issue 40, item 11."""
    local = cluster(2)
    with local.client() as client:
        failed = client.wait(client.submit(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1},
                                                             timeouts={"pending_s": 0.2})).id)
        assert failed.state == JobState.FAILED
        paced = {"stragglers": {"model": "shifted_exponential", "shift": 0.05, "mean": 0.01}}
        job = client.submit(make_spec(workers=2, code={"scheme": "uncoded"}, verify="off", iterations=100_000,
                                      faults=paced, timeouts={"paused_s": 600}))
        follow_until(client, job.id, lambda e: e.job.iteration >= 1)
        local.kill_worker(1)
        follow_until(client, job.id, lambda e: e.job.state == JobState.PAUSED)
        try:
            status = coded("status", job.id, "--master", local.address).stdout.splitlines()
            listing = coded("status", "--master", local.address).stdout.splitlines()
        finally:
            client.cancel(job.id)
    assert "  workers: 1 of 2 alive (1 gone: worker-1)" in status
    rows = {line.split()[0]: line for line in listing}
    assert rows[failed.id].split()[1:3] == ["FAILED", "gradient_coding"]
    assert rows[failed.id].endswith(f"  ({failed.reason})") and "\n" not in failed.reason
    assert rows[job.id].split()[1:3] == ["PAUSED", "gradient_coding"]


def test_coded_cancel_stops_a_running_job_and_coded_health_says_the_master_serves(cluster, tmp_path):
    """Issue 42: `coded cancel` of a RUNNING job, and `coded health`, on a real cluster."""
    local = cluster(2)
    health = coded("health", "--address", local.address)
    assert health.returncode == 0 and health.stdout == "SERVING\n", health.stderr
    # as every other command, it asks $CODED_MASTER when not given an address (issue 52)
    health = subprocess.run([sys.executable, "-m", "coded.cli", "health"], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "CODED_MASTER": local.address})
    assert health.returncode == 0 and health.stdout == "SERVING\n", health.stderr
    with local.client() as client:
        job = client.submit(make_spec(workers=2, code={"scheme": "uncoded"}, iterations=100_000))
        follow_until(client, job.id, lambda e: e.job.state == JobState.RUNNING and e.job.iteration >= 2)
        cancelled = coded("cancel", job.id, "--master", local.address)
        assert cancelled.returncode == 0 and cancelled.stdout == f"{job.id} CANCELLED\n", cancelled.stderr
        after = client.get(job.id)
        assert after.state == JobState.CANCELLED and 2 <= after.iteration < 100_000
        # the master runs the next job on the same workers
        follow_until(client, client.submit(make_spec(workers=2, code={"scheme": "uncoded"}, iterations=2)).id,
                     lambda e: e.job.state == JobState.SUCCEEDED)
