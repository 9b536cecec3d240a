"""Streamed replies against whole replies and uncoded training, side by side, under late, slow and
replayed-trace workers (issue 22; Ramamoorthy, Meng and Girimaji 2024 on partial stragglers).

    python -m bench.partial              # 3 repeats, logistic 48000 x 500, 4 modes (about 6 minutes on 2 cores)
    python -m bench.partial --all-modes  # every mode (twice as long)
    python -m bench.partial --lenet      # and LeNet on digits too (the torch extra; twice as long)
    python -m bench.partial --quick      # a seconds-long smoke run

n = 6 workers, cyclic code with ``stragglers: 2``. Modes (``DEFAULT_MODES`` by default: each job
costs ~4 s to set up, its 192 MB of data above all, and make bench runs 72 of them here): uncoded;
whole replies (``stream: off``) checked (their default, strict) and, with ``--all-modes``,
unchecked; streamed (one piece per partition, the default) with the sampled check (the default),
the strict one and, with ``--all-modes``, none, with the naive (sorted) order instead of the
staggered one, and with 4 pieces per partition. Scenarios:
no stragglers; two workers 1 s late every iteration; one worker 2.4x slow every iteration
(``faults.slowdown``, a sleep); one worker held by the kernel to 10% of a core (a cgroup CPU
quota, bench/cpu_quota.py: it needs root and a local cluster, and is left out, with a line saying
so, where either is missing); the ByteDance AR and ST compute-time traces replayed (bench/traces/). For
each: seconds per iteration (median after the warm-up), its ratio to uncoded in the same scenario
and repeat,
its ratio to uncoded with no stragglers in the same repeat (``vs_healthy``), and the time to the
uncoded run's final training loss. Every mode of a repeat runs on one local
cluster, one after another, scenario by scenario; the repeats run on fresh clusters. Writes
``bench/results/partial.csv``, ``.md`` and ``partial.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.cluster import WARMUP, Cluster, cluster, logistic_spec, training_curve
from bench.common import markdown_table, plot_panels, relative_to, summarise_repeats
from bench.cpu_quota import CpuQuotaUnavailable, cpu_quota, hierarchy
from bench.skeleton import Bench
from coded.client import CodedClient
from coded.client.reports import Job, JobState
from coded.ml import pytorch

N = 6
#: iterations per job: 10 timed after the warm-up; a job's set-up already costs more than its
#: iterations (see the modes above)
ITERATIONS = 12
TRACES = Path(__file__).resolve().parent / "traces"
#: (name, the spec's changes): what each mode runs
MODES: list[tuple[str, dict[str, Any]]] = [
    ("uncoded", {"code": {"scheme": "uncoded"}}),
    ("whole, strict", {"stream": "off"}),
    ("whole, off", {"stream": "off", "verify": "off"}),
    ("streamed, sampled", {}),
    ("streamed, strict", {"verify": "strict"}),
    ("streamed, off", {"verify": "off"}),
    ("streamed sorted, sampled", {"stream": {"order": "sorted"}}),
    ("streamed 4 pieces, sampled", {"stream": {"chunks": 4}}),
]
#: (name, faults, files to upload): the straggler scenarios
SCENARIOS: list[tuple[str, dict[str, Any], dict[str, Path]]] = [
    ("none", {}, {}),
    ("2 late 1 s", {"stragglers": {"model": "fixed", "workers": [1, 4], "delay": 1.0}}, {}),
    ("1 slow 2.4x", {"slowdown": {"model": "fixed", "workers": [2], "factor": 2.4}}, {}),
    ("1 at 10% of a core", {}, {}),
    ("trace AR", {"slowdown": {"model": "trace", "path": "bytedance-AR.csv"}},
     {"bytedance-AR.csv": TRACES / "bytedance-AR.csv"}),
    ("trace ST", {"slowdown": {"model": "trace", "path": "bytedance-ST.csv"}},
     {"bytedance-ST.csv": TRACES / "bytedance-ST.csv"}),
]
#: the scenarios whose slow worker is made by the kernel: (worker index, share of one core)
QUOTAS: dict[str, tuple[int, float]] = {"1 at 10% of a core": (0, 0.1)}
#: what a --quick smoke run keeps (seconds in all)
QUICK_SCENARIOS = ("none", "1 slow 2.4x", "trace AR")
QUICK_MODES = ("uncoded", "whole, strict", "streamed, sampled", "streamed sorted, sampled")
#: what a full run measures without --all-modes: the headline's two and each kind of reply at its default check
DEFAULT_MODES = ("uncoded", "whole, strict", "streamed, sampled", "streamed, strict")
COLUMNS = ["workload", "scenario", "mode", "repeats", "s_per_iteration", "s_per_iteration_low",
           "s_per_iteration_high", "vs_uncoded", "vs_uncoded_low", "vs_uncoded_high", "vs_healthy", "vs_healthy_low",
           "vs_healthy_high", "s_to_target",
           "s_to_target_low", "s_to_target_high", "pieces_of_slow_workers_used", "final_loss"]


def workloads(quick: bool, lenet: bool = True) -> dict[str, dict[str, Any]]:
    """The jobs' model, data and optimizer; LeNet if asked and where PyTorch is installed."""
    out = {}
    rows, features = (6000, 50) if quick else (48_000, 500)
    logistic = logistic_spec(N, {"scheme": "cyclic", "stragglers": 2}, rows, features, 0)
    out[f"logistic {rows}x{features}"] = {k: logistic[k] for k in ("model", "data", "optimizer")}
    if lenet and pytorch.available():
        out["lenet digits"] = {"model": {"type": "torch", "name": "lenet"}, "data": {"type": "digits"},
                               "optimizer": {"type": "adam", "lr": 0.005, "batch": 32}}
    return out


def spec(workload: dict[str, Any], mode: dict[str, Any], faults: dict[str, Any], iterations: int) -> dict[str, Any]:
    out = {"kind": "gradient_coding", "workers": N, "code": {"scheme": "cyclic", "stragglers": 2},
           "iterations": iterations, "eval_every": 0, "checkpoint_every": 100_000, "seed": 1, **workload}
    if faults:
        out["faults"] = faults
    out.update(mode)
    return out


def run(client: CodedClient, job_spec: dict[str, Any], files: dict[str, Path]) -> Job:
    job = client.wait(client.submit(yaml.safe_dump(job_spec), {k: v.read_bytes() for k, v in files.items()}).id)
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"benchmark job failed: {job.reason}")
    return job


def seconds_to(job: Job, target: float) -> float:
    """Training seconds until the loss first reached ``target`` (NaN: never)."""
    return next((t for t, loss in training_curve(job, "loss") if loss <= target), math.nan)


def quota_unavailable(args: argparse.Namespace) -> str:
    """Why the kernel-slowed scenarios cannot run here ("" if they can)."""
    if args.cluster:
        return "--cluster: the worker processes are not this machine's to slow"
    try:
        hierarchy()
    except CpuQuotaUnavailable as error:
        return str(error)
    return ""


def slowed(where: Cluster, scenario: str) -> contextlib.AbstractContextManager[object]:
    """The scenario's kernel-made slow worker for the block (nothing for the other scenarios)."""
    if scenario not in QUOTAS:
        return contextlib.nullcontext()
    worker, share = QUOTAS[scenario]
    return cpu_quota(where.workers[worker].pid, share)


def repeat(args: argparse.Namespace, iterations: int, scenarios: Sequence[str]
           ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One repeat of every point on a fresh cluster; the curves of the logistic workload."""
    rows: list[dict[str, Any]] = []
    curves: dict[str, Any] = {}
    chosen = QUICK_MODES if args.quick else [mode for mode, _ in MODES] if args.all_modes else DEFAULT_MODES
    with cluster(args, N) as where, where.client() as client:
        for workload_name, workload in workloads(args.quick, args.lenet).items():
            for scenario, faults, files in SCENARIOS:
                if scenario not in scenarios:
                    continue
                with slowed(where, scenario):
                    jobs = {mode: run(client, spec(workload, changes, faults, iterations), files)
                            for mode, changes in MODES if mode in chosen}
                uncoded = jobs["uncoded"]
                # the same loss for every exact mode, up to float64 rounding of the sums
                target = uncoded.history[-1].loss * (1 + 1e-9)
                base = statistics.median(r.duration_s for r in list(uncoded.history)[WARMUP:])
                for mode, job in jobs.items():
                    per = statistics.median(r.duration_s for r in list(job.history)[WARMUP:])
                    rows.append({"workload": workload_name, "scenario": scenario, "mode": mode,
                                 "s_per_iteration": per, "vs_uncoded": per / base,
                                 "s_to_target": seconds_to(job, target),
                                 "pieces_of_slow_workers_used": sum(r.stopped_pieces for r in job.history),
                                 "final_loss": job.history[-1].loss})
                    print(f"{workload_name:18} {scenario:12} {mode:26} {per * 1e3:8.1f} ms/iteration "
                          f"({per / base:5.2f}x uncoded), {rows[-1]['s_to_target']:6.2f} s to the uncoded loss",
                          flush=True)
                    if workload_name.startswith("logistic"):
                        curves.setdefault(scenario, {})[mode] = training_curve(job, "loss")
    relative_to(rows, "s_per_iteration", "vs_healthy", "workload",
                lambda row: row["scenario"] == "none" and row["mode"] == "uncoded")
    return rows, curves


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lenet", action="store_true",
                        help="LeNet on digits as a second workload (needs the torch extra)")
    parser.add_argument("--all-modes", action="store_true", help=f"every mode, not only {'; '.join(DEFAULT_MODES)}")


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=3, arguments=arguments)
    iterations = 6 if bench.quick else ITERATIONS
    scenarios = [name for name, _, _ in SCENARIOS if not bench.quick or name in QUICK_SCENARIOS]
    left_out = quota_unavailable(bench.args)
    if left_out:
        scenarios = [name for name in scenarios if name not in QUOTAS]
        print(f"left out {', '.join(QUOTAS)}: {left_out}", flush=True)
    runs, curves = [], {}
    for _ in range(bench.repeats):
        rows, curves = repeat(bench.args, iterations, scenarios)
        runs.append(rows)
    bench.finish()
    rows = summarise_repeats(runs, ["s_per_iteration", "vs_uncoded", "vs_healthy", "s_to_target"])
    bench.csv("partial.csv", rows, COLUMNS)
    header = bench.header(
        f"n = {N}, cyclic `stragglers: 2` (built for s = 3), {iterations} iterations per job, "
        f"{WARMUP} of warm-up; medians over {bench.repeats} repeats (low-high); vs_uncoded is computed within "
        "each repeat; slow workers: `faults` sleeps (late, 2.4x slow, traces) and a cgroup CPU quota "
        "(10% of a core)" + (f" — left out here: {left_out}" if left_out else ""))
    table = markdown_table(rows, COLUMNS)
    bench.page("partial.md", "Streamed replies: partial stragglers", header, [table])
    if curves:
        plot_panels({name: {mode: [(t, loss) for t, loss in points] for mode, points in modes.items()}
                     for name, modes in curves.items()}, bench.out / "partial.png", "seconds of training",
                    "training loss", "; ".join(header[1:]))
    print(f"wrote {bench.out / 'partial.csv'}, partial.md and partial.png; {bench.guard.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
