"""Wrong replies: 5,000 corrupted trials per scheme with no undetected wrong answer, and what
checking costs per iteration on a real local cluster.

    python -m bench.verification                  # both parts: about 2 minutes on 2 cores
    python -m bench.verification --part trials    # the trials only (no timing: any machine)
    python -m bench.verification --part cost      # the cost only (timing: a quiet machine)
    python -m bench.verification --quick          # seconds: the smoke test

Part 1, trials (pure math, no cluster). Each trial draws partial gradients (rows 10^U(-3, 3)
apart in size) or matrices, encodes every worker's reply, corrupts one worker's reply with one of
the fault models the workers inject (``gaussian``: noise of 10^U(-9, 9) times the reply's norm;
``bitflip``: one exponent bit of one entry) and draws an arrival order. It then does what the
master does by default: decode and check the first replies that allow a check (one more than
decoding needs), and on a disagreement take the next reply and try again, until the answer is
accepted or no reply is left (a decoding failure). Counted: ``corrected`` (the liar located, the
answer exact), ``harmless`` (accepted with the liar's reply in it: its error within the stated
tolerance), ``not_awaited`` (the liar was slower than the replies needed), ``failed`` (a decoding
failure: detected, not located), ``wrong_location`` and ``undetected_wrong`` (an accepted answer
off by more than the guarantee: tolerance x median reply norm for gradients, 1e-6 relative for
products); both must be 0. ``false_alarms`` counts clean trials (no liar) that were not accepted;
must be 0. partial corrupts its coded stage (its naive stage has no redundancy; docs/jobs.md).

Part 2, cost: cyclic (n = 8, s = 2) logistic regression under shifted-exponential stragglers,
run with ``verify: off``, the default detection, and ``verify: {errors: 1}``, each clean and with
worker 3 adding noise to every message (quarantine off, so the liar costs every iteration).
Seconds per iteration (median of repeats, with the spread) and the ratio to ``verify: off``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import yaml

from bench.cluster import cluster
from bench.common import markdown_table, spread
from bench.skeleton import Bench
from coded.client.reports import Job, JobState
from coded.codes import CodeError, GradientCode, MatmulCode, gradient_code, matmul_code
from coded.codes.matmul import recovery_threshold
from coded.codes.verify import DEFAULT_TOLERANCE

GRADIENT_CODES: list[tuple[str, int, int, dict[str, Any]]] = [
    ("frc", 9, 2, {}), ("cyclic", 8, 2, {}), ("ye_abbe", 8, 2, {"m": 2}), ("partial", 6, 2, {"alpha": 2.5}),
]
MATMUL_CODES: list[tuple[str, dict[str, int]]] = [
    ("polynomial", {"m": 2, "d": 2}), ("matdot", {"n": 2}), ("polydot", {"m": 1, "n": 2, "d": 2}),
    ("gpd", {"m": 2, "n": 2, "d": 1}),
]
MATMUL_SPARE = 3  # workers beyond the recovery threshold
MATMUL_ACCURACY = 1e-6  # what a product must meet (the codes' default max_error)
MODELS = ("gaussian", "bitflip")
TRIAL_COLUMNS = ["kind", "scheme", "params", "n", "trials", "corrected", "harmless", "not_awaited", "failed",
                 "wrong_location", "undetected_wrong", "clean_trials", "false_alarms", "worst_accepted_error",
                 "seconds"]
COST_COLUMNS = ["verify", "liar", "repeats", "s_per_iteration", "low", "high", "ratio_to_off", "replies_used",
                "located_per_iteration"]


def corrupt(reply: np.ndarray, model: str, rng: np.random.Generator) -> np.ndarray:
    """A corrupted copy of a reply: Gaussian noise of random relative size, or one exponent bit flipped."""
    out = np.array(reply, dtype=np.float64, copy=True)
    flat = out.reshape(-1)
    if model == "gaussian":
        with np.errstate(over="ignore"):
            flat += rng.standard_normal(flat.size) * np.linalg.norm(flat) * 10.0 ** rng.uniform(-9, 9)
    else:
        index = int(rng.integers(flat.size))
        flat[index: index + 1].view(np.uint64)[0] ^= np.uint64(1) << np.uint64(rng.integers(52, 63))
    return out


def settle(order: list[int], first: int, attempt: Callable[[list[int]], Any]) -> tuple[Any, list[int]]:
    """The master's loop: the first ``first`` replies, then one more on each failure; (answer or the
    last error, the replies it saw)."""
    count = first
    while True:
        seen = order[:count]
        try:
            return attempt(seen), seen
        except CodeError as error:
            if count == len(order):
                return error, seen
            count += 1


class Tally:
    """The outcomes of one scheme's trials."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(("corrected", "harmless", "not_awaited", "failed", "wrong_location",
                                     "undetected_wrong", "false_alarms"), 0)
        self.worst = 0.0

    def add(self, liar: int | None, outcome: tuple[float, tuple[int, ...]] | CodeError, seen: list[int]) -> None:
        """``outcome``: (the answer's error as a fraction of its guarantee, the located workers), or
        the error the master's loop ended with."""
        if liar is None:
            self.counts["false_alarms"] += isinstance(outcome, CodeError) or bool(outcome[1])
        elif isinstance(outcome, CodeError):
            self.counts["failed"] += 1
        else:
            ratio, wrong = outcome
            self.worst = max(self.worst, ratio)
            if not ratio <= 1.0:
                self.counts["undetected_wrong"] += 1
            elif wrong:
                self.counts["corrected" if wrong == (liar,) else "wrong_location"] += 1
            else:
                self.counts["harmless" if liar in seen else "not_awaited"] += 1

    def row(self, **what: Any) -> dict[str, Any]:
        return {**what, **self.counts, "worst_accepted_error": self.worst}


def gradient_trials(scheme: str, n: int, s: int, params: dict[str, Any], trials: int, clean: int,
                    seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    code = gradient_code(scheme, n=n, s=s, seed=seed, **params)
    tally = Tally()
    rng = np.random.default_rng([seed, n, s, len(scheme)])
    for trial in range(trials + clean):
        length = int(rng.integers(4, 64))
        partials = rng.standard_normal((code.k, length)) * 10.0 ** rng.uniform(-3, 3, size=(code.k, 1))
        replies = {i: code.encode(i, {j: partials[j] for j in code.partitions(i)}) for i in range(n)}
        liar = int(rng.integers(n)) if trial < trials else None
        if liar is not None:
            reply = replies[liar]
            coded = slice(length, None) if scheme == "partial" else slice(None)  # partial: the coded stage
            reply[coded] = corrupt(reply[coded], MODELS[trial % 2], rng)
        order = [int(i) for i in rng.permutation(n)]
        result, seen = settle(order, n - s + 1, functools.partial(_check_gradient, code, replies, length))
        if not isinstance(result, CodeError):
            with np.errstate(all="ignore"):
                error = float(np.linalg.norm(result.gradient - partials.sum(axis=0)))
            bound = DEFAULT_TOLERANCE * result.scale + 1e-12 * float(np.abs(partials).sum())  # + rounding
            result = (error / bound, result.wrong)
        tally.add(liar, result, seen)
    return tally.row(kind="gradient", scheme=scheme, params=_params(s=s, **params), n=n, trials=trials,
                     clean_trials=clean, seconds=round(time.perf_counter() - started, 1))


def matmul_trials(scheme: str, params: dict[str, int], trials: int, clean: int, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    threshold = recovery_threshold(scheme, **params)
    workers = threshold + MATMUL_SPARE
    code = matmul_code(scheme, workers=workers, seed=seed, **params)
    tally = Tally()
    rng = np.random.default_rng([seed, workers, len(scheme)])
    for trial in range(trials + clean):
        rows, inner, columns = code.size_multiples  # block sizes the code's evaluation can split
        a = rng.standard_normal((rows * int(rng.integers(1, 4)), inner * int(rng.integers(1, 4))))
        b = rng.standard_normal((a.shape[1], columns * int(rng.integers(1, 4))))
        results = {p: left @ right for p, (left, right) in enumerate(code.encode(a, b))}
        liar = int(rng.integers(workers)) if trial < trials else None
        if liar is not None:
            results[liar] = corrupt(results[liar], MODELS[trial % 2], rng)
        order = [int(i) for i in rng.permutation(workers)]
        result, seen = settle(order, threshold + 1, functools.partial(_correct_product, code, results))
        if not isinstance(result, CodeError):
            product, wrong = result
            with np.errstate(all="ignore"):
                error = float(np.abs(product - a @ b).max() / np.abs(a @ b).max())
            result = (error / MATMUL_ACCURACY, wrong)
        tally.add(liar, result, seen)
    return tally.row(kind="matmul", scheme=scheme, params=_params(**params), n=workers, trials=trials,
                     clean_trials=clean, seconds=round(time.perf_counter() - started, 1))


def _check_gradient(code: GradientCode, replies: dict[int, np.ndarray], length: int, seen: list[int]) -> Any:
    if code.scheme == "partial":  # every first stage, and the second stages of the replies seen
        messages = {i: reply if i in seen else reply[:length] for i, reply in replies.items()}
    else:
        messages = {i: replies[i] for i in seen}
    with np.errstate(all="ignore"):
        return code.decode_checked(messages, length)


def _correct_product(code: MatmulCode, results: dict[int, np.ndarray], seen: list[int]) -> Any:
    """What the master does with these results: correct as many wrong ones as their surplus allows."""
    with np.errstate(all="ignore"):
        return code.correct({p: results[p] for p in seen}, max(0, len(seen) - code.recovery_threshold - 1))


def _params(**values: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items())


# --- cost on a cluster ------------------------------------------------------------------------------

COST_SPEC: dict[str, Any] = {
    "kind": "gradient_coding", "workers": 8, "code": {"scheme": "cyclic", "stragglers": 2},
    "model": {"type": "logistic", "l2": 0.0001},
    "data": {"type": "gaussian_mixture", "samples": 40000, "features": 200, "classes": 2, "seed": 1},
    "optimizer": {"type": "nesterov", "lr": 0.5}, "eval_every": 0, "checkpoint_every": 1000, "seed": 1,
    "faults": {"stragglers": {"model": "shifted_exponential", "shift": 0.01, "mean": 0.03}},
}
QUICK_SAMPLES = 4000  # --quick: a tenth of the data; the replies counted do not depend on it
VERIFY = {"off": "off", "detect": {"quarantine": "off"}, "correct 1": {"errors": 1, "quarantine": "off"}}
LIAR = {"probability": 1.0, "model": "gaussian", "scale": 1.0, "workers": [3]}
WARMUP = 2


def cost_data(quick: bool) -> dict[str, Any]:
    return {**COST_SPEC["data"], "samples": QUICK_SAMPLES} if quick else COST_SPEC["data"]


def cost(args: argparse.Namespace, repeats: int) -> list[dict[str, Any]]:

    iterations = 6 if args.quick else 20  # 18 timed after the warm-up: a steady mean; 40 made the 15 jobs twice as long
    cases = [(name, liar) for liar in (False, True) for name in VERIFY if not (liar and name == "off")]
    measured: dict[tuple[str, bool], list[Job]] = {case: [] for case in cases}
    with cluster(args, COST_SPEC["workers"]) as where, where.client() as client:
        for repeat in range(repeats):
            for name, liar in cases:  # interleaved, so that drift in the machine's load hits every case alike
                faults = {**COST_SPEC["faults"], **({"soft_errors": LIAR} if liar else {})}
                # whole replies, whose decode this measures (bench/partial.py: streamed ones)
                spec = {**COST_SPEC, "data": cost_data(args.quick), "iterations": iterations,
                        "verify": VERIFY[name], "faults": faults, "seed": 1 + repeat, "stream": "off"}
                job = client.wait(client.submit(yaml.safe_dump(spec)).id)
                if job.state != JobState.SUCCEEDED:
                    raise RuntimeError(f"{name}, liar={liar}: {job.reason}")
                measured[(name, liar)].append(job)
                print(f"  repeat {repeat}: verify {name:9} liar {liar!s:5}: "
                      f"{statistics.median(r.duration_s for r in list(job.history)[WARMUP:]):.4f} s/iteration",
                      flush=True)
    rows = []
    for (name, liar), jobs in measured.items():
        per_job = [statistics.fmean(r.duration_s for r in list(job.history)[WARMUP:]) for job in jobs]
        records = [r for job in jobs for r in list(job.history)[WARMUP:]]
        rows.append({"verify": name, "liar": "worker 3" if liar else "none", "repeats": len(jobs),
                     **dict(zip(("s_per_iteration", "low", "high"), spread(per_job).values(), strict=True)),
                     "replies_used": statistics.fmean(len(r.responders) + len(r.located) for r in records),
                     "located_per_iteration": statistics.fmean(len(r.located) for r in records)})
    off = next(r["s_per_iteration"] for r in rows if r["verify"] == "off")
    for row in rows:
        row["ratio_to_off"] = row["s_per_iteration"] / off
    return rows


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=("all", "trials", "cost"), default="all")
    parser.add_argument("--trials", type=int, default=None, help="corrupted trials per scheme (default 5,000)")
    parser.add_argument("--repeats", type=int, default=None, help="cost: repeats of each case (default 3)")
    parser.add_argument("--seed", type=int, default=0)


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, arguments=arguments, watch=False)  # the trials are not timed
    args = bench.args
    # 5,000 a scheme (40,000 in all): the trials take about a minute on 2 cores, 10,000 took two
    trials = args.trials or (100 if args.quick else 5_000)
    clean = max(trials // 10, 10)
    if args.part in ("all", "trials"):
        header = bench.open(f"bench/verification.py trials: {trials} corrupted and {clean} clean trials per scheme, "
                            f"models {list(MODELS)} alternating, tolerance {DEFAULT_TOLERANCE:g} (gradients), "
                            f"accuracy {MATMUL_ACCURACY:g} (products), seed {args.seed}"
                            + (" (quick)" if args.quick else ""), quoted=True)
        header.append("not a timing benchmark: the counts do not depend on the machine's load")
        print(header[-1], flush=True)
        rows = [gradient_trials(*case, trials, clean, args.seed) for case in GRADIENT_CODES]
        rows += [matmul_trials(scheme, params, trials, clean, args.seed) for scheme, params in MATMUL_CODES]
        print(markdown_table(rows, TRIAL_COLUMNS), flush=True)
        bench.csv("verification_trials.csv", rows, TRIAL_COLUMNS)
        bad = sum(r["undetected_wrong"] + r["wrong_location"] + r["false_alarms"] for r in rows)
        summary = (f"{sum(r['trials'] for r in rows)} corrupted trials: {sum(r['undetected_wrong'] for r in rows)} "
                   f"undetected wrong answers, {sum(r['wrong_location'] for r in rows)} wrong locations; "
                   f"{sum(r['clean_trials'] for r in rows)} clean trials: {sum(r['false_alarms'] for r in rows)} "
                   f"false alarms. worst_accepted_error is the largest error of an accepted answer as a fraction "
                   "of its guarantee (<= 1).")
        bench.page("verification_trials.md", "Wrong replies: corrupted trials", header,
                   [summary, markdown_table(rows, TRIAL_COLUMNS)])
        print(summary)
        if bad:
            print(f"FAILED: {bad} undetected wrong answers, wrong locations or false alarms")
            return 1
    if args.part in ("all", "cost"):
        bench.watch()
        repeats = args.repeats or (1 if args.quick else 3)
        data = cost_data(args.quick)
        bench.open(f"bench/verification.py cost: cyclic n=8, s=2, logistic regression {data['samples']:,} x "
                   f"{data['features']}, stragglers {COST_SPEC['faults']['stragglers']}, liar {LIAR}, {repeats} "
                   "repeats, seed 1.." + (" (quick)" if args.quick else ""), quoted=True)
        rows = cost(args, repeats)
        bench.finish()
        columns = COST_COLUMNS
        print(markdown_table(rows, columns, digits=3))
        bench.csv("verification_cost.csv", rows, columns)
        bench.page("verification_cost.md", "Wrong replies: what checking costs", bench.header(), [
            "Seconds per iteration (median over repeats of each job's mean, after "
            f"{WARMUP} warm-up iterations; low and high: the spread) and the ratio to `verify: off`, measured "
            "side by side in one run. replies_used: replies per iteration the decode saw (including located "
            "ones).", markdown_table(rows, columns, digits=3)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
