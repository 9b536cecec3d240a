"""Domain exceptions and the table that maps them to gRPC status codes.

Servicers raise these (or the validation errors of the modules they call); one interceptor
(common/rpc.py) turns them into statuses. Anything not in the table becomes INTERNAL with a
generic message: tracebacks never leave the process.
"""

from __future__ import annotations

import grpc

from common.codes import CodeError
from common.jobspec import JobSpecError
from common.tensor import TensorError

__all__ = ["NotFound", "Conflict", "Unauthenticated", "TooLarge", "Unavailable", "StorageError", "StorageFull",
           "status_for"]


class NotFound(LookupError):
    """An unknown job or worker."""


class Conflict(RuntimeError):
    """The request is valid but not in the current state (e.g. a result of an unfinished job)."""


class Unauthenticated(PermissionError):
    """Missing or wrong credentials."""


class TooLarge(ValueError):
    """A message, file or array exceeds a configured bound."""


class Unavailable(RuntimeError):
    """A dependency (worker, disk) is temporarily unusable."""


class StorageError(Unavailable):
    """The state dir refused a write (read-only, I/O error); nothing was half-written."""


class StorageFull(StorageError):
    """The state dir's file system is full."""


# Order matters: the first matching class wins (subclasses before their bases).
STATUS_TABLE: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (TooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (JobSpecError, grpc.StatusCode.INVALID_ARGUMENT),
    (TensorError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (CodeError, grpc.StatusCode.FAILED_PRECONDITION),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (OSError, grpc.StatusCode.UNAVAILABLE),
)


def status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """Status code and client-facing message of an exception."""
    for cls, code in STATUS_TABLE:
        if isinstance(error, cls):
            if cls is OSError:
                return code, f"storage error: {getattr(error, 'strerror', None) or type(error).__name__}"
            return code, str(error)
    return grpc.StatusCode.INTERNAL, "internal error (see the server log)"
