"""The one decoding kernel: a weighted sum of received arrays, computed block by block.

Every exact code in this package decodes by ``out[t] = sum_i w[i, t] * message_i``. Summing whole
arrays one at a time streams the accumulator through memory once per message; here each block of
every message is gathered into a small cache-resident buffer and reduced with one GEMM, so each
message is read from memory exactly once and the output written once. Matmul codes on the unit
circle gather each block of a real result as complex numbers and write the product straight from
the GEMM's output (:meth:`coded.codes.embedding.Embedding.combine`), through the same loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["blocked", "weighted_sum"]

Gather = Callable[[int, int, int, np.ndarray], None]
Emit = Callable[[np.ndarray, int, int], None]

#: Elements per block and message. 4096 complex or 8192 real values of 32 messages is 2 MiB of
#: buffer, which stays in L2/L3 cache on the machines we measured (bench/decode_speed.py).
BLOCK_BYTES = 1 << 16
#: A block of a single sum (one output): 256 KiB of it and of one product stay in L2 cache while
#: every message's block is added in; larger blocks mean fewer numpy calls per message
#: (measured: 12 messages of 248,577 floats, 2.0 ms for this against 2.6 ms gathering for a GEMV)
SUM_BLOCK_BYTES = 1 << 18


def blocked(count: int, units: int, unit: int, dtype: np.dtype, gather: Gather, emit: Emit) -> None:
    """The loop every decode shares: ``count`` messages of ``units * unit`` elements, in blocks.

    For each block of whole units ``[start, stop)``, ``gather(i, start, stop, row)`` fills row i
    of a (count, (stop - start) * unit) buffer small enough to stay in cache, and
    ``emit(buffer, start, stop)`` consumes it (typically one GEMM with the weights). Every message
    is read from memory once, whatever the gathering does to it on the way.
    """
    dtype = np.dtype(dtype)
    per_block = max(1, max(256, BLOCK_BYTES // dtype.itemsize) // unit)
    buffer = np.empty((count, min(per_block, units) * unit), dtype=dtype)
    for start in range(0, units, per_block):
        stop = min(start + per_block, units)
        chunk = buffer[:, : (stop - start) * unit]
        for i in range(count):
            gather(i, start, stop, chunk[i])
        emit(chunk, start, stop)


def weighted_sum(messages: Sequence[np.ndarray], weights: np.ndarray, by_target: bool = False,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Weighted sums of equally long 1-D arrays.

    Parameters
    ----------
    messages : sequence of F (L,) ndarrays
        All of the same length; real or complex.
    weights : (F, T) ndarray
        ``weights[i, t]`` multiplies ``messages[i]`` in output row t.
    by_target : bool
        Return the T sums as rows, (T, L), instead of columns.
    out : ndarray, optional
        Where to write the sums (a decode's accumulator, reused round after round): C-contiguous,
        of the result's dtype and size; ignored otherwise.

    Returns
    -------
    out : (L, T) ndarray, or (T, L) with ``by_target``
        ``out[:, t] = sum_i weights[i, t] * messages[i]``, of the common result dtype. The (L, T)
        layout interleaves the T sums element by element, so ``out.reshape(-1)`` is Ye & Abbe's
        decoded gradient without a copy; (T, L) keeps each sum contiguous (matmul blocks).

    Examples
    --------
    >>> weighted_sum([np.ones(3), np.arange(3.0)], np.array([[2.0], [1.0]])).ravel().tolist()
    [2.0, 3.0, 4.0]
    """
    count, targets = weights.shape
    if count != len(messages):
        raise ValueError(f"got {len(messages)} messages for {count} rows of weights")
    length = messages[0].shape[0]
    dtype = np.result_type(weights.dtype, *(m.dtype for m in messages))
    shape = (targets, length) if by_target else (length, targets)
    if out is None or out.dtype != dtype or out.size != length * targets or not out.flags.c_contiguous:
        out = np.empty(shape, dtype=dtype)
    else:
        out = out.reshape(shape)
    if targets == 1 and dtype.kind == "f":
        _sum_into(messages, weights[:, 0], out.reshape(-1))
        return out
    rows = out if by_target else out.T
    if _is_selection(weights):  # each output is one message as it is (uncoded schemes): copy, no GEMM
        for t, i in enumerate(np.argmax(weights, axis=0)):
            rows[t] = messages[i]
        return out
    if targets == 1 and np.issubdtype(dtype, np.complexfloating):
        # numpy's complex matrix-vector product does not reach BLAS: a (F, 2) GEMM with a zero
        # column is ~5x faster than the (F, 1) product (measured: 500,000 complex values, F = 7)
        padded = weighted_sum(messages, np.concatenate([weights, np.zeros_like(weights)], axis=1), by_target)
        return padded[:1] if by_target else padded[:, :1]
    w = np.ascontiguousarray(weights, dtype=dtype)

    def gather(i: int, start: int, stop: int, row: np.ndarray) -> None:
        row[...] = messages[i][start:stop]

    def emit(chunk: np.ndarray, start: int, stop: int) -> None:
        if by_target:
            np.matmul(w.T, chunk, out=out[:, start:stop])
        else:
            np.matmul(chunk.T, w, out=out[start:stop])

    blocked(count, length, 1, dtype, gather, emit)
    return out


def _sum_into(messages: Sequence[np.ndarray], weights: np.ndarray, out: np.ndarray) -> None:
    """``out = sum_i weights[i] * messages[i]`` for real messages, block by block in message order:
    each message read once and added into a block of ``out`` that stays in cache, no gathering
    copy (a decode of Tandon et al.'s codes, uncoded, a sum of streamed pieces: one output)."""
    length = out.shape[0]
    per = max(1, SUM_BLOCK_BYTES // out.itemsize)
    scratch = np.empty(min(per, length), out.dtype)
    terms = [(m, float(w)) for m, w in zip(messages, weights, strict=True) if w != 0]
    for start in range(0, length, per):
        stop = min(start + per, length)
        block, product = out[start:stop], scratch[: stop - start]
        if not terms:
            block.fill(0.0)
            continue
        first, factor = terms[0]
        if factor == 1.0:
            np.copyto(block, first[start:stop], casting="same_kind")
        else:
            np.multiply(first[start:stop], factor, out=block)
        for message, factor in terms[1:]:
            if factor == 1.0:
                np.add(block, message[start:stop], out=block)
            else:
                np.multiply(message[start:stop], factor, out=product)
                np.add(block, product, out=block)


def _is_selection(weights: np.ndarray) -> bool:
    """Whether every column of ``weights`` is a unit vector (0/1 entries, one 1)."""
    if weights.sum() != weights.shape[1]:  # one reduction rules out most weights (a sum: all ones)
        return False
    return bool(np.all((weights == 0) | (weights == 1)) and np.all(np.count_nonzero(weights, axis=0) == 1))
