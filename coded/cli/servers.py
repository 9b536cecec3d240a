"""Commands that run a server: ``coded master``, ``coded worker``; and ``coded health`` (a server's
gRPC health), ``coded certs`` (the certificates servers and clients use); each with its arguments
(``add_<command>``) beside the function that runs it (``cmd_<command>``)."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coded.cli.arguments import Commands, add_security
from coded.cli.options import security
from coded.config import default_master, default_torch_device

if TYPE_CHECKING:  # the servers' modules are imported by the command that runs one
    from coded.worker.server import WorkerConfig

__all__ = ["add_certs", "add_health", "add_master", "add_worker", "cmd_certs", "cmd_health", "cmd_master",
           "cmd_worker", "route_address", "worker_config"]


def route_address(master: str) -> str:
    """This machine's IP address on the route to ``master`` (host:port); no packet is sent.

    Raises
    ------
    ValueError
        The master's host name does not resolve (a wrong --master, or DNS not ready yet).
    """
    host = master.rsplit(":", 1)[0].strip("[]")
    try:
        address = socket.gethostbyname(host)
    except OSError as error:
        raise ValueError(f"--advertise auto: the master's host {host!r} does not resolve "
                         f"({error.strerror or error}); is --master {master} right?") from error
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 9))
        return probe.getsockname()[0]


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run a server's event loop: uvloop, which cuts the master's CPU per iteration by ~30%
    (measured, 8 workers), where it is installed; asyncio's own loop otherwise."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        asyncio.run(main)
    else:
        uvloop.run(main)


def add_master(commands: Commands) -> None:
    p = commands.add_parser("master", help="run a master")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50051)
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus /metrics on this port (0: any free port, printed at start)")
    p.add_argument("--state-dir", default="state", help="jobs, checkpoints and uploads (default %(default)s)")
    p.add_argument("--max-upload-mb", type=int, default=1024, help="largest total of files per job")
    p.add_argument("--heartbeat-interval", type=float, default=1.0, help="seconds between worker heartbeats")
    p.add_argument("--worker-timeout", type=float, default=3.0,
                   help="seconds without a heartbeat before a worker counts as gone")
    p.add_argument("--unix-socket", metavar="PATH", help="also listen on this filesystem Unix socket (clients: "
                   "--master unix:PATH): processes on this machine reach it by its path, also from another "
                   "network namespace")
    p.add_argument("--link", metavar="RATE",
                   help="bandwidth of the workers' links (tc's units: 100mbit, 1gbit): what the master predicts a "
                        "gradient job's iterations take, and how its workers reply, streamed or whole, is chosen "
                        "for it at submission (default: none for workers on this machine, 10gbit for others)")
    p.add_argument("--fixed-workers", type=int, metavar="N",
                   help="the cluster is N workers and no others will register (coded local sets it): once all N "
                        "have, a job that needs more workers than are alive is refused, or fails at once, instead "
                        "of waiting timeouts.pending_s for workers that will not come")
    add_security(p)
    p.set_defaults(func=cmd_master)


def cmd_master(args: argparse.Namespace) -> int:
    from coded.links.netns import parse_rate
    from coded.master.server import MasterConfig, run_master

    _run(run_master(MasterConfig(
        host=args.host, port=args.port, state_dir=Path(args.state_dir), metrics_port=args.metrics_port,
        security=security(args), max_message_mb=args.max_message_mb, max_upload_mb=args.max_upload_mb,
        heartbeat_interval=args.heartbeat_interval, worker_timeout=args.worker_timeout,
        unix_socket=Path(args.unix_socket).absolute() if args.unix_socket else None,
        link_bits_per_s=parse_rate(args.link) if args.link else None, fixed_workers=args.fixed_workers)))
    return 0


def add_worker(commands: Commands) -> None:
    p = commands.add_parser("worker", help="run a worker that registers with a master")
    p.add_argument("--master", default=None, help="master host:port (default: $CODED_MASTER or 127.0.0.1:50051)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--advertise", help="host:port the master should use (default host:port); 'auto': this "
                   "machine's address on the route to the master, with --port (containers, pods)")
    p.add_argument("--name", help="stable worker name (default: the advertised address)")
    p.add_argument("--data-port", type=int, default=0, help="port of the data plane, where the master sends "
                   "rounds (docs/dataplane.md), on the advertised host; 0 picks a free port")
    p.add_argument("--no-shared-memory", dest="shared_memory", action="store_false",
                   help="a master on this host sends the rounds' arrays through the local socket, not shared "
                        "memory (docs/dataplane.md, Shared memory)")
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus /metrics on this port (0: any free port, printed at start)")
    p.add_argument("--state-dir", help="CodeNet checkpoints of this worker (default: a new temporary directory)")
    p.add_argument("--blas-threads", type=int, help="threads of numpy's BLAS and of PyTorch (default: all "
                   "cores); use 1 when several workers share a machine")
    p.add_argument("--torch-device", help="where torch models compute: cpu (default), cuda, cuda:1, ... "
                   "($CODED_TORCH_DEVICE)")
    add_security(p)
    p.set_defaults(func=cmd_worker)


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    """The settings of the worker the arguments describe.

    Raises
    ------
    ValueError
        ``--advertise auto`` without a fixed ``--port``.
    """
    from coded.worker.server import WorkerConfig

    master = args.master or default_master()
    advertise = args.advertise or ""
    if advertise == "auto":
        if not args.port:
            raise ValueError("--advertise auto needs a fixed --port")
        advertise = f"{route_address(master)}:{args.port}"
    return WorkerConfig(
        master=master, host=args.host, port=args.port, advertise=advertise,
        name=args.name or "", metrics_port=args.metrics_port, data_port=args.data_port, security=security(args),
        max_message_mb=args.max_message_mb, state_dir=Path(args.state_dir) if args.state_dir else None,
        torch_device=args.torch_device or default_torch_device(), shared_memory=args.shared_memory)


def cmd_worker(args: argparse.Namespace) -> int:
    from coded.worker.server import run_worker

    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=args.blas_threads)
        os.environ["OMP_NUM_THREADS"] = str(args.blas_threads)  # PyTorch's threads, read when it is imported
    _run(run_worker(worker_config(args)))
    return 0


def add_health(commands: Commands) -> None:
    p = commands.add_parser("health", help="check a server's gRPC health (exit 0 when SERVING)")
    p.add_argument("--address", help="the server's host:port (default: $CODED_MASTER or 127.0.0.1:50051)")
    p.add_argument("--timeout", type=float, default=3.0)
    add_security(p)
    p.set_defaults(func=cmd_health)


def cmd_health(args: argparse.Namespace) -> int:
    """Exit 0 when the server at --address reports SERVING (container health checks)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from coded.wire.rpc import sync_channel

    with sync_channel(args.address or default_master(), security(args)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=args.timeout)
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if serving else 1


def add_certs(commands: Commands) -> None:
    p = commands.add_parser("certs", help="make a cluster CA and a certificate for mutual TLS")
    p.add_argument("--out", required=True)
    p.add_argument("--host", action="append", default=["localhost", "127.0.0.1"],
                   help="extra DNS name or IP the certificate is valid for (repeatable)")
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--ca-key", help="where the CA's private key goes (default OUT/ca-key.pem): keep it where the "
                                    "cluster's processes cannot read it")
    existing = p.add_mutually_exclusive_group()
    existing.add_argument("--keep", dest="existing", action="store_const", const="keep", default="refuse",
                          help="when --out already holds a complete set, use it and write nothing (a container "
                               "that runs this at every start); without --keep or --replace, existing files "
                               "are an error")
    existing.add_argument("--replace", dest="existing", action="store_const", const="replace",
                          help="make a new CA and certificate over existing ones (rotation: every process "
                               "needs the new files)")
    p.set_defaults(func=cmd_certs)


def cmd_certs(args: argparse.Namespace) -> int:
    from coded.cluster.certs import make_certs

    out = Path(args.out)
    kept = args.existing == "keep" and (out / "ca.pem").exists()
    files = make_certs(out, hosts=args.host, days=args.days, existing=args.existing,
                       ca_key=Path(args.ca_key) if args.ca_key else None)
    written = ", ".join(str(path) for path in files.values())
    print(("kept " if kept else "wrote ") + f"{written}; keep {files['ca_key']} private")
    return 0
