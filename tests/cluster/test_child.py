"""A local cluster's process sets itself up before it execs ``coded`` (coded/cluster/child.py): the
launcher starts it without forking its own gRPC threads' state (no ``preexec_fn``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from coded.cluster.local import CHILD

#: what the exec'd program reports of itself: pid, niceness, scheduling policy, parent-death signal
REPORT = """
import ctypes, json, os
signal = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(signal))  # PR_GET_PDEATHSIG
print(json.dumps([os.getpid(), os.nice(0), os.sched_getscheduler(0), signal.value]))
"""


def child(launcher: int, niceness: int, *program: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-I", "-S", str(CHILD), str(launcher), str(niceness), *program],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and scheduling policies are Linux's")
def test_the_program_runs_in_the_same_process_below_the_launcher_and_dies_with_it():
    process = child(os.getpid(), 3, sys.executable, "-c", REPORT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    pid, niceness, policy, death = json.loads(out)
    assert pid == process.pid  # exec'd: the launcher's Popen follows the program itself
    assert niceness == os.nice(0) + 3 and policy == os.SCHED_BATCH and death == signal.SIGTERM


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_child_whose_launcher_is_already_gone_never_runs_the_program(tmp_path):
    marker = tmp_path / "ran"
    # pid 1 is not its parent: as though the launcher died and it was handed to init before prctl
    process = child(1, 0, sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1 and "the launcher (pid 1) is gone" in err, err
    assert not marker.exists()
