"""What a job checks of its workers' replies, and the workers it located as wrong or quarantined.

Plain bookkeeping shared by the runners: :func:`verification_of` says in words what a job's spec
makes the master check (shown by ``coded status`` and in ``Job.verification``), and
:class:`Quarantine` counts located workers and takes out of the job a worker located more than
``verify.quarantine.limit`` times within ``window`` iterations. Its state is rebuilt from the job's
history when a restarted master resumes the job, so a resumed job makes the same decisions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from coded.base.words import plural
from coded.codes import GradientCode
from coded.codes.sampled import wrong_used_at_most, wrong_used_before_located
from coded.jobs.spec import CodeNetJob, GradientJob, JobSpec, MatrixJob
from coded.jobs.spec.verify import QuarantineSpec
from coded.master.store import Record

__all__ = ["Quarantine", "Verification", "verification_of"]


@dataclass(frozen=True)
class Verification:
    """What a job checks.

    Attributes
    ----------
    mode : str
        ``detect`` (one reply more than decoding needs; corrects what later replies allow),
        ``correct`` (waits for ``errors`` + 1 more and corrects up to ``errors``), ``unchecked``
        (the code has no redundancy: only non-finite replies are caught), ``off`` (``verify: off``),
        ``codenet`` (the peers check their own products).
    errors : int
        Wrong replies per iteration it waits to be able to correct.
    tolerance : float
        Gradient jobs: the largest change of the gradient, relative to the median message norm,
        that one wrong message can make unnoticed (0 where not applicable).
    summary : str
        The above in words.
    """

    mode: str
    errors: int
    tolerance: float
    summary: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def verification_of(spec: JobSpec) -> Verification:
    """What ``spec`` makes the master check, in words (docs/jobs.md, "Checking replies")."""
    if isinstance(spec, CodeNetJob):
        words = {"codenet": f"peers locate and correct up to t={spec.code.t} wrong products per block-row and "
                            "block-column, and roll back to a checkpoint beyond that",
                 "replication": "peers compare the two replicas of every product and roll back on any mismatch",
                 "uncoded": "nothing is checked: a wrong product goes unnoticed"}
        return Verification("codenet" if spec.strategy != "uncoded" else "unchecked", 0, 0.0, words[spec.strategy])
    if spec.checks is None:
        return Verification("off", 0, 0.0, "verify: off: replies are not checked; a wrong one goes unnoticed")
    errors = spec.checks.errors
    mode = "correct" if errors else "detect"
    if isinstance(spec, MatrixJob):
        threshold = spec.code.recovery_threshold or spec.workers
        return Verification(mode, errors, 0.0, (
            f"each round waits for {threshold + errors + 1} results (recovery threshold {threshold} + {errors + 1}) "
            "and checks that they agree" + (f", correcting up to {plural(errors, 'wrong one')}" if errors else "")
            + "; on a disagreement it waits for more results and corrects what they allow, else the job fails "
            "with a decoding failure: no product is returned unchecked"))
    if spec.streamed:
        level = spec.verify_level
        assert level is not None
        return Verification(level, errors, spec.tolerance, _streamed_summary(spec))
    code = spec.gradient_code
    return Verification(mode if code.checkable else "unchecked", errors, spec.tolerance,
                        _gradient_summary(spec, code))


def _streamed_summary(spec: GradientJob) -> str:
    stragglers = spec.code.effective_stragglers
    checks = spec.checks
    assert checks is not None
    waits = (f"each iteration sums one copy of every piece as the workers stream them, whoever sends it, so "
             f"slow workers' finished pieces count and up to {plural(stragglers, 'dead worker')} "
             f"{'is' if stragglers == 1 else 'are'} not waited for; ")
    rule = (f"two copies agree when they differ by at most {spec.tolerance:g} x the larger's norm; a disagreement "
            "waits for a third copy and leaves the odd one out, else the job fails with a decoding failure")
    if spec.verify_level == "strict":
        return waits + ("every piece is confirmed by a second copy from another worker (about twice the work of "
                        f"unchecked streaming): no wrong piece is ever used; {rule}")
    share = checks.sample
    return waits + (
        "non-finite pieces are left out and pieces 1000 times above or below their last norm confirmed by a "
        f"second copy, every iteration; besides, each piece is confirmed with probability {share:g}, drawn per "
        "iteration and piece whoever sends it, and a copy that comes after its piece was settled is compared "
        "with it. A worker wrong in a share q of its pieces is located with probability at least "
        f"1 - (1 - {share:g} q)^u per iteration (u: its pieces used, one per chunk in a healthy round); until "
        f"then its unchecked wrong pieces are used: {wrong_used_before_located(share):.3g} on average, more than "
        f"{wrong_used_at_most(share)} with probability 1%. A worker "
        f"found wrong has all its pieces confirmed for the next "
        f"{checks.quarantine_rule.window if checks.quarantine_rule else 1} iterations; the first iteration (and "
        "the first after a restart) confirms every piece; `verify: strict` confirms every piece. "
        f"{rule[0].upper()}{rule[1:]}")


def _gradient_summary(spec: GradientJob, code: GradientCode) -> str:
    if code.asynchronous:
        return (f"{code.scheme} applies each message as it arrives, computed at different parameters, so messages "
                "cannot be compared: only non-finite messages are caught (dropped); a finite wrong gradient is "
                "applied unnoticed")
    if not code.checkable:
        return (f"{code.scheme} (s={code.s}) has no redundancy to check replies with: only non-finite messages are "
                "caught (left out); a finite wrong gradient is applied unnoticed")
    errors = spec.checks.errors if spec.checks is not None else 0
    stragglers = spec.code.effective_stragglers
    text = (f"each iteration waits for {code.n - stragglers} of the {code.n} replies, so "
            f"{plural(stragglers, 'slow or dead worker')} {'is' if stragglers == 1 else 'are'} not waited for, and "
            f"checks that they agree (the code is built for s={code.s}: {stragglers} + the "
            f"{plural(errors + 1, 'reply', 'replies')} beyond decoding that the check needs; each worker computes "
            f"{len(code.partitions(0))} of the {code.k} partitions): one wrong message moves the gradient by at "
            f"most {spec.tolerance:g} x the median message norm unnoticed"
            + (f"; up to {plural(errors, 'wrong one')} {'is' if errors == 1 else 'are'} located and left out"
               if errors else "")
            + "; on a disagreement it waits for more replies and corrects what they allow, else the job fails "
            "with a decoding failure")
    if code.stages > 1:
        text += ("; only the coded second stage is checked: the first stage (naive partitions, each on one worker) "
                 "has no redundancy")
    return text


class Quarantine:
    """Located workers of one running job, and those taken out of it.

    Parameters
    ----------
    rule : QuarantineSpec or None
        None: nobody is quarantined (``quarantine: off``).
    """

    def __init__(self, rule: QuarantineSpec | None) -> None:
        self.rule = rule
        self._recent: dict[int, deque[int]] = {}  # position -> iterations it was located in, within the window
        self.out: dict[int, int] = {}  # position -> the iteration after which it left the job

    def restore(self, records: Iterable[Record]) -> None:
        """Replay recorded iterations (ascending) that located or quarantined workers."""
        for record in records:
            self._count(record.iteration, record.located)
            self.out.update(dict.fromkeys(record.quarantined, record.iteration))

    def note(self, iteration: int, located: Iterable[int], removable: Callable[[frozenset[int]], bool]) -> list[int]:
        """Count workers located as wrong at ``iteration``; returns those quarantined now.

        ``removable(positions)`` says whether the job can go on without ``positions``; a worker is
        not taken out when the rest could not run the job (it stays located, and corrected, in
        every iteration instead).
        """
        newly = []
        for position in self._count(iteration, located):
            if self.rule is None or len(self._recent[position]) <= self.rule.limit:
                continue
            if removable(frozenset(self.out) | {position}):
                self.out[position] = iteration
                newly.append(position)
        return newly

    def suspects(self, iteration: int) -> set[int]:
        """Positions located as wrong within the window before ``iteration`` and not taken out:
        a sampled check confirms every piece they send."""
        window = self.rule.window if self.rule is not None else 1
        return {p for p, recent in self._recent.items()
                if p not in self.out and recent and recent[-1] > iteration - 1 - window}

    def _count(self, iteration: int, located: Iterable[int]) -> list[int]:
        fresh = sorted(p for p in set(located) if p not in self.out)
        window = self.rule.window if self.rule is not None else 1
        for position in fresh:
            recent = self._recent.setdefault(position, deque())
            recent.append(iteration)
            while recent[0] <= iteration - window:
                recent.popleft()
        return fresh
