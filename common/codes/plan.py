"""Choosing a gradient code from measured costs: Ye & Abbe's runtime model (Sec. 5, Table 3).

A worker holding ``d`` partitions and sending ``1/m`` of a gradient finishes after

    T_i = d * C_i + M_i / m + D_i

where ``C_i`` is its time to compute one partition's gradient, ``M_i`` its time to send a whole
gradient and ``D_i`` a straggler delay of the call; all independent shifted exponentials. A code
that tolerates ``s`` stragglers ends the iteration at the ``(n - s)``-th smallest ``T_i``. The
expected iteration time is computed exactly (closed-form CDF of a sum of exponentials, the
order-statistic identity, quadrature), so Table 3 of the paper is reproduced to its 4 decimals.

Pure math: no I/O. ``coded plan`` and ``bench/plan.py`` call it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Candidate",
    "RuntimeModel",
    "ShiftedExponential",
    "expected_iteration_seconds",
    "expected_streamed_seconds",
    "fit_costs",
    "fit_link_costs",
    "plan",
    "recommend",
    "refusal",
    "table3",
]


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


def expected_iteration_seconds(model: RuntimeModel, n: int, s: int, d: int, m: int, points: int = 200_001) -> float:
    """E[the (n - s)-th smallest of n i.i.d. worker times] for ``d`` partitions and ``1/m`` sent.

    Uses E[X] = shift + integral of P(X > shift + t) dt over t >= 0, with
    P(X <= shift + t) = P(at least n - s of the workers are done by then).
    """
    if not 0 <= s < n or d < 1 or m < 1:
        raise ValueError(f"need 0 <= s < n, d >= 1, m >= 1 (got n={n}, s={s}, d={d}, m={m})")
    terms = model.worker_time(d, m)
    shift = sum(term.shift for term in terms)
    means = [term.mean for term in terms]
    if not any(means):
        return shift
    # the integrand is below 1e-15 once every worker is done with that probability
    horizon = sum(means) * (40 + 3 * math.log(n) + 5 * len(means))
    t = np.linspace(0.0, horizon, points)
    done = _at_least(n - s, n, _sum_cdf(means, t))
    # numpy >= 2 names it trapezoid (2.4 dropped trapz, so its stubs lack it); numpy 1.26 has only trapz
    integral = np.trapezoid(1 - done, t) if hasattr(np, "trapezoid") else np.trapz(1 - done, t)  # type: ignore[attr-defined]
    return shift + float(integral)


def expected_streamed_seconds(model: RuntimeModel, n: int, samples: int = 20_000, seed: int = 0) -> float:
    """E[iteration time] of streamed replies (frc, cyclic) under the runtime model, by Monte Carlo.

    Worker i starts after its delay D_i and computes partitions at 1/C_i each; the master has the
    gradient once the n partitions' worth of work is done, whoever did it, plus one whole
    gradient's sending (the pieces of the last partition): the smallest T with
    ``sum_i max(0, T - D_i - M_i) / C_i = n``. This fluid bound assumes a fast worker can take
    over any slow one's pieces; with s + 1 holders per partition it is reached when every slow
    worker's partition has a fast holder (bench/partial.py measures how close a cluster comes).
    """
    rng = np.random.default_rng(seed)
    c = model.compute.sample(rng, (samples, n))
    start = model.delay.sample(rng, (samples, n)) + model.communicate.sample(rng, (samples, n))
    rate = 1.0 / np.maximum(c, 1e-12)
    order = np.argsort(start, axis=1)
    start, rate = np.take_along_axis(start, order, axis=1), np.take_along_axis(rate, order, axis=1)
    # work done by T with the first j workers started: sum_{i<j} rate_i (T - start_i); solve for the j
    # at which n partitions are reached, interval by interval
    rates = np.cumsum(rate, axis=1)
    weighted = np.cumsum(rate * start, axis=1)
    finish = (n + weighted) / rates  # T if exactly the first j workers contribute
    nxt = np.concatenate([start[:, 1:], np.full((samples, 1), np.inf)], axis=1)
    valid = (finish >= start) & (finish <= nxt)
    return float(np.mean(np.where(valid, finish, np.inf).min(axis=1))) + model.overhead


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


def plan(model: RuntimeModel, n: int, stragglers: Iterable[int] | None = None,
         messages: Iterable[int] | None = None, check: int = 0, streamed: bool = False) -> list[Candidate]:
    """Every exact code for ``n`` workers with its expected iteration time, fastest first.

    ``stragglers`` (s) and ``messages`` (m) limit the grid (default: all with s + check + m <= n).
    With ``check`` replies beyond decoding (the default check of a job: 1), a code that does not
    wait for s workers holds d = s + check + m partitions per worker and the iteration still ends
    at the (n - s)-th fastest worker. Uncoded waits for all n and checks nothing. Whether a code
    can be built with acceptable numerics is the caller's check (coded.codes). With ``streamed``,
    cyclic with streamed replies is ranked too (:func:`expected_streamed_seconds`; s = 1, one
    dead worker tolerated: more s only holds more data, it computes no more).
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
        # a worker that takes over pieces of a late one's partition sends each as a whole gradient:
        # one trip more over its link than the fluid bound counts (nothing on loopback, a lot on 100 Mbit/s)
        takeover = model.communicate.shift + model.communicate.mean
        out.append(Candidate("cyclic", 1, 1, expected_streamed_seconds(model, n) + takeover, check, streamed=True))
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
