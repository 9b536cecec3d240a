"""Exactness on sparse data across real links: 20 workers, each in its own namespace behind a shaped
link, one of them ten times slower; every exact gradient code, streamed and whole, ends at the
uncoded job's parameters although a worker is killed in the middle of each coded job (but
``partial``'s: Tandon et al.'s two-stage code needs every worker's first stage, for partial
stragglers that are slow, never gone, so its job only has the slow link)."""

from __future__ import annotations

import signal

import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.cluster.local import ClusterLinks, LocalCluster
from coded.links.slow import SlowLinks
from coded.ml.data.amazon import AMAZON_SKIP, amazon_like

from .conftest import wait_until

pytestmark = pytest.mark.links

N, KILLED, ITERATIONS = 20, 13, 30
SPEC = {"kind": "gradient_coding", "workers": N, "model": {"type": "logistic", "l2": 1e-4},
        "data": {"type": "categorical", "path": "amazon.csv", "skip": [list(p) for p in AMAZON_SKIP]},
        "optimizer": {"type": "nesterov", "lr": 1.0}, "iterations": ITERATIONS, "eval_every": 0, "seed": 5,
        "timeouts": {"call_s": 60}}
CODES = [
    ({"scheme": "cyclic", "stragglers": 2}, {}),
    ({"scheme": "cyclic", "stragglers": 2}, {"stream": {"chunks": 2}}),
    ({"scheme": "cyclic", "stragglers": 2}, {"stream": "off"}),
    ({"scheme": "frc", "stragglers": 2}, {"stream": {}}),
    ({"scheme": "frc", "stragglers": 2}, {"stream": "off"}),
    ({"scheme": "ye_abbe", "stragglers": 2, "m": 3}, {}),
]
PARTIAL = {"scheme": "partial", "stragglers": 2, "alpha": 2.0}


def flat(arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([arrays[k].ravel() for k in sorted(arrays)])


@pytest.mark.timeout(900)
def test_every_code_is_exact_on_sparse_data_over_slow_links_with_a_worker_killed(tmp_path):
    files = {"amazon.csv": amazon_like(3000, seed=3).encode()}
    slow = SlowLinks([f"worker-{i}" for i in range(N)], "50mbit", factor=10, slow=["worker-4"])
    with LocalCluster(N, tmp_path / "cluster", startup_timeout=300,
                      links=ClusterLinks("50mbit", master="1gbit", slow=slow)) as cluster, cluster.client() as client:
        reference = client.wait(client.submit(yaml.safe_dump({**SPEC, "code": {"scheme": "uncoded"}}), files).id)
        assert reference.state == JobState.SUCCEEDED, reference.reason
        expected = flat(client.result(reference.id))
        assert expected.size > 10_000  # sparse one-hot columns, computed on as CSR rows
        partial = client.wait(client.submit(yaml.safe_dump({**SPEC, "code": PARTIAL}), files).id)
        assert partial.state == JobState.SUCCEEDED, partial.reason
        assert np.abs(flat(client.result(partial.id)) - expected).max() <= 1e-8 * np.abs(expected).max()
        for code, extra in CODES:
            job = client.submit(yaml.safe_dump({**SPEC, "code": code, **extra}), files)
            assert wait_until(lambda job=job: client.get(job.id).iteration >= 5, timeout=300), client.get(job.id)
            cluster.kill_worker(KILLED, signal.SIGKILL)
            killed_at = client.get(job.id).iteration  # what the master has recorded (it may be a round behind)
            final = client.wait(job.id)
            assert final.state == JobState.SUCCEEDED, (code, extra, final.reason)
            assert killed_at < ITERATIONS - 5, "the job ended before the worker was killed"
            position = final.workers.index(f"worker-{KILLED}")  # responders are positions in the job
            assert all(position not in r.responders for r in final.history[-5:]), (code, extra)
            difference = np.abs(flat(client.result(job.id)) - expected).max() / np.abs(expected).max()
            assert difference <= 1e-8, (code, extra, difference)
            cluster.start_workers([KILLED])
            cluster.wait_for_workers(N)
