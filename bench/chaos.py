"""A fault campaign: jobs of every kind on a cluster behind shaped links while a seeded schedule
breaks it, each job's outcome held against what its code promises.

    python -m bench.chaos               # 24 jobs, about 150 faults (about 5 minutes on 2 cores)
    python -m bench.chaos --quick       # 10 jobs, about 50 faults, about 2 minutes (make test-links)

A cluster of ``N`` workers, each process in a network namespace of its own behind a ``tc tbf``
link (workers' ``WORKER_LINK``, the master's ``MASTER_LINK``). Jobs run one after another, drawn
from ``KINDS``: gradient jobs (streamed and whole replies; cyclic, FRC, Ye & Abbe, uncoded), a
coded matrix-vector job (power iteration) and a CodeNet job. While each runs, a schedule drawn
from the seed acts on its workers, each fault lasting ``FAULT_S`` seconds:

- ``kill``: SIGKILL, the worker started again when the fault ends; one kill in ``FOR_GOOD`` stays
  dead until the job is over (a crash that no restart repairs);
- ``stop``: SIGSTOP, then SIGCONT (a frozen process: its connections stay open, nothing moves);
- ``slow``: its link 16 times slower (``tc qdisc change``), then back;
- ``cut``: its link down at the bridge (a pulled cable: no reset reaches anyone), then up;
- ``wrong``: the worker corrupts every message it sends from an iteration on (the job's
  ``faults.soft_errors``, as a faulty machine would); only in jobs whose code can check;
- ``master``: SIGKILL of the master, started again on its state directory.

The promise checked, per job: a job whose faults its code tolerates (``tolerates``: at no time
more than s of its workers out, killed, stopped, cut off or sending wrong messages; slow links and
a restarting master put none out) SUCCEEDS with the result of a healthy run of the uncoded job
(relative difference at most ``EXACT``); every other ends FAILED with a reason, or SUCCEEDS with
that exact result where its workers came back in time; no job is still running at its deadline
(hung). Time lost: seconds against the same job on the healthy cluster, run first. After the
campaign: no namespace, process or /dev/shm entry is left. Writes bench/results/chaos.{md,csv}.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import yaml

from bench.common import markdown_table
from bench.skeleton import Bench
from coded.client.reports import Job, JobState
from coded.cluster.local import ClusterLinks, LocalCluster
from coded.links.netns import format_rate, parse_rate

N = 6
WORKER_LINK, MASTER_LINK, SLOWER = "200mbit", "1gbit", 16
FAULT_S = (1.0, 4.0)        # a fault lasts this long (uniform)
FOR_GOOD = 8                # one kill in this many leaves its worker dead until the job ends
FAULTS_PER_JOB = (5, 12)     # drawn uniformly, end excluded
EXACT = 1e-8                # exact codes: relative difference to the uncoded result
RECOVERY_S = 3.0            # a worker is out this long after its fault ends (started, registered, assigned)
PAUSED_S = 20.0             # the jobs' timeouts.paused_s: how long a job beyond its code waits
JOBS = 24                   # 3 of each kind, about 12 s each: the campaign fits bench.run's budget
FINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
KILL, STOP, SLOW, CUT, WRONG, MASTER = "kill", "stop", "slow", "cut", "wrong", "master"
FAULT_KINDS = (KILL, STOP, SLOW, CUT, WRONG, MASTER)
COLUMNS = ["job", "kind", "faults", "tolerated", "state", "expected", "as_promised", "difference", "seconds",
           "healthy_seconds", "lost_s", "reason"]


@dataclass(frozen=True)
class Kind:
    """A job of the campaign: its spec, how many of its workers it can lose for good, whether its
    code checks what workers send, and the kind whose healthy run is its exact result."""

    name: str
    spec: dict[str, Any]
    tolerates: int
    checks: bool
    reference: str
    quarantines: bool = True  # a worker found wrong leaves the job (CodeNet corrects it and keeps it)
    faults: tuple[str, ...] = FAULT_KINDS  # what the campaign does to it

    @property
    def workers(self) -> int:
        return 5 if self.spec["kind"] == "codenet" else int(self.spec["workers"])


def _gradient(code: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": "gradient_coding", "workers": N, "code": code, "model": {"type": "logistic", "l2": 1e-4},
            "data": {"type": "amazon_like", "rows": 3000, "seed": 2},
            "optimizer": {"type": "nesterov", "lr": 1.0, "momentum": 0.9}, "iterations": 30, "eval_every": 0,
            "checkpoint_every": 3, "seed": 1, "timeouts": {"paused_s": PAUSED_S}, **extra}


def _matvec(scheme: str, m: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "matvec", "workers": N, "code": {"scheme": scheme, "m": m},
            "inputs": {"generate": {"a": [1200, 1200], "symmetric": True, "seed": 4}}, "driver": {"rounds": 300},
            "seed": 1, "timeouts": {"paused_s": PAUSED_S}, **extra}


CODENET = {"kind": "codenet", "strategy": "codenet", "code": {"m": 1, "n": 1, "t": 1},
           "model": {"type": "mlp", "hidden": [32]}, "data": {"type": "digits"},
           "optimizer": {"type": "sgd", "lr": 0.05, "batch": 16}, "iterations": 60, "checkpoint_every": 10,
           "eval_every": 0, "seed": 1, "timeouts": {"paused_s": PAUSED_S}}

KINDS = [
    Kind("uncoded", _gradient({"scheme": "uncoded"}), 0, False, "uncoded"),
    Kind("cyclic streamed", _gradient({"scheme": "cyclic", "stragglers": 2}, stream={}, verify="strict"), 2, True,
         "uncoded"),
    Kind("cyclic whole", _gradient({"scheme": "cyclic", "stragglers": 2}, stream="off"), 2, True, "uncoded"),
    Kind("frc streamed", _gradient({"scheme": "frc", "stragglers": 1}, stream={}, verify="strict"), 1, True,
         "uncoded"),
    Kind("ye_abbe", _gradient({"scheme": "ye_abbe", "stragglers": 1, "m": 2}), 1, True, "uncoded"),
    Kind("matvec uncoded", _matvec("uncoded", N, verify="off"), 0, False, "matvec uncoded"),
    Kind("matvec polynomial", _matvec("polynomial", 2, verify={"errors": 1}), 2, True, "matvec uncoded"),
    # a CodeNet peer killed is an erasure paid with a 5 s grace at every step it misses, and a worker
    # started again does not rejoin its job (docs/codenet.md): a kill would leave the job crawling
    Kind("codenet", CODENET, 0, True, "codenet", quarantines=False, faults=(STOP, SLOW, CUT, WRONG, MASTER)),
]


@dataclass
class Fault:
    """One fault of a job's schedule: ``at`` seconds after submission, for ``lasting`` seconds
    (``for_good``: until the job ends), on the job's worker at ``position`` (none for the master)."""

    kind: str
    at: float
    lasting: float
    position: int = -1
    for_good: bool = False

    def label(self) -> str:
        target = "master" if self.kind == MASTER else f"w{self.position}"
        span = "for good" if self.for_good else f"{self.lasting:.1f}s"
        return f"{self.kind} {target} @{self.at:.1f}s {span}" if self.kind != WRONG else f"wrong {target}"


def schedule(rng: random.Random, kind: Kind, window: float, within: bool) -> list[Fault]:
    """The faults of one job: at most one at a time on each worker; ``wrong`` only where the code
    checks (an unchecked code uses a wrong message, as its docs say) and on one worker at most.
    ``within``: only faults that keep the job within its code's tolerance (``impaired_at_once``)."""
    faults: list[Fault] = []
    busy: dict[int, float] = {}  # position -> when its fault ends
    for _ in range(rng.randrange(*FAULTS_PER_JOB)):
        choices = [k for k in kind.faults if (k != WRONG or (kind.checks and not any(f.kind == WRONG for f in faults)))
                   and (k != MASTER or not any(f.kind == MASTER for f in faults))]
        what = rng.choice(choices)
        at, lasting = rng.uniform(0.3, window), rng.uniform(*FAULT_S)
        if what == MASTER:
            faults.append(Fault(MASTER, at, 0.0))
            continue
        free = [p for p in range(kind.workers) if busy.get(p, -1.0) < at]
        if not free:
            continue
        position = rng.choice(free)
        for_good = what == KILL and rng.randrange(FOR_GOOD) == 0
        fault = Fault(what, 0.0 if what == WRONG else at, lasting, position, for_good)
        if within and impaired_at_once(kind, [*faults, fault]) > kind.tolerates:
            fault = Fault(SLOW, at, lasting, position)  # a slow link instead: no worker out
        busy[position] = math.inf if fault.for_good or fault.kind == WRONG else at + lasting
        faults.append(fault)
    return sorted(faults, key=lambda f: f.at)


def impaired_at_once(kind: Kind, faults: Sequence[Fault]) -> int:
    """The most workers of a job out at one time: killed (until started again), stopped or cut
    off (and RECOVERY_S more, until the master has it back), or sending wrong messages where the
    code leaves them out (from the start: the code may quarantine them). Slow links and a
    restarting master put no worker out."""
    spans = [(f.at, math.inf if f.for_good or f.kind == WRONG else f.at + f.lasting + RECOVERY_S) for f in faults
             if f.kind in (KILL, STOP, CUT) or (f.kind == WRONG and kind.quarantines)]
    return max((sum(a <= t < b for a, b in spans) for t, _ in spans), default=0)


def with_faults(kind: Kind, faults: Sequence[Fault]) -> dict[str, Any]:
    """The job's spec with its ``wrong`` worker's corruption, from the third iteration on."""
    spec = dict(kind.spec)
    wrong = [f.position for f in faults if f.kind == WRONG]
    if wrong:
        model = "gaussian" if spec["kind"] == "codenet" else "element"
        spec["faults"] = {"soft_errors": {"probability": 0.05 if spec["kind"] == "codenet" else 1.0, "model": model,
                                          "scale": 100.0, "workers": wrong, "start": 2}}
    return spec


class Breaker:
    """Applies a job's faults to the cluster on a thread of its own, and undoes every one of them
    (``restore``) before the next job.

    One thread for the whole campaign: a process started by a thread gets its parent-death signal
    when that thread ends (``PR_SET_PDEATHSIG`` follows the thread, not the process), so workers
    and masters started again here must not outlive their thread.
    """

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.launched: list[int] = [p.pid for p in local.workers.values()] + [local.master.pid]  # type: ignore[union-attr]
        self._lock = threading.Lock()
        self._schedules: queue.Queue[list[tuple[float, Callable[[], None], Fault | None]]] = queue.Queue()
        self.applied: list[Fault] = []  # the faults of the current job applied so far (before it ended)
        self._idle = threading.Event()
        self._idle.set()
        self._cancel = threading.Event()
        self.errors: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def start(self, faults: Sequence[Fault], workers: Sequence[str]) -> None:
        indices = [int(name.rsplit("-", 1)[1]) for name in workers]
        events: list[tuple[float, Callable[[], None], Fault | None]] = []
        self.applied = [fault for fault in faults if fault.kind == WRONG]  # in the job's spec
        for fault in faults:
            if fault.kind == WRONG:
                continue
            if fault.kind == MASTER:
                events.append((fault.at, self._restart_master, fault))
                continue
            index = indices[fault.position]
            begin, end = self._actions(fault.kind, index)
            events.append((fault.at, begin, fault))
            if not fault.for_good:
                events.append((fault.at + fault.lasting, end, None))
        events.sort(key=lambda e: e[0])
        self._cancel.clear()
        self._idle.clear()
        self._schedules.put(events)

    def _serve(self) -> None:
        while True:
            events = self._schedules.get()
            started = time.monotonic()
            for at, action, fault in events:
                if self._cancel.wait(max(0.0, started + at - time.monotonic())):
                    break
                try:
                    with self._lock:
                        action()
                except Exception as error:  # recorded: a fault that could not be applied fails the bench
                    self.errors.append(f"{action}: {error}")
                else:
                    if fault is not None:
                        self.applied.append(fault)
            self._idle.set()

    def _actions(self, kind: str, index: int) -> tuple[Callable[[], None], Callable[[], None]]:
        local, network, host = self.local, self.local.network, f"worker-{index}"
        assert network is not None
        if kind == KILL:
            return lambda: local.kill_worker(index), lambda: self._start_worker(index)
        if kind == STOP:
            return (lambda: local.workers[index].send_signal(signal.SIGSTOP),
                    lambda: local.workers[index].send_signal(signal.SIGCONT))
        if kind == SLOW:
            return (lambda: network.change(host, format_rate(parse_rate(WORKER_LINK) // SLOWER)),
                    lambda: network.change(host, WORKER_LINK))
        return lambda: network.cut(host), lambda: network.reconnect(host)

    def _start_worker(self, index: int) -> None:
        self.local.start_workers([index])
        self.launched.append(self.local.workers[index].pid)

    def _restart_master(self) -> None:
        self.local.kill_master()
        self.local.start_master()
        self.launched.append(self.local.master.pid)  # type: ignore[union-attr]

    def restore(self) -> None:
        """Stop the schedule and put the cluster back: every worker running, on its link (done on
        the breaker's thread, which every restarted process needs alive)."""
        self._cancel.set()
        self._idle.wait()
        self._cancel.clear()
        self._idle.clear()
        self._schedules.put([(0.0, self._restore, None)])
        self._idle.wait()
        self.local.wait_for_workers(self.local.count)

    def _restore(self) -> None:
        network = self.local.network
        assert network is not None
        if self.local.master is None or self.local.master.poll() is not None:
            self.local.start_master()
            self.launched.append(self.local.master.pid)  # type: ignore[union-attr]
        for index in range(self.local.count):
            network.reconnect(f"worker-{index}")
            network.change(f"worker-{index}", WORKER_LINK)
            process = self.local.workers.get(index)
            if process is None or process.poll() is not None:
                self.local.workers.pop(index, None)
                self._start_worker(index)
            else:
                process.send_signal(signal.SIGCONT)


def difference(result: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    """Largest difference relative to the reference's largest entry (a power iteration's vector
    up to one sign for the whole vector)."""
    if sorted(result) != sorted(reference) or any(result[k].shape != reference[k].shape for k in reference):
        return float("inf")
    got = {k: -v if k == "vector" and float(np.vdot(v, reference[k])) < 0 else v for k, v in result.items()}
    a, b = (np.concatenate([arrays[k].ravel() for k in sorted(arrays)]) for arrays in (got, reference))
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


class Campaign:
    """Runs jobs on ``local``, each with its faults, and records what happened."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.breaker = Breaker(local)
        self.healthy: dict[str, tuple[float, dict[str, np.ndarray]]] = {}

    def _poll(self, job_id: str) -> Job | None:
        """The job as the master reports it; None while the master cannot answer (restarting)."""
        try:
            with self.local.client(timeout=5.0) as client:
                return client.get(job_id)
        except Exception:
            return None

    def _submit(self, spec: dict[str, Any]) -> str:
        deadline = time.monotonic() + 60
        while True:
            try:
                with self.local.client(timeout=30.0) as client:
                    return client.submit(yaml.safe_dump(spec)).id
            except grpc.RpcError as error:  # only a master that is restarting is waited for
                if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _result(self, job_id: str) -> dict[str, np.ndarray]:
        with self.local.client(timeout=60.0) as client:
            return client.result(job_id)

    def _wait(self, job_id: str, deadline: float) -> Job | None:
        """The job once it ended, or None if it was still running at ``deadline`` (monotonic)."""
        job = None
        while time.monotonic() < deadline:
            job = self._poll(job_id) or job
            if job is not None and job.state in FINAL:
                return job
            time.sleep(0.2)
        return None

    def run_healthy(self, kind: Kind) -> float:
        """The kind's job on the healthy cluster: its seconds, and its result kept as the exact one."""
        started = time.monotonic()
        job = self._wait(self._submit(kind.spec), time.monotonic() + 600)
        if job is None or job.state != JobState.SUCCEEDED:
            raise RuntimeError(f"healthy {kind.name} job did not succeed: {job}")
        seconds = time.monotonic() - started
        self.healthy[kind.name] = (seconds, self._result(job.id))
        return seconds

    def run(self, index: int, kind: Kind, faults: list[Fault]) -> dict[str, Any]:
        healthy_s = self.healthy[kind.name][0]
        masters = sum(f.kind == MASTER for f in faults)
        deadline_s = (3 * healthy_s + sum(f.lasting for f in faults) + PAUSED_S * (1 + masters) + 30 * masters + 30)
        started = time.monotonic()
        job_id = self._submit(with_faults(kind, faults))
        job = None
        while job is None and time.monotonic() - started < 60:  # its workers, for the schedule
            job = self._poll(job_id)
            job = job if job is not None and job.workers else None
            time.sleep(0.05)
        assert job is not None, f"job {job_id} got no workers within 60 s"
        self.breaker.start(faults, job.workers)
        final = self._wait(job_id, started + deadline_s)
        seconds = time.monotonic() - started
        self.breaker.restore()
        # what the job met: the faults applied before it ended (a schedule outlasting a short job
        # is cut off by the restore)
        applied = sorted(self.breaker.applied, key=lambda f: f.at)
        tolerated = impaired_at_once(kind, applied) <= kind.tolerates
        for_good = any(f.for_good for f in applied)
        if final is None:
            with self.local.client(timeout=30.0) as client:
                client.cancel(job_id)
        state = "HUNG" if final is None else final.state.name
        diff = (difference(self._result(job_id), self.healthy[kind.reference][1])
                if final is not None and final.state == JobState.SUCCEEDED else float("nan"))
        # beyond the code: FAILED with its reason; or, where every worker came back in time (or a
        # worker killed for good was not needed any more), SUCCEEDED with the exact result
        expected = "SUCCEEDED" if tolerated else "FAILED" if for_good else "FAILED or SUCCEEDED"
        exact = diff <= EXACT
        failed_with_reason = state == "FAILED" and final is not None and bool(final.reason)
        as_promised = (state == "SUCCEEDED" and exact) or (not tolerated and failed_with_reason)
        return {"job": index, "kind": kind.name, "faults": "; ".join(f.label() for f in applied),
                "count": len(applied), "scheduled": len(faults), "tolerated": tolerated, "state": state,
                "expected": expected,
                "as_promised": as_promised, "difference": diff, "seconds": seconds, "healthy_seconds": healthy_s,
                "lost_s": seconds - healthy_s, "reason": "" if final is None else final.reason[:160]}


def leftovers(local: LocalCluster, launched: Sequence[int], shm_before: set[str]) -> list[str]:
    """What the campaign left after the cluster stopped: namespaces, processes, /dev/shm entries."""
    network = local.network
    found = [] if network is None else network.leftovers()
    found += [f"process {pid}" for pid in launched if Path(f"/proc/{pid}").exists()
              and "zombie" not in Path(f"/proc/{pid}/status").read_text(errors="replace").lower()]
    found += [f"/dev/shm/{name}" for name in sorted(set(os.listdir("/dev/shm")) - shm_before)]
    return found


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kind: jobs, faults, how they ended, and the time lost."""
    out = []
    for name in [k.name for k in KINDS]:
        mine = [r for r in rows if r["kind"] == name]
        if not mine:
            continue
        lost = [r["lost_s"] for r in mine if r["state"] == "SUCCEEDED"]
        out.append({"kind": name, "jobs": len(mine), "faults": sum(r["count"] for r in mine),
                    "tolerated": sum(r["tolerated"] for r in mine),
                    "succeeded_exact": sum(r["state"] == "SUCCEEDED" and r["difference"] <= EXACT for r in mine),
                    "failed": sum(r["state"] == "FAILED" for r in mine),
                    "hung": sum(r["state"] == "HUNG" for r in mine),
                    "not_as_promised": sum(not r["as_promised"] for r in mine),
                    "max_difference": max((r["difference"] for r in mine if r["state"] == "SUCCEEDED"), default=0.0),
                    "lost_s_median": statistics.median(lost) if lost else float("nan"),
                    "lost_s_max": max(lost, default=float("nan"))})
    return out


def _terminated(signum: int, frame: object) -> None:
    """The first SIGTERM ends the campaign; later ones (``timeout`` passes its own on) are ignored
    while the cluster is being removed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(128 + signum)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=None, help=f"jobs in the campaign (default {JOBS}; --quick 10)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the cluster's state and logs in DIR (default: a temporary directory, removed)")


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv, arguments=arguments)
    args = bench.args
    jobs = args.jobs or (10 if args.quick else JOBS)
    rng = random.Random(args.seed)
    bench.open(f"bench/chaos.py: {jobs} jobs, seed {args.seed}, n = {N} workers behind {WORKER_LINK} links (the "
               f"master's {MASTER_LINK}; tc tbf, network namespaces); faults lasting {FAULT_S[0]:g}-{FAULT_S[1]:g} s, "
               f"{FAULTS_PER_JOB[0]}-{FAULTS_PER_JOB[1] - 1} per job; slow links {SLOWER}x slower; "
               f"timeouts.paused_s {PAUSED_S:g}")
    shm_before = set(os.listdir("/dev/shm"))
    # a SIGTERM ends the campaign as an exception would: the cluster and its namespaces are removed
    signal.signal(signal.SIGTERM, _terminated)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="coded-chaos-") as temporary:
        state = args.keep or Path(temporary)
        local = LocalCluster(N, state, startup_timeout=120,
                             links=ClusterLinks(WORKER_LINK, master=MASTER_LINK))
        with local:
            campaign = Campaign(local)
            for kind in KINDS:
                print(f"healthy {kind.name}: {campaign.run_healthy(kind):.1f} s", flush=True)
            # every kind in turn, in an order drawn from the seed: each gets its share of faults
            order = [KINDS[i % len(KINDS)] for i in range(jobs)]
            rng.shuffle(order)
            for index, kind in enumerate(order):
                # half the jobs within their code's tolerance, half drawn freely (mostly beyond it)
                faults = schedule(rng, kind, max(2.0, campaign.healthy[kind.name][0]), within=rng.random() < 0.5)
                row = campaign.run(index, kind, faults)
                rows.append(row)
                print(f"{index:4d} {kind.name:18s} {row['state']:9s} {'ok ' if row['as_promised'] else 'NOT'} "
                      f"diff {row['difference']:.1e} {row['seconds']:6.1f}s | {row['faults']}"
                      + (f" | {row['reason']}" if row["state"] != "SUCCEEDED" else ""), flush=True)
            launched = campaign.breaker.launched
            errors = campaign.breaker.errors
        left = leftovers(local, launched, shm_before)
    bench.finish()
    verdict, failed = verdicts(rows, left, errors)
    table = summarise(rows)
    print(markdown_table(table, list(table[0]), digits=3), verdict, sep="\n", flush=True)
    bench.csv("chaos.csv", rows, [*COLUMNS[:3], "count", "scheduled", *COLUMNS[3:]])
    broken = [r for r in rows if not r["as_promised"]]
    bench.page("chaos.md", "A fault campaign: slow, cut and dead links and workers, wrong results, a killed master",
               bench.header(), [
                   f"## Verdict\n\n{verdict}",
                   "## Per job kind\n\ntolerated: jobs whose faults stay within what the code promises (at no "
                   "time more than s workers out: killed, stopped, cut off or wrong); succeeded_exact: SUCCEEDED "
                   f"with the healthy uncoded run's result within {EXACT:g} relative; lost_s: seconds against the "
                   "job on the healthy cluster (median, max over the jobs that succeeded).\n\n"
                   + markdown_table(table, list(table[0]), digits=3),
                   "## Why the jobs that failed failed\n\n"
                   + (markdown_table(failed, ["reason", "jobs"]) if failed else "none failed"),
                   "## Jobs not as promised\n\n" + (markdown_table(broken, COLUMNS, digits=3) if broken else "none"),
                   "Every job, its faults and outcome: chaos.csv."])
    return 0 if not (broken or left or errors) else 1


def verdicts(rows: Sequence[dict[str, Any]], left: Sequence[str], errors: Sequence[str]
             ) -> tuple[str, list[dict[str, Any]]]:
    """The campaign's verdict in a paragraph, and the failed jobs' reasons (iterations and
    workers' names taken out, so that alike reasons count together) with their counts."""
    faults = Counter(part.split(" ", 1)[0] for row in rows for part in row["faults"].split("; ") if part)
    within = [r for r in rows if r["tolerated"]]
    beyond = [r for r in rows if not r["tolerated"]]
    def exact(group: Sequence[dict[str, Any]]) -> int:
        return sum(r["state"] == "SUCCEEDED" and r["as_promised"] for r in group)

    counts = ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))
    verdict = (
        f"{len(rows)} jobs, {sum(faults.values())} faults ({counts}). Within their code's tolerance: {len(within)} "
        f"jobs, {exact(within)} SUCCEEDED with the exact result. Beyond it: {len(beyond)} jobs, {exact(beyond)} "
        f"SUCCEEDED exact (their workers came back in time), {sum(r['state'] == 'FAILED' for r in beyond)} FAILED "
        f"with a reason. Not as promised: {sum(not r['as_promised'] for r in rows)}; hung: "
        f"{sum(r['state'] == 'HUNG' for r in rows)}. Left behind: {', '.join(left) or 'nothing'}. Faults that could "
        f"not be applied: {'; '.join(errors) or 'none'}.")
    reasons = Counter(re.sub(r"worker-\d+", "worker-N", re.sub(r"\d+(\.\d+)?", "#", r["reason"]))
                      for r in rows if r["state"] == "FAILED")
    return verdict, [{"reason": reason, "jobs": count} for reason, count in reasons.most_common()]


if __name__ == "__main__":
    sys.exit(main())
