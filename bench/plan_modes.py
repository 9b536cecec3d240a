"""The planner fitted from jobs of every code and reply mode, against the measured grid (issue 40).

    python -m bench.plan_modes            # n = 6, 10 iterations per job, 3 repeats of the grid: about 4 minutes
    python -m bench.plan_modes --quick    # n = 4, 6 iterations, once

A healthy cluster (no injected faults, the default check), jobs written as the README writes them:

1. Fit: one job of each code and mode (uncoded; cyclic stragglers 2, streamed and whole; ye_abbe
   stragglers 1, m = 2) gives `coded plan --from-job`'s costs (coded.client.costs.fit_job), and
   the plan's recommendation for n workers and the default check.
2. Measure the grid: every code the plan ranks that builds (uncoded, cyclic streamed, each Ye &
   Abbe (s, m) with d = s + 1 + m <= n), REPEATS times (the whole list, then again, same seed);
   a job's seconds per iteration: its mean after the warm-up iterations.
3. For each fitted job: its recommendation's measured seconds over the best measured code's
   (median over repeats; the goal: within 10%).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from bench.cluster import WARMUP, base_spec, run_jobs
from bench.common import markdown_table, summarise_repeats
from bench.skeleton import Bench
from coded.client.costs import fit_job
from coded.codes.plan import Candidate, plan, recommend, refusal
from coded.jobs.spec.gradient import DEFAULT_SAMPLE

MODEL = {"type": "softmax"}
FEATURES, CLASSES = 1000, 50  # 50,050 parameters: sending a gradient costs something, as in bench.plan
REPEATS = 3
GOAL = 1.10  # a recommendation's measured time within 10% of the best measured code's
#: the fitted jobs: name, code section, stream (None: the code's default)
SOURCES = [("uncoded", {"scheme": "uncoded"}, None),
           ("cyclic s=2 streamed", {"scheme": "cyclic", "stragglers": 2}, None),
           ("cyclic s=2 whole", {"scheme": "cyclic", "stragglers": 2}, "off"),
           ("ye_abbe s=1 m=2", {"scheme": "ye_abbe", "stragglers": 1, "m": 2}, None)]
GRID_COLUMNS = ["code", "d", "repeats", "measured_s", "measured_s_low", "measured_s_high",
                "vs_best", "vs_best_low", "vs_best_high"]
FIT_COLUMNS = ["fitted_from", "compute_s", "communicate_s", "overhead_s", "partitions_computed", "recommended",
               "predicted_s", "measured_s", "vs_best", "vs_best_low", "vs_best_high", "meets_goal"]


def spec(n: int, code: dict[str, Any], iterations: int, quick: bool, stream: str | None = None) -> dict[str, Any]:
    """A job with the default check (base_spec turns it off, as the papers ran)."""
    data = {"type": "gaussian_mixture", "samples": n * (150 if quick else 1500), "features": FEATURES,
            "classes": CLASSES, "seed": 2}
    out = base_spec(n, code, MODEL, data, iterations)
    del out["verify"]
    return out | ({"stream": stream} if stream else {})


def name(candidate: Candidate) -> str:
    if candidate.scheme == "uncoded":
        return "uncoded"
    return f"cyclic s={candidate.s} streamed" if candidate.streamed else f"ye_abbe s={candidate.s} m={candidate.m}"


def seconds(job: Any) -> float:
    return statistics.fmean(r.duration_s for r in list(job.history)[WARMUP:])


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=REPEATS)
    args, repeats = bench.args, bench.repeats
    # 10 iterations (8 timed after the warm-up) per job: each of the 55 jobs spends about as long again
    # making its data, and the whole run stays near 4 minutes on 2 cores
    n, iterations = (4, 6) if args.quick else (6, 10)
    bench.open(f"bench/plan_modes.py: n = {n}, softmax regression ({FEATURES} features, {CLASSES} classes), "
               f"{iterations} iterations per job, no injected faults, the default check, seed 1")

    fitted = run_jobs(args, n, [spec(n, code, iterations, args.quick, stream) for _, code, stream in SOURCES])
    plans = []
    for (source, _, _), job in zip(SOURCES, fitted, strict=True):
        costs = fit_job(job)
        ranked = plan(costs.model, n, check=1, streamed=True, chunks=costs.chunks, confirm=DEFAULT_SAMPLE)
        plans.append((source, costs, recommend(ranked, n)))
        typical = costs.typical()
        print(f"{source}: the median worker's compute {typical.compute}, communicate {typical.communicate}, "
              f"overhead {costs.model.overhead:.4g} s -> {name(plans[-1][2])}", flush=True)
    grid = [c for c in ranked if refusal(c, n) is None]  # the same candidates whichever fit ranked them
    grid.sort(key=lambda c: (c.scheme != "uncoded", not c.streamed, c.s, c.m))
    specs = [spec(n, c.code(), iterations, args.quick) for c in grid]
    jobs = run_jobs(args, n, specs * repeats)
    runs = []
    for k in range(repeats):
        measured = {name(c): seconds(job) for c, job in zip(grid, jobs[k * len(grid):(k + 1) * len(grid)], strict=True)}
        best = min(measured.values())
        runs.append([{"code": name(c), "d": c.d, "measured_s": measured[name(c)],
                      "vs_best": measured[name(c)] / best} for c in grid])
    rows = summarise_repeats(runs, ["measured_s", "vs_best"])
    by_code = {row["code"]: row for row in rows}
    fits = []
    for source, costs, chosen in plans:
        row = by_code[name(chosen)]
        typical = costs.typical()
        fits.append({"fitted_from": source, "compute_s": typical.compute.shift,
                     "communicate_s": typical.communicate.shift,
                     "overhead_s": costs.model.overhead, "partitions_computed": costs.partitions,
                     "recommended": name(chosen), "predicted_s": chosen.predicted_s,
                     "measured_s": row["measured_s"], "vs_best": row["vs_best"], "vs_best_low": row["vs_best_low"],
                     "vs_best_high": row["vs_best_high"], "meets_goal": row["vs_best"] <= GOAL})
    bench.csv("plan_modes.csv", fits, FIT_COLUMNS)
    bench.csv("plan_modes_grid.csv", rows, GRID_COLUMNS)
    bench.finish()
    sections = [
        "## What each fitted job recommends\n\ncompute: one partition's gradient on the median worker (wall "
        "seconds, the fitted mean); communicate: a whole gradient's trip over the median worker's link; overhead: "
        "what every iteration spends after its last reply whatever the code; partitions_computed: partitions' "
        "worth each responder of the fitted job computed per iteration (median); vs_best: the recommendation's "
        "measured seconds over the best measured "
        f"code's in the same repeat (median, low-high over {repeats}); goal <= {GOAL}.\n\n"
        + markdown_table(fits, FIT_COLUMNS, digits=3),
        "## The measured grid\n\n" + markdown_table(rows, GRID_COLUMNS, digits=3),
    ]
    bench.page("plan_modes.md", "The planner fitted from every code and mode", bench.header(), sections)
    print(markdown_table(fits, FIT_COLUMNS, digits=3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
