"""Our cluster against PyTorch DDP, side by side in one run, under the same stragglers (issue 25).

    python -m bench.ddp                 # 2 repeats, LeNet on digits, five straggler scenarios, the checks
    python -m bench.ddp --mnist1d       # and an MLP on MNIST-1D too, with its capacity table (twice as long)
    python -m bench.ddp --part checks   # only the cost of catching a wrong gradient (no faults)
    python -m bench.ddp --quick         # the smoke test: digits, n = 4, two workers late, a few steps

Needs the torch extra (``make install-torch``).

The same job three ways, n = 6 on this machine:

* **DDP**: ``torch.distributed.run --standalone`` (torchrun) starts n ranks of bench/ddp_rank.py:
  ``DistributedDataParallel`` on gloo, float32, ``torch.optim.Adam``. Rank r trains on the
  cluster's partition r with the cluster's mini-batches and initial parameters.
* **ours, uncoded**: ``code: {scheme: uncoded}`` on a local cluster of n workers.
* **ours, coded**: ``code: {scheme: cyclic, stragglers: 2}``, everything else as the README writes
  a job (streamed replies and the sampled check by default).

Stragglers are drawn by one function (``coded.jobs.faults.faults_of``), so each scenario delays
and slows the same (iteration, worker) by the same amount in both systems, inside the training
step. Scenarios: none; worker 0 2.4x slow every step (``slowdown: fixed``); workers 0 and 1 one
second late every step (``stragglers: fixed``; fewer steps, the workload's ``late_iterations``, for
every system: an uncoded step takes a second); the two ByteDance slowdown traces of bench/traces/.

Workloads: LeNet on scikit-learn's digits (8x8 images, 1437 training samples) and, with
``--mnist1d``, an MLP on MNIST-1D (PyPI ``mnist1d``'s procedural generator, ``make_dataset`` with
its default arguments: 4000 training and 1000 test signals of length 40; its downloader is never
called). Digits reaches ~95% with almost any model; on MNIST-1D capacity shows (the "capacity"
table: a plain PyTorch loop of two MLP widths on the same data). One workload by default: each
torchrun start costs ~15 s on 2 cores, and digits alone is what fits make bench's time.

Per run: seconds per step (start of step 0 to the end of the last, evaluations included: the same
``eval_every`` in both), seconds to the workload's target test accuracy, the final accuracy, and,
for ours uncoded against DDP without faults, how far apart their final parameters are relative to
how far training moved them (float32 all-reduced means against float64 decoded sums).
``vs_ddp`` is a run's seconds per step over DDP's in the same repeat and scenario; ``vs_healthy``
over ours uncoded in the first scenario (nobody straggling, but in --quick), in the same repeat.

The cost of catching a wrong gradient (the first scenario: none; --quick: its one scenario), the
same base job in every row, each system against itself unchecked (``run_ratio``: seconds per step
over the same system's without a check; ``check_ms_per_step``: the difference):

* **DDP, replay every step** (``--replay-check``: the step's forward and backward run twice, the
  averaged gradients compared, as torchtitan's deterministic replay does) against DDP unchecked.
  It catches a wrong gradient that does not repeat when the step runs again (a transient fault),
  not one that repeats (a bad input, a broken kernel, a deterministic bug), and not which rank.
* **ours, cyclic s=2, ``verify: strict``**, the like-for-like level: every gradient piece is
  confirmed by a second copy from another worker before it is used, so a wrong piece is caught
  also when it repeats (two different workers compute it), and the worker is named.
* **ours, cyclic s=2, ``sampled``** (the default with streamed replies): each piece confirmed with
  probability p (``GradientVerifySpec().sample``); a worker that keeps sending wrong pieces is
  located after (1 - p)/p of them on average (``coded.codes.sampled.wrong_used_before_located``).
* **ours, cyclic s=2, ``verify: off``**: the baseline ours' ratios divide by.

``catches`` says what each check catches: stated (docs/jobs.md, "Checking replies"), not measured.
``vs_ddp_replay`` is an ours row's ``run_ratio`` over DDP replay's in the same repeat: below 1, our
check costs less of our step than the replay costs of DDP's.

``--part checks`` runs only that comparison (the first scenario, no other runs). Writes, in
``bench/results/`` (``--out``): ``ddp_check.csv`` and ``ddp_check.md`` (always); with ``--part all``
(the default) also ``ddp.csv``, ``ddp_capacity.csv``, ``ddp.md`` (the check table included) and
``ddp_<workload>.png`` (test accuracy against seconds: each scenario's median repeat, by DDP's
seconds per step, so that all three curves train on the same seed). Every CSV row carries the
load guard's verdict.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.common import markdown_table, plot_panels, relative_to, summarise_repeats
from bench.skeleton import Bench
from coded.client import CodedClient
from coded.client.reports import JobState
from coded.cluster.local import BLAS_SINGLE_THREAD, LocalCluster
from coded.codes.sampled import wrong_used_before_located
from coded.jobs.spec.gradient import GradientVerifySpec

N = 6
QUICK_N = 4  # the smoke test: fewer processes to start (cyclic s=2 with its check needs 4)
TRACES = Path(__file__).resolve().parent / "traces"
SCENARIOS: dict[str, dict[str, Any]] = {
    "none": {},
    "worker 0 2.4x slow": {"slowdown": {"model": "fixed", "workers": [0], "factor": 2.4}},
    "workers 0, 1 1 s late": {"stragglers": {"model": "fixed", "workers": [0, 1], "delay": 1.0}},
    "trace bytedance-AR": {"slowdown": {"model": "trace", "path": "bytedance-AR.csv"}},
    "trace bytedance-ST": {"slowdown": {"model": "trace", "path": "bytedance-ST.csv"}},
}
#: the smoke test's one scenario (each torchrun start costs ~15 s on 2 cores: torch imported n + 1 times)
QUICK_SCENARIOS = {"workers 0, 1 late": {"stragglers": {"model": "fixed", "workers": [0, 1], "delay": 0.05}}}
CODED = {"scheme": "cyclic", "stragglers": 2}
#: a replayed step whose gradient differs by more (relative to its largest entry) is caught: above
#: float32 rounding of a sum in another order (DDP rebuilds its buckets after step 0; ~1e-7 seen)
REPLAY_TOLERANCE = 1e-5
#: torchrun starts per DDP run before the run counts as failed (see run_ddp)
DDP_ATTEMPTS = 3
COLUMNS = ["workload", "scenario", "system", "steps", "repeats", "s_per_step", "s_per_step_low", "s_per_step_high",
           "vs_ddp", "vs_ddp_low", "vs_ddp_high", "vs_healthy", "vs_healthy_low", "vs_healthy_high",
           "s_to_target", "s_to_target_low", "s_to_target_high",
           "reached", "final_accuracy", "params_apart", "load"]
CHECK_COLUMNS = ["workload", "system", "check", "catches", "steps", "repeats", "s_per_step", "s_per_step_low",
                 "s_per_step_high", "check_ms_per_step", "run_ratio", "run_ratio_low", "run_ratio_high",
                 "vs_ddp_replay", "vs_ddp_replay_low", "vs_ddp_replay_high", "replays_caught", "replay_diff_max",
                 "load"]
REPLAY, STRICT, SAMPLED = "replay every step", "strict", "sampled (the default)"
DDP_OFF, OURS_OFF = "none (the baseline)", "off (the baseline)"


def catches() -> dict[str, str]:
    """What each check of the comparison catches, by its ``check``: stated, not measured."""
    p = GradientVerifySpec().sample
    return {REPLAY: "a wrong gradient that does not repeat when the step runs again (a transient fault), "
                    "not one that repeats; not which rank",
            DDP_OFF: "nothing: the baseline DDP's ratio divides by",
            STRICT: "every wrong gradient piece, also one that repeats (two different workers compute it); "
                    "names the worker",
            SAMPLED: f"each wrong piece with probability {p:g}; a worker that keeps sending wrong pieces is located "
                     f"after (1-p)/p = {wrong_used_before_located(p):.3g} of them on average; names the worker",
            OURS_OFF: "nothing: the baseline ours' ratios divide by"}


@dataclass(frozen=True)
class Workload:
    """A training job of the comparison (everything but its code and faults)."""

    name: str
    model: dict[str, Any]
    data: dict[str, Any]
    lr: float
    iterations: int
    eval_every: int
    target: float
    late_iterations: int
    workers: int = N
    files: dict[str, Path] = field(default_factory=dict)

    def spec(self, code: dict[str, Any], faults: dict[str, Any], iterations: int, seed: int) -> dict[str, Any]:
        return {"kind": "gradient_coding", "workers": self.workers, "code": code, "model": self.model,
                "data": self.data, "optimizer": {"type": "adam", "lr": self.lr, "batch": 32}, "iterations": iterations,
                "eval_every": self.eval_every, "checkpoint_every": 100_000, "seed": seed,
                **({"faults": faults} if faults else {})}


def mnist1d_file(folder: Path) -> Path:
    """MNIST-1D from its generator (default arguments, seed 42) as an ``npz`` data file."""
    from mnist1d.data import get_dataset_args, make_dataset

    data = make_dataset(get_dataset_args())
    path = folder / "mnist1d.npz"
    np.savez(path, x=data["x"], y=data["y"], x_test=data["x_test"], y_test=data["y_test"])
    return path


def workloads(folder: Path, quick: bool, mnist1d: bool = False) -> list[Workload]:
    """LeNet on digits; the MLP on MNIST-1D too where asked (never in the smoke test)."""
    digits = Workload("LeNet on digits", {"type": "torch", "name": "lenet"}, {"type": "digits"}, 0.01,
                      6 if quick else 60, 3 if quick else 5, 0.8, 6 if quick else 20, QUICK_N if quick else N)
    if quick or not mnist1d:
        return [digits]
    mnist1d = Workload("MLP on MNIST-1D", {"type": "torch", "name": "mlp", "args": {"hidden": [256, 256]}},
                       {"type": "npz", "path": "mnist1d.npz", "test_fraction": 0}, 0.005, 300, 25, 0.6, 15,
                       files={"mnist1d.npz": mnist1d_file(folder)})
    return [digits, mnist1d]


@dataclass
class Run:
    """One training run: seconds per step, the accuracy curve (seconds, accuracy), final parameters."""

    s_per_step: float
    curve: list[tuple[float, float]]
    params: dict[str, np.ndarray] = field(default_factory=dict)
    replay_diff: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_target(self, target: float) -> float:
        return next((t for t, accuracy in self.curve if accuracy >= target), float("inf"))


def files_of(workload: Workload, faults: dict[str, Any]) -> dict[str, Path]:
    """The files a job names, by the name it uses for them."""
    traces = {section["path"]: TRACES / section["path"] for section in faults.values() if "path" in section}
    return {**workload.files, **traces}


def run_ddp(spec: dict[str, Any], files: dict[str, Path], replay_check: bool = False) -> Run:
    """Train ``spec`` with DDP, n ranks started by torchrun."""
    with tempfile.TemporaryDirectory(prefix="coded-ddp-") as tmp:
        job, out = Path(tmp) / "job.yaml", Path(tmp) / "out.npz"
        job.write_text(yaml.safe_dump(spec))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(spec["workers"]), "-m", "bench.ddp_rank", str(job), str(out),
                   *(f"--file={name}={path}" for name, path in files.items()),
                   *(["--replay-check"] if replay_check else [])]
        # gloo on the loopback interface only; one BLAS/OpenMP thread per rank, as our workers
        env = {**os.environ, **BLAS_SINGLE_THREAD, "GLOO_SOCKET_IFNAME": "lo"}
        for attempt in range(1, DDP_ATTEMPTS + 1):
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800,
                                  cwd=Path(__file__).resolve().parents[1])
            if done.returncode == 0:
                break
            # a rank of torchrun sometimes aborts (SIGABRT) as gloo connects on a loaded machine, before
            # any step: a failed start measures nothing, so it is started again (and says so)
            print(f"DDP failed (exit {done.returncode}, attempt {attempt} of {DDP_ATTEMPTS}): "
                  + " | ".join(line.strip() for line in done.stderr.splitlines()
                               if "SIGABRT" in line or "what()" in line or "terminate" in line)[:500], flush=True)
        else:
            raise RuntimeError(f"DDP failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-3000:]}")
        with np.load(out) as record:
            ends, curve = record["ends"], record["curve"]
            params = {key.removeprefix("param:"): record[key] for key in record.files if key.startswith("param:")}
            return Run(float(ends[-1] / len(ends)), [(float(t), float(a)) for _, t, a in curve], params,
                       record["replay_diff"].copy())


def run_ours(client: CodedClient, spec: dict[str, Any], files: dict[str, Path]) -> Run:
    """Train ``spec`` on the cluster, uploading the files it names."""
    job = client.wait(client.submit(yaml.safe_dump(spec), {name: path.read_bytes() for name, path in files.items()}).id)
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"benchmark job failed: {job.reason}")
    history = job.history
    start = history[0].elapsed_s - history[0].duration_s
    curve = [(r.elapsed_s - start, r.test_accuracy) for r in history if not np.isnan(r.test_accuracy)]
    params = client.result(job.id)
    return Run((history[-1].elapsed_s - start) / len(history), curve, params)


def apart(ours: dict[str, np.ndarray], ddp: dict[str, np.ndarray], init: dict[str, np.ndarray]) -> float:
    """How far DDP's final parameters are from ours, relative to how far training moved ours."""
    if set(ours) != set(ddp) or set(ours) != set(init):
        raise RuntimeError(f"the two systems' parameters have different names: {sorted(ours)} and {sorted(ddp)}")

    def flat(named: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([named[name].ravel() for name in sorted(named)])

    return float(np.linalg.norm(flat(ddp) - flat(ours)) / np.linalg.norm(flat(ours) - flat(init)))


def initial_params(spec: dict[str, Any], files: dict[str, Path]) -> dict[str, np.ndarray]:
    """The job's initial parameters, as the master and bench/ddp_rank.py draw them."""
    from coded.jobs.build import check_fit, load_data
    from coded.jobs.spec import GradientJob, parse_job

    parsed = parse_job(yaml.safe_dump(spec))
    assert isinstance(parsed, GradientJob)
    dataset = load_data(parsed, files)
    model = check_fit(parsed, len(dataset.y_train), dataset.sample_shape, dataset.classes)
    return model.arrays(model.init_params(np.random.default_rng(parsed.seed)))


Rows = list[dict[str, Any]]


def check_rows(client: CodedClient, load: Workload, faults: dict[str, Any], seed: int,
               plain: Run | None = None, default: Run | None = None) -> Rows:
    """The cost of catching a wrong gradient in one workload and scenario: DDP with and without its
    replay check, ours coded at each checking level (``plain`` and ``default``: DDP's and ours
    coded's runs without a verify section, when the scenarios already measured them)."""
    iterations = load.late_iterations if "stragglers" in faults else load.iterations
    base, files = load.spec({"scheme": "uncoded"}, faults, iterations, seed), files_of(load, faults)
    coded = {**base, "code": CODED}
    plain = plain or run_ddp(base, files)
    replayed = run_ddp(base, files, replay_check=True)
    default = default or run_ours(client, coded, files)
    strict = run_ours(client, {**coded, "verify": "strict"}, files)
    unchecked = run_ours(client, {**coded, "verify": "off"}, files)
    stated = catches()
    rows: Rows = []
    for system, check, run, without in (("DDP", REPLAY, replayed, plain), ("DDP", DDP_OFF, plain, plain),
                                        ("ours, cyclic s=2", STRICT, strict, unchecked),
                                        ("ours, cyclic s=2", SAMPLED, default, unchecked),
                                        ("ours, cyclic s=2", OURS_OFF, unchecked, unchecked)):
        rows.append({"workload": load.name, "system": system, "check": check, "catches": stated[check],
                     "steps": iterations, "s_per_step": run.s_per_step,
                     "check_ms_per_step": 1e3 * (run.s_per_step - without.s_per_step),
                     "run_ratio": run.s_per_step / without.s_per_step,
                     **({"replays_caught": int(np.sum(run.replay_diff > REPLAY_TOLERANCE)),
                         "replay_diff_max": float(run.replay_diff.max())} if run.replay_diff.size else {})})
    replay_ratio = rows[0]["run_ratio"]
    for row in rows:
        if row["check"] in (STRICT, SAMPLED):  # like for like: strict; both against the same replay
            row["vs_ddp_replay"] = row["run_ratio"] / replay_ratio
    for row in rows:
        print(f"{load.name:16} {row['system']:17} {row['check']:22} {1e3 * row['s_per_step']:8.2f} ms/step, "
              f"check {row['check_ms_per_step']:7.2f} ms/step ({row['run_ratio']:5.2f}x unchecked)", flush=True)
    return rows


def repeat(client: CodedClient, loads: list[Workload], scenarios: dict[str, dict[str, Any]],
           seed: int, part: str = "all") -> tuple[Rows, Rows, dict[tuple[str, str, str], Run]]:
    """Every workload and scenario on DDP, then ours uncoded, then ours coded; then the checks, in
    the first scenario (none in the full run): what training that far moved the parameters, how
    far apart the two systems' ended, and the runs of each system with and without its check.
    ``part`` ``checks``: the checks only (in the first scenario)."""
    rows, checks, runs = [], [], {}
    first = next(iter(scenarios))
    for load in loads:
        if part == "checks":
            checks += check_rows(client, load, scenarios[first], seed)
            continue
        for scenario, faults in scenarios.items():
            iterations = load.late_iterations if "stragglers" in faults else load.iterations
            files = files_of(load, faults)
            base = load.spec({"scheme": "uncoded"}, faults, iterations, seed)
            measured = {"DDP": run_ddp(base, files), "ours, uncoded": run_ours(client, base, files),
                        "ours, cyclic s=2": run_ours(client, {**base, "code": CODED}, files)}
            ddp = measured["DDP"]
            for system, run in measured.items():
                runs[(load.name, scenario, system)] = run
                reached = run.to_target(load.target)
                row = {"workload": load.name, "scenario": scenario, "system": system, "steps": iterations,
                       "s_per_step": run.s_per_step, "vs_ddp": run.s_per_step / ddp.s_per_step,
                       "s_to_target": reached, "reached": bool(np.isfinite(reached)),
                       "final_accuracy": run.curve[-1][1]}
                if system == "ours, uncoded" and scenario == first:
                    row["params_apart"] = apart(run.params, ddp.params, initial_params(base, files))
                rows.append(row)
                print(f"{load.name:16} {scenario:22} {system:17} {1e3 * run.s_per_step:8.2f} ms/step "
                      f"({row['vs_ddp']:5.2f}x DDP), {reached:7.2f} s to {load.target:.0%}, "
                      f"final {row['final_accuracy']:.3f}", flush=True)
        checks += check_rows(client, load, scenarios[first], seed, runs[(load.name, first, "DDP")],
                             runs[(load.name, first, "ours, cyclic s=2")])
    if rows:
        relative_to(rows, "s_per_step", "vs_healthy", "workload",
                    lambda row: row["scenario"] == first and row["system"] == "ours, uncoded")
    return rows, checks, runs


def check_section(checks: Rows, scenario: str) -> list[str]:
    """The check comparison's heading, what it compares, the like-for-like ratio and its table."""
    like = "; ".join(f"{row['workload']}: {row['vs_ddp_replay']:.3g}x" for row in checks if row["check"] == STRICT)
    intro = (f"Scenario {scenario!r}, the same base job in every row. `run_ratio`: seconds per step over the same "
             "system's unchecked (DDP without the replay; ours `verify: off`); `check_ms_per_step`: the difference. "
             "DDP's replay of every step and our `verify: strict` are the like-for-like pair: every gradient "
             "confirmed before it is used; `sampled` (our default) confirms a share of the pieces. `catches` is "
             "stated (docs/jobs.md, \"Checking replies\"), not measured. `vs_ddp_replay`: an ours row's "
             "`run_ratio` over DDP replay's, in the same repeat (median of repeats). Like for like, ours strict "
             f"against DDP replay: {like}.")
    return [f"## The cost of catching a wrong gradient (scenario {scenario!r})", intro,
            markdown_table(checks, CHECK_COLUMNS, digits=3)]


def capacity() -> list[dict[str, Any]]:
    """A plain PyTorch loop (Adam 0.005, 192 samples per step) of MLPs of two widths on MNIST-1D:
    the test accuracy each reaches, the reason this workload is in the comparison."""
    import torch
    from mnist1d.data import get_dataset_args, make_dataset

    from coded.ml.pytorch import factory

    data = make_dataset(get_dataset_args())
    x, y = torch.tensor(data["x"], dtype=torch.float32), torch.tensor(data["y"])
    x_test, y_test = torch.tensor(data["x_test"], dtype=torch.float32), torch.tensor(data["y_test"])
    steps = 600
    rows = []
    for hidden in ([32], [256, 256]):
        torch.manual_seed(0)
        module = factory("mlp")((40,), 10, hidden=hidden)
        optimizer = torch.optim.Adam(module.parameters(), lr=0.005)
        rng = np.random.default_rng(0)
        for _ in range(steps):
            rows_ = torch.from_numpy(rng.choice(len(y), 6 * 32, replace=False))
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(module(x[rows_]), y[rows_]).backward()
            optimizer.step()
        with torch.no_grad():
            test = float((module(x_test).argmax(dim=1) == y_test).float().mean())
        rows.append({"model": f"mlp, hidden {hidden}", "parameters": sum(p.numel() for p in module.parameters()),
                     "steps": steps, "test_accuracy": test})
    return rows


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=["all", "checks"], default="all",
                        help="all: every scenario, the checks and the capacity table; checks: only the cost of "
                             "catching a wrong gradient, in the first scenario (writes ddp_check.csv and .md only)")
    parser.add_argument("--mnist1d", action="store_true",
                        help="an MLP on MNIST-1D as a second workload, and the capacity table that says why")


def main(argv: Sequence[str] | None = None) -> int:
    # 2 repeats (median and range of two): a repeat is ~4.5 minutes here, 6 torchrun starts of ~15 s among them
    bench = Bench(__doc__, argv, repeats=2, arguments=arguments)
    part, quick = bench.args.part, bench.quick
    scenarios = QUICK_SCENARIOS if quick else SCENARIOS
    first = next(iter(scenarios))
    if part == "checks":
        scenarios = {first: scenarios[first]}
    repeats = bench.repeats
    started = time.monotonic()
    workers = QUICK_N if quick else N
    with tempfile.TemporaryDirectory(prefix="coded-bench-") as tmp, \
            LocalCluster(workers, Path(tmp) / "state", startup_timeout=300) as local, local.client() as client:
        loads = workloads(Path(tmp), quick, bench.args.mnist1d)
        results = [repeat(client, loads, scenarios, 7 + r, part) for r in range(repeats)]
        sizes = capacity() if bench.args.mnist1d and not quick and part == "all" else []
    bench.finish()
    rows = summarise_repeats([rows for rows, _, _ in results], ["s_per_step", "vs_ddp", "vs_healthy", "s_to_target"])
    checks = summarise_repeats([checks for _, checks, _ in results], ["s_per_step", "run_ratio", "vs_ddp_replay"])
    for row in rows + checks:  # the load guard's verdict travels with every number
        row["load"] = bench.guard.verdict
    bench.csv("ddp_check.csv", checks, CHECK_COLUMNS)
    conditions = (f"n = {workers}: DDP's {workers} ranks (torchrun, gloo, float32) against our master and {workers} "
                  f"workers on the same machine; batch 32 per worker, Adam; {repeats} repeats, median (low-high)")
    steps = ", ".join(f"{row['steps']} steps of {row['workload']}" for row in checks if row["check"] == REPLAY)
    bench.page("ddp_check.md", "Catching a wrong gradient: DDP replay against our checking levels",
               bench.header(f"{conditions}; scenario {first!r}, {steps}; whole run {time.monotonic() - started:.0f} s"),
               check_section(checks, first))
    print(markdown_table(checks, CHECK_COLUMNS, digits=3))
    if part == "checks":
        print(bench.guard.line())
        return 0
    bench.csv("ddp.csv", rows, COLUMNS)
    if sizes:
        bench.csv("ddp_capacity.csv", sizes, ["model", "parameters", "steps", "test_accuracy"])
    for load in loads:  # each scenario's median repeat (by DDP's seconds per step): one seed for all systems
        panels: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for scenario in scenarios:
            by_ddp = sorted(range(len(results)), key=lambda r: results[r][2][(load.name, scenario, "DDP")].s_per_step)
            runs = results[by_ddp[len(results) // 2]][2]
            panels[scenario] = {system: runs[(load.name, scenario, system)].curve
                                for system in ("DDP", "ours, uncoded", "ours, cyclic s=2")}
        plot_panels(panels, bench.out / f"ddp_{load.name.split()[-1].lower()}.png", "seconds of training",
                    "test accuracy", f"{load.name}, n = {load.workers}, batch 32 per worker, Adam {load.lr}; 2 cores")
    header = bench.header(
        f"{conditions}; the late scenario runs "
        f"{', '.join(f'{load.late_iterations} steps of {load.name}' for load in loads)}; "
        f"whole run {time.monotonic() - started:.0f} s")
    sections = ["## Seconds per step and to the target accuracy", markdown_table(rows, COLUMNS, digits=3),
                *(f"![{load.name}](ddp_{load.name.split()[-1].lower()}.png)" for load in loads),
                *check_section(checks, first)]
    if sizes:
        sections += ["## Why MNIST-1D: capacity shows (a plain PyTorch loop, same data)",
                     markdown_table(sizes, ["model", "parameters", "steps", "test_accuracy"], digits=3)]
    bench.page("ddp.md", "Against PyTorch DDP, side by side", header, sections)
    print(markdown_table(rows, COLUMNS, digits=3))
    print(bench.guard.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
