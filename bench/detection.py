"""What each checking level of a gradient job catches, and when, on intermittent in-scale
corruption: one worker wrong in a share q of its pieces on a real local cluster, counted against
what docs/jobs.md's table of levels states (issue 37).

    python -m bench.detection                 # up to 30 trials and 1,200 iterations per point: ~4 minutes
    python -m bench.detection --quick         # a seconds-long smoke run
    python -m bench.detection --trials 200 --max-iterations 15000   # more trials: about half an hour

Points: n = 6 and 12 workers, cyclic ``stragglers: 2``, logistic regression on 4800 x 20 rows
(small: the trials count pieces, not seconds); worker 1 corrupts each message with probability
q in {1, 0.3, 0.05} (``faults.soft_errors``: one entry negated, one of its top mantissa bits
flipped, or scaled by 1.5, the model drawn per job), from iteration 1 on (iteration 0 confirms
every piece); ``every piece``: all its messages, ``one partition``: only those of the partition it
holds after its own, whose owner computes 3 times slower (``faults.slowdown``) so that worker 1
sends backups of it, the position a check of first pieces never saw. Levels: streamed ``off``
(the control), ``sampled`` (the default), ``strict``, and whole replies (``stream: off``, their
default check); ``quarantine: off``, so that the worker stays and each location ends a trial.

A *trial* runs from the first iteration the worker is not a suspect (every piece of a worker
located in the previous iteration is confirmed) until it is located again; jobs run, each with
its own seed, until ``--trials`` trials ended or the point's iteration budget is spent (at most
``--max-iterations``, 1,200 by default; then the open trials count as censored). Counted from
each job's history, with the workers' own injector replayed to say which used pieces were wrong:

- ``located_median``, ``located_max``: iterations from a trial's start to its location;
- ``wrong_used_per_1000``: wrong pieces (whole replies: messages) used per 1,000 iterations;
- ``caught_share``: of the wrong pieces the worker sent in iterations it was not a suspect, the
  share caught rather than used (each such iteration either locates it or uses its pieces);
- ``false_alarms``: other workers located (none of them is wrong);
- ``caught``, ``exposed``, ``wrong_used``: the raw counts the shares are made of (iterations
  not suspect that located the worker; the wrong pieces sent in them; wrong pieces used);
- ``predicted``: what the table states: for ``sampled``, ``caught_share`` >= ``verify.sample``
  and a trial of median ln 2 / -ln(1 - sample x q) iterations for ``every piece``
  (:func:`coded.codes.sampled.located_per_iteration`); for ``strict`` and whole replies no wrong
  piece used; for ``off`` every wrong piece used.

``holds`` says whether the measurement kept the statement (``caught_share`` within 3 binomial
deviations below ``sample`` at most) and whether no level used a wrong piece it claims to catch.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from bench.cluster import cluster, logistic_spec
from bench.common import markdown_table
from bench.skeleton import Bench
from coded.client import CodedClient
from coded.client.reports import Job, JobState
from coded.codes.sampled import located_per_iteration
from coded.jobs.faults import SoftErrors
from coded.jobs.spec import parse_job
from coded.jobs.spec.faults import SoftErrorSpec
from coded.jobs.spec.gradient import GradientJob, GradientVerifySpec

FAULTY = 1
START = 1  # the first iteration that may carry a wrong piece: the first one of a run confirms every piece
SIZES = (6, 12)
SHARES = (1.0, 0.3, 0.05)
SCOPES = ("every piece", "one partition")
MODELS = (("sign", 1.0), ("mantissa", 1.0), ("element", 0.5))
#: (name, the spec's changes)
LEVELS: list[tuple[str, dict[str, Any]]] = [
    ("streamed, off", {"verify": "off"}),
    ("streamed, sampled", {"verify": {"quarantine": "off"}}),
    ("streamed, strict", {"verify": {"level": "strict", "quarantine": "off"}}),
    ("whole, default", {"stream": "off", "verify": {"quarantine": "off"}}),
]
COLUMNS = ["n", "q", "scope", "level", "jobs", "iterations", "trials", "censored", "located_median",
           "located_max", "predicted_median", "wrong_used_per_1000", "caught_share", "predicted_share",
           "false_alarms", "caught", "exposed", "wrong_used", "holds"]


def sample() -> float:
    """The sampled level's default share, from the spec."""
    return GradientVerifySpec().sample


def partition_in_scope(n: int, scope: str) -> int | None:
    """The partition a one-partition fault corrupts: the one worker 1 holds after its own (cyclic:
    worker i computes partitions i, i + 1, ...), owned by worker 2."""
    return None if scope == "every piece" else (FAULTY + 1) % n


def job_spec(n: int, level: dict[str, Any], q: float, scope: str, seed: int, iterations: int) -> dict[str, Any]:
    model, scale = MODELS[seed % len(MODELS)]
    soft = {"probability": q, "model": model, "scale": scale, "workers": [FAULTY], "start": START}
    faults: dict[str, Any] = {"soft_errors": soft}
    partition = partition_in_scope(n, scope)
    if partition is not None:
        soft["partition"] = partition
        faults["slowdown"] = {"model": "fixed", "workers": [partition], "factor": 3.0}
    out = logistic_spec(n, {"scheme": "cyclic", "stragglers": 2}, 4800, 20, iterations, seed=seed)
    del out["verify"]
    out["faults"] = faults
    out.update(level)
    return out


def run(client: CodedClient, spec: dict[str, Any]) -> Job | None:
    """A finished job (None when it failed on copies it could not settle: detected, not located)."""
    job = client.wait(client.submit(yaml.safe_dump(spec)).id)
    if job.state == JobState.FAILED and "decoding failure" in job.reason:
        return None
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"benchmark job failed: {job.reason}")
    return job


@dataclass
class Tally:
    """What a point's jobs showed."""

    jobs: int = 0
    failed: int = 0
    iterations: int = 0
    trials: list[int] = field(default_factory=list)  # iterations from each ended trial's start to its location
    censored: int = 0
    wrong_used: int = 0
    caught: int = 0  # iterations, not suspect, that located the worker
    exposed: int = 0  # wrong pieces sent in iterations not suspect (caught or used)
    false_alarms: int = 0

    def add(self, job: Job, spec: dict[str, Any]) -> None:
        """Count one job's history."""
        parsed = parse_job(yaml.safe_dump(spec))
        assert isinstance(parsed, GradientJob)
        injector = SoftErrors(SoftErrorSpec(**spec["faults"]["soft_errors"]), spec["seed"])
        chunks = parsed.stream_settings.chunks
        held = parsed.coding.partitions(FAULTY)
        self.jobs += 1
        start: int | None = START
        suspect = False
        for record in job.history:
            self.iterations += 1
            located = FAULTY in record.located
            self.false_alarms += sum(w != FAULTY for w in record.located)
            wrong = used_wrong(record, injector, chunks, held)
            self.wrong_used += wrong
            if not suspect and record.iteration >= START:
                self.caught += located
                self.exposed += wrong + located
            if located and start is not None and record.iteration >= start:
                self.trials.append(record.iteration - start)
                start = None
            if not located and start is None:
                start = record.iteration + 1  # it was a suspect and not wrong: the next trial starts after
            suspect = located
        self.censored += start is not None


def used_wrong(record: Any, injector: SoftErrors, chunks: int, held: Sequence[int]) -> int:
    """The wrong pieces (whole replies: messages) of the faulty worker the record used, replayed
    with the workers' own injector (same seed, same draws)."""
    if FAULTY not in record.responders:
        return 0
    if record.pieces:
        pieces = record.pieces[record.responders.index(FAULTY)]
        return sum(injector.corrupt(np.ones(1), FAULTY, record.iteration, p, partitions=[p // chunks])
                   for p in pieces)
    return int(injector.corrupt(np.ones(1), FAULTY, record.iteration, 0, partitions=held))


def predicted(level: str, q: float, scope: str) -> tuple[float, float]:
    """(median iterations of a trial, share of wrong pieces caught) that docs/jobs.md states; NaN
    where it states none (a one-partition fault's trial length depends on how often backups are
    used)."""
    if level == "streamed, off":
        return math.inf, 0.0
    share = sample() if level == "streamed, sampled" else 1.0
    if scope != "every piece" or level == "whole, default":  # whole replies: the liar's reply may not be awaited
        return math.nan, share
    p = located_per_iteration(share, q)
    return (0.0 if p >= 1 else math.ceil(math.log(0.5) / math.log(1 - p)) - 1), share


def row(n: int, q: float, scope: str, level: str, tally: Tally) -> dict[str, Any]:
    median, share = predicted(level, q, scope)
    caught = tally.caught / tally.exposed if tally.exposed else math.nan
    out = {"n": n, "q": q, "scope": scope, "level": level, "jobs": tally.jobs, "iterations": tally.iterations,
           "trials": len(tally.trials), "censored": tally.censored,
           "located_median": statistics.median(tally.trials) if tally.trials else math.inf,
           "located_max": max(tally.trials) if tally.trials else math.inf, "predicted_median": median,
           "wrong_used_per_1000": 1000 * tally.wrong_used / max(tally.iterations, 1), "caught_share": caught,
           "predicted_share": share, "false_alarms": tally.false_alarms, "caught": tally.caught,
           "exposed": tally.exposed, "wrong_used": tally.wrong_used}
    out["holds"] = holds(out, tally)
    return out


def holds(out: dict[str, Any], tally: Tally) -> str:
    """Whether the point kept the table's statement."""
    if out["false_alarms"]:
        return "NO"
    if out["level"] == "streamed, off":
        return "yes" if tally.caught == 0 else "NO"
    if out["level"] != "streamed, sampled":  # every wrong piece caught
        return "yes" if tally.wrong_used == 0 else "NO"
    share = out["predicted_share"]
    margin = 3 * math.sqrt(share * (1 - share) / max(tally.exposed, 1))
    return "yes" if not tally.exposed or out["caught_share"] >= share - margin else "NO"


def budget(level: str, q: float, scope: str, most: int) -> tuple[int, int]:
    """(iterations per job, iterations in all, at most ``most``) of a point: jobs long enough for
    a few trials each (a worker wrong in every piece is located again in every iteration after the
    first: one trial per job)."""
    if level == "streamed, off":
        return 100, 300  # nothing is located: the wrong pieces used per 1000 iterations only
    share = sample() if level == "streamed, sampled" else 1.0
    per = located_per_iteration(share, q) * (0.5 if scope != "every piece" else 1.0)
    return int(min(400, max(12, START + 4 / per))), most


def point(client: CodedClient, n: int, q: float, scope: str, level: str, changes: dict[str, Any], trials: int,
          seed: int, most: int) -> dict[str, Any]:
    tally = Tally()
    length, total = budget(level, q, scope, most)
    while len(tally.trials) < trials and tally.iterations < total:
        spec = job_spec(n, changes, q, scope, seed + tally.jobs + tally.failed, length)
        job = run(client, spec)
        if job is None:
            tally.failed += 1
            continue
        tally.add(job, spec)
    out = row(n, q, scope, level, tally)
    print(f"n={n:2} q={q:<4} {scope:13} {level:18} {out['trials']:4} trials ({out['censored']} censored, "
          f"{tally.jobs} jobs): located after {out['located_median']} (max {out['located_max']}; predicted "
          f"{out['predicted_median']}), caught {out['caught_share']:.3f} (stated {out['predicted_share']:.3f}), "
          f"{out['wrong_used_per_1000']:.1f} wrong used per 1000, {out['false_alarms']} false alarms: {out['holds']}",
          flush=True)
    return out


def arguments(parser: argparse.ArgumentParser) -> None:
    # 48 points of jobs of 6 ms an iteration and 0.15-0.3 s to set up: 30 trials and 1,200 iterations a point
    # keep the run near 4 minutes on 2 cores (200 and 15,000 take about half an hour)
    parser.add_argument("--trials", type=int, default=30, help="trials per point at most (default 30)")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--max-iterations", type=int, default=1_200,
                        help="iterations per point at most (default 1,200; the rarest faults end fewer trials)")


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, arguments=arguments, watch=False)  # counts, not timings
    args = bench.args
    trials = 2 if args.quick else args.trials
    sizes, shares = ((6,), (1.0,)) if args.quick else (SIZES, SHARES)
    rows = []
    for n in sizes:
        with cluster(args, n) as where, where.client() as client:
            for q in shares:
                for scope in SCOPES:
                    for level, changes in LEVELS:
                        rows.append(point(client, n, q, scope, level, changes, trials, args.seed, args.max_iterations))
    bench.csv("detection.csv", rows, COLUMNS)
    header = bench.header(
        f"cyclic `stragglers: 2`, logistic 4800 x 20; worker {FAULTY} wrong in a share q of its messages "
        f"from iteration {START} (models {[m for m, _ in MODELS]}, one per job); sampled at its default share "
        f"{sample():g}; quarantine off; up to {trials} trials and {args.max_iterations} iterations per point. "
        "located_*: iterations from a "
        "trial's start to the location (0: the same iteration; inf: never), over the trials that ended: "
        "censored ones, cut by their job's end, were longer, so where many are censored the median "
        "understates; predicted_median: the stated formula's with u = 1 (a worker sends more: backups, "
        "second copies; NaN: not stated, the backups' use decides); caught_share is the unbiased test of "
        "the statement")
    bench.page("detection.md", "Checking levels: what they catch, and when", header,
               [markdown_table(rows, COLUMNS, digits=3)])
    broken = [r for r in rows if r["holds"] == "NO"]
    print(f"wrote {bench.out / 'detection.csv'} and detection.md; {len(broken)} of {len(rows)} points broke their "
          "statement")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
