"""LWPD against cyclic gradient coding and K-asynchronous SGD: test loss against wall-clock time.

    python -m bench.lwpd            # 8 and 16 workers, softmax regression and an MLP, 30 iterations
    python -m bench.lwpd --quick    # 8 workers, softmax, a few iterations

The LWPD paper's Experiment 1 (Fig. 3) on a real local cluster: multinomial logistic regression
on a Gaussian mixture, and an MLP, every worker a shifted-exponential straggler. LWPD (t = 2)
applies each message as it arrives; K-async SGD steps with the first K = n - s gradients
(stale ones included); cyclic decodes the exact gradient from the first n - s. All three use
plain SGD with the same learning rate, and the same s = n/4 where it applies. Reported: the time
each reaches a target test loss (the best final test loss of the three + 10% of the drop from
the start), the test loss at the time the first of them finished, and the plot. Times count from
the first iteration (setting up workers and their data is not training).

The three jobs of a point run REPEATS = 3 times (1 with --quick), one after another and then again,
with the same seed; the table gives each measure's median and low-high over repeats, a speed-up
computed within each repeat and then summarised.

Jobs run with ``verify: off``: the papers' schemes, unchecked (bench/verification.py measures what checking
costs).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from bench.cluster import base_spec, run_jobs, training_curve
from bench.common import markdown_table, plot_panels, summarise_repeats
from bench.skeleton import Bench

STRAGGLERS = {"model": "shifted_exponential", "shift": 0.01, "mean": 0.05}
MODELS = {"softmax": {"type": "softmax"}, "mlp": {"type": "mlp", "hidden": [32]}}
LR = {"softmax": 0.5, "mlp": 0.2}
REPEATS = 3  # jobs per measured point in a full run (1 with --quick)
COLUMNS = ["workers", "model", "scheme", "repeats", "time_to_target_s", "time_to_target_s_low", "time_to_target_s_high",
           "speedup_vs_cyclic", "speedup_vs_cyclic_low", "speedup_vs_cyclic_high", "test_loss_at_horizon",
           "test_loss_at_horizon_low", "test_loss_at_horizon_high", "final_test_loss", "seconds", "target",
           "horizon_s"]


def codes(n: int) -> dict[str, dict[str, Any]]:
    s = n // 4
    return {"lwpd": {"scheme": "lwpd", "t": 2}, "kasync": {"scheme": "kasync", "stragglers": s},
            "cyclic": {"scheme": "cyclic", "stragglers": s}}


def run(args: argparse.Namespace, n: int, model: str, steps: int,
        repeats: int) -> list[dict[str, list[tuple[float, float]]]]:
    """Test loss against elapsed seconds, per scheme, for each of ``repeats`` runs of the three
    jobs (same seed). Each runs about ``steps`` optimizer steps of work: cyclic and K-async take one
    per iteration; LWPD takes n per iteration, each with a 1/n share of the gradient, so it gets
    the same number of iterations."""
    data = {"type": "gaussian_mixture", "samples": n * (100 if args.quick else 1000), "features": 50, "classes": 4,
            "seed": 3}
    specs = []
    for code in codes(n).values():
        spec = base_spec(n, code, MODELS[model], data, steps, faults={"stragglers": STRAGGLERS}, eval_every=1,
                         verify="off")
        spec["optimizer"] = {"type": "sgd", "lr": LR[model]}
        specs.append(spec)
    jobs = run_jobs(args, n, specs * repeats)
    return [{name: training_curve(job, "test_loss")
             for name, job in zip(codes(n), jobs[k * len(specs):(k + 1) * len(specs)], strict=True)}
            for k in range(repeats)]


def summarise(n: int, model: str, curves: dict[str, list[tuple[float, float]]]) -> list[dict[str, Any]]:
    """One repeat's rows: its own target and horizon, each scheme's time to the target (inf: never
    reached) and speed-up against cyclic in that repeat."""
    start = max(points[0][1] for points in curves.values())
    best = min(points[-1][1] for points in curves.values())
    target = best + 0.1 * (start - best)
    horizon = min(points[-1][0] for points in curves.values())
    rows = []
    for name, points in curves.items():
        reached = next((t for t, loss in points if loss <= target), math.inf)
        at_horizon = [loss for t, loss in points if t <= horizon]
        rows.append({"workers": n, "model": model, "scheme": name, "time_to_target_s": reached,
                     "test_loss_at_horizon": at_horizon[-1] if at_horizon else math.nan,
                     "final_test_loss": points[-1][1], "seconds": points[-1][0], "target": target,
                     "horizon_s": horizon})
    cyclic = next(r for r in rows if r["scheme"] == "cyclic")["time_to_target_s"]
    for row in rows:
        row["speedup_vs_cyclic"] = cyclic / row["time_to_target_s"]
    return rows


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=REPEATS)
    grid = [(8, "softmax")] if bench.quick else [(8, "softmax"), (8, "mlp"), (16, "softmax"), (16, "mlp")]
    steps = 6 if bench.quick else 30  # of 40, every scheme reached its target by about the 22nd, LWPD first
    repeats = bench.repeats
    header = bench.open(
        f"bench/lwpd.py: n = {[n for n, _ in grid]}, s = n/4 (cyclic, kasync), lwpd t = 2, stragglers {STRAGGLERS} "
        f"on every worker, {steps} iterations, Gaussian mixture 50 features 4 classes, sgd, seed 1, "
        f"{repeats} repeat(s)")
    rows, panels = [], {}
    for n, model in grid:
        runs = run(bench.args, n, model, steps, repeats)
        panels[f"n = {n}, {model}"] = runs[0]
        rows += summarise_repeats([summarise(n, model, curves) for curves in runs],
                                  ["time_to_target_s", "speedup_vs_cyclic", "test_loss_at_horizon"])
        print(markdown_table(rows[-3:], COLUMNS[:13], digits=3), flush=True)
    bench.csv("lwpd.csv", rows, COLUMNS)
    plot_panels(panels, bench.out / "lwpd.png", "wall-clock time (s)", "test loss",
                header[0] + " | " + header[1] + " | the first of the repeated runs")
    sections = [f"## Time to a target test loss\n\nTarget: the best final test loss of the three + 10% of the drop "
                f"from the start. Horizon: when the first of the three finished its iterations. Both are taken "
                f"within each repeat (the three jobs run once, then again, same seed; {repeats} repeat(s)), as is "
                f"the speed-up against cyclic; the table gives the median and low-high over repeats of the time to "
                f"the target (inf: never reached), the speed-up (per repeat, then summarised: not a ratio of "
                f"medians) and the test loss at the horizon, and the median of the other columns. The plot shows "
                f"the first repeat's curves.\n\n"
                + markdown_table(rows, COLUMNS, digits=3)]
    bench.finish()
    bench.page("lwpd.md", "LWPD against cyclic gradient coding and K-async SGD", bench.header(), sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
