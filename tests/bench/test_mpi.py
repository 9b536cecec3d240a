"""The MPI baseline (bench/mpi_loop.py under mpiexec) against the cluster: bench.mpi --quick.

Needs the mpi extra (``make test-mpi``). What must hold is the math, never a timing: the MPI loop
and the cluster train the same model, so every run of a case ends at the same training loss.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

REPO = Path(__file__).resolve().parents[2]


def test_the_mpi_loop_and_the_cluster_train_the_same_model_side_by_side(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.mpi", "--quick", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "mpi.csv").open()))
    cases = {(r["workload"], r["scheme"], r["stragglers"]) for r in rows}
    assert {scheme for _, scheme, _ in cases} == {"uncoded", "cyclic s=2"}
    for case in cases:
        systems = {r["system"]: r for r in rows if (r["workload"], r["scheme"], r["stragglers"]) == case}
        assert "MPI" in systems and len(systems) >= 2, systems
        losses = [float(r["final_loss"]) for r in systems.values()]
        # uncoded and exact codes sum the same partial gradients: float64 rounding apart
        assert max(losses) - min(losses) <= 1e-9 * abs(losses[0]), systems
        assert float(systems["MPI"]["vs_mpi"]) == 1.0 and all(float(r["vs_mpi"]) > 0 for r in systems.values())
    assert "NOT a measurement" in (tmp_path / "mpi.md").read_text()  # a smoke run says so
