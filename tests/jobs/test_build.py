"""The factories: typed spec sections -> codes, models, optimizers, data; codes built once."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from coded.jobs.build import build_model, build_optimizer, load_data, load_dataset, load_partitions, split_rows
from coded.jobs.spec import GradientJob, parse_job
from coded.ml.data import digits, gaussian_mixture, linear_regression
from coded.ml.models import MLP, LinearRegression, LogisticRegression, SoftmaxRegression
from coded.ml.optim import SGD, Adam, Nesterov

BASE = {"kind": "gradient_coding", "workers": 6, "code": {"scheme": "cyclic", "stragglers": 2},
        "model": {"type": "logistic"}, "data": {"type": "gaussian_mixture", "samples": 300, "features": 5},
        "optimizer": {"type": "sgd", "lr": 0.1}, "iterations": 3}


def job(**changes: object) -> GradientJob:
    spec = parse_job(yaml.safe_dump({**BASE, **changes}))
    assert isinstance(spec, GradientJob)
    return spec


@pytest.mark.parametrize(
    ("model", "data", "cls", "sizes"),
    [
        ({"type": "linear"}, {"type": "linear", "samples": 50, "features": 5}, LinearRegression, (5, 1)),
        ({"type": "logistic", "l2": 1e-4}, BASE["data"], LogisticRegression, (5, 1)),
        ({"type": "softmax"}, {"type": "gaussian_mixture", "samples": 90, "features": 5, "classes": 3},
         SoftmaxRegression, (5, 3)),
        ({"type": "mlp", "hidden": [16, 8], "l2": 0.1}, {"type": "digits"}, MLP, (64, 16, 8, 10)),
    ],
)
def test_builds_the_model_of_the_section(model, data, cls, sizes):
    spec = job(model=model, data=data)
    dataset = load_data(spec)
    built = build_model(spec.model, dataset.sample_shape, dataset.classes)
    assert type(built) is cls and built.layer_sizes == sizes and built.l2 == model.get("l2", 0.0)


def test_a_model_that_does_not_fit_the_data_of_a_file_is_refused_when_built():
    spec = job(data={"type": "npz", "path": "x.npz"})
    for classes, message in ((3, r"logistic needs exactly 2 classes .* \(the data have 3 classes\)"),
                             (0, r"logistic needs exactly 2 classes .* no classes: regression")):
        with pytest.raises(ValueError, match=message):
            build_model(spec.model, (4,), classes)


@pytest.mark.parametrize(
    ("optimizer", "cls", "attributes"),
    [
        ({"type": "sgd", "lr": 0.5}, SGD, {"lr": 0.5}),
        ({"lr": 1}, Nesterov, {"lr": 1.0, "momentum": 0.9}),  # nesterov when no type is given
        ({"type": "nesterov", "lr": 0.2, "momentum": 0.5}, Nesterov, {"lr": 0.2, "momentum": 0.5}),
        ({"type": "adam", "lr": 1e-3, "beta2": 0.99}, Adam, {"lr": 1e-3}),
        ({"type": "adamw", "lr": 1e-3}, Adam, {"lr": 1e-3}),
        ({"type": "sgd", "lr": 0.5, "momentum": 0.9, "weight_decay": 1e-4, "batch": 8}, SGD, {"lr": 0.5}),
    ],
)
def test_builds_the_optimizer_of_the_section(optimizer, cls, attributes):
    built = build_optimizer(job(optimizer=optimizer).optimizer, steps=10)
    assert type(built) is cls
    assert {name: getattr(built, name) for name in attributes} == attributes


@pytest.mark.parametrize(
    ("data", "direct"),
    [
        ({"type": "gaussian_mixture", "samples": 500, "features": 6, "classes": 3, "seed": 1},
         lambda: gaussian_mixture(500, 6, classes=3, seed=1)),
        ({"type": "linear", "samples": 300, "features": 4, "noise": 0.3, "seed": 2},
         lambda: linear_regression(300, 4, noise=0.3, seed=2)),
        ({"type": "digits", "seed": 3}, lambda: digits(seed=3)),
    ],
)
def test_generated_data_equal_their_generators(data, direct):
    model = {"type": "linear"} if data["type"] == "linear" else {"type": "softmax"}
    got, want = load_dataset(job(data=data, model=model).data), direct()
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(got, name), getattr(want, name))


def test_file_data_get_a_seeded_test_split(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((50, 3)), y=rng.integers(0, 2, 50))
    spec = job(data={"type": "npz", "path": "train.npz", "test_fraction": 0.2})
    first = load_data(spec, {"train.npz": tmp_path / "d.npz"})
    again = load_data(spec, {"train.npz": tmp_path / "d.npz"})
    assert (len(first.y_train), len(first.y_test)) == (40, 10)
    assert np.array_equal(first.x_test, again.x_test)


def test_schemes_that_ignore_stragglers_get_s_zero():
    assert job(code={"scheme": "uncoded", "stragglers": 3}).gradient_code.s == 0
    assert job(code={"scheme": "cyclic", "stragglers": 2}, verify="off").gradient_code.s == 2


@pytest.mark.parametrize(("code", "verify", "built"), [
    ({"scheme": "cyclic", "stragglers": 2}, None, 3),          # the default check: one reply more
    ({"scheme": "cyclic", "stragglers": 2}, {"errors": 1}, 4),  # locating one wrong reply: two more
    ({"scheme": "cyclic", "stragglers": 0}, None, 1),          # waits for all, and checks them
    ({"scheme": "ye_abbe", "stragglers": 1, "m": 2}, None, 2),
    ({"scheme": "frc", "stragglers": 1}, None, 2),
    ({"scheme": "ignore_stragglers", "stragglers": 2}, None, 2),  # no redundancy: nothing to wait for
    ({"scheme": "kasync", "stragglers": 2}, None, 2),
])
def test_stragglers_are_the_workers_a_checked_iteration_does_not_wait_for(code, verify, built):
    spec = job(code=code, **({"verify": verify} if verify else {}))
    gc = spec.gradient_code
    assert gc.s == built
    if gc.checkable:  # the replies of all but the slowest ``stragglers`` decode, with the check's surplus
        assert gc.surplus(range(code["stragglers"], gc.n)) == spec.check_replies > 0


@pytest.mark.parametrize(
    ("schedule", "factors"),
    [
        (None, [1.0, 1.0, 1.0, 1.0]),
        ({"type": "constant", "warmup": 4}, [0.25, 0.5, 0.75, 1.0]),
        ({"type": "step", "every": 2, "gamma": 0.5}, [1.0, 1.0, 0.5, 0.5]),
        ({"type": "cosine", "floor": 0.0}, [1.0, 0.75, 0.25, 0.0]),  # 1/2 (1 + cos(pi t / 3)), 4 steps
    ],
)
def test_the_schedule_scales_the_rate_of_each_step(schedule, factors):
    optimizer = {"type": "sgd", "lr": 0.2, **({"schedule": schedule} if schedule else {})}
    built = build_optimizer(job(optimizer=optimizer).optimizer, steps=4)
    rates = []
    for _ in range(4):
        rates.append(built.current_lr)
        built.step(np.zeros(2), np.zeros(2))
    assert np.allclose(rates, [0.2 * f for f in factors], rtol=0, atol=1e-15)


@pytest.mark.parametrize("data", [
    {"type": "gaussian_mixture", "samples": 20000, "features": 3, "seed": 4},
    {"type": "gaussian_mixture", "samples": 9000, "features": 3, "classes": 4, "seed": 4},
    {"type": "linear", "samples": 9000, "features": 3, "seed": 4},
    {"type": "digits"},
], ids=["binary", "multiclass", "linear", "digits"])
@pytest.mark.parametrize("order", ["shuffled", "sorted_by_label"])
def test_a_workers_partitions_are_the_rows_of_the_whole_dataset_and_the_same_for_every_holder(data, order):
    spec = job(data=data, partition=order, model={"type": "linear"} if data["type"] == "linear" else
               {"type": "softmax"} if data.get("classes", 2) > 2 or data["type"] == "digits" else {"type": "logistic"})
    whole = load_data(spec)
    rows = split_rows(spec, whole, 6)
    assert sorted(np.concatenate(rows).tolist()) == list(range(len(whole.y_train)))  # each row once
    first = load_partitions(spec, 6, (0, 1, 2))  # worker 0 of a cyclic code with s = 2
    second = load_partitions(spec, 6, (2, 3, 4))  # worker 2, the other holder of partition 2
    assert set(first) == {0, 1, 2} and set(second) == {2, 3, 4}
    for held in (first, second):
        for j, (x, y) in held.items():
            assert np.array_equal(x, whole.x_train[rows[j]]) and np.array_equal(y, whole.y_train[rows[j]]), j
    if order == "sorted_by_label" and data["type"] != "linear":  # the order shows in the partitions' labels
        assert first[0][1].max() <= second[4][1].min()
