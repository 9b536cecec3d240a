"""The master's logic, independent of gRPC: jobs, watchers, workers, recovery after restart."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import numpy as np

from coded.base.errors import Conflict, NotFound, TooLarge, Unsupported
from coded.base.machine import cores, machine_id
from coded.base.memory import release_free_memory
from coded.jobs.replies import DEFAULT_LINK_BITS_PER_S
from coded.jobs.round_costs import Placement, Rates, calibrate
from coded.jobs.spec import (
    JobSpec,
    JobSpecError,
    parse_job,
    to_json,
    worker_needs,
)
from coded.master.job import STATES, TERMINAL, WATCH_BUFFER, Job, JobEvent
from coded.master.metrics import MasterMetrics
from coded.master.registry import WorkerRegistry
from coded.master.runner import RunnerSettings, never_enough, pending_reason
from coded.master.runners import runner_for
from coded.master.store import JobStore, Record, StoredJob
from coded.master.submission import check_inputs
from coded.master.verification import verification_of
from coded.ml import pytorch

__all__ = ["MasterService"]

log = logging.getLogger(__name__)


class MasterService:
    """Jobs and workers of one master.

    Parameters
    ----------
    store : JobStore
    registry : WorkerRegistry
    metrics : MasterMetrics
    settings : RunnerSettings
    heartbeat_interval : float
        Seconds between worker heartbeats (told to each worker at registration).
    max_jobs : int
        Jobs that may be unfinished at once; more are refused (TooLarge).
    """

    def __init__(self, store: JobStore, registry: WorkerRegistry, metrics: MasterMetrics,
                 settings: RunnerSettings = RunnerSettings(), heartbeat_interval: float = 1.0,
                 max_jobs: int = 256) -> None:
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.settings = settings
        self.heartbeat_interval = heartbeat_interval
        self.max_jobs = max_jobs
        self._jobs: dict[str, Job] = {}
        self._measured: Rates | None = None  # this machine's rates, for the rounds' predictions

    def state_counts(self) -> dict[str, int]:
        """Jobs by state (every state, zeros included)."""
        counts = dict.fromkeys(STATES, 0)
        for job in self._jobs.values():
            counts[job.state] += 1
        return counts

    # --- recovery ----------------------------------------------------------------------------------

    async def recover(self) -> None:
        """Load every stored job; resume the unfinished ones from their checkpoints."""
        for stored in self.store.load_all():
            try:  # a finished job never runs again: its code is not built
                spec = parse_job(stored.spec, build_code=stored.state not in TERMINAL)
            except JobSpecError as error:
                stored.state, stored.reason = "FAILED", f"stored spec no longer valid: {error}"
                self.store.save(stored)
                spec = None
            job = Job(stored, spec)  # type: ignore[arg-type]
            self._jobs[stored.id] = job
            if stored.state not in TERMINAL and spec is not None:
                log.info("resuming job %s (%s at iteration %d)", stored.id, stored.state, stored.iteration)
                self._start(job)

    # --- jobs ----------------------------------------------------------------------------------------

    async def submit(self, text: str, files: Mapping[str, Path]) -> Job:
        """Validate and start a job. ``files`` are the uploaded files by the names the spec gives
        them, written in a :meth:`JobStore.staging` directory: an accepted job's are moved to its
        state; a refused job's are left where they are."""
        def uploaded(name: str) -> str | None:
            return None if name in files else f"file {name!r} named in the spec was not uploaded with the job"

        # validation builds the job's code (kept with the spec for its runner), which can take
        # seconds: off the event loop
        spec = await asyncio.to_thread(parse_job, text, uploaded)
        wanted = spec.files()
        extra = sorted(set(files) - set(wanted))
        if extra:
            raise JobSpecError(f"spec: uploaded file {extra[0]!r} is not named in the spec")
        if sum(not job.done for job in self._jobs.values()) >= self.max_jobs:
            raise TooLarge(f"the master already runs {self.max_jobs} unfinished jobs")
        self._check_workers_can(spec)
        never = never_enough(self.settings, self.registry, spec)
        if never is not None:
            raise Unsupported(never)
        job_id = uuid.uuid4().hex[:12]
        stored = StoredJob(job_id, spec.kind, to_json(spec), "PENDING", spec.iterations, time.time(),
                           reason=pending_reason(spec, self.registry.available(worker_needs(spec))))
        try:  # the row comes last: a refused submission leaves no job behind, even after a restart
            paths = {name: self.store.keep_file(job_id, index, files[name]) for index, name in enumerate(wanted)}
            checked = await asyncio.to_thread(check_inputs, spec, paths, self._rates, self._placement(spec))
            release_free_memory()  # what reading the data left in the threads' heaps, before the job reads them again
            spec = checked.spec
            stored.spec = to_json(spec)
            stored.checks = {"verification": verification_of(spec).as_dict()}
            if checked.replies is not None:
                stored.checks["replies"] = checked.replies.as_dict()
            if checked.warnings:
                stored.checks["warnings"] = list(checked.warnings)
            self.store.create(stored)
        except BaseException:
            self.store.discard(job_id)
            raise
        job = Job(stored, spec)
        self._jobs[job_id] = job
        self._start(job)
        return job

    def _rates(self) -> Rates:
        """This machine's rates, measured at the first gradient job's submission (in its check's
        thread: about 30 ms) and kept."""
        if self._measured is None:
            self._measured = calibrate()
        return self._measured

    def _placement(self, spec: JobSpec) -> Placement:
        """Where the job's processes will run: the alive workers on this machine (all of the job's
        that can be) share its cores; the links as the master was told."""
        local = min(self.registry.on_machine(machine_id()), spec.workers)
        link = self.settings.link_bits_per_s
        if link is None and local < spec.workers:  # workers elsewhere, links not told: a data centre's
            link = DEFAULT_LINK_BITS_PER_S
        return Placement(local, cores(), link)

    def _check_workers_can(self, spec: JobSpec) -> None:
        """Refuse a job that needs what the master or the live workers lack (PyTorch, an
        architecture), rather than leave it PENDING until its timeout. Workers may still be on their
        way: a job is refused only when live workers that lack it are why there are too few."""
        needs = worker_needs(spec)
        if needs is None:
            return
        if not pytorch.available():
            raise Unsupported(f"model.type: torch needs PyTorch on the master, which lacks it: {pytorch.INSTALL}")
        known = pytorch.architectures()
        if needs.removeprefix("torch/") not in known:
            raise JobSpecError(f"model.name: unknown architecture {needs.removeprefix('torch/')!r} (the master has: "
                               f"{', '.join(sorted(known))})")
        records = [r for r in self.registry.all() if self.registry.alive(r.name)]
        lacking = [r.name for r in records if needs not in r.models]
        if lacking and len(records) - len(lacking) < spec.workers:
            torchless = [r.name for r in records if not any(m.startswith("torch/") for m in r.models)]
            what = (f"PyTorch ({pytorch.INSTALL}; {pytorch.RESTART})" if torchless
                    else "the architecture (its plugin package)")
            raise Unsupported(f"model.name: {needs} runs on {len(records) - len(lacking)} of the {len(records)} live "
                              f"workers, and the job needs {spec.workers}; {', '.join(sorted(lacking)[:5])}"
                              f"{' and others' if len(lacking) > 5 else ''} lack {what}")

    def _files(self, job: Job) -> dict[str, Path]:
        return {name: self.store.file_path(job.id, index) for index, name in enumerate(job.spec.files())}

    def _start(self, job: Job) -> None:
        kind = runner_for(job.spec)  # a gradient job's replies were chosen at submission
        runner = kind(job, self.store, self.registry, self.metrics, self.settings, self._files(job))
        job.task = asyncio.create_task(runner.run(), name=f"job-{job.id}")
        # once the task is done its runner is gone, and with it the job's arrays: their pages go
        # back to the system then (trimmed inside the runner, they were still in use)
        job.task.add_done_callback(lambda _: release_free_memory())

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"unknown job {job_id!r}")
        return job

    def history(self, job: Job) -> list[Record]:
        return self.store.history(job.id)

    def jobs(self) -> list[Job]:
        return sorted(self._jobs.values(), key=lambda j: j.stored.created)

    async def watch(self, job_id: str) -> AsyncIterator[JobEvent]:
        """The current state, then every change, until the job ends: the last event a watcher gets
        is the job's terminal state."""
        job = self.get(job_id)
        queue: asyncio.Queue[JobEvent] = asyncio.Queue(maxsize=WATCH_BUFFER)
        job.watchers.add(queue)
        try:
            event = JobEvent(job.snapshot())
            yield event
            # not `while not job.done`: the terminal event may still be queued when the job is done
            while event.job.state not in TERMINAL:
                event = await queue.get()
                yield event
        finally:
            job.watchers.discard(queue)

    async def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.done:
            return job
        job.cancel_requested = True
        if job.task is not None:
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)
        return job

    def result(self, job_id: str) -> dict[str, np.ndarray]:
        job = self.get(job_id)
        if job.state != "SUCCEEDED":
            raise Conflict(f"job {job_id} is {job.state}; results exist for SUCCEEDED jobs")
        return self.store.load_result(job_id)

    # --- workers -------------------------------------------------------------------------------------

    async def register_worker(self, name: str, address: str, models: tuple[str, ...] = (), machine: str = "",
                              incarnation: str = "") -> None:
        await self.registry.register(name, address, models, machine, incarnation)

    async def heartbeat(self, name: str, running_calls: int, memory: tuple[int, int] = (0, 0)) -> None:
        await self.registry.heartbeat(name, running_calls, memory)

    def quarantined_by(self) -> dict[str, list[str]]:
        """Worker name -> ids of the jobs (finished ones too) that quarantined it, oldest job first."""
        out: dict[str, list[str]] = {}
        for job in self.jobs():
            for position in job.stored.checks.get("quarantined", {}):
                out.setdefault(job.stored.workers[int(position)], []).append(job.id)
        return out

    # --- shutdown ------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop every runner without changing job states (a restarted master resumes them)."""
        tasks = [job.task for job in self._jobs.values() if job.task is not None and not job.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.registry.close()
        self.store.close()
