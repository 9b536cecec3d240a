"""The MPI baseline (bench/mpi_loop.py under mpiexec) against the cluster: bench.mpi --quick.

Needs the mpi extra (``make test-mpi``). What must hold is the math, never a timing: the MPI loop
and the cluster train the same model, so every run of a case ends at the same training loss; and
the loop alone decodes what uncoded sums, with late workers, with codes that need particular
workers and with a model the workers do not compute in one product.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.cluster import base_spec
from bench.mpi import mpiexec
from coded.cluster.local import BLAS_SINGLE_THREAD

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


def run_loop(tmp_path: Path, name: str, spec: dict) -> dict:
    """bench/mpi_loop.py under mpiexec for ``spec``: its record."""
    job, out = tmp_path / f"{name}.yaml", tmp_path / f"{name}.npz"
    job.write_text(yaml.safe_dump(spec))
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    done = subprocess.run([mpiexec(), *root, "--oversubscribe", "-n", str(spec["workers"] + 1), sys.executable, "-m",
                           "bench.mpi_loop", str(job), str(out)], cwd=REPO, env={**os.environ, **BLAS_SINGLE_THREAD},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with np.load(out) as record:
        return {key: record[key] for key in record.files}


@pytest.mark.parametrize("model, codes", [
    # logistic regression: the workers' fused product (bench.mpi's model), late workers included
    ({"type": "logistic", "l2": 0.001}, [{"scheme": "cyclic", "stragglers": 2}, {"scheme": "frc", "stragglers": 2}]),
    # another model: each partition's gradient from the model, encoded by the code
    ({"type": "softmax", "l2": 0.001}, [{"scheme": "cyclic", "stragglers": 1}, {"scheme": "frc", "stragglers": 1}]),
])
def test_the_mpi_loop_decodes_what_uncoded_sums(tmp_path, model, codes):
    classes = 2 if model["type"] == "logistic" else 3
    data = {"type": "gaussian_mixture", "samples": 3000, "features": 20, "classes": classes, "seed": 1}
    late = {"stragglers": {"model": "fixed", "workers": [0, 1], "delay": 0.05}}
    iterations = 30
    uncoded = run_loop(tmp_path, "uncoded", base_spec(6, {"scheme": "uncoded"}, model, data, iterations))
    assert uncoded["ends"].shape == uncoded["loss"].shape == (iterations,)
    assert np.all(np.diff(uncoded["ends"]) > 0) and uncoded["loss"][-1] < uncoded["loss"][0]
    for index, code in enumerate(codes):
        extra = {"faults": late} if model["type"] == "logistic" else {}
        record = run_loop(tmp_path, f"coded{index}", base_spec(6, code, model, data, iterations, **extra))
        scale = np.abs(uncoded["params"]).max()
        assert np.abs(record["params"] - uncoded["params"]).max() <= 1e-12 * scale, code
        assert np.allclose(record["loss"], uncoded["loss"], rtol=1e-12, atol=0), code
