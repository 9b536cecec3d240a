"""Models: gradients against finite differences, additivity over partitions, stability, errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from coded.ml.models import MLP, LinearRegression, LogisticRegression, Model, SoftmaxRegression

# --- helpers -------------------------------------------------------------------------------------


def every_model(features: int = 3, classes: int = 3, l2: float = 0.1) -> list[Model]:
    return [
        LinearRegression(features, l2),
        LogisticRegression(features, l2),
        SoftmaxRegression(features, classes, l2),
        MLP(features, classes, [4, 3], l2),
    ]


def batch(model: Model, b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((b, model.features))
    y = rng.standard_normal(b) if model.task == "regression" else rng.integers(model.classes, size=b)
    return x, y


def random_params(model: Model, rng: np.random.Generator) -> np.ndarray:
    return rng.normal(scale=0.7, size=model.size)


def objective(model: Model, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return model.loss_and_grad(params, x, y)[0] + model.regularization(params)[0]


def central_differences(model: Model, params: np.ndarray, x: np.ndarray, y: np.ndarray, h: float = 1e-5) -> np.ndarray:
    grad = np.empty_like(params)
    for i in range(params.size):
        step = np.zeros_like(params)
        step[i] = h
        grad[i] = (objective(model, params + step, x, y) - objective(model, params - step, x, y)) / (2 * h)
    return grad


def smallest_preactivation(model: Model, params: np.ndarray, x: np.ndarray) -> float:
    """Distance of the hidden pre-activations from the ReLU kink (inf without hidden layers)."""
    smallest, h = np.inf, x
    for weights, bias in model.unflatten(params)[:-1]:
        a = h @ weights + bias
        smallest = min(smallest, float(np.abs(a).min()))
        h = np.maximum(a, 0.0)
    return smallest


@st.composite
def models(draw: st.DrawFn) -> Model:
    kind = draw(st.sampled_from(["linear", "logistic", "softmax", "mlp"]))
    features = draw(st.integers(1, 6))
    l2 = draw(st.sampled_from([0.0, 0.3]))
    if kind == "linear":
        return LinearRegression(features, l2)
    if kind == "logistic":
        return LogisticRegression(features, l2)
    classes = draw(st.integers(2, 5))
    if kind == "softmax":
        return SoftmaxRegression(features, classes, l2)
    return MLP(features, classes, draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)), l2)


SEEDS = st.integers(0, 2**32 - 1)

# --- gradients -----------------------------------------------------------------------------------


@given(model=models(), b=st.integers(1, 12), seed=SEEDS)
def test_gradient_matches_central_differences(model, b, seed):
    rng = np.random.default_rng(seed)
    x, y = batch(model, b, rng)
    params = random_params(model, rng)
    assume(smallest_preactivation(model, params, x) > 1e-3)
    grad = model.loss_and_grad(params, x, y)[1] + model.regularization(params)[1]
    numeric = central_differences(model, params, x, y)
    error = np.linalg.norm(grad - numeric) / max(np.linalg.norm(grad), np.linalg.norm(numeric))
    assert error < 1e-6


@given(model=models(), b=st.integers(0, 40), parts=st.integers(1, 6), seed=SEEDS)
def test_partial_gradients_sum_to_the_full_gradient(model, b, parts, seed):
    """The property gradient coding relies on: sums over a split add up to the sum over all."""
    rng = np.random.default_rng(seed)
    x, y = batch(model, b, rng)
    params = random_params(model, rng)
    cuts = np.sort(rng.integers(0, b + 1, size=parts - 1))  # parts may be empty
    pieces = np.split(rng.permutation(b), cuts)
    full_loss, full_grad = model.loss_and_grad(params, x, y)
    results = [model.loss_and_grad(params, x[rows], y[rows]) for rows in pieces]
    scale = max(np.abs(full_grad).max(initial=0.0), 1.0)
    np.testing.assert_allclose(sum(r[1] for r in results), full_grad, rtol=1e-12, atol=1e-12 * scale)
    assert sum(r[0] for r in results) == pytest.approx(full_loss, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("model", every_model(), ids=repr)
def test_empty_batch_gives_zero(model):
    params = random_params(model, np.random.default_rng(0))
    loss, grad = model.loss_and_grad(params, np.empty((0, model.features)), np.empty(0))
    assert loss == 0.0 and isinstance(loss, float)
    np.testing.assert_array_equal(grad, np.zeros(model.size))
    assert model.loss(params, np.empty((0, model.features)), np.empty(0)) == 0.0
    assert model.predict(params, np.empty((0, model.features))).shape[0] == 0


@pytest.mark.parametrize("model", every_model(), ids=repr)
def test_loss_decreases_after_a_small_gradient_step(model):
    rng = np.random.default_rng(1)
    x, y = batch(model, 50, rng)
    params = random_params(model, rng)
    loss, grad = model.loss_and_grad(params, x, y)
    assert model.loss(params, x, y) == loss
    assert model.loss(params - 1e-3 * grad / np.linalg.norm(grad), x, y) < loss


def test_loss_and_gradient_at_known_points():
    x = np.array([[2.0, 3.0], [-1.0, 0.0]])
    loss, grad = LogisticRegression(2).loss_and_grad(np.zeros(3), x, np.array([1, 0]))
    assert loss == pytest.approx(2 * np.log(2))
    np.testing.assert_allclose(grad, [(-0.5 * 2) + 0.5 * -1, -0.5 * 3, 0.0])  # sum of (sigmoid(0) - y) [x, 1]
    loss, grad = SoftmaxRegression(2, 4).loss_and_grad(np.zeros(12), x, np.array([3, 0]))
    assert loss == pytest.approx(2 * np.log(4))
    np.testing.assert_allclose(grad[-4:], [0.25 - 1 + 0.25, 0.5, 0.5, 0.25 + 0.25 - 1])


@pytest.mark.parametrize("scale", [1e2, 1e4, 1e300])
def test_huge_logits_stay_finite_and_exact(scale):
    x = np.array([[scale], [-scale]])
    loss, grad = LogisticRegression(1).loss_and_grad(np.array([1.0, 0.0]), x, np.array([0, 1]))
    assert loss == pytest.approx(2 * scale) and np.isfinite(grad).all()  # each sample loses |z|
    loss, grad = LogisticRegression(1).loss_and_grad(np.array([1.0, 0.0]), x, np.array([1, 0]))
    assert 0.0 <= loss < 1e-40 and np.isfinite(grad).all()
    loss, grad = SoftmaxRegression(1, 2).loss_and_grad(np.array([1.0, -1.0, 0.0, 0.0]), x, np.array([1, 0]))
    assert loss == pytest.approx(4 * scale) and np.isfinite(grad).all()
    probabilities = LogisticRegression(1).predict(np.array([1.0, 0.0]), x)
    np.testing.assert_allclose(probabilities, [[0.0, 1.0], [1.0, 0.0]], rtol=0, atol=1e-43)


# --- regularization, predictions, layout, initialisation ----------------------------------------


@pytest.mark.parametrize("model", every_model(l2=0.5), ids=repr)
def test_regularization_penalises_weights_not_biases(model):
    params = random_params(model, np.random.default_rng(2))
    penalty, grad = model.regularization(params)
    weights = [w for w, _ in model.unflatten(params)]
    assert penalty == pytest.approx(0.25 * sum(float(np.sum(w * w)) for w in weights))
    for (w, _), (gw, gb) in zip(model.unflatten(params), model.unflatten(grad), strict=True):
        np.testing.assert_allclose(gw, 0.5 * w)
        np.testing.assert_array_equal(gb, 0.0)


@pytest.mark.parametrize("model", every_model(l2=0.0), ids=repr)
def test_no_regularization_when_l2_is_zero(model):
    penalty, grad = model.regularization(np.ones(model.size))
    assert penalty == 0.0 and not grad.any()


@pytest.mark.parametrize("model", every_model(), ids=repr)
def test_predictions(model):
    rng = np.random.default_rng(3)
    x, _ = batch(model, 7, rng)
    out = model.predict(random_params(model, rng), x)
    if model.task == "regression":
        assert out.shape == (7,) and model.classes == 0
    else:
        assert out.shape == (7, model.classes)
        np.testing.assert_allclose(out.sum(axis=1), 1.0)
        assert (out >= 0).all()


def test_logistic_matches_two_class_softmax():
    """A two-class softmax with logits (0, z) is logistic regression on z."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((9, 3)), rng.integers(2, size=9)
    w = rng.standard_normal(4)
    softmax_params = np.zeros(8)
    softmax_params[1:6:2], softmax_params[7] = w[:3], w[3]  # W[:, 1] and b[1]
    logistic, softmax = LogisticRegression(3), SoftmaxRegression(3, 2)
    assert logistic.loss(w, x, y) == pytest.approx(softmax.loss(softmax_params, x, y))
    np.testing.assert_allclose(logistic.predict(w, x), softmax.predict(softmax_params, x))


def test_layout_and_unflatten_views():
    model = MLP(3, 2, [4])
    assert model.layer_sizes == (3, 4, 2) and model.size == (3 + 1) * 4 + (4 + 1) * 2
    params = np.arange(model.size, dtype=np.float64)
    (w1, b1), (w2, b2) = model.unflatten(params)
    np.testing.assert_array_equal(w1, np.arange(12).reshape(3, 4))
    np.testing.assert_array_equal(b1, [12, 13, 14, 15])
    np.testing.assert_array_equal(w2, np.arange(16, 24).reshape(4, 2))
    np.testing.assert_array_equal(b2, [24, 25])
    for block in (w1, b1, w2, b2):
        assert np.shares_memory(block, params)
    w2[0, 0] = -1.0
    assert params[16] == -1.0
    assert [block.shape for layer in LinearRegression(5).unflatten(np.zeros(6)) for block in layer] == [(5, 1), (1,)]


def test_init_params():
    for model in every_model()[:3]:
        np.testing.assert_array_equal(model.init_params(np.random.default_rng(0)), np.zeros(model.size))
    model = MLP(400, 3, [300])
    a, b = (model.init_params(np.random.default_rng(seed)) for seed in (0, 0))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, model.init_params(np.random.default_rng(1)))
    (w1, b1), (w2, b2) = model.unflatten(a)
    assert w1.std() == pytest.approx(np.sqrt(2 / 400), rel=0.02)
    assert w2.std() == pytest.approx(np.sqrt(2 / 300), rel=0.1)
    assert not b1.any() and not b2.any()


def test_properties_and_names():
    names = [(m.name, m.task, m.classes, m.features) for m in every_model(features=5, classes=4)]
    assert names == [("linear", "regression", 0, 5), ("logistic", "classification", 2, 5),
                     ("softmax", "classification", 4, 5), ("mlp", "classification", 4, 5)]
    assert [repr(m) for m in every_model(features=2, classes=3, l2=0.5)] == [
        "LinearRegression(features=2, l2=0.5)", "LogisticRegression(features=2, l2=0.5)",
        "SoftmaxRegression(features=2, classes=3, l2=0.5)", "MLP(features=2, classes=3, hidden=[4, 3], l2=0.5)"]


def test_accepts_integer_and_boolean_inputs():
    model = LogisticRegression(2)
    a = model.loss_and_grad(np.zeros(3, dtype=int), np.array([[1, 0]]), np.array([True]))
    b = model.loss_and_grad(np.zeros(3), np.array([[1.0, 0.0]]), np.array([1.0]))
    assert a[0] == b[0] and np.array_equal(a[1], b[1])


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", every_model(), ids=repr)
def test_bad_shapes_name_the_shapes(model):
    params = np.zeros(model.size)
    x, y = batch(model, 4, np.random.default_rng(0))
    with pytest.raises(ValueError,
                       match=re.escape("x must have shape (b, 3) for a model with 3 features (got (4, 2))")):
        model.loss_and_grad(params, x[:, :2], y)
    with pytest.raises(ValueError, match=re.escape("x must have shape (b, 3)") + ".*" + re.escape("(got (4,))")):
        model.predict(params, x[:, 0])
    with pytest.raises(ValueError, match=re.escape("y must have shape (4,) to match x of shape (4, 3) (got (3,))")):
        model.loss_and_grad(params, x, y[:3])
    with pytest.raises(ValueError,
                       match=re.escape(f"params must have shape ({model.size},)") + ".*" + re.escape("(got (2,))")):
        model.loss_and_grad(np.zeros(2), x, y)
    with pytest.raises(TypeError, match="params must be a real numeric array"):
        model.loss_and_grad(np.array(["a"] * model.size), x, y)
    with pytest.raises(TypeError, match="x must be a real numeric array"):
        model.loss(params, x.astype(str), y)
    with pytest.raises(TypeError, match="params must be a float64 ndarray"):
        model.unflatten(params.astype(np.float32))


@pytest.mark.parametrize("bad", [-1, 3, 1.5, np.nan])
def test_bad_class_labels(bad):
    model = SoftmaxRegression(2, 3)
    with pytest.raises(ValueError, match=r"y must hold class labels 0\.\.2"):
        model.loss_and_grad(np.zeros(9), np.zeros((2, 2)), np.array([0.0, bad]))


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: LinearRegression(0), ValueError, r"features must be >= 1 \(got 0\)"),
        (lambda: LinearRegression(2.0), TypeError, r"features must be an integer \(got 2.0\)"),
        (lambda: LogisticRegression(True), TypeError, "features must be an integer"),
        (lambda: SoftmaxRegression(3, 1), ValueError, r"classes must be >= 2 \(got 1\)"),
        (lambda: MLP(3, 2, [4, 0]), ValueError, r"hidden\[1\] must be >= 1 \(got 0\)"),
        (lambda: MLP(3, 2, "64"), TypeError, "hidden must be a sequence"),
        (lambda: MLP(3, 2, 64), TypeError, "hidden must be a sequence"),
        (lambda: LinearRegression(3, l2=-0.1), ValueError, r"l2 must be finite and in \[0, inf\) \(got -0.1\)"),
        (lambda: LinearRegression(3, l2=float("nan")), ValueError, "l2 must be finite"),
        (lambda: LinearRegression(3, l2="0.1"), TypeError, "l2 must be a real number"),
        (lambda: MLP(3, 2, [4]).init_params(0), TypeError, "rng must be a numpy.random.Generator"),
    ],
)
def test_bad_constructor_arguments(build, error, message):
    with pytest.raises(error, match=message):
        build()


@given(z=st.lists(st.floats(-1e308, 1e308, allow_nan=False), min_size=1, max_size=50))
@example(z=[-4.143857608228386, -709.25711988353])  # 4.4e-16 and 5.3e-16 apart on an AVX-512 CPU
def test_softplus_is_log_one_plus_exp_to_a_few_units_in_the_last_place(z):
    """Against numpy's own logaddexp(0, z), an independent computation of log(1 + e^z).

    logaddexp calls the C library's exp and log1p one value at a time; softplus's whole-array
    exp and log1p come from SIMD code that depends on the CPU (on AVX-512, Intel's SVML, within 4
    units in the last place each). Without AVX-512 the two agree bit for bit; with it they were
    measured up to 5.3e-16 apart, so 2e-15 (9 units) leaves a margin of 4. Below the smallest
    normal float a result has fewer significant bits: there the difference is absolute."""
    from coded.ml.models.losses import softplus

    z = np.array([*z, -800.0, -40.0, -1e-12, 0.0, 1e-12, 40.0, 800.0])
    expected = np.logaddexp(0.0, z)
    np.testing.assert_allclose(softplus(z), expected, rtol=2e-15, atol=np.finfo(np.float64).tiny)
