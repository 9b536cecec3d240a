"""A worker's share of one job: its partitions, its code row, its faults."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from common.codes import GradientCode
from common.faults import SoftErrors, Stragglers
from common.jobspec import GradientJob
from common.models import Model
from common.training import partial_vector

__all__ = ["WorkerJob", "Cancelled"]


class Cancelled(Exception):
    """The master cancelled the call while this worker was computing."""


@dataclass
class WorkerJob:
    """Everything a worker needs to compute its messages for one job."""

    spec: GradientJob
    index: int
    code: GradientCode
    model: Model
    stragglers: Stragglers
    soft_errors: SoftErrors
    rows: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # partition -> (x, y)

    @property
    def ready(self) -> bool:
        return set(self.rows) >= set(self.code.partitions(self.index))

    def stages(self) -> tuple[tuple[int, ...], ...]:
        return self.code.stage_partitions(self.index)

    def compute_stage(self, stage: int, params: np.ndarray, cancel: threading.Event) -> np.ndarray:
        """Encoded message of one stage; runs in a thread and stops between partitions on cancel."""
        partials = {}
        for j in self.stages()[stage]:
            if cancel.is_set():
                raise Cancelled
            x, y = self.rows[j]
            partials[j] = partial_vector(self.model, params, x, y)
        return self.code.encode_stage(self.index, stage, partials)
