"""Commands about a cluster: ``coded workers`` (the registered workers), ``coded local`` (a master
and N workers on loopback), ``coded demo``."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path

import grpc

from coded.base.words import plural
from coded.cli.options import connect
from coded.cli.output import worker_json, worker_row
from coded.client import CodedClient
from coded.config import default_master, default_token
from coded.local import LocalCluster, Stopped, StopSignals
from coded.reports import WorkerInfo

__all__ = ["cmd_demo", "cmd_local", "cmd_workers"]


def _await_workers(client: CodedClient, count: int, timeout: float) -> list[WorkerInfo]:
    """The registered workers once ``count`` of them are alive; waits for the master to start too."""
    if count < 1 or timeout <= 0:
        raise ValueError(f"--wait and --timeout must be > 0 (got {count}, {timeout:g})")
    deadline, alive = time.monotonic() + timeout, -1
    while True:
        try:
            workers = client.workers()
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            workers = []  # the master is still starting
        now = sum(w.alive for w in workers)
        if now != alive:
            print(f"{now}/{count} workers alive", file=sys.stderr, flush=True)
            alive = now
        if now >= count:
            return workers
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {plural(now, 'worker')} of {count} alive at {client.address} after "
                               f"{timeout:g} s")
        time.sleep(0.2)


def cmd_workers(args: argparse.Namespace) -> int:
    with connect(args) as client:
        workers = _await_workers(client, args.wait, args.timeout) if args.wait else client.workers()
    if args.json:
        print(json.dumps([worker_json(w) for w in workers]))
    for w in [] if args.json else workers:
        print(worker_row(w))
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1 (got {args.workers})")
    if args.metrics_port and not 0 < args.metrics_port <= 65535 - args.workers:
        raise ValueError(f"--metrics-port must leave room for {args.workers} worker ports after it "
                         f"(got {args.metrics_port})")
    # a token by default: without one, anything that reaches the port could register as a worker
    token = default_token() or secrets.token_hex(16)
    with StopSignals() as stop:
        try:
            return _run_local(args, token, stop)
        except Stopped:  # SIGTERM, SIGINT or SIGHUP: a requested stop that completes is not a failure
            return 0


def _run_local(args: argparse.Namespace, token: str, stop: StopSignals) -> int:
    """Start the cluster, report it ready and supervise it until ``stop`` hears a signal; stop every
    process and remove the temporary state however it ends."""
    temporary = None if args.state_dir else tempfile.TemporaryDirectory(prefix="coded-local-")
    state = Path(temporary.name if temporary is not None else args.state_dir)
    port = args.port
    if port is None:
        port_text = default_master().rpartition(":")[2]
        if not port_text.isdigit():
            raise ValueError(f"$CODED_MASTER={default_master()!r} has no port: give --port")
        port = int(port_text)
    cluster = LocalCluster(args.workers, state, master_port=port, token=token, metrics_port=args.metrics_port,
                           stop=stop)
    try:
        cluster.start_master()
        print(f"master at {cluster.address} (state in {state}); starting {args.workers} workers", flush=True)
        cluster.start_workers(range(args.workers))
        cluster.wait_for_workers(args.workers, lambda alive: print(
            f"  {alive}/{args.workers} workers registered", flush=True))
        for key, process in [("master", cluster.master), *cluster.workers.items()]:
            name = "master" if key == "master" else f"worker-{key}"
            metrics = f", metrics on :{cluster.metrics_ports[key]}" if key in cluster.metrics_ports else ""
            print(f"  {name:10} pid {process.pid if process else '?'}{metrics}", flush=True)
        hint = "" if default_token() else f"; clients need the token: export CODED_TOKEN={token}"
        print(f"ready: {cluster.address} with {args.workers} workers{hint}; Ctrl-C stops all", flush=True)
        cluster.supervise(lambda line: print(line, flush=True))  # ends only with Stopped
    finally:
        cluster.stop()
        if temporary is not None:
            temporary.cleanup()


def cmd_demo(args: argparse.Namespace) -> int:
    from coded.demo import run_demo

    return run_demo(Path(args.out), workers=args.workers, iterations=args.iterations)
