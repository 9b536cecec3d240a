"""The ``verify`` section: what the master checks of the workers' replies (docs/jobs.md, "verify");
gradient jobs add their own fields to it (:class:`coded.jobs.spec.gradient.GradientVerifySpec`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from coded.jobs.spec.base import MAX_ITERATIONS, Strict, off, on_or_off

__all__ = ["QuarantineOrOff", "QuarantineSpec", "VerifyOrOff", "VerifySpec"]


class QuarantineSpec(Strict):
    limit: int = Field(2, ge=0, le=MAX_ITERATIONS, description="a worker located as wrong more than this many "
                                                               "times within `window` iterations leaves the job")
    window: int = Field(10, ge=1, le=MAX_ITERATIONS, description="iterations the count looks back over")


QuarantineOrOff = Annotated[Annotated[QuarantineSpec, Tag("tagged-on")] | Annotated[Literal["off"], Tag("tagged-off")],
                            Discriminator(on_or_off)]


class VerifySpec(Strict):
    """What the master checks of the workers' replies (docs/jobs.md, "verify")."""

    errors: int = Field(0, ge=0, le=16, description="wait for e + 1 replies more than decoding needs and correct up "
                                                    "to e wrong ones (0: detect, and correct what the replies allow)")
    quarantine: QuarantineOrOff = QuarantineSpec()

    _quarantine_off = field_validator("quarantine", mode="before")(off)

    @property
    def quarantine_rule(self) -> QuarantineSpec | None:
        return None if isinstance(self.quarantine, str) else self.quarantine


VerifyOrOff = Annotated[Annotated[VerifySpec, Tag("tagged-on")] | Annotated[Literal["off"], Tag("tagged-off")],
                        Discriminator(on_or_off)]
