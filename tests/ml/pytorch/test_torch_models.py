"""PyTorch models behind the Model interface: gradients against finite differences, sums over
samples, a fixed parameter order that is the module's state dict, plugins by entry point."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from coded.ml import pytorch

pytestmark = pytest.mark.torch

SHAPES = {"mlp": (1, 8, 8), "lenet": (1, 8, 8), "resnet": (3, 12, 12)}
ARGS = {"mlp": {"hidden": [7]}, "lenet": {"channels": [3, 4], "hidden": [9], "kernel": 3},
        "resnet": {"width": 4, "blocks": [1, 1]}}


def model_of(name: str, dtype: str = "float64", **kwargs):
    from coded.ml.pytorch.model import TorchModel

    return TorchModel(name, SHAPES[name], 5, ARGS[name], dtype=dtype, **kwargs)


def batch(model, b: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((b, model.features)), rng.integers(0, model.classes, b)


@pytest.mark.parametrize("name", list(SHAPES))
def test_gradients_match_central_differences_of_the_summed_cross_entropy(name):
    model = model_of(name)
    params = model.init_params(np.random.default_rng(1))
    x, y = batch(model, 6)
    loss, grad = model.loss_and_grad(params, x, y)
    # the loss, computed independently: summed softmax cross-entropy of the predicted probabilities
    assert loss == pytest.approx(-np.log(model.predict(params, x)[np.arange(6), y]).sum(), rel=1e-12)
    rng = np.random.default_rng(2)
    for index in rng.choice(model.size, 12, replace=False):
        step = np.zeros(model.size)
        step[index] = 1e-6
        numeric = (model.loss(params + step, x, y) - model.loss(params - step, x, y)) / 2e-6
        assert grad[index] == pytest.approx(numeric, rel=1e-5, abs=1e-7), index


@pytest.mark.parametrize("name", list(SHAPES))
def test_partial_gradients_of_disjoint_batches_add_up_to_the_gradient_of_their_union(name):
    model = model_of(name)
    params = model.init_params(np.random.default_rng(3))
    x, y = batch(model, 10)
    whole = model.partial(params, x, y)
    parts = model.partial(params, x[:3], y[:3]) + model.partial(params, x[3:], y[3:])
    assert np.abs(parts - whole).max() <= 1e-12 * np.abs(whole).max()
    assert np.array_equal(model.partial(params, x[:0], y[:0]), np.zeros(model.size + 1))


def test_the_parameter_vector_is_the_state_dict_in_order_and_loads_into_the_module():
    import torch

    model = model_of("lenet")
    params = model.init_params(np.random.default_rng(4))
    module = pytorch.factory("lenet")(SHAPES["lenet"], 5, **ARGS["lenet"]).double()
    assert list(model.arrays(params)) == list(module.state_dict())
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.arrays(params).items()})
    x, _ = batch(model, 4)
    with torch.no_grad():
        logits = module(torch.from_numpy(x).reshape(4, *SHAPES["lenet"]))
    assert np.allclose(torch.softmax(logits, 1).numpy(), model.predict(params, x), rtol=0, atol=1e-12)
    assert np.array_equal(np.concatenate([v.ravel() for v in model.arrays(params).values()]), params)


def test_initial_parameters_are_a_function_of_the_rng_alone():
    first, second = model_of("resnet"), model_of("resnet")
    a = first.init_params(np.random.default_rng(7))
    assert np.array_equal(a, second.init_params(np.random.default_rng(7)))
    assert not np.array_equal(a, first.init_params(np.random.default_rng(8)))


def test_weight_decay_falls_on_weights_not_on_biases_or_norm_scales():
    model = model_of("resnet", l2=0.5)
    params = model.init_params(np.random.default_rng(0))
    penalty, grad = model.regularization(params)
    weights = [(k, v) for k, v in model.arrays(params).items() if v.ndim >= 2]
    assert penalty == pytest.approx(0.25 * sum(float(np.sum(v * v)) for _, v in weights), rel=1e-12)
    for (name, value), (_, g) in zip(model.arrays(params).items(), model.arrays(grad).items(), strict=True):
        assert np.array_equal(g, 0.5 * value if value.ndim >= 2 else np.zeros_like(value)), name


def test_float32_workers_differ_from_float64_by_float32_rounding_only():
    exact, single = model_of("lenet"), model_of("lenet", dtype="float32")
    params = exact.init_params(np.random.default_rng(5))
    x, y = batch(exact, 32)
    reference = exact.partial(params, x, y)
    assert 1e-9 < np.abs(single.partial(params, x, y) - reference).max() / np.abs(reference).max() < 1e-5


@pytest.mark.parametrize(
    ("name", "shape", "args", "error", "message"),
    [
        ("nonexistent", (1, 8, 8), {}, LookupError, r"unknown architecture 'nonexistent' \(this process has: "
                                                    r"lenet, mlp, resnet"),
        ("lenet", (1, 8, 8), {"depth": 3}, TypeError, "lenet: .*unexpected keyword argument 'depth'"),
        ("lenet", (64,), {}, ValueError, r"lenet takes images \(C, H, W\) of at least 4 x 4 pixels \(got samples of "
                                         r"shape \[64\]\)"),
        ("lenet", (1, 8, 8), {"kernel": 4}, ValueError, "kernel must be 1, 3, 5 or 7"),
        ("resnet", (3, 8, 8), {"blocks": [1, 1, 1, 1, 1]}, ValueError, "blocks must be 1 to 4 stages"),
    ],
)
def test_what_cannot_be_built_says_why(name, shape, args, error, message):
    from coded.ml.pytorch.model import TorchModel

    with pytest.raises(error, match=message):
        TorchModel(name, shape, 10, args)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """An installed distribution whose ``coded.models`` entry points register two factories: one
    fine, one with BatchNorm's running statistics (which workers cannot keep consistent)."""
    (tmp_path / "tiny_models.py").write_text(textwrap.dedent("""
        import math
        from torch import nn

        def tiny(input_shape, classes, width=3):
            return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), width), nn.Tanh(),
                                 nn.Linear(width, classes))

        def normed(input_shape, classes):
            return nn.Sequential(nn.Flatten(), nn.BatchNorm1d(math.prod(input_shape)),
                                 nn.Linear(math.prod(input_shape), classes))

        def wrong_outputs(input_shape, classes):
            return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), classes + 1))
    """))
    info = tmp_path / "tiny_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-models\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[coded.models]\ntiny = tiny_models:tiny\nnormed = tiny_models:normed\n"
                                           "wrong = tiny_models:wrong_outputs\nlenet = tiny_models:tiny\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pytorch.architectures.cache_clear()
    yield
    pytorch.architectures.cache_clear()


@pytest.mark.usefixtures("plugin")
def test_plugins_register_architectures_by_entry_point_but_never_replace_a_built_in():
    from coded.ml.pytorch.model import TorchModel

    known = pytorch.architectures()
    assert known["tiny"] == "tiny_models:tiny" and known["lenet"] == "builtin"
    model = TorchModel("tiny", (2, 3), 4, {"width": 5}, dtype="float64")
    assert model.size == 6 * 5 + 5 + 5 * 4 + 4
    x = np.random.default_rng(0).standard_normal((3, 6))
    assert np.allclose(model.predict(model.init_params(np.random.default_rng(0)), x).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match=r"normed: the module keeps buffers \(1.running_mean.*use GroupNorm"):
        TorchModel("normed", (2, 3), 4)
    with pytest.raises(ValueError, match=r"wrong maps 2 samples to outputs of shape \[2, 5\]; it must give logits "
                                         r"of shape \[2, 4\]"):
        TorchModel("wrong", (2, 3), 4)


def test_dropout_draws_are_a_function_of_the_seed_and_evaluation_draws_none():
    """The holders of a partition pass the same seed and must send the same partial gradient;
    another seed draws other masks; evaluation (loss, predict) runs without dropout."""
    from coded.ml.pytorch.model import TorchModel

    model = TorchModel("mlp", (1, 8, 8), 5, {"hidden": [32], "dropout": 0.5}, dtype="float64")
    params = model.init_params(np.random.default_rng(4))
    x, y = batch(model, 12)
    first = model.partial(params, x, y, seed=9)
    assert np.array_equal(first, model.partial(params, x, y, seed=9))
    assert np.abs(first - model.partial(params, x, y, seed=10)).max() > 1e-3 * np.abs(first).max()
    # without dropout the same module computes the loss of the eval-mode forward pass, independently
    # of the dropout layer: the plain network's cross-entropy from the same weights
    plain = TorchModel("mlp", (1, 8, 8), 5, {"hidden": [32]}, dtype="float64")
    assert model.loss(params, x, y) == model.loss(params, x, y) == pytest.approx(plain.loss(params, x, y), rel=1e-12)
    assert np.array_equal(model.predict(params, x), plain.predict(params, x))
    # a train-mode pass does draw: its loss is not the eval-mode one
    assert abs(first[-1] - plain.loss(params, x, y)) > 1e-6


@pytest.fixture
def unseedable(tmp_path, monkeypatch):
    """A plugin module that draws its masks from a generator of its own, which seeding cannot reach."""
    (tmp_path / "own_draws.py").write_text(textwrap.dedent("""
        import math
        import torch
        from torch import nn

        class OwnDraws(nn.Module):
            def __init__(self, features, classes):
                super().__init__()
                self.linear = nn.Linear(features, classes)
                self.generator = torch.Generator().manual_seed(0)

            def forward(self, x):
                x = x.flatten(1)
                return self.linear(x * (torch.rand(x.shape, generator=self.generator, dtype=x.dtype) > 0.5))

        def own(input_shape, classes):
            return OwnDraws(math.prod(input_shape), classes)

        def dropped(input_shape, classes):
            features = math.prod(input_shape)
            return nn.Sequential(nn.Flatten(), nn.Linear(features, 16), nn.ReLU(), nn.Dropout(0.5),
                                 nn.Linear(16, classes))
    """))
    info = tmp_path / "own_draws-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: own-draws\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[coded.models]\nown = own_draws:own\ndropped = own_draws:dropped\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pytorch.architectures.cache_clear()
    yield
    pytorch.architectures.cache_clear()


@pytest.mark.usefixtures("unseedable")
def test_a_model_whose_draws_seeding_cannot_reach_is_refused_for_coded_jobs_naming_the_model():
    from coded.jobs.build import check_fit
    from coded.jobs.spec import parse_job

    def job(name: str, scheme: str):
        return parse_job(f"kind: gradient_coding\nmodel: {{type: torch, name: {name}}}\ndata: {{type: digits}}\n"
                         "workers: 6\n"
                         f"code: {{scheme: {scheme}{', stragglers: 2' if scheme == 'cyclic' else ''}}}\n"
                         "optimizer: {type: adam, lr: 0.01}\niterations: 5\n")

    with pytest.raises(ValueError, match=r"^model: own: two passes over the same samples with the same seed give "
                                         r"different gradients .* run it uncoded"):
        check_fit(job("own", "cyclic"), 1000, (1, 8, 8), 10)
    check_fit(job("own", "uncoded"), 1000, (1, 8, 8), 10)  # no copies to compare: it trains as it is
    check_fit(job("dropped", "cyclic"), 1000, (1, 8, 8), 10)  # nn.Dropout draws from the seeded generator
