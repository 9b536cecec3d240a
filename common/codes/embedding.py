"""Rotation embeddings: matmul codes evaluated on the unit circle while every worker stays real.

A polynomial code evaluated at real points decodes by a real Vandermonde solve, whose condition
number grows exponentially with the recovery threshold R; on points spread over the unit circle it
grows only polynomially (Pan 2016). Evaluating at a complex point z = exp(i theta) would make every
worker store complex blocks and multiply complex matrices. Ramamoorthy & Tang ("Numerically stable
coded matrix computations via circulant and rotation matrix embeddings") replace z by the real
rotation ``Rot(theta) = [[cos, -sin], [sin, cos]]``, which acts on pairs of sub-blocks as z acts on
complex numbers. We use it on up to three axes:

- **rows** of each A block are split into halves (x = 0, 1); worker p's A_p mixes them by
  ``Rot(alpha(i) theta_p)``. The rows of the result then carry a complex structure: the pair of
  row halves ``(top, bottom)`` is the complex ``top + i bottom``, and the rotation multiplies it by
  ``z^alpha``;
- **inner** columns of A blocks and rows of B blocks (only when n > 1): A_ij is rotated by
  ``Rot(j theta)`` on the right and B_jk by ``Rot(-j theta)`` on the left, so the product of the
  pieces of A_ij and B_j'k is rotated by ``Rot((j - j') theta) = cos * I + sin * J``. For j = j'
  that is the identity: the sum over j is the true product block, with no trace of theta; the
  pairs j != j' give "garbage" terms in ``z^(j-j')`` and ``z^-(j-j')``;
- **columns** of each B block (only when d > 1): B_jk is rotated by ``Rot(delta(k) theta)`` on
  the right. A real 2x2 block matrix M is the sum of a complex-linear part C(u) (``[[P, -Q],
  [Q, P]]``, u = P + iQ) and an anti-linear part C(v) K (``[[S, T], [T, -S]]``, v = S + iT),
  and ``Rot(a) M Rot(b)`` multiplies u by ``z^(a+b)`` and v by ``z^(a-b)``.

So worker p's real result A_p @ B_p gives, per entry, one or two complex numbers (its "message",
no larger than the result) that are values at z_p of Laurent polynomials whose coefficients at
known exponents are the (complex-packed) product blocks C_ik; both polynomials have the same R
consecutive exponents when ``delta(k) = m w (k - (d-1)/2)`` is centred. Decoding is then one
unit-circle Vandermonde solve per responder set, and every worker keeps the storage, the output
size and the real floating-point work of the real-point code. Blocks must have an even number of
rows (and of inner columns when n > 1, of B columns when d > 1): those are the halves.

Pure math; :class:`coded.codes.matmul.MatmulCode` holds the one decode path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .combine import Emit, blocked

__all__ = ["REAL", "Embedding", "unit_circle_code"]


@dataclass(frozen=True)
class Embedding:
    """How blocks split into sub-blocks, and how a worker's real result becomes decoder symbols.

    A result of shape (rows * h, cols * g) (or (rows * h,) for a vector) is read as h "unit rows"
    of ``unit`` message entries each: entry (x, y) of a unit row is

    - real points (rows = 1): the result's entry (x, y) itself;
    - rows only: ``top[x, y] + i bottom[x, y]``, the row halves as one complex number;
    - rows and columns: the complex-linear part ``(R00 + R11) + i (R10 - R01)`` of the 2 x 2 block
      at (x, y) (y < g), then the anti-linear part ``(R00 - R11) + i (R01 + R10)`` (y >= g), both
      twice their value (``weight_scale`` halves the decode weights instead).

    Attributes
    ----------
    rows, inner, cols : {1, 2}
        Sub-blocks per A block's rows, per inner dimension, per B block's columns (2: halves
        mixed by rotations).
    """

    rows: int = 1
    inner: int = 1
    cols: int = 1

    @property
    def dtype(self) -> np.dtype:
        """Type of the message entries: complex when the rows carry the rotation's complex structure."""
        return np.dtype(np.complex128 if self.rows == 2 else np.float64)

    @property
    def weight_scale(self) -> float:
        return 0.5 if self.cols == 2 else 1.0

    def units(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """(unit rows, entries per unit row) of the messages of results of ``shape``."""
        columns = shape[1] if len(shape) == 2 else 1
        return shape[0] // self.rows, columns

    def gather(self, result: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        """Write the message entries of unit rows ``start..stop-1`` of ``result`` into ``out``.

        Parameters
        ----------
        result : (rows * h, c) ndarray of float64 (vectors reshaped to one column)
        out : ((stop - start) * c,) ndarray of ``dtype``
        """
        if self.rows == 1:
            out[...] = result[start:stop].reshape(-1)
            return
        h = result.shape[0] // 2
        top, bottom = result[start:stop], result[h + start : h + stop]
        pairs = out.view(np.float64).reshape(stop - start, -1, 2)
        if self.cols == 1:
            pairs[:, :, 0], pairs[:, :, 1] = top, bottom
            return
        g = result.shape[1] // 2
        linear, anti = pairs[:, :g], pairs[:, g:]
        np.add(top[:, :g], bottom[:, g:], out=linear[:, :, 0])
        np.subtract(bottom[:, :g], top[:, g:], out=linear[:, :, 1])
        np.subtract(top[:, :g], bottom[:, g:], out=anti[:, :, 0])
        np.add(top[:, g:], bottom[:, :g], out=anti[:, :, 1])

    def scatter(self, decoded: np.ndarray, start: int, stop: int, product: np.ndarray, m: int, d: int) -> None:
        """Write unit rows ``start..stop-1`` of every product block from their decoded targets.

        Parameters
        ----------
        decoded : (m * d, (stop - start) * c) ndarray of ``dtype``
            Row ``i * d + k``: the target symbols of block C_ik (rows and columns: the anti-linear
            half of row ``i * d + k`` belongs to C_i(d-1-k), where centring put it).
        product : (m * rows * h, d * c) ndarray of float64
        """
        count = stop - start
        if self.rows == 1:
            blocks = product.reshape(m, -1, d, product.shape[1] // d)
            blocks[:, start:stop] = decoded.reshape(m, d, count, -1).transpose(0, 2, 1, 3)
            return
        if self.cols == 1:
            halves = product.reshape(m, 2, -1, product.shape[1])
            values = decoded.reshape(m, count, -1)
            halves[:, 0, start:stop], halves[:, 1, start:stop] = values.real, values.imag
            return
        g = product.shape[1] // (2 * d)
        parts = decoded.reshape(m, d, count, 2, g)
        linear, anti = parts[:, :, :, 0], parts[:, ::-1, :, 1]  # (i, k, x, y); anti stored at d - 1 - k
        out = product.reshape(m, 2, -1, d, 2, g)[:, :, start:stop].transpose(0, 1, 4, 3, 2, 5)  # (i, u, w, k, x, y)
        np.add(linear.real, anti.real, out=out[:, 0, 0])
        np.subtract(anti.imag, linear.imag, out=out[:, 0, 1])
        np.add(linear.imag, anti.imag, out=out[:, 1, 0])
        np.subtract(linear.real, anti.real, out=out[:, 1, 1])

    def combine(self, results: list[np.ndarray], weights: np.ndarray, m: int, d: int) -> np.ndarray:
        """The product from the results of a responder set and their decode weights.

        Parameters
        ----------
        results : list of F equally shaped (r, c) or (r,) ndarrays of float64
        weights : (F, m * d) ndarray
            Decode weights of the messages (rows in the order of ``results``).

        Returns
        -------
        product : (m * r, d * c) or (m * r,) ndarray of float64
        """
        shape = results[0].shape
        columns = shape[1] if len(shape) == 2 else 1
        product = np.empty((m * shape[0], d * columns))
        w: np.ndarray = np.ascontiguousarray(weights.T * self.weight_scale, dtype=self.dtype)

        def emit(chunk: np.ndarray, start: int, stop: int) -> None:
            self.scatter(w @ chunk, start, stop, product, m, d)

        self._stream(results, emit)
        return product[:, 0] if len(shape) == 1 else product

    def project(self, results: list[np.ndarray], basis: np.ndarray) -> np.ndarray:
        """Each result's message times ``basis`` ((units * unit, k) ndarray): (F, k) projections."""
        unit = self.units(results[0].shape)[1]
        out: np.ndarray = np.zeros((len(results), basis.shape[1]), dtype=self.dtype)

        def emit(chunk: np.ndarray, start: int, stop: int) -> None:
            out[...] += chunk @ basis[start * unit : stop * unit]

        self._stream(results, emit)
        return out

    def _stream(self, results: list[np.ndarray], emit: Emit) -> None:
        """Every result's messages, gathered block by block into ``emit`` (combine.blocked)."""
        matrices = [x.reshape(x.shape[0], -1) for x in results]
        units, unit = self.units(results[0].shape)
        blocked(len(matrices), units, unit, self.dtype,
                lambda i, start, stop, row: self.gather(matrices[i], start, stop, row), emit)


REAL = Embedding()


def unit_circle_code(
    workers: int, m: int, n: int, d: int, spacing: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Embedding]:
    """Sub-block coefficients, encoding and targets of a polynomial-type code on the unit circle.

    The scheme's exponents are ``alpha(i) = spacing * i`` (rows of A), ``delta(k) = m * spacing *
    (k - (d-1)/2)`` (columns of B) and ``+-j`` (inner), at theta_p = 2 pi p / P.

    Returns
    -------
    a_coef : (P, rows*inner, m*n*rows*inner) ndarray
        ``A_p`` sub-block (u, v) is ``sum a_coef[p, u*inner + v, ((i*n + j)*rows + x)*inner + y]
        * A_ij[x, y]``.
    b_coef : (P, inner*cols, n*d*inner*cols) ndarray
        Likewise for ``B_p`` from the sub-blocks of B_jk.
    encoding : (P, R) complex ndarray
        ``exp(i theta_p (e0 + q))``: message p is ``sum_q encoding[p, q] * symbol_q``.
    targets : (m*d, R) ndarray
        Unit rows selecting the symbols of C_ik (row ``i*d + k``).
    points : (P,) complex ndarray
        z_p = exp(i theta_p).
    embedding : Embedding
    """
    theta = 2 * np.pi * np.arange(workers) / workers
    embedding = Embedding(rows=2, inner=2 if n > 1 else 1, cols=2 if d > 1 else 1)
    centre = m * spacing * (d - 1) / 2 if d > 1 else 0.0
    delta = m * spacing * np.arange(d) - centre

    def rotations(exponents: np.ndarray, size: int) -> np.ndarray:
        """(P, len(exponents), size, size): Rot(e theta_p), or 1 x 1 ones when not split."""
        if size == 1:
            return np.ones((workers, len(exponents), 1, 1))
        angles = theta[:, None] * exponents[None, :]
        c, s = np.cos(angles), np.sin(angles)
        return np.stack([np.stack([c, -s], axis=-1), np.stack([s, c], axis=-1)], axis=-2)

    rows = rotations(spacing * np.arange(m, dtype=float), embedding.rows)  # (P, m, 2, 2)
    inner = rotations(np.arange(n, dtype=float), embedding.inner)  # (P, n, ., .)
    cols = rotations(delta, embedding.cols)  # (P, d, ., .)
    # A_p[u, v] = sum Rot_rows(i)[u, x] A_ij[x, y] Rot_inner(j)[y, v]; B_p[v, w] = sum Rot_inner(-j)[v, y]
    # B_jk[y, z] Rot_cols(k)[z, w], and Rot(-j) is Rot(j) transposed
    a_coef = np.einsum("piux,pjyv->puvijxy", rows, inner).reshape(workers, -1, m * n * embedding.rows
                                                                  * embedding.inner)
    b_coef = np.einsum("pjyv,pkzw->pvwjkyz", inner, cols).reshape(workers, -1, n * d * embedding.inner
                                                                  * embedding.cols)
    first = -(n - 1) - centre  # lowest exponent: i = k = 0, j - j' = -(n - 1)
    threshold = m * spacing * d + 2 * n - 1 - spacing
    encoding = np.exp(1j * theta[:, None] * (first + np.arange(threshold))[None, :])
    targets = np.zeros((m * d, threshold))
    for i in range(m):
        for k in range(d):
            targets[i * d + k, round(spacing * i + delta[k] - first)] = 1.0
    return a_coef, b_coef, encoding, targets, np.exp(1j * theta), embedding
