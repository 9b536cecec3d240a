"""Giving freed memory back to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["release_free_memory", "resident_memory"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


def resident_memory(status: str = "/proc/self/status") -> tuple[int, int] | None:
    """(current, peak) resident memory of this process in bytes (Linux's VmRSS and VmHWM); None
    where /proc is not there. The kernel updates VmHWM lazily, so the peak is at least the current."""
    try:
        with open(status) as lines:
            fields = {key: int(value.split()[0]) * 1024 for key, value in
                      (line.split(":", 1) for line in lines if line.startswith(("VmHWM:", "VmRSS:")))}
    except OSError:
        return None
    if "VmRSS" not in fields:
        return None
    return fields["VmRSS"], max(fields.values())


def release_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim``; elsewhere a no-op).

    A finished job frees its arrays, but glibc keeps most freed memory mapped for reuse, spread
    over one arena per thread that allocated it; measured on a master after 20 jobs with 32 MiB
    products: RSS ~600 MiB at idle without trimming, ~300 MiB with it.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
