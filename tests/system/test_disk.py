"""The master's state dir full or read-only: a clear error, and no job is lost or corrupted.

The state dir is a small tmpfs (or a read-only bind mount) that the test mounts and unmounts.
Needs root (`make test-system`).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.cluster.local import LocalCluster

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.system

SPEC = {
    "kind": "gradient_coding", "workers": 6, "code": {"scheme": "cyclic", "stragglers": 1},
    "model": {"type": "logistic", "l2": 0.001},
    "data": {"type": "gaussian_mixture", "samples": 3000, "features": 12, "classes": 2, "seed": 3},
    "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 600, "checkpoint_every": 20, "seed": 11,
    # One fixed slow worker and `stragglers: 1`: every iteration waits for the n - 1 = 5 others (the
    # code is built for s = 2, one reply for the check), so every iteration decodes from the same
    # responders and runs are bit-identical.
    "faults": {"stragglers": {"model": "fixed", "workers": [0], "delay": 30.0}},
}


def sh(*args: str) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"


@pytest.fixture
def mounted() -> Iterator[Path]:
    """A fresh mount point; whatever the test mounts there is unmounted at the end."""
    if os.geteuid() != 0:
        pytest.fail("this system test needs root to mount file systems (run it with `make test-system`)")
    point = Path(tempfile.mkdtemp(prefix="coded-disk-"))
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        shutil.rmtree(point, ignore_errors=True)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free the space)."""
    filler = directory / "filler"
    # unbuffered: a buffered file keeps what a partial write left over and fails again when it is
    # closed, as often as not (how much space was left decides)
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 16))
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    return filler


@pytest.mark.parametrize("killed", [False, True], ids=["disk-freed", "master-killed-then-disk-freed"])
def test_a_full_state_dir_pauses_the_job_refuses_new_ones_and_loses_nothing(mounted, tmp_path, killed):
    sh("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mounted))
    state = mounted / "state"
    with (
        LocalCluster(6, tmp_path / "cluster", master_args=["--state-dir", str(state)]) as local,
        local.client() as client,
    ):
        job = client.submit(yaml.safe_dump(SPEC))
        events = client.watch(job.id)
        next(e for e in events if e.job.iteration >= 50)
        filler = fill(mounted)
        paused = next(e for e in events if e.job.state == JobState.PAUSED)
        assert str(state) in paused.job.reason and "full" in paused.job.reason, paused.job.reason
        stuck_at = client.get(job.id).iteration
        assert stuck_at < 600

        with pytest.raises(grpc.RpcError) as refused:
            client.submit(yaml.safe_dump({**SPEC, "seed": 12}))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert str(state) in refused.value.details() and "full" in refused.value.details()
        assert [j.id for j in client.jobs()] == [job.id]  # the refused job left nothing
        assert client.get(job.id).state == JobState.PAUSED  # ... and the other job waits

        if killed:  # what is on the full disk must be enough to resume from
            local.kill_master()
            filler.unlink()
            local.start_master()
        else:
            filler.unlink()
        final = client.wait(job.id)
        assert final.state == JobState.SUCCEEDED, final.reason
        assert [r.iteration for r in final.history] == list(range(600))
        resumed = client.result(job.id)
        reference = client.result(client.wait(client.submit(yaml.safe_dump(SPEC)).id).id)
    for name in reference:
        assert np.array_equal(resumed[name], reference[name]), name


def test_a_read_only_state_dir_stops_the_master_with_a_clear_error(mounted, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    sh("mount", "--bind", str(source), str(mounted))
    sh("mount", "-o", "remount,bind,ro", str(mounted))
    started = subprocess.run(
        [sys.executable, "-m", "coded.cli", "master", "--port", "0", "--state-dir", str(mounted / "state")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert started.returncode == 2
    assert f"state dir {mounted / 'state'}" in started.stderr and "Read-only file system" in started.stderr
    assert "Traceback" not in started.stderr
