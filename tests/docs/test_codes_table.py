"""docs/codes.md's generated tables match what the codes report, on any CPU.

The limits tables hold error estimates computed through BLAS, rounded up to a power of ten; a
value at a power of ten rounds to a neighbouring one under another BLAS kernel. The check accepts
that (one decade, or "refused" for the limit decade) and nothing more. These tests build their
variants from this machine's own rendering, so their verdict does not depend on the CPU.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMITS = re.compile(r"<!-- matmul-limits:start -->.*<!-- matmul-limits:end -->", re.S)


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_codes_table", REPO / "docs" / "gen_codes_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(gen: ModuleType) -> str:
    """docs/codes.md with the tables this machine generates (the generator caches them)."""
    return gen.render(gen.DOC.read_text())


def in_limits(text: str, pattern: str, repl: str | Callable[[re.Match[str]], str], count: int = 0) -> str:
    """``re.sub`` on the cells of the limits tables only."""
    region = LIMITS.search(text)
    assert region is not None
    cell = rf"(?<=\| ){pattern}(?= \|)"
    return text[: region.start()] + re.sub(cell, repl, region.group(), count=count) + text[region.end():]


def replace_cell(text: str, old: str, new: str) -> str:
    """``text`` with the first limits-table cell that reads ``old`` reading ``new``."""
    edited = in_limits(text, re.escape(old), new, count=1)
    assert edited != text, f"no {old!r} cell in the limits tables"
    return edited


def first_numeric_cell(text: str) -> str:
    region = LIMITS.search(text)
    assert region is not None
    found = re.search(r"(?<=\| )1e-\d+(?= \|)", region.group())
    assert found is not None
    return found.group()


def check(gen: ModuleType, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the generator's ``--check`` on ``text``, as the command line does."""
    doc = tmp_path / "codes.md"
    doc.write_text(text)
    status = gen.main(["--check", "--doc", str(doc)])
    out = capsys.readouterr()
    assert doc.read_text() == text, "--check must not rewrite the file"
    return status, out.out + out.err


def shifted(cell: str, decades: int) -> str:
    return f"1e{int(cell[2:]) + decades:03d}"


def test_checked_in_docs_pass_the_check(gen, tmp_path, capsys):
    status, out = check(gen, tmp_path, gen.DOC.read_text(), capsys)
    assert status == 0, out


@pytest.mark.parametrize("decades", [-1, 1])
def test_a_cell_one_decade_away_passes(gen, rendered, tmp_path, capsys, decades):
    """What another BLAS kernel does to an estimate that sits at a power of ten."""
    cell = first_numeric_cell(rendered)
    status, out = check(gen, tmp_path, replace_cell(rendered, cell, shifted(cell, decades)), capsys)
    assert status == 0, out


def test_every_numeric_cell_one_decade_up_passes(gen, rendered, tmp_path, capsys):
    text = in_limits(rendered, r"1e-\d+", lambda cell: shifted(cell.group(), 1))
    assert text != rendered
    status, out = check(gen, tmp_path, text, capsys)
    assert status == 0, out


@pytest.mark.parametrize("decades", [-2, 2])
def test_a_cell_two_decades_away_fails(gen, rendered, tmp_path, capsys, decades):
    cell = first_numeric_cell(rendered)
    status, out = check(gen, tmp_path, replace_cell(rendered, cell, shifted(cell, decades)), capsys)
    assert status == 1
    assert "out of date" in out and shifted(cell, decades) in out


def test_refused_and_the_limit_decade_stand_for_each_other(gen, rendered, tmp_path, capsys):
    """Near the limit one machine's estimate passes and another's is just above it: both readings pass."""
    limit = f"1e{gen.decade(gen.DEFAULT_MAX_ERROR):03d}"
    at_limit = replace_cell(rendered, gen.REFUSED, limit)
    status, out = check(gen, tmp_path, at_limit, capsys)
    assert status == 0, out
    assert gen.differences(rendered, at_limit) == []  # the reverse: refused here, at the limit there


def test_refused_for_a_cell_below_the_limit_decade_fails(gen, rendered, tmp_path, capsys):
    below = f"1e{gen.decade(gen.DEFAULT_MAX_ERROR) - 1:03d}"
    status, out = check(gen, tmp_path, replace_cell(rendered, gen.REFUSED, below), capsys)
    assert status == 1
    assert below in out


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: text.replace("| 96 |", "| 97 |", 1), id="row label"),
        pytest.param(lambda text: text.replace("| P \\ s | 1 | 2 |", "| P \\ s | 1 | 3 |", 1), id="column label"),
        pytest.param(lambda text: re.sub(r"\| 16 \|(.*)\|  \|\n", r"| 16 |\1| 1e-13 |\n", text, count=1),
                     id="empty cell filled"),
        pytest.param(lambda text: re.sub(r"\n\| 96 \|[^\n]*", "", text, count=1), id="row removed"),
        pytest.param(lambda text: text.replace("| 7 | 7 x |", "| 8 | 7 x |", 1), id="codes table (exact)"),
    ],
)
def test_a_structural_change_fails(gen, rendered, tmp_path, capsys, edit):
    text = edit(rendered)
    assert text != rendered, "the edit must change something"
    status, out = check(gen, tmp_path, text, capsys)
    assert status == 1, out
