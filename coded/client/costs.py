"""The runtime model's costs (:mod:`coded.codes.plan`) fitted to a finished gradient job: what
``coded plan --from-job`` and ``bench.plan`` predict other codes from.

What a responder's seconds cover depends on the job's code and mode. With whole replies it
computed its code's d partitions and sent one message of 1/m of a gradient; streamed, it computed
and sent the pieces it delivered, each a whole gradient's message: about one partition's worth
whatever d it holds. A fit that took a streamed worker for d partitions would find compute d times
cheaper than it is and recommend codes that hold many more partitions.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from coded.client.reports import Job
from coded.codes.plan import ClusterModel, RuntimeModel, ShiftedExponential, WorkerCosts
from coded.codes.plan_fits import fit_costs, fit_link_costs, fit_workers
from coded.jobs.spec import GradientJob, parse_job
from coded.jobs.spec.gradient import describe_code

__all__ = ["JobCosts", "fit_job"]


@dataclass(frozen=True)
class JobCosts:
    """Costs fitted to one job.

    ``model``: each worker's costs (:class:`coded.codes.plan.ClusterModel`; alike, the pooled fit,
    where the job's history lacks what a per-worker fit needs: a job of an older master). A worker's
    ``compute`` is one partition's gradient; ``communicate`` one whole gradient's trip over its
    link; the ``overhead`` what every iteration spends whatever the code. Without transfer times in
    the job's history or the gradient's size on the wire (``link_measured`` False) ``communicate``
    is all the rest of an iteration and ``overhead`` 0.
    """

    model: ClusterModel
    per_worker: bool  # each worker fitted on its own (the master timed each reply's arrival)
    replied: tuple[int, ...]  # per position: the iterations whose sum used its reply (per_worker only)
    link_measured: bool
    mode: str  # the fitted job's code and reply mode, in words
    partitions: float  # partitions' worth each responder computed per iteration (median)
    gradient_bytes: int  # a whole gradient and its loss, as they travelled
    chunks: int  # the job's pieces per partition (streamed replies)

    @property
    def workers(self) -> int:
        return len(self.model.workers)

    def typical(self) -> WorkerCosts:
        """The median worker's costs, cost by cost."""
        workers = self.model.workers
        compute = statistics.median(w.compute.shift + w.compute.mean for w in workers)
        communicate = statistics.median(w.communicate.shift + w.communicate.mean for w in workers)
        return WorkerCosts(ShiftedExponential(compute), ShiftedExponential(communicate),
                           statistics.median(w.outbound for w in workers), statistics.median(w.fixed for w in workers))


def fit_job(job: Job) -> JobCosts:
    """Fit the costs of a finished synchronous gradient job (``job`` with its history).

    Raises
    ------
    ValueError
        For another kind of job, an asynchronous code, injected stragglers (their delays are in
        the times) or fewer than three iterations.
    """
    spec = parse_job(job.spec)
    code = spec.gradient_code if isinstance(spec, GradientJob) else None
    if code is None or code.asynchronous:
        raise ValueError(f"job {job.id}: plans are made from a synchronous gradient_coding job")
    assert isinstance(spec, GradientJob)
    if spec.faults.stragglers.model != "none":
        raise ValueError(f"job {job.id} injects stragglers (faults.stragglers), which its iteration times include: "
                         "measure on a job without injected faults and give the delay with --delay")
    records = list(job.history)[1:]  # the first iteration sets up channels
    # an iteration's seconds on the job's clock: from the end of the one before, everything between rounds included
    durations = [b.elapsed_s - a.elapsed_s for a, b in zip(job.history[:-1], records, strict=True)]
    compute = [list(r.worker_compute_s) for r in records]
    partitions: float | list[list[float]] = len(code.partitions(0))
    messages: float | list[list[float]] = 1
    if spec.streamed:
        sent = [[float(len(pieces)) for pieces in r.pieces] for r in records]
        partitions, messages = [[k / spec.layout.chunks for k in row] for row in sent], sent
    typical = (float(partitions) if isinstance(partitions, (int, float))
               else statistics.median(p for row in partitions for p in row))
    # what the master said it checks (an uncoded job's replies are unchecked whatever verify says)
    mode = f"{describe_code(spec.code)}, {'streamed' if spec.streamed else 'whole'} replies, {job.verification.mode}"
    gradient_bytes = job.replies.gradient_bytes if job.replies is not None else 0
    chunks = spec.layout.chunks if spec.streamed else 1
    n = spec.workers
    timed = all(len(r.worker_transfer_s) == len(r.worker_compute_s) for r in records)  # each reply's link
    if job.replies is None or not gradient_bytes or not timed:
        per_partition, rest = fit_costs(durations, compute, partitions)
        return JobCosts(RuntimeModel(per_partition, rest).cluster(n), False, (), False, mode, typical,
                        gradient_bytes, chunks)
    share = job.replies.sent_bytes / gradient_bytes  # of the gradient and its loss
    transfer = [list(r.worker_transfer_s) for r in records]
    if all(len(r.worker_reply_s) == len(r.worker_compute_s) for r in records):  # each reply's arrival
        # the parameters travel as float64, the gradient and its loss in the wire's dtype
        parameters = (gradient_bytes // spec.wire_dtype.itemsize - 1) * 8
        # workers on the master's machine share its cores: each computes at a share of one when all do
        local, cores = job.replies.local_workers, job.replies.cores
        shared = max(1.0, min(local, n) / cores) if local and cores else 1.0
        model, replied = fit_workers(n, durations, [list(r.responders) for r in records], compute, transfer,
                                     [list(r.worker_reply_s) for r in records], partitions, share, messages,
                                     parameters / gradient_bytes, shared)
        return JobCosts(model, True, tuple(replied), True, mode, typical, gradient_bytes, chunks)
    per_partition, send, overhead = fit_link_costs(durations, compute, transfer, partitions, share, messages)
    return JobCosts(RuntimeModel(per_partition, send, overhead=overhead).cluster(n), False, (), True, mode, typical,
                    gradient_bytes, chunks)
