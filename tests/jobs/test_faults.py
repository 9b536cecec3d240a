"""Seeded faults: the same draws for the same (seed, iteration, worker), the models' shapes."""

from __future__ import annotations

import numpy as np
import pytest

from coded.jobs.faults import SoftErrors, Stragglers, parse_trace
from coded.jobs.spec.faults import SoftErrorSpec, StragglerSpec


def test_delays_are_a_function_of_seed_iteration_worker():
    spec = StragglerSpec(model="shifted_exponential", shift=0.02, mean=0.05)
    a, b = Stragglers(spec, 7), Stragglers(spec, 7)
    draws = [[a.delay(it, w) for w in range(8)] for it in range(50)]
    assert draws == [[b.delay(it, w) for w in range(8)] for it in range(50)]
    flat = np.array(draws)
    assert flat.min() >= 0.02
    assert abs(flat.mean() - 0.07) < 0.01  # shift + mean, 400 draws
    assert Stragglers(spec, 8).delay(0, 0) != a.delay(0, 0)


@pytest.mark.parametrize(
    ("spec", "check"),
    [
        (StragglerSpec(model="fixed", workers=[1, 3], delay=1.0), lambda d, w: d == (1.0 if w in (1, 3) else 0.0)),
        (StragglerSpec(model="exponential", mean=0.1, workers=[0]), lambda d, w: (d > 0) == (w == 0)),
        (StragglerSpec(model="pareto", scale=0.01, shape=2.0), lambda d, w: d >= 0.01),
        (StragglerSpec(model="none"), lambda d, w: d == 0.0),
    ],
)
def test_models(spec, check):
    stragglers = Stragglers(spec, 1)
    assert all(check(stragglers.delay(it, w), w) for it in range(20) for w in range(4))


def test_cpu_contention_and_trace():
    assert Stragglers(StragglerSpec(model="cpu", workers=[2], threads=3), 0).busy_threads(2) == 3
    assert Stragglers(StragglerSpec(model="cpu", workers=[2]), 0).busy_threads(1) == 0
    trace = parse_trace("iteration,worker,delay\n0,1,0.5\n3,2,1.25\n")
    stragglers = Stragglers(StragglerSpec(model="trace", path="t.csv"), 0, trace)
    assert stragglers.delay(0, 1) == 0.5 and stragglers.delay(3, 2) == 1.25 and stragglers.delay(1, 1) == 0.0
    with pytest.raises(ValueError, match="row 2"):
        parse_trace("0,1,0.5\n1,x,2\n")


def test_soft_errors_are_seeded_and_limited_to_workers():
    errors = SoftErrors(SoftErrorSpec(probability=0.5, model="gaussian", scale=10.0, workers=[1]), 3)
    hits = []
    for iteration in range(40):
        message = np.zeros(16)
        hits.append(errors.corrupt(message, 1, iteration))
        assert hits[-1] == bool(np.any(message))
        untouched = np.zeros(16)
        assert not errors.corrupt(untouched, 0, iteration) and not np.any(untouched)
    assert 5 < sum(hits) < 35
    again = SoftErrors(SoftErrorSpec(probability=0.5, model="gaussian", scale=10.0, workers=[1]), 3)
    assert [again.corrupt(np.zeros(16), 1, it) for it in range(40)] == hits


def test_soft_errors_start_at_their_first_iteration():
    errors = SoftErrors(SoftErrorSpec(probability=1.0, scale=1.0, start=5), 3)
    messages = [np.zeros(4) for _ in range(8)]
    hits = [errors.corrupt(message, 0, iteration, 2) for iteration, message in enumerate(messages)]
    assert hits == [False] * 5 + [True] * 3
    assert [bool(np.any(m)) for m in messages] == hits


def test_bit_flips_change_exactly_one_value_a_lot():
    errors = SoftErrors(SoftErrorSpec(probability=1.0, model="bitflip"), 0)
    message = np.ones(100)
    assert errors.corrupt(message, 0, 0)
    changed = np.flatnonzero(message != 1.0)
    assert len(changed) == 1
    assert not np.isfinite(message[changed[0]]) or abs(message[changed[0]]) > 2 or abs(message[changed[0]]) < 0.5


def test_slowdowns_fixed_uniform_and_traces():
    from coded.jobs.faults import Slowdowns
    from coded.jobs.spec.faults import SlowdownSpec

    fixed = Slowdowns(SlowdownSpec(model="fixed", workers=[2], factor=2.4), 0)
    assert [fixed.factor(5, w) for w in range(4)] == [1.0, 1.0, 2.4, 1.0]
    uniform = SlowdownSpec(model="uniform", low=1.5, high=3.0)
    draws = np.array([[Slowdowns(uniform, 7).factor(it, w) for w in range(6)] for it in range(40)])
    assert draws.min() >= 1.5 and draws.max() <= 3.0 and draws.std() > 0.2
    assert np.array_equal(draws, [[Slowdowns(uniform, 7).factor(it, w) for w in range(6)] for it in range(40)])
    # a trace of 2 iterations and 4 workers, replayed: iterations cycle, 2 workers take ranks 0 and 2
    trace = parse_trace("iteration,worker,factor\n0,0,1\n0,1,1.5\n0,2,2\n0,3,1\n1,0,3\n1,1,1\n1,2,1\n1,3,1\n",
                        value="factor")
    replay = Slowdowns(SlowdownSpec(model="trace", path="t.csv"), 0, trace, workers=2)
    assert [[replay.factor(it, w) for w in range(2)] for it in range(4)] == [[1, 2], [3, 1], [1, 2], [3, 1]]
    wide = Slowdowns(SlowdownSpec(model="trace", path="t.csv"), 0, trace, workers=6)
    assert [wide.factor(0, w) for w in range(6)] == [1, 1.5, 2, 1, 1, 1.5]  # more workers than the trace's
    with pytest.raises(ValueError, match=r"trace row 1: out of range .*the factor must be in 1\.\.1000"):
        parse_trace("0,0,0.5\n", value="factor")


def test_a_faults_section_gives_every_system_the_same_draws():
    """``faults_of`` is what a worker and bench.ddp's ranks both call: the draws are the section's."""
    from coded.jobs.faults import faults_of
    from coded.jobs.spec.faults import FaultSpec

    section = FaultSpec.model_validate({
        "stragglers": {"model": "trace", "path": "delays.csv"},
        "slowdown": {"model": "trace", "path": "factors.csv"},
        "soft_errors": {"probability": 0.5, "model": "gaussian", "scale": 1.0}})
    delays, factors = "0,1,0.25\n2,0,1.5\n", "iteration,worker,factor\n0,0,2.5\n1,1,1.25\n"
    faults = faults_of(section, 3, 2, delays, factors)
    assert [[faults.stragglers.delay(t, w) for w in range(2)] for t in range(3)] == [[0, 0.25], [0, 0], [1.5, 0]]
    assert [[faults.slowdowns.factor(t, w) for w in range(2)] for t in range(2)] == [[2.5, 1], [1, 1.25]]
    assert faults.soft_errors == SoftErrors(section.soft_errors, 3)
    with pytest.raises(ValueError, match="trace row 2: out of range"):
        faults_of(section, 3, 2, delays, "0,0,1\n0,1,0.5\n")
    plain = faults_of(FaultSpec(), 3, 2)  # no traces needed: none is read
    assert plain.stragglers.delay(0, 0) == 0 and plain.slowdowns.factor(0, 0) == 1


def test_a_fault_applies_to_exactly_the_workers_it_can_touch():
    """``applies`` is what a worker asks once per job to skip the draws (a plain share): where it
    says no, no iteration draws a delay, a slowdown or a corruption; where it says yes, some do."""
    from coded.jobs.faults import Slowdowns
    from coded.jobs.spec.faults import SlowdownSpec

    faults = [(Stragglers(StragglerSpec(model="exponential", mean=0.1, workers=[1, 2]), 4),
               lambda f, it, w: f.delay(it, w) > 0),
              (Slowdowns(SlowdownSpec(model="uniform", low=1.5, high=3.0, workers=[1, 2]), 4),
               lambda f, it, w: f.factor(it, w) > 1),
              (SoftErrors(SoftErrorSpec(probability=0.5, scale=1.0, workers=[1, 2]), 4),
               lambda f, it, w: f.corrupt(np.zeros(4), w, it))]
    for fault, touched in faults:
        for worker in range(4):
            hits = sum(touched(fault, it, worker) for it in range(40))
            assert fault.applies(worker) == (worker in (1, 2)) == (hits > 0)
    assert not any(SoftErrors(SoftErrorSpec(probability=0.0), 4).applies(w) for w in range(4))
