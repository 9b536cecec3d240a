"""Real systematic MDS codes under the probabilistic error model (spec/000 Theorem 3)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from coded.codes import DecodingFailure, NotDecodableError
from coded.codes.mds import SystematicMDS

TRIALS = 300


@pytest.mark.parametrize(("k", "r"), [(1, 4), (2, 5), (3, 6), (4, 7), (5, 12)])
def test_generator_is_systematic_and_every_k_subset_invertible(k, r):
    code = SystematicMDS(k, r)
    np.testing.assert_array_equal(code.generator[:k], np.eye(k))
    for rows in itertools.combinations(range(r), k):
        assert np.linalg.cond(code.generator[list(rows)]) < 1e6


@pytest.mark.parametrize(("k", "r"), [(2, 5), (3, 7), (4, 8), (5, 12)])
def test_random_error_patterns_are_corrected_or_detected(k, r):
    """Zero undetected wrong answers over hundreds of random patterns, every weight 0..r."""
    code = SystematicMDS(k, r, seed=k)
    rng = np.random.default_rng(100 * k + r)
    outcomes = {"corrected": 0, "detected": 0}
    for trial in range(TRIALS):
        count = trial % (r + 1)  # every number of wrong symbols, equally often
        x = rng.standard_normal((k, 3, 2))
        y = code.encode(x)
        wrong = sorted(rng.choice(r, count, replace=False).tolist())
        y[wrong] += rng.standard_normal((count, 3, 2)) * 10.0 ** rng.uniform(-3, 3)
        if count <= r - k - 1:
            got, located = code.decode(y)
            assert list(located) == wrong
            np.testing.assert_allclose(got, x, atol=1e-9)
            outcomes["corrected"] += 1
        else:
            with pytest.raises(DecodingFailure):
                code.decode(y)
            outcomes["detected"] += 1
    assert outcomes["corrected"] and outcomes["detected"]


def test_scalar_symbols_and_erasures():
    code = SystematicMDS(3, 7)
    x = np.array([1.0, -2.0, 0.5])
    y = code.encode(x)
    y[5] = 99.0
    got, wrong = code.decode(y, erased=[0])
    assert wrong == (5,)
    np.testing.assert_allclose(got, x, atol=1e-12)
    with pytest.raises(NotDecodableError, match="need 3 symbols"):
        code.decode(y, erased=[0, 1, 2, 3, 4])


def test_bad_arguments():
    with pytest.raises(ValueError, match="r >= k"):
        SystematicMDS(4, 3)
    with pytest.raises(ValueError, match="expected 3 data symbols"):
        SystematicMDS(3, 5).encode(np.ones(4))
    with pytest.raises(ValueError, match="expected 5 coded symbols"):
        SystematicMDS(3, 5).decode(np.ones(4))


def test_an_enormous_wrong_symbol_does_not_hide_another():
    code = SystematicMDS(3, 8)
    x = np.random.default_rng(4).standard_normal((3, 5))
    y = code.encode(x)
    y[1, 2] = 9e307  # an exponent bit flip
    y[6] += 0.01
    got, wrong = code.decode(y)
    assert wrong == (1, 6)
    np.testing.assert_allclose(got, x, atol=1e-9)


def test_non_finite_symbols_are_wrong_symbols():
    code = SystematicMDS(2, 6)
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    y = code.encode(x)
    y[0, 1] = np.nan
    y[4, 0] = np.inf
    got, wrong = code.decode(y)
    assert wrong == (0, 4)
    np.testing.assert_allclose(got, x, atol=1e-12)
    y[2, 0] = np.nan
    assert code.decode(y)[1] == (0, 2, 4)  # r - k - 1 = 3 wrong symbols: still corrected
    y[3, 1] = np.inf
    with pytest.raises(DecodingFailure):
        code.decode(y)
