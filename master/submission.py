"""A submission's inputs checked before any worker is touched: its data (or matrices) read and
fitted to the job, its traces parsed, and what the data decided filled into the spec."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coded.jobs.build import check_fit, generated_layout, load_codenet_data, load_data
from coded.jobs.faults import parse_trace
from coded.jobs.matrices import load_matrices
from coded.jobs.replies import Replies, choose_replies
from coded.jobs.round_costs import Placement, Rates
from coded.jobs.spec import CodeNetJob, GradientJob, JobSpec, JobSpecError, MatmulJob, MatrixJob, MatvecJob
from coded.jobs.spec.learning import FileData, OneFile, TorchModel
from coded.jobs.step_size import lr_warnings
from coded.ml.data.scaling import SPREAD_WARNING, spread
from coded.ml.data.sparse import is_sparse, nonzeros_per_row

__all__ = ["Checked", "check_inputs"]


@dataclass(frozen=True)
class Checked:
    """A submission's inputs, checked: the spec with what the data decided filled in (a torch
    model's input shape and classes, how a gradient job's workers reply), how they reply (gradient
    jobs), and warnings about the data."""

    spec: JobSpec
    replies: Replies | None = None
    warnings: tuple[str, ...] = ()


def check_inputs(spec: JobSpec, paths: dict[str, Path], rates: Callable[[], Rates], placement: Placement) -> Checked:
    """Parse the job's files. A bad file is a JobSpecError naming the field that names the file,
    and the file by its name in the spec: the master's own paths never reach a client.

    Parameters
    ----------
    spec : JobSpec
    paths : dict of str to Path
        Where each file the spec names was kept.
    rates : callable
        This machine's rates (measured on first use), for a gradient job's replies.
    placement : Placement
        Where the job's processes will run.
    """
    fields = spec.files()

    def named(error: Exception, field: str) -> JobSpecError:
        text = str(error)
        for name, path in paths.items():
            text = text.replace(str(path), repr(name))
        return JobSpecError(text if isinstance(error, JobSpecError) else f"{fields.get(field, field)}: {text}")

    field, check = _DATA_CHECKS[type(spec)](spec, paths, rates, placement)
    try:
        checked = check()
    except (ValueError, OSError) as error:
        raise named(error, field) from None
    for trace, field in spec.faults.files().items():
        value = "factor" if field == "faults.slowdown.path" else "delay"
        try:
            parse_trace(paths[trace].read_text(errors="replace"), value=value)
        except (ValueError, OSError) as error:
            raise named(error, field) from None
    return checked


_Check = tuple[str, Callable[[], Checked]]  # the field that names the files, and the check


def _matrices(spec: MatrixJob, paths: dict[str, Path], rates: Callable[[], Rates], placement: Placement) -> _Check:
    def check() -> Checked:
        load_matrices(spec, paths)  # read to be checked: the runner reads them again
        return Checked(spec)
    return "inputs", check


def _codenet(spec: CodeNetJob, paths: dict[str, Path], rates: Callable[[], Rates], placement: Placement) -> _Check:
    def check() -> Checked:
        load_codenet_data(spec, paths)
        return Checked(spec)
    return "data", check


def _gradient(spec: GradientJob, paths: dict[str, Path], rates: Callable[[], Rates], placement: Placement) -> _Check:
    # the error names the file when there are several
    return ("data.path" if isinstance(spec.data, OneFile) else "data",
            functools.partial(_check_fit, spec, paths, rates, placement))


#: which check each kind of job gets: the one place a submission's kind is told apart
_DATA_CHECKS: dict[type, Callable[..., _Check]] = {
    MatmulJob: _matrices, MatvecJob: _matrices, CodeNetJob: _codenet, GradientJob: _gradient}


def _check_fit(spec: GradientJob, paths: dict[str, Path], rates: Callable[[], Rates], placement: Placement) -> Checked:
    """Read a gradient job's uploaded data (errors: the caller names the field), then check that
    the model and the mini-batches fit them (errors name their own fields); how its workers reply
    is decided here (:func:`coded.jobs.replies.choose_replies`)."""
    layout = generated_layout(spec.data)
    sparse, density = False, 1.0
    warnings: tuple[str, ...] = ()
    training = None
    if layout is None:
        dataset = load_data(spec, paths)
        layout, sparse = (len(dataset.y_train), dataset.sample_shape, dataset.classes), dataset.sparse
        density = nonzeros_per_row(dataset.x_train) / dataset.features
        training = dataset.x_train
        if isinstance(spec.data, FileData):
            warnings = _scale_warning(spec.data, dataset.x_train)
    try:
        model = check_fit(spec, *layout, sparse=sparse)
    except ValueError as error:
        raise JobSpecError(str(error)) from None
    if training is not None:  # the rows as the model sees them (normalized); generated data are not made here
        warnings += lr_warnings(spec.optimizer, model, training)
    if isinstance(spec.model, TorchModel):
        section = spec.model.model_copy(update={"input_shape": list(model.input_shape), "classes": model.classes})
        spec = spec.model_copy(update={"model": section})  # the copy keeps the code built with the spec
    rows = spec.optimizer.batch or layout[0] // spec.coding.k
    decided, replies = choose_replies(spec, model, rows, density, rates(), placement)
    return Checked(decided, replies, warnings)


def _scale_warning(data: FileData, x: np.ndarray) -> tuple[str, ...]:
    """A warning when the columns of a file used as it is have scales orders of magnitude apart."""
    found = spread(x) if data.normalize == "none" and not is_sparse(x) else None
    if found is None or found.ratio < SPREAD_WARNING:
        return ()
    return (f"data: the features' scales differ by a factor of {found.ratio:.3g} (standard deviation of column "
            f"{found.widest}: {found.widest_std:.3g}, of column {found.narrowest}: {found.narrowest_std:.3g}); one "
            "learning rate that suits the widest crawls on the narrowest: `normalize: standardize` in the data "
            "section scales each feature with the training rows' statistics",)
