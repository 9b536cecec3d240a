"""PyTorch DDP against the cluster: bench.ddp --quick (needs the torch extra, ``make test-torch``).

What must hold is never a timing but what both systems compute: DDP's ranks and the cluster's
workers train the same model on the same mini-batches from the same initial parameters, so their
final parameters differ only by float32 against float64 arithmetic; a replay of DDP's step without
any fault gives the same gradient; an injected delay is inside every DDP step; and the check table
lists DDP's replay next to each of our checking levels, each saying what it catches.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from bench.ddp import DDP_OFF, OURS_OFF, QUICK_SCENARIOS, REPLAY, REPLAY_TOLERANCE, SAMPLED, STRICT

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]
SYSTEMS = ["DDP", "ours, uncoded", "ours, cyclic s=2"]


def test_ddp_and_the_cluster_train_the_same_model_under_the_same_stragglers(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.ddp", "--quick", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "ddp.csv").open()))
    assert [(r["scenario"], r["system"]) for r in rows] == [(s, system) for s in QUICK_SCENARIOS for system in SYSTEMS]
    systems = {r["system"]: r for r in rows}
    # the same training (the injected delays change when steps end, not what they compute):
    # parameters apart by float32 rounding (~1e-6 of how far training moved them); another batch,
    # scaling or initialisation would put them apart by order 1
    assert float(systems["ours, uncoded"]["params_apart"]) < 1e-3
    accuracies = [float(r["final_accuracy"]) for r in rows]
    assert max(accuracies) - min(accuracies) <= 0.02, accuracies  # a few of 360 test samples
    # workers 0 and 1 sleep in every step: a step that waits for them cannot be shorter
    (faults,) = QUICK_SCENARIOS.values()
    delay = faults["stragglers"]["delay"]
    assert float(systems["DDP"]["s_per_step"]) >= delay and float(systems["ours, uncoded"]["s_per_step"]) >= delay
    checks = {(r["system"], r["check"]): r for r in csv.DictReader((tmp_path / "ddp_check.csv").open())}
    assert list(checks) == [("DDP", REPLAY), ("DDP", DDP_OFF), (SYSTEMS[2], STRICT), (SYSTEMS[2], SAMPLED),
                            (SYSTEMS[2], OURS_OFF)]
    replay = checks[("DDP", REPLAY)]
    assert replay["replays_caught"] == "0" and float(replay["replay_diff_max"]) < REPLAY_TOLERANCE  # no false alarm
    # each system against itself unchecked: the like-for-like pair, DDP's replay and our strict, side by side
    strict = checks[(SYSTEMS[2], STRICT)]
    assert float(strict["run_ratio"]) > 0 and float(strict["vs_ddp_replay"]) == pytest.approx(
        float(strict["run_ratio"]) / float(replay["run_ratio"]), rel=1e-6)
    assert all(r["catches"] for r in checks.values())
    assert "probability 0.05" in checks[(SYSTEMS[2], SAMPLED)]["catches"]  # GradientVerifySpec's default share
    for baseline in (checks[("DDP", DDP_OFF)], checks[(SYSTEMS[2], OURS_OFF)]):  # the rows the ratios divide by
        assert float(baseline["run_ratio"]) == 1 and float(baseline["check_ms_per_step"]) == 0
    assert "DDP replay against our checking levels" in (tmp_path / "ddp_check.md").read_text()
    assert "NOT a measurement" in (tmp_path / "ddp.md").read_text()
    assert {r["load"] for r in rows} == {"quick"}  # the verdict travels with the numbers
    assert (tmp_path / "ddp_digits.png").stat().st_size > 0
