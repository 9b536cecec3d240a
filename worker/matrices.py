"""A worker's share of a matrix job: encoded blocks it multiplies at every round (a
:class:`coded.worker.jobs.StagedShare` of one stage)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from coded.codes import MatmulCode
from coded.jobs.spec import MatmulJob, MatrixJob, MatvecJob
from coded.worker.jobs import Cancelled, Flag, StagedShare, Unit

__all__ = ["MATRIX_SHARES", "MatmulShare", "MatvecShare"]

#: rows of A_p multiplied between two checks for cancellation: a cancelled call frees its core
#: within a few milliseconds (gradients: the model's ``chunk`` samples)
ROWS_PER_CHECK = 256


@dataclass
class MatmulShare(StagedShare):
    """Encoded blocks A_p and B_p of a matmul job: each call multiplies them."""

    spec: MatrixJob
    code: MatmulCode = field(kw_only=True)
    blocks: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return "a" in self.blocks and "b" in self.blocks

    def units(self) -> tuple[Unit, ...]:
        return (Unit(0, self._shape(), self._work(), 1.0),)

    def _shape(self) -> tuple[int, ...]:
        """The product block's shape, A_p x B_p."""
        return (self.blocks["a"].shape[0], self.blocks["b"].shape[1])

    def _work(self) -> float:
        rows, inner = self.blocks["a"].shape
        return float(rows * inner * self.blocks["b"].shape[1])

    def check_input(self, params: np.ndarray) -> None:
        """A matmul call brings no input (an empty array)."""

    def _right(self, params: np.ndarray) -> np.ndarray:
        """What A_p multiplies in this call."""
        return self.blocks["b"]

    def compute(self, unit: Unit, iteration: int, params: np.ndarray, stop: Flag, out: np.ndarray) -> np.ndarray:
        a = self.blocks["a"]
        right = self._right(params)
        for start in range(0, a.shape[0], ROWS_PER_CHECK):
            if stop.is_set():
                raise Cancelled
            np.matmul(a[start : start + ROWS_PER_CHECK], right, out=out[start : start + ROWS_PER_CHECK])
        return out

    def accept(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Blocks named ``a`` and ``b`` (float64 matrices whose inner dimensions agree)."""
        for name, array in arrays.items():
            if name not in ("a", "b") or array.ndim != 2 or array.dtype != np.float64:
                raise ValueError(f"upload {name!r} is not a float64 matrix named a or b")
        self.blocks.update({name: np.ascontiguousarray(array) for name, array in arrays.items()})
        if "a" in self.blocks and "b" in self.blocks and self.blocks["a"].shape[1] != self.blocks["b"].shape[0]:
            raise ValueError(f"blocks a {self.blocks['a'].shape} and b {self.blocks['b'].shape} do not multiply")


@dataclass
class MatvecShare(MatmulShare):
    """The encoded block A_p of a matvec job: each call brings the vector x, encoded here."""

    @property
    def ready(self) -> bool:
        return "a" in self.blocks

    def _shape(self) -> tuple[int, ...]:
        """A_p times its encoding of the vector."""
        return (self.blocks["a"].shape[0], *self._right_shape)

    @functools.cached_property
    def _right_shape(self) -> tuple[int, ...]:
        columns = self.blocks["a"].shape[1] * self.code.n
        return self.code.encode_right(np.zeros(columns), [self.index])[0].shape[1:]

    def _work(self) -> float:
        rows, inner = self.blocks["a"].shape
        return float(rows * inner)

    def check_input(self, params: np.ndarray) -> None:
        columns = self.blocks["a"].shape[1] * self.code.n
        if params.shape != (columns,) or params.dtype != np.float64:
            raise ValueError(f"the vector must be float64 of shape ({columns},), got {params.dtype} {params.shape}")

    def _right(self, params: np.ndarray) -> np.ndarray:
        return self.code.encode_right(params, [self.index])[0]


#: the share of each kind of matrix job
MATRIX_SHARES: dict[type[MatrixJob], type[MatmulShare]] = {MatmulJob: MatmulShare, MatvecJob: MatvecShare}
