"""A CodeNet job (``kind: codenet``): masterless model-parallel training on coded weight blocks
(docs/jobs.md, "CodeNet"), its sections and its rules."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, model_validator

from coded.base.words import plural
from coded.jobs.spec.base import MAX_ITERATIONS, Strict, Timeouts, Upload, broken_rules, raise_problems, rule
from coded.jobs.spec.faults import FaultSpec, no_soft_error_partition

__all__ = ["DEFAULT_CODENET_OPTIMIZER", "CodeNetCode", "CodeNetData", "CodeNetJob", "CodeNetModel", "CodeNetOptimizer"]


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


# --- rules: each raises ValueError naming its field when a job breaks it ---------------------------

_PEERS = ("strategy", "code")  # what the job's count of peers is made of


@rule("faults")
def _soft_errors_only(job: CodeNetJob) -> None:
    if job.faults.stragglers.model != "none" or job.faults.slowdown.model != "none":
        raise ValueError(f"faults.{'stragglers' if job.faults.stragglers.model != 'none' else 'slowdown'}: "
                         "CodeNet jobs inject soft errors only")


@rule("decoders", *_PEERS)
def _enough_peers_to_decode(job: CodeNetJob) -> None:
    if job.decoders > job.workers:
        raise ValueError(f"decoders: {job.decoders} is more than the job's {plural(job.workers, 'peer')}")


@rule("faults", *_PEERS)
def _faulty_peers_exist(job: CodeNetJob) -> None:
    bad = [w for w in job.faults.soft_errors.workers or () if w >= job.workers]
    if bad:
        raise ValueError(f"faults.soft_errors.workers: peer {bad[0]} does not exist (peers are 0..{job.workers - 1})")


@rule("model", "code")
def _blocks_split_the_layers(job: CodeNetJob) -> None:
    for index, width in enumerate(job.model.hidden):
        for parts, name in ((job.code.m, "m"), (job.code.n, "n")):
            if width % parts:
                raise ValueError(f"model.hidden[{index}]: {width} units do not split into {name}={parts} blocks")


_RULES = (_soft_errors_only, no_soft_error_partition, _enough_peers_to_decode, _faulty_peers_exist,
          _blocks_split_the_layers)


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
    def _consistent(self, info: ValidationInfo) -> CodeNetJob:
        raise_problems(broken_rules(self, _RULES, info)[0])
        return self

    def files(self) -> dict[str, str]:
        """Paths the client must upload with the job, each with the field that names it."""
        return {path: field for path, field in ((self.data.images, "data.images"), (self.data.labels, "data.labels"))
                if path}
