"""Matmul codes: thresholds, exact products from any R results, error correction."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coded.codes import DecodingFailure, NotDecodableError, matmul_code
from coded.codes.matmul import recovery_threshold


def rel(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def products(code, a, b):
    return {p: x @ y for p, (x, y) in enumerate(code.encode(a, b))}


@pytest.mark.parametrize(
    ("scheme", "params", "threshold"),
    [
        ("gpd", {"m": 2, "n": 2, "d": 1}, 5),  # Theorem 1, mat-vec
        ("gpd", {"m": 3, "n": 2, "d": 1}, 7),
        ("gpd", {"m": 2, "n": 2, "d": 2}, 9),  # Sec. III example
        ("gpd", {"m": 3, "n": 2, "d": 2}, 13),
        ("gpd", {"m": 2, "n": 3, "d": 3}, 20),
        ("gpd", {"m": 4, "n": 1, "d": 4}, 16),  # = Polynomial codes K K'
        ("gpd", {"m": 1, "n": 4, "d": 1}, 7),  # = MatDot 2K - 1
        ("polynomial", {"m": 4, "d": 4}, 16),
        ("matdot", {"n": 4}, 7),
        ("polydot", {"m": 2, "n": 2, "d": 2}, 12),
    ],
)
def test_recovery_thresholds(scheme, params, threshold):
    assert recovery_threshold(scheme, **params) == threshold


def test_threshold_table_k36():
    """spec/000 Sec. 3.6, Fig. 5: K = K' = 36 forces m = d = 36/n."""
    table = {1: 1296, 2: 649, 3: 434, 4: 327, 6: 221, 9: 152, 12: 119, 18: 89, 36: 71}
    for n, threshold in table.items():
        assert recovery_threshold("gpd", m=36 // n, n=n, d=36 // n) == threshold
    assert recovery_threshold("matdot", n=36) == 71
    assert recovery_threshold("polynomial", m=36, d=36) == 1296


def test_gpd_worked_example_aligns_the_garbage():
    """m = n = 2 mat-vec (spec/000 eq. 4): with u = v^2, coefficients of v^0..v^4."""
    code = matmul_code("gpd", workers=5, m=2, n=2, d=1, points="chebyshev")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 6))
    x = rng.standard_normal(6)
    out = np.stack([a @ b for a, b in code.encode(w, x)])  # (5, 2): evaluations at 5 points
    coefficients = np.linalg.solve(np.vander(code.points, 5, increasing=True), out)
    (w00, w01), (w10, w11) = [np.hsplit(h, 2) for h in np.vsplit(w, 2)]
    x0, x1 = np.split(x, 2)
    expected = [w00 @ x1, w00 @ x0 + w01 @ x1, w10 @ x1 + w01 @ x0, w10 @ x0 + w11 @ x1, w11 @ x0]
    for got, want in zip(coefficients, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-10)


def test_rotation_embedding_is_the_polynomial_on_the_unit_circle():
    """The same code on the unit circle: each real result, read as top + i bottom, is the value at
    z_p of a Laurent polynomial in exponents -1..3 whose coefficients at 0 and 2 are W_0 x and W_1 x
    (row halves packed as complex numbers). Solved here with numpy, not the code's decoder."""
    code = matmul_code("gpd", workers=5, m=2, n=2, d=1)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8))
    x = rng.standard_normal(8)
    pairs = code.encode(w, x)
    assert all(a.dtype == b.dtype == np.float64 and a.shape == (4, 4) and b.shape == (4,) for a, b in pairs)
    out = np.stack([a @ b for a, b in pairs])  # (5, 4) real
    values = out[:, :2] + 1j * out[:, 2:]
    z = np.exp(2j * np.pi * np.arange(5) / 5)
    assert np.allclose(code.points, z)
    coefficients = np.linalg.solve(z[:, None] ** np.arange(-1, 4)[None, :], values)
    for block, exponent in ((w[:4], 0), (w[4:], 2)):
        product = block @ x
        np.testing.assert_allclose(coefficients[exponent + 1], product[:2] + 1j * product[2:], atol=1e-12)


POINTS = ["unit_circle", "chebyshev"]
CASES = [
    ("polynomial", 8, {"m": 2, "d": 3}),
    ("matdot", 9, {"n": 3}),
    ("polydot", 9, {"m": 2, "n": 2, "d": 1}),
    ("gpd", 11, {"m": 2, "n": 2, "d": 2}),
    ("gpd", 9, {"m": 3, "n": 2, "d": 1}),
    ("gpd", 10, {"m": 1, "n": 2, "d": 3}),
]


def random_inputs(code, rng, rows=3, inner=2, cols=2):
    """A and B whose blocks have (a multiple of) the given sizes, as the code's halves require."""
    m1, n0, nb = code.size_multiples
    return rng.standard_normal((m1 * rows, n0 * inner)), rng.standard_normal((n0 * inner, nb * cols))


@pytest.mark.parametrize("points", POINTS)
@pytest.mark.parametrize(("scheme", "workers", "params"), CASES)
def test_every_threshold_sized_set_decodes(scheme, workers, params, points):
    code = matmul_code(scheme, workers=workers, points=points, **params)
    rng = np.random.default_rng(workers)
    a, b = random_inputs(code, rng)
    results = products(code, a, b)
    want = a @ b  # independent: numpy's product
    for responders in itertools.combinations(range(workers), code.recovery_threshold):
        assert rel(code.decode({p: results[p] for p in responders}), want) < 1e-9
    too_few = list(range(code.recovery_threshold - 1))
    with pytest.raises(NotDecodableError, match=f"needs {code.recovery_threshold} results"):
        code.decode({p: results[p] for p in too_few})


@pytest.mark.parametrize("points", POINTS)
@pytest.mark.parametrize(("scheme", "params"),
                         [("gpd", {"m": 2, "n": 2}), ("polynomial", {"m": 3}), ("matdot", {"n": 3})])
def test_matrix_vector(scheme, params, points):
    code = matmul_code(scheme, workers=9, points=points, **params)
    rng = np.random.default_rng(3)
    a, _ = random_inputs(code, rng, rows=5, inner=4)
    x = rng.standard_normal(a.shape[1])
    results = products(code, a, x)
    got = code.decode({p: results[p] for p in range(9)[-code.recovery_threshold :]})
    assert got.shape == (a.shape[0],)
    assert rel(got, a @ x) < 1e-10


@pytest.mark.parametrize(("scheme", "params"), [("gpd", {"m": 2, "n": 2, "d": 2}), ("matdot", {"n": 3}),
                                                ("polynomial", {"m": 2, "d": 1})])
def test_workers_store_and_compute_what_real_points_give_them(scheme, params):
    """Rotation embeddings keep every worker real, with the same block shapes as real points."""
    circle = matmul_code(scheme, workers=12, **params)
    real = matmul_code(scheme, workers=12, points="chebyshev", **params)
    assert circle.recovery_threshold == real.recovery_threshold
    a, b = random_inputs(circle, np.random.default_rng(4))
    for (x, y), (u, v) in zip(circle.encode(a, b), real.encode(a, b), strict=True):
        assert x.dtype == y.dtype == np.float64
        assert (x.shape, y.shape) == (u.shape, v.shape)


@pytest.mark.parametrize(("scheme", "params"), [
    ("gpd", {"m": 5, "n": 2, "d": 6}),  # R = 61
    ("matdot", {"n": 31}),  # R = 61
    ("polynomial", {"m": 6, "d": 10}),  # R = 60
    ("polydot", {"m": 2, "n": 3, "d": 6}),  # R = 60
])
def test_64_workers_decode_their_worst_straggler_runs(scheme, params):
    """P = 64 with 3 or 4 stragglers, where real points are refused: every run of neighbouring
    stragglers (the worst sets on the circle), and random sets, give A @ B to 1e-9."""
    code = matmul_code(scheme, workers=64, **params)
    with pytest.raises(ValueError, match="cannot decode every responder set accurately"):
        matmul_code(scheme, workers=64, points="chebyshev", **params)
    rng = np.random.default_rng(64)
    a, b = random_inputs(code, rng, rows=2, inner=1, cols=1)
    results = products(code, a, b)
    want = a @ b
    r = code.recovery_threshold
    runs = [[(start + t) % 64 for t in range(r)] for start in range(0, 64, 4)]
    sampled = [rng.choice(64, r, replace=False).tolist() for _ in range(8)]
    for responders in runs + sampled:
        assert rel(code.decode({p: results[p] for p in responders}), want) < 1e-9


@pytest.mark.parametrize("points", POINTS)
@given(
    case=st.sampled_from(CASES),
    errors=st.integers(1, 2),
    seed=st.integers(0, 2**32 - 1),
    scale=st.floats(1e-3, 1e3),
)
def test_wrong_results_are_corrected_or_reported(points, case, errors, seed, scale):
    scheme, workers, params = case
    code = matmul_code(scheme, workers=workers + 3, points=points, **params)
    rng = np.random.default_rng(seed)
    a, b = random_inputs(code, rng, rows=2, inner=3, cols=2)
    results = products(code, a, b)
    needed = code.recovery_threshold + errors + 1
    chosen = sorted(rng.choice(code.workers, needed, replace=False).tolist())
    wrong = sorted(rng.choice(chosen, errors, replace=False).tolist())
    received = {p: results[p] + (rng.standard_normal(results[p].shape) * scale if p in wrong else 0) for p in chosen}
    product, located = code.correct(received, max_errors=errors)
    assert list(located) == wrong
    assert rel(product, a @ b) < 1e-9
    # one more wrong result than it can correct: reported, never a silent wrong product
    extra = next(p for p in chosen if p not in wrong)
    received[extra] = received[extra] + rng.standard_normal(received[extra].shape) * scale
    with pytest.raises(DecodingFailure):
        code.decode(received, max_errors=errors)


def test_surplus_results_are_checked_even_without_correction():
    code = matmul_code("gpd", workers=10, m=2, n=2, d=1)
    rng = np.random.default_rng(5)
    a, x = rng.standard_normal((4, 4)), rng.standard_normal(4)
    results = products(code, a, x)
    results[2] = results[2] + 1.0
    with pytest.raises(DecodingFailure, match="wrong"):
        code.decode(results)


@pytest.mark.parametrize(("workers", "stragglers"), [(8, 5), (40, 8)])
def test_bit_flip_in_exponent_is_located(workers, stragglers):
    code = matmul_code("matdot", workers=workers, n=(workers - stragglers + 1) // 2)
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((4, 2 * code.n)), rng.standard_normal((2 * code.n, 5))
    results = products(code, a, b)
    bits = results[4].view(np.uint64)
    bits[1, 2] ^= np.uint64(1 << 61)
    product, wrong = code.correct(results, max_errors=2)
    assert wrong == (4,)
    assert rel(product, a @ b) < 1e-9


def test_unit_circle_blocks_split_in_halves():
    code = matmul_code("gpd", workers=10, m=2, n=2, d=2)
    assert code.size_multiples == (4, 4, 4)
    assert matmul_code("gpd", workers=10, m=2, n=2, d=2, points="chebyshev").size_multiples == (2, 2, 2)
    assert matmul_code("polynomial", workers=4, m=2, d=1).size_multiples == (4, 1, 1)  # no inner halves
    with pytest.raises(ValueError, match="results of shape \\(3, 2\\) are not products of this code's blocks"):
        code.decode({p: np.ones((3, 2)) for p in range(9)})


@functools.cache
def cached_code(scheme, workers, params, points):
    return matmul_code(scheme, workers=workers, points=points, **dict(params))


SHAPED_CASES = [*CASES, ("uncoded", 4, {})]


@settings(deadline=None)
@given(case=st.sampled_from(SHAPED_CASES), points=st.sampled_from(POINTS), sizes=st.tuples(
    st.integers(1, 13), st.integers(1, 13), st.integers(1, 9)), vector=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_any_shapes_decode_to_exactly_a_times_b(case, points, sizes, vector, seed):
    """The code pads what its blocks need and the decode crops it away: A (N1, N0) and B (N0, Nb)
    or a vector (N0,) of any sizes, divisible or not, decode from any R results to A @ B, of its
    shape; with two surplus results one wrong one is located and left out."""
    scheme, workers, params = case
    code = cached_code(scheme, workers, tuple(params.items()), points)
    rng = np.random.default_rng(seed)
    (n1, n0, nb), vector = sizes, vector and code.d == 1
    a = rng.standard_normal((n1, n0))
    b = rng.standard_normal(n0 if vector else (n0, nb))
    want = a @ b  # independent: numpy's product
    results = products(code, a, b)
    r = code.recovery_threshold
    responders = rng.choice(workers, r, replace=False).tolist()
    got = code.decode({p: results[p] for p in responders})
    assert got.shape == want.shape
    assert rel(got, want) < 1e-9
    if workers >= r + 2:
        chosen = rng.choice(workers, r + 2, replace=False).tolist()
        liar = chosen[0]
        received = {p: results[p] + (rng.standard_normal(results[p].shape) if p == liar else 0) for p in chosen}
        product, wrong = code.correct(received, max_errors=1)
        assert wrong == (liar,)
        assert product.shape == want.shape and rel(product, want) < 1e-9


@settings(deadline=None)
@given(case=st.sampled_from([c for c in SHAPED_CASES if c[2].get("d", 1) == 1]), points=st.sampled_from(POINTS),
       sizes=st.tuples(st.integers(1, 13), st.integers(1, 13)), seed=st.integers(0, 2**32 - 1))
def test_matrix_vector_mode_encodes_a_once_and_crops_every_product(case, points, sizes, seed):
    """Matrix-vector mode: A encoded once (encode_left), then several vectors of its N0 entries
    (encode_right, as each worker does for its own block): every decode is A @ x, of N1 entries."""
    scheme, workers, params = case
    code = cached_code(scheme, workers, tuple(params.items()), points)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(sizes)
    left = code.encode_left(a)
    for _ in range(3):
        x = rng.standard_normal(sizes[1])
        right = [code.encode_right(x, [p])[0] for p in range(workers)]
        responders = rng.choice(workers, code.recovery_threshold, replace=False).tolist()
        got = code.decode({p: left[p] @ right[p] for p in responders})
        assert got.shape == (sizes[0],)
        assert rel(got, a @ x) < 1e-9


def test_a_code_that_did_not_encode_the_inputs_decodes_the_shape_it_is_given():
    """Blocks encoded elsewhere (the master encodes, a shared code decodes): decode crops to
    ``shape``; without one it returns the padded product; a shape that does not pad to the
    results' product is refused."""
    encoder = matmul_code("gpd", workers=11, m=2, n=2, d=2)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 6))
    results = products(encoder, a, b)
    decoder = matmul_code("gpd", workers=11, m=2, n=2, d=2)
    assert rel(decoder.decode(results, shape=(7, 6)), a @ b) < 1e-9
    padded = decoder.decode(results)
    assert padded.shape == (8, 8)
    assert rel(padded[:7, :6], a @ b) < 1e-9
    scale = np.abs(a @ b).max()
    assert np.abs(padded[7:]).max() < 1e-9 * scale and np.abs(padded[:, 6:]).max() < 1e-9 * scale  # zeros
    assert rel(encoder.decode(results), a @ b) < 1e-9  # the encoder remembers what it encoded
    with pytest.raises(ValueError, match=r"shape \(3, 6\) does not fit results whose product is \(8, 8\)"):
        decoder.decode(results, shape=(3, 6))
    with pytest.raises(ValueError, match=r"shape \(7,\) does not fit results whose product is \(8, 8\)"):
        decoder.decode(results, shape=(7,))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.encode(np.ones((4, 4)), np.ones((6, 2))), ValueError, "inner dimensions differ"),
        (lambda c: c.encode(np.full((4, 4), np.nan), np.ones((4, 2))), ValueError, "A contains NaN"),
        (lambda c: c.encode(np.ones((4, 4)), np.ones(4)), ValueError, "a vector B needs d = 1"),
        (lambda c: c.decode({0: np.ones((2, 1))}), NotDecodableError, "needs 9 results"),
        (lambda c: c.decode({20: np.ones((2, 1))}), ValueError, "worker id must be in 0..9"),
    ],
)
def test_bad_inputs(call, error, match):
    code = matmul_code("gpd", workers=10, m=2, n=2, d=2)
    with pytest.raises(error, match=match):
        call(code)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scheme": "gpd", "workers": 8, "m": 2, "n": 2, "d": 2}, "needs at least 9 workers"),
        ({"scheme": "what", "workers": 8}, "unknown matmul scheme"),
        ({"scheme": "matdot", "workers": 8, "m": 2}, "takes no parameter 'm'"),
        ({"scheme": "matdot", "workers": 60, "n": 10}, "cannot decode every responder set accurately"),
        ({"scheme": "gpd", "workers": 96, "m": 5, "n": 3, "d": 5}, "estimated error .* > 1e-06"),
        ({"scheme": "gpd", "workers": 12, "points": "complex"}, "points must be one of unit_circle, chebyshev"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        matmul_code(**kwargs)


def test_uncoded_splits_rows_and_waits_for_everyone():
    code = matmul_code("uncoded", workers=4)
    assert code.recovery_threshold == 4
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((8, 3)), rng.standard_normal((3, 5))
    pairs = code.encode(a, b)
    assert all(x.shape == (2, 3) and np.array_equal(y, b) for x, y in pairs)
    results = {p: x @ y for p, (x, y) in enumerate(pairs)}
    np.testing.assert_array_equal(code.decode(results), np.vstack([results[p] for p in range(4)]))  # a copy
    # numpy's whole product may sum in another order than the blocks' (another BLAS kernel for
    # another shape): rounding apart, ~1e-16 here
    assert rel(code.decode(results), a @ b) < 1e-12
    with pytest.raises(NotDecodableError, match="needs 4 results"):
        code.decode({p: results[p] for p in range(3)})
