"""Running an asynchronous gradient job (``lwpd``, ``kasync``): no rounds. Every alive worker is
kept busy with one call; messages are applied as they arrive (lwpd: each at once; kasync: the
first K together), and the workers whose messages a step used get the current parameters at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

from coded.codes.verify import finite
from coded.master.calls import CallEnded, Caller, Event, StageArrived
from coded.master.gradient_runner import CodeRunner, Decoded
from coded.master.links import ComputeCall, Params
from coded.master.rounds import Findings
from coded.master.runner import JobFailed

__all__ = ["Arrivals", "AsyncRunner", "Gathered"]


class Arrivals:
    """The calls of an asynchronous job: one under way per busy worker, their events in the order
    they arrive. A worker whose message waits for the step that uses it (:attr:`waiting`) is not
    called again until that step is taken.

    Parameters
    ----------
    caller : Caller
        Starts the calls (the job's runner).
    workers : int
        The job's n.
    """

    def __init__(self, caller: Caller, workers: int) -> None:
        self._caller = caller
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._iterations = [0] * workers  # each worker's calls so far: its next call's number
        self._busy: dict[int, ComputeCall] = {}
        self._launched: dict[int, float] = {}  # when each worker's latest call began
        self.waiting: set[int] = set()

    def call_idle(self, alive: list[int], params: np.ndarray) -> None:
        """Call every alive worker that is neither busy nor waiting, with these parameters."""
        for position in alive:
            if position not in self._busy and position not in self.waiting:
                self._launched[position] = time.perf_counter()
                self._busy[position] = self._caller.call(position, self._iterations[position], Params(params),
                                                         self._events.put_nowait)
                self._iterations[position] += 1

    async def next(self) -> Event:
        """The next event of any call: a message, or a call's end."""
        return await self._events.get()

    def ended(self, event: CallEnded) -> None:
        """A call ended: its worker is idle again (a failed call is counted)."""
        if self._busy.get(event.position) is event.call:  # not a newer call's end
            del self._busy[event.position]
        if event.error is not None:
            self._caller.count(event.position, "failed", None)

    def seconds(self, event: StageArrived) -> float:
        """How long the worker took to send this message (an asynchronous call's one stage)."""
        return event.reply.received_at - self._launched[event.position]

    def close(self) -> None:
        """Stop every call under way."""
        for call in self._busy.values():
            call.stop()
        self._busy.clear()


@dataclass
class Gathered:
    """An asynchronous iteration's arrivals so far: the loss of its steps taken, who sent the
    messages used and their compute seconds, and whose messages were dropped (not finite)."""

    began: float = field(default_factory=time.perf_counter)
    loss: float = 0.0
    responders: list[int] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)

    def outcome(self) -> Decoded:
        """The iteration as its record tells it (no decoded sum: its steps are taken)."""
        findings = Findings(detected=len(self.dropped), located=tuple(sorted(set(self.dropped))))
        return Decoded(np.empty(0), self.responders, self.compute, findings)


class AsyncRunner(CodeRunner):
    """Runs an asynchronous gradient job: a step every ``code.batch`` arrivals, an iteration every
    ``code.arrivals_per_iteration``."""

    def _steps_per_iteration(self) -> int:
        return self.code.arrivals_per_iteration // self.code.batch

    def _can_run(self, positions: list[int]) -> bool:
        """Whether these workers can give a step: ``code.batch`` arrivals."""
        return len(positions) >= self.code.batch

    async def _iterate(self) -> None:
        spec, code = self.spec, self.code
        calls = Arrivals(self, spec.workers)
        gathered, step, arrivals = Gathered(), None, 0  # step: the sum of this step's contributions
        try:
            while self.iteration < spec.iterations:
                alive = self._usable(await self._ensure_workers(lambda alive: bool(self._usable(alive))))
                calls.call_idle(alive, self.params)
                event = await calls.next()
                if isinstance(event, CallEnded):  # the next loop sends this worker new parameters
                    calls.ended(event)
                    continue
                position, message = event.position, event.reply.message
                if spec.checks is not None and not finite(message):
                    gathered.dropped.append(position)  # never applied; the worker gets the parameters again
                    self.count(position, "failed", calls.seconds(event))
                    continue
                self.count(position, "used", calls.seconds(event))
                contribution = code.update(position, message)[: self.model.size + 1]
                step = contribution if step is None else step + contribution
                calls.waiting.add(position)
                gathered.responders.append(position)
                gathered.compute.append(event.reply.compute_seconds)
                arrivals += 1
                if arrivals % code.batch == 0:
                    reg_loss = self._step(step)
                    gathered.loss += step[-1]
                    step = None
                    calls.waiting.clear()
                if arrivals % code.arrivals_per_iteration == 0:
                    loss = float(gathered.loss / self.samples + reg_loss)
                    if await self._complete_iteration(loss, gathered.began, gathered.outcome()):
                        return
                    gathered = Gathered()
        finally:
            calls.close()

    def _step(self, summed: np.ndarray) -> float:
        """The optimizer's step with one batch's sum (gradient and loss); returns the regularizer's
        loss at the parameters it started from."""
        reg_loss, reg_grad = self.model.regularization(self.params)
        share = self.code.batch / self.code.arrivals_per_iteration  # of the regularizer, per step
        self.params = self.optimizer.step(self.params, summed[:-1] / self.samples + reg_grad * share)
        if not finite(self.params):
            raise JobFailed(f"parameters diverged at iteration {self.iteration} (lower optimizer.lr)")
        return reg_loss
