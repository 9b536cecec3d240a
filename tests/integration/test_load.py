"""Load on one master: 20 concurrent jobs from 5 clients, three times over. Every job is right, the master's
memory does not grow from wave to wave, and its tasks, threads and worker channels return
to their idle counts (no leaks)."""

from __future__ import annotations

import io
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.cluster.local import LocalCluster
from coded.master.server import BLOCKING_THREADS

from .conftest import BASE_SPEC, metric, scrape

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # twenty jobs at once: `make test-slow`

CLIENTS = 5
JOBS_PER_CLIENT = 4
SLOW = {"stragglers": {"model": "shifted_exponential", "shift": 0.002, "mean": 0.01}}
# Products of 32 MiB: allocations this large are mapped and unmapped whole, so the master's RSS
# follows what it keeps rather than the heap fragmentation of many small arrays.
PRODUCT_SIDE = 2048
WAVES = 4
LEAK_GAUGES = ("coded_master_asyncio_tasks", "coded_master_threads", "coded_master_worker_channels",
               "coded_master_data_connections")


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def gradient_spec(seed: int) -> str:
    # s = 2: decoding needs 2 of the 4 replies and checking 3, so the slowest is stopped every iteration
    spec = {**BASE_SPEC, "workers": 4, "code": {"scheme": "cyclic", "stragglers": 2}, "iterations": 15,
            "data": {**BASE_SPEC["data"], "samples": 2000, "seed": seed}, "faults": SLOW, "seed": seed}
    return yaml.safe_dump(spec)


def matmul_spec(seed: int) -> str:
    return yaml.safe_dump({"kind": "matmul", "workers": 4, "code": {"scheme": "polynomial", "m": 2, "d": 1},
                           "inputs": {"a": "A.npy", "b": "B.npy"}, "faults": SLOW, "seed": seed})


def client_session(cluster: LocalCluster, client_index: int, wave: int) -> list[str]:
    """One client: submit its jobs (half gradient, half 2048 x 2048 products of rank 64), then wait
    for each.
    Returns what was wrong with them (nothing, when all is well)."""
    rng = np.random.default_rng([wave, client_index])
    problems = []
    with cluster.client() as client:
        submitted = []
        for j in range(JOBS_PER_CLIENT):
            seed = 100 * wave + 10 * client_index + j
            if j % 2:
                a, b = rng.standard_normal((PRODUCT_SIDE, 64)), rng.standard_normal((64, PRODUCT_SIDE))
                job = client.submit(matmul_spec(seed), {"A.npy": npy(a), "B.npy": npy(b)})
                submitted.append((job.id, a @ b))
            else:
                submitted.append((client.submit(gradient_spec(seed)).id, None))
        for job_id, product in submitted:
            job = client.wait(job_id)
            if job.state != JobState.SUCCEEDED:
                problems.append(f"{job_id}: {job.state} {job.reason}")
            elif product is not None:
                got = client.result(job_id)["product"]
                error = np.abs(got - product).max() / np.abs(product).max()
                if not error <= 1e-9:
                    problems.append(f"{job_id}: product off by {error:.1e}")
            elif len(client.get(job_id, history=True).history) != 15:
                problems.append(f"{job_id}: history is not the 15 iterations")
    return problems


def wave(cluster: LocalCluster, number: int) -> None:
    with ThreadPoolExecutor(CLIENTS) as pool:
        problems = [p for ps in pool.map(lambda c: client_session(cluster, c, number), range(CLIENTS)) for p in ps]
    assert problems == []


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def settled(port: int, limits: dict[str, float], timeout: float = 60.0) -> dict[str, float]:
    """Scrape the master until every leak gauge is at or under its limit (runners wind down and
    release workers after their job's last event); the last values seen if they never get there."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        values = {name: metric(samples, name) for name in LEAK_GAUGES}
        if all(values[name] <= limits[name] for name in LEAK_GAUGES) or time.monotonic() > deadline:
            return values
        time.sleep(0.2)


def test_twenty_concurrent_jobs_from_five_clients_leave_nothing_behind(cluster):
    """Also: each product is A @ B and each training job has all its iterations."""
    local = cluster(4, metrics=True)
    port = local.metrics_ports["master"]
    idle = {name: metric(scrape(port), name) for name in LEAK_GAUGES}
    assert idle["coded_master_worker_channels"] == 4  # one channel per registered worker
    assert idle["coded_master_data_connections"] == 0  # data-plane connections live as long as their job

    # The master's pool of threads for blocking work starts its threads on first use and keeps them.
    limits = {**idle, "coded_master_threads": idle["coded_master_threads"] + BLOCKING_THREADS}
    after, memory = [], []
    for number in range(WAVES):
        wave(local, number)
        after.append(settled(port, limits))
        memory.append(rss_bytes(local.master.pid))
    print(f"idle {idle}, after each wave {after}; master RSS after each wave "
          f"{[round(m / 2**20) for m in memory]} MiB")
    for values in after:
        assert all(values[name] <= limits[name] for name in LEAK_GAUGES), (limits, values)
        assert values["coded_master_worker_channels"] == 4, values
    with local.client() as client:
        assert sum(j.state == JobState.SUCCEEDED for j in client.jobs()) == WAVES * CLIENTS * JOBS_PER_CLIENT
    # Each wave computes 10 products of 32 MiB; keeping them would add 960 MiB over three waves.
    # Freed memory makes RSS swing by up to ~250 MiB (measured over 20 waves: 214..465 MiB, no
    # trend).
    assert memory[-1] - memory[0] < 400 * 2**20, memory
    # stragglers were stopped, never cancelled in gRPC (which leaks native memory, grpc/grpc#43360)
    workers = [scrape(local.metrics_ports[i]) for i in range(4)]
    assert sum(metric(w, "coded_worker_calls_total", outcome="stopped") for w in workers) > 0
    assert sum(metric(w, "coded_worker_calls_total", outcome="cancelled") for w in workers) == 0
