"""How a gradient job's workers reply: each piece as it is computed (streamed) or one message each
(whole) — decided when the job is submitted, unless the spec says (docs/jobs.md, "stream") — and
how long an iteration will take.

Both come from the round's cost model (:mod:`coded.jobs.round_costs`): this machine's rates, where
the workers run (sharing the master's cores, behind links), and the job's shape. Streamed replies
save computing (a healthy round computes about one partition per worker instead of d) and cost
sending (a whole gradient per piece) and the master's work per piece; whole replies send one
message of the code's, and do not wait for a late worker at all, where streamed replies send
what another worker takes over of its partition. The choice is the mode the model predicts
faster over a healthy round and one with a late worker (what a code is for) alike; the healthy
round's prediction is said at submission (``Replies.predicted_s``, the ``replies:`` line).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coded.base.words import link_words
from coded.codes.streaming import STREAMED_SCHEMES
from coded.jobs.round_costs import Placement, Rates, RoundShape, iteration_seconds, late_extra
from coded.jobs.spec import GradientJob
from coded.jobs.spec.gradient import StreamSpec
from coded.ml.models import Model

__all__ = ["DEFAULT_LINK_BITS_PER_S", "Replies", "choose_replies"]

#: the workers' link bandwidth the words of a placement assume when the master is not told one
DEFAULT_LINK_BITS_PER_S = 10e9


@dataclass(frozen=True)
class Replies:
    """How a job's workers reply, what that costs each worker per iteration, and the predicted
    seconds of a healthy iteration.

    Attributes
    ----------
    streamed : bool
    sent_bytes : int
        What a worker sends the master in a healthy iteration (its own pieces, or its message).
    received_bytes : int
        What the master sends each worker per iteration (the parameters).
    gradient_bytes : int
        One whole gradient and its loss as a worker sends it (in the spec's wire dtype).
    reason : str
        Why, in words (said at submission).
    predicted_s : float
        Seconds of one healthy iteration, as the master predicts them at submission (NaN: none).
    local_workers, cores : int
        The cluster's workers on the master's machine at submission, and its cores: workers that
        share cores compute side by side at a share of one each (``coded plan``'s fit).
    """

    streamed: bool
    sent_bytes: int
    received_bytes: int
    gradient_bytes: int
    reason: str
    predicted_s: float = math.nan
    local_workers: int = 0
    cores: int = 0

    def as_dict(self) -> dict[str, object]:
        """What the job's row keeps and clients are told (master.proto's ``Replies``)."""
        return {"streamed": self.streamed, "sent_bytes": self.sent_bytes, "received_bytes": self.received_bytes,
                "gradient_bytes": self.gradient_bytes, "reason": self.reason,
                "predicted_s": 0.0 if math.isnan(self.predicted_s) else self.predicted_s,
                "local_workers": self.local_workers, "cores": self.cores}


def _megabytes(count: float) -> str:
    return f"{count / 1e6:.3g} MB" if count >= 1e5 else f"{count / 1e3:.3g} kB"


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _where(placement: Placement) -> str:
    link = "no links" if placement.link_bits_per_s is None else f"links of {link_words(placement.link_bits_per_s)}"
    return f"{placement.local} worker(s) on the master's {placement.cores} cores, {link}"


def whole_shape(spec: GradientJob, model: Model, rows: int, density: float) -> RoundShape:
    """A healthy round of whole replies: every worker computes its d partitions and sends its
    code's message; the round waits for the replies that decode, and one more when checked. The
    master reads each message once to decode it, and when the job checks replies once more to find
    it finite, and where the code can check them once more to project them on its checks.

    Of a streamed job, the round its whole replies would make: frc's and cyclic's message is one
    gradient, and the layout holds the partitions their code would (no code is built to say so)."""
    n, floats = spec.workers, model.size + 1
    width = spec.wire_dtype.itemsize / 8  # a message's floats, counted as float64s travel
    stages: tuple[int, ...]
    if spec.streamed:
        stages, held, waits = (floats,), len(spec.layout.partitions(0)), n - spec.code_stragglers + spec.check_replies
        checkable = spec.check_replies > 0
    else:
        code = spec.gradient_code
        stages, held, checkable = code.stage_sizes(floats), len(code.partitions(0)), code.checkable
        waits = n if code.asynchronous else min(n, n - code.s + spec.check_replies)
    passes = 1 if spec.checks is None else 3 if checkable else 2
    return RoundShape(n, waits, model.work(rows * held, density), density, len(stages),
                      model.size, math.ceil(sum(stages) * width / len(stages)), passes * waits)


def streamed_shape(spec: GradientJob, model: Model, rows: int, density: float, confirm: float) -> RoundShape:
    """A healthy streamed round: every worker computes its own partition's pieces and sends each
    (a whole gradient); a share ``confirm`` of the pieces is computed and sent twice (the check);
    the master reads every piece three times."""
    layout = spec.layout
    chunks, floats = layout.chunks, model.size + 1
    width = spec.wire_dtype.itemsize / 8
    piece = model.work(max(rows // chunks, 1), density)
    # each piece: checked to be finite and of scale (its norm), then summed
    return RoundShape(spec.workers, spec.workers, chunks * piece * (1 + confirm), density, chunks,
                      model.size, math.ceil(floats * width), math.ceil(3 * layout.pieces * (1 + confirm)),
                      pieces=True)


def choose_replies(spec: GradientJob, model: Model, rows: int, density: float, rates: Rates,
                   placement: Placement) -> tuple[GradientJob, Replies]:
    """The job with its replies decided (``stream`` set to a section or ``off`` where the spec left
    it out), and what was decided, with the predicted seconds of a healthy iteration.

    Parameters
    ----------
    spec : GradientJob
    model : Model
        The job's model, built for its data.
    rows : int
        Samples of one partition an iteration computes on (its mini-batch, or all its rows).
    density : float
        The share of features stored per sample (1 for dense data).
    rates : Rates
        This machine's (:func:`coded.jobs.round_costs.calibrate`).
    placement : Placement
        Where the job's processes run.
    """
    floats = model.size + 1  # the gradient and its loss
    width = spec.wire_dtype.itemsize  # what a worker sends; the parameters it receives are float64
    received = model.size * 8
    gradient = floats * width  # one whole gradient and its loss, as a worker sends it
    where = _where(placement)

    def whole_replies(job: GradientJob, sent: int, reason: str) -> tuple[GradientJob, Replies]:
        shape = whole_shape(job, model, rows, density)
        seconds = iteration_seconds(shape, rates, placement)
        return job, Replies(False, sent, received, gradient, reason.format(seconds=_milliseconds(seconds)), seconds,
                            placement.local, placement.cores)

    if spec.code.scheme not in STREAMED_SCHEMES:
        sent = spec.gradient_code.message_size(floats) * width
        # one partition held: its gradient, as it is; more: a combination of theirs
        what = "its partition's gradient" if len(spec.gradient_code.partitions(0)) == 1 else "one coded message"
        return whole_replies(spec, sent, f"{spec.code.scheme}: each worker sends {what} of {_megabytes(sent)}; about "
                                         f"{{seconds}} per iteration ({where})")
    checks = spec.checks  # streamed, the job would check at its spec's level: sampled unless it says strict
    confirm = 0.0 if checks is None else 1.0 if checks.level == "strict" else checks.sample
    chunks = spec.stream_settings.chunks
    if spec.stream is not None or (checks is not None and checks.level == "sampled"):
        if not spec.streamed:
            return whole_replies(spec, gradient, "whole replies as the spec says (stream: off); about "
                                                       f"{{seconds}} per iteration ({where})")
        streaming = spec
    else:
        streaming = spec.model_copy(update={"stream": StreamSpec()})
    shape = streamed_shape(streaming, model, rows, density, confirm)
    streamed_s = iteration_seconds(shape, rates, placement)

    def streamed_replies(reason: str) -> tuple[GradientJob, Replies]:
        return streaming, Replies(True, chunks * gradient, received, gradient, reason, streamed_s, placement.local,
                                  placement.cores)

    if streaming is spec:
        return streamed_replies(f"streamed as the spec says: {chunks} piece(s) of {_megabytes(gradient)} per "
                                f"worker; about {_milliseconds(streamed_s)} per iteration ({where})")
    # whole replies' round, from the layout (the partitions their code would hold): no code built
    whole_s = iteration_seconds(whole_shape(streaming, model, rows, density), rates, placement)
    late = late_extra(shape, rates, placement, model.work(rows, density))
    why = f"a gradient of {floats} floats ({_megabytes(gradient)}), {where}: about"
    times = (f"{_milliseconds(streamed_s)} per iteration streamed ({_milliseconds(streamed_s + late)} with a late "
             f"worker), {_milliseconds(whole_s)} with whole replies (a late worker not waited for)")
    # healthy rounds and rounds with a late worker, alike: the latter are what a code is for
    if streamed_s + late / 2 <= whole_s:
        return streamed_replies(f"streamed: {why} {times}")
    whole = spec.model_copy(update={"stream": "off"})
    try:  # the code built now, once: one that cannot be built keeps the job streamed
        sent = whole.gradient_code.message_size(floats) * width
    except ValueError as error:
        return streamed_replies(f"streamed: whole replies' code cannot be built ({error}); {why} {times}")
    return whole_replies(whole, sent, f"whole replies (stream: off): {why} {times}")
