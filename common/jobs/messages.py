"""What the master tells workers about a job and hears back, as plain objects.

The master's core and the worker's core exchange these; the gRPC layers convert them to and from
``worker.proto`` and ``peer.proto`` messages (field for field, same names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Assignment", "PeerStart", "PeerStatus"]


@dataclass(frozen=True)
class Assignment:
    """Position ``index`` (0..n-1) of job ``job_id``, given to one worker.

    ``spec_json`` is the validated job specification; ``data_uploaded`` says that the worker's
    data arrive by upload (user files) rather than being generated from the spec; ``trace_csv`` is
    the straggler trace of model "trace"; ``features`` and ``classes`` size the model (classes 0:
    regression) and ``shape`` is one sample's shape before flattening (empty: ``(features,)``);
    ``slowdown_csv`` is the slowdown trace of ``faults.slowdown`` model "trace".
    """

    job_id: str
    index: int
    spec_json: str
    data_uploaded: bool = False
    trace_csv: str = ""
    features: int = 0
    classes: int = 0
    shape: tuple[int, ...] = ()
    slowdown_csv: str = ""


@dataclass(frozen=True)
class PeerStart:
    """Place ``peer`` of a CodeNet job; ``peers`` holds every peer's address by index and ``files``
    the data files the spec names (e.g. MNIST IDX), by the name the spec gives them."""

    job_id: str
    peer: int
    spec_json: str
    peers: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class PeerStatus:
    """Where one CodeNet peer stands.

    ``state`` is STARTING, RUNNING, SUCCEEDED or FAILED (``reason`` says why); ``iteration`` counts
    completed iterations; the counters are this peer's (error counts: as decoded by this peer);
    ``cpu_seconds`` is the process CPU time spent on the job; ``evaluations`` holds
    (iteration, test accuracy) pairs.
    """

    job_id: str
    peer: int
    state: str
    iteration: int = 0
    rollbacks: int = 0
    errors_corrected: int = 0
    errors_detected: int = 0
    repairs: int = 0
    cpu_seconds: float = 0.0
    reason: str = ""
    evaluations: tuple[tuple[int, float], ...] = ()
    elapsed_s: float = 0.0
