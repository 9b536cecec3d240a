"""The benchmarks' load guard: a run on a machine whose host steals its CPU time is not valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import common
from bench.common import MAX_STEAL, LoadGuard, cpu_times


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
    guard = LoadGuard()
    guard.finish()
    assert guard.steal == pytest.approx(stolen / 1000)
    assert (guard.steal <= MAX_STEAL) is valid
    assert guard.valid is valid and guard.verdict == ("valid" if valid else "INVALID")
    assert f"{stolen / 10:.1f}% of the CPU time stolen" in guard.line()
