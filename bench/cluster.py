"""Benchmarks of the gradient-coding cluster, on real local processes.

    python -m bench.cluster overhead   # fixed cost per iteration and iteration / ideal, n = 6 and 16
    python -m bench.cluster scaling    # iteration time against n = 4 ... 32 (--label names the code)
    python -m bench.cluster ingest     # the master's ingest on the data plane vs plain TCP
    python -m bench.cluster speedup    # time to target loss, coded vs uncoded vs ignoring, n = 10

Each prints a table and writes ``bench/results/cluster_<name>.csv`` and ``.md``. ``--quick`` runs
a seconds-long version (used by the smoke test). Jobs run with ``verify: off``: the papers' schemes,
unchecked (bench/verification.py measures what checking costs).

Every benchmark that runs jobs starts a local cluster of the size it needs, or, with ``--cluster
HOST:PORT``, runs them on a cluster that is already up (``cluster`` below): a deployed one, or the
one the smoke tests share.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.common import markdown_table, plot_panels, spread, summarise_repeats
from bench.skeleton import Bench
from coded.client import CodedClient
from coded.client.reports import Job, JobState
from coded.cluster.local import LocalCluster
from coded.config import default_token
from coded.wire.rpc import Security

WARMUP = 2  # iterations excluded from timing (channel set-up, first allocations)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cluster`` and ``--cluster-metrics``, the flags of every benchmark that runs jobs."""
    parser.add_argument("--cluster", metavar="HOST:PORT",
                        help="run the jobs on the cluster whose master listens there, which needs as many idle "
                             "workers as the largest job (default: a local cluster started for the benchmark)")
    parser.add_argument("--cluster-metrics", metavar="URL",
                        help="with --cluster: that master's /metrics URL, for the benchmarks that read it")


@dataclass(frozen=True)
class Cluster:
    """Where a benchmark's jobs run: the master's address, its /metrics URL when it is read, the
    credentials of a client, and the worker processes by index when the cluster is local (empty
    for ``--cluster``: a benchmark that acts on a worker's process needs a local cluster)."""

    address: str
    metrics_url: str | None
    security: Security
    workers: Mapping[int, subprocess.Popen] = field(default_factory=dict)

    def client(self) -> CodedClient:
        return CodedClient(self.address, self.security)


@contextlib.contextmanager
def cluster(args: argparse.Namespace, workers: int, metrics: bool = False) -> Iterator[Cluster]:
    """The cluster ``--cluster`` names (with $CODED_TOKEN, if set), or a local one of ``workers``
    workers (their master with a /metrics port when ``metrics``) for the time of the block."""
    if args.cluster:
        if metrics and not args.cluster_metrics:
            raise SystemExit("this benchmark reads the master's /metrics: pass --cluster-metrics URL")
        yield Cluster(args.cluster, args.cluster_metrics, Security(token=default_token()))  # as `coded` does
        return
    with (
        tempfile.TemporaryDirectory(prefix="coded-bench-") as state,
        LocalCluster(workers, Path(state), startup_timeout=300, metrics=metrics) as local,
    ):
        metrics_url = f"http://127.0.0.1:{local.metrics_ports['master']}/metrics" if metrics else None
        yield Cluster(local.address, metrics_url, local.security, local.workers)  # restarts show in it


def run_jobs(args: argparse.Namespace, workers: int, specs: list[dict[str, Any]]) -> list[Job]:
    """Run jobs one after another on ``cluster(args, workers)``; returns the finished jobs."""
    finished = []
    with cluster(args, workers) as where, where.client() as client:
        for spec in specs:
            job = client.wait(client.submit(yaml.safe_dump(spec)).id)
            if job.state != JobState.SUCCEEDED:
                raise RuntimeError(f"benchmark job failed: {job.reason}")
            finished.append(job)
    return finished


def training_curve(job: Job, metric: str) -> list[tuple[float, float]]:
    """(seconds of training, metric) at each evaluated iteration. The clock starts when the first
    iteration starts: assigning workers and loading their data is a one-off cost that differs
    between schemes (a worker with d partitions loads d times the data) and is not training."""
    start = job.history[0].elapsed_s - job.history[0].duration_s
    return [(r.elapsed_s - start, getattr(r, metric)) for r in job.history if not math.isnan(getattr(r, metric))]


def base_spec(workers: int, code: dict, model: dict, data: dict, iterations: int, **extra: Any) -> dict[str, Any]:
    """A gradient job as the papers ran it: unchecked (``verify: off``; bench/verification.py measures
    what checking costs), checkpoints rare enough not to be measured."""
    return {"kind": "gradient_coding", "workers": workers, "code": code, "model": model, "data": data,
            "optimizer": {"type": "sgd", "lr": 0.01}, "iterations": iterations, "eval_every": 0,
            "checkpoint_every": 1000, "seed": 1, "verify": "off", **extra}


# --- overhead ---------------------------------------------------------------------------------------

#: the logistic-regression workloads of the MPI comparison in issue 14: training rows x features
WORKLOADS = {"12000x100": (12_000, 100), "48000x500": (48_000, 500)}
REPEATS = 3


def logistic_spec(n: int, code: dict, rows: int, features: int, iterations: int, **extra: Any) -> dict[str, Any]:
    """Logistic regression on ``rows`` training rows of a Gaussian mixture, accelerated GD."""
    data = {"type": "gaussian_mixture", "samples": math.ceil(rows / 0.8), "features": features, "classes": 2,
            "seed": 1}
    spec = base_spec(n, code, {"type": "logistic", "l2": 0.0001}, data, iterations, **extra)
    spec["optimizer"] = {"type": "nesterov", "lr": 0.5}
    return spec


def iteration_costs(job: Job) -> dict[str, float]:
    """Medians over a job's iterations (after the warm-up) of its wall time, of the ideal (the
    compute time of the slowest worker among those decoded from: the (n-s)-th fastest), of the
    fixed cost (their difference) and of their ratio, in ms."""
    records = list(job.history)[WARMUP:]
    ideal = [max(r.worker_compute_s) for r in records]
    wall = [r.duration_s for r in records]
    return {"iteration_ms": 1e3 * statistics.median(wall), "ideal_ms": 1e3 * statistics.median(ideal),
            "fixed_ms": 1e3 * statistics.median(w - i for w, i in zip(wall, ideal, strict=True)),
            "ratio": statistics.median(w / i for w, i in zip(wall, ideal, strict=True))}


def _repeated(client: CodedClient, spec: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Run ``spec`` ``repeats`` times; each measure's median over repeats (and low/high)."""
    runs = []
    for _ in range(repeats):
        job = client.wait(client.submit(yaml.safe_dump(spec)).id)
        if job.state != JobState.SUCCEEDED:
            raise RuntimeError(f"benchmark job failed: {job.reason}")
        runs.append(iteration_costs(job))
    row: dict[str, Any] = {"repeats": repeats}
    for key in runs[0]:
        stats = spread([r[key] for r in runs])
        row[key], row[f"{key}_low"], row[f"{key}_high"] = stats["median"], stats["low"], stats["high"]
    return row


def overhead(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per-iteration cost at n = 6 and 16 (s = 2): uncoded and cyclic without stragglers, and
    cyclic with workers 0 and 1 sleeping 1 s in every iteration."""
    rows = []
    ns = (6,) if args.quick else (6, 16)
    repeats = 1 if args.quick else REPEATS
    for n in ns:
        with cluster(args, n) as where, where.client() as client:
            for workload, (rows_, features) in WORKLOADS.items():
                if args.quick and workload != "12000x100":
                    continue
                # 98 or 38 timed: their median is steady, and they take less time than making the job's data
                its = 12 if args.quick else (100 if features <= 100 else 40)
                slow = {"stragglers": {"model": "fixed", "workers": [0, 1], "delay": 1.0}}
                cases = [("uncoded", {"scheme": "uncoded"}, {}, its),
                         ("cyclic", {"scheme": "cyclic", "stragglers": 2}, {}, its),
                         ("cyclic", {"scheme": "cyclic", "stragglers": 2}, {"faults": slow}, min(its, 20))]
                for scheme, code, extra, iterations in cases:
                    spec = logistic_spec(n, code, rows_, features, iterations, **extra)
                    row = {"n": n, "s": code.get("stragglers", 0), "workload": workload, "scheme": scheme,
                           "stragglers": "2 x 1 s" if extra else "none", "iterations": iterations - WARMUP,
                           **_repeated(client, spec, repeats)}
                    print(f"n={n:3} {workload:10} {scheme:8} stragglers {row['stragglers']:8}: iteration "
                          f"{row['iteration_ms']:7.2f} ms, ideal {row['ideal_ms']:7.2f} ms, fixed "
                          f"{row['fixed_ms']:6.2f} ms ({row['fixed_ms_low']:.2f}-{row['fixed_ms_high']:.2f}), "
                          f"ratio {row['ratio']:.3f}", flush=True)
                    rows.append(row)
    return rows


# --- scaling ----------------------------------------------------------------------------------------


def scaling(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Iteration time against n (the 12000x100 workload; every worker on the same 2 cores)."""
    rows = []
    ns = (4, 8) if args.quick else (4, 8, 12, 16, 24, 32)
    repeats = 1 if args.quick else REPEATS
    rows_, features = WORKLOADS["12000x100"]
    for n in ns:
        with cluster(args, n) as where, where.client() as client:
            for scheme, code in (("uncoded", {"scheme": "uncoded"}), ("cyclic", {"scheme": "cyclic", "stragglers": 2})):
                spec = logistic_spec(n, code, rows_, features, 12 if args.quick else 100)
                row = {"label": args.label, "n": n, "scheme": scheme, "cores": os.cpu_count(),
                       **_repeated(client, spec, repeats)}
                print(f"[{args.label}] n={n:3} {scheme:8}: iteration {row['iteration_ms']:7.2f} ms "
                      f"({row['iteration_ms_low']:.2f}-{row['iteration_ms_high']:.2f}), ideal {row['ideal_ms']:.2f} ms",
                      flush=True)
                rows.append(row)
    return rows


# --- ingest -----------------------------------------------------------------------------------------

TCP_PEER = r"""
import socket, sys
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payload = bytes(size)
with socket.create_connection((host, port)) as conn:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        need, got = size, bytearray()
        while need:                       # receive the 'parameters'
            chunk = conn.recv(min(need, 1 << 20))
            if not chunk:
                sys.exit(0)
            need -= len(chunk)
        conn.sendall(payload)             # send the 'message' back
"""


def tcp_round_seconds(peers: int, size: int, rounds: int) -> list[float]:
    """Plain TCP: one process sends ``size`` bytes to each of ``peers`` processes and receives
    ``size`` bytes back from each, concurrently (threads), like one iteration of the master."""
    import threading

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(peers)
        port = server.getsockname()[1]
        procs = [subprocess.Popen([sys.executable, "-c", TCP_PEER, "127.0.0.1", str(port), str(size)])
                 for _ in range(peers)]
        conns = [server.accept()[0] for _ in range(peers)]
        payload = bytes(size)
        times = []
        try:
            for _ in range(rounds):
                def exchange(conn: socket.socket) -> None:
                    conn.sendall(payload)
                    buffer, got = bytearray(size), 0
                    view = memoryview(buffer)
                    while got < size:
                        got += conn.recv_into(view[got:], size - got)

                start = time.perf_counter()
                threads = [threading.Thread(target=exchange, args=(c,)) for c in conns]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                times.append(time.perf_counter() - start)
        finally:
            for conn in conns:
                conn.close()
            for proc in procs:
                proc.wait(timeout=30)
    return times


def _decode_seconds(metrics_url: str, job_id: str) -> float:
    """The master's mean decode time for one job, from its /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    values = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
              if s.name.startswith("coded_decode_duration_seconds_") and s.labels.get("job_id") == job_id}
    return values["coded_decode_duration_seconds_sum"] / max(values["coded_decode_duration_seconds_count"], 1)


def ingest(args: argparse.Namespace) -> list[dict[str, Any]]:
    """8 workers send 10^7-float gradients: the cluster's data plane against plain TCP moving the
    same bytes between the same number of processes, repeated side by side."""
    length = 100_001 if args.quick else 10_001_000
    features, classes = (1000, 100) if args.quick else (10_000, 1000)
    n, iterations = 8, (5 if args.quick else 8)  # 2.3 s each here: 6 timed after the warm-up
    repeats = 1 if args.quick else REPEATS
    size = 8 * (length + 1)  # float64 message of gradient + loss
    spec = base_spec(n, {"scheme": "uncoded"}, {"type": "softmax"},
                     {"type": "gaussian_mixture", "samples": 20, "features": features, "classes": classes, "seed": 1},
                     iterations)
    runs = []
    with cluster(args, n, metrics=True) as where, where.client() as client:
        assert where.metrics_url is not None
        for _ in range(repeats):
            job = client.wait(client.submit(yaml.safe_dump(spec)).id)
            if job.state != JobState.SUCCEEDED:
                raise RuntimeError(f"benchmark job failed: {job.reason}")
            decode = _decode_seconds(where.metrics_url, job.id)
            records = list(job.history)[WARMUP:]
            # params out and messages in: the iteration less the slowest responder's compute and the decode
            comm = statistics.median(r.duration_s - max(r.worker_compute_s) - decode for r in records)
            tcp = statistics.median(tcp_round_seconds(n, size, len(records)))  # right after, same machine
            runs.append({"iteration": statistics.median(r.duration_s for r in records), "decode": decode,
                         "comm": comm, "tcp": tcp, "ratio": tcp / comm})
    row: dict[str, Any] = {"workers": n, "message_floats": length + 1, "bytes_per_iteration_in": n * size,
                           "repeats": repeats}
    for key in ("iteration", "decode", "comm", "tcp"):
        row[f"{key}_ms"] = 1e3 * statistics.median(r[key] for r in runs)
    row["cluster_ingest_MBps"] = n * size / (row["comm_ms"] / 1e3) / 1e6
    row["tcp_ingest_MBps"] = n * size / (row["tcp_ms"] / 1e3) / 1e6
    ratios = spread([r["ratio"] for r in runs])
    row["ratio"], row["ratio_low"], row["ratio_high"] = ratios["median"], ratios["low"], ratios["high"]
    print(f"cluster: {row['cluster_ingest_MBps']:.0f} MB/s in (comm {row['comm_ms']:.0f} ms/iteration), plain TCP: "
          f"{row['tcp_ingest_MBps']:.0f} MB/s in ({row['tcp_ms']:.0f} ms/round): ratio {row['ratio']:.2f} "
          f"({row['ratio_low']:.2f}-{row['ratio_high']:.2f})", flush=True)
    return [row]


# --- speed-up ---------------------------------------------------------------------------------------


def speedup(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Time to the target loss of every code, the whole list of jobs ``REPEATS`` times (same seed);
    the target and the speed-ups are taken within each repeat."""
    n = 10
    stragglers = (1,) if args.quick else (1, 2, 3, 4)
    iterations = 6 if args.quick else 20  # of 40, every code reached the target within about 8
    repeats = 1 if args.quick else REPEATS
    faults = {"stragglers": {"model": "shifted_exponential", "shift": 0.01, "mean": 0.05}}
    data = {"type": "gaussian_mixture", "samples": 20000, "features": 100, "classes": 2, "seed": 1}

    def spec(code: dict) -> dict[str, Any]:
        out = base_spec(n, code, {"type": "logistic", "l2": 0.0001}, data, iterations, faults=faults, eval_every=1)
        out["optimizer"] = {"type": "nesterov", "lr": 2.0}
        return out

    codes = [{"scheme": "uncoded"}]
    for s in stragglers:
        codes += [{"scheme": "ignore_stragglers", "stragglers": s}, {"scheme": "cyclic", "stragglers": s},
                  {"scheme": "ye_abbe", "stragglers": s, "m": 1}]
    jobs = run_jobs(args, n, [spec(c) for c in codes] * repeats)
    runs = []
    for k in range(repeats):
        done = jobs[k * len(codes):(k + 1) * len(codes)]
        curves = [training_curve(job, "test_loss") for job in done]
        first, final = curves[0][0][1], curves[0][-1][1]
        target = final + 0.05 * (first - final)
        reference = next(t for t, loss in curves[0] if loss <= target)
        rows = []
        for code, job, curve in zip(codes, done, curves, strict=True):
            reached = next((t for t, loss in curve if loss <= target), math.inf)
            rows.append({"scheme": code["scheme"], "s": code.get("stragglers", 0),
                         "s_per_iteration": job.elapsed_s / job.iteration, "time_to_target_s": reached,
                         "speedup_vs_uncoded": reference / reached,
                         "final_test_loss": job.history[-1].test_loss,
                         "final_test_accuracy": job.history[-1].test_accuracy})
            print(f"{code['scheme']:18} s={rows[-1]['s']}: {rows[-1]['s_per_iteration']:.3f} s/it, to target "
                  f"{reached:.2f} s, speed-up {rows[-1]['speedup_vs_uncoded']:.2f}", flush=True)
        runs.append(rows)
    return summarise_repeats(runs, ["time_to_target_s", "speedup_vs_uncoded"])


COLUMNS = {
    "overhead": ["n", "s", "workload", "scheme", "stragglers", "iterations", "repeats", "iteration_ms",
                 "iteration_ms_low", "iteration_ms_high", "ideal_ms", "fixed_ms", "fixed_ms_low", "fixed_ms_high",
                 "ratio", "ratio_low", "ratio_high"],
    "scaling": ["label", "n", "scheme", "cores", "repeats", "iteration_ms", "iteration_ms_low", "iteration_ms_high",
                "ideal_ms", "fixed_ms", "ratio"],
    "ingest": ["workers", "message_floats", "bytes_per_iteration_in", "repeats", "iteration_ms", "decode_ms",
               "comm_ms", "tcp_ms", "cluster_ingest_MBps", "tcp_ingest_MBps", "ratio", "ratio_low", "ratio_high"],
    "speedup": ["scheme", "s", "repeats", "s_per_iteration", "time_to_target_s", "time_to_target_s_low",
                "time_to_target_s_high", "speedup_vs_uncoded", "speedup_vs_uncoded_low", "speedup_vs_uncoded_high",
                "final_test_loss", "final_test_accuracy"],
}
NOTES = {
    "overhead": "Logistic regression (Gaussian mixture, rows x features of training data), nesterov; every process "
                "on the same machine. ideal = the compute time of the slowest worker among those decoded from (the "
                "(n-s)-th fastest); fixed = iteration - ideal; ratio = iteration / ideal. Each value: the median "
                "over iterations (after 2 warm-up ones) of one job, then the median (low-high) over repeated jobs.",
    "scaling": "12000 x 100 logistic regression, uncoded and cyclic (s = 2), no injected faults; all n workers and "
               "the master share the machine's cores. Median over iterations of one job, median (low-high) over "
               "repeated jobs. label: the code measured; before = commit fd8e0ca, the per-call gRPC design issue 14 "
               "measured (run with this script, less the verify field it did not know); after = the data plane.",
    "ingest": "8 workers send uncoded float64 gradients (softmax regression, 10^7 parameters) over the data plane; "
              "comm = iteration time less the slowest responder's compute and the master's mean decode time (its "
              "/metrics): the parameters out and the messages in, plus the optimizer step. Plain TCP moves the same "
              "bytes both ways between one process and 8 others (threads, recv_into), right after each job. "
              "ratio = cluster ingest / TCP ingest per repeat; median (low-high) over repeats.",
    "speedup": "n = 10, shifted-exponential delays (shift 0.01 s, mean 0.05 s) on every worker, logistic regression, "
               "20000 x 100 Gaussian mixture, nesterov lr 2.0, seed 1. Target: uncoded's final test loss + 5% of "
               "its drop. inf: never reached. Times count from each job's first iteration. The whole list of jobs "
               f"runs {REPEATS} times (1 with --quick), same seed; the target and speed-up = uncoded's time / the "
               "scheme's are taken within each repeat, then time to target and speed-up are given as the median "
               "(low-high) over repeats (not a ratio of medians), the other columns as their median.",
}


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("which", choices=sorted(COLUMNS))
    parser.add_argument("--label", default="after", help="scaling: names the code measured (results file suffix)")


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, arguments=arguments)
    args = bench.args
    bench.open()
    rows = {"overhead": overhead, "scaling": scaling, "ingest": ingest, "speedup": speedup}[args.which](args)
    name = f"cluster_{args.which}"
    bench.finish()
    header = bench.header()
    if args.which == "scaling":  # one CSV per label; the page shows every label measured so far
        bench.csv(f"{name}_{args.label}.csv", rows, COLUMNS[args.which])
        (args.out / f"{name}_{args.label}.header").write_text("\n".join(header) + "\n")
        rows = scaling_page(args.out)
        header = [f"[{label}] {line}" for label in sorted({r["label"] for r in rows})
                  for line in (args.out / f"{name}_{label}.header").read_text().splitlines()]
    else:
        bench.csv(f"{name}.csv", rows, COLUMNS[args.which])
    bench.page(f"{name}.md", f"Cluster benchmark: {args.which}", header,
               [NOTES[args.which], markdown_table(rows, COLUMNS[args.which], digits=3)])
    print(markdown_table(rows, COLUMNS[args.which], digits=3))
    return 0


def scaling_page(out: Path) -> list[dict[str, Any]]:
    """Every label's scaling rows, and their plot (iteration time against n, per scheme)."""
    import csv

    rows: list[dict[str, Any]] = []
    for path in sorted(out.glob("cluster_scaling_*.csv")):
        with path.open(newline="") as handle:
            rows += [{k: (float(v) if k not in ("label", "scheme") else v) for k, v in r.items()}
                     for r in csv.DictReader(handle)]
    panels: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for row in sorted(rows, key=lambda r: (r["scheme"], r["label"], r["n"])):
        panels.setdefault(row["scheme"], {}).setdefault(row["label"], []).append((row["n"], row["iteration_ms"]))
    cores = int(rows[0]["cores"]) if rows else 0
    plot_panels(panels, out / "cluster_scaling.png", "workers n (all on the same cores)", "ms per iteration",
                f"12000 x 100 logistic regression, s = 2 for cyclic, no injected delays; master and all n workers "
                f"share {cores} cores; median over repeated jobs")
    return rows


if __name__ == "__main__":
    sys.exit(main())
