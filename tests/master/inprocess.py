"""The master's core against real worker services in the same process: no gRPC, no subprocesses.

:class:`InProcessLink` implements :class:`coded.master.links.WorkerLink` by calling a real
:class:`coded.worker.service.WorkerService` (and a real CodeNet :class:`PeerHost`) directly, turning
their exceptions into the links' errors through the same statuses as gRPC and the data plane
(:mod:`coded.wire.status`). :class:`Cluster` runs a real :class:`coded.master.service.MasterService`
over such workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.master.job import Job
from coded.master.links import ComputeCall, Params, StageReply, WorkerLink, WorkerUnreachable, call_error
from coded.master.metrics import MasterMetrics
from coded.master.registry import WorkerRegistry
from coded.master.runner import RunnerSettings
from coded.master.service import MasterService
from coded.master.store import JobStore
from coded.ml import pytorch
from coded.wire.status import Status, status_of
from coded.worker.metrics import WorkerMetrics
from coded.worker.service import Stopped, WorkerService
from coded.worker.streams import Orders

from .inprocess_peers import PeerNetwork


@contextlib.contextmanager
def _as_link_errors() -> Iterator[None]:
    """A worker's exceptions as the links' errors, through their statuses as on the wire; one the
    table does not know (INTERNAL) is a bug, and propagates for the test to show."""
    try:
        yield
    except Exception as error:
        status, message = status_of(error)
        if status is Status.INTERNAL:
            raise
        raise call_error(status, message) from None


class InProcessWorker:
    """A worker service and a peer host; ``kill()`` makes it unreachable, as a killed process is;
    ``cut()`` makes it silent, as a host taken off the network is."""

    def __init__(self, address: str, state_dir: Path, peers: PeerNetwork) -> None:
        self.address = address
        self.service = WorkerService(WorkerMetrics())
        self.peers = peers.host(address, state_dir)
        self.alive = True
        self.cut_off = False  # its calls neither reply nor fail, and it stops heartbeating
        self.unserving = False  # its calls fail at once (a data port it cannot serve on), its heartbeats go on
        self.calls: set[InProcessCall] = set()
        self.completed: list[tuple[str, int]] = []  # (job, iteration) of every call that ran to its end
        self.stopped: list[tuple[str, int]] = []
        # awaited with (job, iteration) before each call computes: a gate the test opens (a stop
        # still ends the call meanwhile), instead of a delay that a slow machine could outlast
        self.hold: Callable[[str, int], Awaitable[None]] | None = None
        self.rounds: dict[tuple[str, int], InProcessCall] = {}  # its call of each (job, iteration)

    def check(self) -> None:
        if not self.alive:
            raise WorkerUnreachable(f"worker {self.address} is gone")

    def kill(self) -> None:
        self.alive = False
        for call in list(self.calls):
            call.interrupt()  # the call fails (WorkerUnreachable), as a killed process's does

    def cut(self) -> None:
        """Take it off the network: no reset reaches the master, so its calls under way and any
        later ones stay silent, neither replying nor failing, until the master stops them."""
        self.cut_off = True


class InProcessCall(ComputeCall):
    def __init__(self, worker: InProcessWorker, job_id: str, iteration: int, params: np.ndarray) -> None:
        self._worker, self._job, self._iteration, self._params = worker, job_id, iteration, params
        self.stopping = False
        self.ended = False
        # as the worker's data plane does on a ROUND: what the master says to the round before
        # its computation begins (a WANT sent with the round's start) is kept
        self._orders = Orders()

    async def replies(self) -> AsyncIterator[StageReply]:
        worker = self._worker
        worker.check()
        if worker.unserving:
            raise WorkerUnreachable(f"data plane {worker.address}: connection refused")
        worker.calls.add(self)
        try:
            await self._held()
            await self._silent_if_cut()
            stages = worker.service.compute(self._job, self._iteration, self._params, self._orders)
            with _as_link_errors():
                async with contextlib.aclosing(stages):
                    async for result in stages:
                        if not worker.alive:
                            break
                        await self._silent_if_cut()
                        yield StageReply(result.stage, result.message, result.compute_seconds,
                                         result.delay_seconds, time.perf_counter(), result.piece)
            worker.check()
            worker.completed.append((self._job, self._iteration))
        except Stopped:
            worker.check()  # a killed worker's calls fail; a stopped straggler's end quietly
            worker.stopped.append((self._job, self._iteration))
        finally:
            worker.calls.discard(self)
            self.ended = True

    async def _held(self) -> None:
        """Wait for the worker's gate, if it has one; a stop meanwhile ends the call."""
        if self._worker.hold is None:
            return
        gate = asyncio.ensure_future(self._worker.hold(self._job, self._iteration))
        stop = asyncio.ensure_future(self._orders.stopped.wait())
        done, pending = await asyncio.wait({gate, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if gate not in done:
            raise Stopped("stopped while held")
        gate.result()

    async def _silent_if_cut(self) -> None:
        """A cut-off worker's call: nothing more arrives until the master stops it."""
        if self._worker.cut_off:
            await self._orders.stopped.wait()
            raise Stopped("stopped while cut off")

    def stop(self, idle: bool = False) -> None:
        if not self.stopping:
            self.stopping = True
            self.interrupt()

    def interrupt(self) -> None:
        """End the computation under way (a stopped call ends quietly, a killed worker's fails)."""
        self._orders.stop()

    def have(self, pieces: Sequence[int]) -> None:
        if not self.stopping:
            self._orders.have(pieces)

    def want(self, pieces: Sequence[int]) -> None:
        if not self.stopping:
            self._orders.want(pieces)


class InProcessLink(WorkerLink):
    def __init__(self, worker: InProcessWorker) -> None:
        self._worker = worker
        self.address = worker.address

    async def assign(self, assignment: Assignment, timeout: float) -> tuple[int, ...]:
        self._worker.check()
        with _as_link_errors():
            return await self._worker.service.assign(assignment)

    async def upload(self, job_id: str, arrays: Iterable[tuple[str, np.ndarray]], timeout: float) -> None:
        self._worker.check()
        with _as_link_errors():
            self._worker.service.upload(job_id, {name: np.array(a) for name, a in arrays})

    def compute(self, job_id: str, iteration: int, params: Params, timeout: float) -> ComputeCall:
        # the worker gets a read-only view, as it would get its own copy from the wire
        view = params.form("inprocess", lambda array: np.array(array, copy=True))
        view.flags.writeable = False
        call = self._worker.rounds[(job_id, iteration)] = InProcessCall(self._worker, job_id, iteration, view)
        return call

    async def release(self, job_id: str, timeout: float) -> None:
        self._worker.check()
        self._worker.service.release(job_id)
        await self._worker.peers.release(job_id)

    async def start_peer(self, start: PeerStart, timeout: float) -> None:
        self._worker.check()
        with _as_link_errors():
            self._worker.peers.start(start)

    async def peer_status(self, job_id: str, timeout: float) -> PeerStatus:
        self._worker.check()
        with _as_link_errors():
            return self._worker.peers.peer(job_id).status()

    async def fetch_block(self, job_id: str, layer: int, version: int, timeout: float) -> np.ndarray:
        self._worker.check()
        with _as_link_errors():
            return await self._worker.peers.peer(job_id).block(layer, version)

    async def close(self) -> None:
        pass


class Cluster:
    """A master service with ``count`` in-process workers named worker-0, worker-1, ...

    With ``liveness`` (seconds), a worker counts as gone after that long without a heartbeat, and
    every worker neither killed nor cut off heartbeats four times as often; without, workers never
    lapse.
    """

    def __init__(self, count: int, state_dir: Path, models: Sequence[str] | None = None,
                 liveness: float | None = None) -> None:
        network = PeerNetwork()
        self.workers = {f"worker-{i}": InProcessWorker(f"inproc-{i}", state_dir / f"worker-{i}", network)
                        for i in range(count)}
        by_address = {w.address: w for w in self.workers.values()}
        self.registry = WorkerRegistry(lambda address: InProcessLink(by_address[address]),
                                       timeout=1e9 if liveness is None else liveness)
        self._liveness = liveness
        self._heartbeats: asyncio.Task | None = None
        self.metrics = MasterMetrics()
        self.service = MasterService(JobStore(state_dir / "master"), self.registry, self.metrics, RunnerSettings())
        # what the workers register with: by default what a worker in this process would list
        self.models = [f"torch/{name}" for name in pytorch.architectures()] if models is None else list(models)

    async def start(self) -> Cluster:
        for name, worker in self.workers.items():
            await self.registry.register(name, worker.address, self.models)
        if self._liveness is not None:
            self._heartbeats = asyncio.create_task(self._beat(self._liveness / 4))
        return self

    async def _beat(self, period: float) -> None:
        """Heartbeat every worker that could reach the master, every ``period`` seconds, as
        worker processes do."""
        while True:
            for name, worker in self.workers.items():
                if worker.alive and not worker.cut_off:
                    await self.registry.heartbeat(name, len(worker.calls))
            await asyncio.sleep(period)

    async def run(self, spec: str, files: Mapping[str, bytes] | None = None, timeout: float = 120.0) -> Job:
        """Submit a job and wait for its end."""
        job = await submit(self.service, spec, files or {})
        assert job.task is not None
        await asyncio.wait_for(asyncio.shield(job.task), timeout)
        return job

    def reply_last(self, position: int) -> None:
        """Make the worker at ``position`` of every later job reply last: each of its calls waits
        until every other call of the same iteration has ended or been stopped (the master makes
        a round's calls together, before any of them runs). The slowest worker by construction,
        on a machine of any speed."""
        for name, worker in self.workers.items():
            worker.hold = functools.partial(self._last, name, position)

    async def _last(self, name: str, position: int, job_id: str, iteration: int) -> None:
        if self.service.get(job_id).stored.workers.index(name) != position:
            return
        others = [w.rounds[(job_id, iteration)] for w in self.workers.values()
                  if w is not self.workers[name] and (job_id, iteration) in w.rounds]
        while not all(call.ended or call.stopping for call in others):
            await asyncio.sleep(0.001)

    def worker(self, position: int, job: Job) -> InProcessWorker:
        """The worker at ``position`` of a job."""
        return self.workers[job.stored.workers[position]]

    async def close(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.cancel()
        await self.service.close()


async def submit(service: MasterService, spec: str, files: Mapping[str, bytes]) -> Job:
    """Submit a job with files as the gRPC servicer does: written to a staging directory first."""
    with service.store.staging() as directory:
        staged = {}
        for index, (name, data) in enumerate(files.items()):
            staged[name] = directory / str(index)
            staged[name].write_bytes(data)
        return await service.submit(spec, staged)


def refusal(state_dir: Path, spec: str, files: Mapping[str, bytes], error: type[Exception], workers: int = 4,
            models: Sequence[str] | None = None) -> str:
    """The message of a submission the master refuses with ``error``; asserts it left no job."""

    async def main() -> str:
        cluster = await Cluster(workers, state_dir, models).start()
        try:
            try:
                await submit(cluster.service, spec, files)
            except error as refused:
                assert cluster.service.jobs() == []
                return str(refused)
            raise AssertionError(f"the master accepted the job; expected {error.__name__}")
        finally:
            await cluster.close()

    return asyncio.run(main())
