"""Random error patterns against SystematicMDS: corrected, detected, or (never) silently wrong.

For (k, r) in (2,5), (3,7), (4,8), (5,12), (3,10), (6,10) and two error models:

- ``gaussian``: each wrong symbol gets a Gaussian error of random scale 10^U(-3, 3) relative to the
  symbols' RMS;
- ``bitflip``: one float of each wrong symbol has one random bit flipped among bits 40..62 (the 12
  upper mantissa bits and the 11 exponent bits of an IEEE double);

each trial draws the number of wrong symbols uniformly from 0..r and their positions at random,
decodes, and counts:

- ``corrected``: returned, the wrong positions exactly, data within 1e-9 (relative);
- ``accepted_small``: returned data within 1e-9 but not the exact positions (an error too small
  to matter or to detect);
- ``detected``: DecodingFailure with more than r-k-1 wrong symbols;
- ``false_alarms``: DecodingFailure (or any exception) with at most r-k-1 wrong symbols; must be 0;
- ``silent_wrong``: returned data off by more than 1e-9; must be 0. Broken down into
  ``silent_wrong_correctable`` (at most r-k-1 wrong symbols: the code promised to correct them) and
  ``silent_wrong_overflow`` (a corrupted float is beyond 1e300 in magnitude, where norms overflow);
  ``false_alarms_nonfinite`` counts false alarms where a corrupted float became inf or NaN.

Usage::

    python -m bench.mds_trials               # 1000 trials per (k, r) and model
    python -m bench.mds_trials --quick       # 40 trials
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.common import fmt, markdown_table
from bench.skeleton import Bench
from coded.codes.mds import DecodingFailure, SystematicMDS

CODES = [(2, 5), (3, 7), (4, 8), (5, 12), (3, 10), (6, 10)]
MODELS = ("gaussian", "bitflip")
SYMBOL = (3, 2)  # each symbol is a 3 x 2 matrix
TOLERANCE = 1e-9
BITS = (40, 63)  # bits 40..62: upper mantissa (40..51) and exponent (52..62)
COLUMNS = [
    "k", "r", "model", "trials", "correctable", "corrected", "accepted_small", "detected",
    "false_alarms", "false_alarms_nonfinite", "silent_wrong", "silent_wrong_correctable",
    "silent_wrong_overflow", "worst_corrected_error", "seconds",
]
HUGE = 1e300


def corrupt(y: np.ndarray, wrong: Sequence[int], model: str, rng: np.random.Generator) -> list[str]:
    """Make the symbols ``wrong`` of y wrong in place; return a description of each change."""
    notes: list[str] = []
    if model == "gaussian":
        scale = float(np.sqrt(np.mean(y**2)))
        for p in wrong:
            relative = 10.0 ** rng.uniform(-3, 3)
            y[p] += rng.standard_normal(SYMBOL) * relative * scale
            notes.append(f"symbol {p}: gaussian x {relative:.1e}")
        return notes
    for p in wrong:
        flat = y[p].reshape(-1)
        index = int(rng.integers(flat.size))
        bit = int(rng.integers(*BITS))
        before = float(flat[index])
        flat[index : index + 1].view(np.uint64)[0] ^= np.uint64(1) << np.uint64(bit)
        notes.append(f"symbol {p}[{index}] bit {bit}: {before:.6g} -> {float(flat[index]):.6g}")
    return notes


def run(k: int, r: int, model: str, trials: int, seed: int) -> tuple[dict[str, Any], list[str]]:
    """Counts for one code and error model, and descriptions of any silent wrong answer or false alarm."""
    started = time.perf_counter()
    code = SystematicMDS(k, r, seed=seed)
    rng = np.random.default_rng([seed, k, r, MODELS.index(model)])
    correctable = r - k - 1
    counts = dict.fromkeys(
        ("corrected", "accepted_small", "detected", "false_alarms", "false_alarms_nonfinite", "silent_wrong",
         "silent_wrong_correctable", "silent_wrong_overflow"),
        0,
    )
    worst = 0.0
    examples: list[str] = []
    for trial in range(trials):
        x = rng.standard_normal((k, *SYMBOL))
        y = code.encode(x)
        count = int(rng.integers(0, r + 1))
        wrong = sorted(rng.choice(r, count, replace=False).tolist())
        notes = corrupt(y, wrong, model, rng)
        with np.errstate(all="ignore"):
            corrupted = np.abs(y[wrong]) if wrong else np.zeros(1)
        nonfinite = not np.all(np.isfinite(corrupted))
        huge = nonfinite or bool(np.any(corrupted > HUGE))
        try:
            with np.errstate(all="ignore"):
                got, located = code.decode(y)
        except DecodingFailure as failure:
            if count > correctable:
                counts["detected"] += 1
            else:
                counts["false_alarms"] += 1
                counts["false_alarms_nonfinite"] += nonfinite
                examples.append(
                    f"false alarm: ({k},{r}) {model} trial {trial}, {count} wrong: "
                    f"{'; '.join(notes)} -> {failure}"
                )
            continue
        except Exception as error:  # any other exception is a false alarm too
            counts["false_alarms"] += 1
            counts["false_alarms_nonfinite"] += nonfinite
            examples.append(f"false alarm: ({k},{r}) {model} trial {trial}: {type(error).__name__}: {error}")
            continue
        with np.errstate(all="ignore"):
            error = float(np.max(np.abs(got - x)) / np.max(np.abs(x)))
        if not error <= TOLERANCE:  # also NaN
            counts["silent_wrong"] += 1
            counts["silent_wrong_correctable"] += count <= correctable
            counts["silent_wrong_overflow"] += huge
            examples.append(
                f"silent wrong: ({k},{r}) {model} trial {trial}, {count} wrong {wrong}, "
                f"located {list(located)}, "
                f"data error {error:.1e}: {'; '.join(notes)}"
            )
        elif list(located) == wrong:
            counts["corrected"] += 1
            worst = max(worst, error)
        else:
            counts["accepted_small"] += 1
    row = {"k": k, "r": r, "model": model, "trials": trials, "correctable": correctable, **counts,
           "worst_corrected_error": worst, "seconds": round(time.perf_counter() - started, 2)}
    return row, examples


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trials", type=int, default=None, help="trials per (k, r) and model (default 1000, quick 40)"
    )
    parser.add_argument("--seed", type=int, default=0)


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, arguments=arguments)
    args = bench.args
    trials = args.trials or (40 if args.quick else 1000)
    bench.open(
        f"bench/mds_trials.py: (k, r) in {CODES}, models {list(MODELS)}, {trials} trials each, "
        f"symbols of shape {SYMBOL}, wrong-symbol count uniform in 0..r, tolerance {TOLERANCE:g}, "
        f"seed {args.seed}"
        + (" (quick)" if args.quick else ""),
        quoted=True,
    )
    rows, examples = [], []
    for model in MODELS:
        for k, r in CODES:
            row, found = run(k, r, model, trials, args.seed)
            rows.append(row)
            examples += found
            print("  " + "  ".join(f"{c}={fmt(row[c])}" for c in COLUMNS), flush=True)
    totals = {
        m: {c: sum(r[c] for r in rows if r["model"] == m) for c in ("silent_wrong", "false_alarms")}
        for m in MODELS
    }
    summary = "; ".join(
        f"{m}: {t['silent_wrong']} silent wrong answers, {t['false_alarms']} false alarms"
        for m, t in totals.items()
    )
    print(summary)
    for line in examples[:20]:
        print("  " + line)
    bench.csv("mds_trials.csv", rows, COLUMNS)
    sections = [
        f"Totals: {summary}.",
        markdown_table(rows, COLUMNS),
    ]
    if examples:
        sections += [
            f"## Silent wrong answers and false alarms ({len(examples)}; the first 20)",
            "\n".join(f"- {line}" for line in examples[:20]),
        ]
    bench.finish()
    page = bench.page("mds_trials.md", "SystematicMDS under random wrong symbols", bench.header(), sections)
    print(f"wrote {bench.out / 'mds_trials.csv'} and {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
