"""An upload: the named arrays a master sends a worker after assigning it, as one stream of
TensorChunks (worker.proto's ``UploadPartitions``). Each array's chunks carry ``<job id>/<name>``;
the names themselves are the job kind's (:mod:`coded.jobs.uploads`). Both ends use this module:
the master's links make the stream, the worker's servicer reads it."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable

import numpy as np

from coded.base.errors import TooLarge
from coded.v1 import tensor_pb2
from coded.wire.tensor import ChunkAssembler, TensorError, to_chunks

__all__ = ["read_upload", "upload_chunks"]


async def upload_chunks(job_id: str, arrays: Iterable[tuple[str, np.ndarray]], chunk_bytes: int
                        ) -> AsyncIterator[tensor_pb2.TensorChunk]:
    """The stream of a job's upload, each array made when it is sent (``arrays`` may be a
    generator: a worker's share is never in the master's memory at once)."""
    for name, array in arrays:
        for chunk in to_chunks(array, f"{job_id}/{name}", chunk_bytes):
            yield chunk


async def read_upload(chunks: AsyncIterable[tensor_pb2.TensorChunk], max_bytes: int, max_tensor_bytes: int
                      ) -> tuple[str, dict[str, np.ndarray], int]:
    """The job id, the arrays by name and the bytes of an upload's stream, each array reassembled
    in memory as its chunks arrive.

    Raises
    ------
    TensorError
        An empty stream, chunks of more than one job, a chunk that does not fit its array.
    TooLarge
        More than ``max_bytes`` in all, or an array over ``max_tensor_bytes``.
    """
    arrays: dict[str, np.ndarray] = {}
    job_id: str | None = None
    total = 0
    current: ChunkAssembler | None = None
    async for chunk in chunks:
        total += len(chunk.data)
        if total > max_bytes:
            raise TooLarge(f"upload exceeds {max_bytes} bytes")
        if current is None or (current.complete and chunk.offset == 0):
            if current is not None:
                arrays[current.name.partition("/")[2]] = current.result()
            current = ChunkAssembler(max_tensor_bytes)
        current.add(chunk)
        job = current.name.partition("/")[0]
        if job_id not in (None, job):
            raise TensorError("an upload carries the arrays of one job only")
        job_id = job
    if current is None or job_id is None:
        raise TensorError("empty upload")
    arrays[current.name.partition("/")[2]] = current.result()
    return job_id, arrays, total
