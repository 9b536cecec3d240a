"""Commands about jobs: ``coded submit``, ``status``, ``watch``, ``cancel``, ``result``; each with its
arguments (``add_<command>``) beside the function that runs it (``cmd_<command>``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from coded.cli.arguments import Commands, add_master_address, add_verbose
from coded.cli.options import connect, hint
from coded.cli.output import (
    checks_lines,
    checks_words,
    finished_line,
    job_json,
    measures,
    state_line,
    status_line,
    status_row,
    timing_line,
    workers_line,
)
from coded.client.reports import TERMINAL_STATES, Job, JobEvent, JobState

if TYPE_CHECKING:
    from coded.client import CodedClient

__all__ = ["add_cancel", "add_result", "add_status", "add_submit", "add_watch", "cmd_cancel", "cmd_result",
           "cmd_status", "cmd_submit", "cmd_watch"]


def _follow(client: CodedClient, job: Job, args: argparse.Namespace) -> Job:
    """Follow a job to its end: a progress bar on a terminal (not with --json), and on stderr a line
    for every change of state or of its reason (PENDING: how many workers it waits for)."""
    from tqdm import tqdm

    bar = None
    if not args.json and sys.stderr.isatty():
        bar = tqdm(total=job.iterations, initial=job.iteration, unit="it", file=sys.stderr)
    said = (job.state, job.reason)  # the caller has shown this one

    def show(event: JobEvent) -> None:
        nonlocal said
        now = event.job
        if (now.state, now.reason) != said and now.state not in TERMINAL_STATES:  # the end: _finish's line
            said = (now.state, now.reason)
            tqdm.write(state_line(now), file=sys.stderr)
        if bar is not None:
            bar.n = now.iteration
            bar.set_postfix_str(f"{now.state} {measures(now)}".strip(), refresh=False)
            bar.refresh()

    try:
        return client.wait(job.id, show)
    finally:
        if bar is not None:
            bar.close()


@contextlib.contextmanager
def _on_ctrl_c(args: argparse.Namespace, job: Job) -> Iterator[None]:
    """On Ctrl-C, say that the job goes on (only a client stopped) and how to follow or cancel it,
    and exit with 130 at once: a KeyboardInterrupt raised inside a gRPC call can leave the
    channel's teardown waiting (seen: a client that never exited), and nothing here needs
    cleaning up, as the job runs on the master."""
    def interrupted(signum: int, frame: object) -> None:
        print(f"\ninterrupted: job {job.id} goes on running on the master; {hint(args, 'watch', job.id)} "
              f"follows it again, {hint(args, 'cancel', job.id)} cancels it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _finish(job: Job, as_json: bool) -> int:
    if as_json:
        print(json.dumps(job_json(job)))
    else:
        print(finished_line(job))
        if job.wrong_replies:
            print("\n".join(checks_lines(job)[1:]))
    return 0 if job.state == JobState.SUCCEEDED else 1


def _note_checks(job: Job, verbose: bool) -> None:
    """Say on stderr what a submitted job checks (``verbose``: in full, with what it waits for),
    whether it checks nothing, and how its workers reply."""
    if job.verification.summary:
        unchecked = job.verification.mode in ("off", "unchecked")
        print(f"{'note' if unchecked else 'checks'}: {checks_words(job.verification, verbose)}", file=sys.stderr)
    if job.replies is not None:
        print(f"replies: {job.replies.reason}", file=sys.stderr)
    for warning in job.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def add_submit(commands: Commands) -> None:
    p = commands.add_parser("submit", help="submit a job spec (YAML)")
    p.add_argument("spec", help="job specification file")
    p.add_argument("--wait", action="store_true", help="follow the job; exit 0 only if it succeeds")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbose(p)
    add_master_address(p)
    p.set_defaults(func=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    with connect(args) as client:
        job = client.submit_file(args.spec)
        with _on_ctrl_c(args, job):
            # on stderr, whatever the output: the id is known even if the wait is interrupted
            print(f"submitted {state_line(job)}", file=sys.stderr)
            if not args.json:
                _note_checks(job, _verbose(args))
            if not args.wait:
                print(json.dumps(job_json(job)) if args.json else job.id)
                return 0
            return _finish(_follow(client, job, args), args.json)


def _verbose(args: argparse.Namespace) -> bool:
    """`coded submit|status --verbose`, or `coded -v ...` (which logs more too)."""
    return bool(args.in_full or args.verbose)


def add_status(commands: Commands) -> None:
    p = commands.add_parser("status", help="one job, or all jobs")
    p.add_argument("job", nargs="?")
    p.add_argument("--json", action="store_true")
    add_verbose(p)
    add_master_address(p)
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.job:
            job = client.get(args.job, history=True)
            if args.json:
                print(json.dumps(job_json(job)))
                return 0
            gone = workers_line(job, client.workers()) if job.workers else None
            timing = timing_line(job)
            print("\n".join([status_line(job), *([timing] if timing else []), *([gone] if gone else []),
                             *checks_lines(job, _verbose(args))]))
            return 0
        jobs = client.jobs()
    if args.json:
        print(json.dumps([job_json(j) for j in jobs]))
    for job in [] if args.json else jobs:
        print(status_row(job))
    return 0


def add_watch(commands: Commands) -> None:
    p = commands.add_parser("watch", help="follow a job to its end")
    p.add_argument("job")
    p.add_argument("--json", action="store_true")
    add_master_address(p)
    p.set_defaults(func=cmd_watch)


def cmd_watch(args: argparse.Namespace) -> int:
    with connect(args) as client:
        job = client.get(args.job)
        with _on_ctrl_c(args, job):
            if job.state not in TERMINAL_STATES:  # an ended job: _finish's line says it
                print(state_line(job), file=sys.stderr)
            return _finish(_follow(client, job, args), args.json)


def add_cancel(commands: Commands) -> None:
    p = commands.add_parser("cancel", help="cancel a job")
    p.add_argument("job")
    add_master_address(p)
    p.set_defaults(func=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> int:
    with connect(args) as client:
        job = client.cancel(args.job)
        print(f"{job.id} {job.state}")
        return 0


def add_result(commands: Commands) -> None:
    p = commands.add_parser("result", help="write a job's result: .npz for all arrays, .npy for a result of one "
                                           "array (a product), .safetensors or .pt (with PyTorch) for a model's "
                                           "state dict")
    p.add_argument("job")
    p.add_argument("--out", required=True)
    add_master_address(p)
    p.set_defaults(func=cmd_result)


def cmd_result(args: argparse.Namespace) -> int:
    from coded.client.weights import check_suffix, write_result

    check_suffix(Path(args.out))  # before fetching anything
    with connect(args) as client:
        arrays = client.result(args.job)
        job = client.get(args.job)
    # a torch model's parameters keep its compute dtype; the header says what built them
    metadata = {"coded.job": args.job, "coded.kind": job.kind, "coded.model": json.dumps(job.model)}
    print(f"wrote {args.out}: {write_result(Path(args.out), arrays, job.parameters_dtype, metadata)}")
    return 0
