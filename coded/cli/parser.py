"""The ``coded`` command's arguments, assembled: each command's module declares its own
sub-commands (``add_<command>``, beside the ``cmd_<command>`` that runs it), with the option groups
of :mod:`~coded.cli.arguments`; this module puts them in the order ``coded --help`` lists them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import coded
from coded.cli import cluster, compare, jobs, plan, servers
from coded.cli.arguments import Commands

__all__ = ["COMMANDS", "build_parser"]

#: every sub-command, in the order ``coded --help`` has always listed them (which is not by module)
COMMANDS: tuple[Callable[[Commands], None], ...] = (
    servers.add_master, servers.add_worker,
    jobs.add_submit, jobs.add_status, jobs.add_watch, jobs.add_cancel, jobs.add_result, compare.add_compare,
    cluster.add_workers, servers.add_health, servers.add_certs, cluster.add_local,
    plan.add_plan, cluster.add_demo,
)


class _Version(argparse.Action):
    """``--version``: the installed package's version, read only when asked for (it costs 40 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"coded {coded.__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coded", description="Coded distributed computing on a gRPC cluster.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    commands = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(commands)
    return parser
