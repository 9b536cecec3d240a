"""The bounds of what crosses the wire that a command line sets, free of gRPC (the ``coded``
command's arguments read them before anything heavy is imported)."""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_MESSAGE_MB"]

#: the largest gRPC message, sent or received, unless --max-message-mb says otherwise; bigger
#: arrays are chunked below it
DEFAULT_MAX_MESSAGE_MB = 64
