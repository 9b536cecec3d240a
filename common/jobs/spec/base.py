"""What every section of a job specification is made of: strict models, uploaded files, limits,
the error a bad spec raises, and the ``off`` that turns a section off."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = [
    "MAX_ITERATIONS",
    "MAX_SPEC_BYTES",
    "MAX_WORKERS",
    "UNREADABLE",
    "JobSpecError",
    "Strict",
    "Timeouts",
    "Upload",
    "builds_code",
    "off",
    "on_or_off",
]

MAX_SPEC_BYTES = 1 << 20
MAX_WORKERS = 1024
MAX_ITERATIONS = 1_000_000


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


def builds_code(info: ValidationInfo) -> bool:
    """Whether this validation builds the job's code (parse_job's ``build_code``): a job keeps the
    code it was validated with, so the process that parsed it never builds it again."""
    return bool((info.context or {}).get("build_code", True))


def off(value: Any) -> Any:
    """``off`` as YAML 1.1 reads it (the boolean false) is the word ``off``."""
    return "off" if value is False else value


def on_or_off(value: Any) -> str:
    """The tag of a section that may also be the word ``off`` (tags start with "tagged", which
    field paths leave out, so errors name the section's fields plainly)."""
    return "tagged-off" if value in ("off", False) else "tagged-on"


class Timeouts(Strict):
    pending_s: float = Field(600.0, gt=0, description="fail if workers do not arrive in time")
    paused_s: float = Field(300.0, gt=0, description="fail if lost workers do not return in time")
    call_s: float = Field(300.0, gt=0, description="deadline of one worker call")
