"""Every benchmark, one after another, each timed, then docs/results.md (``make bench``); or the
pages behind the headline table and its summary alone (``make bench-headline``).

    python -m bench.run all --reference DIR  # every page (under 2 hours on 2 cores)
    python -m bench.run headline        # the headline's pages (under 30 minutes)
    python -m bench.run all --from chaos    # the rest of an interrupted run, from that benchmark on

Each benchmark runs as its own process, as its page's ``command:`` line says; a failure stops the
run (the pages written so far are kept). Each one's wall seconds go to ``bench_run.csv`` beside the
pages, which docs/results.md quotes as the run's time. The links benchmarks and the partial one's
kernel-slowed worker need root (network namespaces, tc, cgroups) and iproute2.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from datetime import datetime, timezone

from bench.common import REPO_ROOT, RESULTS_DIR, settle

__all__ = ["HEADLINE", "SUITES", "main"]

#: the headline table's pages (bench.headline), and check_cost, whose strict level its summary quotes
HEADLINE: tuple[tuple[str, ...], ...] = (("tandon_links",), ("partial",), ("check_cost",), ("ddp",), ("mpi",))
#: each suite's benchmarks, as ``python -m bench.<argv>``; the headline's first, so that a run cut short
#: has measured what the summary quotes
SUITES: dict[str, tuple[tuple[str, ...], ...]] = {
    "headline": HEADLINE,
    "all": (*HEADLINE, ("numerics",), ("decode_speed",), ("mds_trials",), ("verification",), ("detection",),
            ("tandon",), ("plan",), ("plan_modes",), ("plan_workers",), ("lwpd",), ("matmul",), ("codenet",),
            ("fuzz",), ("torch_training",), ("transport",), ("drift",), ("large_sparse",), ("memory",),
            ("yeabbe",), ("cluster", "overhead"), ("cluster", "ingest"), ("cluster", "speedup"),
            ("cluster", "scaling"), ("chaos",), ("reference",)),
}
#: where each benchmark's seconds go
TIMES = RESULTS_DIR / "bench_run.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--from", dest="start", metavar="BENCHMARK", help="skip the benchmarks before this one")
    parser.add_argument("--reference", help="the 2017 reference's checkout or git directory (bench.reference; "
                                            "needed by the suite `all`), run with MPICH from .venv-mpich/bin")
    args = parser.parse_args(argv)
    if args.suite == "all" and args.reference is None:
        parser.error("the suite `all` runs bench.reference: give --reference (make bench does)")
    runs = list(SUITES[args.suite])
    if args.start is not None:
        names = [" ".join(run) for run in runs]
        if args.start not in names:
            parser.error(f"--from {args.start!r}: not one of {', '.join(names)}")
        runs = runs[names.index(args.start):]
    rows: list[dict[str, str]] = []
    started = time.monotonic()
    for run in runs:
        extra = ["--reference", args.reference] if run == ("reference",) else []
        command = [sys.executable, "-m", f"bench.{run[0]}", *run[1:], *extra]
        settle()  # the load the previous one left: a benchmark refuses a busy machine
        print(f"== python -m bench.{' '.join(run)}", flush=True)
        began, at = time.monotonic(), datetime.now(timezone.utc)
        status = subprocess.run(command, cwd=REPO_ROOT).returncode
        seconds = time.monotonic() - began
        rows.append({"suite": args.suite, "benchmark": " ".join(run), "started_utc": f"{at:%Y-%m-%d %H:%M}",
                     "seconds": f"{seconds:.0f}", "exit_status": str(status)})
        print(f"== bench.{' '.join(run)}: {seconds / 60:.1f} min, exit status {status}", flush=True)
        _write(rows)
        if status != 0:
            return status
    total = time.monotonic() - started
    print(f"== {args.suite}: {len(rows)} benchmarks in {total / 60:.1f} min", flush=True)
    return subprocess.run([sys.executable, "-m", "bench.report"], cwd=REPO_ROOT).returncode


def _write(rows: list[dict[str, str]]) -> None:
    """This run's rows so far, after those of earlier runs of other benchmarks (the latest run of each)."""
    kept: list[dict[str, str]] = []
    if TIMES.exists():
        ran = {row["benchmark"] for row in rows}
        with TIMES.open(newline="") as file:
            kept = [row for row in csv.DictReader(file) if row["benchmark"] not in ran]
    with TIMES.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([*kept, *rows])


if __name__ == "__main__":
    raise SystemExit(main())
