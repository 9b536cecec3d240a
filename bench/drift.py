"""A cluster that has run many jobs: does it get slower, does its master grow? (issue 23)

    python -m bench.drift            # 12 jobs in a row, uncoded logistic 48000 x 500, n = 6
    python -m bench.drift --quick    # a seconds-long smoke run

One local cluster runs the same job again and again. After each: the job's time per iteration
(after the warm-up) and the resident memory of the master and of the workers (from /proc). The
summary compares the last few jobs with the first few (ratios within one run: no absolute time
from another day is compared). Writes ``bench/results/drift.csv`` and ``.md``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.cluster import logistic_spec
from bench.common import markdown_table, process_memory
from bench.mpi import WARMUP, per_iteration
from bench.skeleton import Bench
from coded.client.reports import JobState
from coded.cluster.local import LocalCluster

N = 6
#: seconds between a job's end and the memory reading: the client hears the terminal state just
#: before the master's job task returns and frees the job's arrays
SETTLE_S = 1.0
COLUMNS = ["job", "ms_per_iteration", "master_rss_mb", "workers_rss_mb"]


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, arguments=lambda parser: parser.add_argument("--jobs", type=int, default=12))
    jobs, (samples, features), iterations = (3, (6000, 50), WARMUP + 5) if bench.quick else (
        bench.args.jobs, (48_000, 500), 40)
    spec = yaml.safe_dump(logistic_spec(N, {"scheme": "uncoded"}, samples, features, iterations))
    rows: list[dict[str, Any]] = []
    with (tempfile.TemporaryDirectory(prefix="coded-bench-") as state,
          LocalCluster(N, Path(state), startup_timeout=300) as local, local.client() as client):
        assert local.master is not None
        for index in range(jobs):
            job = client.wait(client.submit(spec).id)
            if job.state != JobState.SUCCEEDED:
                raise RuntimeError(f"benchmark job failed: {job.reason}")
            time.sleep(SETTLE_S)
            rows.append({"job": index, "ms_per_iteration": 1e3 * per_iteration([r.elapsed_s for r in job.history]),
                         "master_rss_mb": process_memory(local.master.pid)[1],
                         "workers_rss_mb": statistics.mean(process_memory(p.pid)[1] for p in local.workers.values())})
            print(f"job {index:2}: {rows[-1]['ms_per_iteration']:7.2f} ms per iteration, master "
                  f"{rows[-1]['master_rss_mb']:7.1f} MiB, workers {rows[-1]['workers_rss_mb']:6.1f} MiB", flush=True)
    bench.finish()
    few = max(1, len(rows) // 4)
    first, last = rows[:few], rows[-few:]

    def ratio(key: str) -> float:
        return statistics.median(r[key] for r in last) / statistics.median(r[key] for r in first)

    summary = (f"last {few} jobs against the first {few} (medians): time per iteration "
               f"{ratio('ms_per_iteration'):.2f}x, master memory {ratio('master_rss_mb'):.2f}x, "
               f"workers' memory {ratio('workers_rss_mb'):.2f}x")
    print(summary)
    bench.csv("drift.csv", rows, COLUMNS)
    header = bench.header(
        f"n = {N}, uncoded logistic regression {samples} x {features}, {iterations} iterations per job "
        f"({WARMUP} of warm-up), {jobs} jobs in a row on one local cluster; memory {SETTLE_S:g} s after each job",
        summary)
    bench.page("drift.md", "Many jobs on one cluster", header, [markdown_table(rows, COLUMNS)])
    print(f"wrote {bench.out / 'drift.csv'} and drift.md; {bench.guard.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
