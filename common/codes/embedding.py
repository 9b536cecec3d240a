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

    Complex entries are never stored as complex numbers: their real parts and imaginary parts are
    gathered into separate rows, and the complex weights act on them as the real matrix
    ``[[Re W, -Im W], [Im W, Re W]]``, one real GEMM with the flops of the complex one. (OpenBLAS
    runs the small, wide complex products of a decode 30x slower with two threads than with one;
    the real ones do not suffer.)

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
    def parts(self) -> int:
        """Real rows per message: 2 (real and imaginary parts) when the rows carry the rotation's
        complex structure, else 1."""
        return self.rows

    def units(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """(unit rows, entries per unit row) of the messages of results of ``shape``."""
        columns = shape[1] if len(shape) == 2 else 1
        return shape[0] // self.rows, columns

    def real_weights(self, weights: np.ndarray) -> np.ndarray:
        """(F, T) decode weights, real or complex, as the (parts * T, parts * F) real matrix that maps
        the gathered rows (parts of message 0..F-1) to the rows of the decoded parts."""
        w = weights.T * (0.5 if self.cols == 2 else 1.0)
        if self.parts == 1:
            return np.ascontiguousarray(w.real)
        return np.block([[w.real, -w.imag], [w.imag, w.real]])

    def gather(self, result: np.ndarray, part: int, start: int, stop: int, out: np.ndarray) -> None:
        """Write one part (0: real, 1: imaginary) of the message entries of unit rows
        ``start..stop-1`` of ``result`` into ``out``.

        Parameters
        ----------
        result : (rows * h, c) ndarray of float64 (vectors reshaped to one column)
        out : ((stop - start) * c,) ndarray of float64
        """
        if self.rows == 1:
            out[...] = result[start:stop].reshape(-1)
            return
        h = result.shape[0] // 2
        top, bottom = result[start:stop], result[h + start : h + stop]
        if self.cols == 1:
            out[...] = (bottom if part else top).reshape(-1)
            return
        g = result.shape[1] // 2
        entries = out.reshape(stop - start, 2, g)  # (x, linear | anti, y)
        if part == 0:
            np.add(top[:, :g], bottom[:, g:], out=entries[:, 0])
            np.subtract(top[:, :g], bottom[:, g:], out=entries[:, 1])
        else:
            np.subtract(bottom[:, :g], top[:, g:], out=entries[:, 0])
            np.add(top[:, g:], bottom[:, :g], out=entries[:, 1])

    def scatter(self, decoded: np.ndarray, start: int, stop: int, product: np.ndarray, m: int, d: int) -> None:
        """Write unit rows ``start..stop-1`` of every product block from their decoded targets.

        Parameters
        ----------
        decoded : (parts * m * d, (stop - start) * c) ndarray of float64
            Row ``i * d + k`` (plus ``m * d`` for the imaginary part): the target symbols of
            block C_ik (rows and columns: the anti-linear half of row ``i * d + k`` belongs to
            C_i(d-1-k), where centring put it).
        product : (m * rows * h, d * c) ndarray of float64
        """
        count = stop - start
        if self.rows == 1:
            blocks = product.reshape(m, -1, d, product.shape[1] // d)
            blocks[:, start:stop] = decoded.reshape(m, d, count, -1).transpose(0, 2, 1, 3)
            return
        if self.cols == 1:
            halves = product.reshape(m, 2, -1, product.shape[1])
            halves[:, :, start:stop] = decoded.reshape(2, m, count, -1).transpose(1, 0, 2, 3)
            return
        g = product.shape[1] // (2 * d)
        parts = decoded.reshape(2, m, d, count, 2, g)  # (re | im, i, k, x, linear | anti, y)
        linear, anti = parts[:, :, :, :, 0], parts[:, :, ::-1, :, 1]  # anti stored at d - 1 - k
        out = product.reshape(m, 2, -1, d, 2, g)[:, :, start:stop].transpose(0, 1, 4, 3, 2, 5)  # (i, u, w, k, x, y)
        np.add(linear[0], anti[0], out=out[:, 0, 0])
        np.subtract(anti[1], linear[1], out=out[:, 0, 1])
        np.add(linear[1], anti[1], out=out[:, 1, 0])
        np.subtract(linear[0], anti[0], out=out[:, 1, 1])

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
        w = self.real_weights(weights)

        def emit(chunk: np.ndarray, start: int, stop: int) -> None:
            self.scatter(w @ chunk, start, stop, product, m, d)

        self._stream(results, emit)
        return product[:, 0] if len(shape) == 1 else product

    def project(self, results: list[np.ndarray], basis: np.ndarray) -> np.ndarray:
        """Each result's message times ``basis`` ((units * unit, k) real ndarray): (F, k) projections,
        complex when the messages are."""
        unit = self.units(results[0].shape)[1]
        out = np.zeros((self.parts * len(results), basis.shape[1]))

        def emit(chunk: np.ndarray, start: int, stop: int) -> None:
            out[...] += chunk @ basis[start * unit : stop * unit]

        self._stream(results, emit)
        return out if self.parts == 1 else out[: len(results)] + 1j * out[len(results) :]

    def _stream(self, results: list[np.ndarray], emit: Emit) -> None:
        """Every result's message parts (row ``part * F + i``), gathered block by block into ``emit``."""
        matrices = [x.reshape(x.shape[0], -1) for x in results]
        units, unit = self.units(results[0].shape)
        count = len(matrices)

        def gather(row: int, start: int, stop: int, out: np.ndarray) -> None:
            self.gather(matrices[row % count], row // count, start, stop, out)

        blocked(self.parts * count, units, unit, np.dtype(np.float64), gather, emit)


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
