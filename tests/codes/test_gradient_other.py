"""Baselines, the partial-straggler scheme, LWPD, and argument errors."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from coded.codes import IllConditionedError, NotDecodableError, gradient_code
from coded.codes.linear import LinearDecoder

from .helpers import messages, relative_error


def test_uncoded_waits_for_everyone():
    code = gradient_code("uncoded", n=4, s=2)
    assert code.s == 0
    g = np.random.default_rng(0).standard_normal((4, 3))
    sent = messages(code, g)
    np.testing.assert_allclose(code.decode(sent), g.sum(axis=0))
    assert not code.decodable([0, 1, 2])
    with pytest.raises(NotDecodableError, match="any 4 of the 4"):
        code.decode({i: sent[i] for i in range(3)})


def test_ignore_stragglers_rescales_what_arrived():
    code = gradient_code("ignore_stragglers", n=5, s=1)
    assert not code.exact
    g = np.random.default_rng(1).standard_normal((5, 6))
    sent = messages(code, g)
    got = code.decode({i: sent[i] for i in (0, 2, 3, 4)})
    np.testing.assert_allclose(got, g[[0, 2, 3, 4]].sum(axis=0) * 5 / 4)
    assert code.describe()["data_per_worker"] == pytest.approx(1 / 5)
    with pytest.raises(NotDecodableError):
        code.decode({i: sent[i] for i in (0, 1, 2)})


@pytest.mark.parametrize(("n", "s", "alpha", "partitions"), [(3, 1, 2.0, 9), (12, 1, 1.2, 132), (4, 2, 2.5, 12)])
def test_partial_scheme_counts(n, s, alpha, partitions):
    code = gradient_code("partial", n=n, s=s, alpha=alpha)
    assert code.k == partitions
    naive = round((s + 1) / (alpha - 1))
    assert all(len(code.naive_partitions(i)) == naive for i in range(n))
    assert code.expected_fraction() == pytest.approx((s + 1) * alpha / (n * (s + alpha)))
    assert len(code.partitions(0)) / code.k == pytest.approx(code.expected_fraction())


@pytest.mark.parametrize("base", ["cyclic", "frc", "ye_abbe"])
def test_partial_decodes_with_stage_one_from_stragglers(base):
    n, s = 6, 1
    code = gradient_code("partial", n=n, s=s, alpha=2.0, base=base)
    g = np.random.default_rng(2).standard_normal((code.k, 5))
    sent = messages(code, g)
    for stragglers in itertools.combinations(range(n), s):
        got = code.decode({i: sent[i][:5] if i in stragglers else sent[i] for i in range(n)})
        assert relative_error(got, g.sum(axis=0)) < 1e-10
        assert code.decodable({i: 1 if i in stragglers else 2 for i in range(n)})
    # a worker that sent nothing at all breaks the naive part
    assert not code.decodable({i: 2 for i in range(1, n)})
    with pytest.raises(NotDecodableError, match="stage 1 from all"):
        code.decode({i: sent[i] for i in range(1, n)})


def test_partial_rejects_alpha_that_does_not_divide():
    with pytest.raises(ValueError, match=r"\(s\+1\)/\(alpha-1\)"):
        gradient_code("partial", n=4, s=1, alpha=1.5 + 0.1)


@pytest.mark.parametrize(("n", "t"), [(8, 2), (16, 2), (16, 4), (32, 8)])
def test_lwpd_contributions(n, t):
    code = gradient_code("lwpd", n=n, t=t)
    k = n // 2
    rng = np.random.default_rng(n + t)
    length = 4 * t + 3
    g = rng.standard_normal((k, length))
    sent = messages(code, g)
    assert all(m.shape == (code.message_size(length),) for m in sent.values())
    assert code.message_size(length) == -(-length // t)
    # all n contributions, in any order, sum to the exact gradient
    order = rng.permutation(n)
    total = sum(code.update(int(i), sent[int(i)]) for i in order)[:length]
    np.testing.assert_allclose(total, g.sum(axis=0), atol=1e-12)
    assert code.decodable(range(n)) and not code.decodable(range(n - 1))
    # the t workers of one unshifted block return exactly twice-halved gradient of their window
    window = code.partitions(0)
    block = [i for i in range(k) if code.partitions(i) == window]
    assert len(block) == t
    np.testing.assert_allclose(
        2 * sum(code.update(i, sent[i]) for i in block)[:length], g[list(window)].sum(axis=0), atol=1e-12
    )
    # decode returns the additive estimate from whatever arrived, without raising
    partial = code.decode({i: sent[i] for i in block}, length=length)
    np.testing.assert_allclose(partial, 0.5 * g[list(window)].sum(axis=0), atol=1e-12)
    # data assignment: t pieces per worker, 2t holders per piece
    assert all(len(code.partitions(i)) == t for i in range(n))
    assert all(len(code.holders(j)) == 2 * t for j in range(k))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scheme": "cyclic", "n": 8, "s": 8}, ValueError, r"stragglers must be < workers \(got s=8, n=8\)"),
        ({"scheme": "frc", "n": 7, "s": 1}, ValueError, r"\(s\+1\) to divide n"),
        ({"scheme": "nope", "n": 4}, ValueError, "unknown gradient scheme 'nope'"),
        ({"scheme": "frc", "n": 4, "s": 1, "m": 2}, ValueError, "takes no parameter 'm'"),
        ({"scheme": "cyclic", "n": 4.0, "s": 1}, TypeError, "workers n must be an integer"),
        ({"scheme": "cyclic", "n": 0}, ValueError, "workers n must be >= 1"),
        ({"scheme": "cyclic", "n": 5, "s": -1}, ValueError, "stragglers s must be >= 0"),
        ({"scheme": "ye_abbe", "n": 5, "s": 3, "m": 3}, ValueError, r"d = s \+ m <= n"),
        ({"scheme": "ye_abbe", "n": 5, "s": 1, "m": 0}, ValueError, "m must be >= 1"),
        ({"scheme": "ye_abbe", "n": 5, "points": [1, 1, 2, 3, 4]}, ValueError, "distinct"),
        ({"scheme": "lwpd", "n": 12, "t": 2}, ValueError, "power of two"),
        ({"scheme": "lwpd", "n": 8, "t": 4}, ValueError, "t <= n/4"),
        ({"scheme": "partial", "n": 4, "s": 1, "alpha": 1.0}, ValueError, "alpha must be a number > 1"),
    ],
)
def test_bad_parameters_name_the_problem(kwargs, error, match):
    with pytest.raises(error, match=match):
        gradient_code(**kwargs)


def test_bad_calls_name_the_problem():
    code = gradient_code("cyclic", n=4, s=1)
    with pytest.raises(ValueError, match=r"worker 0 holds partitions \[0, 1\]"):
        code.encode(0, {0: np.ones(3)})
    with pytest.raises(ValueError, match="equally long"):
        code.encode(0, {0: np.ones(3), 1: np.ones(4)})
    with pytest.raises(ValueError, match=r"worker id must be in 0\.\.3"):
        code.decodable([4])
    with pytest.raises(TypeError, match="worker id must be an integer"):
        code.decodable(["1"])
    with pytest.raises(ValueError, match="equally long"):
        code.decode({0: np.ones(3), 1: np.ones(4), 2: np.ones(3)})


def test_paper_points_are_refused_where_float64_cannot_decode():
    """Ye & Abbe's real points lose ~1e-4 at n = 30; the constructor refuses them."""
    with pytest.raises(ValueError, match="cannot decode every set of 27 responders accurately"):
        gradient_code("ye_abbe", n=30, s=3, m=3, points="paper")
    gradient_code("ye_abbe", n=30, s=3, m=3)  # the default unit-circle points are fine


def test_ill_conditioned_weights_raise():
    encoding = np.vander(np.linspace(1, 1.001, 8), 8, increasing=True)
    decoder = LinearDecoder(encoding, np.eye(8)[-1:], max_error=1e-6)
    with pytest.raises(IllConditionedError, match="exceeds the limit"):
        decoder.weights(range(8))


def test_codes_do_not_import_grpc():
    code = "import sys, coded.codes, coded.codes.mds; print(any(m.startswith('grpc') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
