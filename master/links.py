"""How the master's core talks to one worker: a small interface with domain errors.

The runners, the registry and the service use only what is here. :mod:`coded.master.grpc_links`
implements it (control calls over gRPC, rounds over the data plane); the in-process tests
(tests/master/) implement it over worker services in the same process. Every path turns what the
worker raised into the same error here, through its status (:mod:`coded.wire.status`) and
:func:`call_error`. A worker that cannot be reached is an erasure (:class:`WorkerUnreachable`), not
a hang: every call has a deadline.
"""

from __future__ import annotations

import asyncio
import secrets
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.wire.status import Status

__all__ = [
    "ComputeCall",
    "LinkFactory",
    "Params",
    "StageReply",
    "WorkerCallError",
    "WorkerForgotJob",
    "WorkerLink",
    "WorkerRefused",
    "WorkerUnreachable",
    "call_error",
]

T = TypeVar("T")


class WorkerCallError(Exception):
    """A call to a worker failed; the message says how.

    ``status`` is what the worker answered (:class:`coded.wire.status.Status`, which names the
    exception it raised); None when the call failed before the worker answered (unreachable,
    timed out, a malformed reply).
    """

    def __init__(self, message: str, status: Status | None = None) -> None:
        super().__init__(message)
        self.status = status


class WorkerUnreachable(WorkerCallError):
    """The worker process cannot be reached or did not answer in time: an erasure."""


class WorkerRefused(WorkerCallError):
    """The worker refused the request: the job cannot run there (an assignment refused fails the job)."""


class WorkerForgotJob(WorkerCallError):
    """The worker does not hold the job (it restarted): assign it again."""


#: what each status a worker answers with means to the master (docs/dataplane.md, "Statuses")
_BY_STATUS: dict[Status, type[WorkerCallError]] = {
    Status.INTERNAL: WorkerCallError,
    Status.INVALID_ARGUMENT: WorkerRefused,
    Status.INVALID_SPEC: WorkerRefused,
    Status.MALFORMED: WorkerRefused,
    Status.TOO_LARGE: WorkerCallError,
    Status.NOT_FOUND: WorkerForgotJob,
    Status.ALREADY_EXISTS: WorkerCallError,
    Status.CONFLICT: WorkerRefused,
    Status.UNSUPPORTED: WorkerRefused,
    Status.UNDECODABLE: WorkerRefused,
    Status.UNAUTHENTICATED: WorkerCallError,
    Status.UNAVAILABLE: WorkerUnreachable,
    Status.STORAGE_ERROR: WorkerUnreachable,
    Status.STORAGE_FULL: WorkerCallError,
    Status.OS_ERROR: WorkerUnreachable,
    Status.UNIMPLEMENTED: WorkerCallError,
}


def call_error(status: Status, message: str) -> WorkerCallError:
    """The domain error of a call the worker failed with ``status`` (any but OK)."""
    return _BY_STATUS[status](f"{status.name}: {message}", status)


@dataclass(slots=True)  # not frozen: made per reply, and frozen ones cost more to make
class StageReply:
    """One completed stage of a worker's message in one call (``piece``: a streamed piece)."""

    stage: int
    message: np.ndarray
    compute_seconds: float
    delay_seconds: float
    received_at: float  # time.perf_counter() when the stage was complete
    piece: int | None = None
    transfer_seconds: float = 0.0  # from its first bytes' arrival to its last (its trip over the link)
    wire_bytes: int = 0  # its bytes that crossed the link (0: it came through shared memory)


@dataclass
class Params:
    """One round's input, prepared once and sent to many workers.

    A link converts the array to its wire form at most once per round: the first call of
    :meth:`form` with a key builds it, later calls (other workers) reuse it.
    """

    array: np.ndarray
    #: names the round on every worker it is sent to (random, so unique also across master restarts,
    #: which repeat iterations); 1 .. 2**63 - 1
    round_id: int = field(default_factory=lambda: secrets.randbits(63) or 1)
    _forms: dict[Hashable, Any] = field(default_factory=dict, repr=False)

    def form(self, key: Hashable, build: Callable[[np.ndarray], T]) -> T:
        if key not in self._forms:
            self._forms[key] = build(self.array)
        return self._forms[key]


class ComputeCall(ABC):
    """One round on one worker: the stages of its message as they complete.

    :meth:`stop` cuts a straggler off: the worker stops computing and the call ends by itself, so
    :meth:`replies` ends soon after, without raising.
    """

    stopping: bool = False

    @abstractmethod
    def replies(self) -> AsyncIterator[StageReply]:
        """Each stage as it completes; nothing more once :meth:`stop` was called.

        Raises
        ------
        WorkerCallError
            When the call fails (a subclass says how).
        """

    @abstractmethod
    def stop(self, idle: bool = False) -> None:
        """Ask the worker to stop computing (idempotent).

        ``idle``: the worker has nothing left to compute for this call (a streamed round whose
        pieces it held are all settled), so a link may end the call without telling the worker:
        the data plane's next round (or its close) ends it on the worker (docs/dataplane.md).
        """

    @abstractmethod
    def have(self, pieces: Sequence[int]) -> None:
        """Tell the worker of a streamed round that the master has these pieces: it skips them
        (and abandons one under way). Ignored once the call has ended or was stopped."""

    @abstractmethod
    def want(self, pieces: Sequence[int]) -> None:
        """Ask the worker of a streamed round for these pieces next, in order (it computes its own
        partition first). Ignored once the call has ended or was stopped."""

    def received_within(self, seconds: float) -> bool:
        """Whether bytes of this call's connection arrived in the last ``seconds``: a worker whose
        heartbeats queue behind its message on a slow link is alive while its message arrives.
        False for links that cannot tell."""
        return False

    def listen(self, on_stage: Callable[[StageReply], None], on_end: Callable[[WorkerCallError | None], None]) -> None:
        """The same as :meth:`replies`, by callbacks on the event loop: ``on_stage`` for each stage,
        then ``on_end`` once, with the error when the call failed. Once :meth:`stop` was called,
        neither is called any more.

        This default iterates :meth:`replies` in a task; a link whose replies arrive by callback
        anyway overrides it, so a round costs no task per worker.
        """
        async def pump() -> None:
            try:
                async for reply in self.replies():
                    if not self.stopping:
                        on_stage(reply)
            except WorkerCallError as error:
                if not self.stopping:
                    on_end(error)
                return
            except Exception as error:  # a link's bug must still end the call, or its round waits for ever
                if not self.stopping:
                    on_end(WorkerCallError(f"the call failed: {type(error).__name__}: {error}"))
                return
            if not self.stopping:
                on_end(None)

        task = asyncio.ensure_future(pump())
        _PUMPING.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(_PUMPING.discard)


_PUMPING: set[asyncio.Future] = set()


class WorkerLink(ABC):
    """The master's connection to one worker. Every call has a deadline (seconds).

    Every method raises :class:`WorkerCallError` (a subclass where the failure is known) when
    the call fails.
    """

    address: str

    @abstractmethod
    async def assign(self, assignment: Assignment, timeout: float) -> tuple[int, ...]:
        """Give the worker its position in a job; returns the data partitions it holds."""

    @abstractmethod
    async def upload(self, job_id: str, arrays: Iterable[tuple[str, np.ndarray]], timeout: float) -> None:
        """Send an assigned job's data (partitions ``x/<j>``, ``y/<j>``, or blocks ``a``, ``b``),
        named, in the order ``arrays`` makes them."""

    @abstractmethod
    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        """Start one round on the worker."""

    @abstractmethod
    async def release(self, job_id: str, timeout: float) -> None:
        """Let the worker forget a job."""

    @abstractmethod
    async def start_peer(self, start: PeerStart, timeout: float) -> None:
        """Start (idempotently) a CodeNet peer on the worker."""

    @abstractmethod
    async def peer_status(self, job_id: str, timeout: float) -> PeerStatus:
        """Where the worker's peer of a CodeNet job stands."""

    @abstractmethod
    async def fetch_block(self, job_id: str, layer: int, version: int, timeout: float) -> np.ndarray:
        """The peer's coded block of ``layer`` once it completed ``version`` iterations."""

    @abstractmethod
    async def close(self) -> None:
        """Free the connection (idempotent)."""


#: Makes the link to a worker from the address it registered with.
LinkFactory = Callable[[str], WorkerLink]
