"""This machine: which one it is, as every process on it sees it, and the cores a process may use."""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

__all__ = ["cores", "machine_id"]


@functools.cache
def machine_id() -> str:
    """This machine while it is up: Linux's boot id, the same for every process on it whatever
    network namespace it runs in (so processes that share it share its cores); elsewhere its host name."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
