"""CodeNet against replication and uncoded model parallelism under soft errors (the shape of the
CodeNet paper's Fig. 2 at this machine's scale), per-peer CPU cost, and rollbacks against the
expected-time model of spec/003-004 A4.

    python -m bench.codenet            # digits, MLP [128, 128], 60 iterations, p = 3e-4 and 1e-3
    python -m bench.codenet --quick    # a seconds-long run

Every job runs REPEATS = 3 times (1 with --quick): the whole list once, then again, with the same
seed (the same soft errors); timings and the CodeNet / uncoded ratios (taken within a repeat)
are reported as the median and low-high over repeats.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import yaml

from bench.cluster import cluster
from bench.common import markdown_table, plot_panels, spread, summarise_repeats
from bench.skeleton import Bench
from coded.client.reports import Job, JobState
from coded.codes.layouts import make_layout

STRATEGIES = ("codenet", "replication", "uncoded")
REPEATS = 3  # jobs per measured point in a full run (1 with --quick)
#: the default seed, which draws the soft errors: seed 6's first on uncoded's 4 peers comes at iteration 18 at
#: both rates, within a full run's 60, so that its collapse shows (seed 1's at 153 and 118)
SEED = 6
#: the timings: median and low-high over repeats
SPREAD = ["wall_s_per_iteration", "peer_cpu_s_per_iteration", "non_decoding_peer_cpu_s_per_iteration"]
COLUMNS = ["p", "strategy", "peers", "repeats", "final_accuracy", "wall_s",
           *(f"{key}{suffix}" for key in SPREAD for suffix in ("", "_low", "_high")),
           "rollbacks", "rollbacks_expected", "q_model", "errors_corrected", "repairs", "parity_max_deviation"]


def spec(strategy: str, p: float, iterations: int, checkpoint_every: int, hidden: list[int], seed: int) -> dict:
    return {"kind": "codenet", "strategy": strategy, "code": {"m": 2, "n": 2, "t": 1},
            "model": {"type": "mlp", "hidden": hidden}, "data": {"type": "digits"},
            "optimizer": {"type": "sgd", "lr": 0.05, "batch": 16}, "iterations": iterations,
            "checkpoint_every": checkpoint_every, "eval_every": max(1, iterations // 16),
            "faults": {"soft_errors": {"probability": p, "model": "gaussian", "scale": 100.0}}, "seed": seed}


def iteration_success(strategy: str, p: float, layers: int, trials: int = 20000, seed: int = 0) -> float:
    """q: the probability that an iteration needs no rollback, by Monte Carlo over the error
    pattern. Every peer operation (O1, O2, O3) fails independently with probability p; a block
    corrupted by O3 stays wrong in the next iteration's products until it is repaired."""
    layout = make_layout(strategy, 2, 2, 1)
    rng = np.random.default_rng(seed)
    peers = len(layout.positions)
    carried = np.zeros((peers, layers), dtype=bool)
    ok = 0
    for _ in range(trials):
        o1 = rng.random((peers, layers)) < p
        o2 = rng.random((peers, layers)) < p
        o3 = rng.random((peers, layers)) < p
        failed = False
        for layer in range(layers):
            for phase, active, err in (("forward", layout.forward, o1), ("backward", layout.backward, o2)):
                if phase == "backward" and layer == 0:
                    continue
                wrong = {layout.positions[k] for k in range(peers)
                         if layout.positions[k] in active and (err[k, layer] or carried[k, layer])}
                if strategy == "replication" and wrong:
                    failed = True
                elif strategy == "codenet":
                    lines = [w[1] for w in wrong] if phase == "forward" else [w[0] for w in wrong]
                    if lines and max(lines.count(x) for x in set(lines)) > layout.t:
                        failed = True
        ok += not failed
        # a rollback restores clean blocks; otherwise this iteration's O3 errors show up in the next
        carried = np.zeros_like(carried) if failed else o3
    return ok / trials


def expected_rollbacks(q: float, iterations: int, checkpoint_every: int) -> float:
    """Renewal model (spec/003-004 A4, corrected): failures per segment of I0 iterations are
    q^-I0 - 1 on average, and there are M / I0 segments."""
    return iterations / checkpoint_every * (q ** -checkpoint_every - 1) if q > 0 else math.inf


def measured(job: Job, p: float, strategy: str, iterations: int, checkpoint_every: int,
             q: float) -> dict[str, Any]:
    """One job's row: accuracy, wall clock and peer CPU, what it did about errors, and the model's
    expected rollbacks beside the measured ones."""
    stats = dict(job.stats)
    row = {"p": p, "strategy": strategy, "peers": len(job.workers), "final_accuracy": job.history[-1].test_accuracy,
           "wall_s": job.elapsed_s, "wall_s_per_iteration": job.elapsed_s / iterations,
           "peer_cpu_s_per_iteration": stats.get("peer_cpu_seconds_per_iteration"),
           "non_decoding_peer_cpu_s_per_iteration": stats.get("non_decoding_peer_cpu_seconds_per_iteration"),
           "rollbacks": stats.get("rollbacks"), "errors_corrected": stats.get("errors_corrected"),
           "repairs": stats.get("repairs"), "q_model": q,
           "rollbacks_expected": expected_rollbacks(q, iterations, checkpoint_every),
           "parity_max_deviation": stats.get("parity_max_deviation")}
    print(f"p={p:g} {strategy:11}: accuracy {row['final_accuracy']:.3f} in {job.elapsed_s:.1f} s, "
          f"rollbacks {stats.get('rollbacks'):.0f} (model {row['rollbacks_expected']:.1f}), "
          f"corrected {stats.get('errors_corrected'):.0f}, peer CPU "
          f"{1e3 * stats.get('peer_cpu_seconds_per_iteration', 0):.1f} ms/it", flush=True)
    return row


def clean_ratio(rows: list[dict[str, Any]], key: str) -> float:
    """CodeNet / uncoded of one measure without errors (p = 0), within one repeat."""
    clean = {r["strategy"]: r[key] for r in rows if r["p"] == 0}
    return clean["codenet"] / clean["uncoded"]


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=REPEATS,
                  arguments=lambda parser: parser.add_argument("--seed", type=int, default=SEED))
    args = bench.args
    if args.quick:
        iterations, hidden, rates, checkpoint_every = 8, [16], (0.0, 0.02), 2
    else:
        iterations, hidden, rates, checkpoint_every = 60, [128, 128], (0.0, 3e-4, 1e-3), 20
    header = bench.open(
        f"bench/codenet.py: digits, MLP {hidden}, m = n = 2, t = 1, batch 16, lr 0.05, {iterations} iterations, "
        f"checkpoint every {checkpoint_every}, gaussian errors (scale 100) with probability p per peer and "
        f"operation, seed {args.seed}")
    repeats = bench.repeats
    layers = len(hidden) + 1
    q = {(p, strategy): iteration_success(strategy, p, layers, trials=2000 if args.quick else 20000) if p else 1.0
         for p in rates for strategy in STRATEGIES}  # the model: no timing, computed once
    runs, curves = [], {}
    with cluster(args, 12) as where, where.client() as client:
        client.wait(client.submit(yaml.safe_dump(spec("codenet", 0.0, 1, 1, hidden, args.seed))).id)  # warm-up
        for _ in range(repeats):
            rows = []
            for p, strategy in ((p, strategy) for p in rates for strategy in STRATEGIES):
                job = client.wait(client.submit(yaml.safe_dump(
                    spec(strategy, p, iterations, checkpoint_every, hidden, args.seed))).id)
                if job.state != JobState.SUCCEEDED:
                    raise RuntimeError(f"{strategy} p={p}: {job.reason}")
                rows.append(measured(job, p, strategy, iterations, checkpoint_every, q[(p, strategy)]))
                curves.setdefault((p, strategy), [(r.elapsed_s, r.test_accuracy) for r in job.history])
            runs.append(rows)
    ratios = {name: spread([clean_ratio(rows, key) for rows in runs]) for name, key in
              (("cpu", "peer_cpu_s_per_iteration"), ("plain", "non_decoding_peer_cpu_s_per_iteration"),
               ("wall", "wall_s_per_iteration"))}
    rows = summarise_repeats(runs, SPREAD)
    bench.csv("codenet.csv", rows, COLUMNS)
    panels = {f"p = {p:g} per peer and operation": {strategy: curves[(p, strategy)] for strategy in STRATEGIES}
              for p in rates}
    plot_panels(panels, bench.out / "codenet.png", "wall-clock time (s)", "test accuracy",
                header[0] + " | " + header[1] + " | the first of the repeated runs")

    def ratio(name: str) -> str:
        return f"{ratios[name]['median']:.2f} ({ratios[name]['low']:.2f}-{ratios[name]['high']:.2f})"

    summary = (f"Without errors, per-peer CPU per iteration CodeNet / uncoded = {ratio('plain')} for the peers "
               f"that only hold a block (goal <= 1.3; same block size), {ratio('cpu')} for the busiest peer (a "
               f"decoding peer: it decodes twice as many products with the MDS code); wall clock {ratio('wall')} "
               f"(12 processes against 4 on 2 cores). Every job ran {repeats} time(s) (the whole list once, then "
               f"again; same seed, so the same soft errors): each ratio is taken within a repeat, then its median "
               f"(low-high) over repeats, not a ratio of medians. In the table, wall clock and peer CPU per "
               f"iteration are the median and low-high over repeats, the other measured columns their median; "
               f"q_model and rollbacks_expected come from the model (Monte Carlo, computed once).")
    bench.finish()
    bench.page("codenet.md", "CodeNet, replication and uncoded under soft errors", bench.header(),
               [summary, markdown_table(rows, COLUMNS, digits=3), "![accuracy against time](codenet.png)"])
    print(summary)
    print(markdown_table(rows, COLUMNS, digits=3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
