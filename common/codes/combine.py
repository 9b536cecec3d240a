"""The one decoding kernel: a weighted sum of received arrays, computed block by block.

Every exact code in this package decodes by ``out[t] = sum_i w[i, t] * message_i``. Summing whole
arrays one at a time streams the accumulator through memory once per message; here each block of
every message is gathered into a small cache-resident buffer and reduced with one GEMM, so each
message is read from memory exactly once and the output written once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["weighted_sum"]

#: Elements per block and message. 4096 complex or 8192 real values of 32 messages is 2 MiB of
#: buffer, which stays in L2/L3 cache on the machines we measured (bench/decode_speed.py).
BLOCK_BYTES = 1 << 16


def weighted_sum(messages: Sequence[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """Weighted sums of equally long 1-D arrays.

    Parameters
    ----------
    messages : sequence of F (L,) ndarrays
        All of the same length; real or complex.
    weights : (F, T) ndarray
        ``weights[i, t]`` multiplies ``messages[i]`` in output row t.

    Returns
    -------
    out : (L, T) ndarray
        ``out[:, t] = sum_i weights[i, t] * messages[i]``, of the common result dtype. Row-major,
        so ``out.reshape(-1)`` interleaves the T sums element by element without a copy (the
        layout of Ye & Abbe's decoded gradient).

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
    out = np.empty((length, targets), dtype=dtype)
    w = np.ascontiguousarray(weights, dtype=dtype)
    block = max(256, BLOCK_BYTES // dtype.itemsize)
    buffer = np.empty((count, min(block, length)), dtype=dtype)
    for start in range(0, length, block):
        stop = min(start + block, length)
        chunk = buffer[:, : stop - start]
        for row, message in zip(chunk, messages):
            row[...] = message[start:stop]
        np.matmul(chunk.T, w, out=out[start:stop])
    return out
