"""A gradient-coding job (``kind: gradient_coding``): its ``code``, ``verify`` and ``stream``
sections, the job and its rules, and the code it is built with (docs/jobs.md)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from coded import codes
from coded.base.words import plural
from coded.codes import GradientCode, adds_redundancy, takes_stragglers
from coded.codes.streaming import STREAMED_SCHEMES, StreamLayout
from coded.jobs.spec.base import (
    MAX_ITERATIONS,
    MAX_WORKERS,
    Strict,
    Timeouts,
    broken_rules,
    builds_code,
    off,
    on_or_off,
    raise_problems,
    rule,
)
from coded.jobs.spec.faults import FaultSpec
from coded.jobs.spec.learning import (
    DEFAULT_OPTIMIZER,
    MAX_TRAIN_VALUES,
    DataSpec,
    GaussianMixtureData,
    ImageData,
    LinearData,
    ModelSpec,
    OneFile,
    OptimizerSpec,
    TorchModel,
)
from coded.jobs.spec.verify import VerifySpec

__all__ = ["DEFAULT_SAMPLE", "DEFAULT_TOLERANCE", "CodeSpec", "GradientJob", "GradientVerifySpec", "StreamSpec",
           "describe_code"]


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


#: the largest change one wrong message may make unnoticed, relative to the median message norm:
#: float64 replies agree to ~1e-15; float32 ones computed on different machines only to ~1e-7;
#: coded messages rounded to float32 on the wire disagree by up to ~3e-4 (cyclic at n = 20, s = 6;
#: docs/codes.md, "float32 on the wire"): 1e-2 leaves a margin of 30
DEFAULT_TOLERANCE = {"float64": 1e-6, "float32": 1e-4, "wire float32": 1e-2}


#: the share of pieces the sampled check confirms by default (``verify.sample``)
DEFAULT_SAMPLE = 0.05


class GradientVerifySpec(VerifySpec):
    level: Literal["sampled", "strict"] | None = Field(
        None, description="sampled (default with streamed replies): every piece's finiteness and scale, and each "
                          "piece confirmed by a second copy with probability `sample` (every piece of a worker "
                          "found wrong lately); strict (default with whole replies): every piece or reply "
                          "confirmed (docs/jobs.md, \"Checking replies\")")
    sample: float = Field(DEFAULT_SAMPLE, gt=0, le=1,
                          description="sampled: probability that a piece is confirmed by a second copy, drawn per "
                                      "iteration and piece; costs about that share of the work")
    tolerance: float | None = Field(None, gt=0, lt=1, description="largest change of the gradient one wrong "
                                    "message may make unnoticed, relative to the median message norm (default: "
                                    "1e-6; 1e-4 for torch models computing in float32; 1e-2 with wire: float32)")


class StreamSpec(Strict):
    """Streamed replies (docs/jobs.md, "stream"): the default of the codes that stream."""

    chunks: int = Field(1, ge=1, le=64, description="pieces per partition: a worker sends each as it finishes it "
                                                   "(more: finer sharing of a slow worker's partition, a message each)")
    order: Literal["staggered", "sorted"] = Field("staggered", description="staggered: each partition at another "
                                                  "position on each holder; sorted: by partition (the baseline)")


GradientVerifyOrOff = Annotated[Annotated[GradientVerifySpec, Tag("tagged-on")]
                                | Annotated[Literal["off"], Tag("tagged-off")], Discriminator(on_or_off)]
StreamOrOff = Annotated[Annotated[StreamSpec, Tag("tagged-on")] | Annotated[Literal["off"], Tag("tagged-off")],
                        Discriminator(on_or_off)]


def _levels(value: Any) -> Any:
    """``verify: strict`` and ``verify: sampled`` are the section with that level."""
    value = off(value)
    return {"level": value} if value in ("strict", "sampled") else value


# --- rules: each raises ValueError naming its field when a job breaks it ---------------------------


def _checking(job: GradientJob) -> str:
    """What a user reads as s is not what the code is built for: both, in words ("" without a check)."""
    stragglers, extra = job.code.effective_stragglers, job.check_replies
    return (f" (with its check the code is built for s={stragglers + extra}: "
            f"{plural(stragglers, 'straggler')} not waited for + {plural(extra, 'reply', 'replies')} "
            "beyond decoding that the check needs, or for s=stragglers and unchecked with `verify: off`)"
            ) if extra else ""


@rule("code", "workers")
def _fewer_stragglers_than_workers(job: GradientJob) -> None:
    if job.code.effective_stragglers >= job.workers:
        raise ValueError(f"code.stragglers: must be < workers (got {job.code.stragglers}, workers={job.workers})")


@rule("code", "workers", "verify")
def _room_for_the_check(job: GradientJob) -> None:
    stragglers, extra = job.code.effective_stragglers, job.check_replies
    if stragglers + extra >= job.workers:
        field = "verify.errors" if extra > 1 else "code.stragglers"
        raise ValueError(f"{field}: {job.workers} workers are too few to leave {stragglers} out and still check "
                         f"the replies{_checking(job)}")


@rule("stream", "code")
def _only_streamed_schemes_stream(job: GradientJob) -> None:
    if isinstance(job.stream, StreamSpec) and job.code.scheme not in STREAMED_SCHEMES:
        raise ValueError(f"stream: {job.code.scheme} sends coded messages; only {', '.join(STREAMED_SCHEMES)} "
                         "stream their replies (drop the section, or set stream: off)")


@rule("verify", "stream", "code")
def _sampled_checks_streamed_replies(job: GradientJob) -> None:
    if job.checks is not None and job.checks.level == "sampled" and not job.streamed:
        raise ValueError("verify.level: sampled checks pieces of streamed replies; with whole replies use "
                         "strict (the default)")


@rule("verify", "code")
def _errors_need_redundancy(job: GradientJob) -> None:
    if job.checks is not None and job.checks.errors and not job.check_replies:
        raise ValueError(f"verify.errors: {describe_code(job.code)} has no redundancy to locate wrong "
                         "gradients with (only non-finite messages are caught); use frc, cyclic, ye_abbe "
                         "or partial, or set errors: 0")


@rule("code", "optimizer")
def _lwpd_needs_sgd(job: GradientJob) -> None:
    if job.code.scheme == "lwpd" and job.optimizer.type != "sgd":
        raise ValueError("optimizer.type: lwpd applies each message as it arrives and needs sgd")


@rule("faults", "workers")
def _faulty_workers_exist(job: GradientJob) -> None:
    for section, ids in (("faults.stragglers.workers", job.faults.stragglers.workers),
                         ("faults.slowdown.workers", job.faults.slowdown.workers),
                         ("faults.soft_errors.workers", job.faults.soft_errors.workers)):
        bad = [w for w in ids or () if w >= job.workers]
        if bad:
            raise ValueError(f"{section}: worker {bad[0]} does not exist (workers are 0..{job.workers - 1})")


@rule("data")
def _generated_data_fits(job: GradientJob) -> None:
    if (isinstance(job.data, (GaussianMixtureData, LinearData))
            and job.data.samples * job.data.features > MAX_TRAIN_VALUES):
        raise ValueError(f"data: samples x features must be <= {MAX_TRAIN_VALUES}")


@rule("data", "model")
def _the_model_has_the_datas_classes(job: GradientJob) -> None:
    if job.data.known_classes is not None:
        job.model.check_classes(job.data.known_classes)


def _partition_exists(job: GradientJob, k: int) -> list[str]:
    """The problem of a ``faults.soft_errors.partition`` the job's k partitions do not include."""
    partition = job.faults.soft_errors.partition
    if partition is None or partition < k:
        return []
    return [f"faults.soft_errors.partition: partition {partition} does not exist ({job.code.scheme} splits the "
            f"data into {plural(k, 'partition')}: 0..{k - 1})"]


#: a gradient job's rules in the order they are checked; then its code is built (by the fields below)
_RULES = (_fewer_stragglers_than_workers, _room_for_the_check, _only_streamed_schemes_stream,
          _sampled_checks_streamed_replies, _errors_need_redundancy, _lwpd_needs_sgd, _faulty_workers_exist,
          _generated_data_fits, _the_model_has_the_datas_classes)
_BUILT_FROM = frozenset({"code", "workers", "verify", "stream", "seed"})


class GradientJob(Strict):
    """A gradient-coding job. Its code (or, streamed, its layout) is built by validation and kept
    with the spec (:attr:`gradient_code`, :attr:`layout`): a process builds it once per job."""

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
    wire: Literal["float64", "float32"] = Field(
        "float64", description="what workers send: float64 (exact to float64 rounding), or float32: half the bytes, "
                               "decoded in float64 from rounded messages (error per code: docs/codes.md)")
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    _verify_levels = field_validator("verify", mode="before")(_levels)
    _stream_off = field_validator("stream", mode="before")(off)

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
        if self.wire == "float32":
            return DEFAULT_TOLERANCE["wire float32"]
        return DEFAULT_TOLERANCE["float32" if isinstance(self.model, TorchModel) and self.model.dtype == "float32"
                                 else "float64"]

    @property
    def wire_dtype(self) -> np.dtype:
        """The dtype of the workers' messages on the wire (the master decodes in float64)."""
        return np.dtype(self.wire)

    @functools.cached_property
    def gradient_code(self) -> GradientCode:
        """The job's gradient code, built for :attr:`code_stragglers` so that an iteration that waits
        for :attr:`check_replies` replies beyond decoding (the check) still waits for none of the
        ``stragglers`` slowest workers. Built on first use (by validation, unless parse_job was told
        not to build it) and kept with the spec, so the runner and the worker's share reuse it.

        Raises
        ------
        ValueError
            When the code cannot be built (parameters, or numerics beyond float64).
        """
        return codes.gradient_code(self.code.scheme, n=self.workers, s=self.code_stragglers, seed=self.seed,
                                   **self.code.params())

    @functools.cached_property
    def layout(self) -> StreamLayout:
        """The streamed replies' layout (frc or cyclic), built for the same s as
        :attr:`gradient_code`; no coded messages, so no numerics to check. Kept with the spec."""
        settings = self.stream_settings
        return StreamLayout(self.code.scheme, self.workers, self.code_stragglers, settings.chunks, settings.order)

    @property
    def coding(self) -> StreamLayout | GradientCode:
        """What takes the job's replies apart: its :attr:`layout` when it streams, else its code.
        Both say which partitions a worker holds (``partitions(i)``, ``k``)."""
        return self.layout if self.streamed else self.gradient_code

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> GradientJob:
        problems, doubtful = broken_rules(self, _RULES, info)
        # built here, once, and kept with the spec; the layout is cheap and always checked
        if not doubtful & _BUILT_FROM and (self.streamed or builds_code(info)):
            try:
                coding = self.coding
            except (ValueError, TypeError) as error:
                problems.append(f"code: {error}{_checking(self)}")
            else:
                # checked against the code as built: k is not always n (lwpd: n/2, partial: more)
                if "faults" not in doubtful:
                    problems += _partition_exists(self, coding.k)
        raise_problems(problems)
        return self

    def files(self) -> dict[str, str]:
        """Paths the client must upload with the job, each with the field that names it."""
        paths = {self.data.path: "data.path"} if isinstance(self.data, OneFile) else {}
        if isinstance(self.data, ImageData):
            paths = self.data.files()
        return paths | self.faults.files()
