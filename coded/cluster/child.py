"""What a local cluster's process sets for itself before it becomes ``coded``: run as a file,
never imported (``python child.py LAUNCHER_PID NICENESS PROGRAM ARG...``), then it execs
``PROGRAM ARG...`` and keeps its pid, session, niceness, scheduling policy and parent-death signal.

Why a program of its own and not ``preexec_fn``: a ``preexec_fn`` makes ``subprocess`` fork the
launcher, whose gRPC threads then run their fork handlers in both processes (measured here:
"Kick failed: eventfd_write: Bad file descriptor" in children, 2 of 1,500 children of a process
with busy channels exiting non-zero before their exec, and 3.4x the time of a plain start). Without
one, ``subprocess`` uses vfork, which runs no fork handler. It imports only the standard library:
a worker's start pays one bare interpreter more.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(launcher: int) -> None:
    """SIGTERM when the launcher's thread that started this process ends, even by SIGKILL, so a
    killed launcher leaves no cluster behind (Linux only: elsewhere children outlive it)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # the C library the interpreter has loaded
    except (OSError, AttributeError):
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != launcher:  # it died before the line above: no signal would come
        sys.exit(f"the launcher (pid {launcher}) is gone")


def _run_below(niceness: int) -> None:
    """Run as a batch process at ``niceness``.

    SCHED_BATCH: a process woken does not preempt the one running; it runs when its turn comes.
    A worker woken by the master's round so does not take the master's core before the master has
    woken the next one; the master woken by a reply does not stop another worker in the middle of
    its computation (its caches then cold), and takes the replies that came meanwhile together:
    0.90x the time per iteration of uncoded 12000 x 100 among 6 workers on 2 cores, 0.96x
    streamed (issue 23). Its last reply finds a core free: the workers have replied.
    """
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    if niceness:
        os.nice(niceness)
        # With autogroup scheduling (most Linux desktops and VMs) every session is its own group
        # and niceness counts only inside it: the group's own niceness is what ranks it beside
        # the master's. Not there (or not Linux): the process niceness is all there is.
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(str(niceness))


def main(argv: list[str]) -> None:
    launcher, niceness, program = int(argv[1]), int(argv[2]), argv[3:]
    _die_with(launcher)
    _run_below(niceness)
    os.execv(program[0], program)


if __name__ == "__main__":
    main(sys.argv)
