"""Regenerate the generated tables of docs/codes.md from the codes themselves.

Two regions of docs/codes.md are rewritten:

- between ``<!-- codes-table:start -->`` and ``<!-- codes-table:end -->``: the cost of each scheme
  for representative parameters, from ``code.describe()`` (gradient codes) and
  ``recovery_threshold`` (matmul codes);
- between ``<!-- matmul-limits:start -->`` and ``<!-- matmul-limits:end -->``: for each recovery
  threshold R, the largest number of workers P that ``matmul_code`` accepts (its float64 accuracy
  check on real Chebyshev points refuses more).

Usage::

    PYTHONPATH=. python docs/gen_codes_table.py           # rewrite docs/codes.md
    PYTHONPATH=. python docs/gen_codes_table.py --check   # exit 1 if the file would change
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from coded.codes import gradient_code, matmul_code  # noqa: E402
from coded.codes.matmul import recovery_threshold  # noqa: E402

DOC = REPO_ROOT / "docs" / "codes.md"
COMMAND = "PYTHONPATH=. python docs/gen_codes_table.py"

#: (scheme, n, s, params) for the gradient-code table.
GRADIENT_EXAMPLES: list[tuple[str, int, int, dict[str, Any]]] = [
    ("uncoded", 12, 0, {}),
    ("ignore_stragglers", 12, 2, {}),
    ("frc", 12, 2, {}),
    ("cyclic", 12, 2, {}),
    ("ye_abbe", 12, 2, {"m": 1}),
    ("ye_abbe", 12, 2, {"m": 2}),
    ("ye_abbe", 12, 2, {"m": 4}),
    ("partial", 12, 2, {"alpha": 2.5}),
    ("lwpd", 16, 0, {"t": 2}),
    ("lwpd", 16, 0, {"t": 4}),
    ("kasync", 12, 3, {}),
]
#: (scheme, workers, params) for the matmul-code table.
MATMUL_EXAMPLES: list[tuple[str, int, dict[str, int]]] = [
    ("polynomial", 16, {"m": 2, "d": 2}),
    ("polynomial", 16, {"m": 3, "d": 3}),
    ("matdot", 16, {"n": 4}),
    ("polydot", 16, {"m": 2, "n": 2, "d": 2}),
    ("gpd", 16, {"m": 2, "n": 2, "d": 1}),
    ("gpd", 16, {"m": 2, "n": 2, "d": 2}),
]
#: (scheme, params) whose largest accepted number of workers is measured.
LIMIT_EXAMPLES: list[tuple[str, dict[str, int]]] = [
    ("polynomial", {"m": 2, "d": 2}),
    ("gpd", {"m": 2, "n": 2, "d": 1}),
    ("matdot", {"n": 4}),
    ("gpd", {"m": 2, "n": 2, "d": 2}),
    ("polynomial", {"m": 3, "d": 3}),
    ("polydot", {"m": 2, "n": 2, "d": 2}),
    ("gpd", {"m": 3, "n": 2, "d": 2}),
    ("matdot", {"n": 8}),
    ("polynomial", {"m": 4, "d": 4}),
    ("gpd", {"m": 2, "n": 3, "d": 3}),
    ("matdot", {"n": 12}),
    ("polynomial", {"m": 5, "d": 5}),
    ("matdot", {"n": 16}),
]
MAX_WORKERS = 256


def fraction(value: float) -> str:
    """0.25 -> "1/4", 1.0 -> "1"."""
    f = Fraction(value).limit_denominator(10_000)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "-"


def waits_for(code: Any) -> str:
    """What the master waits for, in words, from the code's own parameters."""
    n, s = code.n, code.s
    if code.scheme == "uncoded":
        return f"all {n}"
    if code.scheme == "ignore_stragglers":
        return f"any {n - s} (rescaled sum)"
    if code.scheme == "frc":
        groups = n // (s + 1)
        return f"one worker of each of the {groups} groups (any {n - s} suffice)"
    if code.scheme == "partial":
        return f"stage 1 from all {n}, stage 2 from any {n - s}"
    if code.scheme == "lwpd":
        return f"nothing: applies each message on arrival (exact once all {n} arrived)"
    if code.scheme == "kasync":
        return f"nothing: steps with every {n - s} arrivals, stale ones included"
    return f"any {code.describe()['waits_for']}"


def gradient_table() -> str:
    rows = [
        "| scheme | parameters | n | s | k | data per worker | floats sent per worker | waits for | exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for scheme, n, s, params in GRADIENT_EXAMPLES:
        code = gradient_code(scheme, n=n, s=s, **params)
        info = code.describe()
        rows.append(
            f"| {info['scheme']} | {params_text(params)} | {info['n']} | {info['s']} | {info['k']} | "
            f"{fraction(info['data_per_worker'])} of the data | l x {fraction(info['floats_per_worker'])} | "
            f"{waits_for(code)} | {'yes' if info['exact'] else 'no'} |"
        )
    return "\n".join(rows)


def matmul_table() -> str:
    rows = [
        "| scheme | parameters | P | A stored per worker | B stored per worker "
        "| output per worker (of A @ B) | recovery threshold R | received to decode (of A @ B) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scheme, workers, params in MATMUL_EXAMPLES:
        code = matmul_code(scheme, workers=workers, **params)
        m, n, d = code.m, code.n, code.d
        r = code.recovery_threshold
        rows.append(
            f"| {scheme} | {params_text(params)} | {workers} | 1/{m * n} | 1/{n * d} | "
            f"{fraction(1 / (m * d))} | {r} | "
            f"{fraction(r / (m * d))} x |"
        )
    return "\n".join(rows)


def largest_workers(scheme: str, params: dict[str, int]) -> tuple[int, int, float | None]:
    """(R, largest P such that every P' in R..P is accepted, the constructor's estimate there)."""
    best: tuple[int, float | None] = (0, None)
    threshold = None
    for workers in range(1, MAX_WORKERS + 1):
        try:
            code = matmul_code(scheme, workers=workers, **params)
        except ValueError as error:
            if "needs at least" in str(error):
                continue
            break
        threshold = code.recovery_threshold
        best = (workers, code.worst_error)
    if threshold is None:
        threshold = recovery_threshold(scheme, **params)
    return threshold, best[0], best[1]


def limits_table() -> str:
    rows = ["| scheme | parameters | recovery threshold R | largest P accepted | estimated error at that P |",
            "|---|---|---|---|---|"]
    for scheme, params in LIMIT_EXAMPLES:
        threshold, workers, estimate = largest_workers(scheme, params)
        if workers == 0:
            shown = "none (refused at P = R)"
        else:
            shown = f">= {MAX_WORKERS}" if workers == MAX_WORKERS else str(workers)
        rows.append(
            f"| {scheme} | {params_text(params)} | {threshold} | {shown} | "
            f"{'' if estimate is None else f'{estimate:.1e}'} |"
        )
    return "\n".join(rows)


def generated(kind: str) -> str:
    note = f"<!-- generated by `{COMMAND}`; do not edit by hand -->"
    if kind == "codes-table":
        return "\n".join([note, "", "Gradient codes (l = gradient length):", "", gradient_table(), "",
                          "Matmul codes (A split m x n, B split n x d):", "", matmul_table()])
    return "\n".join([note, "", limits_table()])


def render(text: str) -> str:
    for kind in ("codes-table", "matmul-limits"):
        start, end = f"<!-- {kind}:start -->", f"<!-- {kind}:end -->"
        if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
            raise SystemExit(f"{DOC}: expected one {start} ... {end} region")
        head, rest = text.split(start)
        _, tail = rest.split(end)
        text = f"{head}{start}\n{generated(kind)}\n{end}{tail}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/codes.md is not up to date")
    args = parser.parse_args(argv)
    current = DOC.read_text()
    updated = render(current)
    if args.check:
        if updated != current:
            print(f"{DOC} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        print(f"{DOC} is up to date")
        return 0
    if updated != current:
        DOC.write_text(updated)
        print(f"rewrote the generated tables of {DOC}")
    else:
        print(f"{DOC} already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
