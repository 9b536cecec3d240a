"""What the benchmarks on links of finite bandwidth share: a local cluster whose master and workers
each sit in a network namespace behind a ``tc tbf`` link (:mod:`coded.links.netns`), and the papers'
workload on it — logistic regression with Nesterov's accelerated gradient on sparse data of the
Amazon Employee Access shape (``data.type: amazon_like``, synthetic: the Kaggle file cannot be
downloaded here), as Ye & Abbe (ICML 2018) and Tandon et al. (ICML 2017) ran it on EC2.

Needs root and iproute2 (``make test-links`` runs the smoke versions).
"""

from __future__ import annotations

import contextlib
import math
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from coded.client import CodedClient
from coded.client.reports import Job, JobState
from coded.cluster.local import ClusterLinks, LocalCluster
from coded.links.slow import SlowLinks

__all__ = ["MASTER_LINK", "WARMUP", "WORKER_LINK", "amazon_spec", "run", "seconds_per_iteration", "shaped_cluster"]

#: Ye & Abbe's workers were t2.micro instances ("low to moderate" network), their master a
#: c3.8xlarge (10 Gbit/s)
WORKER_LINK, MASTER_LINK = "100mbit", "10gbit"
#: iterations left out of a job's timing (connections opened, first allocations)
WARMUP = 2
#: learning rate of Nesterov's method (momentum 0.9) on the mean logistic loss: reaches the
#: workload's best test AUC (~0.87) in about 50 iterations, rising steadily before
LEARNING_RATE = 2.0


@contextlib.contextmanager
def shaped_cluster(workers: int, worker_link: str = WORKER_LINK, master_link: str = MASTER_LINK,
                   slow: SlowLinks | None = None) -> Iterator[LocalCluster]:
    """A local cluster of ``workers`` workers on shaped links for the time of the block; a SIGTERM
    meanwhile ends the benchmark as an exception would, so the namespaces are removed."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        with (tempfile.TemporaryDirectory(prefix="coded-bench-") as state,
              LocalCluster(workers, Path(state), startup_timeout=300,
                           links=ClusterLinks(worker_link, master=master_link, slow=slow)) as local):
            yield local
    finally:
        signal.signal(signal.SIGTERM, previous)


def amazon_spec(n: int, code: dict[str, Any], iterations: int, rows: int = 32769, eval_every: int = 0,
                faults: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The papers' workload for ``n`` workers: unchecked (``verify: off``) as they ran it."""
    return {"kind": "gradient_coding", "workers": n, "code": code, "model": {"type": "logistic", "l2": 1e-5},
            "data": {"type": "amazon_like", "rows": rows, "seed": 0},
            "optimizer": {"type": "nesterov", "lr": LEARNING_RATE, "momentum": 0.9}, "iterations": iterations,
            "eval_every": eval_every, "checkpoint_every": 100_000, "seed": 1, "verify": "off",
            "faults": faults or {}, **extra}


def run(client: CodedClient, specs: Sequence[dict[str, Any]], files: dict[str, bytes] | None = None) -> list[Job]:
    """Run jobs one after another (with the files they name); each must succeed."""
    finished = []
    for spec in specs:
        job = client.wait(client.submit(yaml.safe_dump(spec), files).id)
        if job.state != JobState.SUCCEEDED:
            raise RuntimeError(f"benchmark job {spec['code']} failed: {job.reason}")
        finished.append(job)
    return finished


def seconds_per_iteration(job: Job) -> float:
    """Wall time per iteration after the warm-up ones: from the end of iteration WARMUP to the
    end of the last, what the job's clock says (rounds and everything between them)."""
    history = list(job.history)
    if len(history) <= WARMUP + 1:
        return statistics.fmean(r.duration_s for r in history)
    return (history[-1].elapsed_s - history[WARMUP].elapsed_s) / (len(history) - 1 - WARMUP)


def curve(job: Job) -> list[tuple[float, float]]:
    """(seconds of training, test AUC) at each evaluated iteration; the clock starts when the first
    iteration does (assigning and loading data is not training)."""
    start = job.history[0].elapsed_s - job.history[0].duration_s
    return [(r.elapsed_s - start, r.test_auc) for r in job.history if not math.isnan(r.test_auc)]
