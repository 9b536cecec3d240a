"""What a job is built from, made from the typed sections of its spec: the one place that turns
configuration into data, models and optimizers (a job's code is built by the validation of its
spec, and kept with it: :attr:`coded.jobs.spec.GradientJob.gradient_code`).

The master and every worker derive the code, the data split and the model from the job
specification alone (generated data from its seed), so the only things that cross the network are
parameters, messages and, for user files, the data themselves.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coded.jobs.spec import CodeNetJob, GradientJob
from coded.jobs.spec.learning import (
    AdamOptimizer,
    AdamWOptimizer,
    AmazonLikeData,
    CategoricalData,
    CosineSchedule,
    DataSpec,
    DigitsData,
    FileData,
    GaussianMixtureData,
    ImageData,
    LinearData,
    LinearModel,
    LogisticModel,
    MLPModel,
    ModelSpec,
    NesterovOptimizer,
    OneFile,
    OptimizerSpec,
    ScheduleSpec,
    SoftmaxModel,
    StepSchedule,
    TorchModel,
)
from coded.ml import pytorch
from coded.ml.data import (
    Dataset,
    Synthetic,
    digits,
    gaussian_mixture,
    linear_recipe,
    load_file,
    load_images,
    mixture_recipe,
    partition_indices,
)
from coded.ml.data.amazon import AMAZON_LABEL, AMAZON_SKIP, amazon_like
from coded.ml.data.categorical_csv import read_categorical_csv
from coded.ml.data.dataset import hold_out, train_size
from coded.ml.data.digits import DIGITS, DIGITS_SHAPE
from coded.ml.data.idx import read_idx
from coded.ml.data.one_hot import encode
from coded.ml.data.scaling import standardize
from coded.ml.models import MLP, LinearRegression, LogisticRegression, Model, SoftmaxRegression
from coded.ml.network import Batches, train_reference
from coded.ml.optim import SGD, Adam, Nesterov, Optimizer
from coded.ml.schedules import Cosine, Schedule, Step

__all__ = [
    "DRAWN_IN_PART",
    "build_model",
    "build_optimizer",
    "check_fit",
    "codenet_reference",
    "generated_layout",
    "load_codenet_data",
    "load_data",
    "load_dataset",
    "load_partitions",
    "partition_rows",
    "split_rows",
    "synthetic",
]


def build_model(model: ModelSpec, shape: tuple[int, ...], classes: int, device: str = "cpu") -> Model:
    """The model of a ``model`` section, sized for data whose samples have ``shape`` (flattened:
    ``prod(shape)`` features) and ``classes`` classes (0: regression); a torch model computes on
    ``device`` ("cpu", "cuda", "cuda:1": a worker's ``--torch-device``).

    Raises
    ------
    ValueError
        Naming the field, when the model does not fit the data or cannot be built here (a torch
        model without PyTorch, an unknown architecture, arguments it does not take).
    """
    model.check_classes(classes)
    features = math.prod(shape)
    if isinstance(model, TorchModel):
        return _torch_model(model, shape, classes, device)
    if isinstance(model, LinearModel):
        return LinearRegression(features, model.l2)
    if isinstance(model, LogisticModel):
        return LogisticRegression(features, model.l2)
    if isinstance(model, SoftmaxModel):
        return SoftmaxRegression(features, classes, model.l2)
    assert isinstance(model, MLPModel)
    return MLP(features, classes, list(model.hidden), model.l2)


def _torch_model(model: TorchModel, shape: tuple[int, ...], classes: int, device: str) -> Model:
    if model.classes is not None:
        if model.classes < classes:
            raise ValueError(f"model.classes: {model.classes} outputs do not fit the data, whose labels go up to "
                             f"{classes - 1}")
        classes = model.classes
    if model.input_shape is not None:
        if math.prod(model.input_shape) != math.prod(shape):
            raise ValueError(f"model.input_shape: {model.input_shape} holds {math.prod(model.input_shape)} values, "
                             f"but a sample of the data has {math.prod(shape)}")
        shape = tuple(model.input_shape)
    if not pytorch.available():
        raise ValueError(f"model.type: torch needs PyTorch, which is not installed here: {pytorch.INSTALL}")
    from coded.ml.pytorch.model import TorchModel as Torch  # imports torch: only for torch jobs

    try:
        return Torch(model.name, shape, classes, model.args, model.l2, model.dtype, device)
    except LookupError as error:
        raise ValueError(f"model.name: {error.args[0]}") from None
    except TypeError as error:
        raise ValueError(f"model.args: {error}") from None
    except ValueError as error:
        raise ValueError(f"model: {error}") from None


def check_fit(spec: GradientJob, samples: int, shape: tuple[int, ...], classes: int, sparse: bool = False) -> Model:
    """The job's model, once the data are known to fit it and its mini-batches (``samples``
    training samples of ``shape``, ``classes`` classes, ``sparse`` or dense); what the master
    checks at submission.

    Raises
    ------
    ValueError
        Naming the field.
    """
    if sparse and isinstance(spec.model, TorchModel):
        raise ValueError("model.type: torch computes on dense tensors, and the data are sparse (use linear, "
                         "logistic, softmax or mlp, which compute on sparse rows as they are)")
    model = build_model(spec.model, shape, classes)
    coding = spec.coding
    if sum(len(coding.partitions(i)) for i in range(spec.workers)) > coding.k:  # copies of a partition are compared
        try:
            model.check_repeatable()
        except ValueError as error:
            raise ValueError(f"model: {error}") from None
    batch, partitions = spec.optimizer.batch, spec.coding.k
    if partitions > samples:
        raise ValueError(f"data: {samples} training samples do not fill the code's {partitions} data partitions")
    if batch is not None and batch > samples // partitions:
        raise ValueError(f"optimizer.batch: {batch} is more than the {samples // partitions} training samples of the "
                         f"smallest of the {partitions} data partitions")
    return model


def generated_layout(data: DataSpec) -> tuple[int, tuple[int, ...], int] | None:
    """(training samples, sample shape, classes) of generated data, without generating them;
    None for uploaded data (known once the files are read)."""
    if isinstance(data, (GaussianMixtureData, LinearData)):
        return train_size(data.samples), (data.features,), data.known_classes or 0
    if isinstance(data, DigitsData):
        return train_size(DIGITS), DIGITS_SHAPE, 10
    return None


def build_optimizer(optimizer: OptimizerSpec, steps: int) -> Optimizer:
    """The optimizer of an ``optimizer`` section, its schedule spread over ``steps`` steps."""
    schedule = _schedule(optimizer.schedule, steps)
    if isinstance(optimizer, NesterovOptimizer):
        return Nesterov(optimizer.lr, optimizer.momentum, schedule=schedule)
    if isinstance(optimizer, (AdamOptimizer, AdamWOptimizer)):
        return Adam(optimizer.lr, optimizer.beta1, optimizer.beta2, optimizer.eps, optimizer.weight_decay,
                    schedule=schedule)
    return SGD(optimizer.lr, optimizer.momentum, optimizer.weight_decay, schedule=schedule)


def _schedule(schedule: ScheduleSpec | None, steps: int) -> Schedule:
    if isinstance(schedule, StepSchedule):
        return Step(schedule.warmup, every=schedule.every, gamma=schedule.gamma)
    if isinstance(schedule, CosineSchedule):
        return Cosine(schedule.warmup, total=steps, floor=schedule.floor)
    return Schedule(schedule.warmup if schedule is not None else 0)


def load_dataset(data: DataSpec, files: Mapping[str, Path] | None = None, task: str = "classification",
                 seed: int = 0) -> Dataset:
    """The dataset of a ``data`` section; uploaded files are looked up by the path the spec gives.
    Images without a test file hold out their test set here (``seed`` draws it), so that the
    normalisation statistics never see it.

    Raises
    ------
    ValueError, OSError
        For a file that cannot be read or does not hold a dataset.
    """
    recipe = synthetic(data)
    if recipe is not None:
        return recipe.dataset()
    if isinstance(data, DigitsData):
        return digits(seed=data.seed)
    if isinstance(data, ImageData):
        paths = files or {}
        return load_images(data.format, [paths[f] for f in data.train], [paths[f] for f in data.test],
                           data.normalize, name=data.format, test_fraction=data.test_fraction, seed=seed)
    if isinstance(data, (CategoricalData, AmazonLikeData)):
        return _categorical(data, (files or {}).get(data.path) if isinstance(data, CategoricalData) else None, task)
    assert isinstance(data, FileData)
    return load_file((files or {})[data.path], task=task, format=data.type, features=data.features,
                     zero_based=data.zero_based)


def _categorical(data: CategoricalData | AmazonLikeData, path: Path | None, task: str) -> Dataset:
    """A categorical CSV (uploaded, or the Amazon-shaped one generated), encoded as the papers did."""
    if task != "classification":
        raise ValueError("categorical data have class labels: use a classifier (logistic, softmax, mlp)")
    if isinstance(data, AmazonLikeData):  # written as the same CSV, so both go through one reader
        source: Path | io.StringIO = io.StringIO(amazon_like(data.rows, data.seed, data.positive))
        label, columns, skip = AMAZON_LABEL, None, [list(pair) for pair in AMAZON_SKIP]
        name = f"amazon_like(rows={data.rows}, seed={data.seed})"
    else:
        assert path is not None
        source, label, columns, skip, name = path, data.label, data.columns, data.skip, path.name
    table = read_categorical_csv(source, label, columns)
    x = encode(table, data.interactions, skip)
    return Dataset(x, table.labels, x[:0], table.labels[:0], classes=max(int(table.labels.max()) + 1, 2), name=name)


def load_data(spec: GradientJob, files: Mapping[str, Path] | None = None) -> Dataset:
    """A gradient job's dataset. A file without a test set, and generated categorical data, get
    one: a seeded random ``data.test_fraction`` of its rows. The split and the scaling work in the
    loaded arrays: the memory of the data once, and of the test rows."""
    task = "regression" if isinstance(spec.model, LinearModel) else "classification"
    dataset = load_dataset(spec.data, files, task, spec.seed)
    if (isinstance(spec.data, (OneFile, AmazonLikeData)) and not len(dataset.y_test)
            and spec.data.test_fraction):
        dataset = hold_out(dataset, spec.data.test_fraction, spec.seed, in_place=True)
    if isinstance(spec.data, FileData) and spec.data.normalize == "standardize":  # after the split: train's statistics
        dataset = standardize(dataset, in_place=True)
    return dataset


#: generated data that :func:`synthetic` draws in part
DRAWN_IN_PART = (GaussianMixtureData, LinearData)


def synthetic(data: DataSpec) -> Synthetic | None:
    """The recipe of generated data that can be drawn in part (:mod:`coded.ml.data.synthetic`);
    None for the rest (uploaded, bundled, categorical: loaded whole)."""
    if isinstance(data, GaussianMixtureData):
        return mixture_recipe(data.samples, data.features, data.classes, seed=data.seed)
    if isinstance(data, LinearData):
        return linear_recipe(data.samples, data.features, data.noise, seed=data.seed)
    return None


def split_rows(spec: GradientJob, dataset: Dataset, partitions: int) -> list[np.ndarray]:
    """Row indices of the training set in each data partition (seeded by the job)."""
    return partition_rows(spec, len(dataset.y_train), partitions, dataset.y_train)


def partition_rows(spec: GradientJob, samples: int, partitions: int,
                   labels: np.ndarray | None = None) -> list[np.ndarray]:
    """Row indices of ``samples`` training samples in each data partition (seeded by the job);
    ``labels`` are read by ``partition: sorted_by_label`` only.

    Generated data drawn in part (:func:`synthetic`) are cut into contiguous runs of their rows
    when shuffled: their rows are i.i.d. draws already, so a run is as random a sample as a
    shuffled one, and a worker draws only the blocks its partitions lie in.
    """
    if spec.partition == "shuffled" and isinstance(spec.data, DRAWN_IN_PART):
        return [np.asarray(run, dtype=np.int64) for run in np.array_split(np.arange(samples), partitions)]
    return partition_indices(samples, partitions, seed=spec.seed, order=spec.partition, labels=labels)


def load_partitions(spec: GradientJob, partitions: int,
                    held: tuple[int, ...]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The training rows (x, y) of the data partitions ``held`` of ``partitions``, for generated
    data (a worker's share of a job with no upload). Drawn in part where the data can be
    (:func:`synthetic`): memory for the partitions held and one block, not for the dataset."""
    recipe = synthetic(spec.data)
    if recipe is None:
        dataset = load_data(spec)
        rows = split_rows(spec, dataset, partitions)
        return {j: (dataset.x_train[rows[j]], dataset.y_train[rows[j]]) for j in held}
    labels = recipe.labels() if spec.partition == "sorted_by_label" else None
    rows = partition_rows(spec, recipe.train, partitions, labels)
    return {j: recipe.rows(rows[j]) for j in held}


def load_codenet_data(spec: CodeNetJob, files: Mapping[str, Path] | None = None) -> Batches:
    """A CodeNet job's training and test data; batch k is a function of (seed, k) alone."""
    data = spec.data
    if data.type == "digits":
        dataset = digits(seed=data.seed)
    elif data.type == "gaussian_mixture":
        dataset = gaussian_mixture(data.samples, data.features, data.classes, seed=data.seed)
    else:
        images = read_idx((files or {})[str(data.images)])
        labels = read_idx((files or {})[str(data.labels)])
        images = images.reshape(len(images), -1).astype(np.float64) / 255.0
        if len(labels) != len(images) or labels.ndim != 1:
            raise ValueError(f"mnist: {len(images)} images but labels of shape {labels.shape}")
        cut = len(labels) - len(labels) // 7  # 60000/10000 like MNIST's own split
        order = np.random.default_rng(data.seed).permutation(len(labels))
        dataset = Dataset(images[order[:cut]], labels[order[:cut]].astype(np.int64), images[order[cut:]],
                          labels[order[cut:]].astype(np.int64), classes=int(labels.max()) + 1, name="mnist")
    if spec.optimizer.batch > len(dataset.y_train):
        raise ValueError(f"optimizer.batch: {spec.optimizer.batch} > {len(dataset.y_train)} training samples")
    return Batches(np.asarray(dataset.x_train), np.asarray(dataset.y_train, dtype=np.int64),
                   np.asarray(dataset.x_test), np.asarray(dataset.y_test, dtype=np.int64),
                   dataset.classes, spec.optimizer.batch, spec.seed)


def codenet_reference(spec: CodeNetJob, data: Batches) -> list[np.ndarray]:
    """A CodeNet job's training in one process (:func:`coded.ml.network.train_reference`)."""
    return train_reference(data, spec.model.hidden, spec.optimizer.lr, spec.seed, spec.iterations)
