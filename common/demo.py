"""``coded demo``: the same training, coded and not, under the same injected stragglers.

Starts a local cluster, runs logistic regression with ``uncoded``, ``ignore_stragglers`` and
``cyclic`` (s = 2) under identical seeded shifted-exponential delays, prints a comparison table,
saves a plot of loss against wall-clock time, and stops every process it started.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from coded.v1 import master_pb2
from common.client import state_name
from common.local import LocalCluster

__all__ = ["run_demo", "SCHEMES"]

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
eval_every: 10
faults:
  stragglers: {{model: shifted_exponential, shift: 0.01, mean: 0.1}}
seed: 7
"""


def _time_to(history: list, target: float) -> float:
    return next((r.elapsed_s for r in history if r.loss <= target), math.nan)


def run_demo(out: Path, workers: int = 8, iterations: int = 60) -> int:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, master_pb2.Job] = {}
    with tempfile.TemporaryDirectory(prefix="coded-demo-") as state:
        print(f"starting a master and {workers} workers on 127.0.0.1 ...", flush=True)
        with LocalCluster(workers, Path(state)) as cluster, cluster.client() as client:
            for scheme, stragglers in SCHEMES:
                spec = SPEC.format(scheme=scheme, stragglers=stragglers, workers=workers, iterations=iterations)
                job = client.submit(spec)
                print(f"  {scheme:18} job {job.id} ...", end="", flush=True)
                runs[scheme] = client.wait(job.id)
                print(f" {state_name(runs[scheme].state)} in {runs[scheme].elapsed_s:.1f} s", flush=True)
    failed = [s for s, job in runs.items() if job.state != master_pb2.SUCCEEDED]
    if failed:
        print(f"demo failed: {', '.join(failed)}: {runs[failed[0]].reason}")
        return 1
    first = min(job.history[0].loss for job in runs.values())
    best = min(job.loss for job in runs.values())
    target = best + 0.05 * (first - best)
    rows = []
    for scheme, job in runs.items():
        tested = [r for r in job.history if not math.isnan(r.test_accuracy)]
        rows.append({
            "scheme": scheme,
            "s_per_iteration": job.elapsed_s / max(job.iteration, 1),
            "time_to_target_s": _time_to(list(job.history), target),
            "final_loss": job.loss,
            "test_accuracy": tested[-1].test_accuracy if tested else math.nan,
        })
    header = f"{'scheme':18} {'s/iteration':>12} {'time to loss %.4f' % target:>22} {'final loss':>11} {'test acc':>9}"
    lines = [header] + [
        f"{r['scheme']:18} {r['s_per_iteration']:12.3f} {r['time_to_target_s']:22.2f} {r['final_loss']:11.5f} "
        f"{r['test_accuracy']:9.4f}" for r in rows]
    print("\n".join(lines))
    (out / "demo.txt").write_text("\n".join(lines) + "\n")
    (out / "demo.json").write_text(json.dumps(rows, indent=2))
    _plot(runs, out / "demo.png", workers)
    print(f"saved {out / 'demo.png'}")
    return 0


def _plot(runs: dict[str, master_pb2.Job], path: Path, workers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for scheme, job in runs.items():
        ax.plot([r.elapsed_s for r in job.history], [r.loss for r in job.history], label=scheme)
    ax.set_xlabel("wall-clock time (s)")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.set_title(f"{workers} workers, shifted-exponential stragglers (shift 0.01 s, mean 0.1 s), seed 7")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
