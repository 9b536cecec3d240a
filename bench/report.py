"""docs/results.md from the benchmarks' saved results (``make bench`` runs them, then this).

    python -m bench.report [--results bench/results] [--out docs/results.md]

Each benchmark writes its own page (bench/results/<name>.md, with what ran and where); this puts
them in one report, in the papers' order, after Ye & Abbe's Table 3 recomputed from the model. A
page that no longer measures the code as it is (bench/staleness.py) is marked stale under its
title, with the command that measures it again.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from bench.common import REPO_ROOT, RESULTS_DIR
from bench.staleness import mark, staleness
from coded.codes.plan import table3

# (results page, what it answers), in the report's order; missing pages are listed as not run
PAGES = [
    ("yeabbe", "Ye & Abbe's experiment on links of finite bandwidth: seconds per iteration and AUC against time"),
    ("tandon_links", "Tandon et al.'s Fig. 4 on links of finite bandwidth: delayed workers and slow links"),
    ("large_sparse", "A large sparse upload: the memory of every process"),
    ("ddp", "Against PyTorch DDP: the same model, data and stragglers"),
    ("tandon", "Tandon et al.: seconds per iteration, and where ignoring stragglers loses accuracy"),
    ("cluster_speedup", "Tandon et al.: time to a target loss, coded against uncoded and ignoring stragglers"),
    ("torch_training", "PyTorch: time to accuracy under stragglers, and what being a worker costs"),
    ("plan", "Ye & Abbe: the planner's prediction against measurement"),
    ("plan_modes", "The planner fitted from jobs of every code and reply mode, against the measured grid"),
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
    ("codenet", "CodeNet: accuracy under soft errors"),
    ("fuzz", "Hostile input"),
]


def table3_section() -> str:
    values = table3()
    best = min(values, key=values.get)
    uncoded, best_m1 = values[(1, 1)], min(v for (m, _), v in values.items() if m == 1)
    lines = ["| m \\ d | " + " | ".join(str(d) for d in range(1, 9)) + " |", "|---" * 9 + "|"]
    for m in range(1, 9):
        cells = [("**%.4f**" if (m, d) == best else "%.4f") % values[(m, d)] if (m, d) in values else ""
                 for d in range(1, 9)]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return ("## Ye & Abbe, Table 3 from the runtime model (common/codes/plan.py)\n\n"
            "Worker time d·T1 + T2/m with shifted exponentials (n = 8, λ1 = 0.8, λ2 = 0.1, t1 = 1.6, t2 = 6); "
            "an iteration ends at the (n − s)-th fastest worker, s = d − m. Computed exactly (quadrature); "
            "tests/codes/test_plan.py checks all 36 entries against the paper's 4 decimals "
            "(largest difference 4.9e-5).\n\n"
            + "\n".join(lines)
            + f"\n\nOptimum m = {best[0]}, d = {best[1]} (s = {best[1] - best[0]}): {values[best]:.4f}; uncoded "
              f"{uncoded:.4f} ({100 * (uncoded - values[best]) / uncoded:.1f}% faster); best m = 1 code {best_m1:.4f} "
              f"({100 * (best_m1 - values[best]) / best_m1:.1f}% faster) — the paper's 41% and 11%. "
              "`coded plan` ranks codes this way from measured costs.")


def _committed(path: Path) -> str:
    """The day the file was last committed (git), or "an unknown day"."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "an unknown day"
    return done.stdout.strip() or "an unknown day"


def page(results: Path, name: str, out_dir: Path) -> str | None:
    path = results / f"{name}.md"
    if not path.exists():
        return None
    source = path.read_text()
    lines = source.splitlines()
    body = [("#" + line if line.startswith("#") else line) for line in lines[1:]]  # its title is ours
    if not any(line.startswith("- machine: measured ") for line in body):  # written before pages said when
        body.insert(1, f"- measured: on or before {_committed(path)} (the day its results were committed); "
                       "the machine line below is all the page says of where")
    text = "\n".join(body).strip()
    for image in sorted(results.glob(f"{name}*.png")):
        link = os.path.relpath(image, out_dir)
        if f"]({image.name})" in text:  # the page shows it already, relative to itself
            text = text.replace(f"]({image.name})", f"]({link})")
        else:
            text += f"\n\n![{image.stem}]({link})"
    verdict = staleness(name, source)
    return f"{mark(source, verdict)}\n\n{text}" if verdict.stale else text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "results.md")
    args = parser.parse_args(argv)
    sections = ["# Results\n\nWhat the papers claim, measured on this implementation: every benchmark runs real "
                "`coded` processes on one machine with seeded faults, compares side by side in one run and "
                "says what ran and where (the header of each part). `make bench` reruns everything and "
                "rewrites this page; `make bench-smoke` runs each script's seconds-long version (CI does).",
                (Path(__file__).with_name("findings.md")).read_text().strip(),
                table3_section()]
    missing = []
    for name, title in PAGES:
        text = page(args.results, name, args.out.parent)
        if text is None:
            missing.append(name)
        else:
            sections.append(f"## {title}\n\n{text}")
    if missing:
        sections.append("## Not run\n\n" + ", ".join(f"`{m}`" for m in missing)
                        + " (no results page in " + str(args.results) + ").")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n\n".join(sections) + "\n")
    print(f"wrote {args.out} ({len(PAGES) - len(missing)} parts, {len(missing)} not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
