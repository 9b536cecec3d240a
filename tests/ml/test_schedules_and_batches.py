"""Learning-rate schedules and mini-batches: pure functions of the step (and the partition)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coded.ml.data import batch_rows
from coded.ml.optim import SGD, Adam
from coded.ml.schedules import Cosine, Schedule, Step


def test_warmup_then_constant_step_and_cosine():
    assert [Schedule(warmup=2)(t) for t in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert [Step(every=3, gamma=0.1)(t) for t in (0, 2, 3, 6)] == pytest.approx([1, 1, 0.1, 0.01])
    cosine = Cosine(warmup=1, total=11, floor=0.2)
    assert cosine(0) == 1.0 and cosine(10) == pytest.approx(0.2) and cosine(50) == pytest.approx(0.2)
    assert cosine(6) == pytest.approx(0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * 5 / 9)))


def test_a_batch_is_the_same_for_every_holder_and_an_epoch_covers_the_partition():
    size, batch = 23, 5
    assert np.array_equal(batch_rows(size, batch, 7, 3, 2), batch_rows(size, batch, 7, 3, 2))
    assert not np.array_equal(batch_rows(size, batch, 7, 3, 2), batch_rows(size, batch, 7, 3, 1))
    epoch = np.concatenate([batch_rows(size, batch, 7, t, 2) for t in range(size // batch)])
    assert len(set(epoch.tolist())) == len(epoch) == 20  # disjoint batches; 3 rows sit the epoch out
    next_epoch = np.concatenate([batch_rows(size, batch, 7, t, 2) for t in range(4, 8)])
    assert set(next_epoch.tolist()) != set(epoch.tolist()) or not np.array_equal(np.sort(next_epoch), np.sort(epoch))
    with pytest.raises(ValueError, match="a batch of 30 does not fit a partition of 23 rows"):
        batch_rows(size, 30, 7, 0, 2)


def test_sgd_momentum_and_weight_decay_follow_their_formulas():
    rng = np.random.default_rng(0)
    w, grads = rng.standard_normal(4), rng.standard_normal((5, 4))
    opt, reference, velocity = SGD(0.1, momentum=0.9, weight_decay=0.01), w.copy(), None
    for g in grads:
        w = opt.step(w, g)
        decayed = g + 0.01 * reference
        velocity = decayed if velocity is None else 0.9 * velocity + decayed
        reference = reference - 0.1 * velocity
    assert np.allclose(w, reference, rtol=0, atol=1e-15)


def test_adamw_decays_the_weights_apart_from_the_adaptive_step():
    w, g = np.array([2.0, -3.0]), np.array([0.5, 0.25])
    plain, decayed = Adam(0.01).step(w, g), Adam(0.01, weight_decay=0.1).step(w, g)
    assert np.allclose(decayed, plain - 0.01 * 0.1 * w, rtol=0, atol=1e-15)


def test_a_scheduled_optimizer_resumes_bit_identically():
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((8, 3))
    original = SGD(0.3, momentum=0.5, schedule=Cosine(warmup=2, total=8))
    w = np.zeros(3)
    for g in grads[:3]:
        w = original.step(w, g)
    resumed = SGD(0.3, momentum=0.5, schedule=Cosine(warmup=2, total=8))
    resumed.load_state_dict(original.state_dict())
    a, b = w.copy(), w.copy()
    for g in grads[3:]:
        a, b = original.step(a, g), resumed.step(b, g)
    assert np.array_equal(a, b)
