"""The README and docs/results.md are read by newcomers: no sentence in them runs over 40 words
(issue 38)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MOST_WORDS = 40


def sentences(markdown: str) -> list[str]:
    """The prose sentences of a markdown text: code blocks, tables and headings left out, a list
    item or a paragraph split at a full stop, question or exclamation mark followed by a space."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    prose = re.sub(r"([.!?])(\*\*)", r"\2\1", prose)  # "... unnoticed.** Next": the stop ends the sentence
    paragraphs, current = [], []
    for line in prose.splitlines():
        line = re.sub(r"^(\s*)> ?", r"\1", line)  # a quoted line is prose like any other
        if not line.strip() or line.lstrip().startswith(("|", "#", "- ", "* ")) or re.match(r"\s*\d+\. ", line):
            if current:
                paragraphs.append(" ".join(current))
            current = [line.lstrip("-*0123456789. ")] if line.lstrip().startswith(("- ", "* ")) else []
            continue
        current.append(line.strip())
    if current:
        paragraphs.append(" ".join(current))
    return [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[*])", p) if s.strip()]


def words(sentence: str) -> int:
    return len(re.sub(r"\([^)]*\)\([^)]*\)|\]\([^)]*\)", "]", sentence).split())


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_no_sentence_runs_over_40_words(page):
    long = [(words(s), s[:100]) for s in sentences((REPO / page).read_text()) if words(s) > MOST_WORDS]
    assert not long, "\n".join(f"{n} words: {text}..." for n, text in long)
