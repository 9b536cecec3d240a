"""Whether a results page still measures the code: the commit its benchmark ran on (the page's
``code: commit X`` line) against the files the benchmark exercises, as they are now.

A page is *stale* when any of those files changed since its commit (committed or not; Python
code that is the same, docstrings, comments, imports and definitions moved between the
exercised files aside, has not changed), when it ran
with uncommitted changes, when it does not say which commit it measured, or when this
clone's history lacks that commit (it cannot tell). ``bench.report`` marks a stale page in
docs/results.md; tests/bench/test_staleness.py fails when the committed report and the pages
disagree, so that every number there is current or says it is not.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from collections import Counter
from dataclasses import dataclass

from bench.common import REPO_ROOT

__all__ = ["EXERCISES", "Staleness", "staleness"]

#: the code every cluster benchmark measures: the master, the workers, what they share, the CLI
#: that starts them, and the cluster harness
_CLUSTER = ("common/", "master/", "worker/", "coded/", "bench/cluster.py")
_CODES = ("common/codes/",)

#: each results page: the files whose change makes it stale (its script is added to them)
EXERCISES: dict[str, tuple[str, ...]] = {
    "reference": (*_CLUSTER, "bench/reference-mpich.txt"),
    "yeabbe": (*_CLUSTER, "bench/tandon_links.py"),
    "tandon_links": _CLUSTER,
    "chaos": _CLUSTER,
    "large_sparse": _CLUSTER,
    "ddp": (*_CLUSTER, "bench/ddp_rank.py"),
    "ddp_check": (*_CLUSTER, "bench/ddp.py", "bench/ddp_rank.py"),
    "tandon": _CLUSTER,
    "cluster_speedup": _CLUSTER,
    "torch_training": _CLUSTER,
    "plan": _CLUSTER,
    "plan_modes": _CLUSTER,
    "plan_workers": (*_CLUSTER, "bench/shaped.py", "bench/cpu_quota.py"),
    "lwpd": _CLUSTER,
    "cluster_overhead": _CLUSTER,
    "cluster_scaling": _CLUSTER,
    "cluster_ingest": _CLUSTER,
    "transport": ("common/wire/", "master/", "worker/"),
    "decode_speed": _CODES,
    "numerics": _CODES,
    "matmul": _CLUSTER,
    "mds_trials": _CODES,
    "verification_trials": _CODES,
    "verification_cost": (*_CLUSTER, "bench/verification.py"),
    "partial": _CLUSTER,
    "detection": _CLUSTER,
    "check_cost": (*_CLUSTER, "bench/partial.py"),
    "mpi": (*_CLUSTER, "bench/mpi_loop.py"),
    "drift": _CLUSTER,
    "memory": _CLUSTER,
    "codenet": _CLUSTER,
    "fuzz": _CLUSTER,
}

_COMMIT = re.compile(r"code: commit ([0-9a-f]{7,40})( with uncommitted changes)?")


def script(page: str) -> str:
    """The benchmark that writes a page: bench/<name>.py, or the one whose part it is."""
    for prefix, owner in (("cluster_", "cluster"), ("verification_", "verification"), ("ddp_", "ddp")):
        if page.startswith(prefix):
            return f"bench/{owner}.py"
    return f"bench/{page}.py"


@dataclass(frozen=True)
class Staleness:
    """A page's verdict: ``commit`` it measured (None: not said), and ``why`` it is stale ("" if
    it is current)."""

    commit: str | None
    why: str

    @property
    def stale(self) -> bool:
        return bool(self.why)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)


def staleness(page: str, text: str) -> Staleness:
    """The verdict on a page named ``page`` whose markdown is ``text``."""
    found = _COMMIT.search(text)
    if found is None:
        return Staleness(None, "the page does not say which commit it measured")
    commit = found.group(1)
    if found.group(2):
        return Staleness(commit, f"it ran on commit {commit} with uncommitted changes")
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode:
        return Staleness(commit, f"this clone's history lacks commit {commit}: it cannot tell")
    paths = (*EXERCISES.get(page, ()), script(page))
    changed = _git("diff", "--name-only", commit, "--", *paths).stdout.split()
    if changed and not _same_code(commit, tuple(changed)):
        return Staleness(commit, f"the code it exercises has changed since commit {commit}, which it measured "
                                 f"(`git diff --stat {commit} -- {' '.join(paths)}`)")
    return Staleness(commit, "")


@functools.cache  # pages measured on one commit share its verdict; the report asks for every page
def _same_code(commit: str, paths: tuple[str, ...]) -> bool:
    """Whether the Python files ``paths`` hold the same definitions now as at ``commit``, taken
    together: a function moved from one of them to another is the same code."""
    if not all(path.endswith(".py") for path in paths):
        return False
    # a file absent then was added since; one absent now was removed: no definitions either way
    blobs = dict(line.split(" ", 2)[2].split("\t", 1)[::-1]
                 for line in _git("ls-tree", commit, "--", *paths).stdout.splitlines())
    before: Counter[str] = Counter()
    now: Counter[str] = Counter()
    try:
        for path in paths:
            before.update(_blob_definitions(blobs[path]) if path in blobs else ())
            now.update(_file_definitions(path))
    except SyntaxError:
        return False
    return before == now


@functools.cache  # a file's version is shared by the commits between its changes
def _blob_definitions(blob: str) -> tuple[str, ...]:
    """:func:`_definitions` of a version of a file, by its git object name."""
    return tuple(_definitions(_git("cat-file", "blob", blob).stdout))


@functools.cache
def _file_definitions(path: str) -> tuple[str, ...]:
    """:func:`_definitions` of a file as it is now (none: removed)."""
    current = REPO_ROOT / path
    return tuple(_definitions(current.read_text())) if current.exists() else ()


def _definitions(source: str) -> list[str]:
    """A Python source's top-level statements, docstrings, imports and ``__all__`` aside (what
    moving a definition from one module to another changes around it)."""
    return [ast.dump(node) for node in ast.parse(_code(source)).body
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)) and not _names_all(node)]


def _names_all(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def _code(source: str) -> str:
    """A Python source's syntax tree without its docstrings."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def mark(text: str, verdict: Staleness) -> str:
    """The line docs/results.md puts under the title of a stale page whose markdown is ``text``:
    why, and the command that measures it again (the page's own)."""
    command = re.search(r"python -m bench\.[^`\n]*", text)
    again = f" Rerun `{command.group(0).strip()}`." if command else ""
    return f"> **Stale**: {verdict.why}.{again}"
