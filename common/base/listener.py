"""Who an object reports to until it ends: the one way an object that others listen to lets them go.

A listener's callback closes over its owner (a round, a runner), which holds the object it listens
to: a reference cycle. The object's one end method reports through :meth:`Listener.last` (or lets
go with :meth:`Listener.let_go` when there is nothing to report), so the cycle goes with the end and
reference counting frees both at once, not a later full collection; nothing else of the object
breaks cycles by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Listener"]

T = TypeVar("T")


class Listener(Generic[T]):
    """A callback that an object calls while it lives, and at most once more at its end.

    >>> heard = []
    >>> listener = Listener(heard.append)
    >>> listener(1); listener.last(2); listener(3)
    >>> heard, listener.listening
    ([1, 2], False)
    """

    __slots__ = ("_callback",)

    def __init__(self, callback: Callable[[T], None] | None = None) -> None:
        self._callback = callback

    @property
    def listening(self) -> bool:
        return self._callback is not None

    def __call__(self, value: T) -> None:
        """Report ``value``, still listening after."""
        if self._callback is not None:
            self._callback(value)

    def last(self, value: T) -> None:
        """Report ``value`` and let go: the end's report."""
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(value)

    def let_go(self) -> None:
        """Stop listening without a word (an end nobody is told of)."""
        self._callback = None
