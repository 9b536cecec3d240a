"""Registered workers, their liveness, and a link to each."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from coded.base.errors import AlreadyExists, NotFound
from coded.master.links import LinkFactory, WorkerLink

__all__ = ["UNUSABLE_AFTER", "WorkerInfo", "WorkerRecord", "WorkerRegistry"]

log = logging.getLogger(__name__)

MAX_MODELS = 256
#: Calls in a row that find a worker unreachable while it heartbeats (its data plane refused, a TLS
#: name that does not match, a firewalled port) after which it is unusable: its heartbeats no
#: longer bring it back, so a job that cannot do without it stops waiting on it (timeouts.paused_s)
#: instead of pausing and resuming for ever. A worker that registers again (restarted) is tried again.
UNUSABLE_AFTER = 3
#: a worker's link rate is the median of its latest LINK_SAMPLES replies' of at least LINK_MIN_BYTES
#: (a smaller reply fits in a shaper's bucket, 4 ms of its rate, and the kernel's buffers)
LINK_SAMPLES, LINK_MIN_BYTES = 20, 256 * 1024


@dataclass
class WorkerRecord:
    name: str
    address: str
    last_seen: float
    link: WorkerLink
    down: bool = False               # a call found it unreachable; cleared by its next heartbeat
    jobs: set[str] = field(default_factory=set)
    running_calls: int = 0
    generation: int = 0              # bumps on every registration of a new process: it may have lost its state
    incarnation: str = ""            # the process's own tag, as it registered ("": not told)
    models: frozenset[str] = frozenset()  # what it can compute beyond numpy models ("torch/<name>")
    memory: tuple[int, int] = (0, 0)  # (resident, peak) bytes, as its last heartbeat said; 0: not known
    machine: str = ""                # the machine it runs on, as it registered ("": not told)
    failures: int = 0                # calls in a row that found it unreachable while it heartbeated
    unusable: str = ""               # why it is unusable (UNUSABLE_AFTER failures); "" while it is not
    #: its link's rate (bits per second) as its latest large replies crossed it
    link_rates: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=LINK_SAMPLES))


@dataclass(frozen=True)
class WorkerInfo:
    """What a client is told about one worker."""

    name: str
    address: str
    alive: bool
    last_seen_s: float  # seconds since its last heartbeat
    jobs: tuple[str, ...]
    models: tuple[str, ...] = ()
    resident_bytes: int = 0       # as its last heartbeat said; 0: not known
    peak_resident_bytes: int = 0
    unusable: str = ""            # why its heartbeats no longer make it alive; "" while they do
    link_bits_per_s: float = 0.0  # its link's measured rate (the median of its latest replies'); 0: not measured


class WorkerRegistry:
    """Workers known to the master. A worker is alive while it heartbeats and calls reach it.

    Parameters
    ----------
    connect : callable
        Makes the link to a worker from its address.
    timeout : float
        Seconds without a heartbeat after which a worker counts as gone.
    authenticated : bool
        Whether registrations carry the cluster's token. Only then may a registration take over
        the name of a live worker at another address; otherwise anyone who reaches the master
        could divert a worker's calls to an address of their choosing.
    """

    def __init__(self, connect: LinkFactory, timeout: float = 3.0,
                 clock: Callable[[], float] = time.monotonic, authenticated: bool = False) -> None:
        self._connect = connect
        self._authenticated = authenticated
        self.timeout = timeout
        self._clock = clock
        self._workers: dict[str, WorkerRecord] = {}
        self._changed = asyncio.Condition()
        self._notifying: set[asyncio.Task] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._workers

    def get(self, name: str) -> WorkerRecord:
        record = self._workers.get(name)
        if record is None:
            raise NotFound(f"unknown worker {name!r}")
        return record

    def all(self) -> list[WorkerRecord]:
        return sorted(self._workers.values(), key=lambda r: r.name)

    async def register(self, name: str, address: str, models: Iterable[str] = (), machine: str = "",
                       incarnation: str = "") -> WorkerRecord:
        if not name or not address or len(name) > 256 or len(address) > 256:
            raise ValueError("a worker registers with a non-empty name and host:port address (<= 256 chars)")
        if len(incarnation) > 64:
            raise ValueError("a worker's incarnation is at most 64 characters")
        models = frozenset(models)
        if len(models) > MAX_MODELS or any(not m or len(m) > 128 for m in models):
            raise ValueError(f"a worker lists at most {MAX_MODELS} models of 1 to 128 characters")
        record = self._workers.get(name)
        if record is not None and record.address != address and self.alive(name) and not self._authenticated:
            raise AlreadyExists(f"worker {name!r} is registered and alive at {record.address}; a worker of "
                                "that name can take over once it is gone (or with the cluster's token)")
        if record is not None and record.address != address:
            await record.link.close()
            record = None
        if record is None:
            record = WorkerRecord(name, address, self._clock(), self._connect(address))
            self._workers[name] = record
        record.last_seen = self._clock()
        record.down = False
        record.failures, record.unusable = 0, ""
        if not incarnation or incarnation != record.incarnation:  # the same process keeps what it was given
            record.generation += 1
        record.incarnation = incarnation
        record.models = models
        record.machine = machine[:256]
        await self._notify()
        return record

    def on_machine(self, machine: str) -> int:
        """Alive workers on ``machine`` (they share its cores)."""
        return sum(1 for name, record in self._workers.items() if record.machine == machine and self.alive(name))

    async def heartbeat(self, name: str, running_calls: int, memory: tuple[int, int] = (0, 0)) -> None:
        """A worker is alive, running ``running_calls`` rounds, and holds ``memory`` (resident,
        peak bytes; 0 where it cannot tell)."""
        record = self._workers.get(name)
        if record is None:
            raise NotFound(f"unknown worker {name!r}: register first")
        was_alive = self.alive(name)
        record.last_seen = self._clock()
        record.down = False
        record.running_calls = running_calls
        record.memory = memory
        if not was_alive:
            await self._notify()

    def alive(self, name: str) -> bool:
        record = self._workers.get(name)
        return (record is not None and not record.down and not record.unusable
                and self._clock() - record.last_seen <= self.timeout)

    def unusable(self) -> dict[str, str]:
        """The workers whose heartbeats arrive but whose calls failed UNUSABLE_AFTER times in a row: why."""
        return {name: record.unusable for name, record in self._workers.items() if record.unusable}

    def served(self, name: str) -> None:
        """A call to worker ``name`` ended well: its run of failures, if any, is over."""
        record = self._workers.get(name)
        if record is not None:
            record.failures = 0

    def lapses_in(self, name: str) -> float:
        """Seconds until worker ``name`` counts as gone unless it heartbeats first (0 once it is
        gone, marked down, or unknown)."""
        record = self._workers.get(name)
        if record is None or record.down or record.unusable:
            return 0.0
        return max(0.0, record.last_seen + self.timeout - self._clock())

    async def mark_down(self, name: str, reason: str = "") -> None:
        if self.set_down(name, reason):
            await self._notify()

    def set_down(self, name: str, reason: str = "") -> bool:
        """Count a worker as gone now (a call found it unreachable, for ``reason``); waiters hear of
        it soon after. While its heartbeats arrive the call's failure counts toward UNUSABLE_AFTER.
        True when it was alive until now."""
        record = self._workers.get(name)
        if record is None:
            return False
        if reason and self._clock() - record.last_seen <= self.timeout:
            record.failures += 1
            if record.failures >= UNUSABLE_AFTER and not record.unusable:
                record.unusable = (f"its heartbeats arrive but {record.failures} calls in a row failed; "
                                   f"the last: {reason}")
                log.warning("worker %s is unusable until it registers again: %s", name, record.unusable)
        if record.down:
            return False
        record.down = True
        task = asyncio.get_running_loop().create_task(self._notify())
        self._notifying.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._notifying.discard)
        return True

    def _eligible(self, needs: str | None) -> list[WorkerRecord]:
        return [r for r in self._workers.values() if self.alive(r.name) and (needs is None or needs in r.models)]

    def available(self, needs: str | None = None) -> int:
        """How many alive workers list ``needs`` among their models (every alive one without it)."""
        return len(self._eligible(needs))

    def choose(self, count: int, needs: str | None = None) -> list[str] | None:
        """``count`` alive workers (that list ``needs`` among their models), least loaded first; None
        when there are not enough."""
        alive = self._eligible(needs)
        if len(alive) < count:
            return None
        alive.sort(key=lambda r: (len(r.jobs), r.name))
        return [r.name for r in alive[:count]]

    def liveness(self) -> dict[str, bool]:
        """Every registered worker's name and whether it is alive."""
        return {name: self.alive(name) for name in list(self._workers)}

    def info(self) -> list[WorkerInfo]:
        """Every registered worker, by name."""
        now = self._clock()
        return [WorkerInfo(r.name, r.address, self.alive(r.name), now - r.last_seen, tuple(sorted(r.jobs)),
                           tuple(sorted(r.models)), *r.memory, r.unusable,
                           statistics.median(r.link_rates) if r.link_rates else 0.0) for r in self.all()]

    def observe_link(self, name: str, size: int, seconds: float) -> None:
        """A reply of ``size`` bytes crossed worker ``name``'s link in ``seconds`` (from its first
        bytes to its last). Only replies of at least ``LINK_MIN_BYTES`` count: a smaller one fits in
        a shaper's bucket and the kernel's buffers, and its trip says nothing of the rate."""
        if size >= LINK_MIN_BYTES and seconds > 0 and name in self._workers:
            self._workers[name].link_rates.append(8 * size / seconds)
    async def wait_change(self, timeout: float) -> None:
        """Return when a worker registers, returns or goes down, or after ``timeout`` seconds."""
        async with self._changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        for record in self._workers.values():
            await record.link.close()
