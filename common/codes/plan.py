"""Choosing a gradient code from measured costs: Ye & Abbe's runtime model (Sec. 5, Table 3).

A worker holding ``d`` partitions and sending ``1/m`` of a gradient finishes after

    T_i = d * C_i + M_i / m + D_i

where ``C_i`` is its time to compute one partition's gradient, ``M_i`` its time to send a whole
gradient and ``D_i`` a straggler delay of the call; all independent shifted exponentials. A code
that tolerates ``s`` stragglers ends the iteration at the ``(n - s)``-th smallest ``T_i``. The
expected iteration time is computed exactly (closed-form CDF of a sum of exponentials, the
order-statistic identity, quadrature), so Table 3 of the paper is reproduced to its 4 decimals.

The paper's workers are alike (:class:`RuntimeModel`); a real cluster's are not: one link or one
machine slower than the rest decides which codes pay. :class:`ClusterModel` gives each worker its
own costs (:class:`WorkerCosts`, fitted per worker by :func:`coded.codes.plan_fits.fit_workers`),
and the iteration's end is then an order statistic of independent, differently distributed
times: the probability that at least ``n - s`` workers are done by ``t`` is a Poisson-binomial
tail.

Pure math: no I/O. ``coded plan`` and ``bench/plan.py`` call it; :mod:`coded.codes.plan_fits`
fits its costs to a job's history.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

__all__ = [
    "Candidate",
    "ClusterModel",
    "RuntimeModel",
    "ShiftedExponential",
    "WorkerCosts",
    "expected_iteration_seconds",
    "expected_streamed_seconds",
    "plan",
    "recommend",
    "refusal",
    "table3",
]


_NONE: Mapping[int, float] = MappingProxyType({})


@dataclass(frozen=True)
class ShiftedExponential:
    """``shift + Exponential(mean)`` seconds; ``mean = 0`` is the constant ``shift``."""

    shift: float
    mean: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.shift) and math.isfinite(self.mean)) or self.shift < 0 or self.mean < 0:
            raise ValueError(f"shift and mean must be finite and >= 0 (got {self.shift}, {self.mean})")

    @classmethod
    def fit(cls, samples: Sequence[float]) -> ShiftedExponential:
        """Unbiased fit of a shifted exponential to at least two samples (minimum-variance
        unbiased estimators: mean = n/(n-1) (avg - min), shift = min - mean/n)."""
        x = np.asarray(samples, dtype=float)
        if x.size < 2 or not np.all(np.isfinite(x)):
            raise ValueError("fitting needs at least two finite samples")
        mean = x.size / (x.size - 1) * (x.mean() - x.min())
        return cls(max(0.0, x.min() - mean / x.size), mean)

    def __str__(self) -> str:
        return f"{self.shift:.4g} s" + (f" + Exp(mean {self.mean:.4g} s)" if self.mean else "")

    def scaled(self, factor: float) -> ShiftedExponential:
        return ShiftedExponential(self.shift * factor, self.mean * factor)

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        return self.shift + (rng.exponential(self.mean, size) if self.mean > 0 else np.zeros(size))


@dataclass(frozen=True)
class RuntimeModel:
    """Per-worker costs: one partition's gradient, sending one whole gradient, straggler delay.

    Table 3 of Ye & Abbe: ``compute = ShiftedExponential(1.6, 1/0.8)``,
    ``communicate = ShiftedExponential(6, 1/0.1)``, no delay.
    """

    compute: ShiftedExponential
    communicate: ShiftedExponential
    delay: ShiftedExponential = ShiftedExponential(0.0)
    #: seconds every iteration spends whatever the code: the parameters' trip to the workers,
    #: decoding, the optimizer step (not in the paper's model, where it is the same for every code)
    overhead: float = 0.0

    def worker_time(self, d: int, m: int) -> list[ShiftedExponential]:
        """The independent shifted-exponential terms of ``T_i`` for ``d`` partitions, ``1/m`` sent."""
        return [self.compute.scaled(d), self.communicate.scaled(1 / m), self.delay, ShiftedExponential(self.overhead)]

    def cluster(self, n: int) -> ClusterModel:
        """``n`` workers alike."""
        return ClusterModel((WorkerCosts(self.compute, self.communicate),) * n, self.delay, self.overhead)


@dataclass(frozen=True)
class WorkerCosts:
    """One worker's costs: one partition's gradient as the clock sees it (``compute``), one whole
    gradient's trip over its link (``communicate``), the parameters' trip out to it (``outbound``,
    seconds: the same link the other way), and what its round costs whatever it computes
    (``fixed``, seconds: the master's sending and taking, the round's frames and bookkeeping)."""

    compute: ShiftedExponential
    communicate: ShiftedExponential
    outbound: float = 0.0
    fixed: float = 0.0

    @property
    def before_computing(self) -> float:
        """Seconds of a round before it computes, whatever the code: the parameters' trip out and
        its fixed part."""
        return self.outbound + self.fixed

    def terms(self, d: int, m: int, delay: ShiftedExponential) -> tuple[ShiftedExponential, ...]:
        """The independent terms of its time for ``d`` partitions and ``1/m`` of a gradient sent."""
        return (ShiftedExponential(self.before_computing), self.compute.scaled(d),
                self.communicate.scaled(1 / m), delay)

    def seconds(self, d: int = 1, m: int = 1) -> float:
        """Its expected time for ``d`` partitions and ``1/m`` sent, without a delay."""
        return sum(t.shift + t.mean for t in self.terms(d, m, ShiftedExponential(0.0)))


#: what makes a worker or link slow in a report: this many times the median of the cluster's
SLOW = 2.0
#: the share of a link's round trip (the parameters out, a gradient back) within which a worker's
#: computing, fitted as what is left of its time, is not known
LINK_NOISE = 0.1


@dataclass(frozen=True)
class ClusterModel:
    """Each worker's own costs (by position), the straggler delay of every call, and what every
    iteration spends whatever the code after its last reply (decoding, the step)."""

    workers: tuple[WorkerCosts, ...]
    delay: ShiftedExponential = ShiftedExponential(0.0)
    overhead: float = 0.0

    def cluster(self, n: int) -> ClusterModel:
        if n != len(self.workers):
            raise ValueError(f"the model has {len(self.workers)} workers, not {n}")
        return self

    def slowed(self, links: Mapping[int, float] = _NONE, computes: Mapping[int, float] = _NONE) -> ClusterModel:
        """The same cluster with the links (both ways) or the computing of some positions
        ``factor`` times slower: ``{position: factor}``."""
        for position, factor in [*links.items(), *computes.items()]:
            if not 0 <= position < len(self.workers) or not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"slow worker {position}: positions are 0..{len(self.workers) - 1} and factors > 0 "
                                 f"(got factor {factor:g})")
        workers = tuple(WorkerCosts(w.compute.scaled(computes.get(i, 1.0)), w.communicate.scaled(links.get(i, 1.0)),
                                    w.outbound * links.get(i, 1.0), w.fixed) for i, w in enumerate(self.workers))
        return ClusterModel(workers, self.delay, self.overhead)

    def slow(self) -> list[str]:
        """Which workers compute, or whose links carry a gradient, ``SLOW`` times slower than the
        cluster's median, in words. A worker's computing is what its time leaves beside its
        link's trips, so behind a slow link it is known only to a share of those trips
        (``LINK_NOISE``): slower by less than that is not called slow."""
        out = []
        for what, cost in ((" computes one partition in", lambda w: w.compute.shift + w.compute.mean),
                           ("'s link carries a gradient in", lambda w: w.communicate.shift + w.communicate.mean)):
            costs = [cost(w) for w in self.workers]
            typical = float(np.median(costs))
            out += [f"worker {i}{what} {c:.4g} s, {c / typical:.1f}x the median {typical:.4g} s"
                    for i, (c, w) in enumerate(zip(costs, self.workers, strict=True))
                    if typical > 0 and c > SLOW * typical
                    and (what.startswith("'s") or c - typical > LINK_NOISE * (w.outbound + w.communicate.shift))]
        return out


def _sum_cdf(means: Sequence[float], t: np.ndarray) -> np.ndarray:
    """CDF at ``t >= 0`` of a sum of independent exponentials with these means (hypoexponential).

    Equal rates are nudged apart by 1e-7 (relative) so the closed form for distinct rates applies;
    the error that makes is of that order.
    """
    means = sorted(m for m in means if m > 0)
    if not means:
        return np.ones_like(t)
    rates = [1 / m for m in means]
    for i in range(1, len(rates)):
        if rates[i] >= rates[i - 1] * (1 - 1e-7):
            rates[i] = rates[i - 1] * (1 - 1e-7)
    survival = np.zeros_like(t)
    for i, r_i in enumerate(rates):
        weight = math.prod(r_j / (r_j - r_i) for j, r_j in enumerate(rates) if j != i)
        survival += weight * np.exp(-r_i * t)
    return np.clip(1 - survival, 0.0, 1.0)


def _at_least(k: int, n: int, p: np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) >= k), elementwise."""
    j = np.arange(k, n + 1)[:, None]
    coefficients = np.array([math.comb(n, int(i)) for i in j[:, 0]], dtype=float)[:, None]
    return (coefficients * p[None, :] ** j * (1 - p[None, :]) ** (n - j)).sum(axis=0)


def _integral(values: np.ndarray, t: np.ndarray) -> float:
    # numpy >= 2 names it trapezoid (2.4 dropped trapz, so its stubs lack it); numpy 1.26 has only trapz
    return float(np.trapezoid(values, t) if hasattr(np, "trapezoid") else np.trapz(values, t))  # type: ignore[attr-defined]


def expected_iteration_seconds(model: RuntimeModel | ClusterModel, n: int, s: int, d: int, m: int,
                               points: int = 200_001) -> float:
    """E[the (n - s)-th smallest of the n workers' times] for ``d`` partitions and ``1/m`` sent,
    plus the model's overhead.

    Uses E[X] = shift + integral of P(X > shift + t) dt over t >= 0, with
    P(X <= shift + t) = P(at least n - s of the workers are done by then): a binomial tail when
    the workers are alike, a Poisson-binomial one (:func:`_kth_unalike`) when they are not.
    """
    if not 0 <= s < n or d < 1 or m < 1:
        raise ValueError(f"need 0 <= s < n, d >= 1, m >= 1 (got n={n}, s={s}, d={d}, m={m})")
    cluster = model.cluster(n)
    terms = [w.terms(d, m, cluster.delay) for w in cluster.workers]
    if any(t != terms[0] for t in terms):
        return _kth_unalike(terms, n - s) + cluster.overhead
    shift = sum(term.shift for term in terms[0])
    means = [term.mean for term in terms[0]]
    if not any(means):
        return shift + cluster.overhead
    # the integrand is below 1e-15 once every worker is done with that probability
    horizon = sum(means) * (40 + 3 * math.log(n) + 5 * len(means))
    t = np.linspace(0.0, horizon, points)
    done = _at_least(n - s, n, _sum_cdf(means, t))
    return shift + _integral(1 - done, t) + cluster.overhead


def _kth_unalike(terms: Sequence[Sequence[ShiftedExponential]], k: int, points: int = 20_001) -> float:
    """E[the k-th smallest of independent worker times], each the sum of its ``terms``.

    P(at least k done by t) by the Poisson-binomial recursion over workers (the distribution of
    the number done, capped at k), on a grid from the k-th smallest shift (no earlier can k be
    done) to where every worker is done but with probability ~1e-15. A constant term's step falls
    between grid points: the error is below one step, 1/20,000 of the span.
    """
    shifts = np.array([sum(t.shift for t in worker) for worker in terms])
    means = [[t.mean for t in worker] for worker in terms]
    low = float(np.sort(shifts)[k - 1])
    widest = max(sum(m) for m in means)
    if not widest:
        return low
    horizon = float(shifts.max()) - low + widest * (40 + 3 * math.log(len(terms)) + 5 * max(map(len, means)))
    t = np.linspace(low, low + horizon, points)
    count = np.zeros((k + 1, points))  # P(exactly j done) for j < k; P(k or more) at k
    count[0] = 1.0
    for shift, worker_means in zip(shifts, means, strict=True):
        p = np.where(t >= shift, _sum_cdf(worker_means, np.maximum(t - shift, 0.0)), 0.0)
        count[k] += count[k - 1] * p
        count[1:k] = count[1:k] * (1 - p) + count[: k - 1] * p
        count[0] *= 1 - p
    return low + _integral(1 - count[k], t)


def expected_streamed_seconds(model: RuntimeModel | ClusterModel, n: int, s: int = 1, chunks: int = 1,
                              confirm: float = 0.0, samples: int = 4_000, seed: int = 0) -> float:
    """E[iteration time] of cyclic with streamed replies under the runtime model, by Monte Carlo
    over its layout (:class:`coded.codes.streaming.StreamLayout`, ``s`` as the code is built:
    each partition held by s + 1 workers).

    Worker i starts after its delay, the parameters' trip out and its round's fixed seconds, and
    computes its pieces in its layout's order (its own partition first), each in C_i / ``chunks``;
    it sends each, a whole gradient's message, while it computes the next: its k-th piece arrives at about
    ``start + (k + 1) max(C_i / chunks, M_i) + min(C_i / chunks, M_i)``. A piece is settled by
    its first copy, or, for the share ``confirm`` of them that the sampled check confirms, by its
    second; the iteration ends when every piece is settled. A worker that skips pieces others have
    already sent would be faster than this: it is an upper bound in that.
    """
    from coded.codes.streaming import StreamLayout

    cluster = model.cluster(n)
    layout = StreamLayout("cyclic", n, s, chunks)
    rng = np.random.default_rng(seed)
    c = np.column_stack([w.compute.sample(rng, samples) for w in cluster.workers]) / chunks  # per piece
    send = np.column_stack([w.communicate.sample(rng, samples) for w in cluster.workers])
    start = cluster.delay.sample(rng, (samples, n)) + np.array([w.before_computing for w in cluster.workers])
    positions = len(layout.pieces_of(0))
    k = np.arange(1, positions + 1)
    # (samples, worker, position in its order): when that piece's copy arrives
    arrives = (start[:, :, None] + k * np.maximum(c, send)[:, :, None] + np.minimum(c, send)[:, :, None])
    copies: list[list[tuple[int, int]]] = [[] for _ in range(layout.pieces)]
    for worker in range(n):
        for position, piece in enumerate(layout.pieces_of(worker)):
            copies[piece].append((worker, position))
    workers = np.array([[w for w, _ in pairs] for pairs in copies])
    places = np.array([[p for _, p in pairs] for pairs in copies])
    times = np.sort(arrives[:, workers, places], axis=2)  # (samples, pieces, holders), earliest first
    confirmed = rng.random((samples, layout.pieces)) < confirm
    settled = np.where(confirmed, times[:, :, min(1, s)], times[:, :, 0])
    return float(settled.max(axis=1).mean()) + cluster.overhead


@dataclass(frozen=True)
class Candidate:
    """A code and its predicted iteration time.

    ``scheme`` is "uncoded" or "ye_abbe" (m = 1 is a cyclic code of Tandon et al. with the same
    cost: d = s + 1 partitions, a whole gradient sent). ``s`` is the number of slowest workers an
    iteration does not wait for; ``check`` the replies it waits for beyond decoding to check them
    (a job's ``verify.errors + 1``, 0 with ``verify: off``), so the code is built for s + check.
    """

    scheme: str
    s: int
    m: int
    predicted_s: float
    check: int = 0
    streamed: bool = False  # cyclic with streamed replies (the default): d is held, about 1 computed

    @property
    def d(self) -> int:
        """Partitions per worker."""
        return 1 if self.scheme == "uncoded" else self.s + self.check + self.m

    def code(self) -> dict[str, object]:
        """The job spec's ``code`` section."""
        if self.scheme == "uncoded":
            return {"scheme": "uncoded"}
        if self.streamed:
            return {"scheme": "cyclic", "stragglers": self.s}
        return {"scheme": "ye_abbe", "stragglers": self.s, "m": self.m}


def plan(model: RuntimeModel | ClusterModel, n: int, stragglers: Iterable[int] | None = None,
         messages: Iterable[int] | None = None, check: int = 0, streamed: bool = False,
         chunks: int = 1, confirm: float = 0.0) -> list[Candidate]:
    """Every exact code for ``n`` workers with its expected iteration time, fastest first.

    ``stragglers`` (s) and ``messages`` (m) limit the grid (default: all with s + check + m <= n).
    With ``check`` replies beyond decoding (the default check of a job: 1), a code that does not
    wait for s workers holds d = s + check + m partitions per worker and the iteration still ends
    at the (n - s)-th fastest worker. Uncoded waits for all n and checks nothing. Whether a code
    can be built with acceptable numerics is the caller's check (coded.codes). With ``streamed``,
    cyclic with streamed replies is ranked too (:func:`expected_streamed_seconds`; s = 1, one
    dead worker tolerated: more s only holds more data, it computes no more; ``chunks`` pieces
    per partition, the share ``confirm`` of them confirmed by a second copy: the sampled check's).
    """
    s_values = range(n) if stragglers is None else stragglers
    m_values = range(1, n + 1) if messages is None else messages
    out = [Candidate("uncoded", 0, 1, expected_iteration_seconds(model, n, 0, 1, 1))]
    for s in s_values:
        for m in m_values:
            # s + check = 0, m = 1 is uncoded itself
            if s + check + m <= n and (s + check, m) != (0, 1):
                out.append(Candidate("ye_abbe", s, m, expected_iteration_seconds(model, n, s, s + check + m, m),
                                     check))
    if streamed and 1 + check < n:
        out.append(Candidate("cyclic", 1, 1, expected_streamed_seconds(model, n, 1 + check, chunks, confirm), check,
                             streamed=True))
    return sorted(out, key=lambda c: c.predicted_s)


def refusal(candidate: Candidate, n: int) -> str | None:
    """Why coded.codes would not build this code for ``n`` workers (numerics, parameters), or None."""
    if candidate.scheme == "uncoded" or candidate.streamed:
        return None  # uncoded and streamed sums have no numerics to refuse
    return _ye_abbe_refusal(n, candidate.s + candidate.check, candidate.m)


@functools.cache
def _ye_abbe_refusal(n: int, s: int, m: int) -> str | None:
    # building checks the conditioning of many responder sets: once per code is enough
    from coded.codes import gradient_code

    try:
        gradient_code("ye_abbe", n, s, m=m)
    except ValueError as error:
        return str(error)
    return None


def recommend(ranked: Sequence[Candidate], n: int) -> Candidate:
    """The fastest of ``ranked`` (as :func:`plan` orders them) that coded.codes builds."""
    return next(c for c in ranked if refusal(c, n) is None)  # uncoded always builds


def table3(n: int = 8) -> dict[tuple[int, int], float]:
    """Ye & Abbe's Table 3: E[T_tot] for every m <= d <= n (keys (m, d)), their parameters."""
    model = RuntimeModel(ShiftedExponential(1.6, 1 / 0.8), ShiftedExponential(6.0, 1 / 0.1))
    return {(m, d): expected_iteration_seconds(model, n, d - m, d, m)
            for m in range(1, n + 1) for d in range(m, n + 1)}
