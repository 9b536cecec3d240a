"""bench.skeleton.Bench: the standard arguments, the repeats, and a results page's header in its two layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.skeleton import Bench


def smoke(tmp_path: Path, *more: str, **options) -> Bench:
    """A --quick Bench writing to tmp_path (a smoke run: the load guard refuses nothing)."""
    return Bench("a benchmark", ["--quick", "--out", str(tmp_path), *more], **options)


def test_a_page_that_said_what_runs_keeps_those_lines_first_then_the_load_guards(tmp_path, capsys):
    bench = smoke(tmp_path)
    opened = bench.open("bench/x.py: what runs")
    assert capsys.readouterr().out.splitlines() == opened  # printed before the run
    assert opened[0] == "bench/x.py: what runs" and opened[1].startswith("machine: ")
    assert opened[2].startswith("code: commit ") and opened[3].startswith("command: python -m ")
    opened.append("a line the script adds")
    bench.finish()
    header = bench.header("a line once it ran")
    assert header[:5] == opened and header[6] == "a line once it ran" and len(header) == 7
    assert header[5].startswith("load average ") and header[5].endswith("a --quick smoke run: NOT a measurement")


def test_the_command_is_quoted_where_the_page_quotes_it(tmp_path, capsys):
    assert smoke(tmp_path).open("what runs", quoted=True)[-1].startswith("command: `python -m ")


def test_any_other_page_starts_with_the_command_the_machine_the_load_guard_and_the_code(tmp_path):
    bench = smoke(tmp_path)
    bench.finish()
    header = bench.header("what ran")
    assert header[0].startswith("python -m ") and header[1].startswith("machine: ")
    assert header[2].startswith("load average ") and header[3].startswith("code: commit ")
    assert header[4:] == ["what ran"]


def test_an_untimed_benchmark_has_no_load_guard_until_it_watches(tmp_path):
    bench = smoke(tmp_path, watch=False)
    with pytest.raises(RuntimeError, match="call watch"):
        _ = bench.guard
    bench.finish()  # nothing to stop
    assert len(bench.header("what ran")) == 4
    bench.watch()
    bench.finish()
    assert bench.guard.after is not None and len(bench.header("what ran")) == 5


def test_a_smoke_run_repeats_once_and_a_measurement_as_often_as_asked(tmp_path):
    assert smoke(tmp_path, "--repeats", "5", repeats=3).repeats == 1
    for argv, repeats in ((["--repeats", "5"], 5), ([], 3)):
        bench = Bench("a benchmark", ["--allow-busy", "--out", str(tmp_path), *argv], repeats=3)
        bench.finish()
        assert bench.repeats == repeats
    with pytest.raises(SystemExit):  # no --repeats where the benchmark does not repeat
        Bench("a benchmark", ["--quick", "--repeats", "2"])


def test_its_own_arguments_and_the_clusters_beside_the_standard_ones(tmp_path):
    bench = smoke(tmp_path, "--cluster", "127.0.0.1:50051", "--seed", "4", cluster=True,
                  arguments=lambda parser: parser.add_argument("--seed", type=int, default=1))
    bench.finish()
    assert (bench.args.cluster, bench.args.cluster_metrics, bench.args.seed) == ("127.0.0.1:50051", None, 4)
    assert bench.quick and bench.out == tmp_path and not bench.args.allow_busy


def test_the_csv_and_the_page_go_to_the_results_directory(tmp_path):
    bench = smoke(tmp_path / "results")
    bench.finish()
    csv = bench.csv("x.csv", [{"a": 1.5, "b": None}], ["a", "b"])
    assert csv == tmp_path / "results" / "x.csv" and csv.read_text().splitlines() == ["a,b", "1.5,"]
    page = bench.page("x.md", "A title", ["what ran"], ["a section"])
    assert page.read_text() == "# A title\n\n- what ran\n\na section\n"
