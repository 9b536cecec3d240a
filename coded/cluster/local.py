"""A master and workers as real processes on 127.0.0.1, or each on a host of its own behind a link
of finite bandwidth (network namespaces: ``ClusterLinks``): for ``coded local``, the demo and tests."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from coded.client import CodedClient
from coded.links import MASTER_LINK
from coded.links.netns import Network
from coded.links.slow import SlowLinkDriver, SlowLinks
from coded.wire.rpc import Security

__all__ = ["MASTER_LINK", "ClusterError", "ClusterLinks", "LocalCluster", "StopSignals", "Stopped", "free_port"]

WORKER_NICENESS = 5
#: the signals that stop ``coded local`` (each ends it like an exit: its cluster is stopped)
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
BLAS_SINGLE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
LISTENING = re.compile(r"listening on (?:\S+:)?(\d+)(?: \(data plane on port (\d+)\))?(?: \(metrics on port (\d+)\))?")


#: what each process runs first: it sets itself up and execs ``coded`` (see its docstring)
CHILD = Path(__file__).with_name("child.py")


def exit_status(returncode: int) -> str:
    """A process's end in words: "was killed by SIGKILL", "exited with status 1"."""
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ClusterError(RuntimeError):
    """A process of the local cluster did not start."""


class Stopped(Exception):
    """A stop signal arrived: raised only where waiting is safe to end (see ``StopSignals``)."""


class StopSignals:
    """Stop signals (``STOP_SIGNALS``) noted, not raised: a handler that raised would raise at
    whatever line the main thread was running, also inside ``Popen.poll`` holding its wait lock, and
    stopping the cluster would then hang on that lock. The interpreter writes each signal's number
    to a wake-up pipe, from whichever thread the signal was delivered to; ``wait`` selects on it.

    A context manager: installs the handlers and the pipe, and puts back the previous ones.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        self._previous: dict[int, object] = {}
        self._previous_fd = -1

    def __enter__(self) -> StopSignals:
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, lambda signum, frame: None)  # the pipe has it
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)

    def wait(self, timeout: float | None, fds: Sequence[int] = ()) -> list[int]:
        """Block until one of ``fds`` is readable or ``timeout`` (s) has passed; return the readable
        ones. Raises ``Stopped`` as soon as a stop signal has arrived (also one before the call)."""
        readable: list[int] = []
        if not self.received:
            readable, _, _ = select.select([self._read, *fds], [], [], timeout)
        if self._read in readable:
            readable.remove(self._read)
            with contextlib.suppress(BlockingIOError):
                self.received += [sig for sig in os.read(self._read, 512) if sig in STOP_SIGNALS]
        if self.received:
            raise Stopped(signal.Signals(self.received[0]).name)
        return readable


@dataclasses.dataclass(frozen=True)
class ClusterLinks:
    """A local cluster's links (``coded.links.netns``): the master and every worker run in a network
    namespace of their own (hosts "master", "worker-0", ...), each behind a link shaped to its
    rate in both directions. Needs root and iproute2.

    Rates are tc-style text ("100mbit", "12500kbps": bytes) or bits per second. ``slow``: slow
    links among the workers' hosts, applied from the start for as long as the cluster runs.
    """

    worker: str | int
    master: str | int = MASTER_LINK
    slow: SlowLinks | None = None


class LocalCluster:
    """Starts ``coded master`` and ``coded worker`` processes and stops every one of them.

    Parameters
    ----------
    workers : int
        Workers to start (named worker-0 .. worker-{N-1}).
    state_dir : Path
        Master state and the processes' log files.
    master_args, worker_args : sequence of str
        Extra command-line options.
    env : dict, optional
        Extra environment variables of every process.
    metrics : bool
        Give every process a free /metrics port (``metrics_ports``: "master", 0, 1, ...).
    master_port : int
        The master's gRPC port (0: a free one); a restarted master keeps the port it had.
    metrics_port : int
        Instead of free ports: the master's /metrics port; worker i's is ``metrics_port + 1 + i``.
    security : Security
        Credentials of the cluster's own client (pass the matching options in the args).
    token : str, optional
        A token for the whole cluster: the master and the workers get it in their environment
        ($CODED_TOKEN, never on a command line), the cluster's client sends it.
    stop : StopSignals, optional
        Stop signals that end every wait of the cluster (start, supervision) with ``Stopped``.
    links : ClusterLinks, optional
        Run every process on a host of its own behind a shaped link (``network``). The master
        also listens on the Unix socket ``STATE_DIR/master.sock``, which this process reaches
        across namespaces: ``address`` is ``unix:`` that path.
    """

    def __init__(self, workers: int, state_dir: Path, master_args: Sequence[str] = (),
                 worker_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 startup_timeout: float = 60.0, metrics: bool = False, security: Security = Security(),
                 token: str | None = None, metrics_port: int = 0, master_port: int = 0,
                 stop: StopSignals | None = None, links: ClusterLinks | None = None) -> None:
        self.count = workers
        self.state_dir = Path(state_dir)
        self.logs = self.state_dir / "logs"
        self.master_args = list(master_args)
        self.worker_args = list(worker_args)
        # Several processes share the machine's cores: one BLAS thread each avoids the threads of
        # every process spinning against each other (measured: 300x slower gradients at 8 workers).
        self.env = {**os.environ, **BLAS_SINGLE_THREAD, **(env or {})}
        self.env["PYTHONUNBUFFERED"] = "1"
        if token is not None:
            self.env["CODED_TOKEN"] = token
            security = dataclasses.replace(security, token=token)
        self.timeout = startup_timeout
        self.master: subprocess.Popen | None = None
        self.master_port = master_port
        self.workers: dict[int, subprocess.Popen] = {}
        self.worker_ports: dict[int, int] = {}
        self._restarts = 0
        self.security = security  # of the cluster's own client (waiting for workers, client())
        self.metrics_ports: dict[str | int, int] = {}
        if metrics_port:
            metrics = True
            self.metrics_ports = {"master": metrics_port, **{i: metrics_port + 1 + i for i in range(workers)}}
        self.data_ports: dict[str | int, int] = {}  # each worker's data plane (docs/dataplane.md)
        self.log_files: dict[str | int, Path] = {}  # each process's current log
        self._metrics = metrics
        self._stop = stop
        if links is not None and links.slow is not None:
            strangers = sorted(set(links.slow.hosts) - {f"worker-{i}" for i in range(workers)})
            if strangers:
                raise ValueError(f"slow links on hosts that are no worker of the cluster: {', '.join(strangers)} "
                                 f"(workers are worker-0 ... worker-{workers - 1})")
        self.links = links
        self.network: Network | None = None  # made when the master first starts
        self.slow_links: SlowLinkDriver | None = None
        self.unix_socket = self.state_dir.absolute() / "master.sock"

    @property
    def address(self) -> str:
        """Where this machine's clients reach the master."""
        return f"unix:{self.unix_socket}" if self.links is not None else f"127.0.0.1:{self.master_port}"

    @property
    def _master_for_workers(self) -> str:
        """Where the workers reach the master: in their namespaces, at the master's address."""
        return f"{self.network.address('master')}:{self.master_port}" if self.network else self.address

    def client(self, **kwargs: object) -> CodedClient:
        return CodedClient(self.address, **{"security": self.security, **kwargs})  # type: ignore[arg-type]

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pause(self, timeout: float | None, fds: Sequence[int] = ()) -> list[int]:
        """Wait until one of ``fds`` is readable or ``timeout`` (s) has passed (``Stopped`` by a
        stop signal); return the readable ones."""
        if self._stop is not None:
            return self._stop.wait(timeout, fds)
        return select.select(list(fds), [], [], timeout)[0]

    # --- processes -----------------------------------------------------------------------------------

    def _launch(self, role: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        """Start ``coded`` with ``args`` as ``role`` ("master", "worker-3": also its host)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self._restarts += 1
        log = self.logs / f"{role}.{self._restarts}.log"
        # Workers run at a lower CPU priority: on a real cluster the master has its own machine, and
        # here it must not wait for a core while cancelled workers finish their current piece.
        niceness = WORKER_NICENESS if role.startswith("worker") else 0
        with open(log, "wb") as handle:
            # own sessions: a Ctrl-C in the launcher's terminal reaches the launcher, which stops them
            argv = [sys.executable, "-I", "-S", str(CHILD), str(os.getpid()), str(niceness),
                    sys.executable, "-m", "coded.cli", *args]
            process = subprocess.Popen(self.network.command(role, argv) if self.network else argv, stdout=handle,
                                       stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        return process, log

    def _port(self, role: str, key: str | int, process: subprocess.Popen, log: Path) -> int:
        """Wait for a launched process to print the port it listens on (and its data-plane and
        metrics ports)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            match = LISTENING.search(log.read_text(errors="replace"))
            if match:
                if match.group(2):
                    self.data_ports[key] = int(match.group(2))
                if match.group(3):
                    self.metrics_ports[key] = int(match.group(3))
                return int(match.group(1))
            if process.poll() is not None:
                text = log.read_text(errors="replace")
                # a failure the command explained in one line ("error: cannot listen on ...") is that line
                explained = [line.removeprefix("error: ") for line in text.splitlines() if line.startswith("error: ")]
                raise ClusterError(explained[-1] if explained and process.returncode == 2 else
                                   f"{role} exited with {process.returncode}: {text[-2000:]}")
            self._pause(0.05)
        process.kill()
        raise ClusterError(f"{role} did not start within {self.timeout:g} s (log: {log})")

    def _metrics_args(self, key: str | int) -> list[str]:
        if not self._metrics:
            return []
        # port 0: the process picks a free port and prints it; a restart keeps the port it had
        return ["--metrics-port", str(self.metrics_ports.get(key, 0))]

    def _open_network(self, links: ClusterLinks) -> Network:
        """The hosts, their shaped links and the slow links' driver; removed by ``stop``."""
        self.network = Network(["master", *[f"worker-{i}" for i in range(self.count)]])
        self.network.shape("master", links.master)
        for index in range(self.count):
            self.network.shape(f"worker-{index}", links.worker)
        if links.slow is not None:
            self.slow_links = SlowLinkDriver(links.slow, self.network.change)
            self.slow_links.start()
        return self.network

    def start_master(self) -> None:
        args = ["master", "--port", str(self.master_port), "--state-dir", str(self.state_dir),
                *self._metrics_args("master"), *self.master_args]
        if self.links is not None:
            network = self.network or self._open_network(self.links)
            args += ["--host", network.address("master"), "--unix-socket", str(self.unix_socket),
                     "--link", str(self.links.worker)]
        self.master, log = self._launch("master", args)
        self.log_files["master"] = log
        self.master_port = self._port("master", "master", self.master, log)

    def start_workers(self, indices: Sequence[int]) -> None:
        """Start workers in parallel and wait until each listens."""
        launched = {}
        for index in indices:
            host = ["--host", self.network.address(f"worker-{index}")] if self.network else []
            args = ["worker", "--master", self._master_for_workers, *host, "--port", "0", "--name", f"worker-{index}",
                    "--state-dir", str(self.state_dir / f"worker-{index}"), *self._metrics_args(index),
                    *self.worker_args]
            launched[index] = self._launch(f"worker-{index}", args)
            self.workers[index], self.log_files[index] = launched[index]
        for index, (process, log) in launched.items():
            self.worker_ports[index] = self._port(f"worker-{index}", index, process, log)

    def start(self) -> LocalCluster:
        try:
            self.start_master()
            self.start_workers(range(self.count))
            self.wait_for_workers(self.count)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_workers(self, count: int, progress: Callable[[int], None] | None = None) -> None:
        """Block until ``count`` workers are registered and alive; ``progress`` hears every new count."""
        deadline = time.monotonic() + self.timeout
        seen = -1
        with self.client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                try:
                    alive = sum(w.alive for w in client.workers())
                except Exception:  # the master may still be starting
                    alive = 0
                if progress is not None and alive > seen:
                    progress(alive)
                seen = max(seen, alive)
                if alive >= count:
                    return
                self._pause(0.1)
        raise ClusterError(f"{count} workers did not register within {self.timeout:g} s")

    def wait_for_exit(self) -> tuple[str | int, subprocess.Popen]:
        """Block until a process of the cluster exits; reap it and return ("master" or the worker's
        index, its process). The worker leaves ``workers``; a dead master leaves ``master`` None."""
        while True:
            everyone: list[tuple[str | int, subprocess.Popen | None]] = [("master", self.master),
                                                                          *self.workers.items()]
            running = [(key, process) for key, process in everyone if process is not None]
            if not running:
                raise ClusterError("no process of the cluster is running")
            for key, process in running:
                if process.poll() is not None:
                    if isinstance(key, int):
                        self.workers.pop(key)
                    else:
                        self.master = None
                    return key, process
            # a pidfd is readable once its process has exited, also one that exited after the poll
            # above (only poll() reaps, so the pid cannot have been reused)
            pidfds = [os.pidfd_open(process.pid) for _, process in running]
            try:
                self._pause(None, pidfds)
            finally:
                for fd in pidfds:
                    os.close(fd)

    def supervise(self, report: Callable[[str], None]) -> NoReturn:
        """Keep the cluster going until a stop signal ends it (``Stopped``, from ``stop``): a worker that exits is
        reported and stays gone, as a dead machine would (its jobs go on without it, or pause);
        a master that exits is reported and started again on its port with its state dir, so it
        resumes its jobs and the workers rejoin it by themselves."""
        while True:
            key, process = self.wait_for_exit()
            name = "master" if key == "master" else f"worker-{key}"
            report(f"{name} (pid {process.pid}) {exit_status(process.returncode)}; log: {self.log_files[key]}")
            if key == "master":
                self.start_master()
                report(f"master restarted at {self.address} (pid {self.master.pid if self.master else '?'}); "
                       "it resumes its jobs and the workers rejoin it")
            else:
                report(f"  it stays gone: its jobs go on without it, or pause if too few workers are left; "
                       f"{len(self.workers)} of {self.count} workers still run")

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        process = self.workers.pop(index)
        process.send_signal(sig)
        process.wait(timeout=30)

    def kill_master(self, sig: int = signal.SIGKILL) -> None:
        assert self.master is not None
        self.master.send_signal(sig)
        self.master.wait(timeout=30)
        self.master = None

    def stop(self) -> None:
        """SIGTERM to every process, SIGKILL to those still alive after a grace period; then the
        network goes, with everything it made."""
        processes = [p for p in [*self.workers.values(), self.master] if p is not None and p.poll() is None]
        for process in processes:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.workers.clear()
        self.master = None
        slow, network, self.slow_links, self.network = self.slow_links, self.network, None, None
        try:
            if slow is not None:
                slow.stop()  # raises what it could not apply
        finally:
            if network is not None:
                network.close()
