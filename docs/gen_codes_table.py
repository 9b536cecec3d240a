"""Regenerate the generated tables of docs/codes.md from the codes themselves.

Two regions of docs/codes.md are rewritten:

- between ``<!-- codes-table:start -->`` and ``<!-- codes-table:end -->``: the cost of each scheme
  for representative parameters, from ``code.describe()`` (gradient codes) and
  ``recovery_threshold`` (matmul codes);
- between ``<!-- bytes-table:start -->`` and ``<!-- bytes-table:end -->``: the bytes a worker
  sends and receives per iteration for each code and reply mode, at the benchmarks' gradient length;
- between ``<!-- wire-float32:start -->`` and ``<!-- wire-float32:end -->``: each code's decode
  error and its check's misfit when the messages are rounded to float32 on the wire, measured on
  seeded random partial gradients, rounded up to a power of ten, beside the code's own estimate;
- between ``<!-- matmul-limits:start -->`` and ``<!-- matmul-limits:end -->``: for P workers and
  s stragglers (R = P - s), the constructor's estimate of the worst relative decode error of the
  matmul codes with that threshold, rounded up to a power of ten, or "refused" where it exceeds
  ``max_error`` = 1e-6, on the unit circle (the default) and on real Chebyshev points (the
  original construction).

The estimates and measurements go through BLAS and differ between CPUs in their last digits, so
``--check`` accepts the limits and float32 tables within a tolerance, which the generated text states next to them
(``tolerance_note``); regenerating writes this machine's values.

Usage::

    PYTHONPATH=. python docs/gen_codes_table.py           # rewrite docs/codes.md
    PYTHONPATH=. python docs/gen_codes_table.py --check   # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sys
import textwrap
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from coded.codes import gradient_code, matmul_code  # noqa: E402
from coded.codes.linear_gradient import DEFAULT_MAX_ERROR  # noqa: E402
from coded.codes.matmul import recovery_threshold  # noqa: E402
from coded.codes.matmul_plan import SCHEMES, best_split  # noqa: E402

DOC = REPO_ROOT / "docs" / "codes.md"
COMMAND = "PYTHONPATH=. python docs/gen_codes_table.py"
#: The generated regions of docs/codes.md.
KINDS = ("codes-table", "bytes-table", "wire-float32", "matmul-limits")
#: the regions whose numeric cells are accepted within TOLERATED_DECADES
DECADE_KINDS = ("wire-float32", "matmul-limits")
#: How many decades a checked-in limits cell may be from this machine's: the estimates differ
#: between BLAS kernels in their last digits, which moves a value at a power of ten by one decade.
TOLERATED_DECADES = 1
REFUSED = "refused"
DECADE_CELL = re.compile(r"1e([+-]\d+)")
REGION = re.compile(
    rf"(?P<start><!-- (?P<kind>{'|'.join(KINDS)}):start -->)(?P<body>.*?)(?P<end><!-- (?P=kind):end -->)", re.S
)

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
#: the gradient length of the bytes table: logistic regression on the Amazon-shaped data's 248,575
#: one-hot columns and a bias (bench/yeabbe.py's workload)
BYTES_PARAMETERS = 248_576
#: (scheme, mode, n, s, params) for the bytes table: the code as a job builds it (whole replies'
#: default check builds frc, cyclic, ye_abbe and partial for s + 1)
BYTES_EXAMPLES: list[tuple[str, str, int, int, dict[str, Any]]] = [
    ("uncoded", "whole", 12, 0, {}),
    ("ignore_stragglers", "whole", 12, 2, {}),
    ("cyclic", "whole", 12, 3, {}),
    ("cyclic", "streamed", 12, 3, {}),
    ("cyclic", "streamed, chunks: 4", 12, 3, {}),
    ("frc", "whole", 12, 3, {}),
    ("ye_abbe", "whole", 12, 3, {"m": 2}),
    ("ye_abbe", "whole", 12, 3, {"m": 4}),
    ("partial", "whole", 12, 3, {"alpha": 3.0}),
    ("lwpd", "whole", 16, 0, {"t": 4}),
    ("kasync", "whole", 12, 3, {}),
]
#: (scheme, n, s as built, params) for the float32 table: the bytes table's codes and larger ones
WIRE_EXAMPLES: list[tuple[str, int, int, dict[str, Any]]] = [
    ("uncoded", 20, 0, {}),
    ("frc", 12, 3, {}),
    ("cyclic", 12, 3, {}),
    ("cyclic", 20, 3, {}),
    ("cyclic", 20, 6, {}),
    ("ye_abbe", 12, 3, {"m": 2}),
    ("ye_abbe", 12, 3, {"m": 4}),
    ("ye_abbe", 20, 6, {"m": 1}),
    ("ye_abbe", 20, 3, {"m": 2}),
    ("ye_abbe", 20, 6, {"m": 2}),
    ("ye_abbe", 20, 6, {"m": 4}),
    ("partial", 12, 3, {"alpha": 3.0}),
]
#: the float32 table's gradient length and seeded draws (partials, and who responds)
WIRE_LENGTH, WIRE_TRIALS = 4096, 12
#: a float32 message's relative rounding
FLOAT32_EPS = 2.0**-24
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


def megabytes(count: int) -> str:
    return f"{count / 1e6:.3g} MB"


def bytes_table() -> str:
    """Bytes on the wire per worker and iteration, float64: what each code's messages hold for a
    gradient of BYTES_PARAMETERS parameters (and its loss)."""
    floats, out = BYTES_PARAMETERS + 1, 8 * BYTES_PARAMETERS
    rows = [f"l = {BYTES_PARAMETERS:,} parameters; a message holds the gradient and the loss, l + 1 = {floats:,} "
            "float64 values; every worker receives the parameters, l values, each iteration.", "",
            "| scheme | replies | n | s as built | a worker sends, healthy iteration | a worker sends, at most | "
            "the master sends each worker |",
            "|---|---|---|---|---|---|---|"]
    for scheme, mode, n, s, params in BYTES_EXAMPLES:
        code = gradient_code(scheme, n=n, s=s, **params)
        if mode.startswith("streamed"):
            chunks = int(mode.rpartition(" ")[2]) if "chunks" in mode else 1
            healthy, most = chunks * floats, len(code.partitions(0)) * chunks * floats
        else:
            healthy = most = code.message_size(floats)
        name = f"{scheme} ({params_text(params)})" if params else scheme
        rows.append(f"| {name} | {mode} | {n} | {s} | {megabytes(8 * healthy)} | {megabytes(8 * most)} | "
                    f"{megabytes(out)} |")
    return "\n".join(rows)


def wire_cells(code: Any) -> tuple[float, float | None]:
    """The worst decode error (to the largest partial-gradient entry) and check misfit (to the
    median message norm; None without a check) over WIRE_TRIALS draws of standard normal partials,
    each message rounded to float32 as a worker sends it with ``wire: float32``."""
    rng = np.random.default_rng(0)
    n, s, error, misfit = code.n, code.s, 0.0, None
    everyone = code.scheme == "partial"  # its first stage comes from every worker
    for _ in range(WIRE_TRIALS):
        g = rng.standard_normal((code.k, WIRE_LENGTH))
        exact = g.sum(axis=0)
        messages = {i: code.encode(i, {j: g[j] for j in code.partitions(i)}).astype(np.float32).astype(np.float64)
                    for i in range(n)}
        late = set() if everyone else set(rng.choice(n, s, replace=False).tolist())
        decoded = code.decode({i: m for i, m in messages.items() if i not in late}, length=WIRE_LENGTH)
        error = max(error, float(np.abs(decoded - exact).max() / np.abs(g).max()))
        if s and not everyone:
            late.pop()
            checked = code.decode_checked({i: m for i, m in messages.items() if i not in late},
                                          length=WIRE_LENGTH, tolerance=1.0)
            if checked.checked:
                misfit = max(misfit or 0.0, checked.misfit / checked.scale)
    return error, misfit


def decade_text(value: float | None) -> str:
    return "-" if value is None else f"1e{decade(value):+03d}" if value > 0 else "0"


def wire_table() -> str:
    rows = ["| scheme | n | s as built | decode error, measured | estimate (the code's bound) | "
            "check misfit of clean replies, measured |",
            "|---|---|---|---|---|---|"]
    for scheme, n, s, params in WIRE_EXAMPLES:
        code = gradient_code(scheme, n=n, s=s, **params)
        error, misfit = wire_cells(code)
        name = f"{scheme} ({params_text(params)})" if params else scheme
        rows.append(f"| {name} | {n} | {s} | {decade_text(error)} | {decade_text(code.rounding_error(FLOAT32_EPS))} "
                    f"| {decade_text(misfit)} |")
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


def decade(value: float) -> int:
    """The exponent of the power of ten ``value`` rounds up to: 2e-7 -> -6, 1e-6 -> -6."""
    return math.ceil(math.log10(value))


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
            code = matmul_code(scheme, workers=workers, points=points, max_error=DEFAULT_MAX_ERROR, **split)
        except ValueError:
            return REFUSED
        worst = max(worst, code.worst_error)
    return f"1e{decade(worst):03d}" if worst > 0 else "0"


def limits_table(points: str) -> str:
    rows = ["| P \\ s | " + " | ".join(str(s) for s in LIMIT_STRAGGLERS) + " |",
            "|---" * (len(LIMIT_STRAGGLERS) + 1) + "|"]
    for workers in LIMIT_WORKERS:
        rows.append(f"| {workers} | " + " | ".join(limit_cell(workers, s, points) for s in LIMIT_STRAGGLERS) + " |")
    return "\n".join(rows)


def tolerance_note() -> str:
    """The check's rule for the limits tables, in words, from the constants that implement it."""
    limit = f"1e{decade(DEFAULT_MAX_ERROR):03d}"
    return textwrap.fill(
        f"The values go through BLAS, whose rounding differs between CPUs, so a value near a power "
        f"of ten can round up to the next one on another machine. `--check` (which "
        f"`tests/docs/test_codes_table.py` runs) compares these tables with the ones it generates, "
        f"and accepts a numeric cell within a factor {10 ** TOLERATED_DECADES} of its own and "
        f"\"{REFUSED}\" for {limit} (or the reverse); everything else must match exactly. "
        f"Regenerating writes the values of the machine it runs on.",
        width=100,
    )


@functools.cache
def generated(kind: str) -> str:
    """A region's generated text; it depends only on the codes, so it is computed once a process."""
    note = f"<!-- generated by `{COMMAND}`; do not edit by hand -->"
    if kind == "codes-table":
        return "\n".join([note, "", "Gradient codes (l = gradient length):", "", gradient_table(), "",
                          "Matmul codes (A split m x n, B split n x d):", "", matmul_table()])
    if kind == "bytes-table":
        return "\n".join([note, "", bytes_table()])
    if kind == "wire-float32":
        return "\n".join([note, "", wire_table(), "", textwrap.fill(
            "The measurements go through BLAS, whose rounding differs between CPUs, so a value near a power of ten "
            f"can round up to the next one on another machine: `--check` accepts a cell within a factor "
            f"{10 ** TOLERATED_DECADES} of its own.", width=100)])
    return "\n".join([note, "", "Unit circle (`points=\"unit_circle\"`, the default):", "",
                      limits_table("unit_circle"), "",
                      "Real Chebyshev points (`points=\"chebyshev\"`, the original construction):", "",
                      limits_table("chebyshev"), "", tolerance_note()])


def regions(text: str) -> dict[str, str]:
    """Each generated region's text between its markers (SystemExit unless each appears once)."""
    for kind in KINDS:
        start, end = f"<!-- {kind}:start -->", f"<!-- {kind}:end -->"
        if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
            raise SystemExit(f"expected one {start} ... {end} region")
    return {match["kind"]: match["body"] for match in REGION.finditer(text)}


def render(text: str) -> str:
    """``text`` with every generated region rewritten from the codes on this machine."""
    regions(text)
    return REGION.sub(lambda match: f"{match['start']}\n{generated(match['kind'])}\n{match['end']}", text)


def cell_decade(cell: str) -> int | None:
    """A limits cell as a decade ("refused": the one above the limit), None for text that must match."""
    if cell == REFUSED:
        return decade(DEFAULT_MAX_ERROR) + 1
    match = DECADE_CELL.fullmatch(cell)
    return int(match.group(1)) if match else None


def row_tolerated(current: str, expected: str) -> bool:
    """Whether a checked-in limits-table row may stand for this machine's row (see TOLERATED_DECADES)."""
    cells, wanted = current.split("|"), expected.split("|")
    if len(cells) != len(wanted):
        return False
    for cell, want in zip(cells, wanted, strict=True):
        have, need = cell_decade(cell.strip()), cell_decade(want.strip())
        if cell != want and (have is None or need is None or abs(have - need) > TOLERATED_DECADES):
            return False
    return True


def differences(current: str, expected: str) -> list[str]:
    """The lines of ``current``'s generated regions that the check does not accept against ``expected``'s.

    ``expected`` is the text as this machine renders it. The codes table must match exactly; a
    limits-table row may differ in its numeric cells within the tolerance."""
    checked_in, generated_here = regions(current), regions(expected)
    problems = []
    for kind in KINDS:
        lines, wanted = checked_in[kind].splitlines(), generated_here[kind].splitlines()
        if len(lines) != len(wanted):
            problems.append(f"{kind}: {len(lines)} lines where this machine generates {len(wanted)}")
            continue
        problems += [f"{kind}: {line!r} where this machine generates {want!r}"
                     for line, want in zip(lines, wanted, strict=True)
                     if line != want and not (kind in DECADE_KINDS and row_tolerated(line, want))]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the file differs from this machine's tables beyond the tolerance")
    parser.add_argument("--doc", type=Path, default=DOC, help="the file to check or rewrite (default: %(default)s)")
    args = parser.parse_args(argv)
    current = args.doc.read_text()
    updated = render(current)
    if args.check:
        problems = differences(current, updated)
        if problems:
            print(f"{args.doc} is out of date: run `{COMMAND}`", *problems, sep="\n  ", file=sys.stderr)
            return 1
        within = "" if updated == current else " (some cells within the tolerance of this machine's)"
        print(f"{args.doc} is up to date{within}")
        return 0
    if updated != current:
        args.doc.write_text(updated)
        print(f"rewrote the generated tables of {args.doc}")
    else:
        print(f"{args.doc} already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
