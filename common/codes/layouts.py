"""CodeNet's 2-D coded layout of a weight matrix (spec/003-004 part A, ICML version).

W (N_out x N_in) is split into m x n blocks W_ij. Every block-column is extended by t+1 parity
block-rows with a vertical (m+t+1, m) systematic MDS code, every block-row by t+1 parity
block-columns with a horizontal (n+t+1, n) code; there are no corner blocks, so there are
P = mn + (m+n)(t+1) positions, one block each.

- Feedforward (O1) uses the positions of block-columns j < n: position (i, j) computes
  ``W_ij x_j``; for each j the m+t+1 products are a vertical codeword, so up to t wrong products
  per block-column are located and corrected, and more are detected.
- Backprop (O2) uses the positions of block-rows i < m: ``W_ij^T delta_i``; for each i the n+t+1
  products are a horizontal codeword.
- The update (O3) keeps every block an exact codeword by encoding only vectors:
  ``W_ij += lr * delta~_i x~_j^T`` with delta~ (x~) the vertical (horizontal) encoding of the
  pieces of delta (x). Matrices are encoded once, at the start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from coded.base.checks import check_int

from .errors import DecodingFailure
from .mds import SystematicMDS

__all__ = ["CodeNetLayout", "Position", "ReplicatedLayout", "UncodedLayout", "make_layout"]

Position = tuple[int, ...]  # (i, j): block-row and block-column; (i, j, r) for replica r


class CodeNetLayout:
    """Positions, encoding, decoding and coded updates of CodeNet(m, n) with tolerance t.

    Parameters
    ----------
    m, n : int
        Block-rows and block-columns of every weight matrix.
    t : int
        Wrong products corrected per block-column (feedforward) or block-row (backprop).
    """

    def __init__(self, m: int, n: int, t: int) -> None:
        self.m = check_int("m", m, 1)
        self.n = check_int("n", n, 1)
        self.t = check_int("t", t, 0)
        self.vertical = SystematicMDS(self.m, self.m + self.t + 1)
        self.horizontal = SystematicMDS(self.n, self.n + self.t + 1)
        rows, cols = self.m + self.t + 1, self.n + self.t + 1
        self.positions: tuple[Position, ...] = tuple(
            (i, j) for i in range(rows) for j in range(cols) if i < self.m or j < self.n)
        self.forward = tuple(p for p in self.positions if p[1] < self.n)
        self.backward = tuple(p for p in self.positions if p[0] < self.m)

    @property
    def size(self) -> int:
        """Positions (peers): mn + (m+n)(t+1)."""
        return len(self.positions)

    def __repr__(self) -> str:
        return f"CodeNetLayout(m={self.m}, n={self.n}, t={self.t})"

    # --- vectors -----------------------------------------------------------------------------------

    def row_piece(self, vector: np.ndarray, i: int) -> np.ndarray:
        """Piece i of a vector of output units (vertical encoding for parity rows i >= m).

        vector : (N_out,) or (N_out, B) -> (N_out/m, ...) ndarray
        """
        pieces = np.split(np.asarray(vector, dtype=np.float64), self.m)
        return pieces[i] if i < self.m else np.tensordot(self.vertical.generator[i], np.stack(pieces), axes=1)

    def column_piece(self, vector: np.ndarray, j: int) -> np.ndarray:
        """Piece j of a vector of input units (horizontal encoding for parity columns j >= n)."""
        pieces = np.split(np.asarray(vector, dtype=np.float64), self.n)
        return pieces[j] if j < self.n else np.tensordot(self.horizontal.generator[j], np.stack(pieces), axes=1)

    # --- matrices ----------------------------------------------------------------------------------

    def encode(self, weights: np.ndarray) -> dict[Position, np.ndarray]:
        """Every position's block of W (N_out x N_in, divisible by m and n); done once."""
        weights = np.asarray(weights, dtype=np.float64)
        if weights.ndim != 2 or weights.shape[0] % self.m or weights.shape[1] % self.n:
            raise ValueError(f"W of shape {weights.shape} does not split into {self.m} x {self.n} blocks")
        grid = np.stack([np.stack(np.split(row, self.n, axis=1)) for row in np.split(weights, self.m)])
        blocks: dict[Position, np.ndarray] = {}
        for i, j in self.positions:
            if i < self.m and j < self.n:
                blocks[(i, j)] = grid[i, j].copy()
            elif j < self.n:
                blocks[(i, j)] = np.tensordot(self.vertical.generator[i], grid[:, j], axes=1)
            else:
                blocks[(i, j)] = np.tensordot(self.horizontal.generator[j], grid[i], axes=1)
        return blocks

    def assemble(self, blocks: Mapping[Position, np.ndarray]) -> np.ndarray:
        """W from its systematic blocks."""
        return np.block([[blocks[(i, j)] for j in range(self.n)] for i in range(self.m)])

    def update(self, position: Position, block: np.ndarray, delta: np.ndarray, x: np.ndarray, lr: float) -> np.ndarray:
        """``block + lr * delta~_i @ x~_j.T``: the coded O3 step of one position.

        delta : (N_out,) or (N_out, B); x : (N_in,) or (N_in, B). A batch sums its B outer products.
        """
        i, j = position
        d, v = self.row_piece(delta, i), self.column_piece(x, j)
        outer = np.outer(d, v) if d.ndim == 1 else d @ v.T
        return block + lr * outer

    def repair(self, position: Position, others: Mapping[Position, np.ndarray]) -> np.ndarray:
        """Rebuild one position's block from the other blocks of its block-column (or block-row).

        The other blocks are decoded with the column's (row's) code, so a wrong one among them is
        located and left out as long as the code can correct it.

        Raises
        ------
        DecodingFailure
            When the other blocks are too few or too many of them are wrong.
        """
        i, j = position
        line: list[Position]
        if j < self.n:
            code, line = self.vertical, [(r, j) for r in range(self.m + self.t + 1)]
        else:
            code, line = self.horizontal, [(i, c) for c in range(self.n + self.t + 1)]
        erased = [k for k, p in enumerate(line) if p == position or p not in others]
        if len(line) - len(erased) < code.k:
            raise DecodingFailure(
                f"position {position}: only {len(line) - len(erased)} other blocks to rebuild it from")
        shape = next(others[p] for p in line if p in others and p != position).shape
        stack = np.stack([others[p] if p in others and p != position else np.zeros(shape) for p in line])
        data, _ = code.decode(stack, erased=erased)
        return np.tensordot(code.generator[line.index(position)], data, axes=1)

    def decode_blocks(self, blocks: Mapping[Position, np.ndarray]) -> tuple[np.ndarray, tuple[Position, ...]]:
        """W from the blocks of the feedforward positions, locating wrong blocks column by column.

        Raises
        ------
        DecodingFailure
            When a block-column has more wrong blocks than the code corrects.
        """
        rows = self.m + self.t + 1
        columns, wrong = [], []
        for j in range(self.n):
            present = [i for i in range(rows) if (i, j) in blocks]
            shape = blocks[(present[0], j)].shape
            stack = np.stack([blocks[(i, j)] if (i, j) in blocks else np.zeros(shape) for i in range(rows)])
            data, bad = self.vertical.decode(stack, erased=[i for i in range(rows) if i not in present])
            columns.append(np.concatenate(list(data)))
            wrong += [(i, j) for i in bad]
        return np.concatenate(columns, axis=1), tuple(wrong)

    # --- decoding ----------------------------------------------------------------------------------

    def decode_forward(self, products: Mapping[Position, np.ndarray]) -> tuple[np.ndarray, tuple[Position, ...]]:
        """``W x`` from the products ``W_ij x_j`` of the feedforward positions.

        Returns
        -------
        s : (N_out, ...) ndarray
        wrong : tuple of positions whose products were wrong (located and corrected)

        Raises
        ------
        DecodingFailure
            More than t wrong (or missing + wrong beyond the code) in some block-column.
        """
        return _decoded_sum(self.vertical, products, self.n, self.m + self.t + 1, lambda j, i: (i, j))

    def decode_backward(self, products: Mapping[Position, np.ndarray]) -> tuple[np.ndarray, tuple[Position, ...]]:
        """``W^T delta`` from the products ``W_ij^T delta_i`` of the backprop positions."""
        return _decoded_sum(self.horizontal, products, self.m, self.n + self.t + 1, lambda i, j: (i, j))


def _decoded_sum(code: SystematicMDS, products: Mapping[Position, np.ndarray], lines: int, length: int,
                 at: Callable[[int, int], Position]) -> tuple[np.ndarray, tuple[Position, ...]]:
    """The sum over ``lines`` codewords of ``code`` of their decoded data, and the positions found
    wrong: codeword l is the ``length`` products at ``at(l, k)``, k < length, each (d,) or
    (d, b); a missing one is an erasure. The block-columns of the feedforward products (vertical
    codewords) and the block-rows of the backprop ones (horizontal codewords) alike.

    Raises
    ------
    DecodingFailure
        More wrong (or missing and wrong) products in some codeword than ``code`` corrects.
    """
    sums, wrong = None, []
    for line in range(lines):
        present = [k for k in range(length) if at(line, k) in products]
        shape = products[at(line, present[0])].shape
        word = np.stack([products[at(line, k)] if at(line, k) in products else np.zeros(shape)
                         for k in range(length)])
        data, bad = code.decode(word, erased=[k for k in range(length) if k not in present])
        wrong += [at(line, k) for k in bad]
        sums = data if sums is None else sums + data
    assert sums is not None  # m, n >= 1: at least one codeword
    return np.concatenate(list(sums)), tuple(wrong)


class UncodedLayout:
    """Plain model parallelism on mn positions: no redundancy, wrong products go unnoticed."""

    def __init__(self, m: int, n: int) -> None:
        self.m = check_int("m", m, 1)
        self.n = check_int("n", n, 1)
        self.t = 0
        self.positions: tuple[Position, ...] = tuple((i, j) for i in range(self.m) for j in range(self.n))
        self.forward = self.backward = self.positions

    @property
    def size(self) -> int:
        return len(self.positions)

    def row_piece(self, vector: np.ndarray, i: int) -> np.ndarray:
        return np.split(np.asarray(vector, dtype=np.float64), self.m)[i]

    def column_piece(self, vector: np.ndarray, j: int) -> np.ndarray:
        return np.split(np.asarray(vector, dtype=np.float64), self.n)[j]

    def encode(self, weights: np.ndarray) -> dict[Position, np.ndarray]:
        rows = np.split(np.asarray(weights, dtype=np.float64), self.m)
        return {(i, j): block.copy()
                for i, row in enumerate(rows) for j, block in enumerate(np.split(row, self.n, axis=1))}

    def assemble(self, blocks: Mapping[Position, np.ndarray]) -> np.ndarray:
        return np.block([[blocks[(i, j)] for j in range(self.n)] for i in range(self.m)])

    def update(self, position: Position, block: np.ndarray, delta: np.ndarray, x: np.ndarray, lr: float) -> np.ndarray:
        d, v = self.row_piece(delta, position[0]), self.column_piece(x, position[1])
        return block + lr * (np.outer(d, v) if d.ndim == 1 else d @ v.T)

    def decode_blocks(self, blocks: Mapping[Position, np.ndarray]) -> tuple[np.ndarray, tuple[Position, ...]]:
        """W from the blocks; nothing is checked (there is no redundancy).

        Raises
        ------
        DecodingFailure
            When a block is missing (a peer could not be reached).
        """
        return UncodedLayout.assemble(self, self._complete(blocks)), ()

    def _complete(self, blocks: Mapping[Position, np.ndarray]) -> Mapping[Position, np.ndarray]:
        missing = [(i, j) for i in range(self.m) for j in range(self.n) if (i, j) not in blocks]
        if missing:
            raise DecodingFailure(f"blocks {missing} are missing and nothing can replace them")
        return blocks

    def _sum(self, products: Mapping[Position, np.ndarray], outer: int, inner: int, key) -> np.ndarray:
        missing = [key(a, b) for a in range(outer) for b in range(inner) if key(a, b) not in products]
        if missing:
            raise DecodingFailure(f"products of {missing} are missing and nothing can replace them")
        return np.concatenate([sum(products[key(a, b)] for b in range(inner)) for a in range(outer)])

    def decode_forward(self, products: Mapping[Position, np.ndarray]) -> tuple[np.ndarray, tuple[Position, ...]]:
        return self._sum(products, self.m, self.n, lambda i, j: (i, j)), ()

    def decode_backward(self, products: Mapping[Position, np.ndarray]) -> tuple[np.ndarray, tuple[Position, ...]]:
        return self._sum(products, self.n, self.m, lambda j, i: (i, j)), ()


class ReplicatedLayout(UncodedLayout):
    """Two-way replication on 2mn positions (i, j, r): detects any wrong product by comparing
    the replicas, and cannot correct it (the caller rolls back)."""

    def __init__(self, m: int, n: int) -> None:
        super().__init__(m, n)
        self.positions = tuple((i, j, r) for r in range(2) for i in range(self.m) for j in range(self.n))
        self.forward = self.backward = self.positions

    def encode(self, weights: np.ndarray) -> dict[Position, np.ndarray]:
        plain = super().encode(weights)
        return {(i, j, r): block.copy() for (i, j), block in plain.items() for r in range(2)}

    def assemble(self, blocks: Mapping[Position, np.ndarray]) -> np.ndarray:
        return super().assemble({(i, j): blocks[(i, j, 0)] for i in range(self.m) for j in range(self.n)})

    def decode_blocks(self, blocks: Mapping) -> tuple[np.ndarray, tuple[Position, ...]]:
        """W from the blocks; replicas that disagree, or a block with no replica, are a DecodingFailure."""
        return UncodedLayout.decode_blocks(self, self._agreed(blocks))

    def _agreed(self, products: Mapping) -> dict[Position, np.ndarray]:
        agreed: dict[Position, np.ndarray] = {}
        disagree = []
        for i in range(self.m):
            for j in range(self.n):
                copies = [products[(i, j, r)] for r in range(2) if (i, j, r) in products]
                if len(copies) == 2 and not np.array_equal(copies[0], copies[1]):
                    disagree.append((i, j))
                elif copies:
                    agreed[(i, j)] = copies[0]
        if disagree:
            raise DecodingFailure(f"replicas disagree on blocks {disagree}: errors detected, not correctable")
        return agreed

    def decode_forward(self, products: Mapping) -> tuple[np.ndarray, tuple[Position, ...]]:
        return super().decode_forward(self._agreed(products))

    def decode_backward(self, products: Mapping) -> tuple[np.ndarray, tuple[Position, ...]]:
        return super().decode_backward(self._agreed(products))


def make_layout(strategy: str, m: int, n: int, t: int) -> CodeNetLayout | UncodedLayout | ReplicatedLayout:
    """The layout of a CodeNet job's strategy: ``codenet``, ``replication`` or ``uncoded``."""
    if strategy == "codenet":
        return CodeNetLayout(m, n, t)
    if strategy == "replication":
        return ReplicatedLayout(m, n)
    if strategy == "uncoded":
        return UncodedLayout(m, n)
    raise ValueError(f"strategy must be codenet, replication or uncoded (got {strategy!r})")


def expected_time(q: float, iterations: int, interval: int, tau_b: float, tau_f: float, tau_cpt: float) -> float:
    """Expected time of ``iterations`` iterations with a checkpoint every ``interval`` (spec/003-004 A4,
    the corrected renewal model of Theorem 2).

    Every attempt of an iteration costs ``tau_b`` and succeeds with probability q; a failure costs
    ``tau_f`` (retrieval) and restarts the segment at the last checkpoint; a checkpoint costing
    ``tau_cpt`` follows every ``interval`` consecutive successes. Per segment, attempts are
    ``(q^-I0 - 1) / (1 - q)`` and failures ``q^-I0 - 1`` on average.

    >>> round(expected_time(1.0, 100, 10, 1.0, 20.0, 30.0), 6)
    400.0
    """
    segments = iterations / interval
    if q >= 1.0:
        return segments * (tau_cpt + tau_b * interval)
    failures = q ** -interval - 1.0
    return segments * (tau_cpt + tau_b * failures / (1.0 - q) + tau_f * failures)


def best_expected_time(q: float, iterations: int, tau_b: float, tau_f: float, tau_cpt: float) -> tuple[float, int]:
    """``min`` over the checkpoint interval of :func:`expected_time`: (time, interval)."""
    return min((expected_time(q, iterations, i, tau_b, tau_f, tau_cpt), i) for i in range(1, iterations + 1))
