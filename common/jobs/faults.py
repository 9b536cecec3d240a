"""Seeded fault injection: straggler delays, slowdowns and soft errors, decided inside the worker.

Every random draw is a pure function of (job seed, iteration, worker index), so every scheme in a
comparison sees exactly the same delays and the same corrupted outputs, and a rerun or a resumed
run sees them again.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from coded.jobs.spec.faults import FaultSpec, SlowdownSpec, SoftErrorSpec, StragglerSpec

__all__ = ["Faults", "Slowdowns", "SoftErrors", "Stragglers", "faults_of", "parse_trace"]

_DELAY, _SOFT, _SLOW = 1, 2, 3  # salts that keep the streams of draws independent
#: what a trace's third column is, and its range: a straggler delay in seconds, or a slowdown factor
TRACE_VALUES = {"delay": (0.0, 3600.0), "factor": (1.0, 1000.0)}


def _rng(seed: int, iteration: int, worker: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([seed, iteration, worker, salt])


def parse_trace(text: str, max_rows: int = 1_000_000, value: str = "delay") -> dict[tuple[int, int], float]:
    """A recorded trace: CSV rows ``iteration,worker,delay_seconds`` (``value="delay"``) or
    ``iteration,worker,factor`` (``value="factor"``, a slowdown of at least 1); header optional.

    Raises
    ------
    ValueError
        Naming the first bad row.
    """
    low, high = TRACE_VALUES[value]
    trace: dict[tuple[int, int], float] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or (number == 1 and not row[0].strip().lstrip("-").isdigit()):
            continue
        if number > max_rows or len(row) != 3:
            raise ValueError(f"trace row {number}: expected iteration,worker,{value} (got {row!r})")
        try:
            iteration, worker, amount = int(row[0]), int(row[1]), float(row[2])
        except ValueError:
            raise ValueError(f"trace row {number}: not numbers ({row!r})") from None
        if iteration < 0 or worker < 0 or not low <= amount <= high or math.isnan(amount):
            raise ValueError(f"trace row {number}: out of range ({row!r}; the {value} must be in {low:g}..{high:g})")
        trace[(iteration, worker)] = amount
    return trace


@dataclass(frozen=True)
class Stragglers:
    """Delays of one job's workers.

    Parameters
    ----------
    spec : StragglerSpec
    seed : int
        The job's seed.
    trace : dict, optional
        Parsed trace for model "trace".
    """

    spec: StragglerSpec
    seed: int
    trace: dict[tuple[int, int], float] | None = None

    def applies(self, worker: int) -> bool:
        return self.spec.model != "none" and (self.spec.workers is None or worker in self.spec.workers)

    def delay(self, iteration: int, worker: int) -> float:
        """Injected delay in seconds of ``worker`` at ``iteration``."""
        if not self.applies(worker):
            return 0.0
        spec = self.spec
        if spec.model == "fixed":
            return float(spec.delay or 0.0)
        if spec.model == "trace":
            return (self.trace or {}).get((iteration, worker), 0.0)
        if spec.model == "cpu":
            return 0.0  # contention instead of a delay
        # a generator per draw (seeded by iteration and worker) costs more than a worker's round
        # does otherwise: built only for the models that draw
        rng = _rng(self.seed, iteration, worker, _DELAY)
        # StragglerSpec's validator makes sure each model has the parameters it needs
        if spec.model == "exponential":
            assert spec.mean is not None
            return float(rng.exponential(spec.mean))
        if spec.model == "shifted_exponential":
            assert spec.mean is not None
            return spec.shift + float(rng.exponential(spec.mean))
        assert spec.model == "pareto" and spec.scale is not None and spec.shape is not None
        return float(spec.scale) * (1.0 + float(rng.pareto(spec.shape)))

    def busy_threads(self, worker: int) -> int:
        """Threads spinning on the worker's cores while it computes (model "cpu")."""
        return self.spec.threads if self.spec.model == "cpu" and self.applies(worker) else 0


@dataclass(frozen=True)
class Slowdowns:
    """How many times slower than itself each worker computes (partial stragglers).

    A trace is replayed cyclically: iteration t uses the trace's iteration t mod its length T; of
    its R workers, worker i of n uses worker floor(i R / n) when n <= R (spread over all of them),
    else i mod R, so a trace of 8 workers serves any n.

    Parameters
    ----------
    spec : SlowdownSpec
    seed : int
        The job's seed.
    trace : dict, optional
        Parsed trace (``parse_trace(..., value="factor")``) for model "trace".
    workers : int
        The job's workers.
    """

    spec: SlowdownSpec
    seed: int
    trace: dict[tuple[int, int], float] | None = None
    workers: int = 1  # n: how the trace's workers are spread over the job's

    def applies(self, worker: int) -> bool:
        return self.spec.model != "none" and (self.spec.workers is None or worker in self.spec.workers)

    def factor(self, iteration: int, worker: int) -> float:
        """The slowdown (>= 1) of ``worker`` at ``iteration``."""
        spec = self.spec
        if not self.applies(worker):
            return 1.0
        if spec.model == "fixed":
            return float(spec.factor or 1.0)
        if spec.model == "uniform":
            assert spec.high is not None
            return float(_rng(self.seed, iteration, worker, _SLOW).uniform(spec.low, spec.high))
        trace = self.trace or {}
        if not trace:
            return 1.0
        steps = 1 + max(t for t, _ in trace)
        ranks = 1 + max(w for _, w in trace)
        n = self.workers
        rank = worker * ranks // n if n <= ranks else worker % ranks
        return trace.get((iteration % steps, rank), 1.0)


#: the bits of a float the bit models flip, by dtype: the unsigned integer view, its exponent bits
#: (bitflip) and its top 8 mantissa bits (mantissa), each as range(low, high)
_BITS: dict[np.dtype, tuple[type[np.unsignedinteger[Any]], tuple[int, int], tuple[int, int]]] = {
    np.dtype(np.float64): (np.uint64, (52, 63), (44, 52)),
    np.dtype(np.float32): (np.uint32, (23, 31), (15, 23))}


@dataclass(frozen=True)
class SoftErrors:
    """Corruption of a worker's outputs: the worker lies without knowing it.

    Models (``spec.model``): ``gaussian`` adds N(0, scale^2) noise to every entry; the others
    change one entry, drawn uniformly: ``bitflip`` flips one of its exponent bits (the entry times
    or over 2^(2^j), j = 0..10, or an infinity: large, caught by any check), ``sign`` negates it, ``element``
    multiplies it by 1 + scale, and ``mantissa`` flips one of its top 8 mantissa bits (bits 44..51
    of a float64, 15..22 of a float32): a change of 2^-8..2^-1 of the entry's power of two
    (2^floor(log2 |x|)), so 2^-9..2^-1 of the entry. Not the lower bits: a change is a wrong answer
    only above the check's tolerance (1e-6 of the message's norm; below it is agreement by
    definition), and each lower bit halves the change, until from bit 32 down (2^-20 of the entry)
    no entry can exceed it. The top 8 exceed it for every entry above 2^9 x 1e-6 (about 5e-4) of the
    norm: small errors, yet wrong answers. A zero entry stays zero (or a subnormal): corrupting it
    is counted, yet changes nothing.
    """

    spec: SoftErrorSpec
    seed: int

    def applies(self, worker: int) -> bool:
        return self.spec.probability > 0 and (self.spec.workers is None or worker in self.spec.workers)

    def corrupt(self, message: np.ndarray, worker: int, *when: int, partitions: Collection[int] | None = None) -> bool:
        """Corrupt ``message`` in place with the configured probability; True if it did.

        Parameters
        ----------
        message : ndarray of float64 or float32, C-contiguous
            Changed in place.
        worker : int
        *when : int
            (iteration, stage or piece, ...): with ``worker`` they seed the draws; nothing is
            corrupted before ``spec.start``.
        partitions : collection of int, optional
            The data partitions the message involves. With ``spec.partition`` set, only a
            message whose ``partitions`` include it is corrupted, and exactly when it would be
            without ``spec.partition`` (a filter on the same draws: ``probability`` is the
            fraction of these messages corrupted).

        Raises
        ------
        TypeError
            A bit model (bitflip, mantissa) given a message neither float64 nor float32.
        """
        spec = self.spec
        if not self.applies(worker) or when[0] < spec.start:
            return False
        if spec.partition is not None and (partitions is None or spec.partition not in partitions):
            return False  # each message draws from its own generator: skipping one changes no other
        rng = np.random.default_rng([self.seed, worker, *when, _SOFT])
        if rng.random() >= spec.probability or message.size == 0:
            return False
        if spec.model == "gaussian":
            message += rng.normal(0.0, spec.scale, size=message.shape)
            return True
        flat = message.reshape(-1)
        position = int(rng.integers(flat.size))  # drawn first by every one-entry model, as bitflip always has
        if spec.model == "sign":
            flat[position] = -flat[position]
        elif spec.model == "element":
            flat[position] *= 1.0 + spec.scale
        else:
            if message.dtype not in _BITS:
                raise TypeError(f"soft error model {spec.model} flips bits of float64 or float32 messages "
                                f"(got {message.dtype})")
            unsigned, exponent, mantissa = _BITS[message.dtype]
            bits = exponent if spec.model == "bitflip" else mantissa
            flat.view(unsigned)[position] ^= unsigned(1) << unsigned(rng.integers(*bits))
        return True


@dataclass(frozen=True)
class Faults:
    """Everything a job injects into its workers: delays, slowdowns and soft errors."""

    stragglers: Stragglers
    slowdowns: Slowdowns
    soft_errors: SoftErrors


def faults_of(faults: FaultSpec, seed: int, workers: int, trace_csv: str = "", slowdown_csv: str = "") -> Faults:
    """The faults of a job's ``faults`` section, with its uploaded traces (CSV text).

    The one place that turns a spec into draws: a worker of the cluster and a rank of another
    system (bench.ddp, bench.mpi_loop) given the same section, seed and worker count inject the
    same delays and slowdowns at every (iteration, worker).

    Raises
    ------
    ValueError
        A trace the section needs that does not parse (naming its first bad row).
    """
    delays = parse_trace(trace_csv) if faults.stragglers.model == "trace" else None
    factors = parse_trace(slowdown_csv, value="factor") if faults.slowdown.model == "trace" else None
    return Faults(Stragglers(faults.stragglers, seed, delays), Slowdowns(faults.slowdown, seed, factors, workers),
                  SoftErrors(faults.soft_errors, seed))
