"""The parts of a gradient-coding job, built identically on the master and on every worker.

Both sides derive the code, the data split and the model from the job specification alone
(generated data from its seed), so the only things that cross the network are parameters,
messages and, for user files, the data themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from common.codes import GradientCode, MatmulCode, gradient_code, matmul_code
from common.data import Dataset, load_dataset, partition_indices
from common.data.dataset import split_off
from common.jobspec import FileData, GradientJob, MatmulJob
from common.models import Model, build_model

__all__ = ["build_code", "build_matmul_code", "load_data", "split_rows", "make_model", "partial_vector"]


def build_matmul_code(spec: MatmulJob) -> MatmulCode:
    """The job's matmul code."""
    return matmul_code(spec.code.scheme, spec.workers, seed=spec.seed, max_error=spec.code.max_error,
                       **spec.code.params())


def build_code(spec: GradientJob) -> GradientCode:
    """The job's gradient code (s is ignored by uncoded and lwpd)."""
    s = 0 if spec.code.scheme in ("uncoded", "lwpd") else spec.code.stragglers
    return gradient_code(spec.code.scheme, n=spec.workers, s=s, seed=spec.seed, **spec.code.params())


def load_data(spec: GradientJob, files: Mapping[str, Path] | None = None) -> Dataset:
    """The job's dataset; uploaded files are looked up by the path written in the spec.

    A file without a test set gets one: a seeded random ``data.test_fraction`` of its rows.
    """
    if not isinstance(spec.data, FileData):
        return load_dataset(spec.data.model_dump())
    task = "regression" if spec.model.type == "linear" else "classification"
    dataset = load_dataset({"type": spec.data.type, "path": str((files or {})[spec.data.path]), "task": task})
    if len(dataset.y_test) or not spec.data.test_fraction:
        return dataset
    order = np.random.default_rng(spec.seed).permutation(len(dataset.y_train))
    parts = split_off(dataset.x_train[order], dataset.y_train[order], spec.data.test_fraction)
    return Dataset(*parts, classes=dataset.classes, name=dataset.name)


def split_rows(spec: GradientJob, dataset: Dataset, partitions: int) -> list[np.ndarray]:
    """Row indices of the training set in each data partition (seeded by the job)."""
    return partition_indices(len(dataset.y_train), partitions, seed=spec.seed, order=spec.partition,
                             labels=dataset.y_train)


def make_model(spec: GradientJob, features: int, classes: int) -> Model:
    return build_model(spec.model.model_dump(), features=features, classes=classes)


def partial_vector(model: Model, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Partial gradient of one partition with its loss appended: shape (size + 1,).

    Appending the loss lets the code decode the exact training loss along with the gradient.
    """
    loss, grad = model.loss_and_grad(params, x, y)
    out = np.empty(grad.size + 1)
    out[:-1] = grad
    out[-1] = loss
    return out
