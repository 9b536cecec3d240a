"""gRPC plumbing shared by every server and client: options, TLS, token, statuses, the error
interceptor, channels.

Clients get channels from :func:`aio_channel` / :func:`sync_channel` and send
:func:`call_metadata` with every call; servers (:mod:`coded.wire.servers`) install
:class:`ErrorInterceptor`.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from coded.base.errors import TensorError, Unauthenticated
from coded.wire.limits import DEFAULT_MAX_MESSAGE_MB
from coded.wire.status import Status, status_of

__all__ = [
    "GRPC_CODES",
    "STATUS_KEY",
    "ErrorInterceptor",
    "Security",
    "aio_channel",
    "call_metadata",
    "connect_failure",
    "message_options",
    "raised_status",
    "sync_channel",
]

log = logging.getLogger(__name__)

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
    server_name: str = "coded"  # the name clients expect in a server's certificate (see coded/cluster/certs.py)

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


def connect_failure(code: grpc.StatusCode, details: str) -> str | None:
    """Why a call could not reach its server (refused, timed out, a name that does not resolve, a
    TLS handshake), in words, from its status; None for a status that says something else. What the
    CLI says of a master it cannot reach, and a worker of one it cannot register with."""
    if code != grpc.StatusCode.UNAVAILABLE or not details.startswith(
            ("failed to connect to all addresses", "errors resolving", "DNS resolution failed", "Socket closed")):
        return None
    lowered = details.lower()
    if "connection refused" in lowered:
        return ("the connection was refused: nothing listens on that port (is `coded master` running there? "
                "--master or $CODED_MASTER sets the address)")
    if "settings frame" in lowered:
        return "timed out: something accepted the connection but never answered as a gRPC server"
    if "hostname verification" in lowered:  # gRPC's words for a certificate of another name
        return ("the master's certificate does not name the server name this client expects "
                "(--tls-server-name, default `coded`: the name `coded certs` gives)")
    if "handshake failed" in lowered:
        return ("the TLS handshake failed: the master's certificate is not signed by the CA this client trusts "
                "(--tls-ca), or the master does not trust this client's certificate; both must come from the same "
                "`coded certs`")
    if "socket closed" in lowered:  # TLS 1.3: the server checks the client's certificate after the handshake
        return ("the master closed the connection as it opened: it does not trust this client's certificate "
                "(--tls-cert and --tls-key must come from the same `coded certs` as the master's), or it "
                "expects TLS and this client has none (--tls-ca)")
    if "timed out" in lowered or "timeout" in lowered:
        return "the connection timed out: no answer from that host (is it up, and the port open to you?)"
    if "no such file or directory" in lowered:  # a unix: address
        return ("no socket at that path (is a master listening there: `coded master --unix-socket`, "
                "`coded local --link`?)")
    if not details.startswith("failed to connect"):
        return "its host name does not resolve"
    return details.rsplit(": ", 1)[-1]


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
