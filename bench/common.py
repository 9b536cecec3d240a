"""Helpers shared by the benchmarks: where results go, CSV and markdown tables, the machine line."""

from __future__ import annotations

import contextlib
import csv
import datetime
import functools
import os
import platform
import re
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "REPO_ROOT",
    "RESULTS_DIR",
    "LoadGuard",
    "code_line",
    "command_line",
    "fmt",
    "machine_line",
    "markdown_table",
    "plot_panels",
    "process_memory",
    "relative_to",
    "release",
    "spread",
    "summarise_repeats",
    "write_csv",
    "write_markdown",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"


#: the share of the CPU time a valid run may have lost to the hypervisor's other guests (steal)
MAX_STEAL = 0.05


def process_memory(pid: int) -> tuple[float, float]:
    """(peak, current) resident memory of a process in MB of 10^6 bytes (VmHWM, VmRSS, which
    /proc gives in KiB), from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmHWM"].split()[0]) * 1024 / 1e6, int(fields["VmRSS"].split()[0]) * 1024 / 1e6


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_times(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """The time all CPUs spent stolen by the hypervisor, and in total, since boot, in ticks
    (/proc/stat's first line: user nice system idle iowait irq softirq steal ...); (0, 0) without it."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return 0, 0
    ticks = [int(field) for field in fields]
    return (ticks[7] if len(ticks) == 8 else 0), sum(ticks)


#: How long the machine is watched before a benchmark (s): runnable processes come and go within
#: milliseconds, so one look says little; a few seconds of looks say whether something computes.
QUIET_WINDOW_S = 2.0


def runnable_others(window_s: float = QUIET_WINDOW_S, interval: float = 0.2) -> float:
    """Mean processes in state R outside this process and its descendants, looked at every
    ``interval`` seconds for ``window_s``: what the machine is busy with right now."""
    samples = [_foreign_runnable(os.getpid())]
    deadline = time.monotonic() + window_s
    while time.monotonic() < deadline:
        time.sleep(interval)
        samples.append(_foreign_runnable(os.getpid()))
    return float(np.mean(samples))


def settle(timeout_s: float = 600.0) -> float:
    """Wait until the machine is quiet as :class:`LoadGuard` wants it (``runnable_others`` at most
    half the cores), or ``timeout_s`` has passed; returns the last look. A run of benchmarks back to
    back needs it: the processes of the previous one may take a moment to exit. Not the load
    average: it stays above the cores for a minute or two after a benchmark's processes have
    exited (a wait of ~19 min in a full `make bench`), while the machine is already quiet."""
    deadline = time.monotonic() + timeout_s
    while (busy := runnable_others()) > _cores() / 2 and time.monotonic() < deadline:
        print(f"waiting for the machine to go quiet: {busy:.2f} other runnable processes on average, "
              f"at most {_cores() / 2:g}", flush=True)
    return busy


class LoadGuard:
    """Whether the machine was quiet while a benchmark ran: a busy machine's run is refused or, with
    ``allow_busy``, marked invalid.

    Busy means: more than half a core's worth of runnable processes that are not this benchmark's,
    watched for QUIET_WINDOW_S before the run (``runnable_others``) and every second during it
    (from /proc; the benchmark's own master and workers are its descendants and do not count), or
    more than MAX_STEAL of the CPU time stolen: on a virtual machine whose host is busy, the
    guest's own processes look quiet while its vCPUs wait (the same 300 iterations of a local
    cluster took 13-16 ms each with 34-44% of the time stolen, and 4.4 ms with 3%, within one half
    hour here). The 1-minute load average is recorded, not judged: the previous benchmark's
    processes keep it above the cores for a minute or two after they have exited.
    """

    def __init__(self, allow_busy: bool = False, quick: bool = False, interval: float = 1.0) -> None:
        self.cores = _cores()
        code_line()  # the code as the run starts (what its page says it measured)
        self.load_before = os.getloadavg()[0]
        self.after: float | None = None
        self.quick = quick
        # a smoke run is no measurement: it does not watch the machine first
        self.before = 0.0 if quick else runnable_others()
        if self.before > self.cores / 2 and not allow_busy:
            raise SystemExit(f"refusing to measure: {self.before:.2f} other runnable processes on average over "
                             f"{QUIET_WINDOW_S:g} s on {self.cores} cores (at most {self.cores / 2:g}); run on a "
                             "quiet machine, or pass --allow-busy to mark the results invalid")
        self._samples: list[int] = []
        self._cpu = cpu_times()
        self.steal = 0.0  # the share of the CPU time stolen during the run (set by finish)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._samples.append(_foreign_runnable(os.getpid()))

    def finish(self) -> None:
        self._stop.set()
        self._thread.join()
        self.after = os.getloadavg()[0]
        (stolen, total), (stolen0, total0) = cpu_times(), self._cpu
        self.steal = (stolen - stolen0) / (total - total0) if total > total0 else 0.0

    @property
    def others(self) -> float:
        """Mean runnable processes outside this benchmark during the run."""
        return float(np.mean(self._samples)) if self._samples else 0.0

    @property
    def valid(self) -> bool:
        return (self.before <= self.cores / 2 and self.others <= self.cores / 2 and self.steal <= MAX_STEAL
                and not self.quick)

    @property
    def verdict(self) -> str:
        """One word for a results file's rows: valid, quick (a smoke run) or INVALID (busy)."""
        return "valid" if self.valid else ("quick" if self.quick else "INVALID")

    def line(self) -> str:
        after = "?" if self.after is None else f"{self.after:.2f}"
        verdict = "valid" if self.valid else ("a --quick smoke run: NOT a measurement" if self.quick else
                                              "INVALID: the machine, or its host, was busy")
        return (f"load average {self.load_before:.2f} before, {after} after (this benchmark's processes included), "
                f"{self.before:.2f} other runnable processes on average before the run and {self.others:.2f} "
                f"during it (at most {self.cores / 2:g}), {self.steal:.1%} of the "
                f"CPU time stolen by the hypervisor (at most {MAX_STEAL:.0%}), on {self.cores} cores: {verdict}")


def _foreign_runnable(root: int) -> int:
    """Processes in state R that are neither ``root`` nor its descendants."""
    parents, running = {}, []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        if fields[0] == "R":
            running.append(pid)

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(not ours(pid) for pid in running)


def relative_to(rows: Sequence[dict[str, Any]], value: str, name: str, group: str,
                is_base: Callable[[Mapping[str, Any]], bool]) -> None:
    """Add ``row[name] = row[value] / base[value]`` to every row of one run, ``base`` the row of
    the same ``group`` (e.g. the workload) that ``is_base`` picks: a ratio within the run, as the
    headline of docs/results.md compares (each system against uncoded on a healthy cluster).

    Raises
    ------
    ValueError
        When a group has no base row, or more than one.
    """
    bases: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        if is_base(row):
            bases.setdefault(row[group], []).append(row)
    for row in rows:
        found = bases.get(row[group], [])
        if len(found) != 1:
            raise ValueError(f"{group} {row[group]!r} has {len(found)} base rows, not 1")
        row[name] = row[value] / found[0][value]


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements (``median``, ``low``, ``high``)."""
    ordered = sorted(values)
    return {"median": float(np.median(ordered)), "low": ordered[0], "high": ordered[-1]}


def _blas() -> str:
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # show_config's layout differs between numpy versions
        return "unknown"


def _cpu() -> str:
    """The processor's model name (Linux), else the architecture."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.machine()


#: when this benchmark started and the load then (bench.common is imported before anything runs):
#: what a results page says, though most write their header once the run is over
_START = (datetime.datetime.now(datetime.timezone.utc),
          os.getloadavg() if hasattr(os, "getloadavg") else None)


def machine_line() -> str:
    """One line saying where and when a benchmark ran: the day and time (UTC) it started, the host,
    the processor and cores, the load then, python, numpy, BLAS. Absolute times from two such lines
    that differ are not comparable; only ratios measured in one run are."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    started, load = _START
    loads = ", ".join(f"{x:.2f}" for x in load) if load is not None else "?"
    return (
        f"machine: measured {started:%Y-%m-%d %H:%M} UTC on {platform.node()}, {cores} cores of {_cpu()} "
        f"({platform.machine()}), load average {loads} at start, python {platform.python_version()}, "
        f"numpy {np.__version__}, BLAS {_blas()}; other processes may share the machine"
    )


@functools.cache
def code_line() -> str:
    """Which code ran: the git commit and any uncommitted change under common/codes, as at the
    first call: LoadGuard makes it when the benchmark starts, so that a commit made while it runs
    is not taken for the code it measured."""
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    changed = [line[3:] for line in git("status", "--porcelain", "--", "common/codes").splitlines()]
    suffix = f" with uncommitted changes to {', '.join(changed)}" if changed else ""
    return f"code: commit {commit}{suffix}, release {release()}"


def release() -> str:
    """The version the source tree is (pyproject.toml's, which an editable install's metadata may lag)."""
    found = re.search(r'^version = "([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    return found.group(1) if found else "unknown"


def command_line() -> str:
    """The command that ran this benchmark (``python -m bench.NAME ...`` from the repository root)."""
    module = Path(sys.argv[0]).resolve()
    name = f"bench.{module.stem}" if module.parent == REPO_ROOT / "bench" else str(module)
    return "python -m " + " ".join(shlex.quote(a) for a in [name, *sys.argv[1:]])


def fmt(value: Any, digits: int = 2) -> str:
    """Floats in compact scientific notation, everything else as str; None as empty."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            return str(float(value))
        if value == 0:
            return "0"
        if 1e-2 <= abs(value) < 1e4:
            return f"{value:.{digits + 1}g}"
        return f"{value:.{digits - 1}e}"
    return str(value)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Rows as CSV, floats with full precision (repr), None as empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in columns})


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], digits: int = 2) -> str:
    """A GitHub markdown table of ``rows`` restricted to ``columns``."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c), digits).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines)


def write_markdown(path: Path, title: str, header: Sequence[str], sections: Sequence[str]) -> None:
    """A results page: title, the header lines (what ran, where), then the sections."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = [f"# {title}", "", *[f"- {line}" for line in header], ""]
    for section in sections:
        text += [section.rstrip(), ""]
    path.write_text("\n".join(text))


def plot_panels(panels: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]], path: Path,
                xlabel: str, ylabel: str, title: str) -> None:
    """One panel per key of ``panels``, one line per curve (label -> [(x, y), ...]), saved as PNG.

    ``title`` says what ran (n, s, straggler model, seed, machine cores); it is printed small.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (name, curves) in zip(axes[0], panels.items(), strict=True):
        for label, points in curves.items():
            ax.plot([x for x, _ in points], [y for _, y in points], marker=".", label=label)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.suptitle("\n".join(textwrap.wrap(title, 90 * len(panels))), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise_repeats(runs: Sequence[Sequence[Mapping[str, Any]]], spread_keys: Sequence[str]) -> list[dict[str, Any]]:
    """One row per measured point from the rows of repeated runs, each run listing the same points
    in the same order (a ratio already computed within its run, side by side).

    Each row: ``repeats`` (how many runs); for every key in ``spread_keys`` its median over the
    runs and ``KEY_low``, ``KEY_high``; any other value that differs between runs, its median;
    the rest as the runs agree on it. A NaN (undefined) sorts above every number.

    Raises
    ------
    ValueError
        When there are no runs, the runs list different numbers of points, or a value that is not
        a number (a point's name) differs between runs: the rows would not be the same point.
    """
    if not runs or len({len(rows) for rows in runs}) != 1:
        raise ValueError(f"repeated runs must list the same points: {[len(rows) for rows in runs]} rows")

    def number(value: Any) -> bool:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))

    def ordered(values: list[Any]) -> list[float]:
        return sorted((float(v) for v in values), key=lambda v: (np.isnan(v), v))

    def median(values: list[float]) -> float:
        middle = len(values) // 2
        return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2

    out = []
    for points in zip(*runs, strict=True):
        row: dict[str, Any] = {"repeats": len(points)}
        for key, first in points[0].items():
            values = [point[key] for point in points]
            if key in spread_keys:
                low_to_high = ordered(values)
                row[key], row[f"{key}_low"], row[f"{key}_high"] = median(low_to_high), low_to_high[0], low_to_high[-1]
            elif all(v == first for v in values):
                row[key] = first
            elif all(number(v) for v in values):
                row[key] = median(ordered(values))
            else:
                raise ValueError(f"repeated runs disagree on {key!r}: {values}")
        out.append(row)
    return out
