"""Regenerate the generated tables of docs/codes.md from the codes themselves.

Two regions of docs/codes.md are rewritten:

- between ``<!-- codes-table:start -->`` and ``<!-- codes-table:end -->``: the cost of each scheme
  for representative parameters, from ``code.describe()`` (gradient codes) and
  ``recovery_threshold`` (matmul codes);
- between ``<!-- matmul-limits:start -->`` and ``<!-- matmul-limits:end -->``: for P workers and
  s stragglers (R = P - s), the constructor's estimate of the worst relative decode error of the
  matmul codes with that threshold, or "refused" where it exceeds ``max_error`` = 1e-6, on the unit
  circle (the default) and on real Chebyshev points (the original construction).

Usage::

    PYTHONPATH=. python docs/gen_codes_table.py           # rewrite docs/codes.md
    PYTHONPATH=. python docs/gen_codes_table.py --check   # exit 1 if the file would change
"""

from __future__ import annotations

import argparse
import math
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
from coded.codes.matmul_plan import SCHEMES, best_split  # noqa: E402

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
#: Workers (rows) and stragglers (columns) of the matmul limits tables.
LIMIT_WORKERS = (16, 24, 32, 40, 48, 64, 80, 96)
LIMIT_STRAGGLERS = (1, 2, 3, 4, 6, 8, 12, 16, 24)


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


def limit_cell(workers: int, stragglers: int, points: str) -> str:
    """The worst estimate over the schemes whose best split has R = P - s exactly, or "refused"."""
    threshold = workers - stragglers
    if threshold < 2:
        return ""
    worst = 0.0
    for scheme in SCHEMES:
        split = best_split(scheme, threshold)
        if split is None or recovery_threshold(scheme, **split) != threshold:
            continue
        try:
            worst = max(worst, matmul_code(scheme, workers=workers, points=points, **split).worst_error)
        except ValueError:
            return "refused"
    # rounded up to a power of ten: an upper bound that BLAS rounding differences do not change
    return f"1e{math.ceil(math.log10(worst)):03d}" if worst > 0 else "0"


def limits_table(points: str) -> str:
    rows = ["| P \\ s | " + " | ".join(str(s) for s in LIMIT_STRAGGLERS) + " |",
            "|---" * (len(LIMIT_STRAGGLERS) + 1) + "|"]
    for workers in LIMIT_WORKERS:
        rows.append(f"| {workers} | " + " | ".join(limit_cell(workers, s, points) for s in LIMIT_STRAGGLERS) + " |")
    return "\n".join(rows)


def generated(kind: str) -> str:
    note = f"<!-- generated by `{COMMAND}`; do not edit by hand -->"
    if kind == "codes-table":
        return "\n".join([note, "", "Gradient codes (l = gradient length):", "", gradient_table(), "",
                          "Matmul codes (A split m x n, B split n x d):", "", matmul_table()])
    return "\n".join([note, "", "Unit circle (`points=\"unit_circle\"`, the default):", "",
                      limits_table("unit_circle"), "",
                      "Real Chebyshev points (`points=\"chebyshev\"`, the original construction):", "",
                      limits_table("chebyshev")])


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
