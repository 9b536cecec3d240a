"""Tandon et al.'s comparison on a real local cluster: uncoded, ignoring stragglers, FRC, cyclic.

    python -m bench.tandon            # n = 8, 10, 12; s = 1, 2, 3; random and fixed stragglers
    python -m bench.tandon --quick    # n = 8, s = 1

1. Seconds per iteration for every (n, s) and straggler model: "random" (every worker a
   shifted-exponential straggler) and "fixed" (s workers always 0.3 s slow), logistic regression.
2. Where ignoring stragglers loses accuracy: labels sorted into partitions (unbalanced: each
   worker holds mostly one class) and the same s workers always slow, so ignoring them always
   drops the same labels. Test AUC against wall-clock time, n = 10, s = 2 and 4.

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
from bench.common import (
    LoadGuard,
    add_common_arguments,
    code_line,
    command_line,
    machine_line,
    markdown_table,
    plot_panels,
    write_csv,
    write_markdown,
)

RANDOM = {"model": "shifted_exponential", "shift": 0.01, "mean": 0.1}
SLOW_DELAY = 0.3
MODEL = {"type": "logistic", "l2": 0.0001}


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


def speed(quick: bool) -> list[dict[str, Any]]:
    grid = [(8, 1)] if quick else [(n, s) for n in (8, 10, 12) for s in (1, 2, 3)]
    iterations = 6 if quick else 15
    rows = []
    for n in sorted({n for n, _ in grid}):
        specs, labels = [], []
        for straggling in ("random", "fixed"):
            for s in sorted(s for m, s in grid if m == n):
                faults = {"stragglers": RANDOM if straggling == "random" else fixed(s)}
                for code in [{"scheme": "uncoded"}, *schemes(n, s)]:
                    specs.append(base_spec(n, code, MODEL, data(n, quick), iterations, faults=faults, verify="off"))
                    labels.append((straggling, s, code["scheme"]))
        for (straggling, s, scheme), job in zip(labels, run_jobs(n, specs), strict=True):
            seconds = statistics.fmean(r.duration_s for r in list(job.history)[WARMUP:])
            rows.append({"n": n, "s": s, "stragglers": straggling, "scheme": scheme, "s_per_iteration": seconds})
        print(markdown_table(rows[-len(labels):], list(rows[-1]), digits=3), flush=True)
    for row in rows:
        uncoded = next(r for r in rows if (r["n"], r["s"], r["stragglers"], r["scheme"]) ==
                       (row["n"], row["s"], row["stragglers"], "uncoded"))
        row["speedup_vs_uncoded"] = uncoded["s_per_iteration"] / row["s_per_iteration"]
    return rows


def unbalanced(n: int, s: int, quick: bool) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float]]]]:
    """Labels sorted into partitions, workers 0..s-1 always slow: final metrics and AUC curves."""
    iterations = 10 if quick else 60
    codes = [{"scheme": "uncoded"}, {"scheme": "ignore_stragglers", "stragglers": s},
             {"scheme": "cyclic", "stragglers": s}]
    specs = [{**base_spec(n, code, MODEL, data(n, quick), iterations, faults={"stragglers": fixed(s)}, eval_every=2,
                          verify="off"),
              "partition": "sorted_by_label", "optimizer": {"type": "nesterov", "lr": 1.0}} for code in codes]
    jobs = run_jobs(n, specs)
    curves = {c["scheme"]: training_curve(job, "test_auc") for c, job in zip(codes, jobs, strict=True)}
    target = 0.99 * curves["uncoded"][-1][1]
    rows = []
    for code, job in zip(codes, jobs, strict=True):
        points = curves[code["scheme"]]
        last = job.history[-1]
        rows.append({"n": n, "s": s, "scheme": code["scheme"], "final_test_auc": last.test_auc,
                     "final_test_accuracy": last.test_accuracy, "final_test_loss": last.test_loss,
                     "time_to_auc_target_s": next((t for t, a in points if a >= target), math.nan),
                     "s_per_iteration": job.elapsed_s / job.iteration})
    return rows, curves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    guard = LoadGuard(args.allow_busy, args.quick)  # refuses a busy machine
    header = [f"bench/tandon.py: logistic regression on a 50-feature Gaussian mixture, stragglers random {RANDOM} "
              f"or fixed (workers 0..s-1 always {SLOW_DELAY} s slow), seed 1", machine_line(), code_line(),
              f"command: {command_line()}"]
    print("\n".join(header), flush=True)
    speed_rows = speed(args.quick)
    accuracy_rows, panels = [], {}
    for n, s in [(8, 1)] if args.quick else [(10, 2), (10, 4)]:
        rows, curves = unbalanced(n, s, args.quick)
        accuracy_rows += rows
        panels[f"sorted labels, n = {n}, workers 0..{s - 1} slow"] = curves
    speed_columns = ["n", "s", "stragglers", "scheme", "s_per_iteration", "speedup_vs_uncoded"]
    accuracy_columns = ["n", "s", "scheme", "final_test_auc", "final_test_accuracy", "final_test_loss",
                        "time_to_auc_target_s", "s_per_iteration"]
    write_csv(args.out / "tandon_speed.csv", speed_rows, speed_columns)
    write_csv(args.out / "tandon_unbalanced.csv", accuracy_rows, accuracy_columns)
    plot_panels(panels, args.out / "tandon_unbalanced.png", "wall-clock time (s)", "test AUC",
                header[0] + " | " + header[1])
    sections = [
        "## Seconds per iteration\n\nMean over the iterations after 2 warm-up ones; speed-up = uncoded's seconds "
        "per iteration / the scheme's, same n, s and straggler model.\n\n"
        + markdown_table(speed_rows, speed_columns, digits=3),
        "## Where ignoring stragglers loses accuracy\n\nPartitions sorted by label and the same workers always "
        "slow: ignoring them drops the same labels every iteration, so it trains on a biased sample; the codes "
        "decode the exact gradient. AUC target: 99% of uncoded's final AUC.\n\n"
        + markdown_table(accuracy_rows, accuracy_columns, digits=4),
    ]
    guard.finish()
    header = [*header, guard.line()]
    write_markdown(args.out / "tandon.md", "Tandon et al.: uncoded, ignoring stragglers, FRC and cyclic", header,
                   sections)
    print(markdown_table(accuracy_rows, accuracy_columns, digits=4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
