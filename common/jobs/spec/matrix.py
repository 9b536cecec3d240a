"""Coded matrix jobs: ``kind: matmul`` (one product A B) and ``kind: matvec`` (a product A x per
round, driven by an iterative method), their sections, and each rule they follow, named."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from coded import codes
from coded.codes import MatmulCode
from coded.codes.matmul import matmul_scheme_params, recovery_threshold
from coded.jobs.spec.base import (
    MAX_WORKERS,
    Rule,
    Strict,
    Timeouts,
    Upload,
    broken_rules,
    builds_code,
    off,
    raise_problems,
    rule,
)
from coded.jobs.spec.faults import FaultSpec, no_soft_error_partition
from coded.jobs.spec.verify import VerifyOrOff, VerifySpec

__all__ = [
    "MAX_MATRIX_ELEMENTS",
    "DriverSpec",
    "GenerateSpec",
    "MatmulCodeSpec",
    "MatmulInputs",
    "MatmulJob",
    "MatrixJob",
    "MatvecJob",
]

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


# --- rules: each raises ValueError naming its field when a job breaks it ---------------------------


@rule("inputs")
def _needs_b(job: MatmulJob) -> None:
    generate = job.inputs.generate
    if job.inputs.b is None if generate is None else generate.b is None:
        raise ValueError("inputs: a matmul job needs b (a file or generate.b)")


@rule("code")
def _one_column_block(job: MatvecJob) -> None:
    if job.code.d != 1:
        raise ValueError("code.d: a matrix-vector product has one column block (d = 1)")


@rule("inputs")
def _no_b(job: MatvecJob) -> None:
    generate = job.inputs.generate
    if job.inputs.b is not None or (generate is not None and generate.b is not None):
        raise ValueError("inputs: a matvec job multiplies a by its own vectors; give no b")


@rule("inputs")
def _generated_sizes(job: MatrixJob) -> None:
    generate = job.inputs.generate
    shapes = [] if generate is None else [generate.a] + ([generate.b] if generate.b else [])
    if any(math.prod(shape) > MAX_MATRIX_ELEMENTS for shape in shapes):
        raise ValueError(f"inputs.generate: at most {MAX_MATRIX_ELEMENTS} elements per matrix")


@rule("inputs")
def _inner_dimensions(job: MatrixJob) -> None:
    generate = job.inputs.generate
    if generate is not None and generate.b is not None and generate.b[0] != generate.a[1]:
        raise ValueError(f"inputs.generate: inner dimensions differ: a is {generate.a}, b is {generate.b}")


@rule("inputs")
def _symmetric_is_square(job: MatvecJob) -> None:
    generate = job.inputs.generate
    if generate is not None and generate.symmetric and generate.a[0] != generate.a[1]:
        raise ValueError("inputs.generate.symmetric: needs a square a")


@rule("driver", "inputs")
def _power_iteration_is_square(job: MatvecJob) -> None:
    generate = job.inputs.generate
    if job.square and generate is not None and generate.a[0] != generate.a[1]:
        raise ValueError("inputs.generate.a: power iteration needs a square matrix")


@rule("code", "verify")
def _checks_need_redundancy(job: MatrixJob) -> None:
    if job.code.scheme == "uncoded" and job.checks is not None:
        raise ValueError("verify: uncoded has no redundancy to check its product with; set `verify: off` to "
                         "run it unchecked, or use a code (e.g. gpd)")


@rule("code", "workers", "verify")
def _enough_workers(job: MatrixJob) -> None:
    threshold = job.code.recovery_threshold or job.workers
    if job.workers < job.needed(threshold):
        extra = f" + {job.checks.errors + 1} to check it" if job.checks is not None else ""
        hint = "" if job.checks is None or job.checks.errors else "; or set `verify: off` to run it unchecked"
        raise ValueError(f"workers: {job.code.scheme} needs at least {job.needed(threshold)} workers "
                         f"(recovery threshold {threshold}{extra}), got {job.workers}{hint}")


@rule("faults", "workers")
def _faulty_workers_exist(job: MatrixJob) -> None:
    faults = job.faults
    bad = [w for section in (faults.soft_errors, faults.stragglers, faults.slowdown)
           for w in section.workers or () if w >= job.workers]
    if bad:
        raise ValueError(f"faults: worker {bad[0]} does not exist (workers are 0..{job.workers - 1})")


#: the rules every matrix job follows, after those of its kind
_SHARED = (_checks_need_redundancy, _enough_workers, _faulty_workers_exist, no_soft_error_partition)


# --- jobs ------------------------------------------------------------------------------------------


class MatrixJob(Strict):
    """What matmul and matvec jobs share: the code, the inputs, the check. Its matmul code is
    built by validation and kept with the spec (:attr:`matmul_code`)."""

    #: the job's rules in the order they are checked (each raises ValueError naming its field)
    RULES: ClassVar[Sequence[Rule]] = _SHARED
    kind: str  # each kind narrows it to the Literal that names it (declared first: the field order stays)

    name: str = Field("", max_length=200)
    workers: int = Field(ge=1, le=MAX_WORKERS)
    code: MatmulCodeSpec
    inputs: MatmulInputs
    verify: VerifyOrOff = Field(VerifySpec(), description="checking results; off: none")
    driver: DriverSpec | None = Field(None, description="matvec: the iterative method")
    faults: FaultSpec = FaultSpec()
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    _verify_off = field_validator("verify", mode="before")(off)

    @property
    def checks(self) -> VerifySpec | None:
        """The verify section, None with ``verify: off``."""
        return None if isinstance(self.verify, str) else self.verify

    @property
    def iterations(self) -> int:
        """Rounds of the job."""
        return 1

    @property
    def square(self) -> bool:
        """Whether A must be square."""
        return False

    @property
    def wire_dtype(self) -> np.dtype:
        """Products travel in float64: decoding them from any R of them needs every digit (a
        gradient job's ``wire`` may be float32, :attr:`GradientJob.wire_dtype`)."""
        return np.dtype(np.float64)

    @functools.cached_property
    def matmul_code(self) -> MatmulCode:
        """The job's matmul code: built on first use (by validation, unless parse_job was told not
        to build it) and kept with the spec, so the runner and the worker's share reuse it.

        Raises
        ------
        ValueError
            When the code cannot be built (parameters, or numerics beyond float64).
        """
        code = self.code
        return codes.matmul_code(code.scheme, self.workers, seed=self.seed, max_error=code.max_error,
                                 points=code.points, **code.params())

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> MatrixJob:
        problems, doubtful = broken_rules(self, self.RULES, info)
        if not doubtful & {"code", "workers", "seed"} and builds_code(info):  # last: the cheap rules first
            try:
                _ = self.matmul_code
            except ValueError as error:
                problems.append(f"code: {error}")
        raise_problems(problems)
        return self

    def needed(self, threshold: int) -> int:
        """Results to wait for: the recovery threshold, plus e + 1 unless ``verify: off``."""
        return threshold + (self.checks.errors + 1 if self.checks is not None else 0)

    def files(self) -> dict[str, str]:
        """Paths the client must upload with the job, each with the field that names it."""
        paths = {path: field for path, field in ((self.inputs.a, "inputs.a"), (self.inputs.b, "inputs.b")) if path}
        return paths | self.faults.files()


class MatmulJob(MatrixJob):
    """One product A B (B a matrix or a vector)."""

    RULES = (_needs_b, _generated_sizes, _inner_dimensions, *_SHARED)
    kind: Literal["matmul"]
    driver: None = Field(None, description="matvec only")

    @field_validator("driver", mode="before")
    @classmethod
    def _no_driver(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("only matvec jobs have a driver")
        return value


class MatvecJob(MatrixJob):
    """Products A x, one per round, of the vectors its driver (power iteration) makes."""

    RULES = (_one_column_block, _no_b, _generated_sizes, _inner_dimensions, _symmetric_is_square,
             _power_iteration_is_square, *_SHARED)
    kind: Literal["matvec"]

    @property
    def driven(self) -> DriverSpec:
        """The driver section, its defaults when the spec has none."""
        return self.driver or DriverSpec()

    @property
    def iterations(self) -> int:
        """Rounds of the job: the driver's."""
        return self.driven.rounds

    @property
    def square(self) -> bool:
        """Power iteration multiplies A by its own products."""
        return self.driven.type == "power_iteration"
