"""bench.report and bench.headline: docs/results.md's first screen is read from the benchmarks'
CSVs, each number the value its page holds, each verdict the claim's own arithmetic on them."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from bench.headline import CLAIMS, HEADLINE, SYSTEMS, Tables, claims_section, headline_table

REPO = Path(__file__).resolve().parents[2]
FIRST_SCREEN = 50  # lines: the box and the headline table must be there


def write(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def partial_rows() -> list[dict[str, object]]:
    """A partial.csv whose every headline cell holds a value the test knows: 1 + index / 100."""
    rows = []
    for i, (scenario, mode) in enumerate((s, m) for s in ("none", "2 late 1 s", "1 slow 2.4x", "1 at 10% of a core",
                                                           "trace AR", "trace ST")
                                         for m in ("uncoded", "streamed, sampled")):
        value = 1 + i / 100
        rows.append({"workload": "logistic 48000x500", "scenario": scenario, "mode": mode, "vs_healthy": value,
                     "vs_healthy_low": value - 0.5, "vs_healthy_high": value + 0.5})
    return rows


def test_every_headline_cell_is_its_pages_value_linked_and_marked_when_stale(tmp_path):
    write(tmp_path / "partial.csv", partial_rows())
    table = headline_table(Tables(tmp_path, stale={"partial"}))
    lines = [line for line in table.splitlines() if line.startswith("| ") and "scenario" not in line]
    assert [line.split(" | ")[0][2:] for line in lines] == [scenario for scenario, _ in HEADLINE]
    late = lines[1].split(" | ")
    # the late row's coded cell is the 4th value written above (index 3), with its range
    assert late[2] == "[1.03× (0.53–1.53)](../bench/results/partial.md) (stale)"
    assert late[3] == "not measured" and late[4].startswith("not measured")  # no ddp.csv, no mpi.csv here


def test_a_cell_without_a_within_run_ratio_is_a_ratio_of_medians_with_the_widest_range(tmp_path):
    rows = [{"series": "slow link", "s": 1, "slowdown": f, "system": system, "s_per_iteration": t,
             "s_per_iteration_low": t * 0.9, "s_per_iteration_high": t * 1.1}
            for f, system, t in ((1, "naive", 2.0), (16, "naive", 8.0), (16, "cyclic", 2.2))]
    write(tmp_path / "tandon_links.csv", rows)
    link_row = next(line for line in headline_table(Tables(tmp_path, set())).splitlines() if "link 16×" in line)
    cells = link_row.split(" | ")
    assert cells[1].startswith(f"[{8 / 2:.2f}× ({7.2 / 2.2:.2f}–{8.8 / 1.8:.2f})]")
    assert cells[2].startswith(f"[{2.2 / 2:.2f}× ({1.98 / 2.2:.2f}–{2.42 / 1.8:.2f})]")


@pytest.mark.parametrize(("over_m1", "over_naive", "held"), [(0.25, 0.35, True), (0.22, 0.40, False),
                                                             (0.30, 0.31, False)])
def test_ye_and_abbes_verdict_is_their_23_and_32_percent_at_every_n(tmp_path, over_m1, over_naive, held):
    rows = [{"n": n, "system": "best m>1", "faster_than_best_m1": over_m1 if n == 15 else 0.5,
             "faster_than_naive": over_naive if n == 20 else 0.5} for n in (10, 15, 20)]
    write(tmp_path / "yeabbe.csv", rows)
    claim = next(c for c in CLAIMS if c.pages == ("yeabbe",))
    text, verdict = claim.measure(Tables(tmp_path, set()))
    assert verdict is held
    assert f"{100 * over_m1:.0f}% (n = 15)" in text


def test_a_claim_whose_page_is_missing_says_not_measured(tmp_path):
    section = claims_section(Tables(tmp_path, set()))
    assert section.count("not measured: its page is missing") == len([c for c in CLAIMS if c.pages])
    assert "**held**" in section  # Table 3 is computed from the model, not read


def test_the_report_lists_every_page_and_names_those_not_run(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "codenet.md").write_text("# CodeNet\n\n- machine: measured 2026-01-02 03:04 UTC on x\n\nbody\n")
    (results / "lwpd.md").write_text("# LWPD\n\n- machine: measured 2026-01-03 04:05 UTC on x\n"
                                     "- code: commit 0000000, release 9.9.9\n\nbody\n")
    out = tmp_path / "docs" / "results.md"
    done = subprocess.run([sys.executable, "-m", "bench.report", "--results", str(results), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "](../results/codenet.md): 2026-01-02 03:04 UTC." in text
    # a page without a commit line cannot show it measured the code as it is
    assert "> **Stale**: the page does not say which commit it measured." in text
    # each page names its release
    assert "](../results/lwpd.md): 2026-01-03 04:05 UTC, release 9.9.9, commit 0000000." in text
    assert "not run (no `matmul.md`" in text


def test_the_committed_first_screen_holds_the_box_and_the_headline():
    lines = (REPO / "docs" / "results.md").read_text().splitlines()
    first = "\n".join(lines[:FIRST_SCREEN])
    assert sum(line.startswith("> - **") for line in lines[:FIRST_SCREEN]) == 5  # the box
    assert "| scenario | " + " | ".join(SYSTEMS) + " |" in first
    assert all(f"| {scenario} |" in first for scenario, _ in HEADLINE)
