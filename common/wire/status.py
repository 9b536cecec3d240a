"""The one table from exceptions to gRPC status codes.

Servicers raise domain exceptions (:mod:`coded.base.errors`) or the validation errors of the
modules they call; one interceptor (:mod:`coded.wire.rpc`) turns them into statuses through this
table. Anything not in it becomes INTERNAL with a generic message: tracebacks never leave the
process.
"""

from __future__ import annotations

import grpc

from coded.base.errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    StorageFull,
    TooLarge,
    Unauthenticated,
    Unavailable,
    Unsupported,
)
from coded.codes import CodeError
from coded.jobs.spec import JobSpecError
from coded.wire.tensor import TensorError

__all__ = ["STATUS_TABLE", "status_for"]


# Order matters: the first matching class wins (subclasses before their bases).
STATUS_TABLE: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (TooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (JobSpecError, grpc.StatusCode.INVALID_ARGUMENT),
    (TensorError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (Unsupported, grpc.StatusCode.FAILED_PRECONDITION),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (CodeError, grpc.StatusCode.FAILED_PRECONDITION),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotImplementedError, grpc.StatusCode.UNIMPLEMENTED),  # e.g. Health.List, which grpcio does not implement
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
