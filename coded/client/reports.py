"""What a master reports, as plain objects: jobs, their iterations and events, workers.

:class:`coded.client.CodedClient` returns these (made from the API's messages by
:mod:`coded.client.convert`); their fields are master.proto's, with ``state`` a name (:class:`JobState`)
and repeated fields as tuples.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TERMINAL_STATES", "Evaluation", "IterationRecord", "Job", "JobEvent", "JobState", "Replies", "Verification",
           "WorkerInfo", "WrongReplies"]


class JobState(str, enum.Enum):
    """A job's state by its name in the API (master.proto's ``JobState``): equal to that name
    (``job.state == "SUCCEEDED"``) and printed as it."""

    JOB_STATE_UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


@dataclass(frozen=True)
class IterationRecord:
    """One finished iteration (master.proto's ``IterationRecord``; NaN where nothing was measured)."""

    iteration: int
    loss: float
    elapsed_s: float
    responders: tuple[int, ...]
    duration_s: float
    test_loss: float
    test_accuracy: float
    test_auc: float
    worker_compute_s: tuple[float, ...]
    checked: bool
    errors_detected: int
    errors_corrected: int
    located: tuple[int, ...]
    quarantined: tuple[int, ...]
    pieces: tuple[tuple[int, ...], ...]  # streamed: the pieces used from each responder, in its order
    stopped_pieces: int
    worker_transfer_s: tuple[float, ...] = ()  # seconds each responder's reply took to cross its link
    worker_reply_s: tuple[float, ...] = ()  # seconds from the iteration's start until each responder's reply arrived


@dataclass(frozen=True)
class Verification:
    """What a job checks of its workers' replies (master.proto's ``Verification``)."""

    mode: str
    errors: int
    tolerance: float
    summary: str


@dataclass(frozen=True)
class Replies:
    """How a gradient job's workers reply (master.proto's ``Replies``)."""

    streamed: bool
    sent_bytes: int
    received_bytes: int
    reason: str
    predicted_s: float = math.nan  # seconds of a healthy iteration, as the master predicted at submission
    gradient_bytes: int = 0  # one whole gradient and its loss as a worker sends it (0: an older master's job)
    local_workers: int = 0  # the cluster's workers on the master's machine at submission (0: not told)
    cores: int = 0  # that machine's cores (0: not told)


@dataclass(frozen=True)
class Evaluation:
    """A job's latest scores on its test split (master.proto's ``Evaluation``; NaN where not defined)."""

    iteration: int
    loss: float
    accuracy: float
    auc: float


@dataclass(frozen=True)
class WrongReplies:
    """A worker whose replies were located as wrong in some iteration of a job."""

    position: int
    worker: str
    located: int
    quarantined: bool
    quarantined_after: int  # -1 when it was not quarantined


@dataclass(frozen=True)
class Job:
    """A job as the master reports it (master.proto's ``Job``); ``history`` is empty unless asked for."""

    id: str
    kind: str
    state: JobState
    spec: str  # the normalised specification, JSON
    iteration: int
    iterations: int
    elapsed_s: float
    loss: float
    reason: str
    created_unix: float
    workers: tuple[str, ...]
    stats: Mapping[str, float]
    verification: Verification
    wrong_replies: tuple[WrongReplies, ...]
    history: tuple[IterationRecord, ...] = ()
    replies: Replies | None = None  # gradient jobs
    test: Evaluation | None = None  # the latest evaluation, once there is one
    warnings: tuple[str, ...] = ()  # what the master noticed about the inputs at submission

    @property
    def model(self) -> dict[str, Any]:
        """The model section of the normalised spec ({} for kinds without one)."""
        model: dict[str, Any] = json.loads(self.spec).get("model", {})
        return model

    @property
    def parameters_dtype(self) -> str:
        """What the job's parameters are computed in: a torch model's ``dtype``, else float64."""
        model = self.model
        return str(model.get("dtype", "float64")) if model.get("type") == "torch" else "float64"


@dataclass(frozen=True)
class JobEvent:
    """A change of a job: the job after it (without history), and the iteration that just
    finished, if this event is one."""

    job: Job
    record: IterationRecord | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker (master.proto's ``WorkerInfo``)."""

    name: str
    address: str
    alive: bool
    last_seen_s: float
    jobs: tuple[str, ...]
    models: tuple[str, ...]
    quarantined_by: tuple[str, ...]
    resident_bytes: int = 0  # as its last heartbeat said; 0: not known
    peak_resident_bytes: int = 0
    unusable: str = ""  # why its heartbeats no longer make it alive ("" while they do)
    link_bits_per_s: float = 0.0  # its link's rate as the master measured it from its replies; 0: not measured
