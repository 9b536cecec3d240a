"""A hostile *worker*, written from docs/dataplane.md and the protos alone, against a real master.

The fake registers with a real master (``Master.RegisterWorker``, then ``Heartbeat`` at the
interval the reply gives), serves the ``Worker`` service (Assign answers with the port of its own
data plane, ``data_socket`` empty, so the master speaks TCP) and a plain TCP data plane whose
frames it packs and unpacks by hand with :mod:`struct` from the doc's tables (never with the
project's encoder). It answers every ROUND with a scripted misbehaviour and records what it sees:
each connection's HELLO and frames and how it ended (the master's CLOSE, or aborted), the ROUNDs,
the Assign calls, in one ordered log. It also checks the master's own frames (the header, HELLO's
fields against the assignment, ROUND's metadata).

Each case runs one gradient job on the real master with two real workers and the fake
(``workers: 3``, cyclic with one straggler: the two real workers alone can decode and check), and
asserts the reaction the doc promises: the job SUCCEEDS with the fake an erasure every iteration
(never among ``IterationRecord.responders``), and the master's observable reaction (an aborted
connection and a new one with a new HELLO for the next round, a re-Assign, the worker marked gone
until its next heartbeat, the worker located as wrong, ...). The real workers get an injected
delay (``faults.stragglers``) so that the fake's misbehaviour reaches the master while its round
is still open; no verdict depends on a time.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import yaml

from coded.client import CodedClient
from coded.client.reports import Job, JobState
from coded.cluster.local import LocalCluster
from coded.v1 import master_pb2, master_pb2_grpc, worker_pb2, worker_pb2_grpc

from .conftest import BASE_SPEC, wait_until

# 25 jobs of a real master with a fake worker (about 25 s): `make test-slow`, which .ci/run runs
pytestmark = [pytest.mark.integration, pytest.mark.slow]

# --- the data plane, from docs/dataplane.md ----------------------------------------------------------

HEADER = struct.Struct("<2sBBIQQ")  # magic, version, kind, meta_length, round, payload_length
VERSION = 3
HELLO, READY, ROUND, STOP, STAGE, DONE, ERROR, CLOSE, PART, HAVE, WANT = range(1, 12)
FROM_MASTER = {HELLO, ROUND, STOP, CLOSE, HAVE, WANT}
F8, F4, I8 = 1, 2, 3  # dtype codes of a tensor descriptor
ITEMSIZE = {F8: 8, F4: 4, I8: 8, 4: 4}
STAGE_META = struct.Struct("<Idd")  # u32 stage, f64 compute seconds, f64 injected delay seconds
PART_META = struct.Struct("<IIdd")  # u32 stage, u32 piece, f64, f64
OK, INTERNAL, INVALID_ARGUMENT, MALFORMED, NOT_FOUND, UNAVAILABLE = 0, 1, 2, 4, 6, 12
MAX_META = 65536


def frame(kind: int, round_id: int = 0, meta: bytes = b"", payload: bytes = b"", *, magic: bytes = b"CD",
          version: int = VERSION, declared_meta: int | None = None, declared_payload: int | None = None) -> bytes:
    """One frame: the header, then the metadata and the payload (the lengths as declared, when given)."""
    return HEADER.pack(magic, version, kind, len(meta) if declared_meta is None else declared_meta, round_id,
                       len(payload) if declared_payload is None else declared_payload) + meta + payload


def descriptor(code: int, *dims: int) -> bytes:
    return struct.pack("<BB", code, len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)


def zeros(code: int, count: int) -> bytes:
    return bytes(ITEMSIZE[code] * count)


def stage(round_id: int, number: int, count: int, code: int = F8, dims: int | None = None) -> bytes:
    """A STAGE of ``count`` zeros of dtype ``code`` (the descriptor says ``dims`` when given)."""
    meta = STAGE_META.pack(number, 0.001, 0.0) + descriptor(code, count if dims is None else dims)
    return frame(STAGE, round_id, meta, zeros(code, count))


def part(round_id: int, number: int, piece: int, count: int) -> bytes:
    meta = PART_META.pack(number, piece, 0.001, 0.0) + descriptor(F8, count)
    return frame(PART, round_id, meta, zeros(F8, count))


def status(kind: int, round_id: int, code: int, message: str = "", payload: bytes = b"") -> bytes:
    return frame(kind, round_id, struct.pack("<I", code) + message.encode(), payload)


def hello_meta(job_id: str, token: str, position: int) -> bytes:
    job, secret = job_id.encode(), token.encode()
    return struct.pack("<H", len(job)) + job + struct.pack("<H", len(secret)) + secret + struct.pack("<i", position)


def parse_hello(meta: bytes) -> tuple[str, str, int]:
    (length,) = struct.unpack_from("<H", meta)
    job = meta[2:2 + length].decode()
    offset = 2 + length
    (length,) = struct.unpack_from("<H", meta, offset)
    token = meta[offset + 2:offset + 2 + length].decode()
    offset += 2 + length
    assert len(meta) - offset == 4, f"HELLO: {len(meta) - offset} bytes after the token"
    return job, token, struct.unpack_from("<i", meta, offset)[0]


class Ended(Exception):
    """The master ended the connection (``how``: "eof" or "reset")."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except ConnectionError:  # reset (an abort with unread bytes), aborted
            raise Ended("reset") from None
        if not chunk:
            raise Ended("eof")
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[int, int, bytes, bytes]:
    magic, version, kind, meta_length, round_id, payload_length = HEADER.unpack(read_exactly(sock, HEADER.size))
    assert (magic, version) == (b"CD", VERSION), (magic, version)
    assert meta_length <= MAX_META and payload_length <= 1 << 31, (meta_length, payload_length)
    return kind, round_id, read_exactly(sock, meta_length), read_exactly(sock, payload_length)


# --- the fake worker -----------------------------------------------------------------------------------


@dataclass
class Round:
    """What a behaviour knows of a ROUND: the connection, the round, and the job's input."""

    conn: Connection
    round_id: int
    iteration: int
    size: int  # l: the parameters' length (the message is l + 1 floats)
    count: int  # ROUNDs of this job the fake got before this one
    fake: FakeWorker


@dataclass
class Connection:
    job_id: str = ""
    token: str | None = None
    position: int | None = None
    frames: list[tuple[int, int]] = field(default_factory=list)  # (kind, round) received after HELLO
    rounds: list[int] = field(default_factory=list)
    ended: str = ""  # "close" (the master's CLOSE), "eof" or "reset" (the master closed or aborted)
    after: list[tuple[int, int]] = field(default_factory=list)  # frames received after it answered a ROUND
    replied: bool = False  # it has answered a ROUND


class Behaviour:
    """How the fake answers: READY to a HELLO; on ROUND the frames of :meth:`round`; on STOP,
    DONE 0 when ``answer_stop``."""

    answer_stop = True
    streamed = False

    def ready(self) -> bytes:
        return frame(READY)

    def round(self, r: Round) -> bytes:
        return status(DONE, r.round_id, INTERNAL, "scripted")


class Frames(Behaviour):
    """Answers each ROUND with ``make(round)``."""

    def __init__(self, make: Callable[[Round], bytes], answer_stop: bool = True) -> None:
        self._make = make
        self.answer_stop = answer_stop

    def round(self, r: Round) -> bytes:
        return self._make(r)


class ReadyWithPayload(Behaviour):
    def ready(self) -> bytes:
        return frame(READY, payload=b"\0" * 8)


class Unavailable(Behaviour):
    """DONE 12 UNAVAILABLE, its heartbeats held from just before it (none in flight)."""

    def round(self, r: Round) -> bytes:
        r.fake.hold_heartbeats()
        return status(DONE, r.round_id, UNAVAILABLE, "scripted: cannot serve for now")


class FakeWorker(worker_pb2_grpc.WorkerServicer):
    """A worker of our own: its gRPC service, its data plane, its heartbeats and what it saw."""

    def __init__(self, master: str, name: str = "zz-hostile") -> None:
        self.name = name
        self.behaviour: Behaviour = Behaviour()
        self._lock = threading.Lock()
        self.log: list[tuple[Any, ...]] = []  # ("assign", job, index) | ("hello", conn) | ("round", conn, id) | ...
        self.connections: list[Connection] = []
        self.assignments: dict[str, int] = {}
        self.problems: list[str] = []  # what the master sent that the doc does not allow
        self.heartbeats = 0
        self._beating = threading.Event()
        self._beating.set()
        self._beat_lock = threading.Lock()
        self._stopping = threading.Event()
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                fake._serve(self.request)

        self._data = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._data.daemon_threads = True
        self.data_port = self._data.server_address[1]
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        worker_pb2_grpc.add_WorkerServicer_to_server(self, self._grpc)
        self.port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._channel = grpc.insecure_channel(master)
        self._master = master_pb2_grpc.MasterStub(self._channel)
        self._threads = [threading.Thread(target=self._data.serve_forever, daemon=True),
                         threading.Thread(target=self._heartbeat, daemon=True)]

    # --- life ----------------------------------------------------------------------------------------

    def start(self) -> FakeWorker:
        self._grpc.start()
        self._threads[0].start()
        reply = self._master.RegisterWorker(master_pb2.RegisterWorkerRequest(
            name=self.name, address=f"127.0.0.1:{self.port}"), timeout=30)
        assert reply.heartbeat_interval_s > 0
        self.interval = reply.heartbeat_interval_s
        self._threads[1].start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._beating.set()
        self._data.shutdown()
        self._data.server_close()
        self._grpc.stop(0)
        self._channel.close()

    def _heartbeat(self) -> None:
        while not self._stopping.is_set():
            self._beating.wait()
            with self._beat_lock:  # hold_heartbeats waits for one in flight
                if self._beating.is_set() and not self._stopping.is_set():
                    try:
                        self._master.Heartbeat(master_pb2.HeartbeatRequest(name=self.name), timeout=10)
                        self.heartbeats += 1
                    except grpc.RpcError:
                        pass  # the master is stopping
            self._stopping.wait(self.interval)

    def hold_heartbeats(self) -> None:
        """No heartbeat from now on (and none is on its way) until :meth:`resume_heartbeats`."""
        with self._beat_lock:
            self._beating.clear()

    def resume_heartbeats(self) -> None:
        self._beating.set()

    def reset(self, behaviour: Behaviour) -> None:
        with self._lock:
            self.behaviour = behaviour
            self.log, self.connections, self.problems = [], [], []

    def _note(self, *entry: Any) -> None:
        with self._lock:
            self.log.append(entry)

    def problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)

    # --- what it saw, per job ------------------------------------------------------------------------

    def of(self, job_id: str) -> list[Connection]:
        with self._lock:
            return [c for c in self.connections if c.job_id == job_id]

    def rounds(self, job_id: str) -> list[int]:
        return [r for c in self.of(job_id) for r in c.rounds]

    def events(self, job_id: str) -> list[tuple[Any, ...]]:
        with self._lock:
            return [e for e in self.log if e[1] == job_id]

    # --- the Worker service --------------------------------------------------------------------------

    def Assign(self, request: worker_pb2.Assignment, context: grpc.ServicerContext) -> worker_pb2.AssignReply:
        with self._lock:
            self.assignments[request.job_id] = request.worker_index
            self.log.append(("assign", request.job_id, request.worker_index))
        return worker_pb2.AssignReply(data_port=self.data_port, data_socket="")

    def UploadPartitions(self, request_iterator: Iterator, context: grpc.ServicerContext) -> worker_pb2.UploadReply:
        received = sum(len(chunk.data) for chunk in request_iterator)
        self._note("upload", "", received)
        return worker_pb2.UploadReply(bytes=received)

    def Release(self, request: worker_pb2.ReleaseRequest, context: grpc.ServicerContext) -> worker_pb2.ReleaseReply:
        self._note("release", request.job_id)
        return worker_pb2.ReleaseReply()

    # --- the data plane ------------------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection()
        sock.settimeout(120)  # a hang guard: the master never leaves a connection idle that long here
        with self._lock:
            behaviour = self.behaviour
        try:
            kind, round_id, meta, payload = read_frame(sock)
            if kind != HELLO or round_id or payload:
                self.problem(f"first frame: kind {kind}, round {round_id}, {len(payload)} payload bytes")
                return
            conn.job_id, conn.token, conn.position = parse_hello(meta)
            with self._lock:
                self.connections.append(conn)
                self.log.append(("hello", conn.job_id, conn))
                assigned = self.assignments.get(conn.job_id)
            if assigned != conn.position or conn.token != "":
                self.problem(f"HELLO {conn.job_id!r} at position {conn.position} with token {conn.token!r}; "
                             f"assigned at {assigned}, no token")
            self._send(sock, behaviour.ready())
            self._rounds(sock, conn, behaviour)
        except Ended as ended:
            conn.ended = ended.how
        except TimeoutError:
            self.problem("the master left a connection idle for 120 s")
        except Exception as error:  # AssertionError, struct.error, UnicodeDecodeError, IndexError
            self.problem(f"malformed frame from the master: {error!r}")
        finally:
            sock.close()

    def _send(self, sock: socket.socket, data: bytes) -> None:
        with contextlib.suppress(OSError):  # the master aborted the connection already: the reads say how
            sock.sendall(data)

    def _rounds(self, sock: socket.socket, conn: Connection, behaviour: Behaviour) -> None:
        while True:
            kind, round_id, meta, payload = read_frame(sock)
            conn.frames.append((kind, round_id))
            if conn.replied:
                conn.after.append((kind, round_id))
            if kind not in FROM_MASTER or kind == HELLO:
                self.problem(f"the master sent kind {kind}")
            if kind == ROUND:
                (iteration,) = struct.unpack_from("<q", meta)
                code, ndim = struct.unpack_from("<BB", meta, 8)
                dims = struct.unpack_from(f"<{ndim}Q", meta, 10)
                if (code, ndim) != (F8, 1) or len(meta) != 10 + 8 * ndim or dims[0] * 8 != len(payload):
                    self.problem(f"ROUND descriptor {code, ndim, dims} for {len(payload)} bytes")
                if round_id == 0 or round_id in conn.rounds:
                    self.problem(f"ROUND id {round_id} (zero, or repeated on its connection)")
                conn.rounds.append(round_id)
                self._note("round", conn.job_id, conn, round_id, iteration)
                with self._lock:
                    count = sum(len(c.rounds) for c in self.connections if c.job_id == conn.job_id) - 1
                self._send(sock, behaviour.round(Round(conn, round_id, iteration, dims[0], count, self)))
                conn.replied = True
            elif kind == STOP:
                self._note("stop", conn.job_id, conn, round_id)
                if behaviour.answer_stop:
                    self._send(sock, status(DONE, round_id, OK))
            elif kind == CLOSE:
                conn.ended = "close"
                return
            elif kind in (HAVE, WANT):
                (pieces,) = struct.unpack_from("<I", meta)
                if len(meta) != 4 + 4 * pieces:
                    self.problem(f"HAVE/WANT of {len(meta)} bytes for {pieces} pieces")


# --- the cluster, the fake, the jobs -------------------------------------------------------------------

#: the real workers start every stage this late, so the fake's answer is the first of every round
DELAY = {"stragglers": {"model": "fixed", "workers": [0, 1, 2], "delay": 0.25}}
TERMINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[tuple[LocalCluster, FakeWorker, CodedClient]]:
    # a worker counts as gone only when marked so: none lapses within a test (60 s without heartbeat)
    local = LocalCluster(2, tmp_path_factory.mktemp("hostile-worker"), master_args=["--worker-timeout", "60"])
    local.start()
    try:
        fake = FakeWorker(local.address).start()
        try:
            with local.client(timeout=30) as client:
                assert wait_until(lambda: alive(client) == {"worker-0": True, "worker-1": True, fake.name: True})
                yield local, fake, client
        finally:
            fake.stop()
    finally:
        local.stop()


def alive(client: CodedClient) -> dict[str, bool]:
    return {w.name: w.alive for w in client.workers()}


def run_job(client: CodedClient, fake: FakeWorker, behaviour: Behaviour, iterations: int = 2,
            **changes: Any) -> tuple[Job, int]:
    """Run one job of the two real workers and the fake behaving so; the finished job (with
    history) and the fake's position in it."""
    assert wait_until(lambda: all(alive(client).values())), alive(client)  # the last case may have marked it down
    fake.reset(behaviour)
    spec = {**BASE_SPEC, "workers": 3, "code": {"scheme": "cyclic", "stragglers": 1}, "stream": "off",
            "iterations": iterations, "eval_every": 0, "faults": DELAY, **changes}
    job_id = client.submit(yaml.safe_dump(spec)).id
    assert wait_until(lambda: client.get(job_id).state in TERMINAL, timeout=60), client.get(job_id)
    # the job's end releases its workers: CLOSE on the data plane (the master waits for the worker to
    # close the connection, or aborts it), then Release
    assert wait_until(lambda: ("release", job_id) in fake.events(job_id)), fake.events(job_id)
    job = client.get(job_id, history=True)
    assert fake.name in job.workers, job.workers
    return job, job.workers.index(fake.name)


def assert_succeeded_without(job: Job, position: int, iterations: int) -> None:
    """SUCCEEDED, every iteration recorded, the fake's reply never used."""
    assert job.state == JobState.SUCCEEDED, job.reason
    assert [r.iteration for r in job.history] == list(range(iterations))
    for record in job.history:
        assert position not in record.responders, record
        assert len(record.responders) >= 1


def assert_honest_master(fake: FakeWorker, job: Job, position: int) -> None:
    """Every HELLO of the job named it, no token, the fake's assigned position; nothing malformed."""
    assert not fake.problems, fake.problems
    connections = fake.of(job.id)
    assert connections
    assert all(c.position == position and c.token == "" for c in connections)


# --- cases: the master aborts the connection -----------------------------------------------------------


def master_kind(r: Round) -> bytes:
    """A frame of a kind only a master sends, a different one each round."""
    return [frame(HELLO, meta=hello_meta(r.conn.job_id, "", r.conn.position or 0)),
            frame(ROUND, r.round_id, struct.pack("<q", 0) + descriptor(F8, 1), zeros(F8, 1)),
            frame(STOP, r.round_id),
            frame(CLOSE),
            frame(HAVE, r.round_id, struct.pack("<II", 1, 0)),
            frame(WANT, r.round_id, struct.pack("<II", 1, 0))][r.count % 6]


def stages_past_the_limit(r: Round) -> bytes:
    """Stages 0, 1, ... 4097 in order: stage 4097 is beyond 4096 whether "at most 4096" bounds the
    stage's number or the stages' count (the reference master refuses stage 4096 already)."""
    return b"".join(stage(r.round_id, number, r.size + 1) for number in range(4098)) + status(DONE, r.round_id, OK)


ABORTS = {
    # a kind only a master sends: HELLO, ROUND, STOP, CLOSE, HAVE, WANT, one per round
    "master-kinds": (Frames(master_kind), 6),
    "payload-on-done": (Frames(lambda r: status(DONE, r.round_id, OK, payload=b"\0" * 8)), 2),
    "stage-1-first": (Frames(lambda r: stage(r.round_id, 1, r.size + 1) + status(DONE, r.round_id, OK)), 2),
    "stage-4096": (Frames(stages_past_the_limit), 2),
    "int64-message": (Frames(lambda r: stage(r.round_id, 0, r.size + 1, I8) + status(DONE, r.round_id, OK)), 2),
    "done-status-99": (Frames(lambda r: status(DONE, r.round_id, 99, "no such status")), 2),
    "error-status-ok": (Frames(lambda r: status(ERROR, 0, OK, "no error")), 2),
    "error-malformed": (Frames(lambda r: status(ERROR, 0, MALFORMED, "scripted")), 2),
    "wrong-magic": (Frames(lambda r: frame(DONE, r.round_id, struct.pack("<I", OK), magic=b"XY")), 2),
    "wrong-version": (Frames(lambda r: frame(DONE, r.round_id, struct.pack("<I", OK), version=2)), 2),
    "unknown-kind": (Frames(lambda r: frame(99, r.round_id)), 2),
    "meta-over-65536": (Frames(lambda r: frame(DONE, r.round_id, b"\0" * 64, declared_meta=MAX_META + 1)), 2),
    "descriptor-disagrees": (Frames(lambda r: stage(r.round_id, 0, r.size + 1, dims=r.size + 2)
                                    + status(DONE, r.round_id, OK)), 2),
}


@pytest.mark.parametrize("case", list(ABORTS))
def test_the_master_aborts_a_connection_that_breaks_the_protocol(setup, case):
    """The frame makes the master abort the connection (no ERROR frame, no CLOSE, nothing more on
    it) and fail its round: an erasure; the next round opens a new connection with a new HELLO,
    and the job succeeds without the fake."""
    _local, fake, client = setup
    behaviour, iterations = ABORTS[case]
    job, position = run_job(client, fake, behaviour, iterations)
    assert_succeeded_without(job, position, iterations)
    assert_honest_master(fake, job, position)
    connections = [c for c in fake.of(job.id) if c.rounds]
    # every round of the job reached the fake, each on a connection of its own
    assert len(connections) >= iterations
    for conn in connections:
        # one ROUND; after the fake's answer nothing more came on it but a STOP of that round (the
        # master may stop a call whose stage it refused before it reads the frame that breaks the
        # protocol: STAGE 0 then 1 of a one-stage code); no ERROR, no CLOSE
        assert conn.rounds == [conn.rounds[0]], conn
        assert all(frame_ == (STOP, conn.rounds[0]) for frame_ in conn.after), conn.frames
        assert conn.ended in ("eof", "reset"), conn  # aborted
    assert len(set(fake.rounds(job.id))) == len(fake.rounds(job.id))


def test_a_payload_on_ready_is_refused_before_any_round(setup):
    """A READY with a payload: the master aborts the connection before it sends a ROUND; every
    round tries a new connection (a new HELLO), and the job succeeds without the fake."""
    _local, fake, client = setup
    job, position = run_job(client, fake, ReadyWithPayload(), 2)
    assert_succeeded_without(job, position, 2)
    assert_honest_master(fake, job, position)
    connections = fake.of(job.id)
    assert len(connections) >= 2
    assert all(c.frames == [] and c.ended in ("eof", "reset") for c in connections), connections


# --- cases: a failed round, the connection goes on -----------------------------------------------------


def test_done_invalid_argument_is_an_erasure_on_a_connection_that_goes_on(setup):
    """DONE 2 INVALID_ARGUMENT: an erasure for the round; the connection goes on (one HELLO for
    the whole job, ended by the master's CLOSE), no re-Assign, the worker stays alive."""
    _local, fake, client = setup
    job, position = run_job(client, fake, Frames(lambda r: status(DONE, r.round_id, INVALID_ARGUMENT, "scripted")), 3)
    assert_succeeded_without(job, position, 3)
    assert_honest_master(fake, job, position)
    [conn] = fake.of(job.id)
    assert len(conn.rounds) == 3 and conn.ended == "close", conn
    assert [e for e in fake.events(job.id) if e[0] == "assign"] == [("assign", job.id, position)]
    assert alive(client)[fake.name]


def test_a_message_in_the_other_wire_dtype_fails_the_call_not_the_connection(setup):
    """A float32 message on a float64 job: that worker's call fails (the master stops it: STOP);
    the connection goes on."""
    _local, fake, client = setup
    job, position = run_job(client, fake, Frames(lambda r: stage(r.round_id, 0, r.size + 1, F4)), 3)
    assert_succeeded_without(job, position, 3)
    assert_honest_master(fake, job, position)
    [conn] = fake.of(job.id)
    assert len(conn.rounds) == 3 and conn.ended == "close", conn
    stops = {e[3] for e in fake.events(job.id) if e[0] == "stop"}
    assert stops == set(conn.rounds)


MISFITS = {  # (the answer, the job's changes)
    "short-message": (lambda r: stage(r.round_id, 0, 3), {}),
    "long-message": (lambda r: stage(r.round_id, 0, r.size + 50), {}),
    "short-piece": (lambda r: part(r.round_id, 0, r.conn.position, 3), {"stream": {"chunks": 1}, "verify": "off"}),
}


@pytest.mark.parametrize("case", list(MISFITS))
def test_a_message_of_another_length_fails_the_call_not_the_job(setup, case):
    """A well-formed frame whose message has another length than the job's messages (l + 1 floats
    here): like one in the other wire dtype, it fails that worker's call (the master stops it), and
    the job succeeds without it. (It failed the whole job, "internal error: ValueError", before.)"""
    _local, fake, client = setup
    make, changes = MISFITS[case]
    job, position = run_job(client, fake, Frames(make), 3, **changes)
    assert_succeeded_without(job, position, 3)
    assert_honest_master(fake, job, position)
    [conn] = fake.of(job.id)
    assert conn.rounds and conn.ended == "close", conn
    stops = {e[3] for e in fake.events(job.id) if e[0] == "stop"}
    assert stops == set(conn.rounds)


def test_done_not_found_is_assigned_again_before_the_next_round(setup):
    """DONE 6 NOT_FOUND: the master assigns the job to the worker again before its next round."""
    _local, fake, client = setup
    job, position = run_job(client, fake, Frames(lambda r: status(DONE, r.round_id, NOT_FOUND, "not assigned")), 3)
    assert_succeeded_without(job, position, 3)
    assert_honest_master(fake, job, position)
    kinds = [e[0] for e in fake.events(job.id) if e[0] in ("assign", "round")]
    assert kinds == ["assign", "round"] * 3, kinds
    assert all(e[2] == position for e in fake.events(job.id) if e[0] == "assign")


def test_done_unavailable_marks_the_worker_gone_until_its_next_heartbeat(setup):
    """DONE 12 UNAVAILABLE: an erasure, and the worker counts as gone (ListWorkers: not alive) —
    with no heartbeat since, it stays so; its next heartbeat brings it back."""
    _local, fake, client = setup
    try:
        job, position = run_job(client, fake, Unavailable(), 3)
        assert_succeeded_without(job, position, 3)
        assert_honest_master(fake, job, position)
        # its heartbeats were held from its first DONE on; the master's timeout is 60 s
        assert len(fake.rounds(job.id)) == 1  # gone: not called again
        assert not alive(client)[fake.name]
        beats = fake.heartbeats
    finally:
        fake.resume_heartbeats()
    assert wait_until(lambda: alive(client)[fake.name])
    # the fake counts a heartbeat once its call has returned: just after the master took it
    assert wait_until(lambda: fake.heartbeats > beats)


def test_a_silent_worker_is_stopped_and_the_job_goes_on(setup):
    """A worker that never answers a round (nor its STOP): an erasure; the master stops each
    round it no longer needs (STOP) or gives up its connection; the job succeeds without it.
    (With two real workers answering, the master never needs the fake past its deadline, so
    the deadline itself is not reached here.)"""
    _local, fake, client = setup
    job, position = run_job(client, fake, Frames(lambda r: b"", answer_stop=False), 3,
                            timeouts={"call_s": 2})
    assert_succeeded_without(job, position, 3)
    assert_honest_master(fake, job, position)
    stops = {e[3] for e in fake.events(job.id) if e[0] == "stop"}
    for conn in fake.of(job.id):
        for round_id in conn.rounds:
            assert round_id in stops or conn.ended in ("eof", "reset"), conn


# --- cases: streamed replies ---------------------------------------------------------------------------


def held(position: int, n: int = 3, s: int = 1) -> set[int]:
    """Partitions a cyclic code's worker holds (docs/codes.md: worker i holds i..i+s; `verify: off`
    builds the code for s, not s + 1)."""
    return {(position + t) % n for t in range(s + 1)}


def foreign_part(r: Round) -> bytes:
    """A PART for the one piece (chunks: 1) the fake does not hold."""
    [piece] = set(range(3)) - held(r.conn.position)
    return part(r.round_id, 0, piece, r.size + 1)


def twice(r: Round) -> bytes:
    """Its own first piece twice (stages 0 and 1)."""
    own = r.conn.position
    return part(r.round_id, 0, own, r.size + 1) + part(r.round_id, 1, own, r.size + 1)


@pytest.mark.parametrize("make", [foreign_part, twice], ids=["not-held", "twice"])
def test_a_part_it_does_not_hold_or_sends_twice_makes_the_worker_wrong(setup, make):
    """Streamed replies, unchecked (`verify: off`, so only the pieces' own rules find the fake out):
    a PART for a piece the worker does not hold, or the same piece twice, makes it wrong for the
    iteration: located, its pieces left out (never a responder), counted in Job.wrong_replies."""
    _local, fake, client = setup
    iterations = 3  # a worker that sent no piece rests the next iteration (docs/jobs.md, "stream")
    job, position = run_job(client, fake, Frames(make), iterations, stream={"chunks": 1}, verify="off")
    assert job.replies.streamed
    assert_succeeded_without(job, position, iterations)
    assert_honest_master(fake, job, position)
    called = {e[4] for e in fake.events(job.id) if e[0] == "round"}
    assert 0 in called
    for record in job.history:
        assert (position in record.located) == (record.iteration in called), (record, called)
    [wrong] = job.wrong_replies
    assert (wrong.position, wrong.worker, wrong.located) == (position, fake.name, len(called))


# --- the master still serves ---------------------------------------------------------------------------


def test_the_master_still_serves(setup):
    """After every case, a job with the fake as a plain erasure (DONE 1 INTERNAL) still runs."""
    _local, fake, client = setup
    job, position = run_job(client, fake, Behaviour(), 2)
    assert_succeeded_without(job, position, 2)
    assert_honest_master(fake, job, position)
    [conn] = fake.of(job.id)
    assert conn.ended == "close"

