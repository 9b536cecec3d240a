"""Every number in docs/results.md is current or marked: the report marks every page whose
benchmark ran on code that has changed since (bench/staleness.py), and the verdict is right."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.report import PAGES
from bench.staleness import _code, _definitions, staleness

REPO = Path(__file__).resolve().parents[2]


def entry(report: str, title: str) -> str:
    """A page's entry in the report's index: its line and the mark under it, if any."""
    lines = report.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"- [{title}]("))
    return "\n".join(lines[at: at + 2])


def test_the_committed_report_marks_every_page_that_no_longer_measures_the_code():
    report = (REPO / "docs" / "results.md").read_text()
    wrong = []
    for name, title in PAGES:
        page = REPO / "bench" / "results" / f"{name}.md"
        if not page.exists():
            continue
        verdict = staleness(name, page.read_text())
        if verdict.why.startswith("this clone's history lacks"):
            continue  # a shallow clone cannot tell; the report was written where it could
        # a current page still marked only over-warns until the report is written again; a stale
        # one without the mark would pass off old numbers as the code's
        if verdict.stale and "\n  > **Stale**:" not in entry(report, title):
            wrong.append(f"{name}: {verdict.why}")
    assert not wrong, ("docs/results.md shows stale pages without the mark (run `python -m bench.report`, or "
                       "rerun the benchmark):\n" + "\n".join(wrong))


def test_docstrings_and_comments_are_not_code_but_a_changed_value_is():
    source = 'def f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n'
    assert _code(source) == _code('def f(x):\n    """Two times x, reworded."""\n    return 2 * x\n')
    assert _code(source) == _code("def f(x):\n    return 2 * x\n")
    assert _code(source) != _code('def f(x):\n    """Twice x."""\n    return 3 * x\n')


def test_a_definition_moved_between_modules_is_the_same_code_but_an_edited_one_is_not():
    before = ["from x import y\n__all__ = ['f', 'g']\n\ndef f():\n    return y\n\ndef g():\n    return 1\n", ""]
    moved = ["from x import y\nfrom b import g\n__all__ = ['f']\n\ndef f():\n    return y\n",
             '"""b."""\n__all__ = ["g"]\n\ndef g():\n    return 1\n']
    edited = [moved[0], moved[1].replace("return 1", "return 2")]

    def together(sources: list[str]) -> list[str]:
        return sorted(d for source in sources for d in _definitions(source))

    assert together(before) == together(moved)
    assert together(before) != together(edited)


def test_a_page_that_cannot_show_it_measured_the_code_as_it_is_is_stale():
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()[0][:7]
    assert staleness("numerics", "no code line").why == "the page does not say which commit it measured"
    assert "uncommitted changes" in staleness("numerics", f"- code: commit {first} with uncommitted changes to x").why
    assert "lacks commit" in staleness("numerics", "- code: commit 0000000").why
    # the first commit of the repository predates the codes as they are
    assert "has changed since commit" in staleness("numerics", f"- code: commit {first}").why
