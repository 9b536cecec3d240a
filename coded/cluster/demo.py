"""``coded demo``: the same training, coded and not, under the same injected stragglers.

Starts a local cluster, runs logistic regression with ``uncoded``, ``ignore_stragglers`` and
``cyclic`` (both with ``stragglers: 2``, the two slow workers; the cyclic code is built for one
more, the reply that checks the others) while the same two workers are always slow, prints a
comparison table and its verdicts, computed from the run's numbers (:func:`verdicts`), saves a
plot of test loss against wall-clock time, and stops every process it started. The data are
partitioned by label (Tandon et al. Sec. 5), so the data the slow workers hold differ from the
rest: ignoring them is fast but biased, coding is fast, exact and checked; the verdicts say
whether this run showed it.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from coded.client.reports import Job, JobState
from coded.client.timing import iteration_seconds
from coded.cluster.local import LocalCluster

__all__ = ["SCHEMES", "run_demo", "verdicts"]

SCHEMES = (("uncoded", 0), ("ignore_stragglers", 2), ("cyclic", 2))

SPEC = """
kind: gradient_coding
name: demo-{scheme}
workers: {workers}
code: {{scheme: {scheme}, stragglers: {stragglers}}}
model: {{type: logistic, l2: 0.0001}}
data: {{type: gaussian_mixture, samples: 20000, features: 100, classes: 2, seed: 1}}
optimizer: {{type: nesterov, lr: 2.0}}
iterations: {iterations}
partition: sorted_by_label
eval_every: 1
faults:
  stragglers: {{model: fixed, workers: [{slow}], delay: {delay}}}
seed: 7
"""


SLOW_DELAY_S = 0.2


#: the target test loss: this share of the way from the exact model's first test loss back to its last
TARGET_SHARE = 0.02
#: final test losses this close (relative) are the same model, up to the order of float64 sums
SAME_MODEL = 1e-9


def _time_to(history: list, target: float) -> float:
    return next((r.elapsed_s for r in history if r.test_loss <= target), math.nan)


def run_demo(out: Path, workers: int = 8, iterations: int = 60) -> int:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Job] = {}
    with tempfile.TemporaryDirectory(prefix="coded-demo-") as state:
        print(f"starting a master and {workers} workers on 127.0.0.1 ...", flush=True)
        with LocalCluster(workers, Path(state)) as cluster, cluster.client() as client:
            for scheme, stragglers in SCHEMES:
                spec = SPEC.format(scheme=scheme, stragglers=stragglers, workers=workers, iterations=iterations,
                                   slow=f"{workers - 2}, {workers - 1}", delay=SLOW_DELAY_S)
                job = client.submit(spec)
                print(f"  {scheme:18} job {job.id} ...", end="", flush=True)
                runs[scheme] = client.wait(job.id)
                print(f" {runs[scheme].state} in {runs[scheme].elapsed_s:.1f} s", flush=True)
    failed = [s for s, job in runs.items() if job.state != JobState.SUCCEEDED]
    if failed:
        print(f"demo failed: {', '.join(failed)}: {runs[failed[0]].reason}")
        return 1
    exact = runs["uncoded"].history
    target = exact[-1].test_loss + TARGET_SHARE * (exact[0].test_loss - exact[-1].test_loss)
    rows: list[dict[str, Any]] = []
    for scheme, job in runs.items():
        seconds = iteration_seconds(job)
        rows.append({"scheme": scheme, "s_per_iteration": seconds.median if seconds else math.nan,
                     "setup_s": job.history[0].elapsed_s, "time_to_target_s": _time_to(list(job.history), target),
                     "final_test_loss": job.history[-1].test_loss, "test_accuracy": job.history[-1].test_accuracy})
    to_target = f"s to test loss {target:.4f}"
    header = (f"{'scheme':18} {'s/iteration':>12} {'first s':>8} {to_target:>22} {'test loss':>10} "
              f"{'test acc':>9}")
    lines = [header] + [
        f"{r['scheme']:18} {r['s_per_iteration']:12.3f} {r['setup_s']:8.2f} {r['time_to_target_s']:22.2f} "
        f"{r['final_test_loss']:10.5f} {r['test_accuracy']:9.4f}" for r in rows]
    found = verdicts({r["scheme"]: r for r in rows}, target)
    print("\n".join(lines))
    print("verdicts, computed from this run:\n" + "\n".join(f"  {line}" for line in found))
    print("s/iteration: the median of the job's clock between iterations; first s: when its first iteration ended "
          "(connecting, uploading each worker's partitions); s to test loss: the job's clock when it first reached "
          f"it ({TARGET_SHARE:.0%} of the way from uncoded's first test loss to its last; nan: never)")
    (out / "demo.txt").write_text("\n".join(lines) + "\n")
    (out / "demo.json").write_text(json.dumps({"target_test_loss": target, "runs": rows, "verdicts": found},
                                              indent=2))
    _plot(runs, out / "demo.png", workers)
    print(f"saved {out / 'demo.png'}")
    return 0


def verdicts(rows: dict[str, dict[str, Any]], target: float) -> list[str]:
    """What the run shows, in words computed from its numbers: whether cyclic was faster per
    iteration than uncoded and how it compares with ignoring the slow workers, whether it ended at
    the exact (uncoded) model, and whether ignoring them reached the target test loss."""
    cyclic, uncoded, ignored = rows["cyclic"], rows["uncoded"], rows["ignore_stragglers"]
    speedup = uncoded["s_per_iteration"] / cyclic["s_per_iteration"]
    cost = cyclic["s_per_iteration"] / ignored["s_per_iteration"]
    apart = abs(cyclic["final_test_loss"] - uncoded["final_test_loss"]) / abs(uncoded["final_test_loss"])
    above = ignored["final_test_loss"] / uncoded["final_test_loss"] - 1
    reached = not math.isnan(ignored["time_to_target_s"])
    return [
        (f"cyclic was {speedup:.1f}x faster per iteration than uncoded, which waits for the slow workers"
         if speedup > 1 else f"cyclic was NOT faster per iteration than uncoded here ({1 / speedup:.2f}x its time)"),
        f"cyclic took {cost:.2f}x the time per iteration of ignoring the slow workers (its decoding and its check)",
        (f"cyclic ended at the exact model: its final test loss "
         f"{'equals' if apart == 0 else f'is within {apart:.0e} of'} uncoded's" if apart <= SAME_MODEL
         else f"cyclic did NOT end at uncoded's model: final test losses {apart:.1e} apart"),
        f"ignore_stragglers ended {above:.1%} above the exact model's test loss, "
        + (f"but reached {target:.4f} (after {ignored['time_to_target_s']:.2f} s)" if reached
           else f"and never reached {target:.4f}: the slow workers hold data nobody else has"),
    ]


def _plot(runs: dict[str, Job], path: Path, workers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for scheme, job in runs.items():
        ax.plot([r.elapsed_s for r in job.history], [r.test_loss for r in job.history], label=scheme)
    ax.set_xlabel("wall-clock time (s)")
    ax.set_ylabel("test loss")
    ax.set_yscale("log")
    ax.set_title(f"{workers} workers, workers {workers - 2} and {workers - 1} always {SLOW_DELAY_S} s slow, "
                 "data split by label, seed 7", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
