"""The runtime model's costs (:mod:`coded.codes.plan`) fitted to a job's history: one pooled fit
(:func:`fit_costs`, :func:`fit_link_costs`: every worker alike, for jobs whose history lacks
each reply's arrival) or each worker's own (:func:`fit_workers`).

Pure math: no I/O. :mod:`coded.client.costs` reads a finished job into these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from coded.codes.plan import ClusterModel, ShiftedExponential, WorkerCosts

__all__ = ["PerResponder", "fit_costs", "fit_link_costs", "fit_workers"]


#: per responder of each iteration, or one number for all
PerResponder = float | Sequence[Sequence[float]]


def _each(value: PerResponder, like: Sequence[Sequence[float]], name: str) -> list[float]:
    """``value`` for every responder of every iteration of ``like``, flattened like it."""
    if isinstance(value, (int, float)):
        flat = [float(value) for row in like for _ in row]
    else:
        if len(value) != len(like) or any(len(v) != len(r) for v, r in zip(value, like, strict=True)):
            raise ValueError(f"{name} must have one value per responder of every iteration")
        flat = [float(v) for row in value for v in row]
    if not all(math.isfinite(v) and v > 0 for v in flat):
        raise ValueError(f"{name} must be finite and > 0")
    return flat


def fit_costs(durations: Sequence[float], compute: Sequence[Sequence[float]],
              partitions: PerResponder) -> tuple[ShiftedExponential, ShiftedExponential]:
    """Per-partition compute time and the rest of an iteration, fitted to a job's history.

    Parameters
    ----------
    durations : (iterations,) sequence of float
        Wall time of each iteration.
    compute : (iterations, responders) nested sequence of float
        Compute seconds each responder reported in that iteration.
    partitions : float or (iterations, responders) nested sequence of float
        Partitions' worth of samples each responder computed: d of the job's code with whole
        replies; with streamed ones, the pieces it sent over the pieces per partition.

    Returns
    -------
    compute, rest : ShiftedExponential
        One partition's gradient (fitted to every responder's time / d), and what an iteration
        spends beyond its slowest responder's compute (sending, decoding; its median, constant).
    """
    if len(durations) != len(compute) or len(durations) < 2:
        raise ValueError("need at least two iterations, each with its responders' compute times")
    counts = _each(partitions, compute, "partitions")
    per_partition = [c / d for c, d in zip((c for row in compute for c in row), counts, strict=True)]
    rest = [duration - max(row) for duration, row in zip(durations, compute, strict=True) if row]
    return ShiftedExponential.fit(per_partition), ShiftedExponential(max(0.0, float(np.median(rest))))


def fit_link_costs(durations: Sequence[float], compute: Sequence[Sequence[float]],
                   transfer: Sequence[Sequence[float]], partitions: PerResponder, share: float,
                   messages: PerResponder = 1) -> tuple[ShiftedExponential, ShiftedExponential, float]:
    """Per-partition compute, sending a whole gradient, and the rest of an iteration, fitted to a
    job's history where each reply's trip over its link was measured (its ``transfer`` seconds).

    Parameters
    ----------
    durations : (iterations,) sequence of float
    compute, transfer : (iterations, responders) nested sequences of float
        Each responder's compute seconds and the seconds its reply took to arrive once under way.
    partitions : float or (iterations, responders) nested sequence of float
        Partitions' worth of samples each responder computed (as :func:`fit_costs`).
    share : float
        The share of a whole gradient each message carried (1/m for Ye & Abbe's codes, 1 otherwise).
    messages : float or (iterations, responders) nested sequence of float
        Messages each responder's transfer seconds cover: 1 with whole replies, the pieces it sent
        with streamed ones.

    Returns
    -------
    compute : ShiftedExponential
        One partition's gradient: the workers report CPU seconds, the work without the waits for a
        core (a worker waits on its links far longer than it computes: on a machine whose cores
        the workers share, its wall time would count the others' bursts of work as its own).
    communicate : ShiftedExponential
        One whole gradient's trip over a worker's link: the median of every responder's
        transfer / share, as a constant. A link's rate is what it is; the spread of the trips the
        master measures comes from when its reads run (a busy master reads a reply's first bytes
        late, and a trip looks short), and fitted as a worker's variability it would make waiting
        for the fastest few look better than it is.
    overhead : float
        The median of what an iteration spends beyond its slowest responder's compute and send
        (the parameters' trip out, decoding, the step): what no code changes.
    """
    if not len(durations) == len(compute) == len(transfer) or len(durations) < 2:
        raise ValueError("need at least two iterations, each with its responders' compute and transfer times")
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1] (got {share})")
    counts, sent = _each(partitions, compute, "partitions"), _each(messages, transfer, "messages")
    per_partition = [c / d for c, d in zip((c for row in compute for c in row), counts, strict=True)]
    sends = [t / (share * k) for t, k in zip((t for row in transfer for t in row), sent, strict=True)]
    rest = [duration - max(c + t for c, t in zip(cs, ts, strict=True))
            for duration, cs, ts in zip(durations, compute, transfer, strict=True) if cs]
    return (ShiftedExponential.fit(per_partition), ShiftedExponential(float(np.median(sends))),
            max(0.0, float(np.median(rest))))


def fit_workers(n: int, durations: Sequence[float], responders: Sequence[Sequence[int]],
                compute: Sequence[Sequence[float]], transfer: Sequence[Sequence[float]],
                reply: Sequence[Sequence[float]], partitions: PerResponder, share: float,
                messages: PerResponder = 1, outbound: float = 1.0, shared: float = 1.0
                ) -> tuple[ClusterModel, list[int]]:
    """Each worker's own costs, fitted to a job's history where the master timed every reply: its
    trip over the link (``transfer``) and its arrival since the iteration began (``reply``).

    Parameters
    ----------
    n : int
        Workers; positions are 0..n-1.
    durations : (iterations,) sequence of float
    responders : (iterations, responders) nested sequence of int
        The positions whose replies each iteration used.
    compute, transfer, reply : (iterations, responders) nested sequences of float
        Each responder's CPU seconds, the seconds its reply took to arrive once under way, and the
        seconds from the iteration's start until it had arrived.
    partitions, messages, share :
        As :func:`fit_link_costs`.
    outbound : float
        The parameters' bytes over a whole gradient's: their trip out takes ``communicate`` times this.
    shared : float
        The workers on one machine over its cores (at least 1; 1 where each has its own).

    Returns
    -------
    model : ClusterModel
        Worker i's ``communicate``: the median of its transfer / (share x messages), a constant
        (the spread of trips comes from when the master's reads run, :func:`fit_link_costs`).
        Until its reply's first bytes, reply - transfer - the parameters' trip out, a worker
        spent a round's ``fixed`` seconds and its computing. Its computing took its CPU seconds
        stretched by ``shared`` (on cores it shares, each worker runs a share of the time);
        ``fixed`` is the cluster's median of the rest (the master sending to every worker in turn,
        the frames, waking: what does not grow with the partitions a code gives a worker), and
        what is left, over its partitions, is its ``compute`` (at least its stretched CPU seconds, or
        all its time where that is less).
        On a machine of its own (``shared`` 1) that is a shifted exponential. Workers that share
        cores share them as they compute: they progress together and end together, whoever is
        first to a core, so a code that waits for fewer of them waits about as long; there
        (``shared`` > 1) a worker's ``compute`` is a constant (its mean). Either way a worker that
        runs under a CPU quota computes slower than its CPU seconds say, and a code that gives it
        more partitions pays that for each. The ``overhead``: the median of what an iteration
        spends after its last used reply.
    replied : list of int
        In how many iterations each position's reply was used. A worker used in fewer than two
        was slower than the responders every time: it is given, as a constant, the median of the
        iterations' last used reply (a lower bound of its time; it is slow in :meth:`ClusterModel.slow`
        only if even that is).
    """
    if not len(durations) == len(responders) == len(compute) == len(transfer) == len(reply) or len(durations) < 2:
        raise ValueError("need at least two iterations, each with its responders' compute, transfer and reply times")
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1] (got {share})")
    counts, sent = _each(partitions, compute, "partitions"), _each(messages, transfer, "messages")
    samples: list[list[tuple[float, float, float, float, float]]] = [[] for _ in range(n)]
    flat = zip((p for row in responders for p in row), (c for row in compute for c in row),
               (t for row in transfer for t in row), (r for row in reply for r in row), counts, sent, strict=True)
    for position, c, t, r, d, k in flat:
        if not 0 <= position < n:
            raise ValueError(f"responder {position} is not one of the {n} workers")
        samples[position].append((c, t, r, d, k))
    last = [max(row) for row in reply if row]
    overhead = max(0.0, float(np.median([duration - max(row) for duration, row in zip(durations, reply, strict=True)
                                         if row])))
    trips = {i: float(np.median([t / (share * k) for _, t, _, _, k in rows])) for i, rows in enumerate(samples) if rows}
    typical_trip = float(np.median(list(trips.values())))
    outs = [trips.get(i, typical_trip) * outbound for i in range(n)]
    busy = [[(c, r - t - outs[i], d) for c, t, r, d, _ in rows] for i, rows in enumerate(samples)]
    alone = shared <= 1
    # measured on 2 shared cores (bench.plan_workers, a slow link): a round's fixed part counted
    # in each partition had codes of 5-6 partitions predicted 1.3-1.4x slower than they ran
    # (a worker that ran while the others waited for their links had a core to itself: its time
    # less its stretched CPU seconds is then nothing, not less)
    fixed = float(np.median([max(0.0, b - c * shared) for rows in busy for c, b, _ in rows]))
    workers = []
    for i, rows in enumerate(busy):
        trip = trips.get(i, typical_trip)
        if len(rows) < 2:
            d = float(np.median(counts))
            late = max(float(np.median(last)) - outs[i] - fixed - trip * share, 0.0) / d
            workers.append(WorkerCosts(ShiftedExponential(late), ShiftedExponential(trip), outs[i], fixed))
            continue
        # computing: at least its CPU seconds stretched by the sharing, but no longer than it was busy
        fit = ShiftedExponential.fit([max(min(c * shared, b), c, b - fixed) / d for c, b, d in rows])
        per_partition = fit if alone else ShiftedExponential(fit.shift + fit.mean)
        workers.append(WorkerCosts(per_partition, ShiftedExponential(trip), outs[i], fixed))
    return ClusterModel(tuple(workers), overhead=overhead), [len(rows) for rows in samples]
