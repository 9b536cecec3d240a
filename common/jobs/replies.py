"""How a gradient job's workers reply: each piece as it is computed (streamed) or one message each
(whole) — decided when the job is submitted, from the gradient's length, the data, the links and
the code, unless the spec says (docs/jobs.md, "stream").

Streamed replies save computing (a round computes about one partition per worker instead of d)
and cost sending (a whole gradient per piece: the own partition's, the pieces taken over from a
late worker, the check's second copies). On loopback or a fast link with a small model they win;
with a gradient of hundreds of thousands of floats on a link of 100 Mbit/s, one message of l/m
floats is what pays (Ye & Abbe's point): there, a fast worker that takes over a late one's piece
sends a second gradient and is itself as late as the one it helps. The choice uses
:func:`coded.codes.plan.reply_seconds` with the link bandwidth the master is told (``coded master
--link``) and an assumed compute speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from coded.codes.plan import reply_seconds
from coded.codes.streaming import STREAMED_SCHEMES
from coded.jobs.spec import GradientJob
from coded.jobs.spec.gradient import StreamSpec
from coded.ml.models import Model

__all__ = ["ASSUMED_MULTIPLY_ADDS_PER_S", "DEFAULT_LINK_BITS_PER_S", "Replies", "choose_replies", "link_words"]

#: what the choice assumes a worker's core computes (numpy on one core: ~1e9 dense, less sparse);
#: the choice only compares orders of magnitude
ASSUMED_MULTIPLY_ADDS_PER_S = 1e9
#: the workers' link bandwidth when the master is not told one: a data centre's 10 Gbit/s
DEFAULT_LINK_BITS_PER_S = 10e9


@dataclass(frozen=True)
class Replies:
    """How a job's workers reply, and what that costs each worker per iteration.

    Attributes
    ----------
    streamed : bool
    sent_bytes : int
        What a worker sends the master in a healthy iteration (its own pieces, or its message).
    received_bytes : int
        What the master sends each worker per iteration (the parameters).
    reason : str
        Why, in words (said at submission).
    """

    streamed: bool
    sent_bytes: int
    received_bytes: int
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"streamed": self.streamed, "sent_bytes": self.sent_bytes, "received_bytes": self.received_bytes,
                "reason": self.reason}


def link_words(bits_per_s: float) -> str:
    """A bandwidth in words: "100 Mbit/s", "10 Gbit/s"."""
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:.3g} {unit}"
    return f"{bits_per_s:.3g} bit/s"


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.3g} MB" if count >= 1e5 else f"{count / 1e3:.3g} kB"


def choose_replies(spec: GradientJob, model: Model, rows: int, density: float,
                   link_bits_per_s: float = DEFAULT_LINK_BITS_PER_S) -> tuple[GradientJob, Replies]:
    """The job with its replies decided (``stream`` set to a section or ``off`` where the spec left
    it out), and what was decided.

    Parameters
    ----------
    spec : GradientJob
    model : Model
        The job's model, built for its data.
    rows : int
        Samples of one partition an iteration computes on (its mini-batch, or all its rows).
    density : float
        The share of features stored per sample (1 for dense data).
    link_bits_per_s : float
        The bandwidth of the workers' links.
    """
    floats = model.size + 1  # the gradient and its loss
    width = spec.wire_dtype.itemsize  # what a worker sends; the parameters it receives are float64
    received = model.size * 8
    if spec.code.scheme not in STREAMED_SCHEMES:
        code = spec.gradient_code
        sent = code.message_size(floats) * width
        return spec, Replies(False, sent, received, f"{spec.code.scheme} sends one coded message of "
                                                    f"{_megabytes(sent)} per worker")
    chunks = spec.stream_settings.chunks
    sent_streamed = chunks * floats * width
    if spec.stream is not None or (spec.checks is not None and spec.checks.level == "sampled"):
        if spec.streamed:
            return spec, Replies(True, sent_streamed, received, f"streamed as the spec says: {chunks} piece(s) of "
                                                                f"{_megabytes(floats * width)} per worker")
        return spec, Replies(False, floats * width, received, "whole replies as the spec says (stream: off)")
    partition_s = model.work(rows, density) / ASSUMED_MULTIPLY_ADDS_PER_S
    check = 1 if spec.checks is not None else 0
    # streamed, the job would check at its spec's level: sampled unless it says strict
    checks = spec.checks
    confirm = 0.0 if checks is None else 1.0 if checks.level == "strict" else checks.sample
    whole_s, streamed_s = reply_seconds(floats * width, partition_s, spec.code.effective_stragglers, check, chunks,
                                        link_bits_per_s, confirm)
    why = (f"a gradient of {floats} floats ({_megabytes(floats * width)}) on links of "
           f"{link_words(link_bits_per_s)}, a partition of about {partition_s * 1e3:.2g} ms of computing: about "
           f"{whole_s * 1e3:.3g} ms per iteration with a late worker with whole replies, {streamed_s * 1e3:.3g} ms "
           "streamed")
    if streamed_s <= whole_s:
        return spec.model_copy(update={"stream": StreamSpec()}), Replies(True, sent_streamed, received,
                                                                         f"streamed: {why}")
    whole = spec.model_copy(update={"stream": "off"})
    try:
        code = whole.gradient_code  # built now: a code that cannot be built keeps the job streamed
    except ValueError as error:
        return spec.model_copy(update={"stream": StreamSpec()}), Replies(
            True, sent_streamed, received, f"streamed: whole replies would pay ({why}), but their code cannot be "
                                           f"built ({error})")
    return whole, Replies(False, code.message_size(floats) * width, received,
                          f"whole replies (stream: off): {why}")
