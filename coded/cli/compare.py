"""``coded compare JOB JOB ...``: finished or running jobs side by side, the first the baseline of
the ratios; its arguments (``add_compare``) beside the function that runs it."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from coded.cli.arguments import Commands, add_master_address
from coded.cli.options import connect
from coded.client.reports import Job
from coded.client.timing import iteration_seconds, seconds_to_loss

__all__ = ["add_compare", "cmd_compare", "compared"]


def add_compare(commands: Commands) -> None:
    p = commands.add_parser("compare", help="jobs side by side: codes, replies, checks, seconds per iteration, time "
                                            "to a loss, final loss and test scores, and ratios to the first",
                            description="Put jobs side by side, the first the baseline of the ratios. Seconds per "
                                        "iteration are the jobs' clocks between iterations (the first left out): "
                                        "the median and the middle half (25th-75th percentiles).")
    p.add_argument("jobs", nargs="+", metavar="JOB")
    p.add_argument("--loss", type=float, help="the training loss whose time each job is compared at (default: the "
                                              "highest final loss of the jobs, which every one of them reached)")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    add_master_address(p)
    p.set_defaults(func=cmd_compare)


def _code(job: Job) -> str:
    from coded.jobs.spec import GradientJob, parse_job
    from coded.jobs.spec.gradient import describe_code

    spec = parse_job(job.spec)
    return describe_code(spec.code) if isinstance(spec, GradientJob) else job.kind


def _replies(job: Job) -> str:
    return "-" if job.replies is None else "streamed" if job.replies.streamed else "whole"


def compared(jobs: list[Job], loss: float | None = None) -> list[dict[str, Any]]:
    """Each job's row: what it ran, its seconds per iteration, its time to ``loss`` (default: the
    highest final loss of the jobs) and its scores, with the ratios of its times to the first job's."""
    if loss is None:
        finals = [j.loss for j in jobs if not math.isnan(j.loss)]
        loss = max(finals) if finals else math.nan
    rows: list[dict[str, Any]] = []
    for job in jobs:
        seconds = iteration_seconds(job)
        test = job.test
        rows.append({
            "job": job.id, "state": job.state.value, "code": _code(job), "replies": _replies(job),
            "checks": job.verification.mode or "-", "iterations": job.iteration,
            "s_per_iteration": seconds.median if seconds else math.nan,
            "middle_half": (seconds.low, seconds.high) if seconds else (math.nan, math.nan),
            "last_s": seconds.last if seconds else math.nan,
            "loss": loss, "s_to_loss": seconds_to_loss(job, loss), "final_loss": job.loss,
            "test_loss": test.loss if test else math.nan, "test_accuracy": test.accuracy if test else math.nan,
            "test_auc": test.auc if test else math.nan})
    base = rows[0]
    for row in rows:
        for key in ("s_per_iteration", "s_to_loss"):
            row[f"{key}_vs_first"] = row[key] / base[key] if base[key] else math.nan
    return rows


def _cell(value: Any, form: str = ".4g") -> str:
    return "-" if isinstance(value, float) and math.isnan(value) else format(value, form)


def cmd_compare(args: argparse.Namespace) -> int:
    with connect(args) as client:
        jobs = [client.get(job_id, history=True) for job_id in args.jobs]
    rows = compared(jobs, args.loss)
    if args.json:
        print(json.dumps([{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                          for row in rows]))
        return 0
    header = (f"{'job':<10} {'code':<24} {'replies':<8} {'checks':<9} {'s/iteration':>11} {'middle half':>17} "
              f"{'x first':>7} {'s to loss':>9} {'x first':>7} {'final loss':>10} {'test loss':>9} {'accuracy':>8} "
              f"{'auc':>6}")
    print(header)
    for row in rows:
        low, high = row["middle_half"]
        print(f"{row['job']:<10} {row['code']:<24} {row['replies']:<8} {row['checks']:<9} "
              f"{_cell(row['s_per_iteration']):>11} {_cell(low) + '-' + _cell(high):>17} "
              f"{_cell(row['s_per_iteration_vs_first'], '.3g'):>7} {_cell(row['s_to_loss']):>9} "
              f"{_cell(row['s_to_loss_vs_first'], '.3g'):>7} {_cell(row['final_loss'], '.6g'):>10} "
              f"{_cell(row['test_loss'], '.6g'):>9} {_cell(row['test_accuracy'], '.4f'):>8} "
              f"{_cell(row['test_auc'], '.4f'):>6}")
    print(f"s/iteration: the median of the jobs' clocks between iterations (the first left out), middle half: the "
          "25th-75th percentiles; s to loss: seconds until the training loss was at most "
          f"{_cell(rows[0]['loss'], '.6g')} "
          "(--loss; default the highest final loss of the jobs); x first: the ratio to the first job's")
    return 0
