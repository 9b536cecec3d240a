"""Checking a decode against the code's redundancy: detect wrong replies, locate them, decode without.

Every exact linear code here gets replies ``y_p = E[p] @ x`` (coordinate-wise on vectors). A set
G of replies is *consistent* when ``Y_G`` lies in the column space of ``E_G``, i.e. when its
*syndrome* ``N_G^H @ Y_G`` vanishes, N_G an orthonormal basis of the left null space of E_G (the
parity checks of G). A set is *certified* when it still decodes after losing any one reply
(``surplus(G) >= 1``).

**The guarantee.** If a certified, consistent G holds at most one wrong reply, its decode is exact:
G without the liar decodes the true value, and consistency makes every decodable subset of G
decode the same value. With rounding this becomes a bound. A single wrong reply x with error e
leaves the syndrome ``conj(N[x]) e^T`` and moves the decode by ``W[x] e^T`` (W the decode
weights), so ``||decode - exact|| <= sensitivity * ||syndrome||`` with ``sensitivity = max_x
||W[x]|| / ||N[x]||``. A set is accepted only when that bound is at most ``tolerance * scale``
(scale: the median 2-norm of the replies), so **one wrong reply never moves an accepted decode by
more than tolerance x scale**, whatever its values. A responder no parity check reaches
(``N[x] = 0``) cannot move the decode of a certified set either (every decode weight on it is 0),
and is left out of the decode so that its values are never read.

**Locating.** When G is inconsistent, the smallest set T whose removal leaves a certified,
consistent rest is searched for, first on a few random projections of the replies (cheap), then
confirmed on the full replies. Under the probabilistic error model (wrong values are continuous
random, spec/000 Theorem 3) T is exactly the set of wrong replies. Several T can fit when a wrong
value is barely above the tolerance (a rest that keeps it still agrees within the tolerance); the
T whose rest agrees ``1 / SEPARATION`` times better than every other's is then taken, and when none
stands out the location is ambiguous and :class:`DecodingFailure` is raised, never a guess. Either
way the decode is within the guarantee: every fitting rest is certified and consistent.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .combine import weighted_sum
from .errors import DecodingFailure, NotDecodableError
from .linear import EPS, DecodeWeights, LinearDecoder

__all__ = ["DEFAULT_TOLERANCE", "ConsistencyCheck", "Parity", "Verdict", "finite", "norm"]

#: Largest change of the decoded value, relative to the median reply norm, that one wrong reply
#: may make unnoticed. Clean float64 replies disagree by ~1e-15 (measured in tests/codes).
DEFAULT_TOLERANCE = 1e-6
#: Random projections of each reply used to search for wrong ones.
SEARCH_COLUMNS = 4
#: Rows of the projection drawn at a time: the search never holds more of it (a model of 10^7
#: parameters would otherwise need a 320 MB basis).
PROJECTION_BLOCK = 1 << 16
#: Candidate sets of wrong replies searched at most, per size (each costs an SVD once).
MAX_CANDIDATES = 20_000
#: A reply whose row of parity checks is shorter than this is checked by none of them.
UNCOVERED = 1e-8
#: When several sets of replies could be the wrong ones, the one whose removal leaves the rest
#: agreeing this many times better than any other is taken: a clean rest agrees to rounding, a
#: rest that still holds a (small) wrong reply shows it above rounding.
SEPARATION = 1e-3


def norm(values: np.ndarray) -> float:
    """The 2-norm of an array (real or complex) in one BLAS pass; inf when it overflows or is not finite."""
    flat = np.ascontiguousarray(values).reshape(-1)
    real = flat.view(np.float64) if np.iscomplexobj(flat) else flat.astype(np.float64, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.dot(real, real))
    return float(np.sqrt(total)) if np.isfinite(total) else float("inf")


#: Arrays up to this many entries are checked entry by entry: below it the norm's set-up costs
#: more than the pass (3 us against 1 at a model's 101 parameters).
FINITE_DIRECT = 4096


def finite(values: np.ndarray) -> bool:
    """Whether every entry is finite (one BLAS pass when it is, as it mostly is)."""
    if values.size <= FINITE_DIRECT:
        return bool(np.isfinite(values).all())
    return bool(np.isfinite(norm(values))) or bool(np.all(np.isfinite(values)))


@dataclass(frozen=True)
class Parity:
    """What checking one responder set needs, solved once per set.

    Attributes
    ----------
    workers : tuple of int
        The responders, ascending; row i of ``checks`` belongs to ``workers[i]``.
    checks : (F, c) ndarray
        Orthonormal columns with ``checks^H @ E_F = 0``: the c parity checks of the set.
    weights : DecodeWeights
        Decode weights over the responders some parity check reaches (``weights.workers``).
    sensitivity : float
        ``max_x ||W[x]|| / ||checks[x]||``: how far one wrong reply can move the decode per unit
        of syndrome norm.
    """

    workers: tuple[int, ...]
    checks: np.ndarray
    weights: DecodeWeights
    sensitivity: float

    def misfit(self, replies: Sequence[np.ndarray]) -> float:
        """``sensitivity * ||syndrome||`` of the replies (in ``workers`` order): the most one wrong
        reply among them can have moved their decode. inf when the syndrome is not finite."""
        if self.checks.shape[1] == 0:
            return 0.0
        with np.errstate(over="ignore", invalid="ignore"):  # a huge wrong reply overflows: inf, detected
            size = norm(weighted_sum(list(replies), self.checks.conj()))
        return self.sensitivity * size


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check.

    Attributes
    ----------
    weights : DecodeWeights
        What to decode with (their ``workers`` are the replies to use).
    wrong : tuple of int
        Responders located as wrong and left out, ascending.
    misfit : float
        The accepted set's bound on how far one wrong reply could have moved its decode.
    scale : float
        The median 2-norm of the replies that ``tolerance`` is relative to.
    """

    weights: DecodeWeights
    wrong: tuple[int, ...]
    misfit: float
    scale: float


class ConsistencyCheck:
    """Detects, locates and leaves out wrong replies of one linear code.

    Parameters
    ----------
    decoder : LinearDecoder
        The code's decoder (its encoding matrix and cached decode weights).
    surplus : callable
        ``surplus(workers)``: the largest r such that ``workers`` without any r of them still
        decode; -1 when they do not decode (:meth:`coded.codes.GradientCode.surplus`).
    seed : int
        Seed of the random projections used to search for wrong replies.
    cache_size : int
        Responder sets whose parity checks are kept.
    """

    def __init__(self, decoder: LinearDecoder, surplus: Callable[[frozenset[int]], int], seed: int = 0,
                 cache_size: int = 1024) -> None:
        self._decoder = decoder
        self._surplus = surplus
        self._seed = seed
        self._cache: OrderedDict[tuple[int, ...], Parity] = OrderedDict()
        self._cache_size = cache_size

    def parity(self, workers: Sequence[int]) -> Parity:
        """Parity checks, decode weights and sensitivity of a responder set (cached).

        Raises
        ------
        NotDecodableError
            When the responders some check reaches cannot decode (accurately).
        """
        key = tuple(sorted(set(workers)))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        encoding = self._decoder.encoding[list(key)]
        u, sing, _ = np.linalg.svd(encoding, full_matrices=True)
        floor = (sing[0] if sing.size else 0.0) * max(encoding.shape) * EPS * 10
        checks = u[:, int((sing > floor).sum()):]
        reach = np.linalg.norm(checks, axis=1)
        covered = [w for w, r in zip(key, reach, strict=True) if r > UNCOVERED]
        weights = self._decoder.weights(covered)
        rows = np.linalg.norm(weights.matrix, axis=1)
        by_worker = dict(zip(key, reach, strict=True))
        sensitivity = max((float(row / by_worker[w]) for w, row in zip(weights.workers, rows, strict=True)),
                          default=0.0)
        result = Parity(key, checks, weights, sensitivity)
        self._cache[key] = result
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return result

    def check(self, replies: dict[int, np.ndarray], max_errors: int | None = None,
              tolerance: float = DEFAULT_TOLERANCE) -> Verdict:
        """Check finite replies; locate and leave out wrong ones.

        Parameters
        ----------
        replies : dict of int to (L,) ndarray
            Responder to its reply, in the code's field (complex codes: complex), all finite.
        max_errors : int, optional
            Locate at most this many wrong replies; default: as many as the replies allow
            (``surplus - 1``: what is left must still be certified).
        tolerance : float
            Accept a set when one wrong reply in it could have moved the decode by at most
            ``tolerance`` times the median reply norm.

        Returns
        -------
        Verdict

        Raises
        ------
        NotDecodableError
            When the replies cannot be checked at all (surplus < 1): wait for more.
        DecodingFailure
            When the replies disagree and the wrong ones cannot be located within ``max_errors``
            (or the location is ambiguous).
        """
        if not tolerance > 0:
            raise ValueError(f"tolerance must be > 0 (got {tolerance})")
        usable = sorted(replies)
        room = self._surplus(frozenset(usable))
        if room < 1:
            raise NotDecodableError(
                f"the replies of workers {usable} cannot be checked: losing one of them would leave a set "
                "that cannot decode, so a wrong one could not be told from a right one")
        budget = room - 1 if max_errors is None else min(max_errors, room - 1)
        scale = float(np.median([norm(replies[w]) for w in usable]))
        limit = tolerance * scale if np.isfinite(scale) else 0.0
        parity = self.parity(usable)
        misfit = parity.misfit([replies[w] for w in usable])
        if misfit <= limit:
            return Verdict(parity.weights, (), misfit, scale)
        if budget < 1:
            raise DecodingFailure(
                f"the replies of workers {usable} disagree (one wrong reply could have moved the decode by "
                f"{misfit:.2g} > {limit:.2g}): a wrong reply is detected, and "
                + ("correcting was not asked for" if room > 1 else "there are too few replies to locate it"))
        return self._locate(replies, usable, budget, tolerance, scale)

    def _locate(self, replies: dict[int, np.ndarray], usable: list[int], budget: int, tolerance: float,
                scale: float) -> Verdict:
        """The unique smallest set of at most ``budget`` replies whose removal leaves a certified,
        consistent rest."""
        with np.errstate(over="ignore", invalid="ignore"):
            projected = self._project(replies, usable)
        projected_scale = float(np.median([norm(projected[w]) for w in usable]))
        limit = tolerance * scale
        for size in range(1, budget + 1):
            candidates = [t for t in itertools.combinations(usable, size)
                          if self._surplus(frozenset(usable) - set(t)) >= 1]
            if len(candidates) > MAX_CANDIDATES:
                raise DecodingFailure(
                    f"wrong replies detected; locating {size} of {len(usable)} would search {len(candidates)} "
                    f"sets (more than {MAX_CANDIDATES})")
            found: list[tuple[tuple[int, ...], Parity, float]] = []
            for dropped in candidates:
                rest = [w for w in usable if w not in dropped]
                try:
                    parity = self.parity(rest)
                except NotDecodableError:
                    continue
                if parity.misfit([projected[w] for w in rest]) > tolerance * projected_scale:
                    continue
                misfit = parity.misfit([replies[w] for w in rest])
                if misfit <= limit:
                    found.append((dropped, parity, misfit))
            found.sort(key=lambda candidate: candidate[2])
            if len(found) == 1 or (len(found) > 1 and found[0][2] <= SEPARATION * found[1][2]):
                dropped, parity, misfit = found[0]
                return Verdict(parity.weights, dropped, misfit, scale)
            if len(found) > 1:
                raise DecodingFailure(
                    f"wrong replies detected; their location is ambiguous: leaving out any of "
                    f"{', '.join(str(list(t)) for t, _, _ in found[:5])} makes the rest agree")
        raise DecodingFailure(
            f"wrong replies detected among workers {usable}; more than {budget} of them are wrong, or they "
            "cannot be located with these replies")

    def _project(self, replies: dict[int, np.ndarray], usable: list[int]) -> dict[int, np.ndarray]:
        """Each reply times the same seeded Gaussian (L, SEARCH_COLUMNS) basis, drawn block by block."""
        length = replies[usable[0]].shape[0]
        if length <= SEARCH_COLUMNS:
            return {w: replies[w] for w in usable}
        out = {w: np.zeros(SEARCH_COLUMNS, dtype=replies[w].dtype) for w in usable}
        for index, start in enumerate(range(0, length, PROJECTION_BLOCK)):
            stop = min(start + PROJECTION_BLOCK, length)
            basis = np.random.default_rng([self._seed, length, index]).standard_normal((stop - start, SEARCH_COLUMNS))
            for w in usable:
                out[w] += replies[w][start:stop] @ basis
        return out
