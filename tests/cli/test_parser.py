"""The `coded` command's arguments: each command's module declares its sub-commands beside the
functions that run them, and the parser assembles every one, in the order `coded --help` lists."""

from __future__ import annotations

import argparse
import inspect

from coded.cli import cluster, compare, jobs, plan, servers
from coded.cli.parser import COMMANDS, build_parser

MODULES = (servers, jobs, compare, cluster, plan)


def sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_sub_command_a_module_declares_is_in_the_parser_once():
    declared = [function for module in MODULES for name, function in vars(module).items()
                if name.startswith("add_") and inspect.isfunction(function) and function.__module__ == module.__name__]
    assert sorted(map(id, COMMANDS)) == sorted(map(id, declared))


def test_each_sub_command_runs_the_function_declared_beside_it():
    commands = sub_commands(build_parser())
    for add in COMMANDS:
        name = add.__name__.removeprefix("add_")
        run = commands[name].get_default("func")
        assert (run.__module__, run.__name__) == (add.__module__, f"cmd_{name}")


def test_the_help_lists_the_sub_commands_in_the_order_it_always_has():
    assert list(sub_commands(build_parser())) == ["master", "worker", "submit", "status", "watch", "cancel", "result",
                                                  "compare", "workers", "health", "certs", "local", "plan", "demo"]
