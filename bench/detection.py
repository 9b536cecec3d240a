"""What each checking level of a gradient job catches, and when: trials with lying workers on a
real local cluster, counting the wrong messages the master used (issue 22).

    python -m bench.detection            # 10 trials per point
    python -m bench.detection --quick    # a seconds-long smoke run

n = 6, cyclic ``stragglers: 2``, logistic regression on 4800 x 20 rows (small: the trials count
messages, not seconds), 24 iterations. Levels: streamed replies with the ``sampled`` check (their
default) and the ``strict`` one, whole replies (``stream: off``, their default check), and
streamed unchecked (``verify: off``: the control, what goes unnoticed without a check).

Faults (``faults.soft_errors``, Gaussian noise added to every entry of a message):

- *persistent liar*: one worker (drawn per trial) corrupts every message from iteration
  ``start`` (drawn in 4..12) on: ``in scale`` with standard deviation 1 (within the factor 1000
  of the pieces' norms that the scale check lets through), ``out of scale`` with 10^6;
- *single messages*: each message of each worker corrupted with probability 0.005 from iteration
  4 on, in scale or out of scale as above.

Each trial is a job with its own seed, next to a clean run with that seed. Counted: the wrong
messages the master caught (its records' ``errors_detected``), those it *used* (a corrupted
piece among those the history says were used, or a corrupted whole reply among the responders;
which messages were corrupted is replayed with the workers' own injector), the iterations from
the liar's first wrong message until it was located and until it was quarantined, and whether the
job ended at the clean run's parameters (<= 1e-8); a job that fails (copies that disagree with no
other copy to settle them: detected, not located) counts as failed, having used nothing wrong.
``claim`` states what docs/jobs.md promises for the point and ``holds`` whether every trial kept
it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import yaml

from bench.cluster import add_cluster_arguments, cluster, logistic_spec
from bench.common import (
    add_common_arguments,
    code_line,
    command_line,
    machine_line,
    markdown_table,
    write_csv,
    write_markdown,
)
from coded.client import CodedClient
from coded.jobs.faults import SoftErrors
from coded.jobs.spec.faults import SoftErrorSpec
from coded.reports import Job, JobState

N = 6
ITERATIONS = 24
START = 4  # the first iteration that may carry a wrong message: the first one of a run confirms every piece
IN_SCALE, OUT_OF_SCALE = 1.0, 1e6
PROBABILITY = 0.005
#: (name, the spec's changes)
LEVELS: list[tuple[str, dict[str, Any]]] = [
    ("streamed, sampled", {}),
    ("streamed, strict", {"verify": "strict"}),
    ("whole, default", {"stream": "off"}),
    ("streamed, off", {"verify": "off"}),
]
#: (name, persistent liar, noise scale)
SCENARIOS: list[tuple[str, bool, float]] = [
    ("liar, in scale", True, IN_SCALE),
    ("liar, out of scale", True, OUT_OF_SCALE),
    ("single, in scale", False, IN_SCALE),
    ("single, out of scale", False, OUT_OF_SCALE),
]
COLUMNS = ["scenario", "level", "trials", "caught", "used_wrong", "trials_with_wrong_used", "failed_trials",
           "exact_trials",
           "located_after_median", "located_after_max", "quarantined_after_median", "claim", "holds"]


def sampled_cycle() -> int:
    """Iterations between two turns of a worker in the sampled check (docs/jobs.md): ceil(n / c)
    with c = ceil(sample * n) workers confirmed per iteration, the default sample 1/8."""
    return math.ceil(N / math.ceil(0.125 * N))


def claim(level: str, liar: bool, scale: float) -> str:
    """What docs/jobs.md promises for a level and fault: the rows of its checking table."""
    if level == "streamed, off":
        return "none (control)"
    if level != "streamed, sampled" or scale == OUT_OF_SCALE:
        return "no wrong message used"
    if liar:
        return f"located within {sampled_cycle() - 1} iterations of its first wrong message"
    return "none for single in-scale messages"


def trial_faults(trial: int, liar: bool, scale: float) -> tuple[dict[str, Any], int | None, int]:
    """A trial's soft errors, its liar (None: any worker) and the first iteration they corrupt."""
    rng = np.random.default_rng([trial, 22])
    if liar:
        worker, start = int(rng.integers(N)), int(rng.integers(START, 13))
        spec = {"probability": 1.0, "model": "gaussian", "scale": scale, "workers": [worker], "start": start}
        return spec, worker, start
    return {"probability": PROBABILITY, "model": "gaussian", "scale": scale, "start": START}, None, START


def job_spec(seed: int, changes: dict[str, Any], soft_errors: dict[str, Any] | None) -> dict[str, Any]:
    out = logistic_spec(N, {"scheme": "cyclic", "stragglers": 2}, 4800, 20, ITERATIONS, seed=seed)
    del out["verify"]  # each level's default check, unless the level says otherwise
    if soft_errors is not None:
        out["faults"] = {"soft_errors": soft_errors}
    out.update(changes)
    return out


def run(client: CodedClient, spec: dict[str, Any]) -> tuple[Job, np.ndarray | None]:
    """A finished job and its parameters (None when it failed: a disagreement it could not
    settle is detected, not located, and fails the job rather than use a wrong answer)."""
    job = client.wait(client.submit(yaml.safe_dump(spec)).id)
    if job.state == JobState.FAILED and "decoding failure" in job.reason:
        return job, None
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"benchmark job failed: {job.reason}")
    arrays = client.result(job.id)
    return job, np.concatenate([arrays[k].ravel() for k in sorted(arrays)])


def used_wrong(job: Job, injector: SoftErrors) -> int:
    """The corrupted messages the master used.

    A streamed record says which pieces it used from whom; a whole reply is used when its worker
    is a responder. Which messages were corrupted is replayed with the workers' own injector
    (same seed, same draws: a worker corrupts a message when ``corrupt`` says so for its
    iteration and piece, or stage 0 of a whole reply)."""
    used = 0
    for record in job.history:
        if record.pieces:
            for worker, piece_list in zip(record.responders, record.pieces, strict=True):
                used += sum(injector.corrupt(np.zeros(1), worker, record.iteration, p) for p in piece_list)
        else:
            used += sum(injector.corrupt(np.zeros(1), worker, record.iteration, 0) for worker in record.responders)
    return used


def first(job: Job, worker: int, field: str) -> int | None:
    """The first iteration whose record names ``worker`` in ``field`` (located, quarantined)."""
    return next((r.iteration for r in job.history if worker in getattr(r, field)), None)


def trials(args: argparse.Namespace, count_trials: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with cluster(args, N) as where, where.client() as client:
        clean = {t: run(client, job_spec(100 + t, {"code": {"scheme": "uncoded"}}, None))[1]
                 for t in range(count_trials)}  # uncoded without faults: never fails
        for scenario, liar, scale in SCENARIOS:
            for level, changes in LEVELS:
                caught = used = wrong_trials = exact = failed = 0
                located: list[float] = []
                quarantined: list[float] = []
                for t in range(count_trials):
                    soft, worker, start = trial_faults(t, liar, scale)
                    job, params = run(client, job_spec(100 + t, changes, soft))
                    injector = SoftErrors(SoftErrorSpec(**soft), 100 + t)
                    u = used_wrong(job, injector)
                    caught += sum(r.errors_detected for r in job.history)
                    used, wrong_trials = used + u, wrong_trials + (u > 0)
                    reference = clean[t]
                    assert reference is not None
                    if params is None:
                        failed += 1
                    else:
                        exact += float(np.abs(params - reference).max() / np.abs(reference).max()) <= 1e-8
                    if worker is not None:
                        at = first(job, worker, "located")
                        located.append(math.inf if at is None else at - start)
                        out = first(job, worker, "quarantined")
                        quarantined.append(math.inf if out is None else out - start)
                row = {"scenario": scenario, "level": level, "trials": count_trials, "caught": caught,
                       "used_wrong": used, "trials_with_wrong_used": wrong_trials, "failed_trials": failed,
                       "exact_trials": exact,
                       "located_after_median": statistics.median(located) if located else math.nan,
                       "located_after_max": max(located) if located else math.nan,
                       "quarantined_after_median": statistics.median(quarantined) if quarantined else math.nan,
                       "claim": claim(level, liar, scale)}
                row["holds"] = holds(row, level, liar, scale)
                rows.append(row)
                print(f"{scenario:22} {level:18} {caught:4} caught, {used:4} used; located after "
                      f"{row['located_after_median']} (max {row['located_after_max']}); "
                      f"claim: {row['claim']}: {row['holds']}", flush=True)
    return rows


def holds(row: dict[str, Any], level: str, liar: bool, scale: float) -> str:
    """Whether every trial kept the level's promise ("-" where it promises nothing)."""
    if level == "streamed, off" or (level == "streamed, sampled" and not liar and scale == IN_SCALE):
        return "-"
    if level == "streamed, sampled" and scale == IN_SCALE:
        return "yes" if row["located_after_max"] <= sampled_cycle() - 1 else "NO"
    kept = row["used_wrong"] == 0 and row["exact_trials"] + row["failed_trials"] == row["trials"]
    return "yes" if kept else "NO"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args(argv)
    rows = trials(args, 2 if args.quick else args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "detection.csv", rows, COLUMNS)
    header = [command_line(), machine_line(), code_line(),
              f"n = {N}, cyclic `stragglers: 2`, logistic 4800 x 20, {ITERATIONS} iterations; noise sd {IN_SCALE:g} "
              f"(in scale) or {OUT_OF_SCALE:g} (out of scale); single messages with probability {PROBABILITY:g} "
              f"from iteration {START}; located/quarantined after: iterations from the liar's first wrong "
              "message (0: the same iteration; inf: never)"]
    write_markdown(args.out / "detection.md", "Checking levels: what they catch, and when", header,
                   [markdown_table(rows, COLUMNS)])
    broken = [r for r in rows if r["holds"] == "NO"]
    print(f"wrote {args.out / 'detection.csv'} and detection.md; "
          f"{len(broken)} of {len(rows)} points broke their claim")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
