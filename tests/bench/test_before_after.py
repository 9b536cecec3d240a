"""bench.before_after's comparison: one after/before ratio per round and row, their median and
range, and whether the range holds 1."""

from __future__ import annotations

import pytest

from bench.before_after import compare


def test_each_rows_ratios_are_taken_within_a_round():
    before = [{"a": 2.0, "b": 1.0}, {"a": 4.0, "b": 1.0}, {"a": 3.0, "b": 1.0}]
    after = [{"a": 1.8, "b": 2.0}, {"a": 4.4, "b": 3.0}, {"a": 3.0, "b": 2.5}]
    rows = {row["row"]: row for row in compare(before, after, "partial")}
    # a: 0.9, 1.1, 1.0 within the rounds (the medians of each side alone would say 3.0 / 3.0)
    assert rows["a"]["ratio"] == pytest.approx(1.0)
    assert (rows["a"]["ratio_low"], rows["a"]["ratio_high"]) == pytest.approx((0.9, 1.1))
    assert rows["a"]["holds_1"] == "yes"
    assert rows["b"]["ratio"] == pytest.approx(2.5) and rows["b"]["holds_1"] == "no"
    assert rows["b"]["measure"] == "s_per_iteration"


def test_a_row_missing_from_a_round_is_compared_over_the_others():
    rows = compare([{"a": 1.0}, {"a": 1.0}], [{"a": 1.2}, {}], "mpi")
    assert rows[0]["ratio"] == pytest.approx(1.2) and rows[0]["after"] == pytest.approx(1.2)
