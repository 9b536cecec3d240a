"""The master's data plane to one worker: its connections, one per job, and when to open them again.

A job's connection opens at its first round on the worker (:mod:`coded.master.dataplane`) and
carries every later round; it is replaced when it broke, when the worker moved (a restarted worker
listens on another port) or took another position in the job (a port reused by another of the
job's workers), and closed when the worker releases the job. Where the worker listens comes from
its assignment (:meth:`DataConnections.assigned`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Sequence

from coded.master.dataplane import STOP_GRACE_S, DataConnection
from coded.master.links import (
    ComputeCall,
    Params,
    StageReply,
    WorkerCallError,
    WorkerForgotJob,
    WorkerRefused,
    WorkerUnreachable,
)
from coded.master.metrics import OpenCounts
from coded.master.shared import SharedMemory

__all__ = ["DataConnections"]


class DataConnections:
    """The data-plane connections of one worker, by job.

    Parameters
    ----------
    address : str
        The worker's gRPC address ("host:port"); its data plane listens on the same host.
    token : str or None
        The cluster's token, said in every HELLO.
    tls : callable
        Makes the TLS context of a new connection (None without TLS).
    server_name : str
        The name the worker's certificate must have.
    max_payload : int
        Largest payload accepted from the worker, in bytes.
    held : OpenCounts
        The master's counts of what it holds open, which each connection joins while open.
    shared : SharedMemory, optional
        The master's shared memory, offered on the worker's local socket when it takes it.
    """

    def __init__(self, address: str, token: str | None, tls: Callable[[], ssl.SSLContext | None], server_name: str,
                 max_payload: int, held: OpenCounts, shared: SharedMemory | None = None) -> None:
        self.address = address
        self._token, self._tls, self._server_name, self._max = token, tls, server_name, max_payload
        self._held = held
        self._shared = shared
        self._port = 0  # the worker's data plane, as its last assignment said
        self._socket = ""  # ... and its local (Unix) socket, tried first
        self._shares = False  # ... where it takes shared memory
        self._positions: dict[str, int] = {}  # the worker's position in each job it was assigned
        self._connections: dict[str, asyncio.Future[DataConnection]] = {}  # by job, opened or opening

    def assigned(self, job_id: str, position: int, port: int, local: str, shares: bool = False) -> None:
        """The worker took ``position`` in a job and listens on ``port`` (and the local socket
        ``local``, "" without one, where it takes shared memory when it ``shares``).

        Raises
        ------
        WorkerRefused
            When the port is no port: the worker has no data plane.
        """
        if not 0 < port < 65536:
            raise WorkerRefused(f"the worker at {self.address} has no data plane (data_port {port})")
        self._port, self._socket, self._shares = port, local, shares
        self._positions[job_id] = position

    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        """Start one round of a job on the worker (opening the job's connection first if needed)."""
        opening = self._connections.get(job_id)
        if opening is None or not self._usable(opening, job_id):
            stale = _opened(opening) if opening is not None else None
            if stale is not None:
                stale.fail(WorkerUnreachable("replaced: the worker moved or took another position"))
            opening = self._connections[job_id] = asyncio.ensure_future(self._connect(job_id))
        if opening.done():
            return opening.result().start_round(params, iteration, timeout)
        return _Connecting(opening, params, iteration, timeout)

    async def release(self, job_id: str, timeout: float = STOP_GRACE_S) -> None:
        """Close a job's connection (its rounds stop first) and forget the job."""
        self._positions.pop(job_id, None)
        opening = self._connections.pop(job_id, None)
        if opening is None:
            return
        if not opening.done():
            opening.cancel()  # it aborts what it had opened
            return
        connection = _opened(opening)
        if connection is not None:
            await connection.close(timeout)

    async def close(self) -> None:
        """Close every connection."""
        await asyncio.gather(*(self.release(job) for job in list(self._connections)))

    def _usable(self, opening: asyncio.Future[DataConnection], job_id: str) -> bool:
        """Whether a job's connection (opened or opening) still goes to the worker as it was last
        assigned: a restarted worker listens on another port, and a port can be reused by another
        worker of the same job."""
        if not opening.done():
            return True
        connection = _opened(opening)
        return (connection is not None and connection.broken is None and connection.port == self._port
                and connection.position == self._positions.get(job_id))

    async def _connect(self, job_id: str) -> DataConnection:
        if not self._port or job_id not in self._positions:
            raise WorkerForgotJob("the worker's data plane is not known yet: assign the job first")
        host = self.address.rpartition(":")[0].strip("[]")
        return await DataConnection.open(job_id, host, self._port, self._token, self._tls(), self._server_name,
                                         self._max, self._held, self._positions[job_id], local=self._socket,
                                         shared=self._shared if self._shares else None)


def _opened(opening: asyncio.Future[DataConnection]) -> DataConnection | None:
    """The connection, once it has opened; None while it opens, or when opening failed or was cancelled."""
    if not opening.done() or opening.cancelled() or opening.exception() is not None:
        return None
    return opening.result()


class _Connecting(ComputeCall):
    """A round whose connection is still opening: it starts once the connection is up."""

    def __init__(self, opening: asyncio.Future[DataConnection], params: Params, iteration: int, timeout: float) -> None:
        self._opening = opening
        self._params = params
        self._iteration = iteration
        self._timeout = timeout
        self._call: ComputeCall | None = None
        self._said: list[tuple[str, Sequence[int]]] = []  # HAVE and WANT before the round started
        self.stopping = False

    async def replies(self) -> AsyncIterator[StageReply]:
        try:
            connection = await asyncio.shield(self._opening)
        except WorkerCallError:
            if self.stopping:
                return
            raise
        except asyncio.CancelledError:
            if not self._opening.cancelled():
                raise  # this round itself was cancelled
            if self.stopping:
                return
            raise WorkerUnreachable("the connection was closed while it opened (released, or the worker moved)") \
                from None
        if self.stopping:
            return
        self._call = connection.start_round(self._params, self._iteration, self._timeout)
        for what, pieces in self._said:
            getattr(self._call, what)(pieces)
        async for reply in self._call.replies():
            yield reply

    def stop(self, idle: bool = False) -> None:
        self.stopping = True
        if self._call is not None:
            self._call.stop(idle)

    def received_within(self, seconds: float) -> bool:
        return self._call is not None and self._call.received_within(seconds)

    def have(self, pieces: Sequence[int]) -> None:
        if self._call is None:
            self._said.append(("have", pieces))
        else:
            self._call.have(pieces)

    def want(self, pieces: Sequence[int]) -> None:
        if self._call is None:
            self._said.append(("want", pieces))
        else:
            self._call.want(pieces)
