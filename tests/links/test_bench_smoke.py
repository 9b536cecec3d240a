"""The benchmarks on shaped links run in their --quick form and report what they must (never timings):
bench.yeabbe's verdict lines and tables, bench.tandon_links' series, bench.chaos's promises kept;
nothing of the network is left."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from coded.links.netns import namespaces

pytestmark = pytest.mark.links

REPO = Path(__file__).resolve().parents[2]


def run_quick(name: str, out: Path) -> str:
    done = subprocess.run([sys.executable, "-m", f"bench.{name}", "--quick", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_yeabbe_quick_measures_every_system_and_says_whether_the_targets_held(tmp_path):
    before = set(namespaces())
    output = run_quick("yeabbe", tmp_path)
    measured = rows(tmp_path / "yeabbe.csv")
    assert {row["system"] for row in measured} == {"naive", "best m=1", "best m>1", "second m>1", "planned"}
    assert all(float(row["s_per_iteration"]) > 0 for row in measured)
    naive = next(row for row in measured if row["system"] == "naive")
    assert float(naive["faster_than_naive"]) == 0  # a ratio taken within the round, against itself
    assert len(rows(tmp_path / "yeabbe_sweep.csv")) == 4 + 3  # the finalists run once more
    for phrase in ("faster than the best m = 1 (target >= 23%", "faster than naive (target >= 32%",
                   "slower than the best measured (target <= 10%", "test AUC 0.8 first reached"):
        assert phrase in output
    page = (tmp_path / "yeabbe.md").read_text()
    assert "a --quick smoke run: NOT a measurement" in page and (tmp_path / "yeabbe_auc.png").exists()
    assert set(namespaces()) == before


def test_tandon_links_quick_runs_both_series(tmp_path):
    run_quick("tandon_links", tmp_path)
    found = rows(tmp_path / "tandon_links.csv")
    assert {(row["series"], row["system"]) for row in found} == {
        (series, system) for series in ("delayed", "slow link") for system in ("naive", "cyclic", "frc")}
    assert all(float(row["s_per_iteration"]) > 0 for row in found)
    base = [row for row in found if row["slowdown"] in ("0.0", "1")]
    assert all(float(row["vs_no_slowdown"]) == 1 for row in base)


def test_chaos_quick_keeps_every_promise_under_every_kind_of_fault_and_leaves_nothing(tmp_path):
    before = set(namespaces())
    output = run_quick("chaos", tmp_path)  # exits 1 on a job not as promised, a hung one, or a leftover
    jobs = rows(tmp_path / "chaos.csv")
    assert len(jobs) == 10 and all(job["as_promised"] == "True" for job in jobs), [
        job for job in jobs if job["as_promised"] != "True"]
    assert not any(job["state"] == "HUNG" for job in jobs)
    within = [job for job in jobs if job["tolerated"] == "True"]
    assert within and all(job["state"] == "SUCCEEDED" and float(job["difference"]) <= 1e-8 for job in within)
    kinds = {part.split(" ", 1)[0] for job in jobs for part in job["faults"].split("; ") if part}
    assert kinds == {"kill", "stop", "slow", "cut", "wrong", "master"}, kinds
    assert "Left behind: nothing. Faults that could not be applied: none." in output
    assert set(namespaces()) == before
