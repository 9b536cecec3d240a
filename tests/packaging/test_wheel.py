"""The distribution as a user installs it: one top-level import package, nothing else."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import coded

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the repository's files alone, as in a fresh clone (no generated stubs)."""
    source = tmp_path_factory.mktemp("clone")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    assert not list(source.glob("coded/v1/*_pb2.py"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(source)], check=True, capture_output=True)
    (built,) = out.glob("coded_computing-*.whl")
    return built


def test_the_wheel_holds_one_top_level_package_with_its_stubs_and_types(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"coded", f"coded_computing-{coded.__version__}.dist-info"}
    for member in ("coded/py.typed", "coded/v1/master_pb2.py", "coded/v1/worker_pb2_grpc.py",
                   "coded/master/runner.py", "coded/worker/peer/training.py", "coded/codes/gradient.py",
                   "coded/jobs/spec/parse.py", "coded/wire/tensor.py", "coded/ml/models/base.py",
                   "coded/cli/__init__.py", "coded/client/client.py", "coded/cluster/local.py", "coded/links/netns.py"):
        assert member in names, member
    entry_points = zipfile.ZipFile(wheel).read(f"coded_computing-{coded.__version__}.dist-info/entry_points.txt")
    assert b"coded = coded.cli:main" in entry_points


def test_the_base_install_reads_the_safetensors_results_it_writes(wheel: Path):
    """Issue 40, item 12: `coded result --out W.safetensors` is what the docs offer without torch,
    so the package that reads it (safetensors.numpy) comes with the base install, not the extra."""
    metadata = zipfile.ZipFile(wheel).read(f"coded_computing-{coded.__version__}.dist-info/METADATA").decode()
    base = [line.removeprefix("Requires-Dist: ") for line in metadata.splitlines()
            if line.startswith("Requires-Dist: ") and "extra ==" not in line]
    assert any(re.match(r"safetensors\b", requirement) for requirement in base), base


def test_a_venv_with_only_the_project_has_no_common_master_or_worker(wheel: Path, tmp_path: Path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True,
                   capture_output=True)
    for name in ("common", "master", "worker", "bench"):
        done = subprocess.run([python, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, name
    done = subprocess.run([python, "-c", "import coded; print(coded.__version__)"], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == coded.__version__


def test_the_command_reports_its_version():
    done = subprocess.run([sys.executable, "-m", "coded", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"coded {coded.__version__}"
