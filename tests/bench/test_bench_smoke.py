"""Each benchmark's --quick mode runs, writes its CSV, and reports what must hold (never timings).

The benchmarks that run jobs share one local cluster (``--cluster``), started once for this module:
starting a cluster per benchmark cost most of these tests' time. One of them starts its own, as a
benchmark does by default, so that path runs too.
"""

from __future__ import annotations

import csv
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coded.cluster.local import LocalCluster

REPO = Path(__file__).resolve().parents[2]
#: the most workers a --quick benchmark's job uses (CodeNet: m = n = 2, t = 1 is 12 peers)
SHARED_WORKERS = 12

NUMERICS_COLUMNS = [
    "kind", "scheme", "points", "n", "s", "m", "params", "waits_for", "sets", "exhaustive",
    "status", "worst_error", "bound", "constructor_estimate", "refusal_estimate",
    "forced_max_error", "forced_worst_error", "forced_bound", "naive_worst_error",
    "ill_conditioned_sets", "goal", "meets_goal", "seconds",
]
DECODE_SPEED_COLUMNS = [
    "code", "n", "s", "messages", "gradient_length", "message_length", "weight_solve_ms",
    "decode_s", "np_sum_s", "reduce_add_s", "ratio_decode_np_sum", "ratio_decode_reduce",
    "decode_GBps", "np_sum_GBps", "reduce_add_GBps", "check_error", "goal_ratio", "meets_goal",
]
VERIFICATION_TRIAL_COLUMNS = [
    "kind", "scheme", "params", "n", "trials", "corrected", "harmless", "not_awaited", "failed", "wrong_location",
    "undetected_wrong", "clean_trials", "false_alarms", "worst_accepted_error", "seconds",
]
VERIFICATION_COST_COLUMNS = [
    "verify", "liar", "repeats", "s_per_iteration", "low", "high", "ratio_to_off", "replies_used",
    "located_per_iteration",
]
MDS_COLUMNS = [
    "k", "r", "model", "trials", "correctable", "corrected", "accepted_small", "detected",
    "false_alarms", "false_alarms_nonfinite", "silent_wrong", "silent_wrong_correctable",
    "silent_wrong_overflow", "worst_corrected_error", "seconds",
]


def run_quick(script: str, out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{script.removesuffix('.py')}", *args, "--quick", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The options that run a benchmark's jobs on the module's cluster (its master's /metrics too)."""
    with LocalCluster(SHARED_WORKERS, tmp_path_factory.mktemp("shared-cluster"), startup_timeout=300,
                      metrics=True) as cluster:
        yield ["--cluster", cluster.address,
               "--cluster-metrics", f"http://127.0.0.1:{cluster.metrics_ports['master']}/metrics"]


@pytest.fixture(scope="module")
def numerics(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One --quick run of bench.numerics, for the tests of its gradient and its matmul half."""
    out = tmp_path_factory.mktemp("numerics")
    return run_quick("numerics.py", out), out


def read_csv(path: Path, columns: list[str]) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == columns
        rows = list(reader)
    assert rows
    return rows


def assert_repeated(rows: list[dict[str, str]], measures: list[str]) -> None:
    """A --quick run measures every point once: ``repeats`` is 1, and each measure's median, low
    and high are that one value."""
    assert rows
    for row in rows:
        assert row["repeats"] == "1", row
        for key in measures:
            assert float(row[f"{key}_low"]) == float(row[key]) == float(row[f"{key}_high"]), (key, row)


def assert_not_a_measurement(page: Path) -> None:
    assert "a --quick smoke run: NOT a measurement" in page.read_text()  # the load guard's verdict


def assert_header(result: subprocess.CompletedProcess[str], script: str) -> None:
    first = result.stdout.splitlines()[:4]
    assert first[0].startswith(f"bench/{script}:") and "seed" in first[0]
    assert any("cores" in line and "numpy" in line for line in first)


def test_numerics_quick_meets_the_goal_on_the_unit_circle(numerics):
    result, out = numerics
    rows = read_csv(out / "numerics.csv", NUMERICS_COLUMNS)
    assert_header(result, "numerics.py")
    assert (out / "numerics.md").read_text().startswith("# ")
    assert (out / "numerics.png").read_bytes().startswith(b"\x89PNG")
    unit_circle = [
        r for r in rows if r["points"] == "unit_circle" and int(r["n"]) <= 16 and r["status"] == "ok"
    ]
    assert unit_circle
    for row in unit_circle:
        assert float(row["worst_error"]) <= 1e-9, row
    for row in rows:  # every accepted code decodes within its own estimate's order of magnitude
        if row["status"] == "ok":
            assert float(row["worst_error"]) <= max(10 * float(row["bound"]), 1e-14), row


def test_numerics_quick_matmul_meets_the_goals_and_never_returns_a_wrong_product(numerics):
    _, out = numerics
    with (out / "numerics_matmul.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["scheme"], r["points"]) for r in rows} >= {(s, p) for s in ("polynomial", "matdot", "polydot", "gpd",
                                                                          "gpd_matvec")
                                                          for p in ("unit_circle", "chebyshev")}
    assert (out / "numerics_matmul.png").read_bytes().startswith(b"\x89PNG")
    for row in rows:
        assert not row["meets_goal"].startswith("NO") or row["points"] == "chebyshev", row
        assert row["silent_wrong"] in ("", "0"), row
        if row["points"] == "unit_circle" and int(row["s"]) <= 4:  # P = 16 in the quick run
            assert row["status"] == "ok" and float(row["worst_error"]) <= 1e-9, row
            assert row["located"] in ("", row["locate_trials"]), row


def test_decode_speed_quick_writes_ratios_and_checks_correctness(tmp_path):
    result = run_quick("decode_speed.py", tmp_path)
    assert_header(result, "decode_speed.py")
    rows = read_csv(tmp_path / "decode_speed.csv", DECODE_SPEED_COLUMNS)
    assert {r["code"] for r in rows} >= {"cyclic", "ye_abbe m=1", "ye_abbe m=2"}
    for row in rows:
        assert float(row["check_error"]) < 1e-9, row
        assert float(row["ratio_decode_np_sum"]) > 0


def test_mds_quick_corrects_or_detects_every_pattern(tmp_path):
    """Gaussian errors and exponent/mantissa bit flips: no silent wrong answer, no false alarm."""
    result = run_quick("mds_trials.py", tmp_path)
    assert_header(result, "mds_trials.py")
    rows = read_csv(tmp_path / "mds_trials.csv", MDS_COLUMNS)
    assert {r["model"] for r in rows} == {"gaussian", "bitflip"}
    for row in rows:
        assert int(row["silent_wrong"]) == 0, row
        assert int(row["false_alarms"]) == 0, row
        outcomes = ("corrected", "detected", "accepted_small")
        assert sum(int(row[c]) for c in outcomes) == int(row["trials"]), row


def test_matmul_quick_runs_every_scheme(tmp_path, shared):
    run_quick("matmul.py", tmp_path, *shared)
    with (tmp_path / "matmul_decode.csv").open(newline="") as handle:
        decoding = list(csv.DictReader(handle))
    assert {(r["scheme"], r["points"]) for r in decoding} >= {("gpd", "unit_circle"), ("gpd", "chebyshev")}
    assert all(float(r["decode_s"]) > 0 for r in decoding)
    with (tmp_path / "matmul.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["scheme"] for r in rows} == {"uncoded", "polynomial", "matdot", "gpd"}
    assert all(0 < float(r["decode_share"]) < 1 for r in rows)
    assert_repeated(rows, ["time_to_product_s", "speedup_vs_uncoded"])
    assert [float(r["speedup_vs_uncoded"]) for r in rows if r["scheme"] == "uncoded"] == [1.0]
    assert_not_a_measurement(tmp_path / "matmul.md")
    table = (tmp_path / "matmul.md").read_text()
    assert "| 6 | 6 | 221 |" in table and "| 36 | 1 | 71 |" in table  # spec/000 Sec. 3.6


@pytest.mark.slow  # a heavy smoke run: make test-slow (make test stays under 8 minutes)
def test_codenet_quick_shows_what_each_strategy_does_with_errors(tmp_path, shared):
    run_quick("codenet.py", tmp_path, *shared)
    with (tmp_path / "codenet.csv").open(newline="") as handle:
        rows = {(float(r["p"]), r["strategy"]): r for r in csv.DictReader(handle)}
    clean = float(rows[(0.0, "codenet")]["final_accuracy"])
    # errors corrected: the model trained without errors, up to rounding, which can flip a test
    # prediction where two classes tie (the margin: 3 of digits' 360 test samples); unnoticed: another
    same = 0.01
    assert abs(float(rows[(0.02, "codenet")]["final_accuracy"]) - clean) <= same
    assert int(float(rows[(0.02, "codenet")]["errors_corrected"])) > 0
    assert abs(float(rows[(0.02, "uncoded")]["final_accuracy"]) - clean) > same
    assert int(float(rows[(0.02, "replication")]["rollbacks"])) > 0
    assert float(rows[(0.0, "codenet")]["parity_max_deviation"]) <= 1e-10
    assert_repeated(list(rows.values()), ["wall_s_per_iteration", "peer_cpu_s_per_iteration",
                                          "non_decoding_peer_cpu_s_per_iteration"])
    assert (tmp_path / "codenet.png").read_bytes().startswith(b"\x89PNG")
    assert_not_a_measurement(tmp_path / "codenet.md")
    # the CodeNet / uncoded ratios, per repeat then summarised: one repeat, so low = median = high
    ratios = re.findall(r"([\d.]+) \(([\d.]+)-([\d.]+)\)", (tmp_path / "codenet.md").read_text())
    assert len(ratios) == 3 and all(len(set(ratio)) == 1 for ratio in ratios)


def quick_rows(script: str, out: Path, table: str, *args: str) -> list[dict[str, str]]:
    """Run a benchmark's --quick mode, check its header, return the rows of one of its CSVs."""
    assert_header(run_quick(script, out, *args), script)
    with (out / table).open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_plan_quick_predicts_and_measures_three_codes(tmp_path, shared):
    rows = quick_rows("plan.py", tmp_path, "plan.csv", *shared)
    assert [r["role"].split(":")[0] for r in rows] == ["recommended", "alternative", "alternative"]
    assert "uncoded" in {r["code"] for r in rows}
    for row in rows:
        assert float(row["predicted_s"]) > 0 and float(row["measured_s"]) > 0
        ratio = float(row["measured_s"]) / float(row["predicted_s"])
        assert abs(float(row["measured/predicted"]) - ratio) < 1e-9
    assert_repeated(rows, ["measured_s", "measured/predicted", "speedup_vs_uncoded"])
    assert [float(r["speedup_vs_uncoded"]) for r in rows if r["code"] == "uncoded"] == [1.0]
    assert_not_a_measurement(tmp_path / "plan.md")


@pytest.mark.slow  # a minute of jobs: make test-slow
def test_plan_modes_quick_fits_every_code_and_mode_and_measures_each_recommendation(tmp_path, shared):
    fits = quick_rows("plan_modes.py", tmp_path, "plan_modes.csv", *shared)
    assert [r["fitted_from"] for r in fits] == ["uncoded", "cyclic s=2 streamed", "cyclic s=2 whole",
                                                "ye_abbe s=1 m=2"]
    with (tmp_path / "plan_modes_grid.csv").open(newline="") as handle:
        grid = {row["code"]: row for row in csv.DictReader(handle)}
    assert {"uncoded", "cyclic s=1 streamed", "ye_abbe s=0 m=2"} <= set(grid)
    assert min(float(row["vs_best"]) for row in grid.values()) == 1.0  # the best is its own yardstick
    for row in fits:  # each recommendation is a measured code, its ratio the grid's
        assert row["recommended"] in grid and row["vs_best"] == grid[row["recommended"]]["vs_best"]
        assert row["meets_goal"] in ("True", "False") and float(row["compute_s"]) > 0
    # streamed, a responder computes about its own partition; whole, the code's d = s + 1 + 1 = 4
    assert float(fits[1]["partitions_computed"]) < 2 and float(fits[2]["partitions_computed"]) == 4
    assert_not_a_measurement(tmp_path / "plan_modes.md")


@pytest.mark.slow  # nine jobs: make test-slow
def test_plan_workers_quick_predicts_and_measures_every_code_it_ranks(tmp_path, shared):
    rows = quick_rows("plan_workers.py", tmp_path, "plan_workers.csv", *shared)
    assert {r["scenario"] for r in rows} == {"loopback"}
    codes = {r["code"] for r in rows}
    assert {"uncoded", "cyclic s=1 streamed", "ye_abbe s=1 m=1"} <= codes and len(codes) == len(rows)
    for row in rows:
        ratio = float(row["measured_s"]) / float(row["predicted_s"])
        assert abs(float(row["measured/predicted"]) - ratio) < 1e-9 * ratio
        assert row["within_1.5x"] == ("yes" if 1 / 1.5 <= ratio <= 1.5 else "no")
    assert min(float(r["vs_best"]) for r in rows) == 1.0
    assert sum(r["recommended"] == "1 of 1" for r in rows) == 1
    with (tmp_path / "plan_workers_summary.csv").open(newline="") as handle:
        summary, = csv.DictReader(handle)
    assert summary["scenario"] == "loopback" and int(summary["codes"]) == len(rows)
    assert_not_a_measurement(tmp_path / "plan_workers.md")


@pytest.mark.slow  # a heavy smoke run: make test-slow (make test stays under 8 minutes)
def test_drift_quick_runs_jobs_in_a_row_and_records_each_ones_time_and_memory(tmp_path):
    run_quick("drift.py", tmp_path)
    rows = read_csv(tmp_path / "drift.csv", ["job", "ms_per_iteration", "master_rss_mb", "workers_rss_mb"])
    assert [int(r["job"]) for r in rows] == [0, 1, 2]
    assert all(float(r["ms_per_iteration"]) > 0 and float(r["master_rss_mb"]) > 0 for r in rows)
    assert_not_a_measurement(tmp_path / "drift.md")


@pytest.mark.slow  # five clusters in a row: make test-slow
def test_memory_quick_keeps_every_process_within_its_bound_and_runs_the_late_jobs(tmp_path):
    run_quick("memory.py", tmp_path, timeout=600)
    rows = read_csv(tmp_path / "memory.csv", ["point", "workers", "data_mb", "worker_share_mb", "worker_peak_mb",
                                              "worker_peak_max_mb", "worker_bound_mb", "master_peak_mb",
                                              "master_bound_mb", "within_bounds"])
    assert {r["point"] for r in rows} == {"against n", "against size", "uploaded npz", "uploaded sparse npz"}
    for r in rows:
        assert float(r["worker_peak_max_mb"]) <= float(r["worker_bound_mb"]), r
        assert float(r["master_peak_mb"]) <= float(r["master_bound_mb"]), r
        assert r["within_bounds"] == "True"
    late = read_csv(tmp_path / "memory_late.csv", ["workers", "code", "s_per_iteration", "state"])
    assert sorted(r["code"] for r in late) == ["cyclic", "uncoded"] and all(r["state"] == "SUCCEEDED" for r in late)
    assert_not_a_measurement(tmp_path / "memory.md")


def test_lwpd_quick_compares_the_three_asynchronous_and_coded_schemes(tmp_path, shared):
    rows = quick_rows("lwpd.py", tmp_path, "lwpd.csv", *shared)
    assert [r["scheme"] for r in rows] == ["lwpd", "kasync", "cyclic"]
    assert all(float(r["final_test_loss"]) > 0 for r in rows)
    assert_repeated(rows, ["time_to_target_s", "speedup_vs_cyclic", "test_loss_at_horizon"])
    assert float(rows[2]["speedup_vs_cyclic"]) == 1.0
    assert_not_a_measurement(tmp_path / "lwpd.md")
    assert (tmp_path / "lwpd.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow  # a heavy smoke run: make test-slow (make test stays under 8 minutes)
def test_tandon_quick_times_every_scheme_and_the_unbalanced_case(tmp_path, shared):
    speed = quick_rows("tandon.py", tmp_path, "tandon_speed.csv", *shared)
    assert {(r["stragglers"], r["scheme"]) for r in speed} == {
        (m, s) for m in ("random", "fixed") for s in ("uncoded", "ignore_stragglers", "frc", "cyclic")}
    assert_repeated(speed, ["s_per_iteration", "speedup_vs_uncoded"])
    assert [float(r["speedup_vs_uncoded"]) for r in speed if r["scheme"] == "uncoded"] == [1.0, 1.0]
    with (tmp_path / "tandon_unbalanced.csv").open(newline="") as handle:
        unbalanced = {r["scheme"]: r for r in csv.DictReader(handle)}
    assert_repeated(list(unbalanced.values()), ["time_to_auc_target_s"])
    # the exact code trains on all the data: its final model is uncoded's
    assert abs(float(unbalanced["cyclic"]["final_test_loss"]) - float(unbalanced["uncoded"]["final_test_loss"])) < 1e-6
    assert (tmp_path / "tandon_unbalanced.png").read_bytes().startswith(b"\x89PNG")
    assert_not_a_measurement(tmp_path / "tandon.md")


@pytest.mark.torch
def test_torch_training_quick(tmp_path: Path) -> None:
    run_quick("torch_training", tmp_path)
    with (tmp_path / "torch_training.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["scheme"] for r in rows] == ["uncoded", "ignore_stragglers", "cyclic", "ye_abbe"]
    assert all(0.0 <= float(r["final_accuracy"]) <= 1.0 for r in rows)
    with (tmp_path / "torch_overhead.csv").open(newline="") as handle:
        (overhead,) = list(csv.DictReader(handle))
    assert float(overhead["worker_cpu_ms"]) > 0 and float(overhead["plain_cpu_ms"]) > 0
    assert "a --quick smoke run: NOT a measurement" in (tmp_path / "torch_training.md").read_text()
    assert (tmp_path / "torch_training.png").stat().st_size > 0


def test_transport_quick(tmp_path: Path) -> None:
    run_quick("transport", tmp_path)
    with (tmp_path / "transport.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["bytes"], r["transport"]) for r in rows] == [
        (size, kind) for size in ("808", "400800", "8000000")
        for kind in ("grpc.aio", "grpc sync", "data plane", "tcp (asyncio)")]
    assert all(float(r["median_us"]) > 0 for r in rows)
    assert [float(r["vs_tcp"]) for r in rows if r["transport"].startswith("tcp")] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("part", ["overhead", "ingest", "scaling"])
def test_cluster_quick(tmp_path: Path, shared: list[str], part: str) -> None:
    # overhead starts its own cluster, as every benchmark does without --cluster
    run_quick("cluster", tmp_path, part, *([] if part == "overhead" else shared), timeout=300)
    name = "cluster_scaling_after" if part == "scaling" else f"cluster_{part}"
    with (tmp_path / f"{name}.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(float(r["repeats"]) >= 1 for r in rows)
    page = (tmp_path / f"cluster_{part}.md").read_text()
    assert "a --quick smoke run: NOT a measurement" in page  # the load guard's verdict is on the page
    if part == "overhead":
        assert {(r["scheme"], r["stragglers"]) for r in rows} == {("uncoded", "none"), ("cyclic", "none"),
                                                                  ("cyclic", "2 x 1 s")}
        assert all(float(r["iteration_ms"]) >= float(r["ideal_ms"]) > 0 for r in rows)
    if part == "ingest":
        assert float(rows[0]["comm_ms"]) > 0 and float(rows[0]["tcp_ms"]) > 0
    if part == "scaling":
        assert (tmp_path / "cluster_scaling.png").stat().st_size > 0
        assert sorted({int(r["n"]) for r in rows}) == [4, 8]


def test_cluster_speedup_quick(tmp_path: Path, shared: list[str]) -> None:
    run_quick("cluster", tmp_path, "speedup", *shared, timeout=300)
    with (tmp_path / "cluster_speedup.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["scheme"], r["s"]) for r in rows] == [("uncoded", "0")] + [
        (scheme, "1") for scheme in ("ignore_stragglers", "cyclic", "ye_abbe")]
    assert_repeated(rows, ["time_to_target_s", "speedup_vs_uncoded"])
    assert float(rows[0]["speedup_vs_uncoded"]) == 1.0  # the target is uncoded's, reached by uncoded
    # the exact codes decode uncoded's gradient: the same final model
    for row in rows:
        if row["scheme"] in ("cyclic", "ye_abbe"):
            assert abs(float(row["final_test_loss"]) - float(rows[0]["final_test_loss"])) < 1e-6, row
    assert_not_a_measurement(tmp_path / "cluster_speedup.md")


def test_verification_quick_finds_every_wrong_reply_and_counts_the_replies_checking_waits_for(tmp_path, shared):
    result = run_quick("verification.py", tmp_path, *shared)
    assert result.stdout.startswith("bench/verification.py trials:")
    trials = read_csv(tmp_path / "verification_trials.csv", VERIFICATION_TRIAL_COLUMNS)
    assert {r["scheme"] for r in trials} == {"frc", "cyclic", "ye_abbe", "partial", "polynomial", "matdot", "polydot",
                                             "gpd"}
    for row in trials:
        assert row["undetected_wrong"] == row["wrong_location"] == row["false_alarms"] == "0", row
        assert int(row["corrected"]) > 0 and float(row["worst_accepted_error"]) <= 1.0, row
    cost = {(r["verify"], r["liar"]): r
            for r in read_csv(tmp_path / "verification_cost.csv", VERIFICATION_COST_COLUMNS)}
    # n = 8 with stragglers: 2: every decode uses at least the 6 replies the job waits for and at most
    # all 8 (how many a check adds is the master's policy, tested in tests/master; a reply that lands in
    # the same event-loop turn as the last one needed is used too). Clean replies are never located as
    # wrong; the liar, worker 3, is in the iterations whose checked decode had its reply.
    assert set(cost) == {("off", "none"), ("detect", "none"), ("correct 1", "none"), ("detect", "worker 3"),
                         ("correct 1", "worker 3")}
    for row in cost.values():
        assert 6 <= float(row["replies_used"]) <= 8, row
        located = float(row["located_per_iteration"])
        assert located == 0 if row["liar"] == "none" else 0 < located <= 1, row
    assert float(cost[("off", "none")]["ratio_to_off"]) == 1.0


PARTIAL_COLUMNS = ["workload", "scenario", "mode", "repeats", "s_per_iteration", "s_per_iteration_low",
                   "s_per_iteration_high", "vs_uncoded", "vs_uncoded_low", "vs_uncoded_high", "vs_healthy",
                   "vs_healthy_low", "vs_healthy_high", "s_to_target",
                   "s_to_target_low", "s_to_target_high", "pieces_of_slow_workers_used", "final_loss"]


def test_partial_quick_runs_every_mode_to_the_uncoded_loss(tmp_path, shared):
    run_quick("partial.py", tmp_path, *shared)
    rows = read_csv(tmp_path / "partial.csv", PARTIAL_COLUMNS)
    assert {row["scenario"] for row in rows} == {"none", "1 slow 2.4x", "trace AR"}
    for point in {(row["workload"], row["scenario"]) for row in rows}:  # LeNet too where PyTorch is installed
        points = [row for row in rows if (row["workload"], row["scenario"]) == point]
        assert {row["mode"] for row in points} == {"uncoded", "whole, strict", "streamed, sampled",
                                                   "streamed sorted, sampled"}
        losses = [float(row["final_loss"]) for row in points]
        assert max(losses) - min(losses) <= 1e-9 * abs(losses[0])  # every mode is exact
        assert all(float(row["s_to_target"]) > 0 for row in points)  # and reaches the uncoded loss
    for workload in {row["workload"] for row in rows}:  # one repeat: its ratios are of its own times
        healthy = next(float(row["s_per_iteration"]) for row in rows
                       if (row["workload"], row["scenario"], row["mode"]) == (workload, "none", "uncoded"))
        for row in (row for row in rows if row["workload"] == workload):
            assert float(row["vs_healthy"]) == pytest.approx(float(row["s_per_iteration"]) / healthy, rel=1e-9)


def test_traces_convert_compute_times_to_slowdowns_against_each_steps_fastest(tmp_path):
    source = tmp_path / "x-compute.csv"
    source.write_text("step,worker,compute_time\n0,0,2.0\n0,1,1.0\n0,2,3.0\n1,0,5.0\n1,1,5.0\n1,2,10.0\n")
    subprocess.run([sys.executable, "-m", "bench.traces", str(source), str(tmp_path / "x.csv")], cwd=REPO,
                   check=True, capture_output=True, timeout=60)
    rows = list(csv.reader((tmp_path / "x.csv").open()))
    assert rows == [["iteration", "worker", "factor"], ["0", "0", "2"], ["0", "1", "1"], ["0", "2", "3"],
                    ["1", "0", "1"], ["1", "1", "1"], ["1", "2", "2"]]
    # the committed traces are the conversions of ../shared/traces (when that folder is there)
    shared_traces = REPO.parent / "shared" / "traces"
    if shared_traces.is_dir():
        from bench.traces import slowdown_trace

        for name in ("bytedance-AR", "bytedance-ST"):
            committed = (REPO / "bench" / "traces" / f"{name}.csv").read_text()
            assert committed == slowdown_trace((shared_traces / f"{name}-compute.csv").read_text())


def test_detection_quick_keeps_every_levels_statement_and_the_control_uses_the_wrong_pieces(tmp_path, shared):
    run_quick("detection.py", tmp_path, *shared)
    columns = ["n", "q", "scope", "level", "jobs", "iterations", "trials", "censored", "located_median",
               "located_max", "predicted_median", "wrong_used_per_1000", "caught_share", "predicted_share",
               "false_alarms", "caught", "exposed", "wrong_used", "holds"]
    rows = {(row["scope"], row["level"]): row for row in read_csv(tmp_path / "detection.csv", columns)}
    assert len(rows) == 8
    sample = 0.05  # docs/jobs.md, "Checking replies": each piece confirmed with probability p, default 0.05
    for (scope, level), row in rows.items():
        caught, exposed, used = int(row["caught"]), int(row["exposed"]), int(row["wrong_used"])
        # the statement of docs/jobs.md's table, recomputed here from the raw counts
        if level == "streamed, off":
            kept = caught == 0
        elif level == "streamed, sampled":
            kept = exposed == 0 or caught / exposed >= sample - 3 * math.sqrt(sample * (1 - sample) / exposed)
            assert exposed == 0 or float(row["caught_share"]) == pytest.approx(caught / exposed)
        else:
            kept = used == 0
        assert kept and int(row["false_alarms"]) == 0, row
        assert row["holds"] == "yes", row  # and the benchmark says so too
        if level == "streamed, off":  # no check: the wrong pieces are used and nobody is located
            assert int(row["trials"]) == 0 and not float(row["caught_share"]) > 0  # 0, or NaN: none exposed
            if scope == "every piece":  # q = 1: every used piece of the faulty worker is wrong
                # how many of its pieces are used depends on which copy arrives first (486 and
                # over 500 per 1000 iterations in three runs of one clone): that some are is the control
                assert int(row["wrong_used"]) > 0 and float(row["wrong_used_per_1000"]) > 0
        elif level in ("streamed, strict", "whole, default"):
            assert float(row["wrong_used_per_1000"]) == 0
        if level != "streamed, off" and scope == "every piece":
            assert int(row["trials"]) >= 1  # the faulty worker was located


@pytest.mark.slow  # five jobs on a fresh cluster: make test-slow
def test_check_cost_quick_measures_every_level_against_uncoded_in_one_run(tmp_path, shared):
    run_quick("check_cost.py", tmp_path, *shared)
    rows = read_csv(tmp_path / "check_cost.csv", ["workload", "level", "repeats", "vs_uncoded", "vs_uncoded_low",
                                                 "vs_uncoded_high", "vs_off", "vs_off_low", "vs_off_high",
                                                 "s_per_iteration", "checked_share"])
    logistic = {row["level"]: row for row in rows if row["workload"].startswith("logistic")}
    from coded.jobs.spec.gradient import GradientVerifySpec

    default = f"streamed, sampled {GradientVerifySpec().sample:g} (default)"
    assert list(logistic) == ["uncoded", "streamed, off", default, "streamed, strict", "whole, strict (its default)"]
    assert float(logistic["uncoded"]["vs_uncoded"]) == 1 and float(logistic["streamed, off"]["vs_off"]) == 1
    assert float(logistic["streamed, strict"]["checked_share"]) == 1  # every iteration confirms pieces
    assert float(logistic["streamed, off"]["checked_share"]) == 0
