"""Fixtures for tests that start real ``coded master`` / ``coded worker`` processes on 127.0.0.1."""

from __future__ import annotations

import copy
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from coded.client import CodedClient
from coded.client.reports import TERMINAL_STATES, JobEvent
from coded.cluster.local import LocalCluster

BASE_SPEC: dict[str, Any] = {
    "kind": "gradient_coding",
    "workers": 6,
    "code": {"scheme": "cyclic", "stragglers": 2},
    "model": {"type": "logistic", "l2": 0.001},
    "data": {"type": "gaussian_mixture", "samples": 3000, "features": 12, "classes": 2, "seed": 3},
    "optimizer": {"type": "nesterov", "lr": 0.5},
    "iterations": 30,
    "seed": 11,
}


def make_spec(**changes: Any) -> str:
    """BASE_SPEC with top-level keys replaced, as YAML."""
    spec = copy.deepcopy(BASE_SPEC)
    spec.update(changes)
    return yaml.safe_dump(spec)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Factory of started local clusters; every process is stopped at the end of the test."""
    started: list[LocalCluster] = []

    def start(workers: int, **kwargs: Any) -> LocalCluster:
        local = LocalCluster(workers, tmp_path / f"cluster{len(started)}", **kwargs)
        started.append(local)
        return local.start()

    yield start
    for local in started:
        local.stop()


#: the workers of the cluster that tests share: as many as the largest job among them (CodeNet's 12 peers)
SHARED_WORKERS = 12


@pytest.fixture(scope="session")
def _one_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(SHARED_WORKERS, tmp_path_factory.mktemp("shared-cluster"))
    local.start()
    yield local
    local.stop()


@pytest.fixture
def shared_cluster(_one_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """A cluster of SHARED_WORKERS workers started once per test process (starting one costs
    seconds of CPU per worker): for a test that submits jobs and reads them, never one that kills,
    restarts or reconfigures a process, reads its metrics or counts its workers or jobs. Every
    process is alive when a test starts; a job the test left running is cancelled after it."""
    processes = {"master": _one_cluster.master, **{f"worker-{i}": p for i, p in _one_cluster.workers.items()}}
    gone = sorted(name for name, process in processes.items() if process is None or process.poll() is not None)
    assert not gone, f"the shared cluster lost {gone}: a test that shares it stopped a process"
    yield _one_cluster
    with _one_cluster.client() as client:
        for job in client.jobs():
            if job.state not in TERMINAL_STATES:
                client.cancel(job.id)


def follow_until(client: CodedClient, job_id: str,
                 predicate: Callable[[JobEvent], bool]) -> JobEvent:
    """Watch a job until an event satisfies ``predicate`` (fails if the job ends first)."""
    for event in client.watch(job_id):
        if predicate(event):
            return event
    raise AssertionError(f"job {job_id} ended before the awaited event: {client.get(job_id)}")


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Whether ``predicate`` came true within ``timeout`` seconds (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A process's /metrics as {(sample name, sorted labels): value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric(samples: dict, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def raw_call(channel: grpc.Channel, path: str, client_streams: bool, server_streams: bool, payload: bytes,
             timeout: float = 30.0) -> None:
    """Send ``payload`` as the request bytes of a method, whatever its shape; read the whole reply."""
    if client_streams and server_streams:
        list(channel.stream_stream(path)(iter([payload]), timeout=timeout))
    elif client_streams:
        channel.stream_unary(path)(iter([payload]), timeout=timeout)
    elif server_streams:
        list(channel.unary_stream(path)(payload, timeout=timeout))
    else:
        channel.unary_unary(path)(payload, timeout=timeout)
