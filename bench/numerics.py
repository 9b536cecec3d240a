"""Worst decode error of every exact code over its responder sets, next to the code's own estimate.

Gradient codes (frc, cyclic, ye_abbe on unit-circle, paper and Chebyshev points) at n = 8, 16, 24,
30, 32, 48 and a few (s, m):

- the responder sets: all of them when there are at most 2000, otherwise every set missing a
  cyclic run of stragglers plus a seeded random sample (a different seed from the constructors'
  own check, so the sample is independent of it);
- the worst relative error ``max|decoded - truth| / max|truth|``, the truth being the exactly
  rounded sum (math.fsum) of random Gaussian partial gradients;
- the code's estimate (the largest ``decode_weights(F).error_bound``), or, when the constructor
  refuses the parameters, its message's estimate, and then what the refused code WOULD give if it
  were built anyway with ``max_error=1.0`` (or without any limit when even that is refused, or
  refuses some of the sets at decode time);
- for ye_abbe, the error of the naive decoder of the paper (solve the (n-s) x (n-s) Vandermonde
  system of the responders' points and read the top m coefficients) on the same messages.

Goals: worst error <= 1e-9 for n <= 24 and <= 1e-6 for n <= 48 wherever the scheme allows it.

Matmul codes at P = 16, 32, 48, 64, 96, unit circle beside Chebyshev: bench/numerics_matmul.py.

Usage::

    python -m bench.numerics            # several minutes on 2 cores
    python -m bench.numerics --quick    # n = 8, 12 and P = 16 only; all responder sets up to 200
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

from bench import numerics_matmul
from bench.common import fmt, markdown_table, plot_panels
from bench.skeleton import Bench
from coded.codes import IllConditionedError, gradient_code

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
QUICK_EXHAUSTIVE = 200  # --quick: larger cases take the sampled path, so a smoke run exercises both
LENGTH = 96  # gradient length: a multiple of 2 m for every m used, so no padding


@dataclass
class Case:
    """One gradient-code parameter set to measure."""

    kind: str  # "gradient"
    scheme: str
    n: int  # workers
    s: int  # stragglers tolerated
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def points(self) -> str:
        if self.scheme == "ye_abbe":
            return self.params.get("points", "unit_circle")
        return "-"

    @property
    def m(self) -> str:
        return str(self.params.get("m", 1))

    def params_text(self) -> str:
        shown = {k: v for k, v in self.params.items() if k != "points"}
        return ",".join(f"{k}={v}" for k, v in shown.items()) or "-"

    def build(self, max_error: float) -> Any:
        # frc's coefficients are 0/1 sums, always exact: it takes no max_error.
        limit = {} if self.scheme == "frc" else {"max_error": max_error}
        return gradient_code(self.scheme, n=self.n, s=self.s, **self.params, **limit)


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


def responder_sets(
    n: int, size: int, rng: np.random.Generator, samples: int, exhaustive: int = EXHAUSTIVE
) -> tuple[list[tuple[int, ...]], bool]:
    """All sets of ``size`` of n workers when there are at most ``exhaustive``, or the cyclic-run
    straggler patterns plus a random sample."""
    if math.comb(n, size) <= exhaustive:
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


_ESTIMATE = re.compile(r"estimated error ([0-9.e+-]+)|best estimated error ([0-9.e+-]+)")


def refusal_estimate(message: str) -> float | None:
    match = _ESTIMATE.search(message)
    return float(match.group(1) or match.group(2)) if match else None


def run_case(case: Case, seed: int, samples: int, exhaustive: int) -> dict[str, Any]:
    started = time.perf_counter()
    waits_for = case.n - case.s
    label = case.scheme + case.params_text() + case.points
    rng = np.random.default_rng([seed, case.n, case.s, zlib.crc32(label.encode())])
    sets, every = responder_sets(case.n, waits_for, rng, samples, exhaustive)
    row: dict[str, Any] = {
        "kind": case.kind, "scheme": case.scheme, "points": case.points, "n": case.n, "s": case.s,
        "m": case.m, "params": case.params_text(), "waits_for": waits_for, "sets": len(sets),
        "exhaustive": every,
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
    panels: dict[str, dict[str, dict[int, float]]] = {"gradient codes": {}}
    for row in rows:
        if row["status"] != "ok" or not row["worst_error"] or row["worst_error"] != row["worst_error"]:
            continue
        label = row["scheme"] + ("" if row["points"] in ("-", "") else f" ({row['points']})")
        curve = panels[f"{row['kind']} codes"].setdefault(label, {})
        curve[row["n"]] = max(curve.get(row["n"], 0.0), float(row["worst_error"]))
    return {name: {label: [(n, math.log10(max(e, 1e-17))) for n, e in sorted(curve.items())]
                   for label, curve in curves.items()} for name, curves in panels.items()}


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=20240601, help="seed of the data and the set samples")
    parser.add_argument("--samples", type=int, default=300, help="random responder sets when not exhaustive")
    parser.add_argument("--workers", type=int, nargs="*", help="override the values of n (gradient codes)")
    parser.add_argument("--matmul-workers", type=int, nargs="*", help="override the values of P (matmul codes)")


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, arguments=arguments)
    args = bench.args
    sizes = args.workers if args.workers is not None else ([8, 12] if args.quick else [8, 16, 24, 30, 32, 48])
    matmul_sizes = (args.matmul_workers if args.matmul_workers is not None
                    else [16] if args.quick else [16, 32, 48, 64, 96])
    samples = min(args.samples, 60) if args.quick else args.samples
    exhaustive = QUICK_EXHAUSTIVE if args.quick else EXHAUSTIVE
    header = bench.open(
        f"bench/numerics.py: n = {sizes}, s in {{1, 2, n/8, n/4}}, m in {{1, 2, 4}}, "
        f"gradient length {LENGTH}; matmul P = {matmul_sizes}, s in {{1, 2, 4, 8, P/8, P/4}}; "
        f"exhaustive up to {exhaustive} responder sets else the bunched ones "
        f"+ {samples} random, seed {args.seed}"
        + (" (quick)" if args.quick else ""),
        quoted=True,
    )
    started = time.perf_counter()
    rows = []
    for n in sizes:
        for case in gradient_cases(n, args.quick):
            row = run_case(case, args.seed, samples, exhaustive)
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
    matmul_rows = []
    for matmul_case in numerics_matmul.cases(matmul_sizes):
        row = numerics_matmul.run_case(matmul_case, args.seed, samples, exhaustive)
        matmul_rows.append(row)
        print(
            f"  matmul   {row['scheme']:10} {row['points']:11} P={row['P']:<3} s={row['s']:<3} R={row['R']:<3} "
            f"{row['params']:14} {row['status']:7} worst={fmt(row.get('worst_error')):8} "
            f"bound={fmt(row.get('bound')):8} would_give={fmt(row.get('forced_worst_error')):8} "
            f"located={row.get('located', '-')}/{row.get('locate_trials', '-')} goal={row['meets_goal']}",
            flush=True,
        )
    elapsed = time.perf_counter() - started
    header.append(f"wall time {elapsed:.1f} s for {len(rows)} gradient and {len(matmul_rows)} matmul parameter sets")
    print(header[-1])
    bench.csv("numerics.csv", rows, COLUMNS)
    bench.csv("numerics_matmul.csv", matmul_rows, numerics_matmul.COLUMNS)
    table = summary(rows)
    print(table)
    plot_panels(error_curves(rows), bench.out / "numerics.png", "workers n",
                "log10 worst relative error (accepted codes)", header[0] + " | " + header[1])
    numerics_matmul.plot(matmul_rows, bench.out / "numerics_matmul.png", header[0] + " | " + header[1])
    others = numerics_matmul.alternatives(matmul_sizes, args.seed)
    tail = [numerics_matmul.random_tail(max(matmul_sizes), max(matmul_sizes) // 8, 2000 if args.quick else 20000,
                                        args.seed)]
    circle = numerics_matmul.summary(matmul_rows, "unit_circle")
    chebyshev = numerics_matmul.summary(matmul_rows, "chebyshev")
    schemes = ["P", "s", *numerics_matmul.SCHEMES]
    print(markdown_table(circle, schemes))
    bench.finish()
    page = bench.page(
        "numerics.md",
        "Decode accuracy of every exact code",
        bench.header(),
        [
            "Errors are `max|decoded - truth| / max|truth|` over the listed responder sets; `bound` is the "
            "largest `error_bound` the code itself estimates for them; `refusal_estimate` is the estimate in "
            "the constructor's ValueError; `forced_worst_error` is what a refused code gives when built with "
            "`max_error=1.0` (or no limit when even that is refused, see the CSV's `forced_max_error`); "
            "`naive_worst_error` is the paper's Vandermonde decoder on the same messages (ye_abbe only). "
            "Goals: <= 1e-9 for n <= 24, <= 1e-6 for n <= 48.",
            "## Summary per n",
            table,
            "## Matmul codes: unit circle (rotation embeddings) against real Chebyshev points",
            "Each cell: the worst relative error over the responder sets of the split with the largest "
            "threshold R <= P - s (R shown), or the constructor's refusal and what the refused code would "
            "give if built anyway. Goals: <= 1e-9 where P <= 32 and s <= 4, <= 1e-6 at P = 64 with s <= 4, "
            "a refusal (never a wrong product) elsewhere. Every row, with its estimate, set count and the "
            "error-location trials (R + 2 neighbouring results, one corrupted): numerics_matmul.csv.",
            "### Unit circle (the default)",
            markdown_table(circle, schemes),
            "### Real Chebyshev points (the original construction, `points='chebyshev'`)",
            markdown_table(chebyshev, schemes),
            "![numerics_matmul](numerics_matmul.png)",
            "### Other stable constructions",
            "The decode-error estimate each construction's constructor would check (worst over every run of "
            "neighbours, runs with one gap and 100 random sets), at R = P - s (MatDot: the odd R shown). Random "
            "Khatri-Rao codes (Subramaniam, Heidarzadeh & Narayanan) have no structurally worst set, so no check "
            "can certify them; the sampled worst understates their tail (second table). Chebyshev-basis MatDot "
            "(Fahim & Cadambe) improves on monomials by orders of magnitude but stays above the rotations.",
            markdown_table(others, list(dict.fromkeys(k for row in others for k in row))),
            markdown_table(tail, list(tail[0])),
            "## Every gradient parameter set",
            markdown_table(rows, TABLE_COLUMNS),
        ],
    )
    print(f"wrote {bench.out / 'numerics.csv'}, {bench.out / 'numerics_matmul.csv'} and {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
