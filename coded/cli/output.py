"""What the ``coded`` command prints of jobs and workers: lines for people, JSON for scripts."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from coded.base.words import plural
from coded.jobs.spec import KINDS
from coded.reports import Job, JobState, WorkerInfo

__all__ = ["checks_lines", "finished_line", "job_json", "measures", "state_line", "status_line", "status_row",
           "worker_json", "worker_row"]


def job_json(job: Job) -> dict[str, Any]:
    """A job as ``--json`` prints it."""
    def number(value: float) -> float | None:
        return None if math.isnan(value) else value

    return {
        "id": job.id, "state": job.state.value, "reason": job.reason, "iterations": job.iteration,
        "elapsed_s": job.elapsed_s, "final_loss": number(job.loss), "workers": list(job.workers),
        "stats": dict(job.stats), "verification": dataclasses.asdict(job.verification),
        "wrong_replies": [dataclasses.asdict(w) for w in job.wrong_replies],
        "history": [{
            "iteration": r.iteration, "loss": number(r.loss), "elapsed_s": r.elapsed_s,
            "duration_s": r.duration_s, "responders": list(r.responders),
            "test_loss": number(r.test_loss), "test_accuracy": number(r.test_accuracy), "test_auc": number(r.test_auc),
            "checked": r.checked, "errors_detected": r.errors_detected, "errors_corrected": r.errors_corrected,
            "located": list(r.located), "quarantined": list(r.quarantined),
        } for r in job.history],
    }


def measures(job: Job) -> str:
    """What a job has measured so far that applies to its kind ("" before its first iteration):
    a gradient job's training loss, a matvec job's eigen-residual, a CodeNet job's rollbacks and
    corrections; a matmul job has its product and nothing to show before it."""
    stats = job.stats
    if "rollbacks" in stats:  # counted by CodeNet's peers
        return f"{plural(int(stats['rollbacks']), 'rollback')}, {int(stats.get('errors_corrected', 0))} corrected"
    measure = KINDS[job.kind].LOSS if job.kind in KINDS else None
    return "" if measure is None or math.isnan(job.loss) else f"{measure} {job.loss:.6g}"


def state_line(job: Job) -> str:
    """The job's state and, while it waits or has ended badly, why."""
    return f"{job.id} {job.state}" + (f": {job.reason}" if job.reason else "")


def checks_lines(job: Job) -> list[str]:
    """What a job checks and what it found, for `coded status JOB`."""
    stats = job.stats
    lines = [f"  checks: {job.verification.mode or '-'}: {job.verification.summary or '-'}"]
    if job.verification.mode not in ("", "off", "codenet"):
        lines.append(f"  iterations checked {int(stats.get('iterations_checked', 0))}, unchecked "
                     f"{int(stats.get('iterations_unchecked', 0))}; wrong replies detected "
                     f"{int(stats.get('errors_detected', 0))}, corrected {int(stats.get('errors_corrected', 0))}")
    if "pieces_used" in stats:
        used, stopped = int(stats["pieces_used"]), int(stats.get("stopped_pieces", 0))
        lines.append(f"  streamed: {plural(stopped, 'piece')} of the {used} used came from workers stopped before "
                     f"they had sent their own partition (slow workers' partial work)")
    for w in job.wrong_replies:
        out = f", quarantined after iteration {w.quarantined_after}" if w.quarantined else ""
        lines.append(f"  worker {w.worker} (position {w.position}): located as wrong in "
                     f"{plural(w.located, 'iteration')}{out}")
    return lines


def status_line(job: Job) -> str:
    """The first line of `coded status JOB`: state, progress, measures and, if any, the reason."""
    measure = measures(job)
    return (f"{job.id} {job.state} {job.iteration}/{job.iterations}" + (f" {measure}" if measure else "")
            + (f" ({job.reason})" if job.reason else ""))


def status_row(job: Job) -> str:
    """A job's row in `coded status`: what it measured, what it checks and found, why it waits."""
    wrong = int(job.stats.get("errors_detected", 0))
    out = sum(w.quarantined for w in job.wrong_replies)
    waiting = f"  ({job.reason})" if job.state in (JobState.PENDING, JobState.PAUSED) and job.reason else ""
    return (f"{job.id}  {job.state:9}  {job.iteration:>6}/{job.iterations:<6}  {measures(job):<26}  "
            f"checks {job.verification.mode or '-':9}  wrong {wrong}" + (f", {out} quarantined" if out else "")
            + waiting)


def finished_line(job: Job) -> str:
    """How a followed job ended: state, iterations, time, measures and, if any, the reason."""
    measure = measures(job)
    line = f"{job.id} {job.state} after {plural(job.iteration, 'iteration')}, {job.elapsed_s:.1f} s"
    return line + (f", {measure}" if measure else "") + (f": {job.reason}" if job.reason else "")


def worker_json(worker: WorkerInfo) -> dict[str, Any]:
    """A worker as `coded workers --json` prints it."""
    return dataclasses.asdict(worker)


def worker_row(w: WorkerInfo) -> str:
    """A worker's row in `coded workers`."""
    # the PyTorch architectures it builds (every worker has the numpy models)
    torch = sorted(m.removeprefix("torch/") for m in w.models if m.startswith("torch/"))
    builds = f"torch: {', '.join(torch)}" if torch else "numpy only"
    quarantined = f"  QUARANTINED by {', '.join(w.quarantined_by)}" if w.quarantined_by else ""
    return (f"{w.name:20} {w.address:22} {'alive' if w.alive else 'gone':5} {builds:26} "
            f"jobs: {', '.join(w.jobs) or '-'}{quarantined}")
