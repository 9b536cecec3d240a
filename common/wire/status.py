"""The one table from exceptions to statuses: the project's own vocabulary of failures.

Servicers and the worker's data plane raise domain exceptions (:mod:`coded.base.errors`) or the
validation errors of the modules they call; each becomes exactly one :class:`Status` through
:data:`STATUS_TABLE`, and each status names exactly one exception type again, so whoever
receives a status (the master, from a worker) knows what was raised. The data plane sends the
status's number in its DONE and ERROR frames (docs/dataplane.md); the gRPC interceptor
(:mod:`coded.wire.rpc`) sends gRPC's code for it, and the status itself beside that code. What a
status means to the master is :mod:`coded.master.links`' business.

Anything not in the table is :attr:`Status.INTERNAL` with a generic message: tracebacks never
leave the process. This module knows no transport (no gRPC).
"""

from __future__ import annotations

from enum import IntEnum

from coded.base.errors import (
    AlreadyExists,
    CodeError,
    Conflict,
    JobSpecError,
    NotFound,
    StorageError,
    StorageFull,
    TensorError,
    TooLarge,
    Unauthenticated,
    Unavailable,
    Unsupported,
)

__all__ = ["INTERNAL_MESSAGE", "STATUS_TABLE", "Status", "error_type", "status_of"]


class Status(IntEnum):
    """How a request ended. 0 is success; every other number stands for one exception type."""

    OK = 0
    INTERNAL = 1           # anything unexpected (the message is generic; the traceback stays in the log)
    INVALID_ARGUMENT = 2   # ValueError: a bad value (an input of the wrong shape, NaN, an index out of range)
    INVALID_SPEC = 3       # JobSpecError: a job specification that is invalid (the message names the field)
    MALFORMED = 4          # TensorError: bytes from the network that are not what they claim (a frame, a tensor)
    TOO_LARGE = 5          # TooLarge: over a configured bound (a message, an upload, jobs or rounds at once)
    NOT_FOUND = 6          # NotFound: an unknown job or worker; a job (or its part) that a worker does not hold
    ALREADY_EXISTS = 7     # AlreadyExists: a name taken by a live worker
    CONFLICT = 8           # Conflict: valid, but not in the current state (a result of an unfinished job)
    UNSUPPORTED = 9        # Unsupported: valid, but the cluster lacks what it needs (PyTorch)
    UNDECODABLE = 10       # CodeError: a code cannot decode (too few answers, too many wrong ones)
    UNAUTHENTICATED = 11   # Unauthenticated: a missing or wrong token
    UNAVAILABLE = 12       # Unavailable: a dependency is temporarily unusable
    STORAGE_ERROR = 13     # StorageError: the state dir refused a write (read-only, I/O error)
    STORAGE_FULL = 14      # StorageFull: the state dir's file system is full
    OS_ERROR = 15          # OSError: the operating system refused (a file, a socket)
    UNIMPLEMENTED = 16     # NotImplementedError: a call this server does not implement

    @classmethod
    def parse(cls, number: int) -> Status | None:
        """The status of a number received from the network; None for a number no status has."""
        return cls(number) if number in cls._value2member_map_ else None


#: the status of each exception type. Order matters: the first matching class wins (subclasses
#: before their bases); every status but OK and INTERNAL appears exactly once.
STATUS_TABLE: tuple[tuple[type[BaseException], Status], ...] = (
    (TooLarge, Status.TOO_LARGE),
    (StorageFull, Status.STORAGE_FULL),
    (StorageError, Status.STORAGE_ERROR),
    (JobSpecError, Status.INVALID_SPEC),
    (TensorError, Status.MALFORMED),
    (NotFound, Status.NOT_FOUND),
    (AlreadyExists, Status.ALREADY_EXISTS),
    (Conflict, Status.CONFLICT),
    (Unsupported, Status.UNSUPPORTED),
    (Unauthenticated, Status.UNAUTHENTICATED),
    (Unavailable, Status.UNAVAILABLE),
    (CodeError, Status.UNDECODABLE),
    (ValueError, Status.INVALID_ARGUMENT),
    (NotImplementedError, Status.UNIMPLEMENTED),  # e.g. Health.List, which grpcio does not implement
    (OSError, Status.OS_ERROR),
)

INTERNAL_MESSAGE = "internal error (see the server log)"

_TYPE_OF: dict[Status, type[BaseException]] = {status: cls for cls, status in STATUS_TABLE}


def status_of(error: BaseException) -> tuple[Status, str]:
    """The status of an exception and the message its receiver gets."""
    for cls, status in STATUS_TABLE:
        if isinstance(error, cls):
            if status is Status.OS_ERROR:  # its str() may hold paths and errno noise
                return status, f"storage error: {getattr(error, 'strerror', None) or type(error).__name__}"
            return status, str(error)
    return Status.INTERNAL, INTERNAL_MESSAGE


def error_type(status: Status) -> type[BaseException] | None:
    """The exception type a failed request's status stands for (None for OK and INTERNAL)."""
    return _TYPE_OF.get(status)
