"""Processes as an operator meets them: one server per port, `coded local` that stops all of its
children however it is stopped, and worker names that cannot be taken over without the token."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from coded.client import CodedClient
from coded.client.reports import JobState
from coded.cluster.local import Stopped, StopSignals, free_port
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import Security

from .conftest import follow_until, make_spec, scrape, wait_until

pytestmark = pytest.mark.integration


def coded(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "coded", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kwargs)


def processes_mentioning(marker: str) -> list[int]:
    """PIDs of live processes whose command line contains ``marker`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes().decode(errors="replace") and \
                    (entry / "stat").read_text().split(") ")[1][0] != "Z":
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_a_second_server_on_a_taken_port_fails_with_a_clear_message(cluster, tmp_path):
    local = cluster(1, metrics=True)
    for args in (["master", "--port", str(local.master_port), "--state-dir", str(tmp_path / "m")],
                 ["worker", "--master", local.address, "--port", str(local.worker_ports[0])],
                 ["master", "--port", "0", "--metrics-port", str(local.metrics_ports["master"]),
                  "--state-dir", str(tmp_path / "m2")]):
        process = coded(*args)
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 2, (args, output)
        assert "address already in use" in output and "cannot listen on" in output, output
    with local.client() as client:  # the first master still has its one worker
        assert [w.name for w in client.workers()] == ["worker-0"]


@pytest.mark.parametrize(("command", "option", "what"), [
    (["local", "--workers", "1"], "--port", ""), (["master"], "--port", ""),
    (["worker", "--master", "127.0.0.1:1"], "--port", ""), (["master", "--port", "0"], "--metrics-port", " (metrics)"),
    (["worker", "--master", "127.0.0.1:1", "--port", "0"], "--metrics-port", " (metrics)"),
    (["worker", "--master", "127.0.0.1:1", "--port", "0"], "--data-port", " (data plane)")])
def test_a_taken_port_is_one_line_of_error_and_no_traceback(tmp_path, command, option, what):
    """Issue 40: `coded local --port P` on a taken port printed 15 lines of traceback (and gRPC's own
    log line) before the error; each server command says it in one line and exits non-zero (issue
    52: also for the metrics port, after which a traceback followed, and the data port: [Errno 98])."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        state = [] if command[0] == "worker" else ["--state-dir", str(tmp_path / "state")]
        process = subprocess.run([sys.executable, "-m", "coded", *command, option, str(port), *state],
                                 capture_output=True, text=True, timeout=60)
    assert process.returncode != 0, process
    assert process.stderr.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}{what}: address already in use"], \
        process.stderr


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL])
def test_coded_local_leaves_no_process_and_no_directory_behind(tmp_path, how):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    port = free_port()
    launcher = coded("local", "--workers", "2", "--port", str(port), env={**os.environ, "TMPDIR": str(tmp)})
    try:
        assert launcher.stdout is not None
        first = launcher.stdout.readline()
        assert f"127.0.0.1:{port}" in first, first  # the address at once, before the workers are up
        lines = [first]
        while "ready" not in lines[-1]:
            lines.append(launcher.stdout.readline())
            assert lines[-1], "".join(lines)
        counts = [int(line.split("/")[0]) for line in lines if "workers registered" in line]
        assert counts[-1] == 2 and counts == sorted(counts), lines  # progress, then ready
        marker = str(tmp)
        children = processes_mentioning(marker)
        assert len(children) == 3, children  # a master and two workers, all run in the temporary dir
        launcher.send_signal(how)
        launcher.wait(timeout=30)
        assert wait_until(lambda: not processes_mentioning(marker)), processes_mentioning(marker)
    finally:
        if launcher.poll() is None:  # a failed assertion above: stop the cluster anyway
            launcher.terminate()
            launcher.wait(timeout=30)
    if how != signal.SIGKILL:  # a killed launcher cannot clean up; its children still exit
        assert launcher.returncode == 0 and not list(tmp.iterdir()), list(tmp.iterdir())


def test_a_stop_signal_delivered_to_another_thread_ends_the_main_threads_wait():
    # The kernel hands a process's signal to any thread that does not block it (gRPC's threads, in
    # the launcher); the main thread, blocked in its wait, must still wake up and stop.
    with StopSignals() as stop:
        sender = threading.Thread(target=lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT))
        sender.start()
        sender.join()
        with pytest.raises(Stopped, match="SIGINT"):
            stop.wait(30.0)  # returns [] after 30 s if the signal was lost


def test_other_signals_do_not_stop_and_the_previous_handlers_come_back():
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    terminate = signal.getsignal(signal.SIGTERM)
    user = signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # its number reaches the pipe too
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGUSR1)
            read, write = os.pipe()
            os.write(write, b"x")
            assert stop.wait(30.0, [read]) == [read]  # the descriptor, and no stop
            assert stop.wait(0.0) == [] and not stop.received
            os.close(read)
            os.close(write)
    finally:
        signal.signal(signal.SIGUSR1, user)
    assert signal.getsignal(signal.SIGTERM) is terminate and signal.set_wakeup_fd(wakeup) == wakeup


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling policies")
def test_a_local_clusters_processes_run_as_batch_processes_and_its_workers_below_the_master(cluster):
    """Woken processes wait for their turn instead of preempting the one running (SCHED_BATCH),
    and workers yield to the master (niceness)."""
    local = cluster(2)
    processes = [local.master, *local.workers.values()]
    assert all(os.sched_getscheduler(p.pid) == os.SCHED_BATCH for p in processes)
    master, *workers = (os.getpriority(os.PRIO_PROCESS, p.pid) for p in processes)
    assert all(worker > master for worker in workers)


def test_coded_local_refuses_a_negative_count():
    process = coded("local", "--workers", "-1")
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 2 and "--workers must be >= 1 (got -1)" in output, output


def test_without_a_token_a_live_workers_name_cannot_be_taken(cluster):
    local = cluster(1)
    with grpc.insecure_channel(local.address) as channel:
        stub = master_pb2_grpc.MasterStub(channel)
        with pytest.raises(grpc.RpcError) as error:
            stub.RegisterWorker(master_pb2.RegisterWorkerRequest(name="worker-0", address="127.0.0.1:1"), timeout=10)
        assert error.value.code() == grpc.StatusCode.ALREADY_EXISTS and "worker-0" in error.value.details()
        workers = stub.ListWorkers(master_pb2.ListWorkersRequest(), timeout=10).workers
        assert [(w.name, w.address) for w in workers] == [("worker-0", f"127.0.0.1:{local.worker_ports[0]}")]
        local.kill_worker(0)  # once it is gone (no heartbeat), a restarted worker may take its name anywhere
        assert wait_until(lambda: not stub.ListWorkers(master_pb2.ListWorkersRequest(), timeout=10).workers[0].alive)
        stub.RegisterWorker(master_pb2.RegisterWorkerRequest(name="worker-0", address="127.0.0.1:1"), timeout=10)


def test_with_the_token_a_worker_may_take_over_its_name(cluster):
    local = cluster(1, token="secret")
    with grpc.insecure_channel(local.address) as channel:
        stub = master_pb2_grpc.MasterStub(channel)
        metadata = (("authorization", "Bearer secret"),)
        stub.RegisterWorker(master_pb2.RegisterWorkerRequest(name="worker-0", address="127.0.0.1:1"), timeout=10,
                            metadata=metadata)
        workers = stub.ListWorkers(master_pb2.ListWorkersRequest(), timeout=10, metadata=metadata).workers
        assert [w.address for w in workers] == ["127.0.0.1:1"]


class Lines:
    """A process's output, line by line, read by a thread: ``until`` waits for a line to come."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._queue.put(line) for line in process.stdout], daemon=True).start()

    def until(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout:g} s: {self.seen}") from None
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match


def free_ports_in_a_row(count: int) -> int:
    """The first of ``count`` consecutive TCP ports on 127.0.0.1 that are free right now."""
    while True:
        first = free_port()
        with contextlib.ExitStack() as held:
            try:
                for offset in range(count):
                    held.enter_context(socket.create_server(("127.0.0.1", first + offset)))
            except OSError:
                continue
        return first


def test_coded_local_goes_on_without_a_killed_worker_and_restarts_a_killed_master(tmp_path):
    port, metrics = free_port(), free_ports_in_a_row(5)
    env = {**os.environ, "CODED_TOKEN": "local-secret"}
    launcher = coded("local", "--workers", "4", "--port", str(port), "--state-dir", str(tmp_path / "state"),
                     "--metrics-port", str(metrics), env=env)
    try:
        lines = Lines(launcher)
        pids = {}
        for offset, role in enumerate(("master", "worker-0", "worker-1", "worker-2", "worker-3")):
            match = lines.until(rf"^  {role} +pid (\d+), metrics on :(\d+)")
            pids[role] = int(match.group(1))
            assert int(match.group(2)) == metrics + offset  # the master on M, worker i on M + 1 + i
        lines.until("^ready")
        assert any(name == "coded_worker_running_calls" for name, _ in scrape(metrics + 3))  # worker-2's
        with CodedClient(f"127.0.0.1:{port}", Security(token="local-secret")) as client:
            slow = {"stragglers": {"model": "shifted_exponential", "shift": 0.05, "mean": 0.001}}  # >= 3 s in all
            job = client.submit(make_spec(workers=4, code={"scheme": "cyclic", "stragglers": 2}, iterations=60,
                                          faults=slow))
            follow_until(client, job.id, lambda event: event.job.iteration >= 3)
            os.kill(pids["worker-1"], signal.SIGKILL)
            lines.until(rf"^worker-1 \(pid {pids['worker-1']}\) was killed by SIGKILL; log: ")
            lines.until("it stays gone")
            # the job goes on without the dead worker, exactly as on a cluster started by hand
            finished = client.wait(job.id)
            assert finished.state == JobState.SUCCEEDED, finished.reason
            assert 1 not in finished.history[-1].responders
            assert launcher.poll() is None  # the launcher and the rest of the cluster still run
            os.kill(pids["master"], signal.SIGKILL)
            lines.until(rf"^master \(pid {pids['master']}\) was killed by SIGKILL")
            lines.until(rf"^master restarted at 127.0.0.1:{port}")
            # the restarted master kept its state, and the three live workers rejoined it
            assert client.get(job.id).state == JobState.SUCCEEDED
            assert wait_until(lambda: sorted(w.name for w in client.workers() if w.alive)
                              == ["worker-0", "worker-2", "worker-3"], timeout=60)
        launcher.send_signal(signal.SIGTERM)  # only the launcher's own end stops everything
        launcher.wait(timeout=30)
        assert launcher.returncode == 0
        assert wait_until(lambda: not processes_mentioning(str(tmp_path / "state"))), "processes left behind"
    finally:
        if launcher.poll() is None:
            launcher.terminate()
            launcher.wait(timeout=30)


def test_coded_workers_wait_returns_once_enough_are_alive_and_says_when_too_few_came(cluster):
    local = cluster(2)
    env = {**os.environ, "CODED_MASTER": local.address}
    enough = subprocess.run([sys.executable, "-m", "coded", "workers", "--wait", "2"], capture_output=True,
                            text=True, timeout=60, env=env)
    assert enough.returncode == 0, enough.stderr
    assert "2/2 workers alive" in enough.stderr and "worker-0" in enough.stdout and "worker-1" in enough.stdout
    too_few = subprocess.run([sys.executable, "-m", "coded", "workers", "--wait", "3", "--timeout", "1"],
                             capture_output=True, text=True, timeout=60, env=env)
    assert too_few.returncode == 2
    assert f"only 2 workers of 3 alive at {local.address} after 1 s" in too_few.stderr, too_few.stderr


def test_coded_local_help_says_what_each_option_does_and_its_default():
    process = coded("local", "--help")
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    text = " ".join(output.split())
    for expected in ("a worker that dies is reported and stays gone", "a master that dies is reported and restarted",
                     "--workers WORKERS workers to start, named worker-0 ... (default: 8)",
                     "--metrics-port METRICS_PORT the master's /metrics port; worker i serves /metrics on this port "
                     "+ 1 + i", "$CODED_MASTER"):
        assert expected.lower() in text.lower(), (expected, text)
