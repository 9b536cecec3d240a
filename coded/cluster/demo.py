"""``coded demo``: the same training, coded and not, under the same injected stragglers.

Starts a local cluster, runs logistic regression with ``uncoded``, ``ignore_stragglers`` and
``cyclic`` (both with ``stragglers: 2``, the two slow workers; the cyclic code is built for one
more, the reply that checks the others) while the same two workers are always slow, prints a
comparison table, saves a plot of test loss against wall-clock time, and stops every process it
started. The data are partitioned by label (Tandon et al. Sec. 5), so the data the slow workers
hold differ from the rest: ignoring them is fast but biased, coding is fast, exact and checked.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from coded.client.reports import Job, JobState
from coded.cluster.local import LocalCluster

__all__ = ["SCHEMES", "run_demo"]

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
    first = min(job.history[0].test_loss for job in runs.values())
    best = min(job.history[-1].test_loss for job in runs.values())
    target = best + 0.05 * (first - best)
    rows = [{
        "scheme": scheme,
        "s_per_iteration": job.elapsed_s / max(job.iteration, 1),
        "time_to_target_s": _time_to(list(job.history), target),
        "final_test_loss": job.history[-1].test_loss,
        "test_accuracy": job.history[-1].test_accuracy,
    } for scheme, job in runs.items()]
    to_target = f"s to test loss {target:.4f}"
    header = f"{'scheme':18} {'s/iteration':>12} {to_target:>22} {'test loss':>10} {'test acc':>9}"
    lines = [header] + [
        f"{r['scheme']:18} {r['s_per_iteration']:12.3f} {r['time_to_target_s']:22.2f} {r['final_test_loss']:10.5f} "
        f"{r['test_accuracy']:9.4f}" for r in rows]
    print("\n".join(lines))
    (out / "demo.txt").write_text("\n".join(lines) + "\n")
    (out / "demo.json").write_text(json.dumps(rows, indent=2))
    _plot(runs, out / "demo.png", workers)
    print(f"saved {out / 'demo.png'}")
    return 0


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
