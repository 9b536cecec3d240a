"""LWPD against cyclic gradient coding and K-asynchronous SGD: test loss against wall-clock time.

    python -m bench.lwpd            # 8 and 16 workers, softmax regression and an MLP
    python -m bench.lwpd --quick    # 8 workers, softmax, a few iterations

The LWPD paper's Experiment 1 (Fig. 3) on a real local cluster: multinomial logistic regression
on a Gaussian mixture, and an MLP, every worker a shifted-exponential straggler. LWPD (t = 2)
applies each message as it arrives; K-async SGD steps with the first K = n - s gradients
(stale ones included); cyclic decodes the exact gradient from the first n - s. All three use
plain SGD with the same learning rate, and the same s = n/4 where it applies. Reported: the time
each reaches a target test loss (the best final test loss of the three + 10% of the drop from
the start), the test loss at the time the first of them finished, and the plot. Times count from
the first iteration (setting up workers and their data is not training).

Jobs run with ``verify: off``: the papers' schemes, unchecked (bench/verification.py measures what checking
costs).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from bench.cluster import base_spec, run_jobs, training_curve
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

STRAGGLERS = {"model": "shifted_exponential", "shift": 0.01, "mean": 0.05}
MODELS = {"softmax": {"type": "softmax"}, "mlp": {"type": "mlp", "hidden": [32]}}
LR = {"softmax": 0.5, "mlp": 0.2}


def codes(n: int) -> dict[str, dict[str, Any]]:
    s = n // 4
    return {"lwpd": {"scheme": "lwpd", "t": 2}, "kasync": {"scheme": "kasync", "stragglers": s},
            "cyclic": {"scheme": "cyclic", "stragglers": s}}


def run(n: int, model: str, steps: int, quick: bool) -> dict[str, list[tuple[float, float]]]:
    """Test loss against elapsed seconds, per scheme. Each runs about ``steps`` optimizer steps of
    work: cyclic and K-async take one per iteration; LWPD takes n per iteration, each with a
    1/n share of the gradient, so it gets the same number of iterations."""
    data = {"type": "gaussian_mixture", "samples": n * (100 if quick else 1000), "features": 50, "classes": 4,
            "seed": 3}
    specs = []
    for code in codes(n).values():
        spec = base_spec(n, code, MODELS[model], data, steps, faults={"stragglers": STRAGGLERS}, eval_every=1,
                         verify="off")
        spec["optimizer"] = {"type": "sgd", "lr": LR[model]}
        specs.append(spec)
    jobs = run_jobs(n, specs)
    return {name: training_curve(job, "test_loss") for name, job in zip(codes(n), jobs, strict=True)}


def summarise(n: int, model: str, curves: dict[str, list[tuple[float, float]]]) -> list[dict[str, Any]]:
    start = max(points[0][1] for points in curves.values())
    best = min(points[-1][1] for points in curves.values())
    target = best + 0.1 * (start - best)
    horizon = min(points[-1][0] for points in curves.values())
    rows = []
    for name, points in curves.items():
        reached = next((t for t, loss in points if loss <= target), math.nan)
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    guard = LoadGuard(args.allow_busy, args.quick)  # refuses a busy machine
    grid = [(8, "softmax")] if args.quick else [(8, "softmax"), (8, "mlp"), (16, "softmax"), (16, "mlp")]
    steps = 6 if args.quick else 40
    header = [f"bench/lwpd.py: n = {[n for n, _ in grid]}, s = n/4 (cyclic, kasync), lwpd t = 2, stragglers "
              f"{STRAGGLERS} on every worker, {steps} iterations, Gaussian mixture 50 features 4 classes, sgd, seed 1",
              machine_line(), code_line(), f"command: {command_line()}"]
    print("\n".join(header), flush=True)
    rows, panels = [], {}
    for n, model in grid:
        curves = run(n, model, steps, args.quick)
        panels[f"n = {n}, {model}"] = curves
        rows += summarise(n, model, curves)
        print(markdown_table(rows[-3:], ["workers", "model", "scheme", "time_to_target_s", "speedup_vs_cyclic",
                                         "test_loss_at_horizon", "final_test_loss"], digits=3), flush=True)
    columns = ["workers", "model", "scheme", "time_to_target_s", "speedup_vs_cyclic", "test_loss_at_horizon",
               "final_test_loss", "seconds", "target", "horizon_s"]
    write_csv(args.out / "lwpd.csv", rows, columns)
    plot_panels(panels, args.out / "lwpd.png", "wall-clock time (s)", "test loss", header[0] + " | " + header[1])
    sections = ["## Time to a target test loss\n\nTarget: the best final test loss of the three + 10% of the drop "
                "from the start. Horizon: when the first of the three finished its iterations.\n\n"
                + markdown_table(rows, columns, digits=3)]
    guard.finish()
    header = [*header, guard.line()]
    write_markdown(args.out / "lwpd.md", "LWPD against cyclic gradient coding and K-async SGD", header, sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
