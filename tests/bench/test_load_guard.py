"""The benchmarks' load guard: a run on a machine whose host steals its CPU time, or whose other
processes compute, is not valid; a load average the previous benchmark left is not busy."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import common
from bench.common import MAX_STEAL, LoadGuard, cpu_times, runnable_others, settle


def test_cpu_times_reads_the_stolen_and_the_total_ticks_of_all_cpus(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 10 0 5 30 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert cpu_times(stat) == (30, 1000)
    assert cpu_times(tmp_path / "missing") == (0, 0)


@pytest.mark.parametrize(("stolen", "valid"), [(10, True), (100, False)])
def test_a_run_that_lost_more_than_max_steal_of_its_cpu_time_is_invalid(monkeypatch: pytest.MonkeyPatch,
                                                                         stolen: int, valid: bool):
    times = iter([(50, 10_000), (50 + stolen, 11_000)])  # `stolen` of the run's 1000 ticks
    monkeypatch.setattr(common, "cpu_times", lambda: next(times))
    monkeypatch.setattr(common.os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # a quiet guest
    monkeypatch.setattr(common, "runnable_others", lambda: 0.0)
    monkeypatch.setattr(common, "_foreign_runnable", lambda root: 0)
    guard = LoadGuard()
    guard.finish()
    assert guard.steal == pytest.approx(stolen / 1000)
    assert (guard.steal <= MAX_STEAL) is valid
    assert guard.valid is valid and guard.verdict == ("valid" if valid else "INVALID")
    assert f"{stolen / 10:.1f}% of the CPU time stolen" in guard.line()


def test_the_runnable_processes_are_averaged_over_the_window(monkeypatch: pytest.MonkeyPatch):
    looks = iter([0, 3, 0, 1] * 100)
    monkeypatch.setattr(common, "_foreign_runnable", lambda root: next(looks))
    seen = runnable_others(window_s=0.3, interval=0.1)  # 4 looks or so: the first, then one per 0.1 s
    assert 0 < seen < 3  # neither the first look nor the busiest alone


def test_settle_waits_until_the_other_processes_stop_computing(monkeypatch: pytest.MonkeyPatch):
    looks = iter([2.5, 1.5, 0.4, 0.0])
    monkeypatch.setattr(common, "runnable_others", lambda: next(looks))
    monkeypatch.setattr(common, "_cores", lambda: 2)
    assert settle() == 0.4  # the first look at most half of the 2 cores
    assert next(looks) == 0.0  # and no look after it


@pytest.mark.parametrize(("others", "allow_busy", "outcome"),
                         [(0.2, False, "valid"), (1.5, False, "refused"), (1.5, True, "INVALID")])
def test_the_guard_judges_the_processes_that_compute_not_the_load_average(
        monkeypatch: pytest.MonkeyPatch, others: float, allow_busy: bool, outcome: str):
    monkeypatch.setattr(common, "_cores", lambda: 2)
    # the previous benchmark's 12 workers exited a moment ago: the 1-minute average has not caught up
    monkeypatch.setattr(common.os, "getloadavg", lambda: (9.0, 4.0, 1.0))
    monkeypatch.setattr(common, "runnable_others", lambda: others)
    monkeypatch.setattr(common, "_foreign_runnable", lambda root: 0)
    monkeypatch.setattr(common, "cpu_times", lambda: (0, 0))
    if outcome == "refused":
        with pytest.raises(SystemExit, match=r"1\.50 other runnable processes"):
            LoadGuard(allow_busy)
        return
    guard = LoadGuard(allow_busy)
    guard.finish()
    assert guard.verdict == outcome
    assert guard.line().startswith("load average 9.00 before") and f"{others:.2f} other runnable" in guard.line()
