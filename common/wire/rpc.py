"""gRPC plumbing shared by every server and client: options, TLS, token, errors, health.

A server is built with :func:`build_server`, which installs the error and token interceptors and
the standard health and reflection services. Clients get channels from :func:`aio_channel` /
:func:`sync_channel` and send :func:`call_metadata` with every call.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import inspect
import logging
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from coded.base.errors import NotFound, Unauthenticated
from coded.wire.status import Status, status_of
from coded.wire.tensor import TensorError

__all__ = [
    "DEFAULT_MAX_MESSAGE_MB",
    "GRPC_CODES",
    "STATUS_KEY",
    "Security",
    "aio_channel",
    "build_server",
    "call_metadata",
    "raised_status",
    "sync_channel",
    "wait_for_termination",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_MB = 64
V1_REFLECTION = "grpc.reflection.v1.ServerReflection"
TOKEN_HEADER = "authorization"


@dataclass(frozen=True)
class Security:
    """TLS files and the bearer token of one process (all optional).

    ``tls_ca`` on a server requires clients to present a certificate signed by that CA (mutual
    TLS); on a client it is the CA that signed the server's certificate.
    """

    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    token: str | None = None
    server_name: str = "coded"  # the name clients expect in a server's certificate (see common/certs.py)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None or self.tls_ca is not None

    def server_credentials(self) -> grpc.ServerCredentials:
        if self.tls_cert is None or self.tls_key is None:
            raise ValueError("a TLS server needs both --tls-cert and --tls-key")
        ca = self.tls_ca.read_bytes() if self.tls_ca else None
        return grpc.ssl_server_credentials(
            [(self.tls_key.read_bytes(), self.tls_cert.read_bytes())],
            root_certificates=ca, require_client_auth=ca is not None)

    def server_context(self) -> ssl.SSLContext | None:
        """The same TLS for a plain socket server (the data plane); None without TLS."""
        if not self.tls:
            return None
        if self.tls_cert is None or self.tls_key is None:
            raise ValueError("a TLS server needs both --tls-cert and --tls-key")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.tls_cert, self.tls_key)
        if self.tls_ca is not None:
            context.load_verify_locations(self.tls_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext | None:
        """The same TLS for a plain socket client: the server's certificate must name
        ``server_name`` and chain to ``tls_ca``; None without TLS."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cafile=str(self.tls_ca) if self.tls_ca else None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.tls_cert is not None and self.tls_key is not None:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.tls_ca.read_bytes() if self.tls_ca else None,
            private_key=self.tls_key.read_bytes() if self.tls_key else None,
            certificate_chain=self.tls_cert.read_bytes() if self.tls_cert else None)


def message_options(max_message_mb: int) -> list[tuple[str, Any]]:
    size = max_message_mb * 1024 * 1024
    return [
        ("grpc.max_send_message_length", size),
        ("grpc.max_receive_message_length", size),
        # clients ping idle connections every 20 s (a dead peer is noticed); servers accept that
        # (their default rejects pings more often than every 5 min with GOAWAY "too_many_pings")
        ("grpc.keepalive_time_ms", 20000),
        ("grpc.keepalive_timeout_ms", 10000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10000),
        ("grpc.http2.max_ping_strikes", 0),
    ]


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return ((TOKEN_HEADER, f"Bearer {token}"),) if token else ()


# --- statuses ------------------------------------------------------------------------------------

#: gRPC's code for each status (coded.wire.status): what gRPC clients (the CLI, other languages) see
GRPC_CODES: dict[Status, grpc.StatusCode] = {
    Status.OK: grpc.StatusCode.OK,
    Status.INTERNAL: grpc.StatusCode.INTERNAL,
    Status.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Status.INVALID_SPEC: grpc.StatusCode.INVALID_ARGUMENT,
    Status.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    Status.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Status.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Status.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Status.CONFLICT: grpc.StatusCode.FAILED_PRECONDITION,
    Status.UNSUPPORTED: grpc.StatusCode.FAILED_PRECONDITION,
    Status.UNDECODABLE: grpc.StatusCode.FAILED_PRECONDITION,
    Status.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Status.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Status.STORAGE_ERROR: grpc.StatusCode.UNAVAILABLE,
    Status.STORAGE_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Status.OS_ERROR: grpc.StatusCode.UNAVAILABLE,
    Status.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
}

#: the trailing metadata that carries a failed call's status beside gRPC's code: gRPC has fewer
#: codes than there are statuses (FAILED_PRECONDITION alone stands for three), and the master must
#: tell them apart
STATUS_KEY = "coded-status"


def raised_status(error: grpc.RpcError) -> Status | None:
    """The status a server of this project failed a call with; None when gRPC itself failed it
    (the server unreachable, a deadline, a message over the limit), or the server is not ours or
    says OK for a failed call (no failure to tell apart)."""
    trailing = getattr(error, "trailing_metadata", None)  # grpc.aio's errors and grpc's (also Calls) have it
    trailer = trailing() if callable(trailing) else None
    value = next((value for key, value in trailer or () if key == STATUS_KEY), None)
    status = Status.parse(int(value)) if isinstance(value, str) and value.isdigit() else None
    return None if status is Status.OK else status


# --- server interceptors -------------------------------------------------------------------------


async def _abort(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    status, message = status_of(error)
    if status is Status.INTERNAL:
        log.exception("unexpected error in an RPC", exc_info=error)
    await context.abort(GRPC_CODES[status], message, trailing_metadata=((STATUS_KEY, str(int(status))),))


class MalformedRequest(TensorError):
    """Bytes that are not a message of the RPC's request type (truncated, invalid UTF-8, ...):
    MALFORMED, as any bytes from the network that are not what they claim."""


@dataclass(frozen=True)
class _Unparsed:
    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """The deserializer, returning what it could not parse instead of raising: gRPC would answer
    a raising deserializer with UNKNOWN; the handler answers INVALID_ARGUMENT instead."""
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as error:  # DecodeError; protobuf raises nothing narrower for bad bytes
            return _Unparsed(str(error) or type(error).__name__)

    return parse


def _parsed(request: Any, method: str) -> Any:
    if isinstance(request, _Unparsed):
        raise MalformedRequest(f"malformed {method} request: {request.reason}")
    return request


async def _parsed_stream(requests: AsyncIterator[Any], method: str) -> AsyncIterator[Any]:
    async for request in requests:
        yield _parsed(request, method)


def _wrap_handler(
    handler: grpc.RpcMethodHandler,
    method: str,
    guard: Callable[[grpc.aio.ServicerContext], Awaitable[None]] | None = None,
) -> grpc.RpcMethodHandler:
    """The same handler, with an optional guard first, malformed requests refused, and exceptions
    mapped to statuses."""

    def request_of(request: Any) -> Any:
        return _parsed_stream(request, method) if handler.request_streaming else _parsed(request, method)

    async def check(context: grpc.aio.ServicerContext) -> None:
        if guard is not None:
            await guard(context)

    def passthrough(error: BaseException) -> bool:
        return isinstance(error, (grpc.aio.AbortError, GeneratorExit)) or type(error).__name__ == "CancelledError"

    deserialize = _tolerant(handler.request_deserializer)
    if handler.unary_unary or handler.stream_unary:
        behavior = handler.unary_unary or handler.stream_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                await check(context)
                return await behavior(request_of(request), context)
            except BaseException as error:  # mapped through the table
                if passthrough(error):
                    raise
                await _abort(context, error)

        make = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
        return make(unary, request_deserializer=deserialize, response_serializer=handler.response_serializer)

    behavior = handler.unary_stream or handler.stream_stream
    make = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler

    if not inspect.isasyncgenfunction(behavior):  # a coroutine that sends with context.write (Health.Watch)
        async def writing(request: Any, context: grpc.aio.ServicerContext) -> None:
            try:
                await check(context)
                await behavior(request_of(request), context)
            except BaseException as error:
                if passthrough(error):
                    raise
                await _abort(context, error)

        return make(writing, request_deserializer=deserialize, response_serializer=handler.response_serializer)

    async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            await check(context)
            async for item in behavior(request_of(request), context):
                yield item
        except BaseException as error:
            if passthrough(error):
                raise
            await _abort(context, error)

    return make(streaming, request_deserializer=deserialize, response_serializer=handler.response_serializer)


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Maps exceptions to statuses (coded.wire.status; gRPC's code and the status itself), refuses
    malformed requests, checks the token."""

    def __init__(self, token: str | None, open_prefixes: tuple[str, ...]) -> None:
        self._token = token
        self._open = open_prefixes

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        if details.method.startswith(self._open):  # health and reflection: no token, same errors
            return _wrap_handler(handler, method)
        guard = None
        if self._token:
            expected = f"Bearer {self._token}"
            given = dict(details.invocation_metadata or ()).get(TOKEN_HEADER, "")

            async def guard(context: grpc.aio.ServicerContext) -> None:
                if not hmac.compare_digest(str(given), expected):
                    raise Unauthenticated("missing or wrong token")

        return _wrap_handler(handler, method, guard)


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


def _listener_on(address: str) -> str:
    """"address already in use" when a socket already holds ``host:port`` (not port 0) the way a
    listening one does: bound as gRPC binds (SO_REUSEADDR, no SO_REUSEPORT); "" otherwise, also
    when the probe cannot tell (gRPC's own bind then decides)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or int(port) == 0:
        return ""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host or "0.0.0.0", int(port)))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            return (error.strerror or "address already in use").lower()
    return ""


def _bind_problem(address: str) -> str:
    """Why ``host:port`` cannot be bound, in the system's words (grpcio does not say)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
            probe.bind((host.strip("[]") or "0.0.0.0", int(port)))
    except (OSError, ValueError) as error:
        return (getattr(error, "strerror", None) or str(error)).lower()
    return "the address is not available"


def aio_channel(address: str, security: Security = Security(),
                max_message_mb: int = DEFAULT_MAX_MESSAGE_MB) -> grpc.aio.Channel:
    options = message_options(max_message_mb)
    if security.tls:
        options.append(("grpc.ssl_target_name_override", security.server_name))
        return grpc.aio.secure_channel(address, security.channel_credentials(), options=options)
    return grpc.aio.insecure_channel(address, options=options)


def sync_channel(address: str, security: Security = Security(),
                 max_message_mb: int = DEFAULT_MAX_MESSAGE_MB) -> grpc.Channel:
    options = message_options(max_message_mb)
    if security.tls:
        options.append(("grpc.ssl_target_name_override", security.server_name))
        return grpc.secure_channel(address, security.channel_credentials(), options=options)
    return grpc.insecure_channel(address, options=options)


async def wait_for_termination() -> None:
    """Return on SIGTERM or SIGINT (the caller then shuts down gracefully)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
