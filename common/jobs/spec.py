"""Job specifications: parsing, validation with field-level errors, defaults.

A job is submitted as YAML (or JSON). Every field is validated before any worker is touched;
unknown fields are refused, and an error names the field: ``code.stragglers: must be < workers``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from coded.base.words import plural
from coded.codes import GradientCode, MatmulCode, adds_redundancy, gradient_code, matmul_code, takes_stragglers
from coded.codes.matmul import matmul_scheme_params, recovery_threshold
from coded.codes.streaming import STREAMED_SCHEMES, StreamLayout
from coded.ml import pytorch

__all__ = [
    "MAX_SPEC_BYTES",
    "CodeNetJob",
    "GradientJob",
    "JobSpec",
    "JobSpecError",
    "MatmulJob",
    "gradient_code_of",
    "matmul_code_of",
    "parse_job",
    "stream_layout_of",
    "to_json",
    "worker_needs",
]

MAX_SPEC_BYTES = 1 << 20
MAX_WORKERS = 1024
MAX_ITERATIONS = 1_000_000
MAX_TRAIN_VALUES = 500_000_000  # samples x features of generated data


class _SpecLoader(yaml.SafeLoader):
    """YAML with YAML 1.2's numbers: ``1e-6`` is a float (YAML 1.1 makes it a string, which strict
    validation would then refuse)."""


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class JobSpecError(ValueError):
    """A job specification is invalid; the message names the field."""


class Strict(BaseModel):
    # strict: a value of the wrong type is refused, never converted (`iterations: true` is not 1,
    # `workers: "4"` is not 4); integers stand for reals
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: the error type of a file the spec names that cannot be had (see parse_job's ``readable``)
UNREADABLE = "unreadable_file"


def _uploaded(path: str, info: ValidationInfo) -> str:
    """A file the client uploads with the job. With parse_job's ``readable`` in the validation
    context, a file that cannot be had is a problem of the field that names it, reported with the
    spec's other problems."""
    readable = (info.context or {}).get("readable")
    problem = readable(path) if readable is not None else None
    if problem:
        raise PydanticCustomError(UNREADABLE, problem)
    return path


#: the path of a file uploaded with the job, as the spec names it
Upload = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_uploaded)]


# --- code ----------------------------------------------------------------------------------------


class CodeSpec(Strict):
    scheme: Literal["uncoded", "ignore_stragglers", "frc", "cyclic", "ye_abbe", "partial", "lwpd", "kasync"]
    stragglers: int = Field(0, ge=0, description="s: slow or dead workers an iteration does not wait for, with "
                                                  "its check (the code is built for s + the check's replies)")
    m: int | None = Field(None, ge=1, description="ye_abbe: communication reduction")
    t: int | None = Field(None, ge=2, description="lwpd: weight, a power of two")
    alpha: float | None = Field(None, gt=1, description="partial: slowdown bound of partial stragglers")
    base: Literal["cyclic", "frc", "ye_abbe"] | None = Field(None, description="partial: code of the coded part")
    points: Literal["unit_circle", "chebyshev", "paper"] | None = Field(None, description="ye_abbe: evaluation points")

    def params(self) -> dict[str, Any]:
        """Keyword arguments of coded.codes.gradient_code."""
        names = ("m", "t", "alpha", "base", "points")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    @property
    def uses_stragglers(self) -> bool:
        return takes_stragglers(self.scheme)

    @property
    def effective_stragglers(self) -> int:
        """The stragglers not waited for: 0 for the schemes that ignore ``stragglers`` (uncoded, lwpd)."""
        return self.stragglers if takes_stragglers(self.scheme) else 0


def describe_code(code: CodeSpec) -> str:
    """The code in words for messages: ``cyclic (stragglers=2)``."""
    return f"{code.scheme} (stragglers={code.effective_stragglers})" if code.uses_stragglers else code.scheme


@functools.lru_cache(maxsize=64)
def gradient_code_of(code: CodeSpec, workers: int, seed: int, check_replies: int = 0) -> GradientCode:
    """The gradient code of a ``code`` section for ``workers`` workers, built once per process:
    validation, the master's runner and the workers' assignments share it.

    The code tolerates ``stragglers + check_replies`` missing replies, so that an iteration that
    waits for ``check_replies`` replies beyond decoding (the check) still waits for none of the
    ``stragglers`` slowest workers (:attr:`GradientJob.check_replies`).

    Raises
    ------
    ValueError
        When the code cannot be built (parameters, or numerics beyond float64).
    """
    s = code.effective_stragglers + check_replies
    return gradient_code(code.scheme, n=workers, s=s, seed=seed, **code.params())


@functools.lru_cache(maxsize=64)
def stream_layout_of(code: CodeSpec, workers: int, check_replies: int, stream: StreamSpec) -> StreamLayout:
    """The streamed replies' layout of a ``code`` section (frc or cyclic), built for the same
    s as :func:`gradient_code_of` would be; no coded messages, so no numerics to check."""
    return StreamLayout(code.scheme, workers, code.effective_stragglers + check_replies, stream.chunks, stream.order)


# --- model, data, optimizer ----------------------------------------------------------------------


class _Model(Strict):
    """A model section; ``CLASSES`` says which data it fits: (fewest, most classes, in words)."""

    CLASSES: ClassVar[tuple[int, float, str]] = (2, math.inf, "at least 2 classes")
    l2: float = Field(0.0, ge=0, allow_inf_nan=False)
    type: str  # each model narrows it to the Literal that names it (declared after l2: the field order stays)

    def check_classes(self, classes: int) -> None:
        """ValueError naming the field when the model does not fit data with ``classes`` classes
        (0: regression data)."""
        low, high, need = self.CLASSES
        if not low <= classes <= high:
            raise ValueError(f"model.type: {self.type} needs {need} (the data have "
                             + (f"{classes} classes)" if classes else "no classes: regression)"))


class LinearModel(_Model):
    CLASSES = (0, 0, "regression data (data.type linear, or a file with real targets)")
    type: Literal["linear"]


class LogisticModel(_Model):
    CLASSES = (2, 2, "exactly 2 classes (use softmax for more)")
    type: Literal["logistic"]


class SoftmaxModel(_Model):
    type: Literal["softmax"]


class MLPModel(_Model):
    type: Literal["mlp"]
    hidden: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [64], max_length=16)


#: a value of a torch architecture's keyword argument
TorchArg = Annotated[
    bool | int | float | Annotated[str, Field(max_length=256)]
    | Annotated[list[int | float], Field(max_length=64)], Field(union_mode="left_to_right")]


class TorchModel(_Model):
    """A PyTorch architecture registered on the master and the workers (:mod:`coded.ml.pytorch`)."""

    type: Literal["torch"]
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$",
                      description="architecture: mlp, lenet, resnet, or one a coded.models plugin registers")
    args: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], TorchArg] = Field(
        default_factory=dict, max_length=32, description="keyword arguments of the architecture")
    input_shape: list[Annotated[int, Field(ge=1, le=1 << 16)]] | None = Field(
        None, min_length=1, max_length=4, description="one sample's shape (default: the data's, e.g. C, H, W)")
    classes: int | None = Field(None, ge=2, le=100_000, description="outputs (default: the data's classes)")
    dtype: Literal["float32", "float64"] = Field("float32", description="what the workers compute in")

    @property
    def capability(self) -> str:
        """What a worker must have to compute for this model (see ``RegisterWorkerRequest.models``)."""
        return f"torch/{self.name}"


ModelSpec = Annotated[LinearModel | LogisticModel | SoftmaxModel | MLPModel | TorchModel, Field(discriminator="type")]


class GaussianMixtureData(Strict):
    type: Literal["gaussian_mixture"]
    samples: int = Field(10000, ge=2, le=50_000_000)
    features: int = Field(100, ge=1, le=1_000_000)
    classes: int = Field(2, ge=2, le=1000)
    seed: int = Field(0, ge=0)

    @property
    def known_classes(self) -> int | None:
        return self.classes


class LinearData(Strict):
    type: Literal["linear"]
    samples: int = Field(10000, ge=2, le=50_000_000)
    features: int = Field(100, ge=1, le=1_000_000)
    noise: float = Field(0.1, ge=0)
    seed: int = Field(0, ge=0)

    @property
    def known_classes(self) -> int | None:
        return 0


class DigitsData(Strict):
    type: Literal["digits"]
    seed: int = Field(0, ge=0)

    @property
    def known_classes(self) -> int | None:
        return 10


class FileData(Strict):
    type: Literal["npz", "csv"]
    path: Upload = Field(description="uploaded by the client with the job")
    test_fraction: float = Field(0.2, ge=0, lt=1, description="held out (seeded) when the file has no test set")

    @property
    def known_classes(self) -> int | None:
        """Unknown until the file is read (checked then)."""
        return None


class ImageData(Strict):
    type: Literal["images"]
    format: Literal["npz", "idx", "cifar10"]
    train: list[Upload] = Field(
        min_length=1, max_length=16, description="npz: one file (x, y); idx: images, labels; cifar10: batch files")
    test: list[Upload] = Field(default_factory=list, max_length=16)
    normalize: Literal["per_channel", "none"] = "per_channel"
    test_fraction: float = Field(0.2, ge=0, lt=1, description="held out (seeded) when there is no test set")

    @property
    def known_classes(self) -> int | None:
        return None

    def files(self) -> dict[str, str]:
        """The files to upload, each with the field that names it (``data.train[0]``, ...)."""
        return {path: f"data.{split}[{i}]" for split, paths in (("train", self.train), ("test", self.test))
                for i, path in enumerate(paths)}


DataSpec = Annotated[GaussianMixtureData | LinearData | DigitsData | FileData | ImageData, Field(discriminator="type")]
#: data that the client uploads and the master streams to the workers (the rest is generated)
UPLOADED = (FileData, ImageData)


class ConstantSchedule(Strict):
    type: Literal["constant"]
    warmup: int = Field(0, ge=0, le=MAX_ITERATIONS, description="linear warm-up over this many steps")


class StepSchedule(Strict):
    type: Literal["step"]
    warmup: int = Field(0, ge=0, le=MAX_ITERATIONS)
    every: int = Field(ge=1, le=MAX_ITERATIONS, description="multiply by gamma every this many steps")
    gamma: float = Field(0.1, gt=0, le=1)


class CosineSchedule(Strict):
    type: Literal["cosine"]
    warmup: int = Field(0, ge=0, le=MAX_ITERATIONS)
    floor: float = Field(0.0, ge=0, le=1, description="final factor of the learning rate")


ScheduleSpec = Annotated[ConstantSchedule | StepSchedule | CosineSchedule, Field(discriminator="type")]


class _Optimizer(Strict):
    lr: float = Field(gt=0, allow_inf_nan=False)
    batch: int | None = Field(None, ge=1, le=1 << 24, description="samples per partition and iteration; "
                                                                  "default: every sample (full batch)")
    schedule: ScheduleSpec | None = None


class SGDOptimizer(_Optimizer):
    type: Literal["sgd"]
    momentum: float = Field(0.0, ge=0, lt=1, description="heavy ball (0: none)")
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False)


class NesterovOptimizer(_Optimizer):
    type: Literal["nesterov"]
    momentum: float = Field(0.9, ge=0, lt=1)


class _AdamFields(_Optimizer):
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0, allow_inf_nan=False)


class AdamOptimizer(_AdamFields):
    type: Literal["adam"]
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False, description="decoupled (as AdamW)")


class AdamWOptimizer(_AdamFields):
    type: Literal["adamw"]
    weight_decay: float = Field(0.01, ge=0, allow_inf_nan=False, description="decoupled")


OptimizerSpec = Annotated[SGDOptimizer | NesterovOptimizer | AdamOptimizer | AdamWOptimizer,
                          Field(discriminator="type")]
#: the optimizer of a gradient job whose spec has no optimizer section (docs/jobs.md)
DEFAULT_OPTIMIZER = NesterovOptimizer(type="nesterov", lr=0.1)


# --- faults --------------------------------------------------------------------------------------


class StragglerSpec(Strict):
    model: Literal["none", "fixed", "exponential", "shifted_exponential", "pareto", "cpu", "trace"] = "none"
    workers: list[Annotated[int, Field(ge=0)]] | None = Field(None, description="limit to these workers")
    delay: float | None = Field(None, ge=0, le=3600, description="fixed: seconds per iteration")
    shift: float = Field(0.0, ge=0, le=3600, description="shifted_exponential: minimum delay, seconds")
    mean: float | None = Field(None, gt=0, le=3600, description="(shifted_)exponential: mean, seconds")
    scale: float | None = Field(None, gt=0, le=3600, description="pareto: minimum delay, seconds")
    shape: float | None = Field(None, gt=0, description="pareto: tail index")
    threads: int = Field(1, ge=1, le=64, description="cpu: busy threads while computing")
    path: Upload | None = Field(None, description="trace: CSV iteration,worker,delay (uploaded)")

    @model_validator(mode="after")
    def _required(self) -> StragglerSpec:
        needed = {
            "fixed": ("workers", "delay"),
            "exponential": ("mean",),
            "shifted_exponential": ("mean",),
            "pareto": ("scale", "shape"),
            "cpu": ("workers",),
            "trace": ("path",),
        }.get(self.model, ())
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"model {self.model} needs {', '.join(missing)}")
        return self


class SlowdownSpec(Strict):
    """Partial stragglers: a worker that computes at 1/factor of its speed (it waits factor - 1
    times each piece of work it did, after doing it), rather than one that starts late."""

    model: Literal["none", "fixed", "uniform", "trace"] = "none"
    workers: list[Annotated[int, Field(ge=0)]] | None = Field(None, description="limit to these workers")
    factor: float | None = Field(None, ge=1, le=1000, description="fixed: how many times slower")
    low: float = Field(1.0, ge=1, le=1000, description="uniform: the smallest factor")
    high: float | None = Field(None, ge=1, le=1000, description="uniform: the largest factor, drawn per "
                                                               "iteration and worker")
    path: Upload | None = Field(None, description="trace: CSV iteration,worker,factor (uploaded; `python -m "
                                                  "bench.traces` converts measured compute times)")

    @model_validator(mode="after")
    def _required(self) -> SlowdownSpec:
        needed = {"fixed": ("workers", "factor"), "uniform": ("high",), "trace": ("path",)}.get(self.model, ())
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"model {self.model} needs {', '.join(missing)}")
        if self.model == "uniform" and self.high is not None and self.high < self.low:
            raise ValueError(f"high must be >= low (got low={self.low:g}, high={self.high:g})")
        return self


class SoftErrorSpec(Strict):
    probability: float = Field(0.0, ge=0, le=1, description="per worker and iteration")
    model: Literal["gaussian", "bitflip"] = "gaussian"
    scale: float = Field(1.0, gt=0, description="gaussian: standard deviation")
    workers: list[Annotated[int, Field(ge=0)]] | None = None
    start: int = Field(0, ge=0, le=MAX_ITERATIONS, description="the first iteration whose messages it corrupts")


class FaultSpec(Strict):
    stragglers: StragglerSpec = StragglerSpec()
    slowdown: SlowdownSpec = SlowdownSpec()
    soft_errors: SoftErrorSpec = SoftErrorSpec()

    def files(self) -> dict[str, str]:
        """The fault traces to upload, if any, each with its field."""
        out = {}
        for name, section in (("stragglers", self.stragglers), ("slowdown", self.slowdown)):
            if section.model == "trace" and section.path:
                out[str(section.path)] = f"faults.{name}.path"
        return out


class Timeouts(Strict):
    pending_s: float = Field(600.0, gt=0, description="fail if workers do not arrive in time")
    paused_s: float = Field(300.0, gt=0, description="fail if lost workers do not return in time")
    call_s: float = Field(300.0, gt=0, description="deadline of one worker call")


# --- verification --------------------------------------------------------------------------------


def _off(value: Any) -> Any:
    """``off`` as YAML 1.1 reads it (the boolean false) is the word ``off``."""
    return "off" if value is False else value


def _on_or_off(value: Any) -> str:
    """The tag of a section that may also be the word ``off`` (tags start with "tagged", which
    field paths leave out, so errors name the section's fields plainly)."""
    return "tagged-off" if value in ("off", False) else "tagged-on"


class QuarantineSpec(Strict):
    limit: int = Field(2, ge=0, le=MAX_ITERATIONS, description="a worker located as wrong more than this many "
                                                               "times within `window` iterations leaves the job")
    window: int = Field(10, ge=1, le=MAX_ITERATIONS, description="iterations the count looks back over")


QuarantineOrOff = Annotated[Annotated[QuarantineSpec, Tag("tagged-on")] | Annotated[Literal["off"], Tag("tagged-off")],
                            Discriminator(_on_or_off)]


class VerifySpec(Strict):
    """What the master checks of the workers' replies (docs/jobs.md, "verify")."""

    errors: int = Field(0, ge=0, le=16, description="wait for e + 1 replies more than decoding needs and correct up "
                                                    "to e wrong ones (0: detect, and correct what the replies allow)")
    quarantine: QuarantineOrOff = QuarantineSpec()

    _quarantine_off = field_validator("quarantine", mode="before")(_off)

    @property
    def quarantine_rule(self) -> QuarantineSpec | None:
        return None if isinstance(self.quarantine, str) else self.quarantine


#: the largest change one wrong message may make unnoticed, relative to the median message norm:
#: float64 replies agree to ~1e-15; float32 ones computed on different machines only to ~1e-7
DEFAULT_TOLERANCE = {"float64": 1e-6, "float32": 1e-4}


class GradientVerifySpec(VerifySpec):
    level: Literal["sampled", "strict"] | None = Field(
        None, description="sampled (default with streamed replies): every piece's scale, and each iteration a "
                          "second copy of the first piece of `sample` of the workers (all pieces of a worker found "
                          "wrong lately); strict (default with whole replies): every reply confirmed")
    sample: float = Field(0.125, gt=0, le=1, description="sampled: share of the workers whose first piece is "
                                                         "confirmed each iteration (at least one)")
    tolerance: float | None = Field(None, gt=0, lt=1, description="largest change of the gradient one wrong "
                                    "message may make unnoticed, relative to the median message norm (default: "
                                    "1e-6; 1e-4 for torch models computing in float32)")


class StreamSpec(Strict):
    """Streamed replies (docs/jobs.md, "stream"): the default of the codes that stream."""

    chunks: int = Field(1, ge=1, le=64, description="pieces per partition: a worker sends each as it finishes it "
                                                   "(more: finer sharing of a slow worker's partition, a message each)")
    order: Literal["staggered", "sorted"] = Field("staggered", description="staggered: each partition at another "
                                                  "position on each holder; sorted: by partition (the baseline)")


VerifyOrOff = Annotated[Annotated[VerifySpec, Tag("tagged-on")] | Annotated[Literal["off"], Tag("tagged-off")],
                        Discriminator(_on_or_off)]
GradientVerifyOrOff = Annotated[Annotated[GradientVerifySpec, Tag("tagged-on")]
                                | Annotated[Literal["off"], Tag("tagged-off")], Discriminator(_on_or_off)]
StreamOrOff = Annotated[Annotated[StreamSpec, Tag("tagged-on")] | Annotated[Literal["off"], Tag("tagged-off")],
                        Discriminator(_on_or_off)]


def _levels(value: Any) -> Any:
    """``verify: strict`` and ``verify: sampled`` are the section with that level."""
    value = _off(value)
    return {"level": value} if value in ("strict", "sampled") else value


# --- jobs ----------------------------------------------------------------------------------------


class GradientJob(Strict):
    kind: Literal["gradient_coding"]
    name: str = Field("", max_length=200)
    workers: int = Field(ge=1, le=MAX_WORKERS)
    code: CodeSpec
    model: ModelSpec
    data: DataSpec
    optimizer: OptimizerSpec = DEFAULT_OPTIMIZER
    iterations: int = Field(ge=1, le=MAX_ITERATIONS)
    partition: Literal["shuffled", "sorted_by_label"] = "shuffled"
    eval_every: int = Field(10, ge=0, description="test metrics every this many iterations (0: never)")
    checkpoint_every: int = Field(10, ge=1)
    target_loss: float | None = Field(None, description="stop when the training loss reaches it")
    faults: FaultSpec = FaultSpec()
    verify: GradientVerifyOrOff = Field(GradientVerifySpec(), description="checking replies; off: none")
    stream: StreamOrOff | None = Field(None, description="streamed replies (frc, cyclic; their default); off: one "
                                                         "coded message per worker")
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    _verify_levels = field_validator("verify", mode="before")(_levels)
    _stream_off = field_validator("stream", mode="before")(_off)

    @field_validator("optimizer", mode="before")
    @classmethod
    def _nesterov_by_default(cls, value: Any) -> Any:
        return {"type": "nesterov", **value} if isinstance(value, dict) and "type" not in value else value

    @property
    def checks(self) -> GradientVerifySpec | None:
        """The verify section, None with ``verify: off``."""
        return None if isinstance(self.verify, str) else self.verify

    @property
    def streamed(self) -> bool:
        """Whether workers stream their pieces (docs/jobs.md, "stream"): frc and cyclic unless
        ``stream: off``."""
        return self.stream != "off" and self.code.scheme in STREAMED_SCHEMES

    @property
    def stream_settings(self) -> StreamSpec:
        return self.stream if isinstance(self.stream, StreamSpec) else StreamSpec()

    @property
    def verify_level(self) -> str | None:
        """``sampled`` or ``strict`` (None with ``verify: off``): streamed jobs sample by default."""
        if self.checks is None:
            return None
        return self.checks.level or ("sampled" if self.streamed else "strict")

    @property
    def check_replies(self) -> int:
        """Replies an iteration waits for beyond decoding, to check them: ``verify.errors + 1``, or
        0 with ``verify: off`` and for codes without redundancy (docs/jobs.md, "Checking replies").
        The code is built for that many stragglers more than ``code.stragglers``."""
        if self.checks is None or not adds_redundancy(self.code.scheme):
            return 0
        return self.checks.errors + 1

    @property
    def code_stragglers(self) -> int:
        """s of the code as built: the stragglers not waited for plus :attr:`check_replies`."""
        return self.code.effective_stragglers + self.check_replies

    @property
    def tolerance(self) -> float:
        """verify.tolerance, or its default for the precision the workers compute in."""
        checks = self.checks
        if checks is not None and checks.tolerance is not None:
            return checks.tolerance
        return DEFAULT_TOLERANCE["float32" if isinstance(self.model, TorchModel) and self.model.dtype == "float32"
                                 else "float64"]

    @model_validator(mode="after")
    def _consistent(self) -> GradientJob:
        stragglers, extra = self.code.effective_stragglers, self.check_replies
        if stragglers >= self.workers:
            raise ValueError(f"code.stragglers: must be < workers (got {self.code.stragglers}, workers={self.workers})")
        # what a user reads as s is not what the code is built for: say both
        checking = (f" (with its check the code is built for s={stragglers + extra}: "
                    f"{plural(stragglers, 'straggler')} not waited for + {plural(extra, 'reply', 'replies')} "
                    "beyond decoding that the check needs, or for s=stragglers and unchecked with `verify: off`)"
                    ) if extra else ""
        if stragglers + extra >= self.workers:
            field = "verify.errors" if extra > 1 else "code.stragglers"
            raise ValueError(f"{field}: {self.workers} workers are too few to leave {stragglers} out and still check "
                             f"the replies{checking}")
        if isinstance(self.stream, StreamSpec) and self.code.scheme not in STREAMED_SCHEMES:
            raise ValueError(f"stream: {self.code.scheme} sends coded messages; only {', '.join(STREAMED_SCHEMES)} "
                             "stream their replies (drop the section, or set stream: off)")
        if self.checks is not None and self.checks.level == "sampled" and not self.streamed:
            raise ValueError("verify.level: sampled checks pieces of streamed replies; with whole replies use "
                             "strict (the default)")
        try:
            if self.streamed:
                stream_layout_of(self.code, self.workers, extra, self.stream_settings)
            else:
                gradient_code_of(self.code, self.workers, self.seed, extra)
        except (ValueError, TypeError) as error:
            raise ValueError(f"code: {error}{checking}") from None
        if self.checks is not None and self.checks.errors and not extra:
            raise ValueError(f"verify.errors: {describe_code(self.code)} has no redundancy to locate wrong "
                             "gradients with (only non-finite messages are caught); use frc, cyclic, ye_abbe "
                             "or partial, or set errors: 0")
        if self.code.scheme == "lwpd" and self.optimizer.type != "sgd":
            raise ValueError("optimizer.type: lwpd applies each message as it arrives and needs sgd")
        for section, ids in (("faults.stragglers.workers", self.faults.stragglers.workers),
                             ("faults.slowdown.workers", self.faults.slowdown.workers),
                             ("faults.soft_errors.workers", self.faults.soft_errors.workers)):
            bad = [w for w in ids or () if w >= self.workers]
            if bad:
                raise ValueError(f"{section}: worker {bad[0]} does not exist (workers are 0..{self.workers - 1})")
        if (isinstance(self.data, (GaussianMixtureData, LinearData))
                and self.data.samples * self.data.features > MAX_TRAIN_VALUES):
            raise ValueError(f"data: samples x features must be <= {MAX_TRAIN_VALUES}")
        if self.data.known_classes is not None:
            self.model.check_classes(self.data.known_classes)
        return self

    def files(self) -> dict[str, str]:
        """Paths the client must upload with the job, each with the field that names it."""
        paths = {self.data.path: "data.path"} if isinstance(self.data, FileData) else {}
        if isinstance(self.data, ImageData):
            paths = self.data.files()
        return paths | self.faults.files()


# --- coded matrix multiplication ----------------------------------------------------------------

MAX_MATRIX_ELEMENTS = 1 << 28  # 2 GiB of float64 per matrix


class MatmulCodeSpec(Strict):
    scheme: Literal["uncoded", "polynomial", "matdot", "polydot", "gpd"]
    m: int = Field(1, ge=1, le=64, description="row blocks of A")
    n: int = Field(1, ge=1, le=64, description="column blocks of A = row blocks of B")
    d: int = Field(1, ge=1, le=64, description="column blocks of B")
    max_error: float = Field(1e-6, gt=0, lt=1, description="accuracy every accepted responder set must reach")
    points: Literal["unit_circle", "chebyshev"] = Field(
        "unit_circle", description="evaluation points: the unit circle through rotations (accurate up to ~100 "
                                   "workers), or real Chebyshev nodes (the original construction, ~24 workers)")

    def params(self) -> dict[str, int]:
        """Block counts of this scheme (keyword arguments of coded.codes.matmul_code)."""
        return {name: getattr(self, name) for name in matmul_scheme_params(self.scheme)}

    @property
    def recovery_threshold(self) -> int | None:
        """Results that decode the product; None for uncoded (it needs all of its workers)."""
        return None if self.scheme == "uncoded" else recovery_threshold(self.scheme, **self.params())


@functools.lru_cache(maxsize=64)
def matmul_code_of(code: MatmulCodeSpec, workers: int, seed: int) -> MatmulCode:
    """The matmul code of a ``code`` section for ``workers`` workers, built once per process."""
    return matmul_code(code.scheme, workers, seed=seed, max_error=code.max_error, points=code.points, **code.params())


class GenerateSpec(Strict):
    a: list[Annotated[int, Field(ge=1, le=1 << 20)]] = Field(min_length=2, max_length=2)
    b: list[Annotated[int, Field(ge=1, le=1 << 20)]] | None = Field(None, min_length=1, max_length=2)
    seed: int = Field(0, ge=0)
    symmetric: bool = Field(False, description="matvec: a symmetric A with a known spectral gap")


class MatmulInputs(Strict):
    a: Upload | None = Field(None, description=".npy file, uploaded")
    b: Upload | None = Field(None, description=".npy file, uploaded (matmul)")
    generate: GenerateSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> MatmulInputs:
        if (self.generate is None) == (self.a is None):
            raise ValueError("give either files (a, b) or generate")
        if self.generate is not None and self.b is not None:
            raise ValueError("give either files (a, b) or generate")
        return self


class DriverSpec(Strict):
    type: Literal["power_iteration"] = "power_iteration"
    rounds: int = Field(50, ge=1, le=100_000)
    tolerance: float = Field(0.0, ge=0, description="stop when the eigen-residual is below it")


class MatmulJob(Strict):
    kind: Literal["matmul", "matvec"]
    name: str = Field("", max_length=200)
    workers: int = Field(ge=1, le=MAX_WORKERS)
    code: MatmulCodeSpec
    inputs: MatmulInputs
    verify: VerifyOrOff = Field(VerifySpec(), description="checking results; off: none")
    driver: DriverSpec | None = Field(None, description="matvec: the iterative method")
    faults: FaultSpec = FaultSpec()
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    _verify_off = field_validator("verify", mode="before")(_off)

    @property
    def checks(self) -> VerifySpec | None:
        """The verify section, None with ``verify: off``."""
        return None if isinstance(self.verify, str) else self.verify

    @model_validator(mode="after")
    def _consistent(self) -> MatmulJob:
        if self.kind == "matmul" and self.driver is not None:
            raise ValueError("driver: only matvec jobs have a driver")
        if self.kind == "matvec" and self.code.d != 1:
            raise ValueError("code.d: a matrix-vector product has one column block (d = 1)")
        generate = self.inputs.generate
        if self.kind == "matmul" and (self.inputs.b is None if generate is None else generate.b is None):
            raise ValueError("inputs: a matmul job needs b (a file or generate.b)")
        if self.kind == "matvec" and (self.inputs.b is not None or (generate is not None and generate.b is not None)):
            raise ValueError("inputs: a matvec job multiplies a by its own vectors; give no b")
        if generate is not None:
            shapes = [generate.a] + ([generate.b] if generate.b else [])
            if any(math.prod(shape) > MAX_MATRIX_ELEMENTS for shape in shapes):
                raise ValueError(f"inputs.generate: at most {MAX_MATRIX_ELEMENTS} elements per matrix")
            if generate.b is not None and generate.b[0] != generate.a[1]:
                raise ValueError(f"inputs.generate: inner dimensions differ: a is {generate.a}, b is {generate.b}")
            if self.kind == "matvec" and (generate.symmetric and generate.a[0] != generate.a[1]):
                raise ValueError("inputs.generate.symmetric: needs a square a")
        if self.kind == "matvec" and (self.driver or DriverSpec()).type == "power_iteration" and generate is not None \
                and generate.a[0] != generate.a[1]:
            raise ValueError("inputs.generate.a: power iteration needs a square matrix")
        threshold = self.code.recovery_threshold or self.workers
        if self.code.scheme == "uncoded" and self.checks is not None:
            raise ValueError("verify: uncoded has no redundancy to check its product with; set `verify: off` to "
                             "run it unchecked, or use a code (e.g. gpd)")
        if self.workers < self.needed(threshold):
            extra = f" + {self.checks.errors + 1} to check it" if self.checks is not None else ""
            hint = "" if self.checks is None or self.checks.errors else "; or set `verify: off` to run it unchecked"
            raise ValueError(f"workers: {self.code.scheme} needs at least {self.needed(threshold)} workers "
                             f"(recovery threshold {threshold}{extra}), got {self.workers}{hint}")
        try:
            matmul_code_of(self.code, self.workers, self.seed)
        except ValueError as error:
            raise ValueError(f"code: {error}") from None
        bad = [w for w in self.faults.soft_errors.workers or () if w >= self.workers] + \
              [w for w in self.faults.stragglers.workers or () if w >= self.workers] + \
              [w for w in self.faults.slowdown.workers or () if w >= self.workers]
        if bad:
            raise ValueError(f"faults: worker {bad[0]} does not exist (workers are 0..{self.workers - 1})")
        return self

    @property
    def iterations(self) -> int:
        """Rounds of the job: one product for matmul, the driver's rounds for matvec."""
        return 1 if self.kind == "matmul" else (self.driver or DriverSpec()).rounds

    def needed(self, threshold: int) -> int:
        """Results to wait for: the recovery threshold, plus e + 1 unless ``verify: off``."""
        return threshold + (self.checks.errors + 1 if self.checks is not None else 0)

    def files(self) -> dict[str, str]:
        """Paths the client must upload with the job, each with the field that names it."""
        paths = {path: field for path, field in ((self.inputs.a, "inputs.a"), (self.inputs.b, "inputs.b")) if path}
        return paths | self.faults.files()


# --- CodeNet ---------------------------------------------------------------------------------------


class CodeNetCode(Strict):
    m: int = Field(2, ge=1, le=16, description="block-rows of every weight matrix")
    n: int = Field(2, ge=1, le=16, description="block-columns of every weight matrix")
    t: int = Field(1, ge=0, le=4, description="wrong products corrected per block-column / block-row")


class CodeNetModel(Strict):
    type: Literal["mlp"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1, le=16384)]] = Field(default_factory=lambda: [128, 128], max_length=8)


class CodeNetData(Strict):
    type: Literal["digits", "gaussian_mixture", "mnist"]
    samples: int = Field(10000, ge=2, le=5_000_000, description="gaussian_mixture")
    features: int = Field(64, ge=1, le=100_000, description="gaussian_mixture")
    classes: int = Field(10, ge=2, le=1000, description="gaussian_mixture")
    seed: int = Field(0, ge=0)
    images: Upload | None = Field(None, description="mnist: IDX images file, uploaded")
    labels: Upload | None = Field(None, description="mnist: IDX labels file, uploaded")

    @model_validator(mode="after")
    def _files(self) -> CodeNetData:
        if (self.type == "mnist") != (self.images is not None and self.labels is not None):
            raise ValueError("mnist needs images and labels (IDX files); other types take none")
        return self


class CodeNetOptimizer(Strict):
    type: Literal["sgd"] = "sgd"
    lr: float = Field(gt=0, allow_inf_nan=False)
    batch: int = Field(16, ge=1, le=4096)


#: the optimizer of a CodeNet job whose spec has no optimizer section (docs/jobs.md)
DEFAULT_CODENET_OPTIMIZER = CodeNetOptimizer(lr=0.05)


class CodeNetJob(Strict):
    kind: Literal["codenet"]
    name: str = Field("", max_length=200)
    strategy: Literal["codenet", "replication", "uncoded"] = "codenet"
    code: CodeNetCode = CodeNetCode()
    model: CodeNetModel = CodeNetModel()
    data: CodeNetData
    optimizer: CodeNetOptimizer = DEFAULT_CODENET_OPTIMIZER
    iterations: int = Field(ge=1, le=MAX_ITERATIONS)
    checkpoint_every: int = Field(50, ge=1, description="I0: every peer checkpoints its blocks this often")
    eval_every: int = Field(25, ge=0, description="test accuracy every this many iterations (0: at the end only)")
    decoders: int = Field(2, ge=1, le=8, description="peers that replicate the decoding, cross-checked")
    faults: FaultSpec = FaultSpec()
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    @property
    def workers(self) -> int:
        """Peers the strategy needs: mn + (m+n)(t+1), 2mn or mn."""
        m, n, t = self.code.m, self.code.n, self.code.t
        return {"codenet": m * n + (m + n) * (t + 1), "replication": 2 * m * n, "uncoded": m * n}[self.strategy]

    @model_validator(mode="after")
    def _consistent(self) -> CodeNetJob:
        if self.faults.stragglers.model != "none" or self.faults.slowdown.model != "none":
            raise ValueError(f"faults.{'stragglers' if self.faults.stragglers.model != 'none' else 'slowdown'}: "
                             "CodeNet jobs inject soft errors only")
        if self.decoders > self.workers:
            raise ValueError(f"decoders: {self.decoders} is more than the job's {plural(self.workers, 'peer')}")
        bad = [w for w in self.faults.soft_errors.workers or () if w >= self.workers]
        if bad:
            raise ValueError(f"faults.soft_errors.workers: peer {bad[0]} does not exist "
                             f"(peers are 0..{self.workers - 1})")
        for index, width in enumerate(self.model.hidden):
            for parts, name in ((self.code.m, "m"), (self.code.n, "n")):
                if width % parts:
                    raise ValueError(f"model.hidden[{index}]: {width} units do not split into {name}={parts} blocks")
        return self

    def files(self) -> dict[str, str]:
        """Paths the client must upload with the job, each with the field that names it."""
        return {path: field for path, field in ((self.data.images, "data.images"), (self.data.labels, "data.labels"))
                if path}


JobSpec = GradientJob | MatmulJob | CodeNetJob
KINDS: dict[str, type[JobSpec]] = {
    "gradient_coding": GradientJob, "matmul": MatmulJob, "matvec": MatmulJob, "codenet": CodeNetJob}


def _field_path(location: tuple[int | str, ...], raw: Any) -> str:
    """The path a user writes: pydantic's location without the tags of discriminated unions
    (``optimizer.nesterov.lr`` is ``optimizer.lr``) and its internal markers; list items by index
    (``data.train[0]``)."""
    path, value = "", raw
    for part in location:
        if str(part).startswith(("function-", "tagged")):
            continue
        if isinstance(value, dict) and part not in value and value.get("type") == part:
            continue  # the union member chosen by the section's type
        if isinstance(part, int):
            path += f"[{part}]"
            value = value[part] if isinstance(value, list) and part < len(value) else None
        else:
            path += f".{part}" if path else part
            value = value.get(part) if isinstance(value, dict) else None
    return path


#: YAML's names of the Python types a value can have
_YAML_TYPES = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean", "list": "a list",
               "NoneType": "null", "dict": "a mapping"}


def _tag_message(error: Any, path: str) -> str:
    """A section without a ``type``, or whose ``type`` names nothing it can be: the types it can
    be and, for a PyTorch architecture's name as a model type, how to write it."""
    if error["type"] == "union_tag_not_found":
        return f"{path}.type: Field required"
    tag, kinds = error["ctx"]["tag"], error["ctx"]["expected_tags"].replace("'", "")
    message = f"{path}.type: must be one of {kinds} (got {tag!r})"
    if path == "model" and (tag in pytorch.BUILTIN or tag in pytorch.architectures()):
        message += f"; {tag} is a PyTorch architecture: write `type: torch, name: {tag}`"
    return message


def _message(error: Any) -> str:
    """One problem in words, without the names of our classes."""
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        got = _YAML_TYPES.get(type(error["input"]).__name__, type(error["input"]).__name__)
        return f"must be a mapping of fields (got {got})"
    return str(error["msg"]).removeprefix("Value error, ")


def _problems(error: ValidationError, raw: Any) -> list[str]:
    """Every problem of a spec, each naming its field."""
    problems = []
    for problem in error.errors():
        path = _field_path(problem["loc"], raw) or "spec"
        if problem["type"] in ("union_tag_invalid", "union_tag_not_found"):
            problems.append(_tag_message(problem, path))
            continue
        message = _message(problem)
        if ":" not in message.split(" ")[0]:  # our own messages already start with the field
            message = f"{path}: {message}"
        problems.append(message)
    return problems


def parse_job(text: str | bytes, readable: Callable[[str], str | None] | None = None) -> JobSpec:
    """Parse and validate a YAML or JSON job specification.

    Parameters
    ----------
    readable : callable, optional
        Called with every file the spec names (data.path, inputs.a, ...); returns what is wrong
        with it (it cannot be read, it was not uploaded) or None. Its problems are reported with
        all the others, each under the field that names the file.

    Raises
    ------
    JobSpecError
        With a message naming every offending field (problems separated by "; ").
    """
    if len(text) > MAX_SPEC_BYTES:
        raise JobSpecError(f"spec: larger than {MAX_SPEC_BYTES} bytes")
    try:
        raw = yaml.load(text, Loader=_SpecLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise JobSpecError(f"spec: not valid YAML{where}: {problem}") from None
    if not isinstance(raw, dict):
        raise JobSpecError("spec: must be a mapping of fields")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise JobSpecError(f"kind: must be one of {', '.join(KINDS)} (got {kind!r})")
    try:
        return KINDS[kind].model_validate(raw, context={"readable": readable})
    except ValidationError as error:
        problems = _problems(error, raw)
        if any(problem["type"] == UNREADABLE for problem in error.errors()):
            # a field in error keeps its section's own checks from running: validate once more
            # without the files, so that what they hid is reported too
            try:
                KINDS[kind].model_validate(raw)
            except ValidationError as more:
                problems += _problems(more, raw)
        raise JobSpecError("; ".join(dict.fromkeys(problems))) from None


def worker_needs(spec: JobSpec) -> str | None:
    """What a worker must list among its models to take the job (None: every worker can)."""
    if isinstance(spec, GradientJob) and isinstance(spec.model, TorchModel):
        return spec.model.capability
    return None


def to_json(spec: JobSpec) -> str:
    """The normalised specification (defaults filled in), as compact JSON."""
    return json.dumps(spec.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)
