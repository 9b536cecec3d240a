"""The Python client of a coded master, and what it hands back.

:class:`CodedClient` (``client.py``) submits, watches and controls jobs; its replies are plain
objects (``reports.py``: jobs, iterations, workers), made from the API's messages in
``convert.py``. What a client does with a finished job: write its result to files other tools
load (``weights.py``), and fit the planner's costs to it (``costs.py``, for ``coded plan``).

    from coded.client import CodedClient

``CodedClient`` is imported (with gRPC) when first named, so that the plain objects alone import in
a blink (``coded status`` prints them; ``coded --help`` needs neither).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coded.client.client import CodedClient

__all__ = ["CodedClient"]


def __getattr__(name: str) -> type[CodedClient]:
    if name != "CodedClient":
        raise AttributeError(f"module 'coded.client' has no attribute {name!r}")
    from coded.client.client import CodedClient

    return CodedClient
