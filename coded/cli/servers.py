"""Commands that run a server: ``coded master``, ``coded worker``; and ``coded health`` (a server's
gRPC health), ``coded certs`` (the certificates servers and clients use)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coded.cli.options import security
from coded.config import default_master, default_torch_device

if TYPE_CHECKING:  # the servers' modules are imported by the command that runs one
    from coded.worker.server import WorkerConfig

__all__ = ["cmd_certs", "cmd_health", "cmd_master", "cmd_worker", "route_address", "worker_config"]


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
        asyncio.run(main)
    else:
        uvloop.run(main)


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


def cmd_health(args: argparse.Namespace) -> int:
    """Exit 0 when the server at --address reports SERVING (container health checks)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from coded.wire.rpc import sync_channel

    with sync_channel(args.address or default_master(), security(args)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=args.timeout)
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if serving else 1


def cmd_certs(args: argparse.Namespace) -> int:
    from coded.cluster.certs import make_certs

    out = Path(args.out)
    kept = args.existing == "keep" and (out / "ca.pem").exists()
    files = make_certs(out, hosts=args.host, days=args.days, existing=args.existing,
                       ca_key=Path(args.ca_key) if args.ca_key else None)
    written = ", ".join(str(path) for path in files.values())
    print(("kept " if kept else "wrote ") + f"{written}; keep {files['ca_key']} private")
    return 0
