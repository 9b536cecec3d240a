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


# --- soft errors: the models, their draws, their rate, the partition filter -----------------------

ONE_ENTRY = ("bitflip", "sign", "mantissa", "element")
UNSIGNED = {np.dtype(np.float64): np.uint64, np.dtype(np.float32): np.uint32}


def _message(dtype: type, seed: int, size: int = 50) -> np.ndarray:
    """Entries of either sign and magnitudes 0.5..4, none zero."""
    rng = np.random.default_rng(seed)
    return (rng.choice([-1.0, 1.0], size) * rng.uniform(0.5, 4.0, size)).astype(dtype)


def _changed(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Positions whose bits differ (a sign flip of zero, a NaN: still told apart)."""
    unsigned = UNSIGNED[before.dtype]
    return np.flatnonzero(before.view(unsigned) != after.view(unsigned))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("model", ONE_ENTRY)
def test_one_entry_models_change_exactly_one_entry_by_what_they_say(model, dtype):
    errors = SoftErrors(SoftErrorSpec(probability=1.0, model=model, scale=0.25), 11)
    bits = UNSIGNED[np.dtype(dtype)]
    mantissa_bits = 52 if dtype == np.float64 else 23
    flipped = set()
    for iteration in range(200):
        before = _message(dtype, iteration)
        after = before.copy()
        assert errors.corrupt(after, 0, iteration, 0)
        (position,) = _changed(before, after)  # exactly one entry; every other is bit-identical
        old, new = float(before[position]), float(after[position])
        xor = int(before.view(bits)[position] ^ after.view(bits)[position])
        if model == "sign":
            assert new == -old
        elif model == "element":
            assert new == pytest.approx(old * 1.25, rel=float(np.finfo(dtype).eps))
        elif model == "mantissa":
            # one of the top 8 mantissa bits: the change is 2^-8..2^-1 of the entry's power of two
            bit = xor.bit_length() - 1
            assert xor.bit_count() == 1 and mantissa_bits - 8 <= bit < mantissa_bits
            flipped.add(bit)
            assert abs(new - old) == 2.0 ** (bit - mantissa_bits) * 2.0 ** np.floor(np.log2(abs(old)))
            assert 2.0**-9 < abs(new - old) / abs(old) <= 2.0**-1
        else:  # bitflip: one exponent bit; sign and mantissa kept
            assert xor.bit_count() == 1 and mantissa_bits <= xor.bit_length() - 1 < 8 * np.dtype(dtype).itemsize - 1
    if model == "mantissa":
        assert flipped == set(range(mantissa_bits - 8, mantissa_bits))  # 200 draws reach all 8 bits


@pytest.mark.parametrize("model", ("gaussian", *ONE_ENTRY))
def test_the_same_seed_gives_the_same_corruption(model):
    spec = SoftErrorSpec(probability=0.5, model=model)
    runs = []
    for seed in (5, 5, 6):
        errors, messages = SoftErrors(spec, seed), []
        for iteration in range(30):
            message = _message(np.float64, iteration)
            errors.corrupt(message, 2, iteration, 1)
            messages.append(message)
        runs.append(np.stack(messages))
    assert np.array_equal(runs[0], runs[1], equal_nan=True)
    assert not np.array_equal(runs[0], runs[2], equal_nan=True)


@pytest.mark.parametrize("model", ("gaussian", *ONE_ENTRY))
def test_the_fraction_corrupted_is_the_probability(model):
    """Per worker, iteration and piece: 4000 messages, within 5 binomial sigma of q."""
    q, errors = 0.2, SoftErrors(SoftErrorSpec(probability=0.2, model=model), 9)
    hits = sum(errors.corrupt(np.ones(3), 1, iteration, piece) for iteration in range(400) for piece in range(10))
    draws = 4000
    assert abs(hits - q * draws) < 5 * (draws * q * (1 - q)) ** 0.5


def test_the_gaussian_and_bitflip_draws_are_those_of_before():
    """Replays and recorded experiments depend on them: one generator per (seed, worker, *when,
    salt 2); the probability draw first, then the model's."""
    seed, worker, when = 13, 3, (7, 2)
    message = _message(np.float64, 0)
    gaussian = message.copy()
    errors = SoftErrors(SoftErrorSpec(probability=0.9, model="gaussian", scale=0.5), seed)
    assert errors.corrupt(gaussian, worker, *when)
    rng = np.random.default_rng([seed, worker, *when, 2])
    assert rng.random() < 0.9
    assert np.array_equal(gaussian, message + rng.normal(0.0, 0.5, size=message.shape))

    flipped = message.copy()
    assert SoftErrors(SoftErrorSpec(probability=0.9, model="bitflip"), seed).corrupt(flipped, worker, *when)
    rng = np.random.default_rng([seed, worker, *when, 2])
    rng.random()
    expected = message.copy()
    expected.view(np.uint64)[int(rng.integers(message.size))] ^= np.uint64(1) << np.uint64(rng.integers(52, 63))
    assert np.array_equal(flipped, expected, equal_nan=True)


def test_a_partition_filters_the_same_draws():
    """With ``partition``, a message is corrupted iff it involves the partition and would be
    corrupted without it, and in the same way: the partition composes with the probability."""
    spec = {"probability": 0.3, "model": "mantissa"}
    everywhere, only_2 = SoftErrors(SoftErrorSpec(**spec), 4), SoftErrors(SoftErrorSpec(**spec, partition=2), 4)
    eligible_hits = 0
    for iteration in range(60):
        for piece in range(8):
            partitions = (piece % 4,) if piece < 4 else (piece % 4, (piece + 1) % 4)  # pieces, then stages
            free, filtered = _message(np.float64, piece), _message(np.float64, piece)
            hit = everywhere.corrupt(free, 1, iteration, piece, partitions=partitions)
            eligible = 2 in partitions
            assert only_2.corrupt(filtered, 1, iteration, piece, partitions=partitions) == (hit and eligible)
            if eligible:
                assert np.array_equal(filtered, free)
                eligible_hits += hit
            assert not only_2.corrupt(np.ones(3), 1, iteration, piece)  # partitions unknown: never
    assert 0 < eligible_hits < 180  # 180 eligible messages, q = 0.3


def test_bit_models_refuse_messages_that_are_neither_float64_nor_float32():
    for model in ("bitflip", "mantissa"):
        with pytest.raises(TypeError, match=f"soft error model {model} flips bits of float64 or float32 messages"):
            SoftErrors(SoftErrorSpec(probability=1.0, model=model), 0).corrupt(np.ones(4, np.float16), 0, 0)
    halves = np.ones(4, np.float16)
    assert SoftErrors(SoftErrorSpec(probability=1.0, model="sign"), 0).corrupt(halves, 0, 0)
    assert sorted(halves) == [-1, 1, 1, 1]
