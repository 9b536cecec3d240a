"""Issue 54: the `coded` command starts at once. Every process of a cluster, and every test that
starts one, pays what `coded` imports before it does anything: `coded --help` and `coded status`
import neither numpy, scipy, pydantic (the job schema) nor the codes, and `--help` not even gRPC.
The budget is held as the modules `python -X importtime` lists, not as seconds (which depend on
the machine), so that a top-level import that would bring them back fails here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coded.cluster.local import free_port

#: what the numeric and schema side of the project loads: each costs a tenth of a second or more
HEAVY = ("numpy", "scipy", "pydantic", "coded.codes", "coded.jobs.spec", "coded.ml", "yaml")
#: what talking to a server loads
SERVER = ("grpc", "google.protobuf", "asyncio", "coded.v1")


def imported(*argv: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The top-level names of every module that ``python -X importtime ARGV`` imported, and the run."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, done.stderr  # -X importtime wrote its table
    names = {line.rsplit("|", 1)[1].strip() for line in lines}
    return names, done


def loaded(names: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in packages))


def test_help_imports_neither_numpy_nor_grpc():
    names, done = imported("-m", "coded", "--help")
    assert done.returncode == 0 and "coded status" not in done.stdout and "status" in done.stdout
    assert "coded.cli.parser" in names  # the table lists what it should
    assert loaded(names, HEAVY + SERVER) == []


@pytest.mark.parametrize("argv", [["status"], ["status", "job-1"], ["workers"]])
def test_status_talks_grpc_without_numpy_or_the_schema(argv):
    """A master that is not there: the command reaches for it (gRPC imported), says it cannot, and
    never loaded the numeric side."""
    names, done = imported("-m", "coded", *argv, "--master", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2 and "error:" in done.stderr
    assert "grpc" in names and "coded.client.client" in names
    assert loaded(names, HEAVY) == []
