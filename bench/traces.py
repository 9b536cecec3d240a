"""Convert measured per-worker compute times into slowdown traces (``faults.slowdown`` model
``trace``): CSV rows ``iteration,worker,factor``, each step's times divided by that step's fastest
worker (so factors are >= 1 and only the ratios between workers of one step matter).

The input is a CSV with a header and columns ``step,worker,compute_time`` (the format of
../shared/traces: per-worker, per-step compute times measured in real training jobs). Every step
must list the same workers, numbered from 0.

Usage::

    python -m bench.traces ../shared/traces/bytedance-AR-compute.csv bench/traces/bytedance-AR.csv
    python -m bench.traces --shared ../shared/traces     # every CSV there, into bench/traces/

A derived trace keeps its source's attribution and licence beside it (bench/traces/README.md).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

__all__ = ["slowdown_trace"]

OUT = Path(__file__).resolve().parent / "traces"


def slowdown_trace(text: str) -> str:
    """The slowdown trace (CSV text) of a compute-time trace (CSV text with a header).

    Raises
    ------
    ValueError
        A row that is not step,worker,time with time > 0, or steps that list different workers.
    """
    steps: dict[int, dict[int, float]] = defaultdict(dict)
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or not {"step", "worker", "compute_time"} <= set(reader.fieldnames):
        raise ValueError(f"expected the columns step,worker,compute_time (got {reader.fieldnames})")
    for number, row in enumerate(reader, start=2):
        try:
            step, worker, seconds = int(row["step"]), int(row["worker"]), float(row["compute_time"])
        except (TypeError, ValueError):
            raise ValueError(f"row {number}: not step,worker,compute_time numbers ({row})") from None
        if step < 0 or worker < 0 or not seconds > 0:
            raise ValueError(f"row {number}: out of range ({row})")
        steps[step][worker] = seconds
    if not steps:
        raise ValueError("no rows")
    workers = set(next(iter(steps.values())))
    if workers != set(range(len(workers))) or any(set(times) != workers for times in steps.values()):
        raise ValueError("every step must list the same workers, numbered from 0")
    out = io.StringIO()
    out.write("iteration,worker,factor\n")
    for iteration, step in enumerate(sorted(steps)):
        fastest = min(steps[step].values())
        for worker in sorted(workers):
            out.write(f"{iteration},{worker},{steps[step][worker] / fastest:.6g}\n")
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", help="a compute-time CSV (step,worker,compute_time)")
    parser.add_argument("target", nargs="?", help="where to write the slowdown trace")
    parser.add_argument("--shared", type=Path, help="convert every *-compute.csv of this folder into bench/traces/")
    args = parser.parse_args(argv)
    pairs: list[tuple[Path, Path]]
    if args.shared:
        pairs = [(source, OUT / source.name.replace("-compute.csv", ".csv"))
                 for source in sorted(args.shared.glob("*-compute.csv"))]
    elif args.source and args.target:
        pairs = [(Path(args.source), Path(args.target))]
    else:
        parser.error("give SOURCE TARGET, or --shared FOLDER")
    for source, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(slowdown_trace(source.read_text()))
        print(f"{source} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
