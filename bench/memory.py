"""Memory that grows with a worker's share, not with the dataset (issue 41).

    python -m bench.memory            # n = 6 to 64 at 240 MB; 60 MB to 1 GB at n = 8; 64 workers, 2 late
    python -m bench.memory --quick    # a seconds-long smoke run

Each point starts a fresh local cluster, so each process's peak is its own for that point alone.
It runs one job: logistic regression on generated Gaussian-mixture data (500 features,
float64), cyclic ``stragglers: 2``. Then it reads every process's peak (VmHWM) and current
(VmRSS) resident memory from /proc. Beside each peak is what the process holds:
- a worker, its s + 1 partitions of the training rows;
- the master, the dataset (generated data are drawn whole there: the test set, the shapes).

The bounds are the issue's: a worker's peak at most 1.5 × its share + 150 MB, the master's at
most 1.5 × the data + 300 MB. The last point runs 64 workers, uncoded and coded, with two workers
1 s late every iteration, and records seconds per iteration. Uploaded data (the master's copies
of a file) are not measured here yet: bench/large_sparse.py measures one large upload.
Writes ``bench/results/memory.csv``, ``.md`` and ``memory.png``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.cluster import WARMUP
from bench.common import (
    LoadGuard,
    add_common_arguments,
    code_line,
    command_line,
    machine_line,
    markdown_table,
    plot_panels,
    process_memory,
    write_csv,
    write_markdown,
)
from coded.local import LocalCluster
from coded.ml.data.dataset import train_size
from coded.reports import Job, JobState

FEATURES = 500
STRAGGLERS = 2
#: the bounds: (share, MB of constant) of a worker's share and of the master's data
WORKER_BOUND = (1.5, 150.0)
MASTER_BOUND = (1.5, 300.0)
LATE = {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 1.0}}
COLUMNS = ["point", "workers", "data_mb", "worker_share_mb", "worker_peak_mb", "worker_peak_max_mb",
           "worker_bound_mb", "master_peak_mb", "master_bound_mb", "within_bounds"]
LATE_COLUMNS = ["workers", "code", "s_per_iteration", "state"]


def samples_for(megabytes: float, features: int) -> int:
    """Samples (training and test) whose float64 features fill ``megabytes`` MB."""
    return math.ceil(megabytes * 1e6 / (features * 8))


def job_spec(workers: int, samples: int, features: int, code: dict[str, Any], iterations: int,
             faults: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"kind": "gradient_coding", "workers": workers, "code": code, "model": {"type": "logistic"},
            "data": {"type": "gaussian_mixture", "samples": samples, "features": features, "seed": 1},
            "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": iterations, "eval_every": 0,
            "checkpoint_every": 100_000, "seed": 1}
    if faults:
        spec["faults"] = faults
    return spec


def run(local: LocalCluster, spec: dict[str, Any]) -> Job:
    with local.client() as client:
        job = client.wait(client.submit(yaml.safe_dump(spec)).id)
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"benchmark job failed: {job.reason}")
    return job


def point(name: str, workers: int, samples: int, features: int, iterations: int,
          late: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One fresh cluster: a cyclic job, every process's peak; with ``late``, then the 2-late jobs
    (their per-iteration times appended to it)."""
    train = train_size(samples)
    share = (STRAGGLERS + 1) * math.ceil(train / workers) * (features + 1) * 8 / 1e6
    data = samples * (features + 1) * 8 / 1e6
    with tempfile.TemporaryDirectory(prefix="coded-bench-") as state, \
            LocalCluster(workers, Path(state), startup_timeout=600) as local:
        run(local, job_spec(workers, samples, features, {"scheme": "cyclic", "stragglers": STRAGGLERS}, iterations))
        assert local.master is not None
        peaks = [process_memory(p.pid)[0] for p in local.workers.values()]
        master = process_memory(local.master.pid)[0]
        if late is not None:
            for code in ({"scheme": "uncoded"}, {"scheme": "cyclic", "stragglers": STRAGGLERS}):
                job = run(local, job_spec(workers, samples, features, code, iterations, LATE))
                per = statistics.median(r.duration_s for r in list(job.history)[WARMUP:])
                late.append({"workers": workers, "code": code["scheme"], "s_per_iteration": per, "state": job.state})
                print(f"{workers} workers, two 1 s late, {code['scheme']:8} {per:6.3f} s/iteration", flush=True)
    worker_bound = WORKER_BOUND[0] * share + WORKER_BOUND[1]
    master_bound = MASTER_BOUND[0] * data + MASTER_BOUND[1]
    row = {"point": name, "workers": workers, "data_mb": data, "worker_share_mb": share,
           "worker_peak_mb": statistics.median(peaks), "worker_peak_max_mb": max(peaks),
           "worker_bound_mb": worker_bound, "master_peak_mb": master, "master_bound_mb": master_bound,
           "within_bounds": max(peaks) <= worker_bound and master <= master_bound}
    print(f"{name:10} n={workers:3} data {data:7.0f} MB: workers peak {row['worker_peak_mb']:6.0f} MB "
          f"(max {max(peaks):6.0f}, share {share:6.1f}, bound {worker_bound:6.0f}); master {master:6.0f} MB "
          f"(bound {master_bound:6.0f})", flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    guard = LoadGuard(args.allow_busy, args.quick)
    features = 50 if args.quick else FEATURES
    iterations = 4 if args.quick else 8
    by_n = (4,) if args.quick else (6, 16, 32)
    sizes = (2.0, 8.0) if args.quick else (60.0, 240.0, 1000.0)
    biggest = 6 if args.quick else 64
    base = sizes[-2]  # the 240 MB job
    rows, late = [], []
    for n in by_n:
        rows.append(point("against n", n, samples_for(base, features), features, iterations))
    rows.append(point("against n", biggest, samples_for(base, features), features, iterations, late))
    for megabytes in sizes:
        rows.append(point("against size", 8, samples_for(megabytes, features), features, iterations))
    guard.finish()
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "memory.csv", rows, COLUMNS)
    write_csv(args.out / "memory_late.csv", late, LATE_COLUMNS)
    header = [command_line(), machine_line(), guard.line(), code_line(),
              f"logistic regression on generated Gaussian-mixture data, {features} float64 features, cyclic "
              f"`stragglers: {STRAGGLERS}`, {iterations} iterations; a fresh local cluster per point; peaks are VmHWM "
              "(one reading per point: memory does not vary with the machine's load as time does); a worker's share "
              f"is its {STRAGGLERS + 1} partitions of the training rows (x and y); bounds: worker "
              f"{WORKER_BOUND[0]} x share + {WORKER_BOUND[1]:g} MB, master {MASTER_BOUND[0]} x data + "
              f"{MASTER_BOUND[1]:g} MB"]
    sections = [markdown_table(rows, COLUMNS, digits=4),
                f"{biggest} workers with two of them 1 s late every iteration "
                f"(seconds per iteration, median after {WARMUP} of warm-up):\n\n" + markdown_table(late, LATE_COLUMNS)]
    write_markdown(args.out / "memory.md", "Memory against the workers and the data", header, sections)
    plot_panels({
        "against n (240 MB)": {label: [(r["workers"], r[key]) for r in rows if r["point"] == "against n"]
                               for label, key in (("worker peak", "worker_peak_max_mb"),
                                                  ("worker bound", "worker_bound_mb"),
                                                  ("master peak", "master_peak_mb"))},
        "against data (n = 8)": {label: [(r["data_mb"], r[key]) for r in rows if r["point"] == "against size"]
                                 for label, key in (("worker peak", "worker_peak_max_mb"),
                                                    ("worker bound", "worker_bound_mb"),
                                                    ("master peak", "master_peak_mb"),
                                                    ("master bound", "master_bound_mb"))},
    }, args.out / "memory.png", "workers, or data MB", "MB", "; ".join(header[1:]))
    print(f"wrote {args.out / 'memory.csv'}, memory_late.csv, memory.md and memory.png; {guard.line()}")
    return 0 if all(r["within_bounds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
