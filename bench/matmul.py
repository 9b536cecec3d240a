"""Coded matrix multiplication on a real local cluster, and the recovery-threshold tables.

    python -m bench.matmul            # 2048 x 2048 float64, P = 8, 10, 12 workers
    python -m bench.matmul --quick    # 256 x 256, P = 8

For each P, the same product is computed uncoded (A in P row blocks, wait for all), with
Polynomial (m = d = 2), MatDot (n = 2) and GPD (m = n = 2, d = 1) codes, one after another on
one cluster under the same seeded shifted-exponential stragglers. Reported: time to product
(the round: inputs out, products back, decoding), the one-off encode-and-upload time, and decode
time as a share of the round. Every product runs REPEATS = 3 times (1 with --quick): the whole
list once, then again, with the same seed (same inputs, same stragglers); the table gives the
median and low-high over repeats, the speed-up computed within each repeat and then summarised.
Then, in this process, the decode of each code on the unit circle (the default, rotation
embeddings) beside the same code on real Chebyshev points, against one worker's block product
(median and spread of repeats). Then the recovery thresholds of spec/000 Sec. 3.6 (Fig. 5,
K = 36) and Fig. 1 (P = 1000), computed by coded.codes.matmul.recovery_threshold.

Jobs run with ``verify: off``: the papers' schemes, unchecked (bench/verification.py measures what checking
costs).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import yaml

from bench.cluster import cluster
from bench.common import markdown_table, spread, summarise_repeats
from bench.skeleton import Bench
from coded.client import CodedClient
from coded.client.reports import JobState
from coded.codes import matmul_code
from coded.codes.matmul import recovery_threshold

SCHEMES = [
    {"scheme": "uncoded"},
    {"scheme": "polynomial", "m": 2, "d": 2},
    {"scheme": "matdot", "n": 2},
    {"scheme": "gpd", "m": 2, "n": 2, "d": 1},
]
STRAGGLERS = {"model": "shifted_exponential", "shift": 0.05, "mean": 0.2}
REPEATS = 3  # jobs per measured point in a full run (1 with --quick)
COLUMNS = ["P", "scheme", "params", "waits_for", "repeats", "time_to_product_s", "time_to_product_s_low",
           "time_to_product_s_high", "speedup_vs_uncoded", "speedup_vs_uncoded_low", "speedup_vs_uncoded_high",
           "decode_s", "decode_share", "setup_s"]


def metric_sum(text: str, name: str, job: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and s.labels.get("job_id") == job)


def product(metrics_url: str, client: CodedClient, p: int, code: dict[str, Any], size: int,
            seed: int) -> dict[str, Any]:
    """One matmul job on ``p`` of the cluster's workers: its round, one-off set-up and decode time."""
    import urllib.request

    spec = {"kind": "matmul", "workers": p, "code": code,
            "inputs": {"generate": {"a": [size, size], "b": [size, size], "seed": seed}},
            "faults": {"stragglers": STRAGGLERS}, "seed": seed, "verify": "off"}
    submitted = time.perf_counter()
    job = client.wait(client.submit(yaml.safe_dump(spec)).id)
    total = time.perf_counter() - submitted
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"{code}: {job.reason}")
    text = urllib.request.urlopen(metrics_url, timeout=30).read().decode()
    decode = metric_sum(text, "coded_decode_duration_seconds_sum", job.id)
    round_s = job.history[0].duration_s
    threshold = p if code["scheme"] == "uncoded" else recovery_threshold(
        code["scheme"], **{k: v for k, v in code.items() if k != "scheme"})
    row = {"P": p, "scheme": code["scheme"], "params": " ".join(f"{k}={v}" for k, v in code.items() if k != "scheme"),
           "waits_for": threshold, "time_to_product_s": round_s, "setup_s": total - round_s, "decode_s": decode,
           "decode_share": decode / round_s}
    print(f"P={p:2} {code['scheme']:10} {row['params']:12} R={threshold:2}: product in "
          f"{round_s:7.2f} s, decode {decode:.3f} s ({100 * decode / round_s:.1f}%), "
          f"encode+upload+start {row['setup_s']:.1f} s", flush=True)
    return row


def run(args: argparse.Namespace, size: int, workers: tuple[int, ...], repeats: int) -> list[dict[str, Any]]:
    """Every (P, scheme) product, the whole list ``repeats`` times on one cluster; the speed-up
    against uncoded within each repeat, then the median and low-high over repeats."""
    runs = []
    with cluster(args, max(workers), metrics=True) as where, where.client() as client:
        assert where.metrics_url is not None
        for _ in range(repeats):
            rows = [product(where.metrics_url, client, p, code, size, args.seed) for p in workers
                    for code in SCHEMES]
            for row in rows:
                uncoded = next(r for r in rows if r["P"] == row["P"] and r["scheme"] == "uncoded")
                row["speedup_vs_uncoded"] = uncoded["time_to_product_s"] / row["time_to_product_s"]
            runs.append(rows)
    return summarise_repeats(runs, ["time_to_product_s", "speedup_vs_uncoded"])


DECODE_CODES = [("polynomial", {"m": 2, "d": 2}), ("matdot", {"n": 2}), ("gpd", {"m": 2, "n": 2, "d": 1}),
                ("gpd", {"m": 2, "n": 2, "d": 2})]


def decode_cost(size: int, workers: int, repeats: int, seed: int) -> list[dict[str, Any]]:
    """Decode time from R results of one product, unit circle beside Chebyshev, and one worker's product.

    The results are random arrays of the right shape (the decode does the same work whatever the
    values); the weights are solved before timing, as the master caches them per responder set.
    """
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(seed)
    rows = []
    with threadpool_limits(1, user_api="blas"):  # as the master and the workers under coded local
        for scheme, params in DECODE_CODES:
            rows += decode_rows(scheme, params, size, workers, repeats, rng)
    return rows


def decode_rows(scheme: str, params: dict[str, int], size: int, workers: int, repeats: int,
                rng: np.random.Generator) -> list[dict[str, Any]]:
    """One code's decode on both kinds of points, and one worker's product of the same blocks."""
    rows: list[dict[str, Any]] = []
    m, n, d = params.get("m", 1), params.get("n", 1), params.get("d", 1)
    a, b = rng.standard_normal((size // m, size // n)), rng.standard_normal((size // n, size // d))
    product = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = a @ b
        product.append(time.perf_counter() - began)
    results = {p: rng.standard_normal(result.shape) for p in range(recovery_threshold(scheme, **params))}
    del a, b, result
    for points in ("unit_circle", "chebyshev"):
        code = matmul_code(scheme, workers=workers, points=points, **params)
        code.decode_weights(sorted(results))
        decode = []
        for _ in range(repeats):
            began = time.perf_counter()
            code.decode(results)
            decode.append(time.perf_counter() - began)
        stats, base = spread(decode), spread(product)
        rows.append({"scheme": scheme, "params": " ".join(f"{k}={v}" for k, v in params.items()),
                     "points": points, "R": code.recovery_threshold, "result": f"{size // m}x{size // d}",
                     "decode_s": stats["median"], "decode_low_s": stats["low"], "decode_high_s": stats["high"],
                     "worker_product_s": base["median"], "decode/(product+decode)":
                     stats["median"] / (stats["median"] + base["median"])})
        print(f"  {scheme:10} {rows[-1]['params']:12} {points:11} R={rows[-1]['R']:2}: decode "
              f"{stats['median']:.3f} s ({stats['low']:.3f}..{stats['high']:.3f}), one worker's product "
              f"{base['median']:.3f} s", flush=True)
    for row in rows:
        row["vs_chebyshev"] = row["decode_s"] / rows[-1]["decode_s"]
    return rows


def thresholds() -> list[dict[str, Any]]:
    """spec/000 Sec. 3.6: K = K' = 36 forces m = d = 36/n; communication = R N1 B / (m d)."""
    out = []
    for n in (1, 2, 3, 4, 6, 9, 12, 18, 36):
        m = 36 // n
        r = recovery_threshold("gpd", m=m, n=n, d=m)
        out.append({"n": n, "m=d": m, "R=mnd+n-1": r, "comm/(N1 B)": r / (m * m)})
    return out


def arguments(parser: argparse.ArgumentParser) -> None:
    # 2048: the 36 products in about a minute and a half here (4096: 8x the flops, 4x the bytes, 5 minutes)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1)


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, cluster=True, repeats=REPEATS, arguments=arguments)
    args = bench.args
    size, workers = (256, (8,)) if args.quick else (args.size, (8, 10, 12))
    bench.open(f"bench/matmul.py: {size} x {size} float64, P = {workers}, stragglers {STRAGGLERS}, seed {args.seed}")
    repeats = bench.repeats
    rows = run(args, size, workers, repeats)
    print("decode in this process:", flush=True)
    decoding = decode_cost(size, 12, 3 if args.quick else 5, args.seed)
    decode_columns = ["scheme", "params", "points", "R", "result", "decode_s", "decode_low_s", "decode_high_s",
                      "vs_chebyshev",
                      "worker_product_s", "decode/(product+decode)"]
    bench.csv("matmul_decode.csv", decoding, decode_columns)
    table = thresholds()
    fig1 = [{"K": k, "MatDot 2K-1": recovery_threshold("matdot", n=k),
             "GPD m=n=d=sqrt(K)": recovery_threshold("gpd", m=int(k ** 0.5), n=int(k ** 0.5), d=int(k ** 0.5)),
             "Polynomial K^2": recovery_threshold("polynomial", m=k, d=k)} for k in (4, 9, 16, 25, 36)]
    bench.csv("matmul.csv", rows, COLUMNS)
    sections = [
        f"## Time to product\n\nAll P workers compute at once on the same cores, so on this machine a code "
        f"that makes every worker do more work (each coded block is 1/2 of A, against 1/P uncoded) pays for "
        f"it in contention; on separate machines only the stragglers' delays would differ. Every product ran "
        f"{repeats} time(s) (the whole list once, then again; same seed, so the same inputs and stragglers): "
        f"time to product as the median and low-high over repeats; the speed-up against uncoded computed "
        f"within each repeat, then its median and low-high (not a ratio of medians); decode_s, decode_share "
        f"and setup_s their medians.\n\n"
        + markdown_table(rows, COLUMNS, digits=3),
        "## Decode: unit circle against Chebyshev points\n\nIn one process, the decode of one product from "
        "R results (weights already solved, as the master caches them) and one worker's block product "
        "(one BLAS thread, as the master and the workers have under `coded local`), median of repeats, P = 12. The "
        "unit-circle decode gathers each result's real and imaginary message parts block by block and "
        "combines them with the complex weights as one real matrix; `vs_chebyshev` is its time over the "
        "real-point decode of the same code.\n\n"
        + markdown_table(decoding, decode_columns, digits=3),
        "## Recovery thresholds, K = K' = 36 (spec/000 Sec. 3.6, Fig. 5)\n\n"
        + markdown_table(table, list(table[0]), digits=4),
        "## Recovery thresholds against K (Fig. 1; GPD with m = n = d = sqrt(K))\n\n"
        + markdown_table(fig1, list(fig1[0])),
    ]
    bench.finish()
    bench.page("matmul.md", "Coded matrix multiplication", bench.header(), sections)
    print(markdown_table(rows, COLUMNS, digits=3))
    print(markdown_table(table, list(table[0]), digits=4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
