"""A worker's share of one job: what it holds, how it computes, its faults.

A round sends one or more messages, each a :class:`Unit`: a stage of a whole reply, or a streamed
piece. Every share says which unit comes next given what the master said to the round (its
:class:`coded.worker.streams.Orders`) and computes a unit into an array it is given, so that one
driver (:meth:`coded.worker.service.WorkerService.compute_round`) computes every kind of round. A
:class:`StagedShare` sends its stages in order: :class:`GradientShare` (data partitions, a row of
a gradient code), and a matrix job's encoded blocks (coded.worker.matrices). A
:class:`StreamedShare` (data partitions, a streamed layout) sends its own partition's pieces,
then the pieces the master asks for, skipping those it has. Both gradient kinds hold their data
and model as a :class:`PartitionShare`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from coded.codes import GradientCode
from coded.codes.streaming import StreamLayout
from coded.jobs.faults import Slowdowns, SoftErrors, Stragglers
from coded.jobs.spec import GradientJob, MatrixJob
from coded.jobs.uploads import read_partitions
from coded.ml.data import batch_rows
from coded.ml.data.sparse import nonzeros_per_row, row_slice
from coded.ml.models import Model, draw_seed
from coded.worker.streams import Abandon, Orders

__all__ = ["Cancelled", "Flag", "GradientShare", "PartitionShare", "Share", "StagedShare", "StreamedShare", "Unit"]


class Cancelled(Exception):
    """The master cancelled the call while this worker was computing."""


class Flag(Protocol):
    """What a computation polls between pieces of work (coded.worker.streams.StopFlag, or more)."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Unit:
    """One message of a round: stage ``number`` of a whole reply, or streamed piece ``number``
    (``piece`` True). ``shape`` is the message's (computed in float64), ``work`` about how many
    multiply-adds it takes (math.inf: unknown, assume a lot), ``delay`` the share of the round's
    injected delay waited before it."""

    number: int
    shape: tuple[int, ...]
    work: float
    delay: float
    piece: bool = False


@dataclass
class Share(ABC):
    """Position ``index`` of a job on this worker."""

    spec: GradientJob | MatrixJob
    index: int
    stragglers: Stragglers
    soft_errors: SoftErrors
    slowdowns: Slowdowns

    @property
    @abstractmethod
    def ready(self) -> bool:
        """Whether everything the worker needs has arrived."""

    @functools.cached_property
    def plain(self) -> bool:
        """Whether this position computes as it is: no slowdown, no busy threads and no soft
        errors apply to it, so its rounds skip asking for them (a round's code runs with the
        caches cold, and every question asked costs microseconds then; issue 23)."""
        return not (self.stragglers.busy_threads(self.index) or self.slowdowns.applies(self.index)
                    or self.soft_errors.applies(self.index))

    @functools.cached_property
    def wire(self) -> np.dtype:
        """The dtype its messages travel in (the job spec's rule)."""
        return self.spec.wire_dtype

    def slowed(self, iteration: int) -> bool:
        """Whether this position's round of ``iteration`` may take longer than its work and its
        injected delay: busy threads spin beside it, or it is slowed down."""
        return not self.plain and (self.stragglers.busy_threads(self.index) > 0
                                   or self.slowdowns.factor(iteration, self.index) > 1)

    def message_partitions(self, message: int) -> tuple[int, ...] | None:
        """The data partitions message ``message`` (a stage, or a streamed piece) combines; None:
        the job has no data partitions (what ``faults.soft_errors.partition`` filters on)."""
        return None

    @abstractmethod
    def check_input(self, params: np.ndarray) -> None:
        """Raise ValueError when the call's input does not fit the job."""

    @abstractmethod
    def accept(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Store uploaded arrays; raise ValueError for any that do not belong."""

    @property
    def waited_for(self) -> bool:
        """Whether the master waits for every round of this position: no reply of it is ever spare,
        so no stop cuts a round short (the job's code tolerates no straggler)."""
        return False

    # --- a round's units -----------------------------------------------------------------------------

    @abstractmethod
    def next_unit(self, orders: Orders) -> Unit | None:
        """The round's next message to compute; None when none is due now (a streamed round
        waits for the master's next WANT, unless :meth:`over`)."""

    @abstractmethod
    def over(self, orders: Orders) -> bool:
        """Whether the round has nothing left that it could send."""

    @abstractmethod
    def compute(self, unit: Unit, iteration: int, params: np.ndarray, stop: Flag, out: np.ndarray) -> np.ndarray:
        """The message of ``unit`` at ``iteration``, written into ``out`` (float64 of
        ``unit.shape``, whatever it held) and returned. On any thread; raises Cancelled between
        pieces of work once ``stop`` is set."""

    def stop_flag(self, unit: Unit, orders: Orders) -> Flag:
        """What the computation of ``unit`` polls: the round's stop (a streamed piece: or the
        master having it)."""
        return orders.cancel

    def computed(self, unit: Unit, orders: Orders) -> bool:
        """``unit`` was computed; whether it is still to be sent (not if the master has it)."""
        return True


@dataclass
class StagedShare(Share):
    """A position whose reply is one message per stage, sent in order."""

    @abstractmethod
    def units(self) -> tuple[Unit, ...]:
        """The stages of a round, in order (the injected delay is spread over them by their work)."""

    def next_unit(self, orders: Orders) -> Unit | None:
        units = self.units()
        return units[orders.sent] if orders.sent < len(units) else None

    def over(self, orders: Orders) -> bool:
        return orders.sent >= len(self.units())


@dataclass
class PartitionShare(Share):
    """A worker's partitions of a gradient job and its model: what both ways of replying compute
    from. Which partitions it holds is the job's code's or, streamed, its layout's to say
    (``GradientJob.coding``)."""

    spec: GradientJob
    model: Model = field(kw_only=True)
    rows: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # partition -> (x, y)

    @functools.cached_property
    def partitions(self) -> tuple[int, ...]:
        """The partitions this position holds, ascending (asked at every round: computed once)."""
        return self.spec.coding.partitions(self.index)

    @property
    def k(self) -> int:
        """Partitions of the data."""
        return self.spec.coding.k

    @property
    def ready(self) -> bool:
        return len(self.rows) == len(self.partitions)  # accept() keeps only held partitions

    @functools.cached_property
    def _density(self) -> float:
        """The share of features stored per sample (1 for dense data), over the partitions held
        (known once they have all arrived: work is asked only then)."""
        x = [self.rows[j][0] for j in self.partitions]
        rows = sum(part.shape[0] for part in x)
        return sum(nonzeros_per_row(part) * part.shape[0] for part in x) / max(rows, 1) / self.model.features

    def _samples(self, j: int) -> int:
        batch = self.spec.optimizer.batch
        return len(self.rows[j][1]) if batch is None else batch

    def check_input(self, params: np.ndarray) -> None:
        if params.shape != (self.model.size,) or params.dtype != np.float64:
            raise ValueError(f"params must be float64 of shape ({self.model.size},), got {params.dtype} {params.shape}")

    def _rows(self, j: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """Partition j's samples of this iteration: all, or the mini-batch every holder of j draws."""
        x, y = self.rows[j]
        batch = self.spec.optimizer.batch
        if batch is not None:
            rows = batch_rows(len(y), batch, self.spec.seed, iteration, j)
            x, y = x[rows], y[rows]
        return x, y

    def _add(self, params: np.ndarray, rows: tuple[np.ndarray, np.ndarray], where: tuple[int, int, int],
             stop: Flag, out: np.ndarray, scale: float = 1.0) -> None:
        """Add ``scale`` times the partial gradient (and loss, last) of samples ``rows`` = (x, y) to
        ``out``; they start at row ``first`` of partition j's rows at ``iteration`` (``where`` =
        (iteration, j, first)). Cancelled between chunks once ``stop`` is set. Each chunk's random
        layers draw from the seed of its first row, the same on every holder."""
        x, y = rows
        iteration, j, first = where
        model = self.model
        chunk = model.chunk
        for start in range(0, max(len(y), 1), chunk):
            if stop.is_set():
                raise Cancelled
            seed = draw_seed(self.spec.seed, iteration, j, first + start) if model.seeded else None
            model.accumulate(params, row_slice(x, start, start + chunk), y[start : start + chunk], out, scale, seed,
                             prepared=True)

    def accept(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Partitions by their upload names (:mod:`coded.jobs.uploads`)."""
        self.hold(read_partitions(arrays, self.partitions, self.model.features))

    def hold(self, rows: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Keep these partitions' rows, checked and converted once by the model (every round then
        computes on them unchecked).

        Raises
        ------
        ValueError, TypeError
            Rows the model does not take (a label out of range, another number of features).
        """
        for j, (x, y) in rows.items():
            try:
                self.rows[j] = self.model.prepare(x, y)
            except (TypeError, ValueError) as error:
                raise ValueError(f"partition {j}: {error}") from None


@dataclass
class GradientShare(PartitionShare, StagedShare):
    """A worker's partitions of a gradient job replying whole: one message per stage, the partial
    gradients of the stage's partitions encoded with the job's code. Where a stage is a plain
    combination ``sum_j c_j g_j`` (Tandon et al.'s codes, uncoded: ``GradientCode.stage_scales``),
    each partition is added into the message with its coefficient: no gradient per partition, no
    encoding pass, nothing copied (the identity of uncoded included)."""

    code: GradientCode = field(kw_only=True)

    @functools.cached_property
    def waited_for(self) -> bool:
        return self.code.s == 0 and not self.code.asynchronous

    @functools.cached_property
    def _stages(self) -> tuple[tuple[tuple[int, ...], dict[int, float] | None], ...]:
        """Each stage's partitions and, when it is a combination of them, their coefficients."""
        return tuple((partitions, self.code.stage_scales(self.index, stage))
                     for stage, partitions in enumerate(self.code.stage_partitions(self.index)))

    def units(self) -> tuple[Unit, ...]:
        return self._units

    @functools.cached_property
    def _units(self) -> tuple[Unit, ...]:  # asked once the data have arrived (their density)
        sizes = self.code.stage_sizes(self.model.size + 1)
        total = sum(len(partitions) for partitions, _ in self._stages) or 1
        return tuple(Unit(stage, (sizes[stage],),
                          self.model.work(sum(self._samples(j) for j in partitions), self._density),
                          len(partitions) / total)
                     for stage, (partitions, _) in enumerate(self._stages))

    def message_partitions(self, message: int) -> tuple[int, ...]:
        """Those the stage's coded message combines."""
        return self._stages[message][0]

    def compute(self, unit: Unit, iteration: int, params: np.ndarray, stop: Flag, out: np.ndarray) -> np.ndarray:
        partitions, scales = self._stages[unit.number]
        if scales is not None:
            out.fill(0.0)
            for j in partitions:
                self._add(params, self._rows(j, iteration), (iteration, j, 0), stop, out, scales[j])
            return out
        partials = {}
        for j in partitions:
            partials[j] = np.zeros(self.model.size + 1)
            self._add(params, self._rows(j, iteration), (iteration, j, 0), stop, partials[j])
        out[...] = self.code.encode_stage(self.index, unit.number, partials)
        return out


@dataclass
class StreamedShare(PartitionShare):
    """A worker's partitions of a gradient job replying streamed: each piece's partial gradient
    (a slice of a partition's rows) as it is computed, pieces laid out by the job's layout
    (coded.codes.streaming): its own partition's first, then those the master asks for."""

    layout: StreamLayout = field(kw_only=True)

    def piece_work(self) -> float:
        """About how many multiply-adds one streamed piece takes."""
        return self.model.work(-(-max(self._samples(j) for j in self.partitions) // self.layout.chunks),
                               self._density)

    def message_partitions(self, message: int) -> tuple[int, ...]:
        """The piece's own partition."""
        return (self.layout.partition_of(message),)

    def next_unit(self, orders: Orders) -> Unit | None:
        if not orders.held:  # the round begins: its own partition first
            held = self.layout.pieces_of(self.index)
            orders.begin(held[: self.layout.chunks], held)
        piece = orders.next_piece()
        if piece is None:
            return None
        return Unit(piece, (self.model.size + 1,), self._piece_work, 1.0 if orders.sent == 0 else 0.0, piece=True)

    @functools.cached_property
    def _piece_work(self) -> float:  # asked once the data have arrived (their density)
        return self.piece_work()

    def over(self, orders: Orders) -> bool:
        return orders.exhausted()

    def stop_flag(self, unit: Unit, orders: Orders) -> Flag:
        return Abandon(orders.cancel, orders.skip, unit.number)

    def computed(self, unit: Unit, orders: Orders) -> bool:
        orders.done.add(unit.number)
        return unit.number not in orders.skip

    def compute(self, unit: Unit, iteration: int, params: np.ndarray, stop: Flag, out: np.ndarray) -> np.ndarray:
        """The partial gradient (and loss) of one streamed piece: a slice of its partition's rows
        (of the iteration's mini-batch), the same slice on every holder."""
        piece = unit.number
        j = self.layout.partition_of(piece)
        x, y = self._rows(j, iteration)
        chunk, chunks = self.layout.chunk_of(piece), self.layout.chunks
        rows = slice(len(y) * chunk // chunks, len(y) * (chunk + 1) // chunks)  # exact, unlike a float grid
        out.fill(0.0)
        self._add(params, (row_slice(x, rows.start, rows.stop), y[rows]), (iteration, j, rows.start), stop, out)
        return out
