"""Shared memory between a master and the workers on its host (docs/dataplane.md, "Shared
memory"), on real processes: the rounds' arrays go through the segments, the results are those of
the sockets bit for bit, and nothing is left behind, by a job's end or by SIGKILL."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from coded.client.reports import JobState
from coded.wire.shared import available

from .conftest import follow_until, make_spec, wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not available(), reason="shared memory needs Linux's sealed memfds")]

SPEC = {"workers": 3, "code": {"scheme": "cyclic", "stragglers": 1}, "iterations": 8, "verify": "off"}


def segments(pid: int) -> list[str]:
    """The shared segments (memfds named coded-...) a process holds open."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("/memfd:coded-"):
            found.append(target)
    return found


def holders() -> dict[int, list[str]]:
    """Every process that holds a segment, and which."""
    held = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found = segments(int(entry.name))
            except OSError:  # gone, or not ours to read
                continue
            if found:
                held[int(entry.name)] = found
    return held


@pytest.mark.parametrize("changes", [{"code": {"scheme": "uncoded"}}, {"stream": {"chunks": 2}}],
                         ids=["whole", "streamed"])
def test_rounds_through_shared_memory_give_the_sockets_results_bit_for_bit(cluster, changes):
    """Whole replies of uncoded (every worker's, each time) and streamed pieces (summed in piece
    order): the same numbers whichever replies came first."""
    shared = cluster(3)
    plain = cluster(3, worker_args=["--no-shared-memory"])
    params = {}
    for name, local in (("shared", shared), ("plain", plain)):
        with local.client() as client:
            job = client.submit(make_spec(**{**SPEC, **changes}))
            follow_until(client, job.id, lambda event: event.job.iteration >= 2)
            held = segments(local.master.pid)
            # the job's input segment and a reply segment per worker, only where offered and taken
            if name == "shared":
                assert f"/memfd:coded-input-{job.id} (deleted)" in held, held
                assert held.count(f"/memfd:coded-reply-{job.id} (deleted)") == 3, held
            else:
                assert held == []
            final = client.wait(job.id)
            assert final.state == JobState.SUCCEEDED, final.reason
            params[name] = client.result(job.id)
            # the job's end closes its connections, and their segments go with them
            assert wait_until(lambda local=local: segments(local.master.pid) == [])
    assert params["shared"].keys() == params["plain"].keys()
    for key, value in params["shared"].items():
        np.testing.assert_array_equal(value, params["plain"][key])


def test_processes_killed_mid_job_leave_no_segment_behind(cluster):
    before = set(os.listdir("/dev/shm"))
    local = cluster(3)
    with local.client() as client:
        job = client.submit(make_spec(**{**SPEC, "iterations": 100_000}))
        follow_until(client, job.id, lambda event: event.job.iteration >= 2)
    pids = [local.master.pid, *(process.pid for process in local.workers.values())]
    assert all(segments(pid) for pid in pids)  # every process maps what it shares
    local.kill_worker(0)  # SIGKILL, mid-job
    local.kill_master(signal.SIGKILL)
    for index in (1, 2):
        local.kill_worker(index)  # each waited for
    assert not any(pid in holders() for pid in pids)
    assert set(os.listdir("/dev/shm")) <= before  # memfds: never a file there
