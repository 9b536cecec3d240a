"""bench.common.summarise_repeats: the median and spread of repeated benchmark runs."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.common import summarise_repeats

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=7))
def test_spread_keys_get_the_median_low_and_high_of_each_point(values):
    runs = [[{"scheme": "uncoded", "n": 8, "t": a}, {"scheme": "cyclic", "n": 8, "t": b}] for a, b in values]
    rows = summarise_repeats(runs, ["t"])
    assert [(r["scheme"], r["n"], r["repeats"]) for r in rows] == [("uncoded", 8, len(values)),
                                                                    ("cyclic", 8, len(values))]
    for row, column in zip(rows, zip(*values, strict=True), strict=True):
        assert row["t"] == pytest.approx(statistics.median(column))
        assert (row["t_low"], row["t_high"]) == (min(column), max(column))


def test_a_single_run_is_its_own_median_low_and_high():
    (row,) = summarise_repeats([[{"scheme": "gpd", "t": 0.25, "loss": 0.5}]], ["t"])
    assert row == {"repeats": 1, "scheme": "gpd", "t": 0.25, "t_low": 0.25, "t_high": 0.25, "loss": 0.5}


def test_other_values_that_differ_take_their_median_and_equal_ones_stay_as_they_are():
    runs = [[{"P": 8, "params": "m=2", "decode_s": d, "count": 3}] for d in (0.3, 0.1, 0.2)]
    (row,) = summarise_repeats(runs, [])
    assert row["decode_s"] == pytest.approx(0.2) and "decode_s_low" not in row
    assert row["count"] == 3 and isinstance(row["count"], int)
    assert row["P"] == 8 and row["params"] == "m=2"


def test_inf_is_the_largest_and_nan_sorts_above_every_number():
    runs = [[{"t": t, "r": r}] for t, r in ((math.inf, math.nan), (1.0, 2.0), (2.0, 1.0))]
    (row,) = summarise_repeats(runs, ["t", "r"])
    assert (row["t_low"], row["t"], row["t_high"]) == (1.0, 2.0, math.inf)
    assert (row["r_low"], row["r"]) == (1.0, 2.0) and math.isnan(row["r_high"])


@pytest.mark.parametrize("runs", [
    [],
    [[{"scheme": "a", "t": 1.0}], [{"scheme": "a", "t": 1.0}, {"scheme": "b", "t": 2.0}]],
    [[{"scheme": "a", "t": 1.0}], [{"scheme": "b", "t": 1.0}]],
])
def test_runs_that_do_not_list_the_same_points_are_refused(runs):
    with pytest.raises(ValueError, match="repeated runs"):
        summarise_repeats(runs, ["t"])
