"""Both ends of the data plane in one process, over real TCP on 127.0.0.1: the master's
DataConnection against the worker's WorkerConnection and WorkerService (docs/dataplane.md)."""

from __future__ import annotations

import asyncio
import struct
import weakref

import numpy as np
import pytest
import yaml

from coded.jobs.build import load_data
from coded.jobs.messages import Assignment
from coded.jobs.spec import parse_job, to_json
from coded.master.dataplane import DataConnection
from coded.master.links import Params, WorkerCallError, WorkerForgotJob, WorkerRefused, WorkerUnreachable
from coded.master.metrics import OpenCounts
from coded.master.shared import SharedMemory
from coded.wire.frames import HEADER, Kind, encode_frame, hello_meta, tensor_meta
from coded.wire.shared import available as shared_memory_available
from coded.worker.dataplane import DataPlane, serve_data_plane
from coded.worker.metrics import WorkerMetrics
from coded.worker.service import Stopped, WorkerService
from coded.worker.streams import Orders

from .test_service import SPEC

TOKEN = "t0ken"


def frames(round_id: int, params: np.ndarray) -> list:
    return encode_frame(Kind.ROUND, round_id, struct.pack("<q", 1) + tensor_meta(params), params)


async def worker(position: int, **changes: object) -> tuple[WorkerService, DataPlane, np.ndarray]:
    """A worker holding position ``position`` of SPEC's job (position 0 sleeps 60 s per round)."""
    spec = parse_job(yaml.safe_dump({**SPEC, **changes}))
    data = load_data(spec)
    service = WorkerService(WorkerMetrics())
    await service.assign(Assignment("job", position, to_json(spec), features=data.features, classes=data.classes))
    server = await serve_data_plane(service, "127.0.0.1", 0, TOKEN, None, 1 << 20)
    return service, server, np.zeros(data.features + 1)


async def connect(server: DataPlane, position: int, token: str = TOKEN, job: str = "job",
                  local: bool = False, held: OpenCounts | None = None,
                  shared: SharedMemory | None = None) -> DataConnection:
    """A master's connection to the worker: on TCP, or (``local``) on its local socket, offering
    ``shared`` memory there; it counts itself into ``held`` (a master's counts) while open."""
    held = OpenCounts() if held is None else held
    return await DataConnection.open(job, "127.0.0.1", server.port, token, None, "coded", 1 << 20, held, position,
                                     local=server.local if local else "", shared=shared)


async def replies(call) -> list:
    return [reply async for reply in call.replies()]


def run(coroutine) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, timeout=60))


def test_a_round_brings_the_workers_message_and_matches_the_service_computing_it_directly():
    async def scenario() -> None:
        service, server, params = await worker(1, stream="off")  # position 1: no injected delay
        connection = await connect(server, 1)
        got = await replies(connection.start(7, frames(7, params + 0.5), timeout=30))
        direct = [r async for r in service.compute("job", 1, params + 0.5)]
        assert [r.stage for r in got] == [r.stage for r in direct] == [0]
        np.testing.assert_array_equal(got[0].message, direct[0].message)
        assert got[0].compute_seconds > 0 and got[0].delay_seconds == 0
        await connection.close()
        server.close()

    run(scenario())


@pytest.mark.parametrize("slowed", [False, True], ids=["inline", "task"])
def test_a_stop_ends_a_straggler_and_the_connection_goes_on(slowed):
    """A streamed straggler in its injected delay: small pieces wait on a timer, with no task;
    a round also slowed down (a partial straggler) is a task that sleeps."""
    async def scenario() -> None:
        faults = dict(SPEC["faults"])  # position 0 sleeps 60 s before computing
        if slowed:
            faults["slowdown"] = {"model": "fixed", "workers": [0], "factor": 2.0}
        service, server, params = await worker(0, faults=faults)
        connection = await connect(server, 0)
        call = connection.start(1, frames(1, params), timeout=30)
        collected = asyncio.ensure_future(replies(call))
        while slowed and not service.running:  # the task is in its injected delay
            await asyncio.sleep(0.01)
        call.stop()
        assert await collected == []  # ended by the worker's DONE, without a message or an error
        while service.running:
            await asyncio.sleep(0.01)
        # the next round on the same connection fails on its own (a wrong shape), nothing else does
        with pytest.raises(WorkerRefused, match="INVALID_ARGUMENT: params must be float64 of shape"):
            await replies(connection.start(2, frames(2, np.zeros(2)), timeout=30))
        await connection.close()
        server.close()

    run(scenario())


def test_a_whole_reply_straggler_waits_on_a_timer_that_a_stop_ends_and_its_input_is_checked_first():
    async def scenario() -> None:
        service, server, params = await worker(0, stream="off")  # sleeps 60 s, then computes at once
        connection = await connect(server, 0)
        call = connection.start(1, frames(1, params), timeout=30)
        collected = asyncio.ensure_future(replies(call))
        call.stop()  # STOP follows ROUND on the connection: it finds the round in its delay
        assert await collected == [] and service.running == 0  # no task, no thread waited for it
        with pytest.raises(WorkerRefused, match="INVALID_ARGUMENT: params must be float64 of shape"):
            await replies(connection.start(2, frames(2, np.zeros(2)), timeout=5))  # refused before the delay
        await connection.close()
        server.close()
        # a delay that is waited out: the message, as computed directly, with the delay it waited
        short = {"stragglers": {"model": "fixed", "workers": [0], "delay": 0.05}}
        service, server, params = await worker(0, stream="off", faults=short)
        connection = await connect(server, 0)
        got = await replies(connection.start(3, frames(3, params + 1.0), timeout=30))
        direct = [r async for r in service.compute("job", 1, params + 1.0)]
        assert [r.stage for r in got] == [r.stage for r in direct] == [0]
        np.testing.assert_array_equal(got[0].message, direct[0].message)
        assert got[0].delay_seconds == pytest.approx(0.05)
        await connection.close()
        server.close()

    run(scenario())


def test_a_round_that_ended_or_was_stopped_keeps_no_listener():
    # listeners close over what holds the call (the master's round and runner): a call that kept
    # them would be a cycle, freed only by a full collection, keeping the job's data alive
    class Listener:
        def __init__(self) -> None:
            self.ended = asyncio.get_running_loop().create_future()

        def stage(self, reply: object) -> None:
            pass

        def end(self, error: object) -> None:
            self.ended.set_result(error)

    async def scenario() -> None:
        _service, server, params = await worker(1, stream="off")
        connection = await connect(server, 1)
        ended, stopped = Listener(), Listener()
        call = connection.start(1, frames(1, params), timeout=30)
        call.listen(ended.stage, ended.end)
        assert await ended.ended is None
        straggler = connection.start(2, frames(2, params), timeout=30)
        straggler.listen(stopped.stage, stopped.end)
        straggler.stop()
        refs = [weakref.ref(ended), weakref.ref(stopped)]
        del ended, stopped
        assert [ref() for ref in refs] == [None, None]
        await connection.close()
        server.close()

    run(scenario())


def test_a_stop_that_follows_its_round_at_once_ends_the_round_before_it_began():
    # ROUND and STOP in one read: the round's task has not started computing when the STOP is
    # handled. A lost STOP left a streamed round waiting for a WANT that never came, until the
    # master gave up on the connection (seen in the load test, under load)
    async def scenario() -> None:
        service, server, params = await worker(1)  # streamed, no injected delay
        connection = await connect(server, 1)
        for round_id in range(1, 6):
            call = connection.start(round_id, frames(round_id, params), timeout=30)
            call.stop()  # written right behind the ROUND
            await replies(call)

        async def idle() -> None:
            while service.running:
                await asyncio.sleep(0.01)

        # a lost STOP leaves its round waiting for a WANT that never comes: this bounds that hang
        # only, far above any machine's time for five rounds; the outcomes below are the verdict
        await asyncio.wait_for(idle(), 120)
        # a streamed round never completes without the master's WANTs or CLOSE: each one ended by its STOP
        outcomes = {outcome: service.metrics.registry.get_sample_value(
            "coded_worker_calls_total", {"job_id": "job", "outcome": outcome}) or 0
            for outcome in ("completed", "stopped", "cancelled", "failed")}
        assert outcomes == {"completed": 0, "stopped": 5, "cancelled": 0, "failed": 0}
        await connection.close()
        server.close()

    run(scenario())


def test_a_silent_worker_is_unreachable_after_the_rounds_deadline():
    async def scenario() -> None:
        _service, server, params = await worker(0)
        connection = await connect(server, 0)
        with pytest.raises(WorkerUnreachable, match=r"no reply within 0\.2 s"):
            await replies(connection.start(1, frames(1, params), timeout=0.2))
        await connection.close()
        server.close()

    run(scenario())


def test_a_lost_connection_fails_its_rounds_and_later_ones():
    async def scenario() -> None:
        _service, server, params = await worker(0)
        connection = await connect(server, 0)
        collected = asyncio.ensure_future(replies(connection.start(1, frames(1, params), timeout=30)))
        assert connection.transport is not None
        connection.transport.abort()  # the connection breaks mid-round
        with pytest.raises(WorkerUnreachable, match="ended the connection"):
            await collected
        with pytest.raises(WorkerUnreachable):
            await replies(connection.start(2, frames(2, params), timeout=30))
        server.close()

    run(scenario())


@pytest.mark.parametrize("local", [False, True], ids=["tcp", "local"])
def test_refusals_become_the_links_domain_errors(local):
    async def scenario() -> None:
        _service, server, params = await worker(1)
        with pytest.raises(WorkerCallError, match="UNAUTHENTICATED: missing or wrong token"):
            await connect(server, 1, token="wrong", local=local)
        # a connection meant for the job's worker at another position (a reused port) is refused
        with pytest.raises(WorkerForgotJob, match="holds job job at position 1, not 2"):
            await connect(server, 2, local=local)
        other = await connect(server, 1, job="not-here", local=local)
        with pytest.raises(WorkerForgotJob, match="not assigned"):  # the master assigns it again
            await replies(other.start(1, frames(1, params), timeout=30))
        await other.close()
        server.close()
        await server.tcp.wait_closed()
        with pytest.raises(WorkerUnreachable, match="data plane"):
            await DataConnection.open("job", "127.0.0.1", server.port, TOKEN, None, "coded", 1 << 20, OpenCounts(),
                                      local=server.local)  # neither socket is there any more

    run(scenario())


def test_close_waits_for_the_worker_and_leaves_no_connection_open():
    async def scenario() -> None:
        _service, server, params = await worker(1, stream="off")
        held, other = OpenCounts(), OpenCounts()  # two masters' counts in one process
        connection = await connect(server, 1, held=held)
        local = await connect(server, 1, local=True, held=held)
        assert server.local and held == OpenCounts(connections=2, local=1)
        assert other == OpenCounts()  # counts are a master's own, not the process's
        assert isinstance(local.transport.get_extra_info("socket").getsockname(), str)  # a Unix socket
        tcp, unix = [await replies(c.start(1, frames(1, params), timeout=30)) for c in (connection, local)]
        np.testing.assert_array_equal(tcp[0].message, unix[0].message)  # one protocol on both
        for each in (connection, local):
            await each.close()
        assert held == OpenCounts()
        assert connection.transport is not None and connection.transport.is_closing()
        server.close()

    run(scenario())


def test_a_streamed_round_brings_its_own_pieces_then_those_the_master_wants_and_skips_those_it_has():
    async def scenario() -> None:
        service, server, params = await worker(1, faults={}, stream={"chunks": 2})
        connection = await connect(server, 1)
        call = connection.start(7, frames(7, params + 0.5), timeout=30)
        replies_ = call.replies()
        own = [await anext(replies_) for _ in range(2)]  # its own partition (1), then it waits
        assert [r.piece for r in own] == [2, 3] and [r.stage for r in own] == [0, 1]
        call.have([4])  # another worker sent piece 4: it is skipped when asked for
        call.want([0, 4, 5])
        asked = [await anext(replies_) for _ in range(2)]
        assert [r.piece for r in asked] == [0, 5] and [r.stage for r in asked] == [2, 3]
        call.stop()
        assert [r async for r in replies_] == []  # the stop ends the round
        # each piece as the service computes it directly
        orders = Orders()
        direct = service.compute("job", 1, params + 0.5, orders)
        expected = [await anext(direct) for _ in range(2)]
        orders.want([0, 5])
        expected += [await anext(direct) for _ in range(2)]
        orders.stop()
        with pytest.raises(Stopped):
            await anext(direct)
        for a, b in zip(own + asked, expected, strict=True):
            assert a.piece == b.piece
            np.testing.assert_array_equal(a.message, b.message)
        await connection.close()
        server.close()

    run(scenario())


def test_a_late_streamed_round_sends_its_own_partition_after_its_delay_then_what_was_wanted_meanwhile():
    async def scenario() -> None:
        late = {"stragglers": {"model": "fixed", "workers": [0], "delay": 0.05}}
        service, server, params = await worker(0, faults=late, stream={"chunks": 2})
        layout = parse_job(yaml.safe_dump({**SPEC, "stream": {"chunks": 2}})).layout
        own, other = layout.pieces_of(0)[:2], layout.pieces_of(0)[2:]
        connection = await connect(server, 0)
        call = connection.start(3, frames(3, params), timeout=30)
        call.want([other[1]])  # during the delay: after its own partition
        replies_ = call.replies()
        got = [await anext(replies_) for _ in range(3)]
        assert [r.piece for r in got] == [*own, other[1]] and [r.stage for r in got] == [0, 1, 2]
        assert [r.delay_seconds for r in got] == [0.05, 0.0, 0.0]  # the delay goes with its first piece
        call.stop()
        assert [r async for r in replies_] == []
        orders = Orders()
        direct = service.compute("job", 1, params, orders)  # the same pieces, computed by a task
        expected = [await anext(direct) for _ in range(2)]
        orders.stop()
        with pytest.raises(Stopped):
            await anext(direct)
        for a, b in zip(got[:2], expected, strict=True):
            np.testing.assert_array_equal(a.message, b.message)
        await connection.close()
        server.close()

    run(scenario())


async def raw_exchange(server: DataPlane, *frames_: list) -> list[tuple[Kind, int]]:
    """Send these frames (after a HELLO as position 0) on one connection, and read what the
    worker sends until it closes the connection: each frame's kind and round."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(bytes(b) for f in (encode_frame(Kind.HELLO, meta=hello_meta("job", TOKEN, 0)), *frames_)
                          for b in f))
    data = await reader.read()  # until the worker closes
    writer.close()
    got, at = [], 0
    while at < len(data):
        _magic, _version, kind, meta, round_id, payload = HEADER.unpack_from(data, at)
        got.append((Kind(kind), round_id))
        at += HEADER.size + meta + payload
    return got


@pytest.mark.parametrize("slowed", [False, True], ids=["inline", "task"])
def test_a_round_ends_the_rounds_before_it_without_a_done_and_close_stops_the_rest(slowed):
    """Rounds on a connection follow one another (docs/dataplane.md): round 1, in its 60 s delay,
    ends when round 2 arrives, and nothing more is sent for it; CLOSE stops round 2 (its DONE
    comes) and the connection closes at once, not after the delays."""
    async def scenario() -> None:
        faults = dict(SPEC["faults"])  # position 0 sleeps 60 s before computing
        if slowed:  # a task, not a timer
            faults["slowdown"] = {"model": "fixed", "workers": [0], "factor": 2.0}
        service, server, params = await worker(0, faults=faults)
        got = await raw_exchange(server, frames(1, params), frames(2, params), encode_frame(Kind.CLOSE))
        assert got == [(Kind.READY, 0), (Kind.DONE, 2)]
        assert service.running == 0
        stopped = service.metrics.registry.get_sample_value("coded_worker_calls_total",
                                                            {"job_id": "job", "outcome": "stopped"})
        assert stopped == 2
        server.close()

    run(scenario())


def test_an_idle_workers_round_is_let_go_without_a_frame_and_the_next_round_ends_it():
    """The master stops an idle worker's streamed round (it waits for a WANT) without STOP: the
    call ends at once, the worker's next ROUND ends the round there, and that round computes
    as usual."""
    async def scenario() -> None:
        service, server, params = await worker(1, faults={})
        connection = await connect(server, 1)
        call = connection.start(1, frames(1, params), timeout=30)
        replies_ = call.replies()
        own = await anext(replies_)  # its own partition; then it waits for a WANT
        call.stop(idle=True)
        assert [r async for r in replies_] == [] and not connection._rounds  # no DONE awaited
        def stopped() -> float | None:
            return service.metrics.registry.get_sample_value("coded_worker_calls_total",
                                                             {"job_id": "job", "outcome": "stopped"})

        assert not stopped()  # the worker was told nothing
        again = connection.start(2, frames(2, params), timeout=30)
        second = await anext(again.replies())
        assert stopped() == 1  # round 2's ROUND ended round 1
        assert second.piece == own.piece
        np.testing.assert_array_equal(second.message, own.message)  # the same input, the same piece
        again.stop()
        await connection.close()
        server.close()

    run(scenario())


@pytest.mark.skipif(not shared_memory_available(), reason="shared memory needs Linux's sealed memfds")
@pytest.mark.parametrize("changes", [{"stream": "off"}, {"faults": {}, "stream": {"chunks": 2}}],
                         ids=["whole", "streamed"])
def test_on_the_local_socket_the_rounds_arrays_lie_in_shared_memory(changes):
    """A master offers shared memory on the local socket: the parameters go into the job's input
    segment once, the worker computes its message into its reply segment, and the master reads it
    there; the same message as over TCP, round after round (slots reused)."""
    async def scenario() -> None:
        _service, server, params = await worker(1, **changes)
        assert server.shares
        shared = SharedMemory()
        tcp = await connect(server, 1)
        local = await connect(server, 1, local=True, shared=shared)
        assert local.shared is not None and tcp.shared is None
        inputs, replies = local.shared
        for round_id in range(1, 4):
            over_tcp = await first_replies(tcp, round_id, params + 0.1 * round_id)
            in_memory = await first_replies(local, round_id, params + 0.1 * round_id)
            for a, b in zip(over_tcp, in_memory, strict=True):
                assert replies.offset(b.message) is not None and replies.offset(a.message) is None
                np.testing.assert_array_equal(a.message, b.message)
        assert shared.offer("job") is not None and shared.offer("job")[0] is inputs  # one input segment per job
        for each in (tcp, local):
            await each.close()
        server.close()

    run(scenario())


async def first_replies(connection: DataConnection, round_id: int, params: np.ndarray) -> list:
    """A round's replies: a whole reply's stages, or a streamed round's own pieces (then it is stopped)."""
    call = connection.start_round(Params(params, round_id), 1, timeout=30)
    got = [await anext(call.replies())]
    if got[0].piece is not None:
        got.append(await anext(call.replies()))
        call.stop()
    return got


@pytest.mark.skipif(not shared_memory_available(), reason="shared memory needs Linux's sealed memfds")
def test_a_worker_that_takes_no_shared_memory_is_offered_none_and_sends_payloads():
    """coded worker --no-shared-memory: its assignment says so (AssignReply.shared_memory false), the
    master offers nothing, and the frames carry the arrays."""
    async def scenario() -> None:
        spec = parse_job(yaml.safe_dump({**SPEC, "stream": "off"}))
        data = load_data(spec)
        service = WorkerService(WorkerMetrics())
        await service.assign(Assignment("job", 1, to_json(spec), features=data.features, classes=data.classes))
        server = await serve_data_plane(service, "127.0.0.1", 0, TOKEN, None, 1 << 20, shared=False)
        assert not server.shares
        local = await connect(server, 1, local=True)
        assert local.shared is None and local.local
        got = await first_replies(local, 1, np.zeros(data.features + 1))
        assert got[0].message.shape == (data.features + 2,)
        await local.close()
        server.close()

    run(scenario())
