"""A process slowed by the kernel: a cgroup whose CPU quota is a share of one core.

    with cpu_quota(pid, 0.1):   # the process and all its threads get 10 ms of CPU per 100 ms
        ...

An injected sleep leaves the slow worker's core free for the others; a quota does not sleep,
it starves the process, as a noisy neighbour or a throttled container does. Either cgroup
hierarchy: v1's ``cpu`` controller (``cpu.cfs_period_us``/``cpu.cfs_quota_us``) or v2's
``cpu.max``. The cgroup is made for the block and removed after it, the process moved back
to the cgroup it came from. Needs root (or a delegated hierarchy).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CpuQuotaUnavailable", "cpu_quota", "hierarchy"]

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default period: the quota is enforced over each 100 ms


class CpuQuotaUnavailable(RuntimeError):
    """The machine has no writable cgroup CPU controller."""


def hierarchy(root: Path = ROOT) -> tuple[str, Path]:
    """("v1", the cpu controller's mount) or ("v2", the unified mount) where it is writable."""
    if (root / "cpu" / "cpu.cfs_quota_us").exists() and os.access(root / "cpu", os.W_OK):
        return "v1", root / "cpu"
    if (root / "cgroup.controllers").exists() and os.access(root, os.W_OK):
        if "cpu" not in (root / "cgroup.controllers").read_text().split():
            raise CpuQuotaUnavailable(f"cgroup v2 at {root} has no cpu controller")
        return "v2", root
    raise CpuQuotaUnavailable(f"no writable cgroup cpu controller under {root} (run as root)")


def _current(pid: int, version: str) -> str:
    """The cgroup (relative path) that ``pid`` is in, in the hierarchy of ``version``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (version == "v1" and "cpu" in controllers.split(",")) or (version == "v2" and controllers == ""):
            return path.lstrip("/")
    raise CpuQuotaUnavailable(f"process {pid} is in no {version} cpu cgroup")


@contextlib.contextmanager
def cpu_quota(pid: int, share: float, root: Path = ROOT) -> Iterator[Path]:
    """Hold process ``pid`` (all its threads) to ``share`` of one core for the block; yields the
    cgroup's directory. 0 < share; above 1 it allows that many cores."""
    if share <= 0:
        raise ValueError(f"share must be > 0, got {share}")
    version, mount = hierarchy(root)
    home = mount / _current(pid, version)
    group = mount / f"coded-bench-{pid}"
    group.mkdir()
    try:
        quota = max(1000, round(share * PERIOD_US))  # the kernel's smallest quota is 1 ms
        if version == "v1":
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            if "cpu" not in (mount / "cgroup.subtree_control").read_text().split():
                (mount / "cgroup.subtree_control").write_text("+cpu")
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        (group / "cgroup.procs").write_text(str(pid))
        try:
            yield group
        finally:
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # it may have ended meanwhile
                (home / "cgroup.procs").write_text(str(pid))
    finally:
        group.rmdir()
