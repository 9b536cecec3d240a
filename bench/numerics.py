"""Worst decode error of every exact code over its responder sets, next to the code's own estimate.

For each gradient scheme (frc, cyclic, ye_abbe on unit-circle, paper and Chebyshev points) and each
matmul scheme (polynomial, matdot, gpd on P workers), at n = 8, 16, 24, 30, 32, 48 and a few (s, m):

- the responder sets: all of them when there are at most 2000, otherwise every set missing a
  cyclic run of stragglers plus a seeded random sample (a different seed from the constructors'
  own check, so the sample is independent of it);
- the worst relative error ``max|decoded - truth| / max|truth|``, the truth being the exactly
  rounded sum (math.fsum) of random Gaussian partial gradients, or numpy's ``A @ B``;
- the code's estimate (the largest ``decode_weights(F).error_bound``), or, when the constructor
  refuses the parameters, its message's estimate, and then what the refused code WOULD give if it
  were built anyway with ``max_error=1.0`` (or without any limit when even that is refused, or
  refuses some of the sets at decode time);
- for ye_abbe, the error of the naive decoder of the paper (solve the (n-s) x (n-s) Vandermonde
  system of the responders' points and read the top m coefficients) on the same messages.

Goals from the issue: worst error <= 1e-9 for n <= 24 and <= 1e-6 for n <= 48 wherever the
scheme allows it.

Usage::

    python -m bench.numerics            # a few minutes on 2 cores
    python -m bench.numerics --quick    # n = 8, 16 only, seconds
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.common import (
    LoadGuard,
    add_common_arguments,
    code_line,
    command_line,
    fmt,
    machine_line,
    markdown_table,
    plot_panels,
    write_csv,
    write_markdown,
)
from coded.codes import IllConditionedError, gradient_code, matmul_code
from coded.codes.matmul import recovery_threshold

COLUMNS = [
    "kind", "scheme", "points", "n", "s", "m", "params", "waits_for", "sets", "exhaustive",
    "status", "worst_error", "bound", "constructor_estimate", "refusal_estimate",
    "forced_max_error", "forced_worst_error", "forced_bound", "naive_worst_error",
    "ill_conditioned_sets", "goal", "meets_goal", "seconds",
]
TABLE_COLUMNS = [
    "scheme", "points", "n", "s", "m", "params", "sets", "status", "worst_error", "bound",
    "constructor_estimate", "refusal_estimate", "forced_worst_error", "naive_worst_error", "goal",
    "meets_goal",
]
EXHAUSTIVE = 2000
LENGTH = 96  # gradient length: a multiple of 2 m for every m used, so no padding


@dataclass
class Case:
    """One parameter set to measure."""

    kind: str  # "gradient" or "matmul"
    scheme: str
    n: int  # workers
    s: int  # stragglers tolerated (matmul: P - R)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def points(self) -> str:
        if self.kind == "matmul":
            return "chebyshev"
        if self.scheme == "ye_abbe":
            return self.params.get("points", "unit_circle")
        return "-"

    @property
    def m(self) -> str:
        return str(self.params.get("m", 1)) if self.kind == "gradient" else "-"

    def params_text(self) -> str:
        shown = {k: v for k, v in self.params.items() if k != "points"}
        return ",".join(f"{k}={v}" for k, v in shown.items()) or "-"

    def build(self, max_error: float) -> Any:
        if self.kind == "gradient":
            # frc's coefficients are 0/1 sums, always exact: it takes no max_error.
            limit = {} if self.scheme == "frc" else {"max_error": max_error}
            return gradient_code(self.scheme, n=self.n, s=self.s, **self.params, **limit)
        return matmul_code(self.scheme, workers=self.n, max_error=max_error, **self.params)


def straggler_counts(n: int) -> list[int]:
    """s in {1, 2, n/8, n/4}."""
    return sorted({s for s in (1, 2, n // 8, n // 4) if 1 <= s < n})


def gradient_cases(n: int, quick: bool) -> Iterator[Case]:
    counts = straggler_counts(n)
    for s in sorted(set(counts) | {n // 4 - 1}):
        if s >= 1 and n % (s + 1) == 0:
            yield Case("gradient", "frc", n, s)
    for s in counts:
        yield Case("gradient", "cyclic", n, s)
    for points in ("unit_circle", "paper", "chebyshev"):
        for s in counts:
            for m in (1, 2, 4):
                if s + m <= n and not (quick and points != "unit_circle" and m == 4):
                    params: dict[str, Any] = {"m": m}
                    if points != "unit_circle":
                        params["points"] = points
                    yield Case("gradient", "ye_abbe", n, s, params)


def matmul_cases(workers: int) -> Iterator[Case]:
    """Small fixed thresholds, then for each s the largest threshold R <= P - s of each scheme."""
    seen: set[tuple[str, tuple[tuple[str, int], ...]]] = set()
    candidates: list[tuple[str, dict[str, int]]] = [
        ("polynomial", {"m": 2, "d": 2}),
        ("matdot", {"n": 4}),
        ("gpd", {"m": 2, "n": 2, "d": 2}),
    ]
    for s in straggler_counts(workers):
        target = workers - s
        candidates.append(("matdot", {"n": (target + 1) // 2}))
        side = math.isqrt(target)
        candidates.append(("polynomial", {"m": side, "d": target // side}))
        half = (target - 1) // 2
        side = max(1, math.isqrt(half))
        candidates.append(("gpd", {"m": side, "n": 2, "d": max(1, half // side)}))
    for scheme, params in candidates:
        key = (scheme, tuple(sorted(params.items())))
        threshold = recovery_threshold(scheme, **params)
        if key in seen or threshold > workers or threshold < 2:
            continue
        seen.add(key)
        yield Case("matmul", scheme, workers, workers - threshold, dict(params))


def responder_sets(
    n: int, size: int, rng: np.random.Generator, samples: int
) -> tuple[list[tuple[int, ...]], bool]:
    """All sets of ``size`` of n workers, or the cyclic-run straggler patterns plus a random sample."""
    if math.comb(n, size) <= EXHAUSTIVE:
        return list(itertools.combinations(range(n), size)), True
    missing = n - size
    runs = {tuple(sorted(set(range(n)) - {(a + t) % n for t in range(missing)})) for a in range(n)}
    sampled = {tuple(sorted(rng.choice(n, size, replace=False).tolist())) for _ in range(samples)}
    return sorted(runs) + sorted(sampled - runs), False


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def exact_sum(partials: np.ndarray) -> np.ndarray:
    """The correctly rounded column sums (math.fsum), independent of every code."""
    return np.array([math.fsum(col) for col in partials.T])


def naive_vandermonde(
    code: Any, workers: Sequence[int], sent: dict[int, np.ndarray], length: int
) -> np.ndarray:
    """Ye & Abbe's decoder (spec 001-002 II.4): solve A_F, read the top m coefficients."""
    n, s, m = code.n, code.s, code.m
    theta = np.asarray(code.theta)[list(workers)]
    received = np.stack([sent[w] for w in workers])
    if np.iscomplexobj(theta):
        received = received.view(np.complex128)
    vander = np.vander(theta, n - s, increasing=True)  # row c: powers of theta of worker c
    coefficients = np.linalg.solve(vander, received)  # row r: coefficient of x^r, per message entry
    sums = coefficients[n - s - m : n - s]  # (m, L'): row u is sum_j g_j[v m + u]
    flat = np.ascontiguousarray(sums.T).reshape(-1)
    flat = flat.view(np.float64) if np.iscomplexobj(flat) else flat.real
    return flat[:length]


def measure_gradient(
    code: Any, sets: Sequence[tuple[int, ...]], rng: np.random.Generator, naive: bool
) -> dict[str, Any]:
    partials = rng.standard_normal((code.k, LENGTH))
    truth = exact_sum(partials)
    sent = {i: code.encode(i, {j: partials[j] for j in code.partitions(i)}) for i in range(code.n)}
    worst = bound = naive_worst = 0.0
    ill = 0
    for workers in sets:
        try:
            weights = code.decode_weights(workers)
        except IllConditionedError:
            ill += 1
            bound = max(bound, code.worst_error_bound([workers]))
            continue
        bound = max(bound, weights.error_bound)
        got = code.decode({w: sent[w] for w in workers}, length=LENGTH)
        worst = max(worst, relative_error(got, truth))
        if naive:
            naive_got = naive_vandermonde(code, workers, sent, LENGTH)
            naive_worst = max(naive_worst, relative_error(naive_got, truth))
    return {
        "worst_error": worst if ill < len(sets) else None,
        "bound": bound,
        "naive_worst_error": naive_worst if naive else None,
        "ill_conditioned_sets": ill,
    }


def measure_matmul(
    code: Any, sets: Sequence[tuple[int, ...]], rng: np.random.Generator
) -> dict[str, Any]:
    a = rng.standard_normal((code.m * 4, code.n * 3))
    b = rng.standard_normal((code.n * 3, code.d * 2))
    truth = a @ b
    results = {p: x @ y for p, (x, y) in enumerate(code.encode(a, b))}
    worst = bound = 0.0
    ill = 0
    for workers in sets:
        # MatmulCode has no public accessor for its decode weights; read the estimate from its decoder.
        bound = max(bound, code._decoder.solve(tuple(workers)).error_bound)
        try:
            got = code.decode({p: results[p] for p in workers})
        except IllConditionedError:
            ill += 1
            continue
        worst = max(worst, relative_error(got, truth))
    return {"worst_error": worst if ill < len(sets) else None, "bound": bound, "ill_conditioned_sets": ill}


_ESTIMATE = re.compile(r"estimated error ([0-9.e+-]+)|best estimated error ([0-9.e+-]+)")


def refusal_estimate(message: str) -> float | None:
    match = _ESTIMATE.search(message)
    return float(match.group(1) or match.group(2)) if match else None


def run_case(case: Case, seed: int, samples: int) -> dict[str, Any]:
    started = time.perf_counter()
    waits_for = case.n - case.s
    label = case.scheme + case.params_text() + case.points
    rng = np.random.default_rng([seed, case.n, case.s, zlib.crc32(label.encode())])
    sets, exhaustive = responder_sets(case.n, waits_for, rng, samples)
    row: dict[str, Any] = {
        "kind": case.kind, "scheme": case.scheme, "points": case.points, "n": case.n, "s": case.s,
        "m": case.m, "params": case.params_text(), "waits_for": waits_for, "sets": len(sets),
        "exhaustive": exhaustive,
    }
    try:
        code = case.build(max_error=1e-6)
        row["status"] = "ok"
        row["constructor_estimate"] = getattr(code, "worst_error", None)  # frc: exact, no check
    except ValueError as error:
        row["status"] = "refused"
        row["refusal_estimate"] = refusal_estimate(str(error))
        code = None
    naive = case.scheme == "ye_abbe"

    def measure(code: Any) -> dict[str, Any]:
        if case.kind == "matmul":
            return measure_matmul(code, sets, rng)
        return measure_gradient(code, sets, rng, naive)

    if code is not None:
        row.update(measure(code))
    else:
        for forced in (1.0, math.inf):  # inf when 1.0 is refused or refuses some set at decode
            try:
                code = case.build(max_error=forced)
            except ValueError:
                continue
            measured = measure(code)
            if measured["ill_conditioned_sets"] and forced < math.inf:
                continue
            row["forced_max_error"] = forced
            row["forced_worst_error"] = measured["worst_error"]
            row["forced_bound"] = measured["bound"]
            row["naive_worst_error"] = measured.get("naive_worst_error")
            break
    goal = 1e-9 if case.n <= 24 else 1e-6
    row["goal"] = goal
    if row["status"] == "ok" and row.get("worst_error") is not None:
        row["meets_goal"] = "yes" if row["worst_error"] <= goal and not row["ill_conditioned_sets"] else "NO"
    else:
        row["meets_goal"] = "refused" if row["status"] == "refused" else "NO"
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """Worst error per n over the accepted codes of each family, and what the refused ones would give."""
    families = [
        ("frc", lambda r: r["scheme"] == "frc"),
        ("cyclic", lambda r: r["scheme"] == "cyclic"),
        ("ye_abbe unit_circle", lambda r: r["scheme"] == "ye_abbe" and r["points"] == "unit_circle"),
        ("ye_abbe paper", lambda r: r["scheme"] == "ye_abbe" and r["points"] == "paper"),
        ("ye_abbe chebyshev", lambda r: r["scheme"] == "ye_abbe" and r["points"] == "chebyshev"),
        ("matmul (all)", lambda r: r["kind"] == "matmul"),
    ]
    out = []
    for n in sorted({r["n"] for r in rows}):
        for name, keep in families:
            group = [r for r in rows if r["n"] == n and keep(r)]
            if not group:
                continue
            accepted = [r for r in group if r["status"] == "ok" and r.get("worst_error") is not None]
            refused = [r for r in group if r["status"] == "refused"]
            naive = [r["naive_worst_error"] for r in group if r.get("naive_worst_error") is not None]
            would = [r["forced_worst_error"] for r in refused if r.get("forced_worst_error") is not None]
            out.append({
                "n": n,
                "family": name,
                "accepted": len(accepted),
                "refused": len(refused),
                "worst_error_accepted": max((r["worst_error"] for r in accepted), default=None),
                "worst_bound_accepted": max((r["bound"] for r in accepted), default=None),
                "smallest_error_refused_would_give": min(would, default=None),
                "naive_decoder_worst": max(naive, default=None),
                "misses_goal": sum(r["meets_goal"] == "NO" for r in group),
            })
    return markdown_table(out, list(out[0]) if out else [])


def error_curves(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """log10 of the worst accepted error against n (or P), per scheme and evaluation points."""
    panels: dict[str, dict[str, dict[int, float]]] = {"gradient codes": {}, "matmul codes": {}}
    for row in rows:
        if row["status"] != "ok" or not row["worst_error"] or row["worst_error"] != row["worst_error"]:
            continue
        label = row["scheme"] + ("" if row["points"] in ("-", "") else f" ({row['points']})")
        curve = panels[f"{row['kind']} codes"].setdefault(label, {})
        curve[row["n"]] = max(curve.get(row["n"], 0.0), float(row["worst_error"]))
    return {name: {label: [(n, math.log10(max(e, 1e-17))) for n, e in sorted(curve.items())]
                   for label, curve in curves.items()} for name, curves in panels.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--seed", type=int, default=20240601, help="seed of the data and the set samples")
    parser.add_argument("--samples", type=int, default=300, help="random responder sets when not exhaustive")
    parser.add_argument("--workers", type=int, nargs="*", help="override the values of n")
    args = parser.parse_args(argv)
    guard = LoadGuard(args.allow_busy, args.quick)  # refuses a busy machine
    sizes = args.workers or ([8, 16] if args.quick else [8, 16, 24, 30, 32, 48])
    samples = min(args.samples, 60) if args.quick else args.samples
    header = [
        f"bench/numerics.py: n = {sizes}, s in {{1, 2, n/8, n/4}}, m in {{1, 2, 4}}, "
        f"gradient length {LENGTH}, exhaustive up to {EXHAUSTIVE} responder sets else cyclic runs "
        f"+ {samples} random, seed {args.seed}"
        + (" (quick)" if args.quick else ""),
        machine_line(),
        code_line(),
        f"command: `{command_line()}`",
    ]
    for line in header:
        print(line, flush=True)
    started = time.perf_counter()
    rows = []
    for n in sizes:
        cases = list(gradient_cases(n, args.quick)) + list(matmul_cases(n))
        for case in cases:
            row = run_case(case, args.seed, samples)
            rows.append(row)
            print(
                f"  {row['kind']:8} {row['scheme']:10} {row['points']:11} n={row['n']:<3} s={row['s']:<3} "
                f"{row['params']:16} {row['status']:7} worst={fmt(row.get('worst_error')):8} "
                f"bound={fmt(row.get('bound')):8} refused_at={fmt(row.get('refusal_estimate')):8} "
                f"would_give={fmt(row.get('forced_worst_error')):8} "
                f"naive={fmt(row.get('naive_worst_error')):8} "
                f"goal={row['meets_goal']}",
                flush=True,
            )
    elapsed = time.perf_counter() - started
    header.append(f"wall time {elapsed:.1f} s for {len(rows)} parameter sets")
    print(header[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "numerics.csv", rows, COLUMNS)
    table = summary(rows)
    print(table)
    plot_panels(error_curves(rows), args.out / "numerics.png", "workers (n for gradient codes, P for matmul)",
                "log10 worst relative error (accepted codes)", header[0] + " | " + header[1])
    guard.finish()
    header = [*header, guard.line()]
    write_markdown(
        args.out / "numerics.md",
        "Decode accuracy of every exact code",
        header,
        [
            "Errors are `max|decoded - truth| / max|truth|` over the listed responder sets; `bound` is the "
            "largest `error_bound` the code itself estimates for them; `refusal_estimate` is the estimate in "
            "the constructor's ValueError; `forced_worst_error` is what a refused code gives when built with "
            "`max_error=1.0` (or no limit when even that is refused, see the CSV's `forced_max_error`); "
            "`naive_worst_error` is the paper's Vandermonde decoder on the same messages (ye_abbe only). "
            "Goals: <= 1e-9 for n <= 24, <= 1e-6 for n <= 48.",
            "## Summary per n",
            table,
            "## Every parameter set",
            markdown_table(rows, TABLE_COLUMNS),
        ],
    )
    print(f"wrote {args.out / 'numerics.csv'} and {args.out / 'numerics.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
