"""PyTorch models for gradient jobs (optional: ``pip install 'coded-computing[torch]'``).

A job names a registered architecture and its arguments (``model: {type: torch, name: lenet}``);
the master and every worker build the same ``nn.Module`` from that and from the data's sample
shape and class count. Modules never cross the network and nothing is unpickled: parameters travel
as one flat float64 vector, the module's parameters in :meth:`torch.nn.Module.named_parameters`
order, each flattened in C order.

Architectures come from two places: the built-in ones (:mod:`coded.ml.pytorch.networks`) and
the ``coded.models`` entry-point group, where an installed package registers its own factories::

    [project.entry-points."coded.models"]
    widenet = "mypackage.models:widenet"

A factory is called as ``factory(input_shape, classes, **args)`` and returns an ``nn.Module`` that
maps a float batch of shape ``(b, *input_shape)`` to logits ``(b, classes)``.

This module imports torch only when a model is built, so that a worker without PyTorch can still
say what it lacks.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "INSTALL", "NAME", "RESTART", "architectures", "available", "factory"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "coded.models"
#: how to get PyTorch where it is missing (the CPU build; a looser range fetches CUDA wheels)
INSTALL = "pip install 'coded-computing[torch]' (PyTorch 2.13, CPU build)"
#: why a worker that was running when PyTorch was installed still lacks it for the master
RESTART = ("restart running workers after installing it: a worker tells the master what it builds when it "
           "registers, at its start")
BUILTIN = ("mlp", "lenet", "resnet")
#: what an architecture's name may look like (it appears in job specs and worker registrations)
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")

Factory = Callable[..., Any]


def available() -> bool:
    """Whether PyTorch can be imported here (without importing it)."""
    return importlib.util.find_spec("torch") is not None


@functools.cache
def architectures() -> dict[str, str]:
    """Every architecture this process can build, by name, with where it comes from
    (``builtin``, or the entry point's ``module:attribute``); empty without PyTorch.

    A plugin may not replace a built-in architecture, and names that are not valid are skipped;
    both are logged.
    """
    if not available():
        return {}
    found = dict.fromkeys(BUILTIN, "builtin")
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in found or not NAME.match(point.name):
            log.warning("ignoring model entry point %s = %s: %s", point.name, point.value,
                        "the name is taken" if point.name in found else "not a valid name")
            continue
        found[point.name] = point.value
    return found


def factory(name: str) -> Factory:
    """The factory of architecture ``name``.

    Raises
    ------
    ModuleNotFoundError
        Without PyTorch (the message says how to install it).
    LookupError
        For a name that no built-in or installed entry point has.
    """
    if not available():
        raise ModuleNotFoundError(f"PyTorch is not installed here: {INSTALL}")
    known = architectures()
    if name not in known:
        raise LookupError(f"unknown architecture {name!r} (this process has: {', '.join(sorted(known))})")
    if known[name] == "builtin":
        from coded.ml.pytorch import networks

        return getattr(networks, name)
    (point,) = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name == name]
    return point.load()
