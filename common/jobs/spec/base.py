"""What every section of a job specification is made of: strict models, uploaded files, limits,
the error a bad spec raises, and the ``off`` that turns a section off."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from coded.base.errors import JobSpecError

__all__ = [
    "MAX_ITERATIONS",
    "MAX_SPEC_BYTES",
    "MAX_WORKERS",
    "SKIPPED_FIELDS",
    "UNREADABLE",
    "VALUE_LIKENESS",
    "JobSpecError",
    "Rule",
    "Strict",
    "Timeouts",
    "Upload",
    "broken_rules",
    "builds_code",
    "did_you_mean",
    "off",
    "on_or_off",
    "raise_problems",
    "rule",
]

MAX_SPEC_BYTES = 1 << 20
MAX_WORKERS = 1024
MAX_ITERATIONS = 1_000_000


class Strict(BaseModel):
    # strict: a value of the wrong type is refused, never converted (`iterations: true` is not 1,
    # `workers: "4"` is not 4); integers stand for reals
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    @model_validator(mode="wrap")
    @classmethod
    def _suggest_fields(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """An unknown field of this section says which known one is closest, if any is close:
        ``straglers: Extra inputs are not permitted (did you mean 'stragglers'?)``; so does a value
        of this section that is none of its field's names: ``scheme: Input should be 'uncoded', ...
        (did you mean 'cyclic'?)``."""
        try:
            return handler(data)
        except ValidationError as error:
            errors = error.errors()
            if not any(_unknown_here(problem) or _unknown_name(problem) for problem in errors):
                raise
            known = set(cls.model_fields) | {info.alias for info in cls.model_fields.values() if info.alias}
            raise ValidationError.from_exception_data(error.title, [
                _suggesting(problem, known) if _unknown_here(problem)
                else _suggesting(problem, re.findall(r"'([^']*)'", problem["ctx"]["expected"]), problem["input"])
                if _unknown_name(problem) else _again(problem) for problem in errors
            ]) from None


def _unknown_here(problem: Any) -> bool:
    """Whether ``problem`` is an unknown field of the section that validates, not of one inside it."""
    return problem["type"] == "extra_forbidden" and len(problem["loc"]) == 1


def _unknown_name(problem: Any) -> bool:
    """Whether ``problem`` is a name of this section's that is none of the names its field takes
    (a literal: a scheme, a model's type)."""
    return (problem["type"] == "literal_error" and len(problem["loc"]) == 1 and isinstance(problem["input"], str)
            and "expected" in problem.get("ctx", {}))


def _again(problem: Any) -> InitErrorDetails:
    """``problem`` (an item of ``ValidationError.errors()``) as it was, to raise once more."""
    return {"type": PydanticCustomError(problem["type"], problem["msg"], problem.get("ctx")),
            "loc": problem["loc"], "input": problem["input"]}


def _suggesting(problem: Any, known: Iterable[str], given: str | None = None) -> InitErrorDetails:
    """An unknown name's problem with the closest known name, when one is close: ``given`` (a
    field's value), else the unknown field's own name."""
    hint = (did_you_mean(str(problem["loc"][0]), known) if given is None
            else did_you_mean(given, known, VALUE_LIKENESS))
    again = _again(problem)
    if hint:
        again["type"] = PydanticCustomError(problem["type"], f"{problem['msg']}{hint}")
    return again


#: how alike a value must be to one it can be, to be taken for a typo of it (difflib's ratio): closer
#: than a field's name must be, since another value may be meant (``float16`` is no typo of ``float64``,
#: 0.86; ``cylic`` is one of ``cyclic``, 0.91)
VALUE_LIKENESS = 0.88


def did_you_mean(given: str, known: Iterable[str], likeness: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` with the known name closest to ``given``, or "" when none is at
    least ``likeness`` alike (difflib's ratio)."""
    close = difflib.get_close_matches(given, sorted(known), n=1, cutoff=likeness)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- rules between a job's fields -------------------------------------------------------------------

#: the validation context's key for the fields of a job in error: parse_job validates the job once
#: more without them, and the rules that read one of them are not checked (they could not tell)
SKIPPED_FIELDS = "skipped_fields"


@dataclass(frozen=True)
class Rule:
    """A rule between the fields of a job: ``check`` raises ValueError, its message naming the
    field to fix, when a job breaks it; ``reads``: the job's fields it reads."""

    check: Callable[[Any], None]
    reads: frozenset[str]


def rule(*reads: str) -> Callable[[Callable[[Any], None]], Rule]:
    """The function it decorates as a :class:`Rule` that reads the job's fields ``reads``."""
    return lambda check: Rule(check, frozenset(reads))


def broken_rules(job: Any, rules: Sequence[Rule], info: ValidationInfo) -> tuple[list[str], frozenset[str]]:
    """The problems of the ``rules`` that ``job`` breaks, in order, and the fields they cannot vouch
    for: those in error (``SKIPPED_FIELDS``) and those a broken rule read. A rule that reads one of
    them is not checked: it could not tell, or would repeat a problem (stragglers >= workers also
    leaves no room for the check)."""
    doubtful = set((info.context or {}).get(SKIPPED_FIELDS, ()))
    problems = []
    for each in rules:
        if each.reads & doubtful:
            continue
        try:
            each.check(job)
        except ValueError as error:
            problems.append(str(error))
            doubtful |= each.reads
    return problems, frozenset(doubtful)


def raise_problems(problems: Sequence[str]) -> None:
    """Raise every problem a job's rules found at once (each message starts with its field)."""
    if problems:
        raise ValidationError.from_exception_data("rules", [
            {"type": PydanticCustomError("job_rule", problem), "loc": (), "input": None} for problem in problems])


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
    call_s: float = Field(300.0, gt=0, description="deadline of one worker call with nothing moving "
                                                         "either way (bytes moving on a slow link extend it)")
