"""What each checking level costs on a healthy cluster, as ratios to uncoded training in one run
(issue 37: docs/jobs.md's table of levels cites it).

    python -m bench.check_cost              # 3 repeats, logistic 48000 x 500 and LeNet (with the torch extra)
    python -m bench.check_cost --quick      # a seconds-long smoke run
    python -m bench.check_cost --sample 0.05 0.1   # the sampled level at other shares too

n = 6 workers, cyclic ``stragglers: 2``, no injected faults. Levels: uncoded (nothing to check);
streamed replies with ``verify: off``, ``sampled`` (the default, at its default share and any
``--sample``) and ``strict``; whole replies (``stream: off``) with their default check. Every
level of a repeat runs on one local cluster, one job after another in a rotated order (so a
drift of the machine's load does not always hit the same level); each job's seconds per
iteration is its median after the warm-up, divided by the uncoded job's of the same repeat.
Writes ``bench/results/check_cost.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from bench.cluster import WARMUP, cluster
from bench.common import markdown_table, summarise_repeats
from bench.partial import N, run, spec, workloads
from bench.skeleton import Bench
from coded.jobs.spec.gradient import GradientVerifySpec

COLUMNS = ["workload", "level", "repeats", "vs_uncoded", "vs_uncoded_low", "vs_uncoded_high", "vs_off",
           "vs_off_low", "vs_off_high", "s_per_iteration", "checked_share"]


def levels(samples: Sequence[float]) -> list[tuple[str, dict[str, Any]]]:
    """(name, the spec's changes) of every level measured; the default share first."""
    default = GradientVerifySpec().sample
    shares = [default] + [s for s in samples if s != default]
    return [("uncoded", {"code": {"scheme": "uncoded"}}),
            ("streamed, off", {"verify": "off"}),
            *((f"streamed, sampled {share:g}" + (" (default)" if share == default else ""),
               {"verify": {"level": "sampled", "sample": share}}) for share in shares),
            ("streamed, strict", {"verify": "strict"}),
            ("whole, strict (its default)", {"stream": "off"})]


def repeat(args: argparse.Namespace, index: int, iterations: int) -> list[dict[str, Any]]:
    """One repeat of every level on a fresh cluster; the rows in the order of :func:`levels`."""
    chosen = levels(args.sample)
    rows: list[dict[str, Any]] = []
    with cluster(args, N) as where, where.client() as client:
        for workload_name, workload in workloads(args.quick).items():
            order = chosen[index % len(chosen):] + chosen[: index % len(chosen)]
            jobs = {name: run(client, spec(workload, changes, {}, iterations), {}) for name, changes in order}
            per = {name: statistics.median(r.duration_s for r in list(job.history)[WARMUP:])
                   for name, job in jobs.items()}
            for name, _ in chosen:
                history = list(jobs[name].history)[WARMUP:]
                confirmed = statistics.fmean(r.checked for r in history) if name != "uncoded" else 0.0
                rows.append({"workload": workload_name, "level": name, "s_per_iteration": per[name],
                             "vs_uncoded": per[name] / per["uncoded"], "vs_off": per[name] / per["streamed, off"],
                             "checked_share": confirmed})
                print(f"{workload_name:18} {name:34} {per[name] * 1e3:8.1f} ms/iteration "
                      f"({rows[-1]['vs_uncoded']:5.2f}x uncoded, {rows[-1]['vs_off']:5.2f}x off)", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=3, arguments=lambda parser: parser.add_argument(
        "--sample", type=float, nargs="*", default=[], help="more shares of the sampled level"))
    iterations = 6 if bench.quick else 30
    runs = [repeat(bench.args, index, iterations) for index in range(bench.repeats)]
    bench.finish()
    rows = summarise_repeats(runs, ["vs_uncoded", "vs_off"])
    bench.csv("check_cost.csv", rows, COLUMNS)
    header = bench.header(
        f"n = {N}, cyclic `stragglers: 2`, no faults, {iterations} iterations per job, {WARMUP} of warm-up; "
        f"medians over {bench.repeats} repeats (low-high) of ratios computed within each repeat. "
        "checked_share: the share of iterations in which some piece was confirmed by a second copy")
    table = markdown_table(rows, COLUMNS, digits=3)
    print(table)
    bench.page("check_cost.md", "What each checking level costs, healthy", header, [table])
    print(f"wrote {bench.out / 'check_cost.csv'} and check_cost.md; {bench.guard.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
