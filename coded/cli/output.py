"""What the ``coded`` command prints of jobs and workers: lines for people, JSON for scripts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from coded.base.words import link_words, plural
from coded.client.reports import TERMINAL_STATES, Job, JobState, Verification, WorkerInfo
from coded.client.timing import iteration_seconds
from coded.jobs.measures import LOSS_WORDS

__all__ = ["checks_lines", "checks_words", "finished_line", "job_json", "measures", "state_line", "status_line",
           "status_row", "timing_line", "worker_json", "worker_row", "workers_line"]

#: what each kind of check does, in a few words (master.proto's ``Verification.mode``); the
#: master's ``summary`` says all of it, shown with --verbose
CHECKS_IN_SHORT = {
    "detect": "one reply more than decoding needs, checked every iteration",
    "correct": "replies checked every iteration, up to {errors} wrong ones corrected",
    "sampled": "every piece's scale; a second copy of some workers' pieces every iteration",
    "strict": "every piece confirmed by a second copy from another worker",
    "unchecked": "the code has no redundancy: only non-finite replies are caught",
    "off": "nothing is checked (verify: off)",
    "codenet": "the peers check their own products",
}
#: the most of a failed job's reason that its row in the listing shows
REASON_IN_ROW = 80


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def job_json(job: Job) -> dict[str, Any]:
    """A job as ``--json`` prints it (``seconds_per_iteration`` from its history: None without it)."""
    number = _number
    seconds = iteration_seconds(job)
    test = None if job.test is None else {k: number(v) if isinstance(v, float) else v
                                          for k, v in dataclasses.asdict(job.test).items()}
    return {
        "id": job.id, "state": job.state.value, "reason": job.reason, "iterations": job.iteration,
        "elapsed_s": job.elapsed_s, "final_loss": number(job.loss), "test": test, "workers": list(job.workers),
        "stats": dict(job.stats), "verification": dataclasses.asdict(job.verification),
        "seconds_per_iteration": None if seconds is None else seconds.as_dict(),
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
    corrections; a matmul job has its product and nothing to show before it. Then, once the job
    has been evaluated, its latest test scores (those defined for its model)."""
    stats = job.stats
    if "rollbacks" in stats:  # counted by CodeNet's peers
        trained = f"{plural(int(stats['rollbacks']), 'rollback')}, {int(stats.get('errors_corrected', 0))} corrected"
    else:
        measure = LOSS_WORDS.get(job.kind)
        trained = "" if measure is None or math.isnan(job.loss) else f"{measure} {job.loss:.6g}"
    if job.test is None:
        return trained
    scores = [f"{name} {value:{form}}" for name, value, form in (
        ("loss", job.test.loss, ".6g"), ("accuracy", job.test.accuracy, ".4f"), ("auc", job.test.auc, ".4f"))
        if not math.isnan(value)]
    tested = f"test {', '.join(scores)}" if scores else ""
    return "; ".join(part for part in (trained, tested) if part)


def state_line(job: Job) -> str:
    """The job's state and, while it waits or has ended badly, why."""
    return f"{job.id} {job.state}" + (f": {job.reason}" if job.reason else "")


def checks_words(verification: Verification, verbose: bool = False) -> str:
    """What a job checks: in a line, or (``verbose``) all that the master says of it."""
    if verbose or verification.mode not in CHECKS_IN_SHORT:
        return verification.summary or "-"
    short = CHECKS_IN_SHORT[verification.mode].format(errors=verification.errors)
    return f"{short} (--verbose: more)" if verification.summary else short


def checks_lines(job: Job, verbose: bool = False) -> list[str]:
    """What a job checks (``verbose``: in full) and what it found, for `coded status JOB`."""
    stats = job.stats
    lines = [f"  checks: {job.verification.mode or '-'}: {checks_words(job.verification, verbose)}"]
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
    """A job's row in `coded status`: its kind, what it measured, what it checks and found, why it
    waits or (the first line of the reason, cut short) why it failed."""
    wrong = int(job.stats.get("errors_detected", 0))
    out = sum(w.quarantined for w in job.wrong_replies)
    why = ""
    if job.state in (JobState.PENDING, JobState.PAUSED) and job.reason:
        why = f"  ({job.reason})"
    elif job.state == JobState.FAILED and job.reason:
        first = job.reason.splitlines()[0]
        why = f"  ({first if len(first) <= REASON_IN_ROW else first[: REASON_IN_ROW - 1] + '…'})"
    return (f"{job.id}  {job.state:9}  {job.kind:15}  {job.iteration:>6}/{job.iterations:<6}  {measures(job):<26}  "
            f"checks {job.verification.mode or '-':9}  wrong {wrong}" + (f", {out} quarantined" if out else "")
            + why)


def workers_line(job: Job, workers: Sequence[WorkerInfo]) -> str | None:
    """For `coded status JOB`: which of an unfinished job's workers are gone (not heartbeating, or
    not registered), as the master's list of workers says; None when none is, or it has ended."""
    alive = {w.name for w in workers if w.alive}
    gone = [name for name in job.workers if name not in alive]
    if job.state in TERMINAL_STATES or not gone:
        return None
    return (f"  workers: {len(job.workers) - len(gone)} of {len(job.workers)} alive "
            f"({len(gone)} gone: {', '.join(gone)})")


def finished_line(job: Job) -> str:
    """How a followed job ended: state, iterations, time (per iteration too, from its history),
    measures and, if any, the reason."""
    measure = measures(job)
    seconds = iteration_seconds(job)
    line = f"{job.id} {job.state} after {plural(job.iteration, 'iteration')}, {job.elapsed_s:.1f} s"
    line += f", {seconds.words()}" if seconds else ""
    return line + (f", {measure}" if measure else "") + (f": {job.reason}" if job.reason else "")


def timing_line(job: Job) -> str | None:
    """For `coded status JOB`: its seconds per iteration, once it has two iterations (from its history)."""
    seconds = iteration_seconds(job)
    return None if seconds is None else f"  time: {seconds.words()}"


def worker_json(worker: WorkerInfo) -> dict[str, Any]:
    """A worker as `coded workers --json` prints it."""
    return dataclasses.asdict(worker)


def worker_row(w: WorkerInfo) -> str:
    """A worker's row in `coded workers`."""
    # the PyTorch architectures it builds (every worker has the numpy models)
    torch = sorted(m.removeprefix("torch/") for m in w.models if m.startswith("torch/"))
    builds = f"torch: {', '.join(torch)}" if torch else "numpy only"
    quarantined = f"  QUARANTINED by {', '.join(w.quarantined_by)}" if w.quarantined_by else ""
    quarantined += f"  UNUSABLE: {w.unusable}" if w.unusable else ""
    memory = (f"{w.resident_bytes / 1e6:.0f} MB (peak {w.peak_resident_bytes / 1e6:.0f})" if w.resident_bytes
              else "memory ?")
    link = f"link {link_words(w.link_bits_per_s)}" if w.link_bits_per_s else "link ?"
    return (f"{w.name:20} {w.address:22} {'alive' if w.alive else 'gone':5} {builds:26} {memory:22} {link:18} "
            f"jobs: {', '.join(w.jobs) or '-'}{quarantined}")
