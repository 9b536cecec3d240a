"""What each kind of job records as its rounds' ``loss``, in words: read by whoever shows a job
(``coded status``), without importing the job schema (pydantic, numpy) to learn it."""

from __future__ import annotations

__all__ = ["LOSS_WORDS"]

#: each kind's measure (None: it records none; a CodeNet job's peers count rollbacks instead); the
#: kinds of :data:`coded.jobs.spec.KINDS`
LOSS_WORDS: dict[str, str | None] = {"gradient_coding": "loss", "matmul": None, "matvec": "residual", "codenet": None}
