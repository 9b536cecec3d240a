"""Liveness that bulk data cannot starve: on a link so slow that one round's bytes take longer to
move than the job's call deadline, the round is moving, not silent, and the job finishes with
every reply (no erasure, no worker marked down)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.cluster.local import ClusterLinks, LocalCluster
from coded.links.slow import SlowLinks

pytestmark = pytest.mark.links

FEATURES = 100_000  # 800 kB of parameters to the worker and 800 kB of gradient back, per round
CALL_S = 1.5        # ... which take about 3.2 s each way at 2 Mbit/s
SPEC = {"kind": "gradient_coding", "workers": 2, "code": {"scheme": "uncoded"},
        "model": {"type": "logistic", "l2": 1e-4},
        "data": {"type": "gaussian_mixture", "samples": 40, "features": FEATURES, "seed": 3},
        "optimizer": {"type": "sgd", "lr": 0.1}, "iterations": 2, "eval_every": 0, "seed": 1,
        "verify": "off", "timeouts": {"call_s": CALL_S, "paused_s": 60}}


@pytest.mark.timeout(300)
def test_a_round_whose_bytes_take_longer_than_its_deadline_on_a_slow_link_is_not_failed(tmp_path, untouched):
    slow = SlowLinks(["worker-0", "worker-1"], "100mbit", factor=50, slow=["worker-1"])  # 2 Mbit/s
    with (LocalCluster(2, tmp_path / "cluster", links=ClusterLinks("100mbit", master="1gbit", slow=slow)) as cluster,
          cluster.client() as client):
        job = client.wait(client.submit(yaml.safe_dump(SPEC)).id)
        history = client.get(job.id, history=True).history
        workers = {w.name: w for w in client.workers()}
    assert job.state == JobState.SUCCEEDED, job.reason
    assert len(history) == 2 and all(sorted(record.responders) == [0, 1] for record in history), history
    # the slow worker's rounds did take longer than the deadline: the test is about them
    assert min(record.duration_s for record in history) > 2 * CALL_S, [r.duration_s for r in history]
    assert workers["worker-1"].alive and not workers["worker-1"].unusable
    assert np.isfinite(job.loss)
