"""A large sparse upload: about 1 GB of CSR trains on a local cluster, and every process's memory
is measured.

    python -m bench.large_sparse            # 10^6 rows x 10^6 features, 80 stored values per row
    python -m bench.large_sparse --quick    # 20,000 rows: a smoke run

The file is scipy's CSR members with the labels (``data.type: npz``, float64 values, int32
indices: 12 bytes per stored value), uploaded with the job. A local cluster of ``WORKERS``
workers trains logistic regression (cyclic code, whole replies) for a few iterations; then each
process's peak resident memory (VmHWM in /proc) is read, beside what it holds: the file for the
master, its partitions' CSR arrays for a worker. The bench's own process (the client, which
reads the file to upload it) is reported too.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.common import markdown_table, process_memory
from bench.skeleton import Bench
from coded.client.reports import JobState
from coded.cluster.local import LocalCluster

WORKERS, STRAGGLERS, ITERATIONS = 4, 1, 4
ROWS, FEATURES, PER_ROW = 1_000_000, 1_000_000, 80
COLUMNS = ["process", "holds_mb", "peak_rss_mb", "current_rss_mb"]


def write_csr(path: Path, rows: int, features: int, per_row: int, seed: int = 0) -> int:
    """A random CSR matrix with ``per_row`` stored values per row (distinct, ascending columns) and
    labels of a planted sparse logistic model, as an .npz of scipy's members; returns its bytes."""
    rng = np.random.default_rng(seed)
    # sorted draws plus 0, 1, 2, ...: strictly ascending within each row, all below ``features``
    indices = np.sort(rng.integers(0, features - per_row, size=(rows, per_row), dtype=np.int32), axis=1)
    indices += np.arange(per_row, dtype=np.int32)
    data = rng.choice(np.array([1.0, 0.5, 2.0]), size=rows * per_row)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    weights = np.where(rng.random(features) < 0.01, rng.normal(size=features), 0.0)
    logits = (data * weights[indices.ravel()]).reshape(rows, per_row).sum(axis=1)
    y = (logits + rng.logistic(size=rows) > np.median(logits)).astype(np.int64)
    np.savez(path, format="csr", shape=np.array([rows, features]), data=data, indices=indices.ravel(), indptr=indptr,
             y=y)
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv)
    rows, features = (20_000, 50_000) if bench.quick else (ROWS, FEATURES)
    with tempfile.TemporaryDirectory(prefix="coded-large-") as scratch:
        path = Path(scratch) / "large.npz"
        size = write_csr(path, rows, features, PER_ROW)
        bench.open(f"bench/large_sparse.py: a CSR upload of {rows:,} rows x {features:,} features, {PER_ROW} stored "
                   f"values per row ({size / 1e6:,.0f} MB), logistic regression, {WORKERS} workers, cyclic "
                   f"stragglers {STRAGGLERS}, whole replies, {ITERATIONS} iterations")
        spec: dict[str, Any] = {
            "kind": "gradient_coding", "workers": WORKERS, "code": {"scheme": "cyclic", "stragglers": STRAGGLERS},
            "model": {"type": "logistic", "l2": 1e-6}, "data": {"type": "npz", "path": "large.npz"},
            "optimizer": {"type": "nesterov", "lr": 1.0}, "iterations": ITERATIONS, "eval_every": ITERATIONS,
            "stream": "off", "timeouts": {"call_s": 600}, "seed": 1}
        with LocalCluster(WORKERS, Path(scratch) / "cluster", startup_timeout=300,
                          master_args=["--max-upload-mb", str(2 * size // 2**20 + 1)]) as local, \
                local.client(timeout=1200) as client:
            job = client.wait(client.submit(yaml.safe_dump(spec), {"large.npz": path.read_bytes()}).id)
            if job.state != JobState.SUCCEEDED:
                raise SystemExit(f"the job failed: {job.reason}")
            assert local.master is not None
            measured = [("master", local.master.pid, size / 1e6)]
            share = size / 1e6 * (STRAGGLERS + 1) / WORKERS * (1 - 0.2)  # its partitions of the training rows
            measured += [(f"worker-{i}", process.pid, share) for i, process in sorted(local.workers.items())]
            table = [{"process": name, "holds_mb": holds,
                      **dict(zip(("peak_rss_mb", "current_rss_mb"), process_memory(pid), strict=True))}
                     for name, pid, holds in measured]
            table.append({"process": "client (this benchmark)", "holds_mb": size / 1e6,
                          **dict(zip(("peak_rss_mb", "current_rss_mb"), process_memory(os.getpid()), strict=True))})
            auc = job.history[-1].test_auc
    bench.finish()
    header = bench.header(f"the job: {job.iteration} iterations in {job.elapsed_s:.1f} s, test AUC {auc:.3f}")
    print(markdown_table(table, COLUMNS, digits=4))
    bench.csv("large_sparse.csv", table, COLUMNS)
    bench.page("large_sparse.md", "A large sparse upload: memory of every process", header, [
        "## Peak memory\n\nholds_mb: the file (master, client) or a worker's share of the training rows "
        f"(s + 1 = {STRAGGLERS + 1} of {WORKERS} partitions of the 80% kept for training); peak_rss_mb: VmHWM, the "
        "largest resident set since the process started (the worker's own imports included: an idle worker is "
        "about 70 MB).\n\n" + markdown_table(table, COLUMNS, digits=4)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
