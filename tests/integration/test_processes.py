"""The processes themselves: health, reflection, graceful SIGTERM, `coded local`, `coded demo`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from coded.client import CodedClient
from coded.cluster.local import free_port
from coded.wire.rpc import Security

pytestmark = pytest.mark.integration


def services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                            timeout=10)
        return {s.name for reply in replies for s in reply.list_services_response.service}


def health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status


def test_health_reflection_and_graceful_sigterm(cluster):
    local = cluster(1)
    master, worker = local.address, f"127.0.0.1:{local.worker_ports[0]}"
    assert {"coded.v1.Master", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services(master)
    assert "coded.v1.Worker" in services(worker)
    # the names docs/jobs.md ("Uploaded files", Health) and master.proto give client authors
    for address, names in ((master, ["", "coded.v1.Master"]), (worker, ["", "coded.v1.Worker", "coded.v1.Peer"])):
        assert [health(address, name) for name in names] == [health_pb2.HealthCheckResponse.SERVING] * len(names)
        with pytest.raises(grpc.RpcError) as caught:
            health(address, "coded.v1.Nothing")
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert caught.value.details() == "unknown service 'coded.v1.Nothing'"
    for process in (local.workers[0], local.master):
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_coded_local_runs_and_ctrl_c_stops_everything(tmp_path):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "coded.cli", "local", "--workers", "2", "--port", str(port),
                                "--state-dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "CODED_TOKEN": "local-token"})
    try:
        with CodedClient(f"127.0.0.1:{port}", Security(token="local-token")) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if sum(w.alive for w in client.workers()) == 2:
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
            assert sum(w.alive for w in client.workers()) == 2
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.FutureTimeoutError):
        grpc.channel_ready_future(channel).result(timeout=1)


def test_coded_demo_compares_the_schemes(tmp_path):
    run = subprocess.run([sys.executable, "-m", "coded.cli", "demo", "--workers", "4", "--iterations", "8",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    table = (tmp_path / "demo.txt").read_text().splitlines()
    assert [line.split()[0] for line in table[1:]] == ["uncoded", "ignore_stragglers", "cyclic"]
    assert (tmp_path / "demo.png").read_bytes().startswith(b"\x89PNG")


def test_coded_plan_fits_a_jobs_history_and_recommends_a_code_that_builds(cluster):
    from .conftest import make_spec

    local = cluster(4)
    with local.client() as client:
        clean = client.wait(client.submit(make_spec(workers=4, code={"scheme": "uncoded"}, iterations=8)).id)
        slow = client.wait(client.submit(make_spec(
            workers=4, code={"scheme": "uncoded"}, iterations=3,
            faults={"stragglers": {"model": "fixed", "workers": [1], "delay": 0.05}})).id)

    def plan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coded.cli", "plan", "--master", local.address, *args],
                              capture_output=True, text=True, timeout=120)

    run = plan("--from-job", clean.id, "--delay", "0.02:0.1")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    ranked = [line for line in lines if line.strip()[:1].isdigit()]
    # n = 4, checked by default: uncoded, the 6 (s, m) with s + 1 + m <= 4 (d = s + 1 + m partitions), and
    # cyclic with streamed replies (its default)
    assert len(ranked) == 8 and "uncoded" in run.stdout and "cyclic streamed" in run.stdout
    times = [float(re.search(r"1/\d+\s+(\S+)", line).group(1)) for line in ranked]  # s/iteration
    assert times == sorted(times)
    assert lines[-1].startswith("recommended code: {")
    unchecked = plan("--from-job", clean.id, "--delay", "0.02:0.1", "--verify", "off", "--top", "20")
    assert unchecked.returncode == 0, unchecked.stderr
    # uncoded, the 9 other (s, m) with s + m <= 4, and cyclic streamed
    assert len([line for line in unchecked.stdout.splitlines() if line.strip()[:1].isdigit()]) == 11
    refused = plan("--from-job", slow.id)
    assert refused.returncode == 2 and "injects stragglers" in refused.stderr


@pytest.mark.slow  # four jobs on six workers: make test-slow
def test_coded_plan_fits_the_same_compute_from_jobs_of_every_code_and_reply_mode(cluster):
    """A worker's seconds cover what its code and mode made it compute: d partitions with whole
    replies, about one partition's pieces when streamed (whatever d it holds). Fitted from an
    uncoded, a streamed cyclic, a whole cyclic and a ye_abbe job on the same data, one partition's
    compute (CPU seconds) comes out alike; a planner that took a streamed worker for d partitions
    fitted a quarter of it and recommended codes that hold many more (issue 40)."""
    import re

    from .conftest import make_spec

    local = cluster(6)
    data = {"type": "gaussian_mixture", "samples": 30000, "features": 200, "classes": 10, "seed": 1}
    codes = {"uncoded": ({"scheme": "uncoded"}, None), "cyclic streamed": ({"scheme": "cyclic", "stragglers": 2}, None),
             "cyclic whole": ({"scheme": "cyclic", "stragglers": 2}, "off"),
             "ye_abbe m=2": ({"scheme": "ye_abbe", "stragglers": 1, "m": 2}, None)}
    fitted = {}
    with local.client() as client:
        for name, (code, stream) in codes.items():
            changes = {"stream": stream} if stream else {}
            job = client.wait(client.submit(make_spec(workers=6, model={"type": "softmax"}, data=data, code=code,
                                                      iterations=12, **changes)).id)
            assert job.state.name == "SUCCEEDED", (name, job.reason)
            run = subprocess.run([sys.executable, "-m", "coded.cli", "plan", "--master", local.address,
                                  "--from-job", job.id], capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            found = re.search(r"compute ([0-9.e+-]+) s(?: \+ Exp\(mean ([0-9.e+-]+) s\))?", run.stdout)
            assert found, run.stdout
            fitted[name] = float(found.group(1)) + float(found.group(2) or 0)  # the fitted mean
            assert "each responder computed" in run.stdout
    for name, seconds in fitted.items():
        assert 0.5 <= seconds / fitted["uncoded"] <= 2, (name, fitted)
