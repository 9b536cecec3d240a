"""Commands about a cluster: ``coded workers`` (the registered workers), ``coded local`` (a master
and N workers on loopback, or on links of finite bandwidth), ``coded demo``; each with its arguments
(``add_<command>``) beside the function that runs it (``cmd_<command>``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from coded.base.words import plural
from coded.cli.arguments import DEFAULT_SLOW_FACTOR, Commands, add_master_address, slowed
from coded.cli.options import connect
from coded.cli.output import worker_json, worker_row
from coded.config import default_master, default_token
from coded.links import MASTER_LINK

if TYPE_CHECKING:  # the client and the cluster (gRPC, numpy) are imported by the commands that use them
    from coded.client import CodedClient
    from coded.client.reports import WorkerInfo
    from coded.cluster.local import ClusterLinks, StopSignals

__all__ = ["add_demo", "add_local", "add_workers", "cmd_demo", "cmd_local", "cmd_workers", "rate"]



def rate(text: str) -> str:
    """An argument that is a tc rate above 0 ("100mbit"), as given."""
    from coded.links.netns import parse_rate

    try:
        bits = parse_rate(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if bits <= 0:
        raise argparse.ArgumentTypeError(f"rate {text!r} must be above 0 bits per second")
    return text


def _await_workers(client: CodedClient, count: int, timeout: float) -> list[WorkerInfo]:
    """The registered workers once ``count`` of them are alive; waits for the master to start too."""
    import grpc

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


def add_workers(commands: Commands) -> None:
    p = commands.add_parser("workers", help="registered workers")
    p.add_argument("--json", action="store_true")
    p.add_argument("--wait", type=int, metavar="N", help="first wait until N workers are alive (and the master "
                   "is up): for scripts that start a cluster, e.g. after `coded local &`")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits (default %(default)s)")
    add_master_address(p)
    p.set_defaults(func=cmd_workers)


def cmd_workers(args: argparse.Namespace) -> int:
    with connect(args) as client:
        workers = _await_workers(client, args.wait, args.timeout) if args.wait else client.workers()
    if args.json:
        print(json.dumps([worker_json(w) for w in workers]))
    for w in [] if args.json else workers:
        print(worker_row(w))
    return 0


def _links(args: argparse.Namespace) -> ClusterLinks | None:
    """The cluster's links that the arguments ask for (None: loopback), checked."""
    from coded.cluster.local import ClusterLinks
    from coded.links.slow import SlowLinks

    if args.link is None:
        given = [name for name in ("master_link", "slow_link", "slow_every") if getattr(args, name) is not None]
        if given:
            raise ValueError(f"--{given[0].replace('_', '-')} needs --link")
        return None
    if args.metrics_port:
        raise ValueError("--metrics-port cannot go with --link: /metrics would be served inside the processes' "
                         "network namespaces, out of reach of this machine's Prometheus")
    if args.slow_every is not None and (args.slow_link is None or not args.slow_every > 0):
        raise ValueError(f"--slow-every needs --slow-link, and must be > 0 seconds (got {args.slow_every:g})")
    slow = None
    if args.slow_link is not None:
        count, factor = args.slow_link
        if count > args.workers:
            raise ValueError(f"--slow-link {count} is more than the {args.workers} workers")
        slow = SlowLinks([f"worker-{i}" for i in range(args.workers)], args.link, factor, count,
                         every_s=args.slow_every, seed=args.slow_seed)
    return ClusterLinks(args.link, args.master_link or MASTER_LINK, slow)


def _describe(links: ClusterLinks) -> str:
    """What the links are, in one line."""
    from coded.links.netns import format_rate

    line = f"links: each worker's {links.worker}, the master's {links.master}, in each direction"
    slow = links.slow
    if slow is not None:
        hosts = ", ".join(sorted(slow.slow_at(0)))
        when = (f"{hosts} all the time" if slow.every_s is None
                else f"{hosts} first, drawn again every {slow.every_s:g} s")
        line += (f"; {slow.count} of them at {format_rate(slow.slow_rate)} ({slow.factor:g} times slower): "
                 f"{when} (seed {slow.seed})")
    return line


def add_local(commands: Commands) -> None:
    p = commands.add_parser(
        "local", help="a master and N workers on loopback (foreground; Ctrl-C stops all)",
        description="Start a master and N workers as processes on 127.0.0.1 and keep them running until "
                    "this command is stopped (Ctrl-C, SIGTERM, SIGHUP; a killed launcher takes them with it). "
                    "A worker that dies is reported and stays gone, as a dead machine would: its jobs go on "
                    "without it, or pause until enough workers are back. A master that dies is reported and "
                    "restarted on its port with its state dir: it resumes its jobs and the workers rejoin. "
                    "Clients use the token in $CODED_TOKEN (or the random one printed). With --link, every "
                    "process runs on a host of its own: a network namespace behind a link shaped with tc tbf in "
                    "each direction (needs root and iproute2; the namespaces are created here and removed when "
                    "it stops, and the machine's own interfaces are never touched: docs/links.md); clients "
                    "reach the master through a Unix socket, whose address it prints (export it as "
                    "CODED_MASTER).")
    p.add_argument("--workers", type=int, default=8, help="workers to start, named worker-0 ... (default: %(default)s)")
    p.add_argument("--port", type=int, help="the master's gRPC port (default: the port of $CODED_MASTER, the "
                                            "address clients use, or 50051)")
    p.add_argument("--state-dir", help="the master's state dir and the logs (default: a temporary directory, "
                                       "deleted when this command stops)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="the master's /metrics port; worker i serves /metrics on this port + 1 + i "
                        "(default: no metrics; docs/architecture.md shows how to scrape them)")
    links = p.add_argument_group("links of finite bandwidth (root and iproute2)")
    links.add_argument("--link", type=rate, metavar="RATE",
                       help="each worker's link, in tc's units: 100mbit, 1gbit, 1.5mbit (bit, kbit, mbit, gbit: "
                            "bits per second; bps, kbps, mbps, gbps: BYTES per second)")
    links.add_argument("--master-link", type=rate, metavar="RATE", help=f"the master's link (default: {MASTER_LINK})")
    links.add_argument("--slow-link", type=slowed, metavar="N[:FACTOR]",
                       help=f"slow links as a fault: N workers' links run FACTOR times slower (default "
                            f"{DEFAULT_SLOW_FACTOR:g}), the same N all the time unless --slow-every")
    links.add_argument("--slow-every", type=float, metavar="SECONDS",
                       help="draw the slow workers again every SECONDS (default: never)")
    links.add_argument("--slow-seed", type=int, default=0, help="seed of the draws of slow workers (default: 0)")
    p.set_defaults(func=cmd_local)


def cmd_local(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1 (got {args.workers})")
    if args.metrics_port and not 0 < args.metrics_port <= 65535 - args.workers:
        raise ValueError(f"--metrics-port must leave room for {args.workers} worker ports after it "
                         f"(got {args.metrics_port})")
    import secrets

    from coded.cluster.local import Stopped, StopSignals

    links = _links(args)
    # a token by default: without one, anything that reaches the port could register as a worker
    token = default_token() or secrets.token_hex(16)
    with StopSignals() as stop:
        try:
            return _run_local(args, token, stop, links)
        except Stopped:  # SIGTERM, SIGINT or SIGHUP: a requested stop that completes is not a failure
            return 0


def _run_local(args: argparse.Namespace, token: str, stop: StopSignals, links: ClusterLinks | None) -> int:
    """Start the cluster, report it ready and supervise it until ``stop`` hears a signal; stop every
    process, remove the network and the temporary state however it ends."""
    import tempfile

    from coded.cluster.local import LocalCluster

    temporary = None if args.state_dir else tempfile.TemporaryDirectory(prefix="coded-local-")
    state = Path(temporary.name if temporary is not None else args.state_dir)
    port = args.port
    if port is None and links is not None:
        port = 50051  # in the master's own namespace: free, and clients come through the Unix socket
    elif port is None:
        port_text = default_master().rpartition(":")[2]
        if not port_text.isdigit():
            raise ValueError(f"$CODED_MASTER={default_master()!r} has no port: give --port")
        port = int(port_text)
    # its workers are all there is: a job that needs more than are alive fails at once
    cluster = LocalCluster(args.workers, state, master_port=port, token=token, metrics_port=args.metrics_port,
                           stop=stop, links=links, master_args=["--fixed-workers", str(args.workers)])
    try:
        cluster.start_master()
        print(f"master at {cluster.address} (state in {state}); starting {args.workers} workers", flush=True)
        if links is not None and cluster.network is not None:
            print(f"  {_describe(links)}; network namespaces {cluster.network.prefix}*", flush=True)
        cluster.start_workers(range(args.workers))
        cluster.wait_for_workers(args.workers, lambda alive: print(
            f"  {alive}/{args.workers} workers registered", flush=True))
        for key, process in [("master", cluster.master), *cluster.workers.items()]:
            name = "master" if key == "master" else f"worker-{key}"
            metrics = f", metrics on :{cluster.metrics_ports[key]}" if key in cluster.metrics_ports else ""
            print(f"  {name:10} pid {process.pid if process else '?'}{metrics}", flush=True)
        hint = "" if default_token() else f"; clients need the token: export CODED_TOKEN={token}"
        if links is not None:
            hint += f"; clients reach it through its Unix socket: export CODED_MASTER={cluster.address}"
        print(f"ready: {cluster.address} with {args.workers} workers{hint}; Ctrl-C stops all", flush=True)
        cluster.supervise(lambda line: print(line, flush=True))  # ends only with Stopped
    finally:
        cluster.stop()
        if temporary is not None:
            temporary.cleanup()


def add_demo(commands: Commands) -> None:
    p = commands.add_parser("demo", help="coded vs uncoded vs ignoring stragglers on a local cluster")
    p.add_argument("--out", default="out/demo", help="directory for the table and the plot")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--iterations", type=int, default=60)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from coded.cluster.demo import run_demo

    return run_demo(Path(args.out), workers=args.workers, iterations=args.iterations)
