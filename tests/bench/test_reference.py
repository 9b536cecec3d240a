"""bench.reference's own parts that need no MPI: the port it applies to the reference (and its
refusal of another version), the copy it takes from a git checkout, how it reads the reference's
per-iteration times, and the processes whose CPU seconds it counts."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench.reference import (
    PORT,
    WARMUP,
    Workload,
    copy_reference,
    cpu_seconds,
    descendants,
    floor_seconds,
    per_iteration,
    port,
    timeset,
)


def tree_with_every_edit(root: Path) -> None:
    """Files holding each edit's text as often as the port expects, around other lines."""
    for edit in PORT:
        path = root / edit.path
        path.parent.mkdir(parents=True, exist_ok=True)
        before = path.read_text() if path.exists() else "import numpy as np\n"
        path.write_text(before + "".join(f"x = {edit.old}  # {i}\n" for i in range(edit.count)))


def test_the_port_makes_each_edit_as_often_as_it_says_and_nothing_else(tmp_path):
    tree_with_every_edit(tmp_path)
    port(tmp_path)
    for edit in PORT:
        text = (tmp_path / edit.path).read_text()
        assert edit.old not in text or edit.old in edit.new  # each occurrence replaced
        assert text.count(edit.new) >= edit.count
        assert text.startswith("import numpy as np\n")  # the rest is as it was


def test_the_port_refuses_another_version_of_the_reference(tmp_path):
    tree_with_every_edit(tmp_path)
    edit = next(e for e in PORT if e.count == 2)
    path = tmp_path / edit.path
    path.write_text(path.read_text().replace(edit.old, "changed", 1))  # found once where it expects twice
    with pytest.raises(ValueError, match=rf"expects .* 2 time\(s\) in {edit.path}, found 1"):
        port(tmp_path)


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(folder)}).stdout.strip()


def test_a_copy_is_the_checkout_s_committed_files_and_names_its_commit(tmp_path):
    source = tmp_path / "gradient_coding"
    (source / "src").mkdir(parents=True)
    (source / "main.py").write_text("print('main')\n")
    (source / "src" / "naive.py").write_text("print('naive')\n")
    git(source, "init", "-q")
    git(source, "add", ".")
    git(source, "commit", "-q", "-m", "reference")
    (source / "main.py").write_text("print('uncommitted')\n")  # the copy takes what was committed
    commit = copy_reference(source, tmp_path / "copy")
    assert commit == git(source, "rev-parse", "HEAD")
    assert (tmp_path / "copy" / "main.py").read_text() == "print('main')\n"
    assert copy_reference(source / ".git", tmp_path / "from-git-dir") == commit  # a git directory alone
    with pytest.raises(SystemExit, match="no checkout"):
        copy_reference(tmp_path / "copy", tmp_path / "again")


def test_the_reference_s_times_are_read_and_the_warm_up_left_out(tmp_path):
    seconds = [0.5, 0.4, 0.3, 0.2, 0.1, 0.011, 0.013, 0.012, 0.019, 0.010]
    path = tmp_path / "timeset.dat"
    path.write_text("".join(f"{s:.9f}\n" for s in seconds) + "\n")
    assert timeset(path) == seconds
    assert per_iteration(seconds) == statistics.median(seconds[WARMUP:]) == 0.012
    assert per_iteration(seconds[:3]) == 0.4  # too short to leave any out


def test_the_floor_copies_each_worker_s_parameters_and_message_once():
    workload = Workload("w", n=12, rows=100, columns=999, real=False, dataset="d", spec={})
    # 12 workers x (parameters + message) x 1000 float64s, at 1 GB/s
    assert floor_seconds(workload, 1e9) == pytest.approx(12 * 2 * 1000 * 8 / 1e9)


BURN = "import time\nwhile time.process_time() < 0.2: pass\nprint('burnt', flush=True)\ninput()\n"


def test_the_cpu_counted_is_that_of_the_launcher_s_descendants():
    """A launcher starts a rank that spends 0.2 s of CPU, then waits: found below the launcher,
    its CPU seconds counted."""
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}])"
    launcher = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert launcher.stdout is not None and launcher.stdout.readline() == b"burnt\n"
        (rank,) = descendants(launcher.pid)
        assert b"process_time" in Path(f"/proc/{rank}/cmdline").read_bytes()
        assert cpu_seconds([rank]) >= 0.19  # clock ticks: at most one short
        assert cpu_seconds([launcher.pid, rank]) >= cpu_seconds([rank])
        assert cpu_seconds([2 ** 22 + 1]) == 0.0  # no such process: nothing counted
    finally:
        launcher.communicate(b"\n", timeout=30)
