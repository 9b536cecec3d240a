"""Tandon et al.'s Fig. 4 (ICML 2017) on links of finite bandwidth: naive against cyclic and FRC
as stragglers get slower.

    python -m bench.tandon_links            # n = 12, s = 1 (about 7 minutes on 2 cores)
    python -m bench.tandon_links --stragglers 1 2   # s = 1 and 2 (twice as long)
    python -m bench.tandon_links --quick    # n = 4, s = 1: a smoke run, not a measurement

The workload of bench/yeabbe.py (logistic regression with Nesterov's method on sparse data of the
Amazon Employee Access shape), the master and every worker in a network namespace behind a
``tc tbf`` link: workers' 100 Mbit/s, the master's 10 Gbit/s. Two series, for each s:

- **delayed**: in every iteration s workers drawn at random (seeded: the same in every system)
  sleep ``delay`` seconds before computing, as Tandon et al. did with ``time.sleep``;
- **slow link**: workers 0..s-1 sit behind a link ``factor`` times slower than the others'
  (``tc qdisc change`` on their links for the jobs of that point): a straggler made by the
  kernel, not by a sleep.

Systems: naive (uncoded), cyclic and FRC built for s stragglers, unchecked (``verify: off``) as
the paper ran them, replies as the master chooses them for the links (whole, on these). Every
point runs ``REPEATS`` rounds of one job per system; seconds per iteration as the median and
range over the rounds (nan where a job failed: its reason is printed). Expected (the paper's
reading): naive grows with the delay and the factor, cyclic and FRC stay flat.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from bench.common import markdown_table, plot_panels, summarise_repeats
from bench.shaped import MASTER_LINK, WORKER_LINK, amazon_spec, run, seconds_per_iteration, shaped_cluster
from bench.skeleton import Bench
from coded.cluster.local import LocalCluster
from coded.links.netns import format_rate, parse_rate

DELAYS = (0.0, 1.0, 2.0)
FACTORS = (1, 16)
#: 6 iterations: 3 timed after the warm-up ones; a job's set-up (~5 s: the data over 100 Mbit/s
#: links) costs as much as its iterations, so the points are what fits make bench's time
ITERATIONS, REPEATS = 6, 3
COLUMNS = ["series", "s", "slowdown", "system", "repeats", "s_per_iteration", "s_per_iteration_low",
           "s_per_iteration_high", "vs_no_slowdown"]


def delays_csv(n: int, s: int, iterations: int, delay: float, seed: int = 7) -> bytes:
    """A straggler trace: s workers drawn at random per iteration, each ``delay`` seconds late."""
    rng = np.random.default_rng([seed, s])
    lines = ["iteration,worker,delay"]
    for iteration in range(iterations):
        lines += [f"{iteration},{worker},{delay}" for worker in sorted(rng.choice(n, s, replace=False))]
    return ("\n".join(lines) + "\n").encode()


def systems(s: int) -> dict[str, dict[str, Any]]:
    return {"naive": {"scheme": "uncoded"}, "cyclic": {"scheme": "cyclic", "stragglers": s},
            "frc": {"scheme": "frc", "stragglers": s}}


def point(local: LocalCluster, n: int, s: int, series: str, slowdown: float, args: argparse.Namespace,
          data: dict[str, Any], files: dict[str, bytes]) -> list[list[dict[str, Any]]]:
    """One point of a series: every system ``repeats`` rounds (rows per round)."""
    iterations = 3 if args.quick else ITERATIONS
    faults: dict[str, Any] = {}
    uploads = dict(files)
    if series == "delayed" and slowdown:
        uploads["delays.csv"] = delays_csv(n, s, iterations, slowdown)
        faults = {"stragglers": {"model": "trace", "path": "delays.csv"}}
    rounds = []
    with local.client() as client:
        for _ in range(1 if args.quick else REPEATS):
            found = []
            for system, code in systems(s).items():
                try:
                    job = run(client, [{**amazon_spec(n, code, iterations, faults=faults), "data": data}], uploads)[0]
                    seconds = seconds_per_iteration(job)
                except RuntimeError as error:  # a failed job is what this point found, not the run's end
                    print(f"{series}, s = {s}, slowdown {slowdown:g}, {system}: {error}", flush=True)
                    seconds = float("nan")
                found.append({"series": series, "s": s, "slowdown": slowdown, "system": system,
                              "s_per_iteration": seconds})
            rounds.append(found)
    return rounds


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, arguments=lambda parser: parser.add_argument(
        "--stragglers", type=int, nargs="+", default=[1], metavar="S",
        help="the s of each pair of series (default 1: the headline's; --quick: 1)"))
    args = bench.args
    from coded.ml.data.amazon import AMAZON_SKIP, amazon_like

    n, stragglers = (4, (1,)) if args.quick else (12, tuple(args.stragglers))
    delays, factors = ((0.0, 0.5), (1, 4)) if args.quick else (DELAYS, FACTORS)
    rows_in_file = 3000 if args.quick else 32769
    files = {"amazon.csv": amazon_like(rows_in_file, seed=0).encode()}
    data = {"type": "categorical", "path": "amazon.csv", "skip": [list(pair) for pair in AMAZON_SKIP]}
    bench.open(f"bench/tandon_links.py: n = {n}, logistic regression (Nesterov) on amazon_like({rows_in_file}, seed 0) "
               f"uploaded as a categorical CSV; workers' links {WORKER_LINK}, the master's {MASTER_LINK} (tc tbf, "
               "network namespaces); unchecked (verify: off)")
    rows: list[dict[str, Any]] = []
    with shaped_cluster(n) as local:
        assert local.network is not None
        for s in stragglers:
            for series, slowdowns in (("delayed", delays), ("slow link", factors)):
                for slowdown in slowdowns:
                    slow = [f"worker-{i}" for i in range(s)] if series == "slow link" and slowdown != 1 else []
                    for host in slow:
                        local.network.change(host, format_rate(parse_rate(WORKER_LINK) // int(slowdown)))
                    try:
                        found = summarise_repeats(point(local, n, s, series, slowdown, args, data, files),
                                                  ["s_per_iteration"])
                    finally:
                        for host in slow:
                            local.network.change(host, WORKER_LINK)
                    rows += found
                    print(markdown_table(found, COLUMNS, digits=3), flush=True)
    for row in rows:
        base = next(r for r in rows if (r["series"], r["s"], r["system"]) == (row["series"], row["s"], row["system"])
                    and r["slowdown"] in (0.0, 1))
        row["vs_no_slowdown"] = row["s_per_iteration"] / base["s_per_iteration"]
    bench.finish()
    header = bench.header()
    bench.csv("tandon_links.csv", rows, COLUMNS)
    panels = {f"{series}, s = {s}": {system: [(r["slowdown"], r["s_per_iteration"]) for r in rows
                                              if (r["series"], r["s"], r["system"]) == (series, s, system)]
                                     for system in ("naive", "cyclic", "frc")}
              for s in stragglers for series in ("delayed", "slow link")}
    plot_panels(panels, bench.out / "tandon_links.png", "delay (s) / link slowdown factor", "seconds per iteration",
                " | ".join(header[:2]))
    bench.page("tandon_links.md", "Tandon et al.'s Fig. 4 on links of finite bandwidth", header, [
        "## Seconds per iteration\n\nslowdown: the delay in seconds of s random workers per iteration (delayed), or "
        "how many times slower workers 0..s-1's links are (slow link). Median and low-high over the rounds; "
        "vs_no_slowdown: the median over the median without slowdown, same series, s and system.\n\n"
        + markdown_table(rows, COLUMNS, digits=3)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
