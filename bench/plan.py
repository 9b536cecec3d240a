"""The planner (`coded plan`, common/codes/plan.py) against measurement, on a real local cluster.

    python -m bench.plan            # n = 10, 12 iterations per code: about 4 minutes
    python -m bench.plan --quick    # n = 4, 8 iterations

1. Measure: an uncoded job without faults gives each worker's time to compute one partition
   (T1, fitted shifted exponential) and the rest of an iteration (T2: sending, decoding, the
   master's round trip; its median, taken as constant).
2. Fit the straggler delay: a shifted exponential fitted to the delays the job's seeded faults
   model draws for its workers.
3. Plan: rank every code by the model's expected seconds per iteration (Ye & Abbe Sec. 5).
4. Run the recommended code, two alternatives (uncoded; the best code with s <= 2) and a grid of
   Ye & Abbe codes (s = 1..3, m = 1..3; m = 1 is a cyclic code) under those stragglers, and
   compare predicted with measured seconds per iteration. Each of these jobs runs REPEATS = 3
   times (1 with --quick; the whole list once, then again, same seed): measured seconds, the
   measured/predicted ratio and the speed-up against uncoded (both taken within a repeat) are
   reported as the median and low-high over repeats. Steps 1-3 run once: they make the prediction.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import yaml

from bench.cluster import WARMUP, base_spec, run_jobs
from bench.common import markdown_table, summarise_repeats
from bench.skeleton import Bench
from coded.client.reports import Job
from coded.codes.plan import Candidate, RuntimeModel, ShiftedExponential, plan, recommend, refusal
from coded.codes.plan_fits import fit_costs
from coded.jobs.faults import Stragglers
from coded.jobs.spec import parse_job

STRAGGLERS = {"model": "shifted_exponential", "shift": 0.02, "mean": 0.1}
MODEL = {"type": "softmax"}
FEATURES, CLASSES = 1000, 50  # 50,050 parameters: sending a gradient costs something
REPEATS = 3  # jobs per measured point in a full run (1 with --quick)
#: measured: median and low-high over repeats
SPREAD = ["measured_s", "measured/predicted", "speedup_vs_uncoded"]
COLUMNS = ["role", "code", "d", "sends", "predicted_s", "repeats",
           *(f"{key}{suffix}" for key in SPREAD for suffix in ("", "_low", "_high"))]


def data(n: int, quick: bool) -> dict[str, Any]:
    return {"type": "gaussian_mixture", "samples": n * (100 if quick else 1000), "features": FEATURES,
            "classes": CLASSES, "seed": 2}


def measure_costs(args: argparse.Namespace, n: int, iterations: int) -> tuple[ShiftedExponential, ShiftedExponential]:
    """T1 (one partition's gradient, per worker) and T2 (the rest of an iteration) of this cluster."""
    spec = base_spec(n, {"scheme": "uncoded"}, MODEL, data(n, args.quick), iterations)
    job, = run_jobs(args, n, [spec])
    records = list(job.history)[WARMUP:]
    return fit_costs([r.duration_s for r in records], [list(r.worker_compute_s) for r in records], 1)


def fitted_delay(n: int, draws: int) -> ShiftedExponential:
    """The straggler delay fitted to what the job's seeded model gives its workers."""
    spec = parse_job(yaml.safe_dump({**base_spec(n, {"scheme": "uncoded"}, MODEL, data(n, True), 1),
                                     "faults": {"stragglers": STRAGGLERS}}))
    stragglers = Stragglers(spec.faults.stragglers, spec.seed)
    return ShiftedExponential.fit([stragglers.delay(k, i) for k in range(draws) for i in range(n)])


def choices(ranked: list[Candidate], n: int, quick: bool) -> list[tuple[str, Candidate]]:
    """The recommendation, two alternatives, then the (s, m) grid (without repeats)."""
    buildable = [c for c in ranked if refusal(c, n) is None]
    recommended = recommend(ranked, n)
    uncoded = next(c for c in ranked if c.scheme == "uncoded")
    moderate = next(c for c in buildable if c.s <= 2 and c not in (recommended, uncoded))
    out = [("recommended", recommended), ("alternative: uncoded", uncoded),
           ("alternative: best with s <= 2", moderate)]
    grid = [] if quick else [c for c in buildable if c.scheme == "ye_abbe" and c.s <= 3 and c.m <= 3]
    return out + [("grid", c) for c in sorted(grid, key=lambda c: (c.s, c.m)) if c not in (recommended, moderate)]


def name(candidate: Candidate) -> str:
    return "uncoded" if candidate.scheme == "uncoded" else f"ye_abbe s={candidate.s} m={candidate.m}"


def compare(picked: list[tuple[str, Candidate]], jobs: list[Job]) -> list[dict[str, Any]]:
    """One repeat's rows: each picked code's predicted and measured seconds per iteration, and its
    speed-up against uncoded in the same repeat."""
    rows = []
    for (role, candidate), job in zip(picked, jobs, strict=True):
        measured = statistics.fmean(r.duration_s for r in list(job.history)[WARMUP:])
        rows.append({"role": role, "code": name(candidate), "d": candidate.d, "sends": f"1/{candidate.m}",
                     "predicted_s": candidate.predicted_s, "measured_s": measured,
                     "measured/predicted": measured / candidate.predicted_s})
    uncoded = next(r for r in rows if r["code"] == "uncoded")
    for row in rows:
        row["speedup_vs_uncoded"] = uncoded["measured_s"] / row["measured_s"]
    return rows


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=REPEATS)
    args, repeats = bench.args, bench.repeats
    # 12 iterations (10 timed after the warm-up) per job: each of the 40 jobs spends about as long again
    # making its data, and the whole run stays near 4 minutes on 2 cores
    n, iterations = (4, 8) if args.quick else (10, 12)
    bench.open(f"bench/plan.py: n = {n}, softmax regression ({FEATURES} features, {CLASSES} classes), "
               f"{iterations} iterations per code, stragglers {STRAGGLERS}, seed 1")
    compute, rest = measure_costs(args, n, iterations)
    delay = fitted_delay(n, 2000)
    model = RuntimeModel(compute, rest, delay)
    print(f"measured: T1 = {compute}, T2 = {rest}; fitted delay = {delay}", flush=True)
    ranked = plan(model, n)
    picked = choices(ranked, n, args.quick)
    specs = [base_spec(n, c.code(), MODEL, data(n, args.quick), iterations, faults={"stragglers": STRAGGLERS})
             for _, c in picked]
    jobs = run_jobs(args, n, specs * repeats)
    runs = [compare(picked, jobs[k * len(specs):(k + 1) * len(specs)]) for k in range(repeats)]
    rows = summarise_repeats(runs, SPREAD)
    top = [{"rank": i + 1, "code": name(c), "d": c.d, "predicted_s": c.predicted_s,
            "builds": "yes" if refusal(c, n) is None else "no"} for i, c in enumerate(ranked[:10])]
    bench.csv("plan.csv", rows, COLUMNS)
    sections = [
        f"## Measured costs\n\nT1 (one partition's gradient) = {compute.shift:.4g} s + Exp(mean {compute.mean:.3g} s); "
        f"T2 (the rest of an iteration) = {rest.shift:.4g} s; straggler delay fitted to the seeded model: "
        f"{delay.shift:.4g} s + Exp(mean {delay.mean:.3g} s).",
        "## The planner's ranking (top 10)\n\n" + markdown_table(top, list(top[0]), digits=4),
        "## Predicted against measured\n\nAll n workers share this machine's cores, so a code that gives each "
        "worker d partitions also makes every worker's compute slower (contention the model does not know); "
        "the measured/predicted column shows how much. The grid rows are Ye & Abbe's (d, s, m) comparison at "
        "n = 10: m = 1 is a cyclic code of Tandon et al., m > 1 sends 1/m of a gradient. Measured: a job's mean "
        f"over its iterations after 2 warm-up ones; every job ran {repeats} time(s) (the whole list once, then "
        "again, same seed): the median and low-high over repeats of the measured seconds, of measured/predicted "
        "and of the speed-up against uncoded, the two ratios taken within each repeat (not ratios of medians).\n\n"
        + markdown_table(rows, COLUMNS, digits=3),
    ]
    bench.finish()
    bench.page("plan.md", "The planner: predicted against measured", bench.header(), sections)
    print(markdown_table(rows, COLUMNS, digits=3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
