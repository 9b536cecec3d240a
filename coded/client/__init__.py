"""The Python client of a coded master, and what it hands back.

:class:`CodedClient` (``client.py``) submits, watches and controls jobs; its replies are plain
objects (``reports.py``: jobs, iterations, workers), made from the API's messages in
``convert.py``. What a client does with a finished job: write its result to files other tools
load (``weights.py``), and fit the planner's costs to it (``costs.py``, for ``coded plan``).

    from coded.client import CodedClient
"""

from coded.client.client import CodedClient

__all__ = ["CodedClient"]
