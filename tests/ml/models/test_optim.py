"""Optimizers: convergence, the exact updates, bit-identical resume, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coded.ml.optim import SGD, Adam, Nesterov, Optimizer

OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "nesterov": Nesterov, "adam": Adam}

# A quadratic 0.5 (w - c)^T A (w - c) with eigenvalues 1..20 (L = 20, condition number 20).
_Q = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 6)))[0]
A = _Q @ np.diag(np.linspace(1.0, 20.0, 6)) @ _Q.T
C = np.arange(6, dtype=np.float64) - 2.5


def quadratic_grad(w: np.ndarray) -> np.ndarray:
    return A @ (w - C)


def run(opt: Optimizer, w: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        w = opt.step(w, quadratic_grad(w))
    return w


def steps_to_converge(opt: Optimizer, tolerance: float = 1e-8, limit: int = 5000) -> int:
    w = np.zeros(6)
    for step in range(limit):
        if np.linalg.norm(w - C) < tolerance:
            return step
        w = opt.step(w, quadratic_grad(w))
    return limit


def every_optimizer() -> list[Optimizer]:
    return [SGD(0.05), Nesterov(0.05, momentum=0.8), Adam(0.05)]


@pytest.mark.parametrize(
    ("opt", "steps", "tolerance"),
    [(SGD(1 / 20), 600, 1e-8), (Nesterov(1 / 20, momentum=0.6), 200, 1e-8), (Adam(0.1), 3000, 1e-4)],
    ids=["sgd", "nesterov", "adam"],
)
def test_converges_on_a_quadratic(opt, steps, tolerance):
    assert np.linalg.norm(run(opt, np.zeros(6), steps) - C) < tolerance


def test_momentum_accelerates():
    plain = steps_to_converge(SGD(1 / 20))
    accelerated = steps_to_converge(Nesterov(1 / 20, momentum=0.6))
    assert accelerated < plain / 2


def test_exact_updates():
    w0, g0, g1 = np.array([1.0, -2.0]), np.array([0.5, 4.0]), np.array([-1.0, 2.0])
    opt = Nesterov(0.1, momentum=0.9)
    w1 = opt.step(w0, g0)
    v1 = -0.1 * g0
    np.testing.assert_allclose(w1, w0 + 0.9 * v1 - 0.1 * g0)
    w2 = opt.step(w1, g1)
    v2 = 0.9 * v1 - 0.1 * g1
    np.testing.assert_allclose(w2, w1 + 0.9 * v2 - 0.1 * g1)
    np.testing.assert_allclose(opt.state_dict()["velocity"], v2)

    opt = Adam(0.1, eps=0.0 + 1e-12)
    np.testing.assert_allclose(opt.step(w0, g0), w0 - 0.1 * np.sign(g0))  # first Adam step: lr * sign(g)
    m, v = 0.9 * 0.1 * g0 + 0.1 * g1, 0.999 * 0.001 * g0**2 + 0.001 * g1**2
    expected = w0 - 0.1 * (m / (1 - 0.9**2)) / (np.sqrt(v / (1 - 0.999**2)) + 1e-12)
    np.testing.assert_allclose(opt.step(w0, g1), expected)
    np.testing.assert_array_equal(SGD(0.5).step(w0, g0), w0 - 0.5 * g0)


@pytest.mark.parametrize("opt", every_optimizer(), ids=lambda o: o.name)
def test_step_is_pure_in_params(opt):
    w = np.array([1.0, 2.0, 3.0])
    g = np.array([0.1, 0.2, 0.3])
    new = opt.step(w, g)
    np.testing.assert_array_equal(w, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(g, [0.1, 0.2, 0.3])
    assert not np.shares_memory(new, w) and new.dtype == np.float64


@given(kind=st.sampled_from(sorted(OPTIMIZERS)), before=st.integers(0, 12), after=st.integers(1, 12))
def test_resume_from_state_dict_is_bit_identical(kind, before, after):
    original = OPTIMIZERS[kind](0.03)
    w = run(original, np.zeros(6), before)
    state = original.state_dict()
    expected = run(original, w, after)
    resumed = OPTIMIZERS[kind](0.03)
    resumed.load_state_dict(state)
    assert resumed.steps == before
    assert np.array_equal(run(resumed, w.copy(), after), expected)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_resume_after_an_npz_round_trip(kind, tmp_path):
    original = OPTIMIZERS[kind](0.03)
    w = run(original, np.zeros(6), 5)
    np.savez(tmp_path / "checkpoint.npz", params=w, **original.state_dict())
    expected = run(original, w, 7)
    with np.load(tmp_path / "checkpoint.npz", allow_pickle=False) as saved:
        state = {name: saved[name] for name in saved.files if name != "params"}
        w_saved = saved["params"]
    resumed = OPTIMIZERS[kind](0.03)
    resumed.load_state_dict(state)
    assert np.array_equal(run(resumed, w_saved, 7), expected)


def test_state_dict_is_a_copy():
    opt = Nesterov(0.1)
    w = opt.step(np.ones(3), np.ones(3))
    state = opt.state_dict()
    state["velocity"][:] = 99.0
    assert not np.array_equal(opt.state_dict()["velocity"], state["velocity"])
    opt.load_state_dict(state)
    state["velocity"][:] = 0.0
    assert (opt.state_dict()["velocity"] == 99.0).all()
    assert SGD(0.1).state_dict() == {"steps": 0} and Adam(0.1).state_dict() == {"steps": 0}
    assert w.shape == (3,)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: SGD(0), ValueError, r"lr must be finite and in \(0, inf\) \(got 0.0\)"),
        (lambda: Adam(-0.1), ValueError, r"lr must be finite and in \(0, inf\) \(got -0.1\)"),
        (lambda: SGD(float("nan")), ValueError, r"lr must be finite .* \(got nan\)"),
        (lambda: Nesterov(float("inf")), ValueError, r"lr must be finite .* \(got inf\)"),
        (lambda: SGD("0.1"), TypeError, r"lr must be a real number \(got '0.1'\)"),
        (lambda: SGD(True), TypeError, "lr must be a real number"),
        (lambda: Nesterov(0.1, momentum=1.0), ValueError, r"momentum must be finite and in \[0, 1\) \(got 1.0\)"),
        (lambda: Adam(0.1, beta1=-0.5), ValueError, r"beta1 must be finite and in \[0, 1\)"),
        (lambda: Adam(0.1, beta2=1), ValueError, r"beta2 must be finite and in \[0, 1\)"),
        (lambda: Adam(0.1, eps=0.0), ValueError, r"eps must be finite and in \(0, inf\)"),
    ],
)
def test_bad_hyperparameters(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_bad_steps():
    opt = Adam(0.1)
    with pytest.raises(ValueError, match=r"grad must have the shape of params \(3,\) \(got \(2,\)\)"):
        opt.step(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match=r"params must be a 1-D vector \(got shape \(2, 2\)\)"):
        opt.step(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(TypeError, match="grad must be a real numeric array"):
        opt.step(np.zeros(2), np.array(["a", "b"]))
    opt.step(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match=r"params of shape \(4,\) do not match the optimizer state of shape \(3,\)"):
        opt.step(np.zeros(4), np.ones(4))


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        ({"steps": 2, "m": np.zeros(3)}, ValueError, r"adam state missing key\(s\) \['v'\] \(steps=2\)"),
        ({"steps": 0, "m": np.zeros(3), "v": np.zeros(3)}, ValueError, r"adam state has unknown key\(s\) \['m', 'v'\]"),
        ({"steps": 1, "m": np.zeros(3), "v": np.zeros(3), "lr": 0.1}, ValueError, r"unknown key\(s\) \['lr'\]"),
        ({"m": np.zeros(3)}, ValueError, "state is missing key 'steps'"),
        ({"steps": -1}, ValueError, r"state\['steps'\] must be >= 0 \(got -1\)"),
        ({"steps": 1.0, "m": np.zeros(3), "v": np.zeros(3)}, TypeError, r"state\['steps'\] must be an integer"),
        ({"steps": 1, "m": np.zeros(3), "v": np.zeros(2)}, ValueError, "state buffers must have one shape"),
        ({"steps": 1, "m": np.zeros(3), "v": np.array(["a"] * 3)}, TypeError,
         r"state\['v'\] must be a real numeric array"),
        ([("steps", 0)], TypeError, r"state must be a mapping \(got list\)"),
    ],
)
def test_bad_states(state, error, message):
    with pytest.raises(error, match=message):
        Adam(0.1).load_state_dict(state)
