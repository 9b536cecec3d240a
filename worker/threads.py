"""The threads a worker's computation runs on: its CPU seconds, measured on its own thread, and
the spinning threads of the ``cpu`` straggler model."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["busy_threads", "timed"]


def timed(compute: Callable[..., np.ndarray], *args: Any) -> tuple[np.ndarray, float]:
    """``compute(*args)`` on the calling thread, and the CPU seconds it took that thread: the work
    itself, which on a machine whose cores the worker shares is far less than the wall time it
    waited for one (what the master's plan needs: docs/codes.md, "Choosing s and m")."""
    start = time.thread_time()
    message = compute(*args)
    return message, time.thread_time() - start


@contextlib.contextmanager
def busy_threads(count: int) -> Iterator[None]:
    """CPU contention: ``count`` threads spin until the block ends (straggler model "cpu")."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(10_000))

    threads = [threading.Thread(target=spin, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()
