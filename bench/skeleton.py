"""The one skeleton of a benchmark's run, from its command line to its results page.

Every benchmark opens and ends the same way: the standard arguments (``--out``, ``--quick``,
``--allow-busy``; ``--cluster`` where it runs jobs; ``--repeats`` where it repeats its points), a
load guard watching the run, one repeat in a ``--quick`` smoke run, then its CSVs and a results
page whose header says what ran, where, on which code and whether the machine was quiet.
:class:`Bench` holds all of that; a script gives only its own parts: its arguments, what one run
measures, its columns and the lines that describe it::

    bench = Bench(__doc__, argv, cluster=True, repeats=3)
    runs = [measure(bench.args) for _ in range(bench.repeats)]
    bench.finish()
    rows = summarise_repeats(runs, ["seconds"])
    bench.csv("example.csv", rows, COLUMNS)
    bench.page("example.md", "An example", bench.header("n = 6, ..."), [markdown_table(rows, COLUMNS)])

A page's header has one of two layouts, each kept as its pages have it. A benchmark that says what
it runs before it runs calls :meth:`Bench.open` (its lines, the machine, the code and the command,
printed at once), and its page adds the load guard's line after them; the others' pages start with
the command, the machine, the load guard's line and the code, then their own lines.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.common import RESULTS_DIR, LoadGuard, code_line, command_line, machine_line

__all__ = ["Bench"]


def _standard_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out DIR``, ``--quick`` and ``--allow-busy``, the flags every benchmark takes."""
    parser.add_argument(
        "--out", type=Path, default=RESULTS_DIR, help=f"results directory (default {RESULTS_DIR})"
    )
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--allow-busy", action="store_true",
                        help="run even when other processes keep the machine busy (the results are marked invalid)")


class Bench:
    """One run of a benchmark: its arguments (``args``), the load guard that watches it
    (``guard``), its repeats and the directory its results go to (``out``).

    Parameters
    ----------
    doc : str
        The script's docstring: its ``--help``.
    argv : sequence of str, optional
        The arguments (default: the command line's).
    arguments : callable, optional
        Adds the script's own arguments to the parser.
    cluster : bool
        Whether it runs jobs: ``--cluster`` and ``--cluster-metrics`` (``bench.cluster.cluster``).
    repeats : int, optional
        Whether it repeats its points, and how often unless ``--repeats`` says (once with ``--quick``).
    watch : bool
        Whether the load guard starts now; else at :meth:`watch` (after an untimed part, or never
        for counts that do not depend on the machine's load: the page then has no guard line).
    """

    def __init__(self, doc: str | None, argv: Sequence[str] | None = None, *,
                 arguments: Callable[[argparse.ArgumentParser], object] | None = None, cluster: bool = False,
                 repeats: int | None = None, watch: bool = True) -> None:
        parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        _standard_arguments(parser)
        if cluster:
            from bench.cluster import add_cluster_arguments  # the cluster harness only where jobs run

            add_cluster_arguments(parser)
        if repeats is not None:
            parser.add_argument("--repeats", type=int, default=repeats,
                                help=f"runs of every point (default {repeats}; 1 with --quick)")
        if arguments is not None:
            arguments(parser)
        self.args = parser.parse_args(argv)
        self._guard: LoadGuard | None = None
        self._opening: list[str] | None = None
        if watch:
            self.watch()

    @property
    def quick(self) -> bool:
        """A seconds-long smoke run (``--quick``), not a measurement."""
        return bool(self.args.quick)

    @property
    def out(self) -> Path:
        """The results directory (``--out``)."""
        return Path(self.args.out)

    @property
    def repeats(self) -> int:
        """How many times each point runs: once in a smoke run, else ``--repeats``."""
        return 1 if self.quick else int(self.args.repeats)

    @property
    def guard(self) -> LoadGuard:
        """The load guard watching the run (a RuntimeError before :meth:`watch`)."""
        if self._guard is None:
            raise RuntimeError("no load guard watches this benchmark: call watch() first")
        return self._guard

    def watch(self) -> None:
        """Start the load guard: it refuses a busy machine, or with ``--allow-busy`` marks the run invalid."""
        self._guard = LoadGuard(self.args.allow_busy, self.args.quick)

    def finish(self) -> None:
        """The measuring is over: the load guard stops watching (what the page says of the load)."""
        if self._guard is not None:
            self._guard.finish()

    def open(self, *lines: str, quoted: bool = False) -> list[str]:
        """Say what runs before it runs: ``lines``, the machine, the code and the command (in
        backquotes when ``quoted``), printed, and kept (the list itself, which the script may add
        to) as the start of the page's :meth:`header`."""
        command = f"`{command_line()}`" if quoted else command_line()
        self._opening = [*lines, machine_line(), code_line(), f"command: {command}"]
        print("\n".join(self._opening), flush=True)
        return self._opening

    def header(self, *lines: str) -> list[str]:
        """The page's header once the run is over, ``lines`` last: after :meth:`open`, its lines
        and the load guard's; otherwise the command, the machine, the load guard's line and the code."""
        guard = [] if self._guard is None else [self._guard.line()]
        if self._opening is not None:
            return [*self._opening, *guard, *lines]
        return [command_line(), machine_line(), *guard, code_line(), *lines]

    def csv(self, name: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Path:
        """Rows written as ``name`` in the results directory (bench.common.write_csv)."""
        path = self.out / name
        common.write_csv(path, rows, columns)
        return path

    def page(self, name: str, title: str, header: Sequence[str], sections: Sequence[str]) -> Path:
        """The results page ``name`` in the results directory (bench.common.write_markdown)."""
        path = self.out / name
        common.write_markdown(path, title, header, sections)
        return path
