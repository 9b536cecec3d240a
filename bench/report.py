"""docs/results.md from the benchmarks' saved results (``make bench`` runs them, then this).

    python -m bench.report [--results bench/results] [--out docs/results.md]

The page a user reads first: five lines on when coding pays, the headline table (scenarios ×
systems, each cell linked to the benchmark that measured it), the checking levels, each paper's
claim against our measurement, the conditions, then every benchmark's own page
(bench/results/<name>.md) in the papers' order. Everything with a number is read from the
benchmarks' CSVs (bench/headline.py). A page that no longer measures the code as it is
(bench/staleness.py) is marked stale wherever it is cited, with the command that measures it again.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

from bench.common import REPO_ROOT, RESULTS_DIR
from bench.headline import Tables, box, claims_section, headline_table
from bench.run import SUITES
from bench.staleness import mark, staleness

# (results page, what it answers), in the report's order; missing pages are listed as not run
PAGES = [
    ("reference", "Against the 2017 reference implementation itself: seconds and CPU per round, on loopback and links"),
    ("yeabbe", "Ye & Abbe's experiment on links of finite bandwidth: seconds per iteration and AUC against time"),
    ("tandon_links", "Tandon et al.'s Fig. 4 on links of finite bandwidth: delayed workers and slow links"),
    ("chaos", "A fault campaign: killed, frozen, cut off and slowed workers, wrong results, a killed master"),
    ("large_sparse", "A large sparse upload: the memory of every process"),
    ("ddp", "Against PyTorch DDP: the same model, data and stragglers"),
    ("tandon", "Tandon et al.: seconds per iteration, and where ignoring stragglers loses accuracy"),
    ("cluster_speedup", "Tandon et al.: time to a target loss, coded against uncoded and ignoring stragglers"),
    ("torch_training", "PyTorch: time to accuracy under stragglers, and what being a worker costs"),
    ("plan", "Ye & Abbe: the planner's prediction against measurement"),
    ("plan_modes", "The planner fitted from jobs of every code and reply mode, against the measured grid"),
    ("plan_workers", "The planner per worker and link: one slow link, one slow worker"),
    ("lwpd", "LWPD against cyclic gradient coding and K-async SGD"),
    ("cluster_overhead", "The cluster's own cost: iteration time against the ideal"),
    ("cluster_scaling", "Iteration time against the number of workers, before and after the data plane"),
    ("cluster_ingest", "The master's ingest on the data plane against plain TCP"),
    ("transport", "One message round trip: gRPC and the data plane against plain TCP"),
    ("decode_speed", "Decoding speed against a plain sum"),
    ("numerics", "Numerical error of every code"),
    ("matmul", "Coded matrix multiplication: time to product and recovery thresholds"),
    ("mds_trials", "Real MDS error correction: corrected, detected, never silent"),
    ("verification_trials", "Wrong replies: corrupted trials per scheme, none undetected"),
    ("verification_cost", "Wrong replies: what detection and correction cost per iteration"),
    ("partial", "Streamed replies: partial stragglers, against whole replies and uncoded"),
    ("detection", "Checking levels: what each catches of intermittent in-scale corruption, and when"),
    ("check_cost", "Checking levels: what each costs on a healthy cluster, against uncoded"),
    ("ddp_check", "Catching a wrong gradient: DDP replay against our checking levels"),
    ("mpi", "Ours against an MPI loop of our own, side by side in one run"),
    ("drift", "Many jobs on one cluster: time per iteration and memory, job after job"),
    ("memory", "Memory against the workers and the data: each process's peak, 6 to 64 workers"),
    ("codenet", "CodeNet: accuracy under soft errors"),
    ("fuzz", "Hostile input"),
]


def _committed(path: Path) -> str:
    """The day the file was last committed (git), or "an unknown day"."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "an unknown day"
    return done.stdout.strip() or "an unknown day"


def measured(source: str, path: Path) -> str:
    """When and on what a page says it ran: its machine line's time and its commit."""
    when = re.search(r"machine: measured ([0-9-]+ [0-9:]+ UTC)", source)
    commit = re.search(r"code: commit ([0-9a-f]+)", source)
    release = re.search(r"code: commit [^\n]*, release ([^\s,]+)", source)
    day = when.group(1) if when else f"on or before {_committed(path)}"
    day += f", release {release.group(1)}" if release else ""
    return f"{day}, commit {commit.group(1)}" if commit else day


POLICY = (
    "**Results belong to a release.** `make bench` reruns every page on the release's commit, and each page "
    "names the release and the commit it measured. A later change to the code a page exercises marks it stale "
    "here, with the command that measures it again, until the next release reruns them all: a number without "
    "the mark measures the code as it is.")


def run_time(results: Path) -> str:
    """What the last full run took, from bench.run's record of each benchmark's seconds."""
    times = results / "bench_run.csv"
    if not times.exists():
        return ""
    with times.open(newline="") as file:
        rows = [row for row in csv.DictReader(file) if row["suite"] == "all"]
    if not rows:
        return ""
    minutes = sum(float(row["seconds"]) for row in rows) / 60
    longest = sorted(rows, key=lambda row: -float(row["seconds"]))[:3]
    slowest = ", ".join(f"{row['benchmark']} {float(row['seconds']) / 60:.0f}" for row in longest)
    first = min(row["started_utc"] for row in rows)
    whole = len(SUITES["all"])
    ran = f"ran all {whole} benchmarks" if len(rows) >= whole else f"ran {len(rows)} of its {whole} benchmarks"
    return (f" The last run of `make bench` (from {first} UTC, on the machine its pages name) {ran} in "
            f"{minutes:.0f} minutes; the longest: {slowest} minutes (bench/results/bench_run.csv).")


def index_line(results: Path, name: str, title: str, out_dir: Path) -> str:
    """A page's line in the index: its title linked, when it ran, and the stale mark if it is."""
    path = results / f"{name}.md"
    if not path.exists():
        return f"- {title}: not run (no `{name}.md` in {results})."
    source = path.read_text()
    verdict = staleness(name, source)
    line = f"- [{title}]({os.path.relpath(path, out_dir)}): {measured(source, path)}."
    return f"{line}\n  {mark(source, verdict)}" if verdict.stale else line


CONDITIONS = """\
- **One machine.** Every number comes from one run on one machine, side by side: the master, the workers \
and the baseline's processes all share its cores (2 on the machine that ran these; each page's \
`machine:` line says which). Ratios are taken within a run; no time is compared across days.
- **A busy machine is refused.** Each benchmark records the load before and after and refuses to start \
on a loaded machine; each point is repeated (median and range; 3 repeats unless the page says).
- **How a worker is made slow.** A sleep before computing (`faults.stragglers`, `faults.slowdown`), \
a cgroup CPU quota (bench/cpu_quota.py), a link shaped by `tc tbf` between network namespaces, or a \
replayed trace of real compute times (bench/traces/, with its attribution and licence).
- **Defaults unless a page says otherwise.** "Coded" is cyclic `stragglers: 2` with streamed replies and \
the sampled check; the links benchmarks run the papers' codes unchecked, as the papers did."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "results.md")
    args = parser.parse_args(argv)
    out_dir = args.out.parent
    stale = {name for name, _ in PAGES if (args.results / f"{name}.md").exists()
             and staleness(name, (args.results / f"{name}.md").read_text()).stale}
    tables = Tables(args.results, stale)
    findings = os.path.relpath(Path(__file__).with_name("findings.md"), out_dir)
    sections = [
        "# Results\n\nShould you use coded, and what does it buy? Measured on this implementation against "
        "uncoded training, PyTorch DDP and the 2017 reference's MPI loop.\n\n" + box(tables),
        "## Headline\n\nSeconds per iteration as a multiple of our uncoded job's on a healthy cluster, measured "
        "in the same run: median (low–high) over the repeats. Below 1 is faster than that. A cell marked "
        "(stale) ran on code that has changed since.\n\n" + headline_table(tables),
        "## Checking replies\n\nWhat each checking level catches and costs is one table in "
        f"[docs/jobs.md]({os.path.relpath(REPO_ROOT / 'docs' / 'jobs.md', out_dir)}#checking-replies). "
        "The measurements behind it are the pages on detection, check cost and the DDP replay below.",
        "## The papers' claims\n\n" + claims_section(tables),
        "## Conditions\n\n" + CONDITIONS,
        "## Every benchmark\n\n" + POLICY + "\n\nEach page says what ran, where, and on which commit. `make bench` "
        "reruns all of them and rewrites this page; `make bench-headline`, the headline's pages alone."
        + run_time(args.results)
        + f" How the numbers got here (the tuning history) is in [bench/findings.md]({findings})."
        "\n\n" + "\n".join(index_line(args.results, name, title, out_dir) for name, title in PAGES),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n\n".join(sections) + "\n")
    missing = [name for name, _ in PAGES if not (args.results / f"{name}.md").exists()]
    print(f"wrote {args.out} ({len(PAGES) - len(missing)} pages, {len(missing)} not run, {len(stale)} stale)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
