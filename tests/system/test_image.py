"""The container image, built and run for real: this test starts its own Docker engine
(`dockerd --bridge=none --iptables=false`, state in a temporary directory), builds a base image
locally (debootstrap + `docker import`, no registry needed) and the project image on it (the
Dockerfile's BASE build argument), runs a master and workers as containers with host networking
through the Docker SDK, completes a job, and removes everything it started. `make test-image`
installs Debian's docker.io and debootstrap first."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from coded.client import CodedClient
from coded.local import free_port
from coded.reports import JobState

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.image
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"


def until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # not ready yet
            pass
        time.sleep(0.5)  # polling a condition
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    import docker

    for tool in ("dockerd", "debootstrap"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run this test with `make test-image`")
    root = tmp_path_factory.mktemp("docker")
    socket = root / "docker.sock"
    with open(root / "dockerd.log", "wb") as log:  # the daemon writes to its own copy of the descriptor
        daemon = subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", f"--data-root={root / 'data'}",
             f"--exec-root={root / 'exec'}", f"--pidfile={root / 'docker.pid'}", f"--host=unix://{socket}"],
            stdout=log, stderr=subprocess.STDOUT)
    client = None
    try:
        until(lambda: socket.exists(), 60, "dockerd listening")
        client = docker.DockerClient(base_url=f"unix://{socket}")
        until(lambda: client.ping(), 60, "dockerd answering")
        yield client, root
    finally:
        if client is not None:
            for container in client.containers.list(all=True):
                container.remove(force=True)
            client.images.prune(filters={"dangling": False})
            client.close()
        daemon.terminate()
        daemon.wait(timeout=60)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if line.split()[1].startswith(str(root))]
        for mount in sorted(mounts, key=len, reverse=True):  # e.g. the engine's network namespace
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(root, ignore_errors=True)


def base_image(client, root: Path) -> str:
    """A Debian base with Python, made here: debootstrap, then `docker import`. It trusts what this
    machine trusts (its CA bundle), so pip in the build reaches the package index the same way."""
    rootfs = root / "rootfs"
    subprocess.run(["debootstrap", "--variant=minbase",
                    "--include=python3,python3-pip,python3-venv,python-is-python3,passwd",
                    SUITE, str(rootfs), MIRROR], check=True, capture_output=True, timeout=900)
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/ca-certificates.crt")
    archive = root / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    with open(archive, "rb") as data:
        client.api.import_image_from_data(data.read(), repository="coded-base", tag=SUITE)
    return f"coded-base:{SUITE}"


def test_the_image_builds_and_runs_a_cluster_that_completes_a_job(engine):
    client, root = engine
    base = base_image(client, root)
    image, _ = client.images.build(path=str(REPO), buildargs={"BASE": base}, tag="coded:test", network_mode="host",
                                   rm=True, forcerm=True)
    assert "coded:test" in image.tags
    port, metrics = free_port(), free_port()
    health = {"test": ["CMD", "coded", "health", "--address", f"127.0.0.1:{port}"], "interval": 1_000_000_000,
              "timeout": 3_000_000_000, "retries": 3}
    master = client.containers.run("coded:test", ["master", "--host", "127.0.0.1", "--port", str(port),
                                                  "--metrics-port", str(metrics), "--state-dir", "/tmp/state"],
                                   network_mode="host", detach=True, name="coded-test-master", healthcheck=health)
    workers = [client.containers.run("coded:test", ["worker", "--master", f"127.0.0.1:{port}", "--port", "0",
                                                     "--name", f"container-{k}", "--blas-threads", "1"],
                                     network_mode="host", detach=True, name=f"coded-test-worker-{k}")
               for k in range(4)]
    with CodedClient(f"127.0.0.1:{port}") as coded:
        until(lambda: sum(w.alive for w in coded.workers()) == 4, 120, "4 workers registering")
        spec = {"kind": "gradient_coding", "workers": 4, "code": {"scheme": "cyclic", "stragglers": 1},
                "model": {"type": "logistic"}, "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 20,
                "data": {"type": "gaussian_mixture", "samples": 2000, "features": 10, "seed": 1}, "seed": 2}
        job = coded.wait(coded.submit(yaml.safe_dump(spec)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert {w for w in job.workers} == {f"container-{k}" for k in range(4)}
    until(lambda: (master.reload() or True) and master.attrs["State"]["Health"]["Status"] == "healthy", 60,
          "the master container reporting healthy")
    master.stop(timeout=10)
    assert master.wait(timeout=30)["StatusCode"] == 0  # SIGTERM: a graceful stop
    for worker in workers:
        worker.stop(timeout=10)
