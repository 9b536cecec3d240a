"""What a gradient job's round costs the system, predicted before it runs: the seconds per
iteration the master states at submission, and its choice between streamed and whole replies
(:mod:`coded.jobs.replies`).

A round is the arithmetic plus what the system spends around it, on each side:

- **per message**, fixed CPU seconds: a worker's round beside its arithmetic (a frame in, the
  round's bookkeeping, a frame out, its wake-up), the master's per call (sending a round's input,
  taking a reply) and per round (deciding, stepping the optimizer, recording, telling a watcher);
- **per float**: a worker checks the parameters are finite and zeroes the message it adds its
  partitions into; the master reads every message it decodes (more than once where it checks
  them) and makes ``MASTER_PASSES`` passes over the gradient (normalising, the
  regulariser, the optimizer's step, the finiteness check, the parameters' copy); and a message
  that does not lie in shared memory is copied into the kernel and out again at both ends;
- **per multiply-add** of a worker's gradients, dense or sparse (a stored value is gathered and
  scattered: it costs more than a dense one);
- **on the links**: a worker's parameters and its message each cross its link.

On one machine the processes share its cores: a round lasts at least the CPU seconds of the
master and of the workers there over those cores, beside the master's own part, which no worker
overlaps, and the cores idle SHARED_IDLE of the time besides (processes waking one another).
Elsewhere a round is the master's part and the slowest worker it waits for.

The rates are this machine's, measured by :func:`calibrate` when the master starts (a few tens of
milliseconds of work); the fixed costs were measured on the development machine
(bench/results/reference.md) and are scaled by this machine's Python speed against it. A worker's
caches are cold at each round, its partitions evicted by the others' and the master's arrays in
between: measured in a local cluster, its gradient costs COLD times what it does hot.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse
from threadpoolctl import threadpool_limits

from coded.base.machine import cores
from coded.ml.data.sparse import nonzeros_per_row
from coded.ml.models import LogisticRegression

__all__ = ["Placement", "Rates", "RoundShape", "calibrate", "iteration_seconds", "late_extra"]

#: a worker's round beside its arithmetic; the master's per call of a round (a streamed round's
#: per piece besides), and per round: CPU seconds measured on the development machine (2-core
#: Intel Xeon, CPython 3.11, uvloop; a watching client): 1,200 x 10 logistic regression, 3 and 12
#: workers, slopes of the master's and the workers' CPU per iteration
WORKER_ROUND_S = 250e-6
MASTER_CALL_S = 77e-6
MASTER_PIECE_S = 75e-6
MASTER_ROUND_S = 480e-6
#: seconds of PYTHON_PROBE's loop on that machine
PYTHON_PROBE_S = 1.85e-3
#: passes over the gradient's length the master makes per round besides reading the messages
MASTER_PASSES = 10
#: bits a float64 takes on a link: 64, and the headers of TCP/IP over Ethernet (78 bytes a packet
#: of 1,448 bytes of payload)
BITS_PER_FLOAT = 64 * (1448 + 78) / 1448
#: a round on shared cores against its CPU seconds over the cores: 1.1-1.3 measured in local
#: clusters of 6 and 12 workers on 2 cores (dense 48000 x 500, the sparse workload; whole and
#: streamed replies, checked and not)
SHARED_IDLE = 1.2
#: a worker's gradient in a local cluster against the same gradient computed hot: 4.8 against 2.7
#: ms for 8,000 x 500 dense rows, 1.4 against 0.9 ms for a partition of the sparse workload
COLD = 1.7


@dataclass(frozen=True)
class Rates:
    """This machine's costs (:func:`calibrate`).

    Attributes
    ----------
    dense_s, sparse_s : float
        Seconds per unit of :meth:`~coded.ml.models.Model.work` (about a multiply-add) of a
        batch's gradient, dense and sparse, on one core with its caches hot.
    float_s : float
        Seconds per float of one pass over long arrays (an addition into a third).
    python : float
        This machine's Python's seconds for what took 1 s on the development machine.
    cores : int
    """

    dense_s: float
    sparse_s: float
    float_s: float
    python: float
    cores: int

    def work_s(self, work: float, density: float) -> float:
        """CPU seconds of ``work`` multiply-adds (:meth:`coded.ml.models.Model.work`) of a worker's
        gradients, its caches cold."""
        return COLD * work * (self.dense_s if density > 0.5 else self.sparse_s)


def _probe() -> None:
    """A fixed piece of pure Python: attribute lookups, calls, small containers (what a round's
    bookkeeping is made of)."""
    counts: dict[int, int] = {}
    for i in range(20_000):
        counts[i & 63] = counts.get(i & 63, 0) + len((i, i))


def _best(function: object, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        began = time.perf_counter()
        function()  # type: ignore[operator]
        best = min(best, time.perf_counter() - began)
    return best


def _gradient_s(x: np.ndarray | scipy.sparse.csr_matrix, columns: int) -> float:
    """Seconds per unit of :meth:`~coded.ml.models.Model.work` of a logistic regression's gradient
    of the rows ``x``, added into a message as a worker adds it (caches hot)."""
    model = LogisticRegression(columns)
    rng = np.random.default_rng(1)
    x, y = model.prepare(x, rng.integers(2, size=x.shape[0]))
    params, out = rng.standard_normal(model.size) * 0.01, np.zeros(model.size + 1)
    density = nonzeros_per_row(x) / columns
    return _best(lambda: model.accumulate(params, x, y, out, prepared=True)) / model.work(x.shape[0], density)


def calibrate() -> Rates:
    """Measure this machine's rates: a dense and a sparse batch's gradient, one BLAS thread as a
    worker of ``coded local`` has (workers that share cores each get one), long array passes and
    Python's speed (about 50 ms, and 20 MB for a moment)."""
    rng = np.random.default_rng(0)
    # the papers' one-hot rows: a few dozen stored values among a quarter million weights (2 MB,
    # beyond a core's fastest caches); dense rows: 16 MB, as a worker's partitions are beyond them
    per_row, columns = 40, 1 << 18
    sparse = scipy.sparse.csr_matrix((np.ones(2048 * per_row), rng.integers(columns, size=2048 * per_row),
                                      np.arange(0, 2048 * per_row + 1, per_row)), shape=(2048, columns))
    with threadpool_limits(limits=1):
        dense_s = _gradient_s(rng.standard_normal((4096, 512)), 512)
        sparse_s = _gradient_s(sparse, columns)
    a, b, c = (np.ones(1 << 18) for _ in range(3))
    float_s = _best(lambda: np.add(a, b, out=c)) / a.size
    python = _best(_probe) / PYTHON_PROBE_S
    return Rates(dense_s, sparse_s, float_s, python, cores())


@dataclass(frozen=True)
class Placement:
    """Where a job's processes run.

    Attributes
    ----------
    local : int
        Workers on the master's machine, sharing its cores.
    cores : int
        The master machine's cores.
    link_bits_per_s : float or None
        The workers' links; None: none (loopback, where local workers share memory with the master).
    """

    local: int
    cores: int
    link_bits_per_s: float | None


@dataclass(frozen=True)
class RoundShape:
    """What one healthy round of a job moves and computes.

    Attributes
    ----------
    n : int
        Workers called.
    waits_for : int
        Replies the round waits for (whole replies: n - s, one more when checked).
    work : float
        Multiply-adds of one worker's gradients in a round (whole replies: its d partitions;
        streamed: the pieces it sends).
    density : float
        The share of features stored per sample (1: dense).
    messages : int
        Messages a worker sends (whole: its stages; streamed: its pieces).
    floats_in, floats_out : int
        A round's input (the parameters) and one message.
    decoded : int
        Messages' worth the master reads (a checked decode reads each twice; a streamed round
        every piece three times: finiteness, scale, sum).
    pieces : bool
        Streamed: each message is a piece the master settles and steers (MASTER_PIECE_S).
    """

    n: int
    waits_for: int
    work: float
    density: float
    messages: int
    floats_in: int
    floats_out: int
    decoded: int
    pieces: bool = False


def late_extra(shape: RoundShape, rates: Rates, placement: Placement, piece_work: float) -> float:
    """What a streamed round spends more when one worker is late (what a code is for): another
    worker takes over half its partition (``piece_work`` multiply-adds) and sends it as one more
    message, after its own. A whole-reply round does not wait for the late worker at all."""
    trip = 0.0 if placement.link_bits_per_s is None else BITS_PER_FLOAT * shape.floats_out / placement.link_bits_per_s
    return rates.work_s(piece_work / 2, shape.density) + shape.floats_out * rates.float_s + trip


def iteration_seconds(shape: RoundShape, rates: Rates, placement: Placement) -> float:
    """Predicted seconds of one healthy iteration of a job of this shape (the module's model)."""
    python, float_s = rates.python, rates.float_s
    shared_memory = placement.link_bits_per_s is None and placement.local > 0
    # a message through a socket is copied into the kernel and out: twice, at 8 bytes a float
    copies = 0.0 if shared_memory else 2 * float_s
    worker = (WORKER_ROUND_S * python + rates.work_s(shape.work, shape.density)
              + shape.messages * shape.floats_out * (float_s + copies) + shape.floats_in * (float_s + copies))
    per_call = (MASTER_CALL_S + (shape.messages if shape.pieces else shape.messages - 1) * MASTER_PIECE_S) * python \
        + (shape.floats_in + shape.messages * shape.floats_out) * copies
    serial = MASTER_ROUND_S * python + (shape.decoded * shape.floats_out + MASTER_PASSES * shape.floats_in) * float_s
    transfer = 0.0
    if placement.link_bits_per_s is not None:  # the parameters' trip, then the messages': workers in parallel
        transfer = BITS_PER_FLOAT * (shape.floats_in + shape.messages * shape.floats_out) / placement.link_bits_per_s
    # the master takes its calls one by one while the workers compute side by side; on one machine
    # those calls and every local worker's round share its cores
    local = min(placement.local, shape.n)
    shared = SHARED_IDLE * (shape.n * per_call + local * worker) / max(min(placement.cores, local + 1), 1)
    alone = shape.n * per_call + worker + transfer
    return serial + max(shared, alone)
