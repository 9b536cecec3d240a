"""What a job is built from, made from the typed sections of its spec: the one place that turns
configuration into codes, data, models and optimizers.

The master and every worker derive the code, the data split and the model from the job
specification alone (generated data from its seed), so the only things that cross the network are
parameters, messages and, for user files, the data themselves. A job's code is built once per
process and cached: validation, the master's runner and a worker's assignment share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coded.codes import GradientCode, MatmulCode
from coded.jobs.spec import (
    UPLOADED,
    AdamOptimizer,
    AdamWOptimizer,
    CodeNetJob,
    CosineSchedule,
    DataSpec,
    DigitsData,
    FileData,
    GaussianMixtureData,
    GradientJob,
    ImageData,
    LinearData,
    LinearModel,
    LogisticModel,
    MatmulJob,
    MLPModel,
    ModelSpec,
    NesterovOptimizer,
    OptimizerSpec,
    ScheduleSpec,
    SoftmaxModel,
    StepSchedule,
    gradient_code_of,
    matmul_code_of,
)
from coded.ml.data import (
    Dataset,
    digits,
    gaussian_mixture,
    linear_regression,
    load_file,
    load_images,
    partition_indices,
)
from coded.ml.data.dataset import split_off
from coded.ml.data.idx import read_idx
from coded.ml.models import MLP, LinearRegression, LogisticRegression, Model, SoftmaxRegression
from coded.ml.network import Batches, train_reference
from coded.ml.optim import SGD, Adam, Nesterov, Optimizer
from coded.ml.schedules import Cosine, Schedule, Step

__all__ = [
    "build_code",
    "build_matmul_code",
    "build_model",
    "build_optimizer",
    "codenet_reference",
    "load_codenet_data",
    "load_data",
    "load_dataset",
    "split_rows",
]

def build_code(spec: GradientJob) -> GradientCode:
    """The job's gradient code (built once per process: see :func:`coded.jobs.spec.gradient_code_of`)."""
    return gradient_code_of(spec.code, spec.workers, spec.seed)


def build_matmul_code(spec: MatmulJob) -> MatmulCode:
    """The job's matmul code."""
    return matmul_code_of(spec.code, spec.workers, spec.seed)


def build_model(model: ModelSpec, features: int, classes: int) -> Model:
    """The model of a ``model`` section, sized for the data.

    Raises
    ------
    ValueError
        When the model does not fit data with ``classes`` classes (0: regression).
    """
    model.check_classes(classes)
    if isinstance(model, LinearModel):
        return LinearRegression(features, model.l2)
    if isinstance(model, LogisticModel):
        return LogisticRegression(features, model.l2)
    if isinstance(model, SoftmaxModel):
        return SoftmaxRegression(features, classes, model.l2)
    assert isinstance(model, MLPModel)
    return MLP(features, classes, list(model.hidden), model.l2)


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


def load_dataset(data: DataSpec, files: Mapping[str, Path] | None = None, task: str = "classification") -> Dataset:
    """The dataset of a ``data`` section; uploaded files are looked up by the path the spec gives.

    Raises
    ------
    ValueError, OSError
        For a file that cannot be read or does not hold a dataset.
    """
    if isinstance(data, GaussianMixtureData):
        return gaussian_mixture(data.samples, data.features, data.classes, seed=data.seed)
    if isinstance(data, LinearData):
        return linear_regression(data.samples, data.features, data.noise, seed=data.seed)
    if isinstance(data, DigitsData):
        return digits(seed=data.seed)
    if isinstance(data, ImageData):
        paths = files or {}
        return load_images(data.format, [paths[f] for f in data.train], [paths[f] for f in data.test],
                           data.normalize, name=data.format)
    assert isinstance(data, FileData)
    return load_file((files or {})[data.path], task=task, format=data.type)


def load_data(spec: GradientJob, files: Mapping[str, Path] | None = None) -> Dataset:
    """A gradient job's dataset. A file without a test set gets one: a seeded random
    ``data.test_fraction`` of its rows."""
    dataset = load_dataset(spec.data, files, "regression" if isinstance(spec.model, LinearModel) else "classification")
    if not isinstance(spec.data, UPLOADED) or len(dataset.y_test) or not spec.data.test_fraction:
        return dataset
    order = np.random.default_rng(spec.seed).permutation(len(dataset.y_train))
    parts = split_off(dataset.x_train[order], dataset.y_train[order], spec.data.test_fraction)
    return Dataset(*parts, classes=dataset.classes, name=dataset.name)


def split_rows(spec: GradientJob, dataset: Dataset, partitions: int) -> list[np.ndarray]:
    """Row indices of the training set in each data partition (seeded by the job)."""
    return partition_indices(len(dataset.y_train), partitions, seed=spec.seed, order=spec.partition,
                             labels=dataset.y_train)


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
