"""A restructuring measured: benchmarks run from two clean clones, before and after, alternately.

    python -m bench.before_after --before DIR --after DIR                # bench.mpi and bench.partial
    python -m bench.before_after --before DIR --after DIR --rounds 3 --benchmarks partial

Each clone has its own virtualenv (``make install-mpi`` in it) and runs its own copy of each
benchmark (``DIR/.venv/bin/python -m bench.NAME --repeats 1``), so each side measures its code
with its harness. The sides alternate (before, after, before, after, ...), so a drift of the
machine over the run falls on both; each round gives one after/before ratio per row of the
benchmark's table, and the page reports each row's median ratio and its range over the rounds. A
change of structure only should leave every range holding 1. Writes
``bench/results/before_after.{md,csv}``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.common import (
    RESULTS_DIR,
    LoadGuard,
    command_line,
    fmt,
    machine_line,
    markdown_table,
    settle,
    write_csv,
    write_markdown,
)

#: each benchmark measured: the columns that name a row, and the time compared
MEASURED = {
    "mpi": (("workload", "scheme", "stragglers", "system"), "ms_per_iteration"),
    "partial": (("workload", "scenario", "mode"), "s_per_iteration"),
}
COLUMNS = ["benchmark", "row", "measure", "before", "after", "ratio", "ratio_low", "ratio_high", "holds_1"]


def commit_of(clone: Path) -> str:
    return subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run_once(clone: Path, benchmark: str, out: Path, allow_busy: bool) -> dict[str, float]:
    """One run of ``bench.<benchmark>`` from ``clone`` with its own interpreter, once the previous
    run's load has settled: each row's time."""
    if not allow_busy:
        settle()
    command = [str(clone / ".venv" / "bin" / "python"), "-m", f"bench.{benchmark}", "--repeats", "1",
               "--out", str(out)] + (["--allow-busy"] if allow_busy else [])
    print(f"$ (cd {clone} && {' '.join(command)})", flush=True)
    subprocess.run(command, cwd=clone, check=True)
    keys, measure = MEASURED[benchmark]
    with (out / f"{benchmark}.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    return {" / ".join(row[k] for k in keys): float(row[measure]) for row in rows if row[measure]}


def compare(before: list[dict[str, float]], after: list[dict[str, float]], benchmark: str) -> list[dict[str, object]]:
    """Per row: the medians of each side and the after/before ratios of the rounds (median, range)."""
    rows = []
    for name in before[0]:
        ratios = [a[name] / b[name] for b, a in zip(before, after, strict=True) if name in a and name in b]
        if not ratios:
            continue
        low, high = min(ratios), max(ratios)
        rows.append({"benchmark": benchmark, "row": name, "measure": MEASURED[benchmark][1],
                     "before": statistics.median(b[name] for b in before),
                     "after": statistics.median(a[name] for a in after if name in a),
                     "ratio": statistics.median(ratios), "ratio_low": low, "ratio_high": high,
                     "holds_1": "yes" if low <= 1 <= high else "no"})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="clone of the code before (with its .venv)")
    parser.add_argument("--after", type=Path, required=True, help="clone of the code after (with its .venv)")
    parser.add_argument("--benchmarks", nargs="+", choices=sorted(MEASURED), default=sorted(MEASURED))
    parser.add_argument("--rounds", type=int, default=3, help="before/after pairs per benchmark")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--allow-busy", action="store_true", help="run even on a busy machine (the page says so)")
    args = parser.parse_args(argv)
    guard = LoadGuard(args.allow_busy, False)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for benchmark in args.benchmarks:
            sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
            for round_ in range(args.rounds):
                for side in ("before", "after"):
                    out = Path(scratch) / benchmark / side / str(round_)
                    sides[side].append(run_once(getattr(args, side), benchmark, out, args.allow_busy))
            rows += compare(sides["before"], sides["after"], benchmark)
    guard.finish()
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "before_after.csv", rows, COLUMNS)
    header = [command_line(), machine_line(), guard.line(),
              f"before: commit {commit_of(args.before)}; after: commit {commit_of(args.after)}; each from its own "
              f"clean clone and virtualenv",
              f"{args.rounds} rounds per benchmark, before and after alternating, each run with `--repeats 1`; ratio: "
              "after / before within a round, median and range over the rounds; holds_1: the range holds 1"]
    write_markdown(args.out / "before_after.md", "A restructuring measured: before and after, alternately", header,
                   [markdown_table(rows, COLUMNS, digits=3)])
    held = sum(row["holds_1"] == "yes" for row in rows)
    print(f"{held} of {len(rows)} rows' after/before ranges hold 1; wrote {args.out / 'before_after.md'}")
    for row in rows:
        print(f"  {row['benchmark']:8} {row['row']:55} {fmt(row['ratio'], 3)} ({fmt(row['ratio_low'], 3)}-"
              f"{fmt(row['ratio_high'], 3)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
