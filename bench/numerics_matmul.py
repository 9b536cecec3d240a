"""The matmul part of bench/numerics.py: worst decode error of every matmul scheme, unit circle
(rotation embeddings) beside the original real Chebyshev points.

For P in 16, 32, 48, 64, 96 and each straggler count s in {1, 2, 4, 8, P/8, P/4}, every scheme
(polynomial, matdot, polydot, gpd, and gpd with d = 1 on a vector) gets the split with the largest
recovery threshold R <= P - s (so it tolerates at least s stragglers; ``s`` in the results is the
P - R it tolerates). For each code, on both evaluations:

- the responder sets: all sets of R when there are at most 2000, otherwise every cyclic run of
  P - R stragglers, runs of P - R + 1 with one gap (R - 1 neighbours plus any other worker, from
  8 starting points), and a seeded random sample;
- the worst relative error ``max|decoded - A @ B| / max|A @ B|`` (numpy's product is the truth), the
  code's own estimate (``error_bound``), and sets refused at decode (IllConditionedError);
- error location: with R + 2 neighbouring results, one of them corrupted, whether ``correct``
  names it and how exact the corrected product is;
- for a code the constructor refuses, what it would give if built anyway (``max_error=inf``).

Beside them, the other stable constructions of the literature, by the decode-error estimate that
the constructor uses (``error_bound``, worst over the same kind of sets): random Khatri-Rao
products (Subramaniam, Heidarzadeh & Narayanan; polynomial splits, Gaussian coefficients) and
Chebyshev-basis MatDot at Chebyshev points (Fahim & Cadambe), next to the rotation embedding and
the original monomials at Chebyshev points.

Goals from the issue: <= 1e-9 where P <= 32 and s <= 4, <= 1e-6 at P = 64 with s <= 4, and a
refusal (never a wrong product) wherever the accuracy cannot be had.
"""

from __future__ import annotations

import itertools
import math
import textwrap
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coded.codes import DecodingFailure, IllConditionedError, NotDecodableError, matmul_code
from coded.codes.linear import LinearDecoder
from coded.codes.matmul import matmul_points, recovery_threshold
from coded.codes.matmul_plan import best_split
from coded.codes.points import chebyshev

COLUMNS = [
    "scheme", "points", "P", "target_s", "s", "params", "R", "sets", "exhaustive", "status",
    "worst_error", "bound", "constructor_estimate", "refusal_estimate", "forced_worst_error",
    "ill_conditioned_sets", "locate_trials", "located", "detected_not_located", "silent_wrong",
    "located_worst_error", "goal", "meets_goal", "seconds",
]
SCHEMES = ("polynomial", "matdot", "polydot", "gpd", "gpd_matvec")
EXHAUSTIVE = 2000
MAX_ERROR = 1e-6  # matmul_code's default: what an accepted code promises
LOCATE_TRIALS = 10


@dataclass(frozen=True)
class MatmulCase:
    scheme: str  # a matmul scheme, or gpd_matvec (gpd with d = 1 and a vector B)
    points: str
    workers: int
    target_s: int
    params: tuple[tuple[str, int], ...]

    @property
    def code_scheme(self) -> str:
        return "gpd" if self.scheme == "gpd_matvec" else self.scheme

    @property
    def threshold(self) -> int:
        return recovery_threshold(self.code_scheme, **dict(self.params))

    def params_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.params)

    def build(self, max_error: float) -> Any:
        return matmul_code(self.code_scheme, workers=self.workers, points=self.points, max_error=max_error,
                           **dict(self.params))


def straggler_targets(workers: int) -> list[int]:
    """s in {1, 2, 4, 8, P/8, P/4}."""
    return sorted({s for s in (1, 2, 4, 8, workers // 8, workers // 4) if 1 <= s < workers})


def cases(sizes: Sequence[int]) -> list[MatmulCase]:
    out = []
    for workers in sizes:
        for target in straggler_targets(workers):
            for scheme in SCHEMES:
                vector = scheme == "gpd_matvec"
                split = best_split("gpd" if vector else scheme, workers - target, vector)
                if split is None:
                    continue
                for points in matmul_points():
                    out.append(MatmulCase(scheme, points, workers, target, tuple(split.items())))
    return out


def responder_sets(workers: int, size: int, rng: np.random.Generator, samples: int,
                   exhaustive: int = EXHAUSTIVE) -> tuple[list[tuple[int, ...]], bool]:
    """All sets of ``size`` when there are at most ``exhaustive``, or the bunched ones (runs, runs
    with one gap) plus a random sample."""
    if math.comb(workers, size) <= exhaustive:
        return list(itertools.combinations(range(workers), size)), True

    def run(start: int, length: int) -> list[int]:
        return [(start + t) % workers for t in range(length)]

    sets = {tuple(sorted(run(start, size))) for start in range(workers)}
    for start in range(0, workers, max(1, workers // 8)):
        window = run(start, size - 1)
        sets.update(tuple(sorted([*window, other])) for other in range(workers) if other not in window)
    bunched = sorted(sets)
    sampled = {tuple(sorted(rng.choice(workers, size, replace=False).tolist())) for _ in range(samples)}
    return bunched + sorted(sampled - sets), False


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def inputs(code: Any, vector: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    rows, inner, columns = code.size_multiples
    a = rng.standard_normal((2 * rows, inner))
    return a, rng.standard_normal(inner) if vector else rng.standard_normal((inner, columns))


def measure(code: Any, sets: Sequence[tuple[int, ...]], vector: bool, rng: np.random.Generator) -> dict[str, Any]:
    """Worst error and estimate over ``sets``, and the error-location trials."""
    a, b = inputs(code, vector, rng)
    truth = a @ b
    results = {p: x @ y for p, (x, y) in enumerate(code.encode(a, b))}
    worst = bound = 0.0
    ill = 0
    for workers in sets:
        bound = max(bound, code.error_bound(workers))
        try:
            got = code.decode({p: results[p] for p in workers})
        except IllConditionedError:
            ill += 1
            continue
        worst = max(worst, relative_error(got, truth))
    out: dict[str, Any] = {"worst_error": worst if ill < len(sets) else None, "bound": bound,
                           "ill_conditioned_sets": ill}
    r, p = code.recovery_threshold, code.workers
    if r + 2 <= p:
        located = detected = silent = 0
        worst_located = 0.0
        for _ in range(LOCATE_TRIALS):
            start = int(rng.integers(p))
            chosen = [(start + t) % p for t in range(r + 2)]  # neighbours: the hardest sets
            wrong = int(rng.choice(chosen))
            scale = float(np.abs(results[wrong]).max())
            received = {q: results[q] + (rng.standard_normal(results[q].shape) * scale if q == wrong else 0)
                        for q in chosen}
            try:
                product, found = code.correct(received, max_errors=1)
            except (DecodingFailure, NotDecodableError):
                detected += 1  # refused: not located, never wrong
                continue
            error = relative_error(product, truth)
            if found == (wrong,):
                located += 1
                worst_located = max(worst_located, error)
            elif error > MAX_ERROR:
                silent += 1
        out.update(locate_trials=LOCATE_TRIALS, located=located, detected_not_located=detected,
                   silent_wrong=silent, located_worst_error=worst_located)
    return out


ALTERNATIVE_STRAGGLERS = (1, 2, 4, 8)


def worst_estimate(bound: Any, workers: int, size: int, rng: np.random.Generator) -> float:
    """Largest ``bound(set)`` over every run of ``size`` neighbours (cyclic), runs with one gap and
    100 random sets."""
    sets, _ = responder_sets(workers, size, rng, 100)
    return max(bound(f) for f in sets)


def linear_bound(encoding: np.ndarray, targets: np.ndarray) -> Any:
    decoder = LinearDecoder(encoding, targets, max_error=math.inf)
    return lambda workers: decoder.solve(tuple(workers)).error_bound


def alternatives(sizes: Sequence[int], seed: int) -> list[dict[str, Any]]:
    """The estimate of each construction at P workers and s stragglers (R = P - s)."""
    rows = []
    for workers, s in itertools.product(sizes, ALTERNATIVE_STRAGGLERS):
        r = workers - s
        rng = np.random.default_rng([seed, workers, s])
        x = chebyshev(workers)
        monomials = x[:, None] ** np.arange(r)[None, :]
        entry: dict[str, Any] = {"P": workers, "s": s, "R": r}
        split = best_split("polynomial", r)
        if split is not None and recovery_threshold("polynomial", **split) == r:
            m, d = split["m"], split["d"]
            rotation = matmul_code("polynomial", workers=workers, max_error=math.inf, **split)
            entry["polynomial, rotations"] = worst_estimate(rotation.error_bound, workers, r, rng)
            g, h = rng.standard_normal((workers, m)), rng.standard_normal((workers, d))
            khatri_rao = np.einsum("pi,pk->pik", g, h).reshape(workers, m * d)
            entry["polynomial, random Khatri-Rao"] = worst_estimate(linear_bound(khatri_rao, np.eye(r)), workers,
                                                                    r, rng)
            entry["polynomial, Chebyshev monomials"] = worst_estimate(linear_bound(monomials, np.eye(r)), workers,
                                                                      r, rng)
        n = (r + 1) // 2  # MatDot's threshold 2n - 1 is odd: R or R - 1
        odd = 2 * n - 1
        entry["matdot R"] = odd
        rotation = matmul_code("matdot", workers=workers, max_error=math.inf, n=n)
        entry["matdot, rotations"] = worst_estimate(rotation.error_bound, workers, odd, rng)
        # Fahim & Cadambe: orthonormal Chebyshev polynomials; A @ B is the integral of the product
        # polynomial against the Chebyshev weight, pi times its T_0 coefficient
        basis = np.cos(np.arange(odd)[None, :] * np.arccos(x)[:, None])  # T_l(x_p)
        entry["matdot, Chebyshev basis"] = worst_estimate(linear_bound(basis, np.eye(odd)[:1]), workers, odd, rng)
        entry["matdot, Chebyshev monomials"] = worst_estimate(
            linear_bound(monomials[:, :odd], np.eye(odd)[n - 1 : n]), workers, odd, rng)
        rows.append(entry)
    return rows


def random_tail(workers: int, stragglers: int, samples: int, seed: int) -> dict[str, Any]:
    """A random Khatri-Rao code has no structurally worst set: its estimate over many random sets
    (the tail that a sample of a few hundred misses), beside the rotation code's certified worst."""
    r = workers - stragglers
    split = best_split("polynomial", r)
    assert split is not None
    rng = np.random.default_rng([seed, workers, stragglers, 1])
    g, h = rng.standard_normal((workers, split["m"])), rng.standard_normal((workers, split["d"]))
    decoder = LinearDecoder(np.einsum("pi,pk->pik", g, h).reshape(workers, -1), np.eye(r), max_error=math.inf)
    sets = [tuple(sorted(rng.choice(workers, r, replace=False).tolist())) for _ in range(samples)]
    bounds = np.array([w.error_bound for start in range(0, samples, 100)
                       for w in decoder.solve_many(sets[start : start + 100])])
    rotation = matmul_code("polynomial", workers=workers, max_error=math.inf, **split)
    return {"P": workers, "s": stragglers, "split": ",".join(f"{k}={v}" for k, v in split.items()),
            "random sets": samples, "Khatri-Rao median": float(np.median(bounds)),
            "Khatri-Rao 99.9%": float(np.quantile(bounds, 0.999)), "Khatri-Rao worst": float(bounds.max()),
            "rotations, certified worst": rotation.worst_error}


def goal(workers: int, stragglers: int) -> float | None:
    if stragglers <= 4 and workers <= 32:
        return 1e-9
    if stragglers <= 4 and workers <= 64:
        return 1e-6
    return None


def run_case(case: MatmulCase, seed: int, samples: int, exhaustive: int) -> dict[str, Any]:
    started = time.perf_counter()
    r = case.threshold
    label = f"{case.scheme}{case.params_text()}{case.points}"
    rng = np.random.default_rng([seed, case.workers, case.target_s, zlib.crc32(label.encode())])
    sets, every = responder_sets(case.workers, r, rng, samples, exhaustive)
    row: dict[str, Any] = {
        "scheme": case.scheme, "points": case.points, "P": case.workers, "target_s": case.target_s,
        "s": case.workers - r, "params": case.params_text(), "R": r, "sets": len(sets), "exhaustive": every,
    }
    vector = case.scheme == "gpd_matvec"
    try:
        code = case.build(MAX_ERROR)
        row["status"] = "ok"
        row["constructor_estimate"] = code.worst_error
        row.update(measure(code, sets, vector, rng))
    except ValueError as error:
        row["status"] = "refused"
        row["refusal_estimate"] = refusal_estimate(str(error))
        forced = measure(case.build(math.inf), sets, vector, rng)
        row["forced_worst_error"] = forced["worst_error"]
        row["bound"] = forced["bound"]
    target = goal(case.workers, row["s"])
    row["goal"] = target
    row["meets_goal"] = verdict(row, target)
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def refusal_estimate(message: str) -> float | None:
    words = message.split("estimated error ")
    return float(words[1].split()[0]) if len(words) > 1 else None


def verdict(row: dict[str, Any], target: float | None) -> str:
    """yes: accepted and within the goal (or, where the issue sets none, within max_error or the
    code's own estimate for those sets, which decoding enforces); refused: a clear refusal where no
    goal applies; NO otherwise. Wrong results that were detected but not located are noted."""
    if row["status"] == "refused":
        return "NO (refused)" if target is not None else "refused"
    if row["ill_conditioned_sets"]:
        return f"refused {row['ill_conditioned_sets']} sets at decode"
    if row.get("silent_wrong"):
        return "NO (wrong product)"
    worst = row["worst_error"]
    if target is not None:
        answer = "yes" if worst <= target else "NO"
    else:
        answer = "yes" if worst <= MAX_ERROR else "within its estimate" if worst <= row["bound"] else "NO"
    if row.get("detected_not_located"):
        answer += f"; {row['detected_not_located']}/{row['locate_trials']} wrong results detected, not located"
    return answer


def summary(rows: Sequence[dict[str, Any]], points: str) -> list[dict[str, Any]]:
    """Per (P, target s): each scheme's worst error, or why it is refused."""
    out = []
    for (workers, target), group in itertools.groupby(
            sorted((r for r in rows if r["points"] == points), key=lambda r: (r["P"], r["target_s"])),
            key=lambda r: (r["P"], r["target_s"])):
        entry: dict[str, Any] = {"P": workers, "s": target}
        for row in group:
            if row["status"] == "ok":
                entry[row["scheme"]] = f"{row['worst_error']:.1e} (R={row['R']})"
            elif row.get("forced_worst_error") is not None:
                entry[row["scheme"]] = f"refused; would give {row['forced_worst_error']:.0e}"
            else:
                entry[row["scheme"]] = "refused"
        out.append(entry)
    return out


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Worst error against P, one panel per straggler count, solid: unit circle, dashed: Chebyshev;
    hollow markers: refused codes (what they would give)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = [("s = 1", lambda p, s: s == 1), ("s = 2", lambda p, s: s == 2), ("s = 4", lambda p, s: s == 4),
               ("s = 8", lambda p, s: s == 8), ("s = P/8", lambda p, s: s == p // 8),
               ("s = P/4", lambda p, s: s == p // 4)]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), squeeze=False)
    colours = dict(zip(SCHEMES, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for ax, (name, keep) in zip(axes.flat, classes, strict=True):
        for scheme, points in itertools.product(SCHEMES, matmul_points()):
            chosen = sorted((r for r in rows if r["scheme"] == scheme and r["points"] == points
                             and keep(r["P"], r["target_s"])), key=lambda r: r["P"])
            values = [(r["P"], r["worst_error"] if r["status"] == "ok" else r.get("forced_worst_error"),
                       r["status"] == "ok") for r in chosen]
            values = [(p, max(e, 1e-17), ok) for p, e, ok in values if e is not None]
            if not values:
                continue
            style = "-" if points == "unit_circle" else "--"
            ax.plot([p for p, _, _ in values], [e for _, e, _ in values], style, color=colours[scheme],
                    label=f"{scheme} ({points})")
            for p, e, ok in values:
                ax.plot([p], [e], "o", color=colours[scheme], fillstyle="full" if ok else "none")
        ax.axhline(MAX_ERROR, color="grey", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("workers P")
        ax.set_ylabel("worst relative error")
    axes.flat[0].legend(fontsize=6)
    note = (" | solid: unit circle, dashed: Chebyshev; hollow: refused by the constructor (what it would give); "
            "grey: max_error")
    fig.suptitle("\n".join(textwrap.wrap(title + note, 220)), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
