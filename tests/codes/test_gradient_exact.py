"""Exact gradient codes: every allowed responder set gives the plain sum of the partial gradients."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coded.codes import NotDecodableError, gradient_code

from .helpers import messages, relative_error

# (scheme, n, s, params): small enough to check every responder set.
EXHAUSTIVE = [
    ("uncoded", 4, 0, {}),
    ("frc", 6, 2, {}),
    ("frc", 8, 1, {}),
    ("frc", 9, 2, {}),
    ("cyclic", 3, 1, {}),
    ("cyclic", 5, 1, {}),
    ("cyclic", 7, 3, {}),
    ("cyclic", 8, 7, {}),
    ("cyclic", 6, 0, {}),
    ("ye_abbe", 5, 1, {"m": 2}),
    ("ye_abbe", 5, 2, {"m": 1}),
    ("ye_abbe", 8, 2, {"m": 3}),
    ("ye_abbe", 9, 3, {"m": 2}),
    ("ye_abbe", 10, 0, {"m": 4}),
    ("ye_abbe", 7, 2, {"m": 2, "points": "paper"}),
    ("ye_abbe", 7, 2, {"m": 2, "points": "chebyshev"}),
]


@pytest.mark.parametrize(("scheme", "n", "s", "params"), EXHAUSTIVE)
def test_every_responder_set_decodes_the_sum(scheme, n, s, params):
    code = gradient_code(scheme, n=n, s=s, **params)
    rng = np.random.default_rng(n * 100 + s)
    for length in (1, 7, 24):
        partials = rng.standard_normal((code.k, length))
        want = partials.sum(axis=0)  # independent of the code: the plain sum
        sent = messages(code, partials)
        for responders in itertools.combinations(range(n), n - code.s):
            assert code.decodable(responders)
            got = code.decode({i: sent[i] for i in responders}, length=length)
            assert got.shape == (length,)
            assert relative_error(got, want) < 1e-10, responders


@pytest.mark.parametrize(("scheme", "n", "s", "params"), [c for c in EXHAUSTIVE if c[2] > 0])
def test_one_responder_too_few_is_refused(scheme, n, s, params):
    code = gradient_code(scheme, n=n, s=s, **params)
    partials = np.random.default_rng(0).standard_normal((code.k, 5))
    sent = messages(code, partials)
    refused = 0
    for responders in itertools.combinations(range(n), n - s - 1):
        if code.decodable(responders):  # frc can survive more than s stragglers in some patterns
            got = code.decode({i: sent[i] for i in responders})
            assert relative_error(got, partials.sum(axis=0)) < 1e-10
            continue
        refused += 1
        with pytest.raises(NotDecodableError, match="decode"):
            code.decode({i: sent[i] for i in responders})
    assert refused > 0


@pytest.mark.parametrize(("scheme", "n", "s", "params"), EXHAUSTIVE)
def test_every_partition_sits_on_s_plus_1_workers(scheme, n, s, params):
    code = gradient_code(scheme, n=n, s=s, **params)
    for j in range(code.k):
        assert len(code.holders(j)) >= code.s + 1
    # Tandon Theorem 1: total storage at least k(s+1)
    assert sum(len(code.partitions(i)) for i in range(n)) >= code.k * (code.s + 1)


@pytest.mark.parametrize(("n", "s", "m"), [(5, 1, 2), (8, 2, 3), (10, 3, 1), (11, 2, 4)])
def test_ye_abbe_message_size_is_l_over_m(n, s, m):
    code = gradient_code("ye_abbe", n=n, s=s, m=m)
    for length in (2 * m, 10 * m, 10 * m + 1):
        partials = np.ones((n, length))
        message = code.encode(0, {j: partials[j] for j in code.partitions(0)})
        assert message.shape == (code.message_size(length),)
        assert code.message_size(length) <= math.ceil(length / m) + 1
    assert code.message_size(2 * m * 50) == 100
    assert all(len(code.partitions(i)) == s + m for i in range(n))


@st.composite
def exact_codes(draw):
    scheme = draw(st.sampled_from(["frc", "cyclic", "ye_abbe"]))
    n = draw(st.integers(2, 16))
    if scheme == "frc":
        s = draw(st.sampled_from([d - 1 for d in range(1, n + 1) if n % d == 0]))
        params = {}
    elif scheme == "cyclic":
        s = draw(st.integers(0, min(n - 1, 4)))
        params = {}
    else:
        s = draw(st.integers(0, n - 1))
        params = {"m": draw(st.integers(1, n - s))}
    return gradient_code(scheme, n=n, s=s, seed=draw(st.integers(0, 1000)), **params)


@given(code=exact_codes(), length=st.integers(1, 40), data=st.data())
def test_random_codes_decode_random_responder_sets(code, length, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    partials = rng.standard_normal((code.k, length)) * 10.0 ** rng.uniform(-3, 3)
    sent = messages(code, partials)
    responders = data.draw(st.permutations(range(code.n)))[: code.n - code.s]
    got = code.decode({i: sent[i] for i in responders}, length=length)
    assert relative_error(got, partials.sum(axis=0)) < 1e-9


def test_responders_beyond_n_minus_s_also_decode():
    code = gradient_code("cyclic", n=6, s=2, seed=3)
    partials = np.random.default_rng(1).standard_normal((6, 9))
    sent = messages(code, partials)
    for count in (5, 6):
        got = code.decode({i: sent[i] for i in range(count)})
        assert relative_error(got, partials.sum(axis=0)) < 1e-10


def test_decode_weights_are_solved_once_per_responder_set():
    code = gradient_code("ye_abbe", n=6, s=2, m=2)
    first = code.decode_weights([3, 0, 1, 5])
    assert code.decode_weights([0, 1, 3, 5]) is first
    assert first.workers == (0, 1, 3, 5)
    assert first.error_bound < 1e-12
