"""The worked examples of the papers, as fixed vectors (spec/001-002 Part III, spec/003-004 C2)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from coded.codes import LinearGradientCode, gradient_code
from coded.codes.lwpd import hadamard_block, lwpd_matrix

from .helpers import messages


def test_tandon_figure_1b():
    """n = k = 3, s = 1: B and the decoding rows A of Tandon et al. Fig. 1b."""
    b = np.array([[0.5, 1, 0], [0, 1, -1], [0.5, 0, 1]])
    a = np.array([[0, 1, 2], [1, 0, 1], [2, -1, 0]])
    assert np.array_equal(a @ b, np.ones((3, 3)))
    code = LinearGradientCode(3, 1, b[:, :, None], [(0, 1), (1, 2), (0, 2)])
    for straggler in range(3):
        survivors = [w for w in range(3) if w != straggler]
        weights = code.decode_weights(survivors).matrix[:, 0]
        np.testing.assert_allclose(weights, a[straggler, survivors], atol=1e-12)
    g = np.random.default_rng(0).standard_normal((3, 4))
    sent = messages(code, g)
    np.testing.assert_allclose(2 * sent[0] - sent[1], g.sum(axis=0), atol=1e-12)


def test_tandon_cyclic_support_for_n3():
    code = gradient_code("cyclic", n=3, s=1, seed=5)
    assert [code.partitions(i) for i in range(3)] == [(0, 1), (1, 2), (0, 2)]
    assert np.all(np.diag(code.b) == 1.0)


def test_b_frac_for_n6_s2():
    code = gradient_code("frc", n=6, s=2)
    expected = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]] * 3, dtype=float)
    assert np.array_equal(code.coefficients[:, :, 0], expected)
    assert np.all(expected.sum(axis=0) == 3) and np.all(expected.sum(axis=1) == 3)


@pytest.mark.parametrize(("n", "s"), [(5, 1), (7, 2), (9, 4)])
def test_b_cyc_structure(n, s):
    """Tandon Eq. 4/16: support {i..i+s}, B[i,i] = 1, s+1 non-zeros per row and column."""
    b = gradient_code("cyclic", n=n, s=s, seed=1).b
    for i in range(n):
        assert set(np.flatnonzero(b[i])) == {(i + t) % n for t in range(s + 1)}
    assert np.all(np.diag(b) == 1.0)
    assert np.all((b != 0).sum(axis=0) == s + 1)
    # one straggler more than designed: some set fails (residual ~ 1)
    code = gradient_code("cyclic", n=n, s=s, seed=1)
    sets = itertools.combinations(range(n), n - s - 1)
    assert any(code._decoder.solve(f).residual > 1e-3 for f in sets)


def test_cyclic_extremes():
    assert np.array_equal(gradient_code("cyclic", n=4, s=0).b, np.eye(4))
    np.testing.assert_allclose(gradient_code("cyclic", n=4, s=3).b, np.ones((4, 4)), atol=1e-12)


# Ye & Abbe Table 2 (n = 5, s = 1, m = 2, l = 2): for each straggler, the weights of f1..f5 giving
# sum_j g_j(0) and sum_j g_j(1).
TABLE_2 = {
    0: ([0, "1/2", -2, "-1/2", 0], [0, "-1/6", 1, "1/2", "1/3"]),
    1: (["1/4", 0, "-1/2", 0, "1/4"], ["-1/12", 0, "1/2", "1/3", "1/4"]),
    2: (["1/3", "-1/6", 0, "1/6", "1/3"], ["-1/6", "1/6", 0, "1/6", "1/6"]),
    3: (["1/4", 0, "-1/2", 0, "1/4"], ["-1/4", "1/3", "-1/2", 0, "1/12"]),
    4: ([0, "1/2", -2, "-1/2", 0], ["-1/3", "1/2", -1, "-1/6", 0]),
}
# The worker coefficients f_i of Sec. II.6, as [g_j(0) for j] + [g_j(1) for j].
F_COEFFICIENTS = [
    [1, 3, 6, 0, 0, -3, -3, 6, 0, 0],
    [0, 2, 6, -3, 0, 0, 0, 12, 3, 0],
    [0, 0, 1, -2, 1, 0, 0, 3, 0, -3],
    [-2, 0, 0, 3, -6, 0, 0, 0, 3, 12],
    [3, 1, 0, 0, 6, 3, 3, 0, 0, -6],
]
LAMBDA = np.array([0.5, 1, 0.5, -1, 0.5])


def test_ye_abbe_worked_example_coefficients_and_table_2():
    code = gradient_code("ye_abbe", n=5, s=1, m=2, points=[-2, -1, 0, 1, 2])
    scaled = code.coefficients * LAMBDA[:, None, None]  # the paper scales worker i by lambda_i
    got = scaled.transpose(0, 2, 1).reshape(5, 10)
    np.testing.assert_allclose(got, np.array(F_COEFFICIENTS, dtype=float), atol=1e-12)
    for straggler, (sum0, sum1) in TABLE_2.items():
        survivors = [w for w in range(5) if w != straggler]
        weights = code.decode_weights(survivors).matrix / LAMBDA[survivors, None]
        for u, row in enumerate((sum0, sum1)):
            want = [Fraction(v) for i, v in enumerate(row) if i != straggler]
            got_row = [Fraction(float(w)).limit_denominator(100) for w in weights[:, u]]
            assert got_row == want, (straggler, u)


def test_ye_abbe_support_and_zeros():
    """p_j(theta_i) = 0 exactly when worker i does not hold partition j (spec III.15)."""
    n, s, m = 7, 2, 2
    code = gradient_code("ye_abbe", n=n, s=s, m=m)
    for i in range(n):
        held = {(i + t) % n for t in range(s + m)}
        assert set(code.partitions(i)) == held
        for j in range(n):
            assert (np.abs(code.coefficients[i, j]).max() > 1e-9) == (j in held)


def test_lwpd_c842_equals_equation_3():
    expected = np.array(
        [[1, 1, 0, 0], [1, -1, 0, 0], [0, 0, 1, 1], [0, 0, 1, -1],
         [0, 1, 1, 0], [0, 1, -1, 0], [1, 0, 0, 1], [-1, 0, 0, 1]]
    ) / np.sqrt(2)
    np.testing.assert_allclose(lwpd_matrix(4, 2), expected, atol=1e-15)


@pytest.mark.parametrize("t", [2, 4, 8, 16])
def test_hadamard_blocks(t):
    x = hadamard_block(t)
    np.testing.assert_allclose(x @ x.T, np.eye(t), atol=1e-12)
    np.testing.assert_allclose(hadamard_block(2 * t), np.kron(hadamard_block(2), x), atol=1e-12)


@pytest.mark.parametrize(("k", "t"), [(4, 2), (8, 2), (8, 4), (16, 4), (32, 8)])
def test_lwpd_structure_and_projective_distance(k, t):
    c = lwpd_matrix(k, t)
    np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1.0)
    assert np.all((c != 0).sum(axis=1) == t)
    np.testing.assert_allclose(np.abs(c[c != 0]), 1 / np.sqrt(t))
    np.testing.assert_allclose(c.T @ c, 2 * np.eye(k), atol=1e-12)
    angles = np.arccos(np.clip(np.abs(c @ c.T), 0, 1))
    off = angles[~np.eye(2 * k, dtype=bool)]
    assert np.isclose(off.min(), np.pi / 3)
    assert np.all(np.isclose(off, np.pi / 3) | np.isclose(off, np.pi / 2))
    assert np.all(np.isclose(angles, np.pi / 3).sum(axis=1) == 4)
