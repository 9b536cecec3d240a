"""bench.common.relative_to: each row of a run over its group's base row, as the headline compares."""

from __future__ import annotations

import pytest

from bench.common import relative_to


def test_each_row_is_divided_by_the_base_row_of_its_own_group():
    rows = [{"workload": "a", "system": "uncoded", "t": 2.0}, {"workload": "a", "system": "coded", "t": 3.0},
            {"workload": "b", "system": "coded", "t": 1.0}, {"workload": "b", "system": "uncoded", "t": 4.0}]
    relative_to(rows, "t", "ratio", "workload", lambda row: row["system"] == "uncoded")
    assert [row["ratio"] for row in rows] == [1.0, 1.5, 0.25, 1.0]


@pytest.mark.parametrize("systems", [["coded"], ["uncoded", "uncoded"]])
def test_a_group_without_exactly_one_base_is_refused(systems):
    rows = [{"workload": "a", "system": system, "t": 1.0} for system in systems]
    with pytest.raises(ValueError, match="workload 'a' has"):
        relative_to(rows, "t", "ratio", "workload", lambda row: row["system"] == "uncoded")
