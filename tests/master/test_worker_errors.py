"""One error table (coded.wire.status): every exception a worker can raise has exactly one status,
and reaches the master as the same error on every path — over gRPC (a real server with the
project's interceptor), in the data plane's frames (a real connection), and through the in-process
links the runners' tests use: the same link error, carrying the status that names the type raised."""

from __future__ import annotations

import asyncio
import re
import struct
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from coded.base import errors
from coded.codes import CodeError, DecodingFailure, IllConditionedError, NotDecodableError
from coded.jobs.messages import Assignment
from coded.jobs.spec import JobSpecError
from coded.master.dataplane import DataConnection
from coded.master.grpc_links import link_error
from coded.master.links import (
    WorkerCallError,
    WorkerForgotJob,
    WorkerRefused,
    WorkerUnreachable,
    call_error,
)
from coded.master.metrics import OpenCounts
from coded.wire.frames import Kind, encode_frame, tensor_meta
from coded.wire.rpc import GRPC_CODES, Security, raised_status
from coded.wire.servers import build_server
from coded.wire.status import INTERNAL_MESSAGE, STATUS_TABLE, Status, error_type, status_of
from coded.wire.tensor import TensorError
from coded.worker.dataplane import WorkerConnection, serve_data_plane
from coded.worker.metrics import WorkerMetrics
from coded.worker.service import WorkerService
from coded.worker.streams import Orders

from .inprocess import InProcessLink, InProcessWorker
from .inprocess_peers import PeerNetwork

#: one instance of every type in the table, and an unexpected error (INTERNAL)
RAISED: list[BaseException] = [cls(f"{cls.__name__} happened") for cls, _ in STATUS_TABLE]
RAISED.append(RuntimeError("a bug's details, which must not leave the worker"))


def expected(error: BaseException) -> tuple[type[WorkerCallError], Status, str]:
    status, message = status_of(error)
    return type(call_error(status, message)), status, f"{status.name}: {message}"


def seen(link: WorkerCallError) -> tuple[type[WorkerCallError], Status | None, str]:
    return type(link), link.status, str(link)


def test_every_domain_error_has_exactly_one_status_and_every_status_one_type():
    statuses = [status for _, status in STATUS_TABLE]
    assert len(statuses) == len(set(statuses))
    assert set(statuses) == set(Status) - {Status.OK, Status.INTERNAL}
    domain = [getattr(errors, name) for name in errors.__all__]
    assert {*domain, JobSpecError, TensorError, CodeError} <= {cls for cls, _ in STATUS_TABLE}
    for cls, status in STATUS_TABLE:  # no earlier row shadows a later one
        assert status_of(cls("x"))[0] is status, cls
        assert error_type(status) is cls
    for cls in (NotDecodableError, IllConditionedError, DecodingFailure):
        assert status_of(cls("x"))[0] is Status.UNDECODABLE
    assert status_of(RuntimeError("secret")) == (Status.INTERNAL, INTERNAL_MESSAGE)
    assert error_type(Status.INTERNAL) is None and error_type(Status.OK) is None


def test_only_a_job_the_worker_does_not_hold_makes_the_master_assign_it_again():
    """Conflict, Unsupported and CodeError used to share FAILED_PRECONDITION with a forgotten job,
    and the master re-assigned jobs that could not run: they are refusals."""
    reaction = {cls: type(call_error(status, "x")) for cls, status in STATUS_TABLE}
    assert [cls for cls, kind in reaction.items() if kind is WorkerForgotJob] == [errors.NotFound]
    for cls in (errors.Conflict, errors.Unsupported, CodeError, ValueError, JobSpecError, TensorError):
        assert reaction[cls] is WorkerRefused, cls
    for cls in (errors.Unavailable, errors.StorageError, OSError):
        assert reaction[cls] is WorkerUnreachable, cls
    assert {cls for cls, kind in reaction.items() if kind is WorkerCallError} == {
        errors.TooLarge, errors.StorageFull, errors.AlreadyExists, errors.Unauthenticated, NotImplementedError}
    assert set(GRPC_CODES) == set(Status)


def test_the_data_plane_spec_lists_every_status_under_its_number():
    text = (Path(__file__).resolve().parents[2] / "docs" / "dataplane.md").read_text()
    table = text[text.index("## Statuses"):text.index("## A connection")]
    rows = {int(code): name for code, name in re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", table, re.MULTILINE)}
    assert rows == {status.value: status.name for status in Status}


def test_over_grpc():
    async def raise_it(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RAISED[int(request)]

    def add(server: grpc.aio.Server) -> str:
        handler = grpc.unary_unary_rpc_method_handler(raise_it)  # bytes in, bytes out
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Raiser", {"Raise": handler}),))
        return "test.Raiser"

    async def scenario() -> dict[int, Any]:
        built = build_server("127.0.0.1:0", [add], Security(token="t0ken"))
        await built.start()
        out: dict[int, Any] = {}
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{built.port}") as channel:
                call = channel.unary_unary("/test.Raiser/Raise")
                for i in range(len(RAISED)):
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call(str(i).encode(), timeout=10, metadata=(("authorization", "Bearer t0ken"),))
                    out[i] = (caught.value.code(), seen(link_error(caught.value)))
                with pytest.raises(grpc.aio.AioRpcError) as caught:  # the token's guard: the same table
                    await call(b"0", timeout=10)
                out[-1] = (caught.value.code(), raised_status(caught.value))
        finally:
            await built.stop(0)
        return out

    out = asyncio.run(scenario())
    for i, error in enumerate(RAISED):
        status = status_of(error)[0]
        assert out[i] == (GRPC_CODES[status], expected(error)), error
    assert out[-1] == (grpc.StatusCode.UNAUTHENTICATED, Status.UNAUTHENTICATED)


def test_in_the_data_planes_frames(caplog):
    """Each round fails on the worker with one of the errors; its DONE brings it to the master (an
    unexpected error's details stay in the worker's log)."""
    service = WorkerService(WorkerMetrics())

    def compute_round(job_id: str, iteration: int, params: np.ndarray, orders: Orders, outbox: object) -> None:
        raise RAISED[iteration]  # the first thing a ROUND asks of the service

    service.compute_round = compute_round  # type: ignore[method-assign]

    async def scenario() -> dict[int, Any]:
        plane = await serve_data_plane(service, "127.0.0.1", 0, None, None, 1 << 20)
        connection = await DataConnection.open("job", "127.0.0.1", plane.port, None, None, "coded", 1 << 20,
                                               OpenCounts())
        out: dict[int, Any] = {}
        params = np.zeros(3)
        for i in range(len(RAISED)):
            frames = encode_frame(Kind.ROUND, i + 1, struct.pack("<q", i) + tensor_meta(params), params)
            with pytest.raises(WorkerCallError) as caught:
                _ = [reply async for reply in connection.start(i + 1, frames, timeout=10).replies()]
            out[i] = seen(caught.value)
        assert connection.broken is None  # a failed round is not a failed connection
        await connection.close()
        plane.close()
        return out

    out = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert out == {i: expected(error) for i, error in enumerate(RAISED)}
    assert str(RAISED[-1]) in caplog.text and str(RAISED[-1]) not in str(out)


def test_in_the_data_planes_error_frames():
    """A worker that ends a connection with one of the errors (an ERROR frame) fails its rounds
    with it on the master."""
    ends: list[WorkerConnection] = []

    def connection() -> WorkerConnection:
        ends.append(WorkerConnection(WorkerService(WorkerMetrics()), None, 1 << 20))
        return ends[-1]

    async def scenario() -> dict[int, Any]:
        server = await asyncio.get_running_loop().create_server(connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        out: dict[int, Any] = {}
        params = np.zeros(3)
        frames = encode_frame(Kind.ROUND, 1, struct.pack("<q", 0) + tensor_meta(params), params)
        for i, error in enumerate(RAISED):
            master = await DataConnection.open("job", "127.0.0.1", port, None, None, "coded", 1 << 20, OpenCounts())
            ends[-1].refuse(error)  # the worker reads nothing more: the round fails with the ERROR
            with pytest.raises(WorkerCallError) as caught:
                _ = [reply async for reply in master.start(1, frames, timeout=10).replies()]
            out[i] = seen(caught.value)
        server.close()
        return out

    out = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert out == {i: expected(error) for i, error in enumerate(RAISED)}


def test_through_the_in_process_links(tmp_path):
    """The in-process links map what the table knows; anything else is a bug and propagates."""
    worker = InProcessWorker("inproc-0", tmp_path, PeerNetwork())
    link = InProcessLink(worker)

    async def scenario() -> dict[int, Any]:
        out: dict[int, Any] = {}
        for i, error in enumerate(RAISED):
            async def assign(assignment: Assignment, error: BaseException = error) -> tuple[int, ...]:
                raise error

            worker.service.assign = assign  # type: ignore[method-assign]
            try:
                await link.assign(Assignment("job", 0, "{}"), timeout=10)
            except WorkerCallError as caught:
                out[i] = seen(caught)
            except RuntimeError as caught:
                out[i] = caught
        return out

    out = asyncio.run(scenario())
    known = RAISED[:-1]
    assert {i: out[i] for i in range(len(known))} == {i: expected(error) for i, error in enumerate(known)}
    assert out[len(known)] is RAISED[-1]



class _Failed:
    """A failed call's error as grpc raises it: only its trailing metadata matters here."""

    def __init__(self, *trailer: tuple[str, str]) -> None:
        self._trailer = trailer

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailer


@pytest.mark.parametrize("value", ["0", "999", "-3", "x", ""])
def test_a_failed_call_whose_status_says_ok_or_nothing_known_is_gRPCs_own_failure(value):
    # a buggy or foreign server: no status to tell apart, so the master decodes gRPC's code
    assert raised_status(_Failed(("coded-status", value))) is None  # type: ignore[arg-type]
    assert raised_status(_Failed()) is None  # type: ignore[arg-type]
    assert raised_status(_Failed(("coded-status", str(int(Status.CONFLICT))))) is Status.CONFLICT  # type: ignore[arg-type]
