"""What one message round trip costs between two processes on this machine: a gRPC bidirectional
stream (grpc.aio and the synchronous API) and the data plane (docs/dataplane.md: the master's
own end against an echo of the worker's frames) against length-prefixed messages on a plain
asyncio TCP connection (uvloop), for a parameter vector of the 12000x100 logistic workload
(101 float64) and for two larger ones (400 KB, 8 MB).

    python -m bench.transport            # 3 repeats of 2000 round trips per point
    python -m bench.transport --quick    # seconds: the smoke test

It bounds what a round of a gradient job can cost: with n workers on the same cores, every round
pays n round trips of the transport on top of the computation. Writes
``bench/results/transport.{csv,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
from grpc import aio

from bench.common import markdown_table, spread
from bench.skeleton import Bench
from coded.wire.frames import Frame, Kind, encode_frame, tensor_meta
from coded.wire.protocol import FrameProtocol

KINDS = ("grpc.aio", "grpc sync", "data plane", "tcp (asyncio)")
#: gRPC's default 4 MiB message limit raised for the 8 MB point (the cluster's is --max-message-mb)
_OPTIONS = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]


def _same(data: bytes) -> bytes:
    return data


async def _serve_grpc(port: int) -> None:
    async def echo(requests: Any, context: Any) -> Any:
        async for message in requests:
            yield message

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo", {"Echo": grpc.stream_stream_rpc_method_handler(echo, _same, _same)})
    server = aio.server(options=_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def _serve_tcp(port: int) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readexactly(4)
            writer.write(head + await reader.readexactly(struct.unpack("<I", head)[0]))

    server = await asyncio.start_server(echo, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


async def _grpc_aio(port: int, payload: bytes, count: int) -> list[float]:
    async with aio.insecure_channel(f"127.0.0.1:{port}", options=_OPTIONS) as channel:
        call = channel.stream_stream("/bench.Echo/Echo", request_serializer=_same, response_deserializer=_same)()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            await call.write(payload)
            await call.read()
            times.append(time.perf_counter() - start)
        await call.done_writing()
        return times


def _grpc_sync(port: int, payload: bytes, count: int) -> list[float]:
    outbox: queue.Queue[bytes | None] = queue.Queue()

    def requests() -> Iterator[bytes]:
        while (message := outbox.get()) is not None:
            yield message

    with grpc.insecure_channel(f"127.0.0.1:{port}", options=_OPTIONS) as channel:
        replies = channel.stream_stream("/bench.Echo/Echo", request_serializer=_same,
                                        response_deserializer=_same)(requests())
        times = []
        for _ in range(count):
            start = time.perf_counter()
            outbox.put(payload)
            next(replies)
            times.append(time.perf_counter() - start)
        outbox.put(None)
        return times


async def _tcp(port: int, payload: bytes, count: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frame = struct.pack("<I", len(payload)) + payload
    times = []
    for _ in range(count):
        start = time.perf_counter()
        writer.write(frame)
        await writer.drain()
        await reader.readexactly(4 + len(payload))
        times.append(time.perf_counter() - start)
    writer.close()
    return times


class _EchoFrames(FrameProtocol):
    """A data-plane end that answers HELLO with READY and each ROUND with its input as one STAGE,
    then DONE: the frames of a worker without the work."""

    def frame_received(self, frame: Frame) -> None:
        if frame.kind is Kind.HELLO:
            self.send(encode_frame(Kind.READY))
        elif frame.kind is Kind.ROUND:
            meta = struct.pack("<Idd", 0, 0.0, 0.0) + frame.meta[8:]
            self.send([*encode_frame(Kind.STAGE, frame.round, meta, frame.payload),
                       *encode_frame(Kind.DONE, frame.round, struct.pack("<I", 0))])
        elif frame.kind is Kind.CLOSE and self.transport is not None:  # no round is under way: end now, as
            self.transport.close()  # a worker does (else the master's close waits out its grace period)

    def refuse(self, error: Exception) -> None:
        raise SystemExit(f"echo: {error}")


async def _serve_frames(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: _EchoFrames(1 << 31), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


async def _data_plane(port: int, payload: bytes, count: int) -> list[float]:
    """The master's own end (coded.master.dataplane) against the echo: one round per message."""
    from coded.master.dataplane import DataConnection
    from coded.master.metrics import OpenCounts

    connection = await DataConnection.open("bench", "127.0.0.1", port, None, None, "", 1 << 31, OpenCounts())
    array = np.frombuffer(payload, np.float64)
    times = []
    for round_id in range(1, count + 1):
        start = time.perf_counter()
        frames = encode_frame(Kind.ROUND, round_id, struct.pack("<q", 0) + tensor_meta(array), array)
        async for _ in connection.start(round_id, frames, 30.0).replies():
            pass
        times.append(time.perf_counter() - start)
    await connection.close()
    return times


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def round_trips(kind: str, size: int, count: int) -> list[float]:
    """Seconds of ``count`` round trips of a ``size``-byte message to an echo server process."""
    import uvloop

    port = _free_port()
    serve = {"grpc.aio": "grpc", "grpc sync": "grpc", "data plane": "frames", "tcp (asyncio)": "tcp"}[kind]
    server = subprocess.Popen([sys.executable, "-m", "bench.transport", "--serve", serve, "--port", str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        payload = b"\x01" * size
        if kind == "grpc sync":
            return _grpc_sync(port, payload, count)
        client = {"grpc.aio": _grpc_aio, "data plane": _data_plane, "tcp (asyncio)": _tcp}[kind]
        return uvloop.run(client(port, payload, count))
    finally:
        server.kill()
        server.wait()


def serving(parser: argparse.ArgumentParser) -> None:
    """The hidden arguments of the process that serves the other end of the round trips."""
    parser.add_argument("--serve", choices=["grpc", "tcp", "frames"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, repeats=3, arguments=serving, watch=False)
    if bench.args.serve:
        import uvloop

        uvloop.run({"grpc": _serve_grpc, "tcp": _serve_tcp, "frames": _serve_frames}[bench.args.serve](bench.args.port))
        return 0
    bench.watch()
    count, repeats = 200 if bench.quick else 2000, bench.repeats
    rows = []
    # the logistic 12000x100 parameters; a 400 KB vector; an 8 MB one (10^6 floats), fewer times
    for size in (101 * 8, 501 * 8 * 100, 8 * 10**6):
        trips = count if size < 10**6 else count // 20
        for kind in KINDS:
            medians = []
            for _ in range(repeats):
                times = sorted(round_trips(kind, size, trips)[trips // 10:])  # without the warm-up
                medians.append(1e6 * times[len(times) // 2])
            summary = spread(medians)
            rows.append({"bytes": size, "transport": kind, "round_trips": trips, "repeats": repeats,
                         "median_us": summary["median"], "low_us": summary["low"], "high_us": summary["high"]})
        tcp = rows[-1]["median_us"]
        for row in rows[-len(KINDS):]:
            row["vs_tcp"] = row["median_us"] / tcp
    bench.finish()
    columns = ["bytes", "transport", "round_trips", "repeats", "median_us", "low_us", "high_us", "vs_tcp"]
    bench.csv("transport.csv", rows, columns)
    bench.page("transport.md", "One message round trip: gRPC and the data plane against plain TCP",
               bench.header("median over repeats of each repeat's median round trip (after 10% warm-up), low-high"),
               [markdown_table(rows, columns)])
    print(markdown_table(rows, columns))
    print(bench.guard.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
