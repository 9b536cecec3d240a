"""Domain exceptions of the master and the workers, free of any transport.

The services raise these (or the validation errors of the modules they call); one table
(:mod:`coded.wire.status`) gives each its status, which gRPC and the data plane carry. The errors of
the job schema, the wire's tensors and the codes are defined here too, not beside their (numpy,
pydantic) modules, so that the status table and every client that catches them import in a blink;
those modules re-export them.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExists", "CodeError", "Conflict", "JobSpecError", "NotFound", "StorageError", "StorageFull", "TensorError",
    "TooLarge", "Unauthenticated", "Unavailable", "Unsupported",
]


class NotFound(LookupError):
    """An unknown job or worker; on a worker, a job (or its data) it does not hold."""


class Conflict(RuntimeError):
    """The request is valid but not in the current state (e.g. a result of an unfinished job)."""


class Unsupported(RuntimeError):
    """The request is valid but the cluster lacks what it needs (e.g. PyTorch for a torch model)."""


class AlreadyExists(RuntimeError):
    """A name is taken (a live worker's, by a registration that may not take it over)."""


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


class JobSpecError(ValueError):
    """A job specification is invalid: each of its ``problems`` names its field; the message is
    them all, separated by "; "."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class TensorError(ValueError):
    """A tensor or chunk stream from the network is malformed."""


class CodeError(Exception):
    """Base class of every error a code raises while decoding (:mod:`coded.codes.errors`)."""
