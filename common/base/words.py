"""Counts in the messages people read: "1 iteration", "2 iterations"."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` followed by ``noun``, in the plural (``many``, or ``noun`` + "s") unless it is 1.

    >>> plural(1, "iteration"), plural(0, "iteration"), plural(3, "reply", "replies")
    ('1 iteration', '0 iterations', '3 replies')
    """
    return f"{count} {noun if count == 1 else many or noun + 's'}"
