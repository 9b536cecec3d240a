"""Job specifications: parsing, validation with field-level errors, defaults.

A job is submitted as YAML (or JSON). Every field is validated before any worker is touched;
unknown fields are refused, and an error names the field: ``code.stragglers: must be < workers``.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from common.codes import gradient_code

__all__ = [
    "JobSpecError", "JobSpec", "GradientJob", "MatmulJob", "CodeNetJob", "parse_job", "to_json", "MAX_SPEC_BYTES",
]

MAX_SPEC_BYTES = 1 << 20
MAX_WORKERS = 1024
MAX_ITERATIONS = 1_000_000
MAX_TRAIN_VALUES = 500_000_000  # samples x features of generated data


class JobSpecError(ValueError):
    """A job specification is invalid; the message names the field."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- code ----------------------------------------------------------------------------------------


class CodeSpec(Strict):
    scheme: Literal["uncoded", "ignore_stragglers", "frc", "cyclic", "ye_abbe", "partial", "lwpd", "kasync"]
    stragglers: int = Field(0, ge=0, description="s: stragglers tolerated")
    m: int | None = Field(None, ge=1, description="ye_abbe: communication reduction")
    t: int | None = Field(None, ge=2, description="lwpd: weight, a power of two")
    alpha: float | None = Field(None, gt=1, description="partial: slowdown bound of partial stragglers")
    base: Literal["cyclic", "frc", "ye_abbe"] | None = Field(None, description="partial: code of the coded part")
    points: Literal["unit_circle", "chebyshev", "paper"] | None = Field(None, description="ye_abbe: evaluation points")

    def params(self) -> dict[str, Any]:
        """Keyword arguments of common.codes.gradient_code."""
        names = ("m", "t", "alpha", "base", "points")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


# --- model, data, optimizer ----------------------------------------------------------------------


class LinearModel(Strict):
    type: Literal["linear"]
    l2: float = Field(0.0, ge=0)


class LogisticModel(Strict):
    type: Literal["logistic"]
    l2: float = Field(0.0, ge=0)


class SoftmaxModel(Strict):
    type: Literal["softmax"]
    l2: float = Field(0.0, ge=0)


class MLPModel(Strict):
    type: Literal["mlp"]
    hidden: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [64], max_length=16)
    l2: float = Field(0.0, ge=0)


ModelSpec = Annotated[Union[LinearModel, LogisticModel, SoftmaxModel, MLPModel], Field(discriminator="type")]


class GaussianMixtureData(Strict):
    type: Literal["gaussian_mixture"]
    samples: int = Field(10000, ge=2, le=50_000_000)
    features: int = Field(100, ge=1, le=1_000_000)
    classes: int = Field(2, ge=2, le=1000)
    seed: int = Field(0, ge=0)


class LinearData(Strict):
    type: Literal["linear"]
    samples: int = Field(10000, ge=2, le=50_000_000)
    features: int = Field(100, ge=1, le=1_000_000)
    noise: float = Field(0.1, ge=0)
    seed: int = Field(0, ge=0)


class DigitsData(Strict):
    type: Literal["digits"]
    seed: int = Field(0, ge=0)


class FileData(Strict):
    type: Literal["npz", "csv"]
    path: str = Field(min_length=1, max_length=4096, description="uploaded by the client with the job")
    test_fraction: float = Field(0.2, ge=0, lt=1, description="held out (seeded) when the file has no test set")


DataSpec = Annotated[Union[GaussianMixtureData, LinearData, DigitsData, FileData], Field(discriminator="type")]


class OptimizerSpec(Strict):
    type: Literal["sgd", "nesterov", "adam"] = "nesterov"
    lr: float = Field(gt=0, allow_inf_nan=False)
    momentum: float | None = Field(None, ge=0, lt=1, description="nesterov")


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
    path: str | None = Field(None, description="trace: CSV iteration,worker,delay (uploaded)")

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


class SoftErrorSpec(Strict):
    probability: float = Field(0.0, ge=0, le=1, description="per worker and iteration")
    model: Literal["gaussian", "bitflip"] = "gaussian"
    scale: float = Field(1.0, gt=0, description="gaussian: standard deviation")
    workers: list[Annotated[int, Field(ge=0)]] | None = None


class FaultSpec(Strict):
    stragglers: StragglerSpec = StragglerSpec()
    soft_errors: SoftErrorSpec = SoftErrorSpec()


class Timeouts(Strict):
    pending_s: float = Field(600.0, gt=0, description="fail if workers do not arrive in time")
    paused_s: float = Field(300.0, gt=0, description="fail if lost workers do not return in time")
    call_s: float = Field(300.0, gt=0, description="deadline of one worker call")


# --- jobs ----------------------------------------------------------------------------------------


class GradientJob(Strict):
    kind: Literal["gradient_coding"]
    name: str = Field("", max_length=200)
    workers: int = Field(ge=1, le=MAX_WORKERS)
    code: CodeSpec
    model: ModelSpec
    data: DataSpec
    optimizer: OptimizerSpec
    iterations: int = Field(ge=1, le=MAX_ITERATIONS)
    partition: Literal["shuffled", "sorted_by_label"] = "shuffled"
    eval_every: int = Field(10, ge=0, description="test metrics every this many iterations (0: never)")
    checkpoint_every: int = Field(10, ge=1)
    target_loss: float | None = Field(None, description="stop when the training loss reaches it")
    faults: FaultSpec = FaultSpec()
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    @model_validator(mode="after")
    def _consistent(self) -> GradientJob:
        if self.code.scheme not in ("uncoded", "lwpd") and self.code.stragglers >= self.workers:
            raise ValueError(f"code.stragglers: must be < workers (got {self.code.stragglers}, workers={self.workers})")
        try:
            gradient_code(self.code.scheme, n=self.workers, s=min(self.code.stragglers, self.workers - 1),
                          seed=self.seed, **self.code.params())
        except (ValueError, TypeError) as error:
            raise ValueError(f"code: {error}") from None
        if self.code.scheme == "lwpd" and self.optimizer.type != "sgd":
            raise ValueError("optimizer.type: lwpd applies each message as it arrives and needs sgd")
        for section, ids in (("faults.stragglers.workers", self.faults.stragglers.workers),
                             ("faults.soft_errors.workers", self.faults.soft_errors.workers)):
            bad = [w for w in ids or () if w >= self.workers]
            if bad:
                raise ValueError(f"{section}: worker {bad[0]} does not exist (workers are 0..{self.workers - 1})")
        if isinstance(self.data, (GaussianMixtureData, LinearData)) and self.data.samples * self.data.features > MAX_TRAIN_VALUES:
            raise ValueError(f"data: samples x features must be <= {MAX_TRAIN_VALUES}")
        if isinstance(self.model, LogisticModel) and getattr(self.data, "classes", 2) != 2:
            raise ValueError("model.type: logistic needs 2 classes; use softmax")
        if isinstance(self.model, LinearModel) != isinstance(self.data, LinearData) and not isinstance(self.data, FileData):
            raise ValueError("model.type: linear regression goes with data.type linear (and classifiers with class data)")
        return self

    def files(self) -> list[str]:
        """Paths the client must upload with the job."""
        paths = [self.data.path] if isinstance(self.data, FileData) else []
        if self.faults.stragglers.model == "trace":
            paths.append(str(self.faults.stragglers.path))
        return paths


# --- coded matrix multiplication ----------------------------------------------------------------

MAX_MATRIX_ELEMENTS = 1 << 28  # 2 GiB of float64 per matrix


class MatmulCodeSpec(Strict):
    scheme: Literal["uncoded", "polynomial", "matdot", "polydot", "gpd"]
    m: int = Field(1, ge=1, le=64, description="row blocks of A")
    n: int = Field(1, ge=1, le=64, description="column blocks of A = row blocks of B")
    d: int = Field(1, ge=1, le=64, description="column blocks of B")
    max_error: float = Field(1e-6, gt=0, lt=1, description="accuracy every accepted responder set must reach")

    def params(self) -> dict[str, int]:
        """Keyword arguments of common.codes.matmul_code for this scheme."""
        names = {"uncoded": (), "polynomial": ("m", "d"), "matdot": ("n",), "polydot": ("m", "n", "d"),
                 "gpd": ("m", "n", "d")}[self.scheme]
        return {name: getattr(self, name) for name in names}


class GenerateSpec(Strict):
    a: list[Annotated[int, Field(ge=1, le=1 << 20)]] = Field(min_length=2, max_length=2)
    b: list[Annotated[int, Field(ge=1, le=1 << 20)]] | None = Field(None, min_length=1, max_length=2)
    seed: int = Field(0, ge=0)
    symmetric: bool = Field(False, description="matvec: a symmetric A with a known spectral gap")


class MatmulInputs(Strict):
    a: str | None = Field(None, min_length=1, max_length=4096, description=".npy file, uploaded")
    b: str | None = Field(None, min_length=1, max_length=4096, description=".npy file, uploaded (matmul)")
    generate: GenerateSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> MatmulInputs:
        if (self.generate is None) == (self.a is None):
            raise ValueError("give either files (a, b) or generate")
        if self.generate is not None and self.b is not None:
            raise ValueError("give either files (a, b) or generate")
        return self


class VerifySpec(Strict):
    errors: int = Field(0, ge=0, le=16, description="correct up to this many wrong results")


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
    verify: VerifySpec | None = Field(None, description="wait for e + 1 extra results to detect and correct e wrong ones")
    driver: DriverSpec | None = Field(None, description="matvec: the iterative method")
    faults: FaultSpec = FaultSpec()
    timeouts: Timeouts = Timeouts()
    seed: int = Field(0, ge=0, lt=2**63)

    @model_validator(mode="after")
    def _consistent(self) -> MatmulJob:
        from common.codes.matmul import matmul_code, recovery_threshold

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
        threshold = self.workers if self.code.scheme == "uncoded" else recovery_threshold(self.code.scheme, **self.code.params())
        if self.code.scheme == "uncoded" and self.verify is not None:
            raise ValueError("verify: uncoded has no redundancy to check results with")
        if self.workers < self.needed(threshold):
            extra = f" + {self.verify.errors + 1} to verify" if self.verify is not None else ""
            raise ValueError(f"workers: {self.code.scheme} needs at least {self.needed(threshold)} workers "
                             f"(recovery threshold {threshold}{extra}), got {self.workers}")
        try:
            matmul_code(self.code.scheme, self.workers, seed=self.seed, max_error=self.code.max_error, **self.code.params())
        except ValueError as error:
            raise ValueError(f"code: {error}") from None
        bad = [w for w in self.faults.soft_errors.workers or () if w >= self.workers] + \
              [w for w in self.faults.stragglers.workers or () if w >= self.workers]
        if bad:
            raise ValueError(f"faults: worker {bad[0]} does not exist (workers are 0..{self.workers - 1})")
        return self

    @property
    def iterations(self) -> int:
        """Rounds of the job: one product for matmul, the driver's rounds for matvec."""
        return 1 if self.kind == "matmul" else (self.driver or DriverSpec()).rounds

    def needed(self, threshold: int) -> int:
        """Results to wait for: the recovery threshold, plus e + 1 when verifying."""
        return threshold + (self.verify.errors + 1 if self.verify is not None else 0)

    def files(self) -> list[str]:
        """Paths the client must upload with the job."""
        paths = [p for p in (self.inputs.a, self.inputs.b) if p is not None]
        if self.faults.stragglers.model == "trace":
            paths.append(str(self.faults.stragglers.path))
        return paths


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
    images: str | None = Field(None, description="mnist: IDX images file, uploaded")
    labels: str | None = Field(None, description="mnist: IDX labels file, uploaded")

    @model_validator(mode="after")
    def _files(self) -> CodeNetData:
        if (self.type == "mnist") != (self.images is not None and self.labels is not None):
            raise ValueError("mnist needs images and labels (IDX files); other types take none")
        return self


class CodeNetOptimizer(Strict):
    type: Literal["sgd"] = "sgd"
    lr: float = Field(gt=0, allow_inf_nan=False)
    batch: int = Field(16, ge=1, le=4096)


class CodeNetJob(Strict):
    kind: Literal["codenet"]
    name: str = Field("", max_length=200)
    strategy: Literal["codenet", "replication", "uncoded"] = "codenet"
    code: CodeNetCode = CodeNetCode()
    model: CodeNetModel = CodeNetModel()
    data: CodeNetData
    optimizer: CodeNetOptimizer
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
        if self.faults.stragglers.model != "none":
            raise ValueError("faults.stragglers: CodeNet jobs inject soft errors only")
        if self.decoders > self.workers:
            raise ValueError(f"decoders: at most the {self.workers} peers")
        bad = [w for w in self.faults.soft_errors.workers or () if w >= self.workers]
        if bad:
            raise ValueError(f"faults.soft_errors.workers: peer {bad[0]} does not exist (peers are 0..{self.workers - 1})")
        for index, width in enumerate(self.model.hidden):
            for parts, name in ((self.code.m, "m"), (self.code.n, "n")):
                if width % parts:
                    raise ValueError(f"model.hidden[{index}]: {width} units do not split into {name}={parts} blocks")
        return self

    def files(self) -> list[str]:
        return [p for p in (self.data.images, self.data.labels) if p is not None]


JobSpec = Union[GradientJob, MatmulJob, CodeNetJob]
KINDS = {"gradient_coding": GradientJob, "matmul": MatmulJob, "matvec": MatmulJob, "codenet": CodeNetJob}


def _format(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"] if not str(part).startswith(("function-", "tagged")))
    message = first["msg"].removeprefix("Value error, ")
    if ":" in message.split(" ")[0]:  # our own messages already start with the field
        return message
    return f"{location or 'spec'}: {message}"


def parse_job(text: str | bytes) -> JobSpec:
    """Parse and validate a YAML or JSON job specification.

    Raises
    ------
    JobSpecError
        With a message naming the offending field.
    """
    if len(text) > MAX_SPEC_BYTES:
        raise JobSpecError(f"spec: larger than {MAX_SPEC_BYTES} bytes")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise JobSpecError(f"spec: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise JobSpecError("spec: must be a mapping of fields")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise JobSpecError(f"kind: must be one of {', '.join(KINDS)} (got {kind!r})")
    try:
        return KINDS[kind].model_validate(raw)
    except ValidationError as error:
        raise JobSpecError(_format(error)) from None


def to_json(spec: JobSpec) -> str:
    """The normalised specification (defaults filled in), as compact JSON."""
    return json.dumps(spec.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)
