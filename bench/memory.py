"""Memory that grows with a worker's share, not with the dataset (issue 41).

    python -m bench.memory            # n = 6 to 64 at 240 MB; 60 MB to 1 GB at n = 8; 64 workers, 2 late
    python -m bench.memory --quick    # a seconds-long smoke run

Each point starts a fresh local cluster, so each process's peak is its own for that point alone.
It runs one job: logistic regression, cyclic ``stragglers: 2``, on generated Gaussian-mixture
data (500 features, float64), or on an uploaded file of the same sizes: a dense ``.npz`` (500
float64 features) or a sparse one (CSR, 10,000 features, 100 values a row). Then it reads every
process's peak (VmHWM) and current (VmRSS) resident memory from /proc. Beside each peak is what
the process holds:
- a worker, its s + 1 partitions of the training rows;
- the master, the dataset (generated data are drawn whole there: the test set, the shapes), or
  the file's size.

The bounds are the issue's: a worker's peak at most 1.5 × its share + 150 MB, the master's at
most 1.5 × the data + 300 MB. The last point runs 64 workers, uncoded and coded, with two workers
1 s late every iteration, and records seconds per iteration.
Writes ``bench/results/memory.csv``, ``.md`` and ``memory.png``.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.cluster import WARMUP
from bench.common import markdown_table, plot_panels, process_memory
from bench.skeleton import Bench
from coded.client.reports import Job, JobState
from coded.cluster.local import LocalCluster
from coded.ml.data.dataset import train_size

FEATURES = 500
#: the sparse upload's columns, and its values a row (1%)
SPARSE_FEATURES = 10_000
SPARSE_PER_ROW = 100
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


def generated(samples: int, features: int) -> dict[str, Any]:
    """The data section of generated data."""
    return {"type": "gaussian_mixture", "samples": samples, "features": features, "seed": 1}


def dense_file(path: Path, megabytes: float, features: int) -> int:
    """Write an uncompressed .npz of float64 rows (x, y) of about ``megabytes`` MB; its rows."""
    rows = samples_for(megabytes, features + 1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((rows, features))
    np.savez(path, x=x, y=(x[:, 0] > 0).astype(np.int64))
    return rows


def sparse_file(path: Path, megabytes: float, features: int) -> int:
    """Write a CSR .npz (scipy's members, and y) of about ``megabytes`` MB, :data:`SPARSE_PER_ROW`
    values a row (one in each band of ``features / SPARSE_PER_ROW`` columns); its rows."""
    rows = math.ceil(megabytes * 1e6 / (SPARSE_PER_ROW * 12 + 12))  # a value, its index; a row's indptr and y
    band = features // SPARSE_PER_ROW
    rng = np.random.default_rng(2)
    indices = (np.arange(SPARSE_PER_ROW, dtype=np.int32) * band
               + rng.integers(0, band, (rows, SPARSE_PER_ROW), dtype=np.int32)).ravel()
    data = rng.standard_normal(rows * SPARSE_PER_ROW)
    indptr = np.arange(0, rows * SPARSE_PER_ROW + 1, SPARSE_PER_ROW, dtype=np.int64)
    np.savez(path, format="csr", shape=np.array([rows, features]), data=data, indices=indices, indptr=indptr,
             y=(data[::SPARSE_PER_ROW] > 0).astype(np.int64))
    return rows


def job_spec(workers: int, data: dict[str, Any], code: dict[str, Any], iterations: int,
             faults: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"kind": "gradient_coding", "workers": workers, "code": code, "model": {"type": "logistic"},
            "data": data, "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": iterations, "eval_every": 0,
            "checkpoint_every": 100_000, "seed": 1}
    if faults:
        spec["faults"] = faults
    return spec


def run(local: LocalCluster, spec: dict[str, Any], files: dict[str, bytes] | None = None) -> Job:
    with local.client() as client:
        job = client.wait(client.submit(yaml.safe_dump(spec), files).id)
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"benchmark job failed: {job.reason}")
    return job


def point(name: str, workers: int, data: dict[str, Any], data_mb: float, share_mb: float, iterations: int,
          files: dict[str, bytes] | None = None, late: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One fresh cluster: a cyclic job on ``data`` (with its uploaded ``files``), every process's
    peak; with ``late``, then the 2-late jobs (their per-iteration times appended to it)."""
    with tempfile.TemporaryDirectory(prefix="coded-bench-") as state, \
            LocalCluster(workers, Path(state), startup_timeout=600) as local:
        run(local, job_spec(workers, data, {"scheme": "cyclic", "stragglers": STRAGGLERS}, iterations), files)
        assert local.master is not None
        peaks = [process_memory(p.pid)[0] for p in local.workers.values()]
        master = process_memory(local.master.pid)[0]
        if late is not None:
            for code in ({"scheme": "uncoded"}, {"scheme": "cyclic", "stragglers": STRAGGLERS}):
                job = run(local, job_spec(workers, data, code, iterations, LATE), files)
                per = statistics.median(r.duration_s for r in list(job.history)[WARMUP:])
                late.append({"workers": workers, "code": code["scheme"], "s_per_iteration": per, "state": job.state})
                print(f"{workers} workers, two 1 s late, {code['scheme']:8} {per:6.3f} s/iteration", flush=True)
    worker_bound = WORKER_BOUND[0] * share_mb + WORKER_BOUND[1]
    master_bound = MASTER_BOUND[0] * data_mb + MASTER_BOUND[1]
    row = {"point": name, "workers": workers, "data_mb": data_mb, "worker_share_mb": share_mb,
           "worker_peak_mb": statistics.median(peaks), "worker_peak_max_mb": max(peaks),
           "worker_bound_mb": worker_bound, "master_peak_mb": master, "master_bound_mb": master_bound,
           "within_bounds": max(peaks) <= worker_bound and master <= master_bound}
    print(f"{name:14} n={workers:3} data {data_mb:7.0f} MB: workers peak {row['worker_peak_mb']:6.0f} MB "
          f"(max {max(peaks):6.0f}, share {share_mb:6.1f}, bound {worker_bound:6.0f}); master {master:6.0f} MB "
          f"(bound {master_bound:6.0f})", flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv)
    features = 50 if bench.quick else FEATURES
    iterations = 4 if bench.quick else 8
    by_n = (4,) if bench.quick else (6, 16)  # then ``biggest``; few between: each point starts its own cluster
    sizes = (2.0, 8.0) if bench.quick else (60.0, 240.0, 1000.0)
    biggest = 6 if bench.quick else 64
    base = sizes[-2]  # the 240 MB job
    rows, late = [], []

    def drawn(name: str, n: int, megabytes: float, keep: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        samples = samples_for(megabytes, features)
        share = (STRAGGLERS + 1) * math.ceil(train_size(samples) / n) * (features + 1) * 8 / 1e6
        return point(name, n, generated(samples, features), samples * (features + 1) * 8 / 1e6, share, iterations,
                     late=keep)

    for n in by_n:
        rows.append(drawn("against n", n, base))
    rows.append(drawn("against n", biggest, base, late))
    for megabytes in sizes:
        rows.append(drawn("against size", 8, megabytes))
    for kind, write, wide in (("npz", dense_file, features), ("sparse npz", sparse_file, SPARSE_FEATURES)):
        for megabytes in sizes:
            with tempfile.TemporaryDirectory(prefix="coded-bench-") as folder:
                path = Path(folder) / "data.npz"
                samples = write(path, megabytes, wide)
                upload = path.read_bytes()
            file_mb = len(upload) / 1e6
            # a worker's share: its partitions' part of the training rows, as a part of the file
            share = (STRAGGLERS + 1) * math.ceil(train_size(samples) / 8) / samples * file_mb
            rows.append(point(f"uploaded {kind}", 8, {"type": "npz", "path": "data.npz"}, file_mb, share,
                              iterations, {"data.npz": upload}))
            del upload
    bench.finish()
    bench.csv("memory.csv", rows, COLUMNS)
    bench.csv("memory_late.csv", late, LATE_COLUMNS)
    header = bench.header(
        f"logistic regression on generated Gaussian-mixture data, {features} float64 features, and on uploaded "
        f"files (dense .npz of {features} float64 features; CSR .npz of {SPARSE_FEATURES} features, "
        f"{SPARSE_PER_ROW} values a row; 20% held out as the test set), cyclic "
        f"`stragglers: {STRAGGLERS}`, {iterations} iterations; a fresh local cluster per point; peaks are VmHWM "
        "(one reading per point: memory does not vary with the machine's load as time does); a worker's share "
        f"is its {STRAGGLERS + 1} partitions of the training rows (x and y); bounds: worker "
        f"{WORKER_BOUND[0]} x share + {WORKER_BOUND[1]:g} MB, master {MASTER_BOUND[0]} x data + "
        f"{MASTER_BOUND[1]:g} MB")
    sections = [markdown_table(rows, COLUMNS, digits=4),
                f"{biggest} workers with two of them 1 s late every iteration "
                f"(seconds per iteration, median after {WARMUP} of warm-up):\n\n" + markdown_table(late, LATE_COLUMNS)]
    bench.page("memory.md", "Memory against the workers and the data", header, sections)
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
        "uploaded files (n = 8)": {
            f"{label}, {kind}": [(r["data_mb"], r[key]) for r in rows if r["point"] == f"uploaded {kind}"]
            for kind in ("npz", "sparse npz") for label, key in (("master peak", "master_peak_mb"),
                                                                 ("worker peak", "worker_peak_max_mb"))},
    }, bench.out / "memory.png", "workers, or data MB", "MB", "; ".join(header[1:]))
    print(f"wrote {bench.out / 'memory.csv'}, memory_late.csv, memory.md and memory.png; {bench.guard.line()}")
    return 0 if all(r["within_bounds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
