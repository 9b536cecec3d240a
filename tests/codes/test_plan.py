"""The runtime model and planner (common/plan.py) against Ye & Abbe's Table 3 and Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from coded.codes.plan import RuntimeModel, ShiftedExponential, expected_iteration_seconds, plan, table3

# Ye & Abbe, Table 3 (n = 8, lambda1 = 0.8, lambda2 = 0.1, t1 = 1.6, t2 = 6): rows m, columns d.
PAPER_TABLE3 = {
    1: [36.1138, 29.2288, 27.3351, 26.7469, 26.4574, 26.0891, 25.4172, 24.1063],
    2: [23.1036, 21.3994, 21.5369, 21.9114, 22.2099, 22.3189, 22.1405],
    3: [22.2604, 21.3697, 21.5749, 21.9095, 22.1707, 22.2772],
    4: [24.8036, 23.2793, 23.1114, 23.1862, 23.2611],
    5: [28.5800, 25.9827, 25.2862, 25.0141],
    6: [32.8664, 29.0745, 27.7904],
    7: [37.3977, 32.3759],
    8: [42.0638],
}


def test_table3_of_the_paper_is_reproduced_to_its_decimals():
    ours = table3()
    paper = {(m, m + i): value for m, row in PAPER_TABLE3.items() for i, value in enumerate(row)}
    assert set(ours) == set(paper)
    worst = max(abs(ours[key] - paper[key]) for key in paper)
    assert worst < 1e-3, worst
    assert min(ours, key=ours.get) == (3, 4)  # the paper's optimum: m = 3, d = 4, s = 1


@pytest.mark.parametrize("n, s, d, m", [(10, 2, 4, 2), (6, 0, 1, 1), (12, 5, 6, 1)])
def test_expected_time_agrees_with_monte_carlo(n, s, d, m):
    model = RuntimeModel(ShiftedExponential(0.01, 0.004), ShiftedExponential(0.02, 0.01),
                         ShiftedExponential(0.05, 0.2))
    rng = np.random.default_rng(7)
    draws = 200_000
    times = sum(term.sample(rng, (draws, n)) for term in model.worker_time(d, m))
    finish = np.sort(times, axis=1)[:, n - s - 1]
    standard_error = finish.std() / np.sqrt(draws)
    assert abs(expected_iteration_seconds(model, n, s, d, m) - finish.mean()) < 4 * standard_error


def test_fit_recovers_a_shifted_exponential():
    samples = ShiftedExponential(0.3, 0.2).sample(np.random.default_rng(1), 100_000)
    fitted = ShiftedExponential.fit(samples)
    assert abs(fitted.shift - 0.3) < 1e-3 and abs(fitted.mean - 0.2) < 3e-3
    with pytest.raises(ValueError, match="two finite samples"):
        ShiftedExponential.fit([1.0])


def test_plan_ranks_every_code_by_its_expected_time():
    model = RuntimeModel(ShiftedExponential(1.6, 1 / 0.8), ShiftedExponential(6.0, 1 / 0.1))
    ranked = plan(model, 8)
    assert len(ranked) == 36  # uncoded and every (s, m) with s + m <= 8 but (0, 1)
    assert [c.predicted_s for c in ranked] == sorted(c.predicted_s for c in ranked)
    assert (ranked[0].s, ranked[0].m, ranked[0].d) == (1, 3, 4)
    uncoded = next(c for c in ranked if c.scheme == "uncoded")
    assert uncoded.predicted_s == pytest.approx(36.1138, abs=1e-3)
    assert ranked[0].code() == {"scheme": "ye_abbe", "stragglers": 1, "m": 3}


def test_a_checked_plan_holds_one_partition_more_and_still_waits_for_n_minus_s():
    model = RuntimeModel(ShiftedExponential(1.6, 1 / 0.8), ShiftedExponential(6.0, 1 / 0.1))
    ranked = plan(model, 8, check=1)
    coded = [c for c in ranked if c.scheme != "uncoded"]
    assert len(coded) == 28  # every (s, m) with s + 1 + m <= 8, s = 0 included (checked, waits for all)
    for candidate in coded:
        assert candidate.d == candidate.s + 1 + candidate.m
        # the iteration ends at the (n - s)-th fastest worker, each holding d partitions
        assert candidate.predicted_s == expected_iteration_seconds(model, 8, candidate.s, candidate.d, candidate.m)
        assert candidate.code() == {"scheme": "ye_abbe", "stragglers": candidate.s, "m": candidate.m}
    unchecked = {(c.s, c.m): c.predicted_s for c in plan(model, 8)}
    assert all(c.predicted_s > unchecked[c.s, c.m] for c in coded if (c.s, c.m) in unchecked)  # the check costs


def test_the_streamed_bound_is_one_partitions_time_without_spread_and_never_above_uncoded():
    from coded.codes.plan import expected_streamed_seconds

    steady = RuntimeModel(ShiftedExponential(0.01), ShiftedExponential(0.005), ShiftedExponential(0.02))
    assert expected_streamed_seconds(steady, 6) == pytest.approx(0.035, rel=1e-12)  # d + m + c of one partition
    for compute, delay in ((ShiftedExponential(0.01, 0.005), ShiftedExponential(0.0, 0.05)),
                           (ShiftedExponential(1.6, 1 / 0.8), ShiftedExponential(0.0))):
        model = RuntimeModel(compute, ShiftedExponential(0.005, 0.001), delay)
        streamed = expected_streamed_seconds(model, 8)
        # sample by sample, by the time the slowest worker has done its own partition, n are done
        assert streamed <= expected_iteration_seconds(model, 8, 0, 1, 1) * 1.02
        assert streamed >= model.compute.shift + model.communicate.shift
    ranked = plan(steady, 6, check=1, streamed=True)
    streamed_code = next(c for c in ranked if c.streamed)
    assert streamed_code.code() == {"scheme": "cyclic", "stragglers": 1}


def test_fitting_a_job_on_links_keeps_the_links_share_the_computings_and_the_rest_apart():
    from coded.codes.plan import fit_link_costs

    rng = np.random.default_rng(3)
    compute = rng.uniform(0.004, 0.006, (20, 5)) * 2  # 2 partitions per responder
    transfer = rng.uniform(0.07, 0.09, (20, 5))  # replies of half a gradient each
    overhead = 0.03
    durations = [overhead + float(np.max(c + t)) for c, t in zip(compute, transfer, strict=True)]
    per_partition, send, rest = fit_link_costs(durations, compute.tolist(), transfer.tolist(), 2, share=0.5)
    # independently: the unbiased shifted-exponential fit of compute / d, the median trip of a whole gradient
    samples = (compute / 2).ravel()
    mean = samples.size / (samples.size - 1) * (samples.mean() - samples.min())
    assert per_partition.mean == pytest.approx(mean)
    assert per_partition.shift == pytest.approx(samples.min() - mean / samples.size)
    assert send.shift == pytest.approx(np.median(transfer.ravel() / 0.5)) and send.mean == 0
    assert rest == pytest.approx(overhead)
    with pytest.raises(ValueError, match=r"share must be in \(0, 1\]"):
        fit_link_costs(durations, compute.tolist(), transfer.tolist(), 2, share=0)

