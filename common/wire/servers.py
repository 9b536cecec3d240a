"""gRPC servers of this project: :func:`build_server` installs the error and token interceptor
(:class:`coded.wire.rpc.ErrorInterceptor`) and the standard health and reflection services, and
says in one line why it cannot listen; :func:`wait_for_termination` waits for SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from prometheus_client import CollectorRegistry

from coded.base.errors import NotFound
from coded.base.metrics import serve_metrics
from coded.wire.limits import DEFAULT_MAX_MESSAGE_MB
from coded.wire.rpc import ErrorInterceptor, Security, message_options

__all__ = ["BuiltServer", "build_server", "wait_for_termination"]

V1_REFLECTION = "grpc.reflection.v1.ServerReflection"


class HealthServicer(health.aio.HealthServicer):
    """The standard health service, whose NOT_FOUND for a service it does not know says so (the
    stock one answers without a message)."""

    def __init__(self, services: Iterable[str]) -> None:
        super().__init__()
        self._known = frozenset(services)

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext) -> health_pb2.HealthCheckResponse:
        if request.service not in self._known:
            raise NotFound(f"unknown service {request.service!r}")
        return await super().Check(request, context)


@dataclass
class BuiltServer:
    """A grpc.aio server with its health servicer and bound port."""

    server: grpc.aio.Server
    port: int
    health: HealthServicer
    services: list[str] = field(default_factory=list)

    async def start(self) -> None:
        await self.server.start()
        for name in ["", *self.services]:
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def start_with_metrics(self, registry: CollectorRegistry, host: str, port: int | None
                                 ) -> WSGIServer | None:
        """Serve ``/metrics`` on ``port`` (None: none), then start: a port that is taken fails
        before the gRPC server starts, since a started server that the error leaves behind is torn
        down after the event loop closed and prints a traceback after the error's one line."""
        metrics = None if port is None else serve_metrics(registry, host, port)
        try:
            await self.start()
        except BaseException:
            if metrics is not None:
                metrics.shutdown()
            raise
        return metrics

    async def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING, then let running calls finish for ``grace`` seconds."""
        for name in ["", *self.services]:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace)


def build_server(
    address: str,
    register: Iterable[Callable[[grpc.aio.Server], str]],
    security: Security = Security(),
    max_message_mb: int = DEFAULT_MAX_MESSAGE_MB,
    unix_socket: Path | None = None,
) -> BuiltServer:
    """A grpc.aio server on ``address`` ("host:port", port 0 picks a free one).

    Parameters
    ----------
    register : iterable of callables
        Each adds one servicer to the server and returns its full service name.
    unix_socket : Path, optional
        Listen on this filesystem Unix socket too (same services and security): a process in
        another network namespace reaches it by its path.
    """
    taken = _listener_on(address)
    if taken:  # said before gRPC tries: its C core would log the failed bind on stderr, beside our error
        raise OSError(f"cannot listen on {address}: {taken}")
    server = grpc.aio.server(
        interceptors=[ErrorInterceptor(security.token, ("/grpc.health.v1.", "/grpc.reflection."))],
        # no SO_REUSEPORT: a second server on a taken port must fail, not share the port with it
        options=[*message_options(max_message_mb), ("grpc.so_reuseport", 0)])
    services = [add(server) for add in register]
    health_servicer = HealthServicer(["", *services])
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _add_reflection([*services, health.SERVICE_NAME], server)
    port = _listen(server, address, security)
    if port == 0:
        raise OSError(f"cannot listen on {address}: {_bind_problem(address)}")
    if unix_socket is not None:
        # grpcio would replace a socket file at the path, also one a live server listens on
        problem = _unix_problem(unix_socket)
        if problem or not _listen(server, f"unix:{unix_socket}", security):
            raise OSError(f"cannot listen on unix:{unix_socket}: {problem or 'the system refused the path'}")
    return BuiltServer(server, port, health_servicer, services)


def _listen(server: grpc.aio.Server, address: str, security: Security) -> int:
    """Bind ``address``: its port (1 for a Unix socket), 0 when it cannot be bound."""
    try:
        if security.tls:
            return server.add_secure_port(address, security.server_credentials())
        return server.add_insecure_port(address)
    except RuntimeError:  # grpcio raises this when it cannot bind
        return 0


def _unix_problem(path: Path) -> str:
    """What keeps a Unix socket from listening at ``path``; "" when nothing seen before binding."""
    if len(str(path).encode()) > 107:
        return "the path is longer than a Unix socket's 107 bytes"
    if not path.parent.is_dir():
        return f"no directory {path.parent}"
    with socket.socket(socket.AF_UNIX) as probe:
        if probe.connect_ex(str(path)) == 0:
            return "another server listens there"
    return "a file that is no socket is in the way" if path.exists() and not path.is_socket() else ""


def _add_reflection(services: list[str], server: grpc.aio.Server) -> None:
    """Server reflection under both names clients use: grpc.reflection.v1 and v1alpha.

    grpcio-reflection implements v1alpha only; v1's messages are the same on the wire (same
    fields, same numbers), so one servicer answers both.
    """
    names = [*services, V1_REFLECTION, reflection.SERVICE_NAME]
    servicer = reflection.aio.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo, request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V1_REFLECTION, {
        "ServerReflectionInfo": handler}),))


def _bind_error(address: str, reuse: bool) -> OSError | ValueError | None:
    """What binding ``host:port`` raises now (``reuse``: with SO_REUSEADDR, as gRPC binds), or None."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            if reuse:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host or "0.0.0.0", int(port)))
    except (OSError, ValueError) as error:
        return error
    return None


def _listener_on(address: str) -> str:
    """"address already in use" when a socket already holds ``host:port`` (not port 0) the way a
    listening one does: bound as gRPC binds (SO_REUSEADDR, no SO_REUSEPORT); "" otherwise, also
    when the probe cannot tell (gRPC's own bind then decides)."""
    port = address.rpartition(":")[2]
    if not port.isdigit() or int(port) == 0:
        return ""
    error = _bind_error(address, reuse=True)
    if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
        return (error.strerror or "address already in use").lower()
    return ""


def _bind_problem(address: str) -> str:
    """Why ``host:port`` cannot be bound, in the system's words (grpcio does not say)."""
    error = _bind_error(address, reuse=False)
    if error is None:
        return "the address is not available"
    return (getattr(error, "strerror", None) or str(error)).lower()


async def wait_for_termination() -> None:
    """Return on SIGTERM or SIGINT (the caller then shuts down gracefully)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
