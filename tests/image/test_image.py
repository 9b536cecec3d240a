"""The container image, run for real on the engine tests/image/conftest.py starts: a master and
workers as containers with host networking through the Docker SDK complete a job, and the master
stops gracefully on SIGTERM."""

from __future__ import annotations

import pytest
import yaml

from coded.client import CodedClient
from coded.client.reports import JobState
from coded.cluster.local import free_port

from .conftest import until

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]  # the first test also builds the images


def test_the_image_runs_a_cluster_that_completes_a_job(engine, images):
    client = engine.client
    port, metrics = free_port(), free_port()
    health = {"test": ["CMD", "coded", "health", "--address", f"127.0.0.1:{port}"], "interval": 1_000_000_000,
              "timeout": 3_000_000_000, "retries": 3}
    master = client.containers.run(images["coded"], ["master", "--host", "127.0.0.1", "--port", str(port),
                                                  "--metrics-port", str(metrics), "--state-dir", "/tmp/state"],
                                   network_mode="host", detach=True, name="coded-test-master", healthcheck=health)
    workers = [client.containers.run(images["coded"], ["worker", "--master", f"127.0.0.1:{port}", "--port", "0",
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
