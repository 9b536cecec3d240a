"""A local cluster on shaped links: its rounds cross the workers' links (TCP: the data plane's Unix
socket shortcut is per network namespace), clients reach the master on its Unix socket, and
`coded local --link` runs a job end to end and leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coded.client.reports import JobState
from coded.cluster.local import ClusterLinks, LocalCluster
from coded.links.netns import namespaces

from .conftest import wait_until

pytestmark = pytest.mark.links

FEATURES, ITERATIONS = 2000, 12
SPEC = {
    "kind": "gradient_coding", "workers": 2, "code": {"scheme": "uncoded"},  # every worker in every round
    "model": {"type": "logistic"}, "data": {"type": "gaussian_mixture", "samples": 400, "features": FEATURES,
                                            "seed": 1},
    "optimizer": {"type": "nesterov", "lr": 0.05}, "iterations": ITERATIONS, "eval_every": 0, "seed": 3,
}
#: what a round moves at least, each way, on a worker's link: the parameters out, a gradient back
ROUND_BYTES = 8 * FEATURES


def test_a_jobs_rounds_cross_the_workers_shaped_links(tmp_path, untouched):
    cluster = LocalCluster(2, tmp_path / "cluster", links=ClusterLinks("200mbit", master="1gbit"))
    with cluster:
        net = cluster.network
        assert net is not None and cluster.address == f"unix:{tmp_path / 'cluster' / 'master.sock'}"
        before = {host: net.link_stats(host) for host in ("worker-0", "worker-1")}
        with cluster.client() as client:
            assert sorted(w.address.split(":")[0] for w in client.workers()) == sorted(
                net.address(h) for h in ("worker-0", "worker-1"))  # the workers' own namespaces
            final = client.wait(client.submit(yaml.safe_dump(SPEC)).id)
        assert final.state == JobState.SUCCEEDED, final.reason
        for host, earlier in before.items():
            now = net.link_stats(host)
            assert now.sends is not None and now.receives is not None and earlier.sends and earlier.receives
            assert now.sends.rate == now.receives.rate == 200_000_000
            assert now.receives.sent_bytes - earlier.receives.sent_bytes >= ITERATIONS * ROUND_BYTES, (host, now)
            assert now.sends.sent_bytes - earlier.sends.sent_bytes >= ITERATIONS * ROUND_BYTES, (host, now)
        master = net.link_stats("master")
        assert master.sends is not None and master.sends.rate == 1_000_000_000
        assert master.sends.sent_bytes >= 2 * ITERATIONS * ROUND_BYTES
        processes = [cluster.master, *cluster.workers.values()]
    assert all(process is not None and process.poll() is not None for process in processes)
    assert net.leftovers() == []


def test_each_workers_link_is_measured_from_its_replies_and_the_slow_one_shows(tmp_path, untouched):
    """Issue 56: `coded workers` shows a worker's link, as the master measured it from its replies
    (800 kB each: far more than the shaper's bucket); the one slowed 4x shows about 4x slower."""
    from coded.links.slow import SlowLinks

    slow = SlowLinks(["worker-0", "worker-1"], "80mbit", factor=4, slow=1, seed=0)
    slowed, = slow.slow_at(0)
    spec = {**SPEC, "data": {**SPEC["data"], "samples": 20, "features": 100_000}, "iterations": 4}
    cluster = LocalCluster(2, tmp_path / "cluster", links=ClusterLinks("80mbit", master="1gbit", slow=slow))
    with cluster, cluster.client() as client:
        assert all(w.link_bits_per_s == 0 for w in client.workers())  # nothing measured yet
        final = client.wait(client.submit(yaml.safe_dump(spec)).id)
        assert final.state == JobState.SUCCEEDED, final.reason
        rates = {w.name: w.link_bits_per_s for w in client.workers()}
    for name, rate in rates.items():
        expected = 80e6 / (4 if name == slowed else 1)
        assert 0.7 * expected <= rate <= 1.3 * expected, (name, rates)


def test_a_killed_master_restarts_in_its_namespace_on_the_same_socket_and_the_workers_rejoin(tmp_path):
    with LocalCluster(2, tmp_path / "cluster", links=ClusterLinks("100mbit")) as cluster:
        address, port = cluster.address, cluster.master_port
        cluster.kill_master()  # SIGKILL: its socket file stays behind
        assert cluster.unix_socket.is_socket()
        cluster.start_master()
        assert (cluster.address, cluster.master_port) == (address, port)
        cluster.wait_for_workers(2)
        with cluster.client() as client:
            final = client.wait(client.submit(yaml.safe_dump(SPEC)).id)
        assert final.state == JobState.SUCCEEDED, final.reason
        net = cluster.network
    assert net is not None and net.leftovers() == []


def test_a_cluster_whose_link_tc_refuses_fails_to_start_and_leaves_nothing(tmp_path, untouched):
    before = set(namespaces())
    cluster = LocalCluster(1, tmp_path / "cluster", links=ClusterLinks(worker="0bit"))
    with pytest.raises(ValueError, match="cannot shape worker-0's link to 0bit: tc refused: "):
        cluster.start()  # the network was made, the master's link shaped
    assert set(namespaces()) == before and cluster.network is None and cluster.master is None


def launcher_lines(launcher: subprocess.Popen, until: str) -> list[str]:
    """The launcher's lines up to the first that matches ``until``."""
    assert launcher.stdout is not None
    lines: list[str] = []
    while not lines or not re.search(until, lines[-1]):
        lines.append(launcher.stdout.readline())
        assert lines[-1], "".join(lines)  # the launcher ended first
    return lines


def test_coded_local_with_links_runs_a_job_through_its_unix_socket_and_removes_everything(tmp_path, untouched):
    env = {**os.environ, "CODED_TOKEN": "links-secret", "TMPDIR": str(tmp_path)}
    env.pop("CODED_MASTER", None)
    launcher = subprocess.Popen([sys.executable, "-m", "coded", "local", "--workers", "3", "--link", "100mbit",
                                 "--slow-link", "1:4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env)
    try:
        lines = launcher_lines(launcher, "^ready")
        text = "".join(lines)
        prefix = re.search(r"network namespaces (\S+)\*", text)
        address = re.search(r"export CODED_MASTER=(unix:\S+);", text)
        assert prefix and address, text
        assert "each worker's 100mbit, the master's 10gbit" in text and "1 of them at 25mbit" in text, text
        spec = tmp_path / "job.yaml"
        spec.write_text(yaml.safe_dump({**SPEC, "workers": 3}))
        client_env = {**env, "CODED_MASTER": address.group(1)}
        done = subprocess.run([sys.executable, "-m", "coded", "submit", str(spec), "--wait", "--json"],
                              capture_output=True, text=True, timeout=240, env=client_env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["state"] == "SUCCEEDED"
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 0
    assert [ns for ns in namespaces() if ns.startswith(prefix.group(1))] == []
    assert not [d for d in Path("/etc/netns").iterdir() if d.name.startswith(prefix.group(1))]
    assert wait_until(lambda: not list(tmp_path.glob("coded-local-*")))  # its temporary state dir went too
