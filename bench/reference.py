"""Ours against the 2017 reference implementation itself, side by side in one run (issue 51).

    python -m bench.reference --reference DIR               # loopback, then shaped links
    python -m bench.reference --reference DIR --part loopback
    python -m bench.reference --reference DIR --quick        # a smoke run, not a measurement

The reference is Tandon et al.'s code, rashisht1/gradient_coding (MIT licence): DIR is a checkout
of it (``git clone https://github.com/rashisht1/gradient_coding``) or its git directory. It runs
as it is, its own ``main.py`` and ``src/arrange_real_data.py``, in a temporary copy with the
minimal port to today's Python, numpy, pandas and scikit-learn that PORT lists (each edit and
why); none of its code is in this repository. ``make bench-reference`` installs what it needs.

Workloads, as the papers ran them: logistic regression on dense data of 12000 x 100 (and, with
``--dense 12000x100 48000x500``, 48000 x 500) at n = 6 (our generated data, written into the
reference's text files), and the papers' sparse workload at n = 12: the Amazon Employee Access
shape (``amazon_like``, 32,769 rows, the Kaggle file's cardinalities) through the reference's own
preprocessing for it and through our categorical reader for us (the same columns). Schemes:
uncoded and cyclic s = 2. Ours twice: with the defaults, as a user writes the job (checked,
streamed or whole as the master chooses, test scores every 10 iterations, checkpoints), and with
``verify: off``.

Loopback: every process on this machine, the reference under Open MPI 5 (``mpiexec
--oversubscribe``, its defaults: shared memory between ranks), ours under ``coded local`` (its
defaults: shared memory between master and workers). Shaped links (needs root and iproute2):
every process in a network namespace of its own behind a ``tc tbf`` link, workers 100 Mbit/s and
the master 10 Gbit/s, healthy and with workers 0 and 1 behind links 16x slower; the reference
under MPICH over TCP (Open MPI 5.0.11's TCP transport did not run across namespaces on one
machine: with one launcher its peers publish no TCP address ("PML add procs failed"), with a
launcher per namespace MPI_Barrier hangs), one launcher proxy per namespace, ``MPIR_CVAR_NOLOCAL``
and ``UCX_TLS=tcp`` so that no two ranks share memory; ours under ``coded local --link``.

Every case runs the reference, then ours with defaults, then ours unchecked, REPEATS times; the
tables give each system's seconds per iteration (the median of its iterations after WARMUP:
the reference's own per-iteration clock, ours the job's records), its ratio to the reference's
within the repeat, the CPU seconds per round of all its processes together, and the floor: what
a round's bytes cost if each is copied once at this machine's copy rate (2 x n x 8 x l bytes).
Writes bench/results/reference.csv and .md.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.common import markdown_table, summarise_repeats
from bench.skeleton import Bench

__all__ = ["PORT", "Edit", "Reference", "main"]

WARMUP = 5
REPEATS = 2  # each repeat is ~4 minutes here (the slow links above all): make bench holds two
STRAGGLERS = 2
#: the links: Ye & Abbe's workers (t2.micro) and master (c3.8xlarge)
WORKER_LINK, MASTER_LINK, SLOW_FACTOR = "100mbit", "10gbit", 16
AMAZON_ROWS = 32769
#: (name, n, rows, features) of the dense workloads; rows are the training rows
DENSE = (("12000x100", 6, 12_000, 100), ("48000x500", 6, 48_000, 500))
AMAZON, AMAZON_N = "amazon", 12


@dataclass(frozen=True)
class Edit:
    """One edit of the port: in ``path``, ``old`` becomes ``new`` (``count`` times), because ``why``."""

    path: str
    old: str
    new: str
    why: str
    count: int = 1


#: the minimal port of the reference to today's Python 3, numpy, pandas and scikit-learn
PORT = (
    Edit("main.py", "num_itrs = 100 ", "num_itrs = int(__import__('os').environ.get('GC_ITERATIONS', '100')) ",
         "the iteration count from the environment (100 as written): uncoded behind a 16x slower link takes "
         "seconds per iteration"),
    Edit("src/coded.py", "rows_per_worker=n_samples/(n_procs-1)", "rows_per_worker=n_samples//(n_procs-1)",
         "Python 3's / makes a float, which numpy refuses as an array size (Python 2 divided ints to an int)"),
    Edit("src/util.py", '"%5.3f" %(m[i])', '"%.9f" %(m[i])',
         "each iteration's time saved to the nanosecond, not the millisecond: the benchmark reads them"),
    Edit("src/arrange_real_data.py", ".ix[", ".loc[", "pandas removed DataFrame.ix in 1.0"),
    Edit("src/arrange_real_data.py", "OneHotEncoder(sparse=True)", "OneHotEncoder(sparse_output=True)",
         "scikit-learn renamed the argument in 1.2 and removed the old name in 1.4", count=2),
)


def port(root: Path) -> None:
    """Apply PORT to a copy of the reference at ``root``.

    Raises
    ------
    ValueError
        When an edit does not find its text as often as it expects: another version of the
        reference, which the port was not written for.
    """
    for edit in PORT:
        path = root / edit.path
        text = path.read_text()
        found = text.count(edit.old)
        if found != edit.count:
            raise ValueError(f"the port expects {edit.old!r} {edit.count} time(s) in {edit.path}, found {found}: "
                             "not the reference this benchmark was written for (rashisht1/gradient_coding 1ba5035)")
        path.write_text(text.replace(edit.old, edit.new))


def copy_reference(source: Path, into: Path) -> str:
    """A copy of the reference's files at ``into`` from a checkout or a git directory; its commit."""
    def git(*args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, **kwargs)

    git_dir = source / ".git" if (source / ".git").exists() else source
    if not (git_dir / "HEAD").exists():
        raise SystemExit(f"{source} is no checkout of rashisht1/gradient_coding (no git directory): "
                         "git clone https://github.com/rashisht1/gradient_coding")
    commit = git("rev-parse", "HEAD", capture_output=True, text=True).stdout.strip()
    into.mkdir(parents=True)
    archive = git("archive", "HEAD", capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    if not (into / "main.py").exists() or not (into / "src" / "naive.py").exists():
        raise SystemExit(f"{source} has no main.py and src/naive.py: not rashisht1/gradient_coding")
    return commit


def timeset(path: Path) -> list[float]:
    """An iteration's seconds each, as the reference saves them (one number per line)."""
    return [float(line.split()[0]) for line in path.read_text().splitlines() if line.strip()]


def per_iteration(seconds: Sequence[float]) -> float:
    """The median of an iteration's seconds after the first WARMUP."""
    kept = list(seconds)[WARMUP:] or list(seconds)
    return statistics.median(kept)


# --- processes and their CPU seconds -------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(parent, []).append(int(entry.name))
    return out


def descendants(root: int) -> list[int]:
    """The processes below ``root``."""
    children, found, todo = _children(), [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds of these processes' threads so far (those that exited count 0): the scheduler's
    nanoseconds (/proc/PID/schedstat), where a round of a few milliseconds is well below the 10 ms
    clock ticks of /proc/PID/stat, which stand in where the kernel keeps no schedstat."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += sum(int((task / "schedstat").read_text().split()[0]) / 1e9
                         for task in Path(f"/proc/{pid}/task").iterdir())
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def copy_rate() -> float:
    """Bytes per second numpy copies on this machine (256 MB, best of three)."""
    source, target = np.ones(32 << 20), np.empty(32 << 20)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return source.nbytes / best


# --- the reference ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """A workload as the reference's main.py takes it, and as our job spec gives it."""

    name: str
    n: int
    rows: int  # training rows (the reference's n_rows)
    columns: int  # the reference's n_cols (ours has one more: the intercept)
    real: bool  # the reference's is_real: sparse .npz partitions, else dense text files
    dataset: str  # its data folder under data/
    spec: dict[str, Any] = field(hash=False, compare=False)
    files: dict[str, bytes] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Measured:
    """One run: seconds per iteration (the median after WARMUP) and CPU seconds per round."""

    seconds: float
    cpu_per_round: float
    predicted: float = math.nan


class Reference:
    """A runnable, ported copy of the reference, with its data.

    Parameters
    ----------
    source : Path
        A checkout of rashisht1/gradient_coding, or its git directory.
    root : Path
        Where the copy goes (made here).
    python : str
        The Python its ranks run on loopback (with numpy, scipy, scikit-learn, pandas, mpi4py).
    """

    def __init__(self, source: Path, root: Path, python: str = sys.executable) -> None:
        self.root = root
        self.python = python
        self.commit = copy_reference(source, root)
        port(root)

    def dense(self, name: str, n: int, rows: int, features: int, iterations: int) -> Workload:
        """Our generated dataset written into the reference's text files (its partitions ours)."""
        from bench.cluster import logistic_spec
        from coded.jobs.build import load_data, split_rows
        from coded.jobs.spec import parse_job

        spec = logistic_spec(n, {"scheme": "uncoded"}, rows, features, iterations)
        for key in ("verify", "eval_every", "checkpoint_every"):  # the defaults, as a user writes a job
            spec.pop(key)
        job = parse_job(yaml.safe_dump(spec))
        data = load_data(job)
        parts = split_rows(job, data, n)
        folder = self.root / "data" / "artificial-data" / f"{rows}x{features}" / str(n)
        folder.mkdir(parents=True, exist_ok=True)
        labels = 2.0 * data.y_train - 1.0  # its labels are -1/+1
        for i, part in enumerate(parts):
            np.savetxt(folder / f"{i + 1}.dat", data.x_train[part], fmt="%.17g")
        np.savetxt(folder / "label.dat", labels[np.concatenate(parts)], fmt="%.17g")
        np.savetxt(folder / "test_data.dat", data.x_test, fmt="%.17g")
        np.savetxt(folder / "label_test.dat", 2.0 * data.y_test - 1.0, fmt="%.17g")
        return Workload(name, n, rows, features, False, f"artificial-data/{rows}x{features}", spec)

    def amazon(self, n: int, iterations: int, text: str) -> Workload:
        """The Amazon-shaped CSV through the reference's own preprocessing (its arrange_real_data.py)."""
        from coded.ml.data.amazon import AMAZON_SKIP

        folder = self.root / "data" / "amazon-dataset"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "train.csv").write_text(text)
        done = subprocess.run([self.python, "src/arrange_real_data.py", str(n + 1), "data/", "amazon-dataset",
                               str(STRAGGLERS), "0", "0"], cwd=self.root, capture_output=True, text=True,
                              timeout=1800, check=False)
        shape = re.search(r"No\. of training samples = (\d+), Dimension = (\d+)", done.stdout)
        if done.returncode != 0 or shape is None:
            raise RuntimeError(f"the reference's preprocessing failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        spec = {"kind": "gradient_coding", "workers": n, "code": {"scheme": "uncoded"},
                "model": {"type": "logistic", "l2": 1e-5},
                "data": {"type": "categorical", "path": "amazon.csv", "skip": [list(p) for p in AMAZON_SKIP]},
                "optimizer": {"type": "nesterov", "lr": 2.0}, "iterations": iterations, "seed": 1}
        return Workload(AMAZON, n, int(shape.group(1)), int(shape.group(2)), True, "amazon-dataset", spec,
                        {"amazon.csv": text.encode()})

    def arguments(self, workload: Workload, coded: bool) -> list[str]:
        """main.py's arguments: n_procs n_rows n_cols input_dir is_real dataset is_coded n_stragglers
        partitions coded_ver (cyclic: is_coded 1, coded_ver 0)."""
        return [str(workload.n + 1), str(workload.rows), str(workload.columns), "data/", str(int(workload.real)),
                workload.dataset, str(int(coded)), str(STRAGGLERS), "0", "0"]

    def run(self, launch: list[str], workload: Workload, coded: bool, iterations: int,
            env: dict[str, str]) -> Measured:
        """One run of main.py under ``launch`` (an mpiexec command and its options, the ranks'
        Python last); its iterations' seconds as it saved them, and its ranks' CPU seconds
        between its loop's start and end (as rank 0 prints them)."""
        results = self.root / "data" / workload.dataset / str(workload.n) / "results"
        shutil.rmtree(results, ignore_errors=True)
        command = [*launch, "-u", "main.py", *self.arguments(workload, coded)]
        environment = {**os.environ, **env, "GC_ITERATIONS": str(iterations), "OPENBLAS_NUM_THREADS": "1",
                       "OMP_NUM_THREADS": "1"}
        with subprocess.Popen(command, cwd=self.root, env=environment, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True) as process:
            began = ended = None
            lines = []
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if "---- Starting" in line:
                    began = cpu_seconds(self._ranks(process.pid))
                elif "Total Time Elapsed" in line:
                    ended = cpu_seconds(self._ranks(process.pid))
            # a rank may fault in MPI_Finalize after the reference saved its results (MPICH, cyclic behind
            # slow links: the stragglers' last sends still pending); what it measured stands
            done = any(line.startswith(">>> Done") for line in lines)
            if (process.wait() != 0 and not done) or began is None or ended is None:
                raise RuntimeError(f"the reference failed ({process.returncode}): {''.join(lines[-40:])}")
        name = f"coded_acc_{STRAGGLERS}_timeset.dat" if coded else "naive_acc_timeset.dat"
        return Measured(per_iteration(timeset(results / name)), (ended - began) / iterations)

    @staticmethod
    def _ranks(launcher: int) -> list[int]:
        found = []
        for pid in descendants(launcher):
            with contextlib.suppress(OSError):
                if b"main.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
        return found


def openmpi_launch(n: int, python: str) -> list[str]:
    """Open MPI's mpiexec on this machine (its defaults), n + 1 ranks."""
    found = shutil.which("mpiexec", path=str(Path(python).parent))
    if found is None:
        raise SystemExit("bench.reference needs Open MPI's mpiexec beside the Python (make bench-reference)")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [found, *root, "--oversubscribe", "-n", str(n + 1), python]


class LinkedLaunch:
    """MPICH's mpiexec with a rank in each host of a :class:`coded.links.netns.Network` (rank 0 in
    ``master``, rank i in ``worker-{i-1}``): a launcher proxy per namespace, started by an agent
    that stands in for ssh; every byte between ranks over TCP through the shaped links."""

    def __init__(self, network: Any, hosts: Sequence[str], mpich: Path, folder: Path) -> None:
        self.agent = folder / "agent"
        # hydra calls its launcher as ssh: options (-x), the host, the command; "host" is a namespace here
        self.agent.write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nhost="$1"; shift\n'
                              f'exec ip netns exec "{network.prefix}.$host" /bin/sh -c "$*"\n')
        self.agent.chmod(0o755)
        self.command = ["ip", "netns", "exec", network.ns(hosts[0]), str(mpich / "mpiexec"), "-launcher", "ssh",
                        "-launcher-exec", str(self.agent), "-hosts", ",".join(hosts), "-ppn", "1", "-n",
                        str(len(hosts)), "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "UCX_TLS", "tcp",
                        "-genv", "OPENBLAS_NUM_THREADS", "1", "-genv", "GC_ITERATIONS"]
        self.python = str(mpich / "python")

    def launch(self, iterations: int) -> list[str]:
        return [*self.command, str(iterations), self.python]


# --- ours ------------------------------------------------------------------------------------------------


def ours(client: Any, local: Any, workload: Workload, code: dict[str, Any], checked: bool,
         iterations: int) -> Measured:
    """One job on our cluster: seconds per iteration after WARMUP (its records), and the CPU seconds
    per round of the master and its workers over those iterations."""
    spec = {**workload.spec, "code": code, "iterations": iterations}
    if not checked:
        spec["verify"] = "off"
    submitted = client.submit(yaml.safe_dump(spec), workload.files or None)
    pids = [local.master.pid, *(process.pid for process in local.workers.values())]
    began = None
    for event in client.watch(submitted.id):
        if began is None and event.job.iteration >= WARMUP:  # events of fast jobs come in bursts: ask where it is
            began = cpu_seconds(pids), client.get(submitted.id).iteration
    job = client.get(submitted.id, history=True)
    if job.state.name != "SUCCEEDED":
        raise RuntimeError(f"our job failed: {job.reason}")
    ended = cpu_seconds(pids)
    ends = [record.elapsed_s for record in job.history]
    seconds = per_iteration([b - a for a, b in zip([ends[0] - job.history[0].duration_s, *ends], ends, strict=False)])
    cpu = math.nan if began is None else (ended - began[0]) / max(iterations - began[1], 1)
    predicted = getattr(job.replies, "predicted_s", math.nan) if job.replies is not None else math.nan
    return Measured(seconds, cpu, predicted)


def scheme(name: str) -> dict[str, Any]:
    return {"scheme": "uncoded"} if name == "uncoded" else {"scheme": "cyclic", "stragglers": STRAGGLERS}


def floor_seconds(workload: Workload, rate: float) -> float:
    """A round's bytes copied once each at ``rate``: every worker's parameters and message."""
    return 2 * workload.n * 8 * (workload.columns + 1) / rate


def case(workload: Workload, setting: str, name: str, system: str, measured: Measured, reference: Measured,
         rate: float) -> dict[str, Any]:
    return {"workload": workload.name, "n": workload.n, "l": workload.columns + 1, "links": setting,
            "scheme": name if name == "uncoded" else f"cyclic s={STRAGGLERS}", "system": system,
            "ms_per_iteration": 1e3 * measured.seconds, "vs_reference": measured.seconds / reference.seconds,
            "cpu_ms_per_round": 1e3 * measured.cpu_per_round, "floor_ms": 1e3 * floor_seconds(workload, rate),
            "predicted_ms": 1e3 * measured.predicted, "predicted_over_measured": measured.predicted / measured.seconds}


def side_by_side(reference: Reference, launch: Any, client: Any, local: Any, workload: Workload, setting: str,
                 iterations: dict[str, int], rate: float, env: dict[str, str]) -> list[dict[str, Any]]:
    """Every scheme of a workload: the reference, then ours with defaults, then ours unchecked."""
    rows = []
    for name in ("uncoded", "cyclic"):
        count = iterations[name]
        ref = reference.run(launch(count), workload, name != "uncoded", count, env)
        rows.append(case(workload, setting, name, "reference", ref, ref, rate))
        for system, checked in (("ours, defaults", True), ("ours, verify: off", False)):
            rows.append(case(workload, setting, name, system, ours(client, local, workload, scheme(name), checked,
                                                                   count), ref, rate))
        print("  ".join(f"{row['workload']} {row['links']} {row['scheme']} {row['system']}: "
                        f"{row['ms_per_iteration']:.2f} ms ({row['vs_reference']:.2f}x)" for row in rows[-3:]),
              flush=True)
    return rows


@contextlib.contextmanager
def local_cluster(workers: int, links: Any = None) -> Iterator[Any]:
    from coded.cluster.local import LocalCluster

    with tempfile.TemporaryDirectory(prefix="coded-bench-") as state, \
            LocalCluster(workers, Path(state), startup_timeout=300, links=links) as local:
        yield local


def loopback(reference: Reference, workloads: list[Workload], args: argparse.Namespace,
             rate: float) -> list[list[dict[str, Any]]]:
    runs: list[list[dict[str, Any]]] = [[] for _ in range(args.repeats)]
    for workload in workloads:
        count = {"uncoded": args.iterations, "cyclic": args.iterations}
        with local_cluster(workload.n) as local, local.client() as client:
            for repeat in range(args.repeats):
                runs[repeat] += side_by_side(reference, lambda _, w=workload: openmpi_launch(w.n, reference.python),
                                             client, local, workload, "loopback", count, rate, {})
    return runs


def linked(reference: Reference, workload: Workload, args: argparse.Namespace,
           rate: float) -> list[list[dict[str, Any]]]:
    from coded.cluster.local import ClusterLinks
    from coded.links.netns import Network, format_rate, parse_rate

    slow = format_rate(parse_rate(WORKER_LINK) // SLOW_FACTOR)
    hosts = ["master", *(f"worker-{i}" for i in range(workload.n))]
    runs: list[list[dict[str, Any]]] = [[] for _ in range(args.repeats)]
    with tempfile.TemporaryDirectory() as folder, Network(hosts) as network, \
            local_cluster(workload.n, ClusterLinks(WORKER_LINK, master=MASTER_LINK)) as local, \
            local.client() as client:
        network.shape("master", MASTER_LINK)
        for host in hosts[1:]:
            network.shape(host, WORKER_LINK)
        # absolute: the hosts run it from the reference's temporary copy, not from here
        launch = LinkedLaunch(network, hosts, args.mpich.absolute(), Path(folder))
        assert local.network is not None
        for setting, rate_of_slow in (("healthy", WORKER_LINK), (f"2 links {SLOW_FACTOR}x slower", slow)):
            for host in hosts[1:1 + STRAGGLERS]:
                network.change(host, rate_of_slow)
                local.network.change(host, rate_of_slow)
            count = {"uncoded": args.link_iterations if setting == "healthy" else args.slow_iterations,
                     "cyclic": args.link_iterations}
            for repeat in range(args.repeats):
                runs[repeat] += side_by_side(reference, launch.launch, client, local, workload, setting, count, rate,
                                             {})
    return runs


COLUMNS = ["workload", "n", "l", "links", "scheme", "system", "repeats", "ms_per_iteration", "ms_per_iteration_low",
           "ms_per_iteration_high", "vs_reference", "vs_reference_low", "vs_reference_high", "cpu_ms_per_round",
           "floor_ms", "predicted_ms", "predicted_over_measured"]
SHOWN = ["workload", "n", "links", "scheme", "system", "ms_per_iteration", "vs_reference", "vs_reference_low",
         "vs_reference_high", "cpu_ms_per_round", "floor_ms", "predicted_ms", "predicted_over_measured"]


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reference", type=Path, required=True,
                        help="a checkout (or git directory) of rashisht1/gradient_coding")
    parser.add_argument("--mpich", type=Path, default=Path(".venv-mpich/bin"),
                        help="the bin directory of MPICH, its mpi4py and Python (the links' reference)")
    parser.add_argument("--part", choices=("loopback", "links", "both"), default="both")
    # 48000 x 500 costs the reference a minute of np.loadtxt per repeat: what make bench's time does not hold
    parser.add_argument("--dense", nargs="+", choices=[name for name, *_ in DENSE], default=["12000x100"],
                        help="the dense workloads on loopback (default 12000x100)")
    # WARMUP untimed, then 35, 5 and 2 timed: a median of steady iterations, in a run that costs more to start
    # and load than to iterate; behind the slow links an iteration takes 5 s in each of the three systems
    parser.add_argument("--iterations", type=int, default=40, help="on loopback (the reference's own: 100)")
    parser.add_argument("--link-iterations", type=int, default=10)
    parser.add_argument("--slow-iterations", type=int, default=7, help="uncoded behind the slow links")


def main(argv: Sequence[str] | None = None) -> int:
    bench = Bench(__doc__, argv, repeats=REPEATS, arguments=arguments)
    args = bench.args
    if args.quick:
        args.repeats, args.iterations, args.link_iterations, args.slow_iterations = 1, 12, 8, 7
    rate = copy_rate()
    from coded.ml.data.amazon import amazon_like

    with tempfile.TemporaryDirectory(prefix="coded-reference-") as folder:
        reference = Reference(args.reference, Path(folder) / "gradient_coding")
        amazon = reference.amazon(AMAZON_N, args.iterations, amazon_like(AMAZON_ROWS, seed=0))
        runs: list[list[dict[str, Any]]] = [[] for _ in range(args.repeats)]
        if args.part in ("loopback", "both"):
            dense = [reference.dense(name, n, rows, features, args.iterations) for name, n, rows, features in DENSE
                     if name in args.dense and (not args.quick or name == "12000x100")]
            for repeat, rows in enumerate(loopback(reference, [*dense, amazon], args, rate)):
                runs[repeat] += rows
        if args.part in ("links", "both"):
            for repeat, rows in enumerate(linked(reference, amazon, args, rate)):
                runs[repeat] += rows
        commit = reference.commit
    bench.finish()
    rows = summarise_repeats(runs, ["ms_per_iteration", "vs_reference"])
    bench.csv("reference.csv", rows, COLUMNS)
    port_lines = "\n".join(f"- `{edit.path}`: `{edit.old}` -> `{edit.new}` ({edit.why})" for edit in PORT)
    header = bench.header(
        f"reference: rashisht1/gradient_coding at {commit[:7]} (MIT licence), run as it is but for the port "
        "below, in a temporary copy; loopback under Open MPI (its defaults), links under MPICH over TCP",
        f"seconds per iteration: the median of the iterations after {WARMUP} (the reference's own clock, ours "
        f"the job's records); vs_reference: ours / the reference's within each repeat, median and range over "
        f"{args.repeats} repeats; cpu_ms_per_round: every process of the system together; floor_ms: 2 x n x 8 "
        f"x l bytes copied once at this machine's copy rate ({rate / 1e9:.2f} GB/s); predicted_ms: what the "
        "master said at submission")
    bench.page("reference.md", "Ours against the 2017 reference implementation, side by side",
               header, [markdown_table(rows, SHOWN), "The port:\n\n" + port_lines])
    print(f"wrote {bench.out / 'reference.csv'} and reference.md; {bench.guard.line()}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
