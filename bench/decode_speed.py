"""Decode speed against a plain sum of the same messages, measured side by side in one run.

n = 32 workers, s = 2 stragglers (30 messages), gradients of length l = 10^7 float64:

- cyclic (m = 1, real), ye_abbe on the unit circle with m = 1 and m = 2; frc needs (s+1) | n, so
  it runs with s = 3 (29 messages);
- each decode is timed against ``np.sum(stacked, axis=0)`` and ``functools.reduce(np.add, arrays)``
  over the very same message arrays (the rows of one pre-stacked (n-s, L) array);
- best of 5 wall times (time.perf_counter), the three timings interleaved in each round, after one
  warm-up decode; the one-off solve of the decode weights (cached per responder set) is timed
  separately on the first call;
- the message values are random (decode speed does not depend on them); correctness is checked
  separately by encoding and decoding a short gradient.

Usage::

    python -m bench.decode_speed                  # l = 10^7: 2.4 GB of messages
    python -m bench.decode_speed --quick          # l = 10^5
    python -m bench.decode_speed --block-sweep    # also time combine.BLOCK_BYTES values
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.common import markdown_table
from bench.skeleton import Bench
from coded.codes import combine, gradient_code

WORKERS = 32
STRAGGLERS = 2
#: (label, scheme, s, params)
CODES: list[tuple[str, str, int, dict[str, Any]]] = [
    ("frc s=3", "frc", 3, {}),
    ("cyclic", "cyclic", STRAGGLERS, {}),
    ("ye_abbe m=1", "ye_abbe", STRAGGLERS, {"m": 1}),
    ("ye_abbe m=2", "ye_abbe", STRAGGLERS, {"m": 2}),
]
COLUMNS = [
    "code", "n", "s", "messages", "gradient_length", "message_length", "weight_solve_ms",
    "decode_s", "np_sum_s", "reduce_add_s", "ratio_decode_np_sum", "ratio_decode_reduce",
    "decode_GBps", "np_sum_GBps", "reduce_add_GBps", "check_error", "goal_ratio", "meets_goal",
]
GOAL = 1.5


def best_of(repeats: int, functions: Sequence[Callable[[], Any]]) -> list[float]:
    """Best wall time of each function over ``repeats`` rounds, the functions interleaved per round."""
    best = [math.inf] * len(functions)
    for _ in range(repeats):
        for index, function in enumerate(functions):
            started = time.perf_counter()
            function()
            best[index] = min(best[index], time.perf_counter() - started)
    return best


def responders(n: int, s: int) -> list[int]:
    """Workers that answered: all but s spread-out ones."""
    missing = {(3 + t * (n // max(s, 1))) % n for t in range(s)}
    return [w for w in range(n) if w not in missing]


def check_error(code: Any, workers: Sequence[int], length: int, rng: np.random.Generator) -> float:
    """Relative error of a real encode/decode round trip of a short gradient against math.fsum."""
    partials = rng.standard_normal((code.k, length))
    truth = np.array([math.fsum(col) for col in partials.T])
    sent = {i: code.encode(i, {j: partials[j] for j in code.partitions(i)}) for i in workers}
    got = code.decode(sent, length=length)
    return float(np.max(np.abs(got - truth)) / np.max(np.abs(truth)))


def measure(
    label: str, code: Any, buffer: np.ndarray, length: int, repeats: int, rng: np.random.Generator
) -> dict[str, Any]:
    workers = responders(code.n, code.s)
    message_length = code.message_size(length)
    stacked = buffer[: len(workers), :message_length]
    arrays = list(stacked)  # each row is a contiguous view: decode copies nothing
    messages = dict(zip(workers, arrays, strict=True))
    started = time.perf_counter()
    code.decode_weights(workers)  # the one-off solve; cached from here on
    solve = time.perf_counter() - started
    code.decode(messages)  # warm-up with cached weights
    decode_s, sum_s, reduce_s = best_of(
        repeats,
        [
            lambda: code.decode(messages),
            lambda: np.sum(stacked, axis=0),
            lambda: functools.reduce(np.add, arrays),
        ],
    )
    read = stacked.size * 8
    decoded = code.gradient_size(message_length) * 8
    return {
        "code": label,
        "n": code.n,
        "s": code.s,
        "messages": len(workers),
        "gradient_length": length,
        "message_length": message_length,
        "weight_solve_ms": solve * 1e3,
        "decode_s": decode_s,
        "np_sum_s": sum_s,
        "reduce_add_s": reduce_s,
        "ratio_decode_np_sum": decode_s / sum_s,
        "ratio_decode_reduce": decode_s / reduce_s,
        "decode_GBps": (read + decoded) / decode_s / 1e9,
        "np_sum_GBps": (read + message_length * 8) / sum_s / 1e9,
        "reduce_add_GBps": (read + message_length * 8) / reduce_s / 1e9,
        "check_error": check_error(code, workers, 1000, rng),
        "goal_ratio": GOAL,
        "meets_goal": "yes" if decode_s / sum_s <= GOAL else "NO",
    }


def block_sweep(codes: dict[str, Any], buffer: np.ndarray, length: int, repeats: int) -> list[dict[str, Any]]:
    """Decode time for several values of combine.BLOCK_BYTES (restored afterwards)."""
    original = combine.BLOCK_BYTES
    rows = []
    try:
        for shift in range(12, 22):
            combine.BLOCK_BYTES = 1 << shift
            row: dict[str, Any] = {"BLOCK_BYTES": 1 << shift, "KiB": (1 << shift) // 1024}
            for label, code in codes.items():
                workers = responders(code.n, code.s)
                stacked = buffer[: len(workers), : code.message_size(length)]
                messages = dict(zip(workers, stacked, strict=True))
                code.decode(messages)
                (row[f"{label} decode_s"],) = best_of(repeats, [functools.partial(code.decode, messages)])
            rows.append(row)
            shown = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
            print("  " + "  ".join(shown), flush=True)
    finally:
        combine.BLOCK_BYTES = original
    return rows


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--length", type=int, default=10**7, help="gradient length l (default 10^7)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--block-sweep", action="store_true", help="also time combine.BLOCK_BYTES from 4 KiB to 2 MiB"
    )


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, arguments=arguments)
    args = bench.args
    length = 10**5 if args.quick else args.length
    repeats = 3 if args.quick else args.repeats
    rows_needed = max(WORKERS - s for _, _, s, _ in CODES)
    bench.open(
        f"bench/decode_speed.py: n = {WORKERS}, s = {STRAGGLERS} (frc: s = 3), gradient length l = {length}, "
        f"float64, best of {repeats}, seed {args.seed}, combine.BLOCK_BYTES = {combine.BLOCK_BYTES}"
        + (" (quick)" if args.quick else ""),
        f"messages: {rows_needed} x {length} float64 = {rows_needed * length * 8 / 1e9:.2f} GB, "
        "random values "
        "(the rows of one array; the same arrays feed decode, np.sum and reduce(np.add))",
        quoted=True,
    )
    rng = np.random.default_rng(args.seed)
    buffer = rng.random((rows_needed, length))
    codes = {
        label: gradient_code(scheme, n=WORKERS, s=s, seed=args.seed, **params)
        for label, scheme, s, params in CODES
    }
    rows = []
    for label, code in codes.items():
        row = measure(label, code, buffer, length, repeats, rng)
        rows.append(row)
        print(
            f"  {label:12} {row['messages']} msgs x {row['message_length']}: decode {row['decode_s']:.4f} s, "
            f"np.sum {row['np_sum_s']:.4f} s, reduce(np.add) {row['reduce_add_s']:.4f} s, "
            f"ratio {row['ratio_decode_np_sum']:.2f} (vs reduce {row['ratio_decode_reduce']:.2f}), "
            f"{row['decode_GBps']:.1f} GB/s, weights {row['weight_solve_ms']:.2f} ms, "
            f"check error {row['check_error']:.1e}",
            flush=True,
        )
    sweep = []
    if args.block_sweep:
        print("block sweep (decode time per combine.BLOCK_BYTES):")
        swept = {k: codes[k] for k in ("cyclic", "ye_abbe m=1", "ye_abbe m=2")}
        sweep = block_sweep(swept, buffer, length, repeats)
    bench.csv("decode_speed.csv", rows, COLUMNS)
    table_columns = [
        "code", "messages", "message_length", "weight_solve_ms", "decode_s", "np_sum_s", "reduce_add_s",
        "ratio_decode_np_sum", "ratio_decode_reduce", "decode_GBps", "np_sum_GBps", "check_error",
        "meets_goal",
    ]
    table = markdown_table(rows, table_columns, digits=3)
    print(table)
    sections = [
        "Ratios are decode time over the time of the plain sums of the same arrays, measured in the same "
        f"run (goal: decode / np.sum <= {GOAL}). GB/s counts bytes read plus bytes written. "
        "`weight_solve_ms` is the one-off solve for a new responder set (then cached). `check_error` is "
        "the relative error of a real encode/decode round trip of a length-1000 gradient.",
        table,
    ]
    if sweep:
        bench.csv("decode_speed_blocks.csv", sweep, list(sweep[0]))
        sections += [
            "## combine.BLOCK_BYTES sweep (decode seconds, best of the rounds)",
            markdown_table(sweep, list(sweep[0]), digits=3),
        ]
    bench.finish()
    page = bench.page("decode_speed.md", "Decode speed", bench.header(), sections)
    print(f"wrote {bench.out / 'decode_speed.csv'} and {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
