"""Choosing a matmul code for P workers and given matrix sizes: which schemes and splits decode
accurately, the threshold each gets, and what each worker stores, computes and returns. For a
number of stragglers s not to wait for, every scheme's best split is the one with the largest
recovery threshold R <= P - s - c, where c is what a job's check waits for beyond R (1 by default,
e + 1 with ``verify.errors: e``, 0 with ``verify: off``): a larger R means smaller blocks, so less
work per worker (ties go to fewer inner blocks, which also means less work, then to m close to d).
Each option is built on the unit circle (the default) and on real Chebyshev points, and reports the
constructor's float64 error estimate or its refusal. Pure math; ``coded plan --matmul`` prints it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

from .matmul import matmul_code, matmul_scheme_params, recovery_threshold

__all__ = ["MatmulOption", "best_split", "default_stragglers", "matmul_options", "splits"]

SCHEMES = ("polynomial", "matdot", "polydot", "gpd")


def splits(scheme: str, most: int, vector: bool = False) -> Iterator[dict[str, int]]:
    """Every split of ``scheme`` with threshold 2 <= R <= ``most`` (d = 1 for a vector B)."""
    names = matmul_scheme_params(scheme)
    inner = range(2, most // 2 + 2) if "n" in names and scheme != "polynomial" else [1]
    for n in inner:
        for m in range(1, most // n + 1) if "m" in names else [1]:  # R >= m n d
            for d in range(1, most // (m * n) + 1) if "d" in names and not vector else [1]:
                params = {k: v for k, v in (("m", m), ("n", n), ("d", d)) if k in names}
                if 2 <= recovery_threshold(scheme, **params) <= most:
                    yield params


def best_split(scheme: str, most: int, vector: bool = False) -> dict[str, int] | None:
    """The split with the largest threshold <= ``most`` (ties: fewest inner blocks, then m ~ d).

    >>> best_split("gpd", 30), best_split("matdot", 30), best_split("polynomial", 30, vector=True)
    ({'m': 2, 'n': 2, 'd': 7}, {'n': 15}, {'m': 30, 'd': 1})
    """

    def key(params: dict[str, int]) -> tuple[int, int, int]:
        return (recovery_threshold(scheme, **params), -params.get("n", 1),
                -abs(params.get("m", 1) - params.get("d", 1)))

    return max(splits(scheme, most, vector), key=key, default=None)


def default_stragglers(workers: int, check: int = 0) -> list[int]:
    """1, 2, 4, P/8 and P/4 stragglers (those that leave a threshold R >= 2 beside ``check``)."""
    return sorted({s for s in (1, 2, 4, workers // 8, workers // 4) if 1 <= s <= workers - 2 - check})


@dataclass(frozen=True)
class MatmulOption:
    """One scheme and split for P workers.

    Attributes
    ----------
    scheme, params
        What to put in a job's ``code`` section.
    workers, recovery_threshold : int
        P and R.
    check : int
        Results a round waits for beyond R to check them; it does not wait for the P - R - check
        slowest workers.
    work : Fraction
        Each worker's share of the multiply-adds of A @ B, 1/(m n d).
    stored_a, stored_b, returned : Fraction
        Each worker's share of A and of B, and the size of its result as a share of A @ B.
    padded : tuple of int
        (N1, N0, Nb) after padding to the code's block sizes.
    error : float or None
        The unit-circle code's estimated worst relative error (None when refused, see ``refusal``).
    chebyshev_error : float or None
        The same with real Chebyshev points.
    """

    scheme: str
    params: tuple[tuple[str, int], ...]
    workers: int
    recovery_threshold: int
    work: Fraction
    stored_a: Fraction
    stored_b: Fraction
    returned: Fraction
    padded: tuple[int, int, int]
    error: float | None
    refusal: str | None
    chebyshev_error: float | None
    check: int = 0

    @property
    def stragglers(self) -> int:
        """Slowest workers a round does not wait for (with its check)."""
        return self.workers - self.recovery_threshold - self.check

    @property
    def received(self) -> Fraction:
        """What the master receives, as a multiple of the size of A @ B."""
        return self.recovery_threshold * self.returned

    def padding(self, sizes: tuple[int, int, int]) -> float:
        """Extra multiply-adds from padding, relative to the unpadded product."""
        return math.prod(self.padded) / math.prod(sizes) - 1.0

    def code(self) -> dict[str, object]:
        """The job spec's ``code`` section."""
        return {"scheme": self.scheme, **dict(self.params)}


def _estimate(scheme: str, workers: int, params: dict[str, int], points: str,
              max_error: float) -> tuple[float | None, str | None, tuple[int, int, int]]:
    try:
        code = matmul_code(scheme, workers=workers, points=points, max_error=max_error, **params)
    except ValueError as error:
        return None, str(error), (0, 0, 0)
    return code.worst_error, None, code.size_multiples


def matmul_options(
    workers: int,
    sizes: tuple[int, int, int],
    stragglers: Sequence[int] | None = None,
    vector: bool = False,
    max_error: float = 1e-6,
    check: int = 0,
) -> list[MatmulOption]:
    """For each number of stragglers, each scheme's best split and how accurately it decodes.

    Parameters
    ----------
    workers : int
        P.
    sizes : (N1, N0, Nb)
        A is N1 x N0, B is N0 x Nb (Nb = 1 and ``vector`` for a matrix-vector product).
    stragglers : sequence of int, optional
        Default: :func:`default_stragglers`.
    max_error : float
        The accuracy the codes must certify (``code.max_error`` of a job).
    check : int
        Results a job waits for beyond R to check them (1 by default, ``verify.errors + 1``, 0 with
        ``verify: off``): the split for s stragglers has R <= P - s - check.

    Returns
    -------
    options : list of MatmulOption
        Ordered by stragglers, then scheme; splits shared by several straggler counts appear once.
    """
    out: list[MatmulOption] = []
    seen: set[tuple[str, tuple[tuple[str, int], ...]]] = set()
    for s in stragglers if stragglers is not None else default_stragglers(workers):
        for scheme in SCHEMES:
            params = best_split(scheme, workers - s - check, vector)
            if params is None or (scheme, tuple(params.items())) in seen:
                continue
            seen.add((scheme, tuple(params.items())))
            m, n, d = params.get("m", 1), params.get("n", 1), params.get("d", 1)
            error, refusal, multiples = _estimate(scheme, workers, params, "unit_circle", max_error)
            chebyshev, _, real_multiples = _estimate(scheme, workers, params, "chebyshev", max_error)
            steps = multiples if refusal is None else real_multiples if chebyshev is not None else (m, n, d)
            padded = tuple(math.ceil(size / step) * step for size, step in zip(sizes, steps, strict=True))
            out.append(MatmulOption(
                scheme, tuple(params.items()), workers, recovery_threshold(scheme, **params),
                Fraction(1, m * n * d), Fraction(1, m * n), Fraction(1, n * d), Fraction(1, m * d),
                (padded[0], padded[1], padded[2]), error, refusal, chebyshev, check))
    return out
