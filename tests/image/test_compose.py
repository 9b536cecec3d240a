"""The project's docker-compose.yml, run as a user runs it (docs/compose.md), with only what this
machine forces in compose.override.yml: `up --wait --build` brings the master and 8 workers
healthy with TLS and the token, the demo job succeeds through the file's own `submit` service,
Prometheus finds every worker through the file's service discovery and loads the alert rules, a
worker container stopped mid-job is an erasure and rejoins after `docker compose start`, and
`down -v` leaves nothing of the project behind."""

from __future__ import annotations

import json
import re
import secrets
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from coded.client import CodedClient
from coded.client.reports import JobState
from coded.wire.rpc import Security

from .conftest import COMPOSE_FILES, REPO, Engine, until

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]  # the first test also builds the images
WORKERS = 8
GONE = 3  # the worker container the test stops: coded-worker-3


def documented() -> list[str]:
    """The command lines of docs/compose.md's first shell block, comments dropped."""
    text = (REPO / "docs/compose.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block is not None, "docs/compose.md has no ```sh block"
    return [line.split("  #")[0].strip() for line in block[1].splitlines() if line.strip()]


class Compose:
    """The docker and coded commands of the documentation, run against the test's engine, each
    recorded as the user types it (without the override file, with the documented ports)."""

    def __init__(self, engine: Engine, token: str, workdir: Path) -> None:
        self.engine, self.workdir = engine, workdir
        self.env = {**engine.env, "CODED_TOKEN": token}
        self.ran: list[str] = []
        self.ports: dict[str, str] = {}

    def _run(self, argv: list[str], typed: str, timeout: float = 600) -> str:
        done = subprocess.run(argv, cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{typed} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        self.ran.append(typed)
        return done.stdout

    def compose(self, *args: str, timeout: float = 600) -> str:
        typed = shlex.join(["docker", "compose", *args])
        return self._run(["docker", "compose", *COMPOSE_FILES, *args], typed, timeout)

    def docker(self, *args: str) -> str:
        return self._run(["docker", *args], shlex.join(["docker", *args]))

    def coded(self, *args: str) -> str:
        """`coded` on the host, through the master's published port (50051 in the documentation)."""
        argv = [a.replace("127.0.0.1:50051", self.published("master", 50051)) for a in args]
        return self._run([sys.executable, "-m", "coded.cli", *argv], shlex.join(["coded", *args]), timeout=120)

    def published(self, service: str, port: int) -> str:
        if (service, port) not in self.ports:
            self.ports[service, port] = subprocess.run(
                ["docker", "compose", *COMPOSE_FILES, "port", service, str(port)], env=self.env, capture_output=True,
                text=True, check=True).stdout.strip()
        return self.ports[service, port]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def test_the_compose_file_runs_a_cluster_as_the_documentation_says(engine, images, tmp_path):
    token = secrets.token_hex(16)
    run = Compose(engine, token, tmp_path)
    try:
        run.compose("up", "-d", "--wait", "--build", "--wait-timeout", "300")
        run.ran[-1] = "docker compose up -d --wait --build"  # the test's own deadline is not the user's
        states = [json.loads(line) for line in run.compose("ps", "--format", "json").splitlines() if line.strip()]
        health = {state["Name"]: state["Health"] for state in states}
        assert health == {"coded-master-1": "healthy", "coded-prometheus-1": "healthy",
                          **{f"coded-worker-{k}": "healthy" for k in range(1, WORKERS + 1)}}

        for container in run.engine.client.containers.list(  # type: ignore[attr-defined]
                filters={"label": "com.docker.compose.project=coded"}):
            if container.labels["com.docker.compose.service"] in ("master", "worker"):  # no CA key where they run
                found = container.exec_run(["find", "/home/coded", "-name", "ca-key.pem"]).output.decode()
                assert found == "" and "ca-key.pem" not in container.exec_run(
                    ["ls", "/home/coded/certs"]).output.decode(), (container.name, found)

        demo = run.compose("--profile", "demo", "run", "--rm", "submit")
        assert re.search(r"SUCCEEDED after 100 iterations", demo), demo

        check_prometheus(run)
        run.compose("cp", "master:/home/coded/certs", "./certs")
        tls = ["--tls-cert", "certs/cert.pem", "--tls-key", "certs/key.pem", "--tls-ca", "certs/ca.pem"]
        listed = run.coded("workers", "--master", "127.0.0.1:50051", *tls)
        assert sum(" alive " in line for line in listed.splitlines()) == WORKERS, listed
        check_a_stopped_worker_is_an_erasure_and_rejoins(run, token, tmp_path / "certs")
    finally:
        run.compose("down", "-v")
    client = engine.client
    project = {"label": "com.docker.compose.project=coded"}
    assert client.containers.list(all=True, filters=project) == []  # type: ignore[attr-defined]
    assert client.networks.list(filters=project) == []  # type: ignore[attr-defined]
    assert client.volumes.list(filters=project) == []  # type: ignore[attr-defined]
    missing = [line for line in documented()[1:] if line not in run.ran]  # [0] sets CODED_TOKEN: done above
    assert not missing, f"docs/compose.md says what the test did not run: {missing}"


def check_prometheus(run: Compose) -> None:
    """Prometheus (started by compose) scrapes the master and every worker container, found by the
    file's own DNS service discovery, and has loaded the rules of monitoring/alerts.yml."""
    prometheus = f"http://{run.published('prometheus', 9090)}"
    containers = run.engine.client.containers.list(  # type: ignore[attr-defined]
        filters={"label": ["com.docker.compose.project=coded", "com.docker.compose.service=worker"]})
    addresses = {f"{network['IPAddress']}:9100" for c in containers
                 for network in c.attrs["NetworkSettings"]["Networks"].values()}
    assert len(addresses) == WORKERS

    def every_target_up() -> bool:
        targets = get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
        up = {(t["labels"]["job"], t["labels"]["instance"]) for t in targets if t["health"] == "up"}
        assert up == {("coded-master", "master:9100"), *{("coded-workers", a) for a in addresses}}, f"up: {up}"
        return True

    until(every_target_up, 120, "Prometheus scraping the master and every worker")
    rules = {rule["name"] for group in get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
             for rule in group["rules"]}
    expected = {rule.get("alert") or rule.get("record")
                for group in yaml.safe_load((REPO / "monitoring/alerts.yml").read_text())["groups"]
                for rule in group["rules"]}
    assert rules == expected


def check_a_stopped_worker_is_an_erasure_and_rejoins(run: Compose, token: str, certs: Path) -> None:
    """A long job from the host; worker container 3 is stopped mid-job, the job goes on without it,
    `docker compose start worker` brings it back and it answers in the job again."""
    security = Security(certs / "cert.pem", certs / "key.pem", certs / "ca.pem", token)
    spec = yaml.safe_load((REPO / "examples/demo.yaml").read_text())
    spec.update(name="erasure", iterations=100_000)  # long enough for any machine: cancelled once shown
    stopped_at = started_at = rejoined_at = None
    gone, seen_gone = None, False
    with CodedClient(run.published("master", 50051), security) as client:
        job = client.submit(yaml.safe_dump(spec))
        for event in client.watch(job.id):
            if event.record is None:
                continue
            if stopped_at is None and event.job.iteration >= 10:
                gone = next(w.name for w in client.workers() if w.address.startswith(worker_address(run, GONE)))
                run.docker("stop", f"coded-worker-{GONE}")
                # the master's iteration once the container has exited: the event's is older, and
                # the worker answered in the iterations that ran while docker stopped it
                stopped_at = client.get(job.id).iteration
            elif started_at is None and stopped_at is not None:
                seen_gone = seen_gone or not next(w for w in client.workers() if w.name == gone).alive
                if seen_gone and event.job.iteration >= stopped_at + 30:  # the master knows, the job went on
                    assert event.job.state == JobState.RUNNING
                    run.compose("start", "worker")
                    started_at = event.job.iteration
            elif started_at is not None and event.job.workers.index(gone) in event.record.responders:
                rejoined_at = event.job.iteration
                break
        client.cancel(job.id)
        final = client.get(job.id, history=True)
    assert rejoined_at is not None and gone is not None
    k = final.workers.index(gone)
    # between the stop and the start it answered in no iteration, yet the job went on
    assert all(k not in r.responders for r in final.history if stopped_at + 1 < r.iteration <= started_at)
    assert sum(stopped_at + 1 < r.iteration <= started_at for r in final.history) >= 28


def worker_address(run: Compose, k: int) -> str:
    container = run.engine.client.containers.get(f"coded-worker-{k}")  # type: ignore[attr-defined]
    return next(iter(container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"] + ":"
