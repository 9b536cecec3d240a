"""The sampled check of streamed replies: which pieces it confirms, and what that guarantees.

Each iteration every piece is confirmed by a second copy with probability p (``verify.sample``),
drawn independently of the others and of who computes it (:func:`confirmations`;
:class:`coded.codes.streaming.StreamAssembly` settles the drawn pieces only on two agreeing
copies). A wrong piece is therefore caught with probability p wherever it sits in a worker's
order, and the rest follows: :func:`located_per_iteration`, :func:`wrong_used_before_located`,
:func:`wrong_used_at_most` (docs/jobs.md, "Checking replies", states them).

Pure math: numpy only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["confirmations", "located_per_iteration", "wrong_used_at_most", "wrong_used_before_located"]

#: salt of the sampled check's draws
_CONFIRM_SALT = 0xC0F


def confirmations(seed: int, iteration: int, pieces: int, share: float) -> frozenset[int]:
    """The pieces the sampled check confirms at an iteration: each of the ``pieces`` with
    probability ``share``, independently of the others and of who computes it.

    The draw depends only on (seed, iteration): an iteration that starts again confirms the same
    pieces, and a resumed job the same as an uninterrupted one. It is not secret from a worker
    that knows the job's seed: the check is for faults, not for a worker that lies on purpose
    (``verify: strict`` is).

    >>> sorted(confirmations(7, 0, 6, 1.0)), sorted(confirmations(7, 0, 6, 0.0))
    ([0, 1, 2, 3, 4, 5], [])
    """
    draws = np.random.default_rng([seed, iteration, _CONFIRM_SALT]).random(pieces)
    return frozenset(np.flatnonzero(draws < share).tolist())


def located_per_iteration(share: float, wrong: float, used: int = 1) -> float:
    """Probability that the sampled check locates a worker in one iteration: ``1 - (1 - share *
    wrong) ** used`` for a worker wrong in a share ``wrong`` of its pieces (any positions), of which
    the round uses ``used`` (``chunks`` in a healthy round: its own partition).

    A wrong piece is caught when it is drawn (``share``); copies that arrive after their piece
    was settled, and the scale check, catch more, so this is a lower bound.

    >>> round(located_per_iteration(0.1, 1.0), 3), round(located_per_iteration(0.1, 0.3, used=4), 3)
    (0.1, 0.115)
    """
    return 1.0 - (1.0 - share * wrong) ** used


def wrong_used_before_located(share: float) -> float:
    """Expected wrong pieces of a worker the sampled check uses before it locates the worker:
    ``(1 - share) / share``, whatever share of its pieces are wrong (each wrong piece is drawn
    with probability ``share``, independently); more than k are used with probability
    ``(1 - share) ** k``.

    >>> wrong_used_before_located(0.1)
    9.0
    """
    return (1.0 - share) / share



def wrong_used_at_most(share: float, confidence: float = 0.99) -> int:
    """The fewest wrong pieces k such that the sampled check uses more than k of a worker's before
    locating it with probability at most ``1 - confidence``: ``(1 - share) ** k <= 1 - confidence``.

    >>> wrong_used_at_most(0.1), wrong_used_at_most(1.0)
    (44, 0)
    """
    if share >= 1.0:
        return 0
    return math.ceil(math.log(1.0 - confidence) / math.log(1.0 - share))
