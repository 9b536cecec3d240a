"""Hostile input, property-based: every RPC of the master, the workers and the peers gets
malformed messages — wrong dtypes and shapes, NaN and infinity, lengths that disagree with shapes,
huge dimensions, absurd code parameters, unknown ids, chunk streams out of order or truncated —
and answers each with a clear status (never INTERNAL, never a crash); the servers keep serving.

CODED_FUZZ_EXAMPLES sets the examples per RPC family (bench/fuzz.py runs 10,000 in all).
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coded.client.reports import JobState
from coded.cluster.local import LocalCluster
from coded.codes.streaming import StreamLayout
from coded.jobs.build import load_partitions
from coded.jobs.spec import parse_job
from coded.v1 import master_pb2, master_pb2_grpc, peer_pb2, peer_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc

from .conftest import BASE_SPEC, raw_call

pytestmark = pytest.mark.integration
EXAMPLES = int(os.environ.get("CODED_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CLEAR = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
         grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED}
COUNTS: dict[str, int] = {}
HELD = "held-by-worker-0"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    local = LocalCluster(3, tmp_path_factory.mktemp("hostile"))
    local.start()
    with local.client() as client:  # a real job, so that fuzzed calls can name a real job id
        # whole replies: a round of the held job below is one STAGE and DONE (a streamed one would
        # wait for the master's WANT after its own partition)
        job = client.wait(client.submit(yaml.safe_dump({**BASE_SPEC, "workers": 3, "iterations": 2,
                                                        "code": {"scheme": "cyclic", "stragglers": 1},
                                                        "stream": "off"})).id)
    channels = {"master": grpc.insecure_channel(local.address),
                "worker": grpc.insecure_channel(f"127.0.0.1:{local.worker_ports[0]}")}
    # a job that worker 0 holds (and keeps: the master does not know it), for rounds of real values
    worker_pb2_grpc.WorkerStub(channels["worker"]).Assign(worker_pb2.Assignment(
        job_id=HELD, worker_index=0, spec_json=job.spec, features=12, classes=2), timeout=60)
    yield local, job, channels
    for channel in channels.values():
        channel.close()
    local.stop()
    print(f"\nhostile-input cases per RPC family: {COUNTS} (total {sum(COUNTS.values())})")


def outcome(name: str, call) -> grpc.StatusCode:
    """Run one call; an error must be one of the clear statuses, with a message."""
    COUNTS[name] = COUNTS.get(name, 0) + 1
    try:
        call()
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        assert error.code() in CLEAR, (name, error.code(), error.details())
        assert error.details(), (name, error.code())
        return error.code()


# --- job specs ---------------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=20), st.lists(st.integers(-5, 5), max_size=3))
paths = st.sampled_from([("workers",), ("iterations",), ("code", "scheme"), ("code", "stragglers"), ("code", "m"),
                         ("code", "t"), ("code", "alpha"), ("model", "type"), ("model", "l2"), ("data", "samples"),
                         ("data", "features"), ("data", "type"), ("optimizer", "lr"), ("optimizer", "type"),
                         ("faults",), ("seed",), ("kind",), ("bogus",), ("timeouts", "call_s"), ("eval_every",)])


@st.composite
def specs(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
    spec = json.loads(json.dumps({**BASE_SPEC, "workers": 3, "iterations": 1}))
    for _ in range(draw(st.integers(1, 3))):
        path, value = draw(paths), draw(scalars)
        node = spec
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node.get(key, {}), dict) else {}
        node[path[-1]] = value
    return yaml.safe_dump(spec) if draw(st.booleans()) else json.dumps(spec, allow_nan=True)


@FUZZ
@given(text=specs())
def test_malformed_specs(target, text):
    _local, _, channels = target
    stub = master_pb2_grpc.MasterStub(channels["master"])
    reply: list[master_pb2.Job] = []
    code = outcome("SubmitJob", lambda: reply.append(stub.SubmitJob(iter([master_pb2.SubmitJobRequest(spec=text)]),
                                                                     timeout=30)))
    if code == grpc.StatusCode.OK:  # a mutation that happens to be valid: do not let it run
        stub.CancelJob(master_pb2.CancelJobRequest(job_id=reply[0].id), timeout=30)


@FUZZ
@given(job_id=st.text(max_size=60), name=st.text(max_size=300), address=st.text(max_size=300),
       chunks=st.lists(st.tuples(st.text(max_size=10), st.integers(-5, 10**12), st.binary(max_size=64)), max_size=4))
def test_unknown_ids_and_malformed_uploads(target, job_id, name, address, chunks):
    _local, _job, channels = target
    stub = master_pb2_grpc.MasterStub(channels["master"])
    # a job id is 12 hex digits, so none of these names a job, and no worker is called "unknown ..."
    unknown = job_id + "?"
    for family, call in (
            ("GetJob", lambda: stub.GetJob(master_pb2.GetJobRequest(job_id=unknown), timeout=10)),
            ("CancelJob", lambda: stub.CancelJob(master_pb2.CancelJobRequest(job_id=unknown), timeout=10)),
            ("GetResult", lambda: list(stub.GetResult(master_pb2.GetResultRequest(job_id=unknown), timeout=10))),
            ("WatchJob", lambda: list(stub.WatchJob(master_pb2.WatchJobRequest(job_id=unknown), timeout=10))),
            ("Heartbeat", lambda: stub.Heartbeat(master_pb2.HeartbeatRequest(name="unknown " + name), timeout=10))):
        assert outcome(family, call) == grpc.StatusCode.NOT_FOUND, family
    if not name or not address or len(name) > 256 or len(address) > 256:
        assert outcome("RegisterWorker", lambda: stub.RegisterWorker(
            master_pb2.RegisterWorkerRequest(name=name, address=address),
            timeout=10)) == grpc.StatusCode.INVALID_ARGUMENT
    files = [master_pb2.SubmitJobRequest(file=master_pb2.FileChunk(name=n, offset=o, data=d)) for n, o, d in chunks]
    # at most 4 chunks of 64 bytes never make an .npz of a dataset: the job is refused, whatever they are
    assert outcome("SubmitJob files", lambda: stub.SubmitJob(iter([master_pb2.SubmitJobRequest(spec=yaml.safe_dump(
        {**BASE_SPEC, "data": {"type": "npz", "path": "x.npz"}})), *files]), timeout=30)) != grpc.StatusCode.OK


dtypes = st.sampled_from(["<f8", "<f4", "<i8", "|u1", "|b1", "O", "<c16", "", "<f8\x00", ">f8"])


@st.composite
def tensor_chunks(draw):
    """A chunk stream for a parameter vector: sometimes right, mostly wrong in one way or more."""
    shape = draw(st.lists(st.integers(-3, 2**40), min_size=0, max_size=4))
    dtype = draw(dtypes)
    out = [tensor_pb2.TensorChunk(dtype=dtype, shape=shape, offset=draw(st.integers(-8, 64)),
                                  data=draw(st.binary(max_size=256)))]
    for _ in range(draw(st.integers(0, 3))):
        out.append(tensor_pb2.TensorChunk(offset=draw(st.integers(-8, 512)), data=draw(st.binary(max_size=128)),
                                          dtype=draw(st.sampled_from(["", "<f8"]))))
    return out


# --- the data plane (docs/dataplane.md), spoken from the spec by a client of our own -------------------

FRAME = struct.Struct("<2sBBIQQ")
VERSION = 3
#: the statuses of DONE and ERROR (docs/dataplane.md, "Statuses")
OK, INVALID_ARGUMENT, MALFORMED, TOO_LARGE, NOT_FOUND = 0, 2, 4, 5, 6


def frame(kind: int, round_id: int = 0, meta: bytes = b"", payload: bytes = b"", declared: int | None = None) -> bytes:
    length = len(payload) if declared is None else declared
    return FRAME.pack(b"CD", VERSION, kind, len(meta), round_id, length) + meta + payload


def hello(job_id: str, token: str = "", position: int = 0) -> bytes:
    job, secret = job_id.encode(), token.encode()
    return frame(1, meta=struct.pack("<H", len(job)) + job + struct.pack("<H", len(secret)) + secret
                 + struct.pack("<i", position))


def float_round(round_id: int, iteration: int, values: list[float]) -> bytes:
    meta = struct.pack("<qBBQ", iteration, 1, 1, len(values))
    return frame(3, round_id, meta, struct.pack(f"<{len(values)}d", *values))


def exchange(port: int, data: bytes, timeout: float = 20.0) -> list[tuple[int, int, bytes]]:
    """Send ``data`` and then CLOSE; the frames the worker sends until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data + frame(8))
        received = b""
        while chunk := sock.recv(1 << 16):  # a worker that never closes fails the test by the timeout
            received += chunk
    out, position = [], 0
    while position < len(received):
        magic, version, kind, meta_length, round_id, payload_length = FRAME.unpack_from(received, position)
        assert (magic, version) == (b"CD", VERSION)
        position += FRAME.size
        out.append((kind, round_id, received[position:position + meta_length]))
        position += meta_length + payload_length
    assert position == len(received), "the worker's last frame is cut short"
    return out


def status(meta: bytes) -> tuple[int, str]:
    return struct.unpack_from("<I", meta)[0], meta[4:].decode()


@st.composite
def data_plane_streams(draw):
    """A HELLO (mostly valid), then frames: right, or wrong in their kind, lengths, descriptor, values."""
    out = hello(draw(st.sampled_from(["fuzz-job", "", "x" * 200]))) if draw(st.integers(0, 9)) else b""
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from([1, 2, 3, 3, 3, 4, 5, 6, 7, 0, 99]))
        meta = draw(st.one_of(st.binary(max_size=40), st.just(struct.pack("<qBBQ", 0, 1, 1, 13)),
                              st.just(struct.pack("<qBBQ", 0, draw(st.integers(0, 9)), 1, 2**40))))
        payload = draw(st.binary(max_size=120))
        declared = draw(st.sampled_from([None, None, None, 2**40]))
        out += frame(kind, draw(st.integers(0, 2**64 - 1)), meta, b"" if declared else payload, declared)
    if draw(st.integers(0, 4)) == 0:
        out += draw(st.binary(min_size=24, max_size=64))  # bytes that are not a frame
    return out


@FUZZ
@given(stream=data_plane_streams(),
       values=st.lists(st.sampled_from([0.0, 1.0, -1e308, math.nan, math.inf]), min_size=13, max_size=13))
def test_malformed_data_plane_streams(target, stream, values):
    """Whatever arrives, the worker answers with well-formed frames only — a failed round's DONE
    (NOT_FOUND, INVALID_ARGUMENT, MALFORMED) or the connection's ERROR (MALFORMED, TOO_LARGE), each
    with a message, never INTERNAL — and closes the connection; a round of NaN or infinite values
    is refused, and the connection goes on after it."""
    local, _job, _channels = target
    port = local.data_ports[0]
    COUNTS["data plane"] = COUNTS.get("data plane", 0) + 1
    for kind, _round, meta in exchange(port, stream):
        assert kind in (2, 5, 6, 7), kind
        if kind in (6, 7):
            code, message = status(meta)
            assert code in (OK, INVALID_ARGUMENT, MALFORMED, TOO_LARGE, NOT_FOUND), (code, message)
            assert code == OK or message
    # an unknown job's round fails, its connection goes on
    replies = exchange(port, hello("no-such-job") + float_round(1, 1, values) + float_round(2, 2, values))
    assert [(kind, round_id) for kind, round_id, _ in replies] == [(2, 0), (6, 1), (6, 2)]
    assert all(status(meta)[0] == NOT_FOUND and "not assigned" in status(meta)[1] for _, _, meta in replies[1:])
    # a job the worker holds: finite values give the message and DONE, NaN or infinity are refused
    replies = exchange(port, hello(HELD) + float_round(3, 1, values))
    if all(math.isfinite(v) for v in values):
        assert [kind for kind, _, _ in replies] == [2, 5, 6] and status(replies[-1][2])[0] == OK
    else:
        assert [kind for kind, _, _ in replies] == [2, 6]
        assert status(replies[-1][2]) == (INVALID_ARGUMENT, "the input contains NaN or infinity")
    COUNTS["data plane"] += 2


def test_data_plane_refusals_name_the_problem(target):
    local, _job, _channels = target
    port = local.data_ports[0]
    cases = [
        (float_round(1, 0, [0.0]), MALFORMED, "first frame must be HELLO"),
        (hello("j") + frame(3, 1, struct.pack("<qBBQ", 0, 1, 1, 2**40), declared=2**40), TOO_LARGE,
         "exceeds this side"),
        (hello("j") + frame(3, 0, struct.pack("<qBBQ", 0, 1, 1, 1), bytes(8)), MALFORMED, "nonzero round id"),
        (hello("j") + frame(3, 1, struct.pack("<qBBQ", 0, 1, 1, 3), bytes(8)), MALFORMED,
         "is not the payload's 8 bytes"),
        (hello("j") + frame(3, 1, struct.pack("<qBBQ", 0, 0, 1, 1), bytes(8)), MALFORMED, "unknown dtype code 0"),
        (hello("j") + frame(5, 1), MALFORMED, "a master does not send STAGE frames"),
        # before HELLO nothing but a HELLO without payload is read: no buffer for an unknown peer
        (frame(1, 0, b"", declared=2**30), MALFORMED, "a HELLO frame carries no payload"),
        (frame(3, 1, b"", declared=2**30), MALFORMED, "the first frame must be HELLO"),
        (hello("j") + hello("j"), MALFORMED, "a second HELLO"),
        (hello(HELD, position=1), NOT_FOUND, "holds job held-by-worker-0 at position 0, not 1"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", MALFORMED, "not a data-plane frame"),
    ]
    for data, code, message in cases:
        replies = exchange(port, data)
        assert replies[-1][0] == 7, (message, replies)
        assert status(replies[-1][2])[0] == code and message in status(replies[-1][2])[1]
    # a STOP for a round that is not computing is ignored: nothing but READY comes back
    assert exchange(port, hello("j") + frame(4, 77)) == [(2, 0, b"")]
    # an input of the wrong shape for a job the worker holds fails its round, not the connection
    replies = exchange(port, hello(HELD) + float_round(1, 0, [1.0, 2.0]) + float_round(2, 0, [0.0] * 13))
    assert [(kind, round_id) for kind, round_id, _ in replies] == [(2, 0), (6, 1), (5, 2), (6, 2)]
    assert status(replies[1][2]) == (INVALID_ARGUMENT, "params must be float64 of shape (13,), got float64 (2,)")


# --- the data plane's other edges (docs/dataplane.md): streamed rounds, HAVE and WANT, the limits ------

#: frame kinds (docs/dataplane.md, "Frames")
HELLO, READY, ROUND, STOP, STAGE, DONE, ERROR, CLOSE, PART, HAVE, WANT = range(1, 12)
#: PART's metadata before its descriptor: u32 stage, u32 piece, f64 compute seconds, f64 delay seconds
PART_META = struct.Struct("<IIdd")
STREAMED, SLOWED, THREADED = "streamed-by-worker-0", "slowed-by-worker-0", "threaded-by-worker-0"
#: worker 0's own partition of STREAMED comes in 2 pieces; its order (cyclic, n = 3, s = 1, staggered)
#: is partitions 0 then 1, so it holds pieces 0..3 and not 4, 5 (partition 2)
CHUNKS = 2
ZEROS = [0.0] * 13  # parameters of the 12-feature logistic model: 12 weights and a bias


def held_spec(**changes) -> dict:
    return {**BASE_SPEC, "workers": 3, "iterations": 2, "code": {"scheme": "cyclic", "stragglers": 1}, **changes}


@pytest.fixture(scope="module")
def held_jobs(target):
    """Three more jobs worker 0 holds at position 0 (the master knows none): STREAMED replies in
    PART frames (verify off: the layout is the code's, s = 1); SLOWED is a slowed-down straggler with
    a 60 s delay, so that its rounds sit in their delay until they are stopped; THREADED is slowed
    down without a delay, so that its rounds compute in a thread at once (a round is under way
    until its thread is back, which it cannot be within the callback that reads a burst of frames)."""
    _local, _job, channels = target
    slowdown = {"model": "fixed", "workers": [0], "factor": 2}
    specs = {STREAMED: held_spec(stream={"chunks": CHUNKS, "order": "staggered"}, verify="off"),
             SLOWED: held_spec(stream="off", faults={"slowdown": slowdown,
                                                     "stragglers": {"model": "fixed", "workers": [0], "delay": 60}}),
             THREADED: held_spec(stream="off", faults={"slowdown": slowdown})}
    worker = worker_pb2_grpc.WorkerStub(channels["worker"])
    for job_id, spec in specs.items():
        worker.Assign(worker_pb2.Assignment(job_id=job_id, worker_index=0, spec_json=json.dumps(spec),
                                            features=12, classes=2), timeout=60)
    return specs


def pieces_meta(pieces, count: int | None = None) -> bytes:
    """HAVE's and WANT's metadata: u32 count (``count`` when given: a lie), then the pieces as u32."""
    pieces = list(pieces)
    return struct.pack("<I", len(pieces) if count is None else count) + struct.pack(f"<{len(pieces)}I", *pieces)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"the worker closed the connection {len(data)} bytes into {size}"
        data += chunk
    return data


class Connection:
    """A data-plane connection read frame by frame (a socket timeout guards against a hang)."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self) -> tuple[int, int, bytes, bytes] | None:
        """The next frame (kind, round, meta, payload); None when the worker closed the connection."""
        head = b""
        while len(head) < FRAME.size:
            chunk = self.sock.recv(FRAME.size - len(head))
            if not chunk:
                assert not head, "the worker's last frame is cut short"
                return None
            head += chunk
        magic, version, kind, meta_length, round_id, payload_length = FRAME.unpack(head)
        assert (magic, version) == (b"CD", VERSION)
        return kind, round_id, recv_exact(self.sock, meta_length), recv_exact(self.sock, payload_length)

    def frame(self) -> tuple[int, int, bytes, bytes]:
        got = self.next()
        assert got is not None, "the worker closed the connection"
        return got


def part(frame_: tuple[int, int, bytes, bytes], round_id: int) -> tuple[int, int, float, float, np.ndarray]:
    """Stage, piece, compute and delay seconds and the values of a PART frame of ``round_id``,
    whose descriptor is checked against its payload (float64, l + 1 = 14 values)."""
    kind, got_round, meta, payload = frame_
    assert (kind, got_round) == (PART, round_id), frame_[:3]
    stage, piece, compute_s, delay_s = PART_META.unpack_from(meta)
    dtype, ndim = struct.unpack_from("<BB", meta, PART_META.size)
    assert len(meta) == PART_META.size + 2 + 8 * ndim
    shape = struct.unpack_from(f"<{ndim}Q", meta, PART_META.size + 2)
    assert (dtype, shape) == (1, (14,)) and len(payload) == 14 * 8
    values = np.frombuffer(payload, "<f8")
    assert np.isfinite(values).all() and values[-1] > 0  # a summed logistic loss is positive
    assert math.isfinite(compute_s) and compute_s >= 0 and delay_s == 0.0
    return stage, piece, compute_s, delay_s, values


def logistic_partial(rows: dict[int, tuple[np.ndarray, np.ndarray]], piece: int, params: list[float]) -> np.ndarray:
    """A piece's summed logistic gradient with its summed loss appended, in plain numpy: piece p is
    chunk p % CHUNKS of partition p // CHUNKS's rows, cut at len * c // CHUNKS (docs/jobs.md, stream)."""
    j, c = divmod(piece, CHUNKS)
    x, y = rows[j]
    n = len(y)
    x, y = x[n * c // CHUNKS:n * (c + 1) // CHUNKS], y[n * c // CHUNKS:n * (c + 1) // CHUNKS]
    w, b = np.asarray(params[:-1]), params[-1]
    z = x @ w + b
    residual = 1.0 / (1.0 + np.exp(-z)) - y
    loss = np.sum(np.logaddexp(0.0, z) - y * z)
    return np.concatenate([x.T @ residual, [residual.sum(), loss]])


def assert_serves(port: int) -> None:
    """A good HELLO and ROUND on a new connection: READY, STAGE, DONE 0."""
    replies = exchange(port, hello(HELD) + float_round(99, 0, ZEROS))
    assert [(kind, round_id) for kind, round_id, _ in replies] == [(READY, 0), (STAGE, 99), (DONE, 99)]
    assert status(replies[-1][2]) == (OK, "")


def test_streamed_round_from_the_spec(target, held_jobs):
    """A streamed round: the worker's own partition's pieces first, stages 0, 1 in order, each
    the piece's partial gradient and loss; then nothing until a WANT, which gets exactly the
    wanted pieces it holds and has not computed, less those a HAVE named; the round ends by itself
    once every piece held is computed or skipped, else with STOP; a later ROUND lets a round go
    without a DONE; HAVE and WANT for a round that ended are ignored; CLOSE ends the last round."""
    local, _job, _channels = target
    rows = load_partitions(parse_job(json.dumps(held_jobs[STREAMED])), 3, (0, 1))
    layout = StreamLayout("cyclic", n=3, s=1, chunks=CHUNKS, order="staggered")
    own = layout.pieces_of(0)[:CHUNKS]
    assert own == (0, 1) and set(layout.pieces_of(0)) == {0, 1, 2, 3}
    rng = np.random.default_rng(5)
    params = {r: rng.normal(0.0, 0.3, 13).tolist() for r in (1, 2, 3, 4)}

    def check(frame_, round_id: int, stage: int, piece: int) -> None:
        got_stage, got_piece, _, _, values = part(frame_, round_id)
        assert (got_stage, got_piece) == (stage, piece)
        np.testing.assert_allclose(values, logistic_partial(rows, piece, params[round_id]), rtol=1e-9, atol=1e-9)

    with Connection(local.data_ports[0]) as conn:
        conn.send(hello(STREAMED))
        assert conn.frame() == (READY, 0, b"", b"")
        conn.send(float_round(1, 0, params[1]))
        for stage, piece in enumerate(own):
            check(conn.frame(), 1, stage, piece)
        # it waits: the next frame is what this WANT asks for. 5 is not held (ignored), 3 the master
        # has (HAVE: skipped), 0 computed already; so only 2, and then every piece held is done
        conn.send(frame(HAVE, 1, pieces_meta([3])) + frame(WANT, 1, pieces_meta([5, 3, 2, 0])))
        check(conn.frame(), 1, 2, 2)
        kind, round_id, meta, _ = conn.frame()
        assert (kind, round_id, status(meta)) == (DONE, 1, (OK, ""))
        conn.send(float_round(2, 1, params[2]))
        for stage, piece in enumerate(own):
            check(conn.frame(), 2, stage, piece)
        conn.send(frame(WANT, 2, pieces_meta([3])))
        check(conn.frame(), 2, 2, 3)
        conn.send(frame(STOP, 2))  # piece 2 is left: it waits, until this STOP
        kind, round_id, meta, _ = conn.frame()
        assert (kind, round_id, status(meta)) == (DONE, 2, (OK, ""))
        # for a round that ended: ignored (else piece 2 of round 2 would come before round 3's)
        conn.send(frame(HAVE, 2, pieces_meta([0])) + frame(WANT, 2, pieces_meta([2])) + float_round(3, 2, params[3]))
        for stage, piece in enumerate(own):
            check(conn.frame(), 3, stage, piece)
        conn.send(float_round(4, 3, params[4]))  # round 3 is let go: no DONE for it
        for stage, piece in enumerate(own):
            check(conn.frame(), 4, stage, piece)
        conn.send(frame(CLOSE))
        kind, round_id, meta, _ = conn.frame()
        assert (kind, round_id, status(meta)) == (DONE, 4, (OK, ""))
        assert conn.next() is None  # closed once its last round ended
    assert_serves(local.data_ports[0])


def test_have_and_want_for_a_round_not_computing_are_ignored(target, held_jobs):
    local, _job, _channels = target
    port = local.data_ports[0]
    # no such round (no job, even), and metadata of exactly the 65536 bytes allowed: only READY
    replies = exchange(port, hello("j") + frame(HAVE, 77, pieces_meta([1, 2])) + frame(WANT, 78, pieces_meta([0]))
                       + frame(WANT, 79, pieces_meta([])) + frame(HAVE, 80, pieces_meta(range(16383))))
    assert replies == [(READY, 0, b"")]
    # a whole-reply round ends in its ROUND's callback: a HAVE or WANT after it finds nothing
    replies = exchange(port, hello(HELD) + float_round(1, 0, ZEROS) + frame(HAVE, 1, pieces_meta([0]))
                       + frame(WANT, 1, pieces_meta([0, 1])))
    assert [(kind, round_id) for kind, round_id, _ in replies] == [(READY, 0), (STAGE, 1), (DONE, 1)]
    assert_serves(port)


def test_data_plane_refuses_what_a_master_must_not_send(target, held_jobs):
    """Each ends the connection with ERROR 4 MALFORMED naming the problem (docs/dataplane.md, "A
    connection"); the worker serves the next connection."""
    local, _job, _channels = target
    port = local.data_ports[0]
    cases = [
        # the count is checked whatever the round (here none is computing)
        (hello("j") + frame(HAVE, 1, pieces_meta([7], count=2)), [READY], "HAVE: 4 bytes for 2 pieces"),
        (hello("j") + frame(WANT, 1, pieces_meta([7, 8], count=1)), [READY], "WANT: 8 bytes for 1 pieces"),
        (hello("j") + frame(HAVE, 1, b"\x01\x00"), [READY], "HAVE: missing its count"),
        (hello("j") + frame(WANT, 1, pieces_meta([], count=2**32 - 1)), [READY],
         "WANT: 0 bytes for 4294967295 pieces"),
        # a round whose thread computes stops at its next piece of work: still open when the ROUND
        # after CLOSE comes
        (hello(THREADED) + float_round(1, 0, ZEROS) + frame(CLOSE) + float_round(2, 1, ZEROS), [READY],
         "a ROUND after CLOSE"),
        # a streamed round waits for WANT after its own partition; a round in its delay
        (hello(STREAMED) + float_round(3, 0, ZEROS) + float_round(3, 1, ZEROS), [READY, PART, PART],
         "round 3 is already computing"),
        (hello(SLOWED) + float_round(3, 0, ZEROS) + float_round(3, 1, ZEROS), [READY],
         "round 3 is already computing"),
        (hello("j") + FRAME.pack(b"CD", VERSION, HAVE, 65537, 1, 0), [READY],
         "frame metadata of 65537 bytes (at most 65536)"),
        # arrays in shared memory only where the master offered it on the local socket and the
        # worker took it (docs/dataplane.md, "Shared memory"): never on TCP
        (hello(HELD) + frame(ROUND | 0x80, 1, struct.pack("<qBBQQ", 0, 1, 1, 13, 0)), [READY],
         "a ROUND frame in shared memory, which this connection does not take"),
        (hello("j") + frame(PART, 1, PART_META.pack(0, 0, 0.0, 0.0) + struct.pack("<BBQ", 1, 1, 1)), [READY],
         "a master does not send PART frames"),
        (hello("j") + frame(READY), [READY], "a master does not send READY frames"),
        (hello("j") + frame(DONE, 1, struct.pack("<I", 0)), [READY], "a master does not send DONE frames"),
        (hello("j") + frame(ERROR, 0, struct.pack("<I", 1)), [READY], "a master does not send ERROR frames"),
    ]
    for data, before, message in cases:
        replies = exchange(port, data)
        assert [kind for kind, _, _ in replies] == [*before, ERROR], (message, replies)
        assert replies[-1][1] == 0 and status(replies[-1][2])[0] == MALFORMED, (message, replies[-1])
        assert message in status(replies[-1][2])[1], (message, replies[-1])
        assert_serves(port)


def test_more_than_64_rounds_under_way_is_too_large(target, held_jobs):
    """A ROUND lets the rounds before it go, but a round whose thread computes is under way until
    the thread reaches its next piece of work: 64 ROUNDs read at once are 64 rounds under way (the
    last one's DONE comes at CLOSE, none for the others); a 65th is TOO_LARGE."""
    local, _job, _channels = target
    port = local.data_ports[0]
    # each case in one write, read by the worker in one pass: no thread's return is taken in between
    rounds = [float_round(i, i, ZEROS) for i in range(1, 66)]
    replies = exchange(port, hello(THREADED) + b"".join(rounds[:64]))
    assert [(kind, round_id) for kind, round_id, _ in replies] == [(READY, 0), (DONE, 64)]
    assert status(replies[-1][2]) == (OK, "")
    replies = exchange(port, hello(THREADED) + b"".join(rounds))
    assert [(kind, round_id) for kind, round_id, _ in replies] == [(READY, 0), (ERROR, 0)]
    assert status(replies[-1][2]) == (TOO_LARGE, "more than 64 rounds under way on one connection")
    assert_serves(port)


@pytest.mark.slow  # the worker waits its 10 s for a HELLO by design: `make test-slow`
def test_a_connection_without_a_complete_hello_is_refused(target):
    """Nothing, a header cut short, a HELLO whose metadata is cut short: each gets ERROR 4 (no HELLO
    within 10 s) and the connection closes. The three wait at once: 10 s in all, by design."""
    local, _job, _channels = target
    port = local.data_ports[0]
    whole = hello("j")
    connections = [Connection(port, timeout=60.0) for _ in range(3)]
    try:
        connections[1].send(whole[:10])
        connections[2].send(whole[:FRAME.size + 3])
        for conn in connections:
            kind, round_id, meta, payload = conn.frame()
            assert (kind, round_id, payload) == (ERROR, 0, b"")
            assert status(meta) == (MALFORMED, "no HELLO within 10 s")
            assert conn.next() is None
    finally:
        for conn in connections:
            conn.sock.close()
    assert_serves(port)


@FUZZ
@given(spec=st.text(max_size=120), index=st.integers(-(2**31), 2**31 - 1), features=st.integers(-5, 10**6),
       names=st.lists(st.text(max_size=12), max_size=3), chunk=tensor_chunks())
def test_malformed_assignments_uploads_and_peer_messages(target, spec, index, features, names, chunk):
    _local, job, channels = target
    worker = worker_pb2_grpc.WorkerStub(channels["worker"])
    real = job.spec if index % 2 else spec  # sometimes a valid spec with an absurd index
    outcome("Assign", lambda: worker.Assign(worker_pb2.Assignment(job_id="fuzz", worker_index=index, spec_json=real,
                                                                  features=features, classes=features), timeout=30))
    # names and chunks are drawn independently: the stream is as long as the shorter of the two
    stream = [tensor_pb2.TensorChunk(name=f"{job.id}/{n}", dtype=c.dtype, shape=c.shape, offset=c.offset, data=c.data)
              for n, c in zip(names or ["x/0"], chunk, strict=False)]
    outcome("UploadPartitions", lambda: worker.UploadPartitions(iter(stream), timeout=30))
    peer = peer_pb2_grpc.PeerStub(channels["worker"])
    outcome("Deliver", lambda: peer.Deliver(peer_pb2.PeerMessage(job_id="no-codenet", sender=index), timeout=10))
    outcome("FetchBlock", lambda: list(peer.FetchBlock(peer_pb2.FetchBlockRequest(job_id="no-codenet"), timeout=10)))
    outcome("StartCodeNet", lambda: peer.StartCodeNet(peer_pb2.CodeNetStart(job_id="fuzz", spec_json=spec, peer=index,
                                                                            peers=names), timeout=30))


# --- raw bytes on the wire -----------------------------------------------------------------------------


def every_method() -> list[tuple[str, str, bool, bool, type]]:
    """(server, path, client streams, server streams, request class) of every RPC of every service."""
    from google.protobuf import message_factory
    from grpc_reflection.v1alpha import reflection_pb2

    out = []
    for server, descriptor, service in (
            ("master", master_pb2.DESCRIPTOR, "Master"), ("worker", worker_pb2.DESCRIPTOR, "Worker"),
            ("worker", peer_pb2.DESCRIPTOR, "Peer"), ("master", health_pb2.DESCRIPTOR, "Health"),
            ("worker", health_pb2.DESCRIPTOR, "Health"), ("master", reflection_pb2.DESCRIPTOR, "ServerReflection")):
        for method in descriptor.services_by_name[service].methods:
            out.append((server, f"/{descriptor.package}.{service}/{method.name}", method.client_streaming,
                        method.server_streaming, message_factory.GetMessageClass(method.input_type)))
    return out


METHODS = every_method()


def parses(request: type, payload: bytes) -> bool:
    """Whether protobuf itself reads ``payload`` as a message of that type (the oracle)."""
    try:
        request.FromString(payload)
    except Exception:  # DecodeError: truncated, bad wire type, invalid UTF-8, ...
        return False
    return True


@st.composite
def wire_bytes(draw):
    """Arbitrary bytes, or a real message's bytes cut short or with one byte changed."""
    real = master_pb2.SubmitJobRequest(spec="kind: matmul\nworkers: 3").SerializeToString()
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return draw(st.binary(max_size=96))
    if kind == 1:
        return real[: draw(st.integers(1, len(real) - 1))]
    position = draw(st.integers(0, len(real) - 1))
    return real[:position] + bytes([draw(st.integers(0, 255))]) + real[position + 1:]


@FUZZ
@given(method=st.sampled_from(METHODS), payload=wire_bytes())
def test_raw_bytes_on_the_wire_get_invalid_argument_unless_they_parse(target, method, payload):
    """Bytes straight onto the wire of every RPC of every service: those protobuf cannot read are
    INVALID_ARGUMENT with a message; those it can read are answered like any request (never
    INTERNAL or UNKNOWN). A RegisterWorker that parses is not sent (it would register a worker that
    never was), nor a Health.Watch that parses (it streams until the client goes)."""
    _local, _job, channels = target
    server, path, client_streams, server_streams, request = method
    valid = parses(request, payload)
    if valid and path.endswith(("/RegisterWorker", ".Health/Watch")):
        return  # a real registration, or a health watch that by design never ends
    code = outcome("raw bytes", lambda: raw_call(channels[server], path, client_streams, server_streams, payload))
    if not valid:
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (path, payload)


def test_the_servers_still_serve_after_the_fuzzing(target):
    local, _, channels = target
    for channel in channels.values():
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    with local.client() as client:
        job = client.wait(client.submit(yaml.safe_dump({**BASE_SPEC, "workers": 3, "iterations": 3,
                                                        "code": {"scheme": "cyclic", "stragglers": 1}})).id)
        assert job.state == JobState.SUCCEEDED, job.reason
    assert Path(local.logs).exists()
