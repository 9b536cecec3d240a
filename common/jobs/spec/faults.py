"""The ``faults`` section every job kind has: injected stragglers, partial stragglers (slowdown) and
soft errors (:mod:`coded.jobs.faults` injects them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from coded.jobs.spec.base import MAX_ITERATIONS, Strict, Upload, rule

__all__ = ["FaultSpec", "SlowdownSpec", "SoftErrorSpec", "StragglerSpec", "no_soft_error_partition"]


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
    """Silent data corruption of workers' messages (:class:`coded.jobs.faults.SoftErrors` says
    what each model does): a fraction ``probability`` of the messages, each perturbed."""

    probability: float = Field(0.0, ge=0, le=1, description="per worker, iteration and stage (or streamed piece)")
    model: Literal["gaussian", "bitflip", "sign", "mantissa", "element"] = Field(
        "gaussian", description="gaussian: noise on every entry; the others touch one entry: bitflip an exponent bit, "
                                "sign negates it, mantissa flips one of its top 8 mantissa bits, element scales it")
    scale: float = Field(1.0, gt=0, description="gaussian: the noise's standard deviation; element: the entry's "
                                                "relative change (it becomes entry x (1 + scale)); others: unused")
    workers: list[Annotated[int, Field(ge=0)]] | None = None
    start: int = Field(0, ge=0, le=MAX_ITERATIONS, description="the first iteration whose messages it corrupts")
    partition: int | None = Field(None, ge=0, description="corrupt only messages that involve this data partition "
                                                          "(gradient jobs): faults that depend on the data")


@rule("faults")
def no_soft_error_partition(job: Any) -> None:
    """The rule of the job kinds without data partitions (matrix and CodeNet jobs)."""
    if job.faults.soft_errors.partition is not None:
        raise ValueError(f"faults.soft_errors.partition: {job.kind} jobs have no data partitions (only "
                         "gradient_coding jobs do); drop the field")


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
