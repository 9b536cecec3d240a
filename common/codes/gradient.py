"""Gradient codes: the base class every scheme fills in, and what checking replies finds.

A gradient code spreads k data partitions over n workers. Worker i computes the partial gradient
g_j of every partition j it holds and sends one encoded message; the master recovers
``sum_j g_j`` from the messages of a subset of workers. Public methods validate and normalise
their arguments here, once; each scheme fills in the private hooks (the exact schemes through
:class:`~coded.codes.linear_gradient.LinearGradientCode`), and
:func:`~coded.codes.gradient_registry.gradient_code` builds a scheme by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from coded.base.checks import check_int

from .errors import NotDecodableError
from .linear import DecodeWeights
from .verify import DEFAULT_TOLERANCE, ConsistencyCheck, finite

__all__ = ["CheckedGradient", "GradientCode"]


@dataclass(frozen=True)
class CheckedGradient:
    """A decoded gradient and what checking the replies found.

    Attributes
    ----------
    gradient : (l,) ndarray
        The sum of all partial gradients.
    wrong : tuple of int
        Workers whose messages were located as wrong (non-finite, or inconsistent with the
        others) and left out of the decode, ascending.
    checked : bool
        Whether a surplus of replies confirmed the gradient (False for codes without redundancy,
        which only catch non-finite messages).
    used : tuple of int
        Workers whose messages the gradient was decoded from, ascending.
    misfit : float
        The most one wrong message among ``used`` could have moved the gradient unnoticed
        (2-norm; 0 when unchecked); at most ``tolerance`` x ``scale``.
    scale : float
        The median 2-norm of the checked messages, which ``tolerance`` is relative to.
    """

    gradient: np.ndarray
    wrong: tuple[int, ...]
    checked: bool
    used: tuple[int, ...]
    misfit: float = 0.0
    scale: float = 0.0



def summed(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The sum of equally long arrays, in order, as a new array (without stacking them)."""
    total = np.array(arrays[0], dtype=np.float64)
    for array in arrays[1:]:
        total += array
    return total

class GradientCode(ABC):
    """A gradient code for n workers, k partitions and s stragglers.

    Subclasses implement :meth:`partitions`, :meth:`message_size`, ``_encode``, ``_decodable``
    and ``_decode``.
    """

    scheme: ClassVar[str]
    #: False for approximate schemes (ignore_stragglers) and asynchronous ones (lwpd, kasync).
    exact: ClassVar[bool] = True
    #: Asynchronous schemes have no rounds: the master applies messages as they arrive (``update``),
    #: stepping the optimizer every ``batch`` arrivals and recording an iteration every
    #: ``arrivals_per_iteration``; a worker gets the new parameters once its message is applied.
    asynchronous: ClassVar[bool] = False
    #: Messages sent per worker and iteration (2 for the partial-straggler scheme).
    stages: ClassVar[int] = 1
    #: Whether the scheme uses s; uncoded and lwpd ignore it (their codes have s = 0).
    uses_stragglers: ClassVar[bool] = True

    def __init__(self, n: int, s: int, k: int) -> None:
        self._n = n
        self._s = s
        self._k = k

    @property
    def n(self) -> int:
        """Number of workers."""
        return self._n

    @property
    def s(self) -> int:
        """Number of stragglers tolerated."""
        return self._s

    @property
    def k(self) -> int:
        """Number of data partitions."""
        return self._k

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, s={self.s}, k={self.k})"

    @property
    def batch(self) -> int:
        """Asynchronous schemes: arrivals per optimizer step."""
        return 1

    @property
    def arrivals_per_iteration(self) -> int:
        """Asynchronous schemes: arrivals per recorded iteration."""
        return self.n

    def update(self, i: int, message: np.ndarray) -> np.ndarray:
        """Asynchronous schemes: worker i's additive contribution to the step, from its message."""
        raise NotImplementedError(f"{self.scheme} is synchronous: its messages are decoded per round")

    # --- public API: validation, then the hooks -------------------------------------------------

    @abstractmethod
    def partitions(self, i: int) -> tuple[int, ...]:
        """Partitions worker i holds, ascending."""

    @abstractmethod
    def message_size(self, l: int) -> int:
        """Floats a worker sends for a gradient of length l (all stages together)."""

    def gradient_size(self, message_length: int) -> int:
        """Length of the decoded vector for messages of ``message_length`` floats (with padding)."""
        return message_length

    def encode(self, i: int, partials: Mapping[int, np.ndarray]) -> np.ndarray:
        """Worker i's message.

        Parameters
        ----------
        i : int
            Worker id, 0..n-1.
        partials : mapping of int to (l,) ndarray
            The partial gradient g_j of every partition j in ``partitions(i)``, and no others.

        Returns
        -------
        message : (message_size(l),) ndarray of float64
        """
        i = self._check_worker(i)
        expected = self.partitions(i)
        if set(partials) != set(expected):
            raise ValueError(
                f"worker {i} holds partitions {list(expected)}, got gradients for {sorted(partials)}"
            )
        arrays = [np.asarray(partials[j]) for j in expected]
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1 or arrays[0].ndim != 1 or arrays[0].size == 0:
            raise ValueError(f"partial gradients must be non-empty 1-D and equally long (got {sorted(shapes)})")
        if not all(np.issubdtype(a.dtype, np.number) for a in arrays):
            raise TypeError("partial gradients must be numeric arrays")
        # not stacked: with long gradients (sparse data: hundreds of thousands of floats) a copy of
        # all d of them costs a worker more than the encoding itself
        return self._encode(i, [np.ascontiguousarray(a, dtype=np.float64) for a in arrays])

    def stage_partitions(self, i: int) -> tuple[tuple[int, ...], ...]:
        """Partitions worker i needs for each stage of its message, in sending order."""
        return (self.partitions(i),)

    def stage_sizes(self, l: int) -> tuple[int, ...]:
        """Floats in each stage of a message, for a gradient of length l."""
        return (self.message_size(l),)

    def encode_stage(self, i: int, stage: int, partials: Mapping[int, np.ndarray]) -> np.ndarray:
        """One stage of worker i's message; ``partials`` covers ``stage_partitions(i)[stage]``.

        The stages of a worker, concatenated, are its :meth:`encode` message.
        """
        if stage != 0:
            raise ValueError(f"{self.scheme} messages have a single stage (got stage {stage})")
        return self.encode(i, partials)

    def stage_scales(self, i: int, stage: int) -> dict[int, float] | None:
        """Stage ``stage`` of worker i's message as ``{j: c_j}`` when it is ``sum_j c_j g_j`` over
        ``stage_partitions(i)[stage]`` (a message as long as a gradient); None when it is no such
        sum (the message needs :meth:`encode_stage`). A worker then adds each partition's gradient
        into its message with its coefficient, without a gradient per partition or an encoding
        pass (``coded.ml.models.Model.accumulate``)."""
        self._check_worker(i)
        return None

    def decodable(self, workers: Iterable[int]) -> bool:
        """Whether the messages of ``workers`` give the exact sum (lwpd: whether its estimate is exact)."""
        return self._decodable(frozenset(self._check_worker(w) for w in workers))

    def decode(self, messages: Mapping[int, np.ndarray], length: int | None = None,
               out: np.ndarray | None = None) -> np.ndarray:
        """Sum of all partial gradients from the messages of some workers.

        Parameters
        ----------
        messages : mapping of int to (L,) ndarray
            Worker id to its message; all equally long.
        length : int, optional
            Gradient length l, to strip the padding some codes add; default: keep it.
        out : (gradient_size(L),) ndarray of float64, optional
            Where the sum is written where the code can (a caller's accumulator, reused round
            after round); the result is what is returned, in ``out`` or not.

        Returns
        -------
        gradient : (l,) ndarray of float64

        Raises
        ------
        NotDecodableError
            When these workers cannot give the exact sum.
        IllConditionedError
            When they can in exact arithmetic but not accurately in float64.
        """
        if not messages:
            raise NotDecodableError("no messages to decode")
        arrays = {self._check_worker(w): np.asarray(m) for w, m in messages.items()}
        self._check_messages(arrays)
        if not self._decodable(frozenset(arrays)):
            raise NotDecodableError(
                f"{self.scheme} (n={self.n}, s={self.s}) cannot decode the exact gradient from "
                f"workers {sorted(arrays)}: {self._requirement()}"
            )
        result = self._decode(arrays, out)
        return result if length is None else result[: check_int("length", length, 1)]

    # --- checking replies -------------------------------------------------------------------------

    @property
    def checkable(self) -> bool:
        """Whether the code has redundancy to check replies with (exact linear codes with s >= 1).

        Codes without it (uncoded, ignore_stragglers, lwpd, kasync) only catch non-finite messages.
        """
        return self._consistency() is not None

    def surplus(self, workers: Iterable[int]) -> int:
        """Replies beyond decoding: the largest r such that ``workers`` without any r of them
        still decode; -1 when ``workers`` do not decode.

        Checking needs a surplus of 1 (one more reply than decoding); locating e wrong replies
        needs e + 1 (any n - s + 1 + e replies of an s-robust code).

        >>> from coded.codes import gradient_code
        >>> gradient_code("cyclic", n=6, s=2).surplus(range(6))
        2
        """
        found = frozenset(self._check_worker(w) for w in workers)
        return self._surplus(found) if self._decodable(found) else -1

    def decode_checked(self, messages: Mapping[int, np.ndarray], length: int | None = None, *,
                       max_errors: int | None = None, tolerance: float = DEFAULT_TOLERANCE,
                       out: np.ndarray | None = None) -> CheckedGradient:
        """Decode and check against the code's redundancy; locate and leave out wrong messages.

        Non-finite messages are always wrong and left out. The rest must be consistent with the
        code: with one wrong message among the messages used, the returned gradient is within
        ``tolerance`` x (median message 2-norm) of the exact sum, whatever the wrong values
        (:mod:`coded.codes.verify`); otherwise the wrong ones are located (up to ``max_errors``,
        default: as many as the surplus allows) and decoded around.

        Parameters
        ----------
        messages : mapping of int to (L,) ndarray
            As for :meth:`decode`; for checking, the workers need ``surplus >= 1``.
        length : int, optional
            Gradient length l, to strip padding.
        out : ndarray, optional
            As for :meth:`decode`.
        max_errors : int, optional
            Locate at most this many wrong finite messages.
        tolerance : float
            Relative bound on what one wrong message may change unnoticed.

        Returns
        -------
        CheckedGradient

        Raises
        ------
        NotDecodableError
            Too few (finite) messages to decode, or (checkable codes) to check: wait for more.
        DecodingFailure
            Wrong messages detected that cannot be located within ``max_errors``.
        """
        if not messages:
            raise NotDecodableError("no messages to decode")
        arrays = {self._check_worker(w): np.asarray(m) for w, m in messages.items()}
        self._check_messages(arrays)
        broken = tuple(sorted(w for w, a in arrays.items() if not finite(a)))
        clean = {w: a for w, a in arrays.items() if w not in broken}
        checker = self._consistency()
        if checker is None:
            if not clean:
                raise NotDecodableError(f"every message is non-finite (workers {list(broken)})")
            return CheckedGradient(self.decode(clean, length, out), broken, False, tuple(sorted(clean)))
        field = {w: self._in_field(np.ascontiguousarray(a, dtype=np.float64)) for w, a in clean.items()}
        verdict = checker.check(field, max_errors, tolerance)
        used = verdict.weights.workers
        result = self._combine(verdict.weights, [field[w] for w in used], out)
        result = result if length is None else result[: check_int("length", length, 1)]
        return CheckedGradient(result, tuple(sorted(broken + verdict.wrong)), True, used, verdict.misfit,
                               verdict.scale)

    def rounding_error(self, eps: float) -> float:
        """Estimated worst relative decode error (to the largest partial-gradient entry) when every
        message carries relative rounding ``eps``: float32 on the wire is ``eps = 2**-24``. Without
        decode weights to bound it, the sum of the k partials each rounded once: ``k * eps``."""
        return self.k * eps

    def holders(self, j: int) -> tuple[int, ...]:
        """Workers that hold partition j."""
        return tuple(i for i in range(self.n) if j in self.partitions(i))

    def describe(self) -> dict[str, Any]:
        """Parameters and costs of this code, for documentation and planning."""
        l = 840_840  # divisible by every small packing factor, so sizes come out exact
        held = max(len(self.partitions(i)) for i in range(self.n))
        return {
            "scheme": self.scheme,
            "n": self.n,
            "s": self.s,
            "k": self.k,
            "data_per_worker": held / self.k,
            "floats_per_worker": self.message_size(l) / l,
            "waits_for": self.n - self.s,
            "exact": self.exact,
        }

    # --- hooks ------------------------------------------------------------------------------------

    @abstractmethod
    def _encode(self, i: int, partials: Sequence[np.ndarray]) -> np.ndarray:
        """partials: d contiguous float64 arrays of shape (l,) in ``partitions(i)`` order -> message."""

    def _decodable(self, workers: frozenset[int]) -> bool:
        return len(workers) >= self.n - self.s

    def _requirement(self) -> str:
        return f"it needs any {self.n - self.s} of the {self.n} workers"

    def _surplus(self, workers: frozenset[int]) -> int:
        """Surplus of a decodable set (s-robust codes: every n - s decode)."""
        return len(workers) - (self.n - self.s)

    @abstractmethod
    def _decode(self, messages: dict[int, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        """Decode a decodable set of validated messages (into ``out`` where the code can)."""

    def _consistency(self) -> ConsistencyCheck | None:
        """The check of replies against the code's redundancy; None without redundancy."""
        return None

    def _in_field(self, message: np.ndarray) -> np.ndarray:
        """A float64 message as the code's symbols (complex codes: a complex view)."""
        return message

    def _combine(self, weights: DecodeWeights, symbols: Sequence[np.ndarray],
                 out: np.ndarray | None = None) -> np.ndarray:
        """The gradient from decode weights and the messages (as symbols) of ``weights.workers``
        (into ``out`` where the code can)."""
        raise NotImplementedError(f"{self.scheme} is not a linear code")

    # --- helpers ----------------------------------------------------------------------------------

    def _check_worker(self, i: Any) -> int:
        if type(i) is int and 0 <= i < self.n:  # the common case, asked many times per round
            return i
        i = check_int("worker id", i)
        if not 0 <= i < self.n:
            raise ValueError(f"worker id must be in 0..{self.n - 1} (got {i})")
        return i

    def _check_messages(self, arrays: Mapping[int, np.ndarray]) -> None:
        lengths = {a.shape for a in arrays.values()}
        if len(lengths) != 1 or next(iter(lengths)) == () or len(next(iter(lengths))) != 1:
            raise ValueError(f"messages must be 1-D and equally long (got shapes {sorted(lengths)})")
        if not all(np.issubdtype(a.dtype, np.floating) for a in arrays.values()):
            raise TypeError("messages must be float arrays")
