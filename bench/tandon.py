"""Tandon et al.'s comparison on a real local cluster: uncoded, ignoring stragglers, FRC, cyclic.

    python -m bench.tandon            # n = 8, 12; s = 1, 2, 3; random and fixed stragglers
    python -m bench.tandon --quick    # n = 8, s = 1

1. Seconds per iteration for every (n, s) and straggler model: "random" (every worker a
   shifted-exponential straggler) and "fixed" (s workers always 0.06 s slow), logistic regression.
2. Where ignoring stragglers loses accuracy: labels sorted into partitions (unbalanced: each
   worker holds mostly one class) and the same s workers always slow, so ignoring them always
   drops the same labels. Test AUC against wall-clock time, n = 10, s = 2 and 4.

Every job runs REPEATS = 3 times (1 with --quick), with the same seed; the tables give the median
and the low-high range over repeats, and a speed-up is computed within each repeat, then summarised.

Jobs run with ``verify: off``: the papers' schemes, unchecked (bench/verification.py measures what checking
costs).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from typing import Any

from bench.cluster import WARMUP, base_spec, run_jobs, training_curve
from bench.common import markdown_table, plot_panels, summarise_repeats
from bench.skeleton import Bench

# a fifth of the delays first measured (0.01 s + Exp(0.1 s), 0.3 s): a worker's mean delay, 22 ms, is still 7
# times an iteration's own cost here (about 3 ms), and the delays no longer take most of the benchmark's time
RANDOM = {"model": "shifted_exponential", "shift": 0.002, "mean": 0.02}
SLOW_DELAY = 0.06
MODEL = {"type": "logistic", "l2": 0.0001}
REPEATS = 3  # jobs per measured point in a full run (1 with --quick)
SPEED_COLUMNS = ["n", "s", "stragglers", "scheme", "repeats", "s_per_iteration", "s_per_iteration_low",
                 "s_per_iteration_high", "speedup_vs_uncoded", "speedup_vs_uncoded_low", "speedup_vs_uncoded_high"]
ACCURACY_COLUMNS = ["n", "s", "scheme", "repeats", "final_test_auc", "final_test_accuracy", "final_test_loss",
                    "time_to_auc_target_s", "time_to_auc_target_s_low", "time_to_auc_target_s_high",
                    "s_per_iteration"]


def fixed(s: int) -> dict[str, Any]:
    return {"model": "fixed", "workers": list(range(s)), "delay": SLOW_DELAY}


def schemes(n: int, s: int) -> list[dict[str, Any]]:
    out = [{"scheme": "ignore_stragglers", "stragglers": s}]
    if n % (s + 1) == 0:
        out.append({"scheme": "frc", "stragglers": s})
    return [*out, {"scheme": "cyclic", "stragglers": s}]


def data(n: int, quick: bool, **extra: Any) -> dict[str, Any]:
    return {"type": "gaussian_mixture", "samples": n * (300 if quick else 2000), "features": 50, "classes": 2,
            "seed": 1, **extra}


def speed(args: argparse.Namespace, repeats: int) -> list[dict[str, Any]]:
    """Seconds per iteration of every (n, s, straggler model, scheme), ``repeats`` jobs each: the
    whole list of jobs for one n runs once, then again (same seed), so that a repeat's speed-up
    compares jobs that ran close together."""
    quick = args.quick
    # n = 8 and 12: FRC (s + 1 divides n) at two and three of the s; n = 10, left out for time, at one
    grid = [(8, 1)] if quick else [(n, s) for n in (8, 12) for s in (1, 2, 3)]
    iterations = 4 if quick else 10
    rows = []
    for n in sorted({n for n, _ in grid}):
        specs, labels = [], []
        for straggling in ("random", "fixed"):
            for s in sorted(s for m, s in grid if m == n):
                faults = {"stragglers": RANDOM if straggling == "random" else fixed(s)}
                for code in [{"scheme": "uncoded"}, *schemes(n, s)]:
                    specs.append(base_spec(n, code, MODEL, data(n, quick), iterations, faults=faults, verify="off"))
                    labels.append((straggling, s, code["scheme"]))
        jobs = run_jobs(args, n, specs * repeats)
        runs = [speedups([{"n": n, "s": s, "stragglers": straggling, "scheme": scheme,
                           "s_per_iteration": statistics.fmean(r.duration_s for r in list(job.history)[WARMUP:])}
                          for (straggling, s, scheme), job in zip(labels, jobs[k * len(specs):(k + 1) * len(specs)],
                                                                  strict=True)])
                for k in range(repeats)]
        rows += summarise_repeats(runs, ["s_per_iteration", "speedup_vs_uncoded"])
        print(markdown_table(rows[-len(labels):], SPEED_COLUMNS, digits=3), flush=True)
    return rows


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One repeat's rows with speedup_vs_uncoded: uncoded's seconds per iteration / the scheme's,
    same n, s and straggler model."""
    for row in rows:
        uncoded = next(r for r in rows if (r["n"], r["s"], r["stragglers"], r["scheme"]) ==
                       (row["n"], row["s"], row["stragglers"], "uncoded"))
        row["speedup_vs_uncoded"] = uncoded["s_per_iteration"] / row["s_per_iteration"]
    return rows


def unbalanced(n: int, s: int, args: argparse.Namespace,
               repeats: int) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float]]]]:
    """Labels sorted into partitions, workers 0..s-1 always slow: final metrics and, over
    ``repeats`` runs of the three jobs (same seed), the time to the AUC target; the first run's
    AUC curves."""
    quick = args.quick
    iterations = 6 if quick else 60
    codes = [{"scheme": "uncoded"}, {"scheme": "ignore_stragglers", "stragglers": s},
             {"scheme": "cyclic", "stragglers": s}]
    specs = [{**base_spec(n, code, MODEL, data(n, quick), iterations, faults={"stragglers": fixed(s)}, eval_every=2,
                          verify="off"),
              "partition": "sorted_by_label", "optimizer": {"type": "nesterov", "lr": 1.0}} for code in codes]
    jobs = run_jobs(args, n, specs * repeats)
    runs, first = [], {}
    for k in range(repeats):
        done = jobs[k * len(codes):(k + 1) * len(codes)]
        curves = {c["scheme"]: training_curve(job, "test_auc") for c, job in zip(codes, done, strict=True)}
        if k == 0:
            first = curves
        target = 0.99 * curves["uncoded"][-1][1]
        rows = []
        for code, job in zip(codes, done, strict=True):
            last = job.history[-1]
            rows.append({"n": n, "s": s, "scheme": code["scheme"], "final_test_auc": last.test_auc,
                         "final_test_accuracy": last.test_accuracy, "final_test_loss": last.test_loss,
                         "time_to_auc_target_s": next((t for t, a in curves[code["scheme"]] if a >= target),
                                                      math.inf),
                         "s_per_iteration": job.elapsed_s / job.iteration})
        runs.append(rows)
    return summarise_repeats(runs, ["time_to_auc_target_s"]), first


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=REPEATS)
    header = bench.open(f"bench/tandon.py: logistic regression on a 50-feature Gaussian mixture, stragglers random "
                        f"{RANDOM} or fixed (workers 0..s-1 always {SLOW_DELAY} s slow), seed 1")
    repeats = bench.repeats
    speed_rows = speed(bench.args, repeats)
    accuracy_rows, panels = [], {}
    for n, s in [(8, 1)] if bench.quick else [(10, 2), (10, 4)]:
        rows, curves = unbalanced(n, s, bench.args, repeats)
        accuracy_rows += rows
        panels[f"sorted labels, n = {n}, workers 0..{s - 1} slow"] = curves
    bench.csv("tandon_speed.csv", speed_rows, SPEED_COLUMNS)
    bench.csv("tandon_unbalanced.csv", accuracy_rows, ACCURACY_COLUMNS)
    plot_panels(panels, bench.out / "tandon_unbalanced.png", "wall-clock time (s)", "test AUC",
                header[0] + " | " + header[1] + " | the first of the repeated runs")
    sections = [
        f"## Seconds per iteration\n\nA job's mean over the iterations after 2 warm-up ones; each job runs "
        f"{repeats} time(s) (the whole list of jobs for an n once, then again, same seed): the median over repeats "
        f"and its low-high range. Speed-up = uncoded's seconds per iteration / the scheme's, same n, s and "
        f"straggler model, computed within each repeat (jobs that ran close together), then its median and "
        f"low-high over repeats (not a ratio of medians).\n\n"
        + markdown_table(speed_rows, SPEED_COLUMNS, digits=3),
        f"## Where ignoring stragglers loses accuracy\n\nPartitions sorted by label and the same workers always "
        f"slow: ignoring them drops the same labels every iteration, so it trains on a biased sample; the codes "
        f"decode the exact gradient. AUC target: 99% of uncoded's final AUC in the same repeat. The three jobs run "
        f"{repeats} time(s), same seed: time to the target as the median and low-high over repeats (inf: never "
        f"reached), the other columns their median; the plot shows the first repeat's curves.\n\n"
        + markdown_table(accuracy_rows, ACCURACY_COLUMNS, digits=4),
    ]
    bench.finish()
    bench.page("tandon.md", "Tandon et al.: uncoded, ignoring stragglers, FRC and cyclic", bench.header(), sections)
    print(markdown_table(accuracy_rows, ACCURACY_COLUMNS, digits=4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
