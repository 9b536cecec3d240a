"""Exceptions raised by the codes."""

from __future__ import annotations

from coded.base.errors import CodeError  # defined there for the status table, which imports no numpy

__all__ = ["CodeError", "DecodingFailure", "IllConditionedError", "NotDecodableError"]


class NotDecodableError(CodeError):
    """The responses cannot give the exact answer (too few, or the wrong ones)."""


class IllConditionedError(NotDecodableError):
    """The responses suffice in exact arithmetic, but float64 cannot decode them accurately."""


class DecodingFailure(CodeError):
    """More responses are wrong than the code can correct; errors were detected, not corrected."""
