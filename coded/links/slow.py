"""Slow links as a fault: which hosts' links run at a fraction of their rate, step by step, drawn
from a seed (``SlowLinks``, pure); and ``SlowLinkDriver``, which applies such a schedule to links as
time passes (``Network.change``), so that a benchmark can give every system it compares the same
slow links.

Usage::

    schedule = SlowLinks(["worker-0", "worker-1", "worker-2"], "100mbit", factor=10, slow=1, every_s=5, seed=3)
    schedule.slow_at(0)          # frozenset({'worker-2'}): it runs at 10mbit for the first 5 s
    with SlowLinkDriver(schedule, network.change):
        ...                      # a job runs while the slow link moves from worker to worker
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from coded.links.netns import parse_rate

__all__ = ["SlowLinkDriver", "SlowLinks"]

log = logging.getLogger(__name__)


class SlowLinks:
    """A seeded schedule of slow links: at step k (the k-th ``every_s`` seconds), the hosts of
    ``slow_at(k)`` run at ``rate / factor``, the others at ``rate``.

    Parameters
    ----------
    hosts : sequence of str
        The hosts whose links the schedule slows (the workers).
    rate : str or int
        Their links' rate: tc-style text ("100mbit") or bits per second.
    factor : float
        A slow link runs ``factor`` times slower (> 1).
    slow : int or sequence of str
        How many hosts are slow at a time, drawn from the seed; or which ones (always the same).
    every_s : float, optional
        Draw the slow hosts again every ``every_s`` seconds; None: the same hosts all the time.
    seed : int
        The draws: step k's is a function of (seed, k) alone, so a replay is the same schedule.

    Raises
    ------
    ValueError
        A count or a host out of range, a factor <= 1, ``every_s`` <= 0, or named hosts with
        ``every_s`` (named hosts are fixed).
    """

    def __init__(self, hosts: Sequence[str], rate: str | int, factor: float, slow: int | Sequence[str],
                 every_s: float | None = None, seed: int = 0) -> None:
        self.hosts = tuple(hosts)
        if not self.hosts or len(set(self.hosts)) != len(self.hosts):
            raise ValueError(f"hosts must be distinct, and at least one (got {list(self.hosts)})")
        self.rate = parse_rate(rate) if isinstance(rate, str) else int(rate)
        if not factor > 1:
            raise ValueError(f"factor must be > 1: a slow link runs factor times slower (got {factor})")
        self.factor = factor
        if every_s is not None and not every_s > 0:
            raise ValueError(f"every_s must be > 0 seconds, or None for the same slow hosts all the time "
                             f"(got {every_s})")
        self.every_s = every_s
        self.seed = seed
        self.named: frozenset[str] | None = None
        if isinstance(slow, int):
            if not 0 <= slow <= len(self.hosts):
                raise ValueError(f"slow must be 0 to {len(self.hosts)} hosts (got {slow})")
            self.count = slow
        else:
            self.named = frozenset(slow)
            unknown = sorted(self.named - set(self.hosts))
            if unknown or len(self.named) != len(slow):
                raise ValueError(f"slow hosts must be distinct hosts of {list(self.hosts)} (got {list(slow)})")
            if every_s is not None:
                raise ValueError("named slow hosts are slow all the time: give a count to draw them every_s")
            self.count = len(self.named)

    @property
    def slow_rate(self) -> int:
        """The rate of a slow link, bits per second."""
        return int(self.rate / self.factor)

    def step_at(self, elapsed_s: float) -> int:
        """The step ``elapsed_s`` seconds after the schedule started (always 0 when fixed)."""
        return 0 if self.every_s is None else int(max(elapsed_s, 0.0) // self.every_s)

    def slow_at(self, step: int) -> frozenset[str]:
        """The hosts whose links are slow at ``step``."""
        if self.named is not None:
            return self.named
        draw = np.random.default_rng([self.seed, 0 if self.every_s is None else step])
        return frozenset(self.hosts[i] for i in draw.choice(len(self.hosts), self.count, replace=False))

    def rates_at(self, step: int) -> dict[str, int]:
        """Every host's rate at ``step``, bits per second."""
        slow = self.slow_at(step)
        return {host: self.slow_rate if host in slow else self.rate for host in self.hosts}

    def changes(self, before: int | None, step: int) -> dict[str, int]:
        """The rates to set when the schedule goes from step ``before`` to ``step`` (every host's
        when ``before`` is None: at the start)."""
        now = self.rates_at(step)
        if before is None:
            return now
        then = self.rates_at(before)
        return {host: rate for host, rate in now.items() if rate != then[host]}


class SlowLinkDriver:
    """Applies a ``SlowLinks`` schedule as time passes: ``start`` sets the first step's rates at
    once; a changing schedule's next steps are set by a thread at their start (a step missed by a
    busy machine is skipped: the rates always follow the clock). A context manager.

    Parameters
    ----------
    schedule : SlowLinks
    apply : callable
        Sets one host's rate, in bits per second (``Network.change``).
    clock : callable
        Seconds, monotonic.
    """

    def __init__(self, schedule: SlowLinks, apply: Callable[[str, int], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.schedule = schedule
        self._apply = apply
        self._clock = clock
        self.applied: list[tuple[int, frozenset[str]]] = []  # each step set, with its slow hosts
        self.error: BaseException | None = None  # what the thread could not apply; raised by stop()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def __enter__(self) -> SlowLinkDriver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _set(self, before: int | None, step: int) -> None:
        for host, rate in self.schedule.changes(before, step).items():
            self._apply(host, rate)
        self.applied.append((step, self.schedule.slow_at(step)))

    def start(self) -> None:
        """Set step 0's rates (errors raise here), then follow the schedule in a thread."""
        self._started = self._clock()
        self._set(None, 0)
        if self.schedule.every_s is not None:
            self._thread = threading.Thread(target=self._follow, name="coded-slow-links", daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        every = self.schedule.every_s
        assert every is not None
        step = 0
        try:
            while True:
                wait = (step + 1) * every - (self._clock() - self._started)
                if self._stopping.wait(max(wait, 0.0)):
                    return
                now = self.schedule.step_at(self._clock() - self._started)
                if now != step:
                    self._set(step, now)
                    step = now
        except Exception as error:  # a link tc refused: kept for stop(), the schedule ends here
            log.exception("slow links: step %d could not be applied", step + 1)
            self.error = error

    def stop(self) -> None:
        """Stop following the schedule (the links keep their last rates).

        Raises
        ------
        Exception
            What the thread could not apply.
        """
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise self.error
