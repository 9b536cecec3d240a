"""Parsing a job specification: YAML (or JSON) to the typed job of its ``kind``, every problem
named by its field (``code.stragglers: must be < workers``)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError, create_model

from coded.jobs.spec.base import MAX_SPEC_BYTES, SKIPPED_FIELDS, UNREADABLE, VALUE_LIKENESS, JobSpecError, did_you_mean
from coded.jobs.spec.codenet import CodeNetJob
from coded.jobs.spec.gradient import GradientJob
from coded.jobs.spec.learning import TorchModel
from coded.jobs.spec.matrix import MatmulJob, MatrixJob, MatvecJob
from coded.ml import pytorch

__all__ = ["KINDS", "JobSpec", "parse_job", "to_json", "worker_needs"]


class _SpecLoader(yaml.SafeLoader):
    """YAML with YAML 1.2's numbers: ``1e-6`` is a float (YAML 1.1 makes it a string, which strict
    validation would then refuse)."""


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


JobSpec = GradientJob | MatrixJob | CodeNetJob  # matrix jobs: MatmulJob or MatvecJob
#: the job of each ``kind``
KINDS: dict[str, type[JobSpec]] = {
    "gradient_coding": GradientJob, "matmul": MatmulJob, "matvec": MatvecJob, "codenet": CodeNetJob}


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
    hint = did_you_mean(str(tag), kinds.split(", "), VALUE_LIKENESS)
    message = f"{path}.type: must be one of {kinds} (got {tag!r}){hint}"
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


#: what PyYAML was reading when it found a problem, and the problems that mean it was not closed
_OPENINGS = {
    "while parsing a flow mapping": ("the mapping", ("expected ',' or '}'",)),
    "while parsing a flow sequence": ("the list", ("expected ',' or ']'",)),
    "while scanning a quoted scalar": ("the quoted string", ("found unexpected end of stream",
                                                             "found unexpected document separator")),
}


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A syntax error where the user must look: a mapping, list or string left open is reported
    where it opens (PyYAML's context mark), with where the parser noticed (its problem mark, often
    the next line); any other problem where it is."""
    mark, context = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    opened, unclosed = _OPENINGS.get(getattr(error, "context", None) or "", ("", ()))
    if mark is not None and context is not None and problem.startswith(unclosed):
        return (f"spec: not valid YAML at {_at(context)}: {opened} opened there is not closed "
                f"({problem} at {_at(mark)})")
    return f"spec: not valid YAML{f' at {_at(mark)}' if mark is not None else ''}: {problem}"


def parse_job(text: str | bytes, readable: Callable[[str], str | None] | None = None, *,
              build_code: bool = True) -> JobSpec:
    """Parse and validate a YAML or JSON job specification.

    Parameters
    ----------
    readable : callable, optional
        Called with every file the spec names (data.path, inputs.a, ...); returns what is wrong
        with it (it cannot be read, it was not uploaded) or None. Its problems are reported with
        all the others, each under the field that names the file.
    build_code : bool
        Build the job's code, checking its parameters and numerics (seconds for large codes), and
        keep it with the returned spec for whatever runs the job in this process. False: every
        other rule is checked, and the code is left to a process that runs the job (the client
        only sends the spec on: the master builds the code and refuses the job if it cannot).

    Raises
    ------
    JobSpecError
        Its ``problems`` name every offending field (the message: all of them, separated by "; ").
    """
    if len(text) > MAX_SPEC_BYTES:
        raise JobSpecError(f"spec: larger than {MAX_SPEC_BYTES} bytes")
    try:
        raw = yaml.load(text, Loader=_SpecLoader)
    except yaml.YAMLError as error:
        raise JobSpecError(_yaml_problem(error)) from None
    if not isinstance(raw, dict):
        raise JobSpecError("spec: must be a mapping of fields")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise JobSpecError(f"kind: must be one of {', '.join(KINDS)} (got {kind!r})"
                           f"{did_you_mean(kind, KINDS, VALUE_LIKENESS) if isinstance(kind, str) else ''}")
    try:
        return KINDS[kind].model_validate(raw, context={"readable": readable, "build_code": build_code})
    except ValidationError as error:
        problems, errors = _problems(error, raw), error.errors()
        # below, the spec is validated again for what its first errors hid, without building the
        # code (seconds for large codes) for a submission that fails anyway
        if any(problem["type"] == UNREADABLE for problem in errors):
            # a file's field in error keeps its section's own checks from running: once more
            # without the files, so that what they hid is reported too
            try:
                KINDS[kind].model_validate(raw, context={"build_code": False})
                errors = []
            except ValidationError as more:
                problems, errors = problems + _problems(more, raw), more.errors()
        problems += _rules_beside(KINDS[kind], raw, errors)
        raise JobSpecError(*dict.fromkeys(problems)) from None


def _rules_beside(job: type[BaseModel], raw: dict[str, Any], errors: list[Any]) -> list[str]:
    """The problems of the rules between a job's fields, which pydantic checks only once every field
    is valid: validated again without the fields in ``errors``, the rules that read only valid
    fields are checked (``coded.jobs.spec.base.broken_rules``)."""
    if not any(error["loc"] for error in errors):
        return []  # no field in error: the rules were checked
    fields = job.model_fields
    skipped = frozenset(str(error["loc"][0]) for error in errors if error["loc"] and error["loc"][0] in fields)
    valid = {name: value for name, value in raw.items() if name in fields and name not in skipped}
    try:
        _without(job, skipped).model_validate(valid, context={"build_code": False, SKIPPED_FIELDS: skipped})
    except ValidationError as error:
        return _problems(error, raw)
    return []


@functools.lru_cache(maxsize=64)
def _without(job: type[BaseModel], fields: frozenset[str]) -> type[BaseModel]:
    """The job with ``fields`` left out: any value, None when absent, and not read by its rules."""
    if not fields:
        return job
    placeholders: dict[str, Any] = {name: (Any, None) for name in sorted(fields)}
    return create_model(f"{job.__name__}Without", __base__=job, **placeholders)


def worker_needs(spec: JobSpec) -> str | None:
    """What a worker must list among its models to take the job (None: every worker can)."""
    if isinstance(spec, GradientJob) and isinstance(spec.model, TorchModel):
        return spec.model.capability
    return None


def to_json(spec: JobSpec) -> str:
    """The normalised specification (defaults filled in), as compact JSON."""
    return json.dumps(spec.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)
