"""The master's shared memory for workers on its own host (coded.wire.shared; docs/dataplane.md,
"Shared memory"): each job's input segment, where a round's parameters are written once for all
of the job's local workers, and a reply segment for each local connection, where its worker
computes its messages.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from coded.master.links import Params
from coded.wire.buffers import BufferPool
from coded.wire.frames import ITERATION, Kind, encode_frame, shared_meta
from coded.wire.shared import Segment, SharedMemoryError, available

__all__ = ["JobInputs", "SharedMemory"]

#: a round's ROUND frame in shared memory, and the slot that holds its parameters
Prepared = tuple[list[bytes | memoryview], np.ndarray]
#: bytes of address space per segment; memory is used only where written (a job's input slots, a
#: worker's messages), so this bounds what fits, not what is spent
SEGMENT_BYTES = 1 << 30


class JobInputs:
    """One job's input segment: slots its rounds' parameters are written into, each reused once no
    round that reads it is under way (each round's call holds its slot)."""

    def __init__(self, job_id: str) -> None:
        self.segment = Segment.create(f"coded-input-{job_id}", SEGMENT_BYTES, read_only_for_others=True)
        self._slots = BufferPool(limit=SEGMENT_BYTES, carve=self.segment.carve)

    def round_frames(self, params: Params, iteration: int) -> Prepared | None:
        """A round's ROUND frame with its parameters in this segment, and their slot (which the
        round's calls hold while they are under way): written once per round, for every local
        worker of the job. None when the segment has no room (the round sends them as a payload)."""
        return params.form(("shared frames", self, iteration), self._write(iteration, params.round_id))

    def _write(self, iteration: int, round_id: int) -> Callable[[np.ndarray], Prepared | None]:
        """What writes a round's parameters into a free slot, and makes its frame."""

        def build(array: np.ndarray) -> Prepared | None:
            slot = self._slots.take(array.shape, array.dtype)
            offset = self.segment.offset(slot)
            if offset is None:  # the segment is full: the pool gave process memory
                return None
            np.copyto(slot, array)
            meta = ITERATION.pack(iteration) + shared_meta(slot, offset)
            return encode_frame(Kind.ROUND, round_id, meta, shared=True), slot

        return build


class SharedMemory:
    """The master's segments: an input segment per job (while any of its local connections is
    open: they hold it) and a reply segment per connection."""

    def __init__(self) -> None:
        self._inputs: weakref.WeakValueDictionary[str, JobInputs] = weakref.WeakValueDictionary()

    def offer(self, job_id: str) -> tuple[JobInputs, Segment] | None:
        """The job's inputs and a new reply segment, for a new local connection; None where this
        system has no shared memory to offer."""
        if not available():
            return None
        try:
            inputs = self._inputs.get(job_id)
            if inputs is None:
                inputs = self._inputs[job_id] = JobInputs(job_id)
            return inputs, Segment.create(f"coded-reply-{job_id}", SEGMENT_BYTES)
        except SharedMemoryError:
            return None
