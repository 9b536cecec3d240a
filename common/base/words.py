"""Counts and rates in the messages people read: "1 iteration", "2 iterations", "100 Mbit/s"."""

from __future__ import annotations

__all__ = ["link_words", "plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` followed by ``noun``, in the plural (``many``, or ``noun`` + "s") unless it is 1.

    >>> plural(1, "iteration"), plural(0, "iteration"), plural(3, "reply", "replies")
    ('1 iteration', '0 iterations', '3 replies')
    """
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def link_words(bits_per_s: float) -> str:
    """A bandwidth in words: "100 Mbit/s", "10 Gbit/s"."""
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:.3g} {unit}"
    return f"{bits_per_s:.3g} bit/s"
