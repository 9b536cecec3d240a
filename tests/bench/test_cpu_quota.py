"""bench.cpu_quota: a real process held by a real cgroup CPU quota, and nothing left behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cpu_quota import _current, cpu_quota, hierarchy

pytestmark = pytest.mark.system  # root: it writes /sys/fs/cgroup


def throttled(group: Path) -> int:
    """How many periods the kernel has held the group back (cpu.stat)."""
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat.get("nr_throttled", 0))


def test_a_busy_process_is_throttled_to_its_share_and_returned_home_after():
    version, mount = hierarchy()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        home = _current(busy.pid, version)
        with cpu_quota(busy.pid, 0.1) as group:
            assert _current(busy.pid, version) == group.relative_to(mount).as_posix()
            assert str(busy.pid) in (group / "cgroup.procs").read_text().split()
            if version == "v1":
                assert (group / "cpu.cfs_quota_us").read_text().strip() == "10000"
                assert (group / "cpu.cfs_period_us").read_text().strip() == "100000"
            else:
                assert (group / "cpu.max").read_text().split() == ["10000", "100000"]
            # the kernel's own count, not a clock: a loop that wants a whole core is held back
            deadline = time.monotonic() + 60
            while throttled(group) == 0:
                assert time.monotonic() < deadline, "the kernel never throttled a busy loop at 10% of a core"
                time.sleep(0.05)
        assert not group.exists()
        assert _current(busy.pid, version) == home
    finally:
        busy.kill()
        busy.wait()


def test_a_process_that_does_not_exist_leaves_no_cgroup():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    gone = int(done.stdout)
    _, mount = hierarchy()
    with pytest.raises(FileNotFoundError), cpu_quota(gone, 0.1):
        pass
    assert not (mount / f"coded-bench-{gone}").exists()


def test_a_share_of_nothing_is_refused():
    with pytest.raises(ValueError, match="share must be > 0"), cpu_quota(1, 0):
        pass
