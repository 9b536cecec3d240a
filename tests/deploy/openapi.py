"""Custom resources checked against the OpenAPI v3 schema of the kind they instantiate, more strictly
than an API server would check them.

An API server prunes a field its structural schema does not know, silently: a misspelt
``sucessPolicy`` is dropped and the JobSet runs with the default policy. Here an unknown field is an
error (except under ``x-kubernetes-preserve-unknown-fields``, a free-form map's ``additionalProperties``
or an embedded resource's ``apiVersion``/``kind``/``metadata``), as are a value of the wrong type, a
missing required field, a value outside an ``enum`` or a ``pattern``, and a list or string outside its
bounds. CEL rules (``x-kubernetes-validations``), formats and defaults are not checked.

A schema comes from one of two places, in the same form (an OpenAPI v3 schema as a CRD holds it):

- ``crd_schema``: a CustomResourceDefinition file's ``spec.versions[].schema.openAPIV3Schema``;
- ``model_schema``: the API's Python models as the Kubeflow Trainer project publishes them on PyPI
  (``kubeflow-trainer-api``, generated from the Go types its CRDs are generated from: Trainer's
  ``trainer.kubeflow.org/v1alpha1`` and the ``jobset.x-k8s.io/v1alpha2`` JobSet it embeds). Their
  enums are in prose only, so a schema made from them checks no enum.
"""

from __future__ import annotations

import datetime
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

__all__ = ["crd_schema", "model_schema", "problems"]

Schema = dict[str, Any]
_SCALARS: dict[type, Schema] = {str: {"type": "string"}, bytes: {"type": "string"}, bool: {"type": "boolean"},
                                int: {"type": "integer"}, float: {"type": "number"},
                                datetime.datetime: {"type": "string"}, datetime.date: {"type": "string"}}
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "boolean": (bool,), "integer": (int,), "number": (int, float),
                                       "object": (dict,), "array": (list,)}
_EMBEDDED = {"apiVersion", "kind", "metadata"}  # what x-kubernetes-embedded-resource lets an object hold


def crd_schema(path: Path, version: str) -> Schema:
    """The OpenAPI v3 schema of ``version`` in the CustomResourceDefinition file at ``path``.

    Raises
    ------
    KeyError
        The CRD does not serve that version (the message names those it serves).
    """
    crd = yaml.safe_load(path.read_text())
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions:
        raise KeyError(f"{path.name} has no version {version!r} (it has {sorted(versions)})")
    return versions[version]["schema"]["openAPIV3Schema"]


def model_schema(model: type) -> Schema:
    """The OpenAPI v3 schema of a generated pydantic model: its fields by their JSON names,
    required where the model requires them, nested models expanded (a recursive type refers to
    the same dict)."""
    return _model(model, {})


def _model(model: type, made: dict[type, Schema]) -> Schema:
    if model in made:
        return made[model]
    fields = model.model_fields  # type: ignore[attr-defined]
    if "actual_instance" in fields:  # a oneOf wrapper (IntOrString, Quantity): any of its alternatives
        alternatives = [_annotation(f.annotation, made) for name, f in fields.items()
                        if name.startswith("oneof_schema_")]
        return {"anyOf": alternatives}
    schema: Schema = {"type": "object", "properties": {}, "required": []}
    made[model] = schema
    for name, info in fields.items():
        key = info.alias or name
        schema["properties"][key] = _annotation(info.annotation, made)
        if info.is_required():
            schema["required"].append(key)
    return schema


def _annotation(annotation: Any, made: dict[type, Schema]) -> Schema:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:  # StrictStr and the like: the type, strictly
        return _annotation(args[0], made)
    if origin in (typing.Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        schema = (_annotation(present[0], made) if len(present) == 1
                  else {"anyOf": [_annotation(arg, made) for arg in present]})
        return {**schema, "nullable": True} if len(present) < len(args) else schema
    if origin in (list, set, frozenset):
        return {"type": "array", "items": _annotation(args[0], made)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _annotation(args[1], made)}
    if annotation is Any or annotation is object:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return _model(annotation, made)
    raise TypeError(f"no schema for the annotation {annotation!r}: teach tests/deploy/openapi.py")


def problems(value: Any, schema: Schema, path: str = "") -> list[str]:
    """What is wrong with ``value`` under ``schema``, one line each naming where (``spec.x[0].y``);
    empty when nothing is."""
    where = path or "(the object)"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null where a value is required"]
    if "anyOf" in schema and not any(not problems(value, alternative, path) for alternative in schema["anyOf"]):
        return [f"{where}: {value!r} is none of the types it may be"]
    if schema.get("x-kubernetes-int-or-string") and (isinstance(value, bool) or not isinstance(value, int | str)):
        return [f"{where}: {value!r} is neither an integer nor a string"]
    kind = schema.get("type")
    if kind is not None and (not isinstance(value, _TYPES[kind])
                             or (isinstance(value, bool) and kind in ("integer", "number"))):
        return [f"{where}: {type(value).__name__} {value!r} where the schema wants {kind}"]
    found = []
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        found += _string(value, schema, where)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{where}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{where}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{where}: {len(value)} items, more than {schema['maxItems']}")
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(f"{where}: {len(value)} items, fewer than {schema['minItems']}")
        for k, item in enumerate(value):
            found += problems(item, schema.get("items", {}), f"{path}[{k}]")
    if isinstance(value, dict):
        found += _object(value, schema, path)
    return found


def _string(value: str, schema: Schema, where: str) -> list[str]:
    found = []
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        found.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(f"{where}: longer than {schema['maxLength']} characters")
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.append(f"{where}: shorter than {schema['minLength']} characters")
    return found


def _object(value: dict[str, Any], schema: Schema, path: str) -> list[str]:
    properties: dict[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    free = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
    found = [f"{path + '.' if path else ''}{name}: required, missing" for name in schema.get("required", [])
             if name not in value]
    for key, item in value.items():
        inner = f"{path}.{key}" if path else key
        if key in properties:
            found += problems(item, properties[key], inner)
        elif isinstance(extra, dict):
            found += problems(item, extra, inner)
        elif not free and not (schema.get("x-kubernetes-embedded-resource") and key in _EMBEDDED):
            close = difflib.get_close_matches(key, list(properties), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            found.append(f"{inner}: unknown field{hint}; an API server would drop it silently")
    return found
