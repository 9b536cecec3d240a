"""Seconds per iteration and time to a loss from a job's history (coded.client.timing), and
`coded compare`'s rows, on job reports made here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coded.cli.compare import compared
from coded.cli.output import finished_line, job_json
from coded.client.reports import IterationRecord, Job, JobState, Verification
from coded.client.timing import iteration_seconds, seconds_to_loss

NAN = float("nan")


def job(job_id: str, ends: list[float], losses: list[float], code: str = "{scheme: cyclic, stragglers: 1}") -> Job:
    """A finished job whose iterations ended at ``ends`` (its clock) with these training losses."""
    spec = ("{kind: gradient_coding, workers: 4, model: {type: logistic}, "
            f"data: {{type: gaussian_mixture, samples: 400, features: 10}}, iterations: {len(ends)}, code: {code}}}")
    history = tuple(IterationRecord(i, loss, end, (0, 1, 2), 0.1, NAN, NAN, NAN, (), True, 0, 0, (), (), (), 0)
                    for i, (end, loss) in enumerate(zip(ends, losses, strict=True)))
    return Job(job_id, "gradient_coding", JobState.SUCCEEDED, spec, len(ends), len(ends), ends[-1], losses[-1], "",
               0.0, ("w0", "w1", "w2", "w3"), {}, Verification("detect", 0, 1e-6, ""), (), history)


def test_seconds_per_iteration_are_the_gaps_of_the_jobs_clock_without_the_first_iteration():
    seconds = iteration_seconds(job("a", [5.0, 6.0, 8.0, 11.0, 15.0], [4, 3, 2, 1, 0.5]))
    # gaps 1, 2, 3, 4: median 2.5, 25th and 75th percentiles (linear) 1.75 and 3.25, the last 4
    assert seconds is not None and (seconds.median, seconds.low, seconds.high, seconds.last, seconds.count) == (
        2.5, 1.75, 3.25, 4.0, 4)
    assert seconds.words() == "2.5 s per iteration (middle half 1.75-3.25 s over 4; last 4 s)"
    assert iteration_seconds(job("b", [5.0], [1.0])) is None


@pytest.mark.parametrize("seed", range(5))
def test_the_quartiles_are_numpys_percentiles_of_the_gaps(seed):
    """Computed in plain Python (`coded status` imports no numpy): numpy's own linear percentiles,
    from uneven gaps over iterations recorded unevenly (as CodeNet's every ``eval_every``)."""
    rng = np.random.default_rng(seed)
    ends = np.cumsum(rng.exponential(1.0, size=int(rng.integers(2, 40)))).tolist()
    seconds = iteration_seconds(job("a", ends, [1.0] * len(ends)))
    gaps = np.diff(ends)  # every iteration recorded: the gaps are the seconds per iteration
    assert seconds is not None and seconds.count == len(gaps) and seconds.last == pytest.approx(gaps[-1])
    assert [seconds.low, seconds.median, seconds.high] == pytest.approx(np.percentile(gaps, [25, 50, 75]), rel=1e-12)
    one = iteration_seconds(job("b", [2.0, 5.0], [1.0, 1.0]))  # one gap: every quartile is it
    assert one is not None and (one.low, one.median, one.high, one.last, one.count) == (3.0, 3.0, 3.0, 3.0, 1)


def test_the_time_to_a_loss_is_the_clock_at_the_first_iteration_that_reached_it():
    finished = job("a", [5.0, 6.0, 8.0], [3.0, 2.0, 1.0])
    assert seconds_to_loss(finished, 2.0) == 6.0 and seconds_to_loss(finished, 1.5) == 8.0
    assert math.isnan(seconds_to_loss(finished, 0.5))


def test_json_and_the_finished_line_carry_the_seconds_per_iteration():
    """Issue 56: status and watch showed the loss and the total time, not seconds per iteration."""
    finished = job("a", [5.0, 6.0, 8.0, 11.0, 15.0], [4, 3, 2, 1, 0.5])
    assert job_json(finished)["seconds_per_iteration"] == {"median": 2.5, "low": 1.75, "high": 3.25, "last": 4.0,
                                                           "count": 4}
    assert ", 2.5 s per iteration (middle half" in finished_line(finished)
    assert job_json(job("b", [5.0], [1.0]))["seconds_per_iteration"] is None


def test_compare_rows_put_jobs_side_by_side_with_ratios_to_the_first():
    """Issue 56: the user parsed --json history by hand to tell which run was faster."""
    uncoded = job("u", [1.0, 3.0, 5.0, 7.0], [3.0, 2.0, 1.5, 1.2], code="{scheme: uncoded}")
    cyclic = job("c", [1.0, 1.5, 2.0, 2.5], [3.0, 2.0, 1.5, 1.0])
    rows = compared([uncoded, cyclic])
    assert [r["code"] for r in rows] == ["uncoded", "cyclic (stragglers=1)"]
    assert rows[0]["loss"] == 1.2  # the highest final loss: one both reached
    assert (rows[0]["s_to_loss"], rows[1]["s_to_loss"]) == (7.0, 2.5)
    assert rows[1]["s_per_iteration_vs_first"] == pytest.approx(0.5 / 2.0)
    assert rows[1]["s_to_loss_vs_first"] == pytest.approx(2.5 / 7.0)
    assert rows[0]["s_per_iteration_vs_first"] == 1.0
    assert compared([uncoded, cyclic], loss=1.5)[1]["s_to_loss"] == 2.0


def test_a_history_of_evaluations_gives_seconds_per_iteration_not_per_evaluation():
    """CodeNet jobs record their evaluations only: every 10 iterations here."""
    evaluated = job("e", [2.0, 3.0, 4.5], [1.0, 0.5, 0.25])
    history = tuple(IterationRecord(**{**r.__dict__, "iteration": 10 * (i + 1)})
                    for i, r in enumerate(evaluated.history))
    seconds = iteration_seconds(Job(**{**evaluated.__dict__, "history": history}))
    assert seconds is not None and (seconds.median, seconds.last) == (0.125, 0.15)
