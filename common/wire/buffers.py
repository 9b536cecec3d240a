"""Arrays that messages are computed into, sent from and received into, reused once nothing holds
them.

A round moves a message of the model's size each way per worker. A new array for each is a new
allocation of that size: for a gradient of hundreds of thousands of floats, memory the kernel
maps and zeroes page by page at every round, on both ends (measured: a third of a worker's CPU
time per round on the papers' sparse workload went to the kernel). A :class:`BufferPool` keeps
the arrays it handed out and hands one out again once nothing else refers to it: not the round
that computed into it, not the transport still writing it, not a decode that reads it. Whoever
holds a view holds its array, so nothing is reused while anyone can still see it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np

__all__ = ["BufferPool"]

#: references to a pooled array while nobody else holds it: its bucket's list, the loop variable
#: that looks at it, and sys.getrefcount's own argument
_UNHELD = 3


class BufferPool:
    """Arrays by size, handed out again once unreferenced.

    Parameters
    ----------
    limit : int
        Bytes the pool keeps at most; beyond, :meth:`take` allocates arrays it does not keep.
    carve : callable, optional
        Where its arrays come from: ``carve(nbytes)`` gives a new uint8 array, or None when it
        has no more (a shared segment, :meth:`coded.wire.shared.Segment.carve`); then, and
        without it, from the process's memory.
    """

    def __init__(self, limit: int = 1 << 30, carve: Callable[[int], np.ndarray | None] | None = None) -> None:
        self._limit = limit
        self._carve = carve
        self._held = 0
        self._buckets: dict[int, list[np.ndarray]] = {}

    @property
    def held(self) -> int:
        """Bytes of the arrays the pool keeps."""
        return self._held

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` (contents undefined) that nobody else holds."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        bucket = self._buckets.setdefault(nbytes, [])
        for array in bucket:
            if sys.getrefcount(array) <= _UNHELD:
                return array.view(dtype).reshape(shape)
        carved = None if self._carve is None else self._carve(nbytes)
        array = np.empty(nbytes, np.uint8) if carved is None else carved
        if self._held + nbytes <= self._limit:
            bucket.append(array)
            self._held += nbytes
        return array.view(dtype).reshape(shape)
