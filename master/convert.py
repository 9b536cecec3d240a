"""The master's conversions between its plain objects and the API's messages (master.proto): the
one place the servicer's replies are built and a submission's request stream is read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from coded.base.errors import TooLarge
from coded.master.job import JobEvent
from coded.master.registry import WorkerInfo
from coded.master.store import Record, StoredJob
from coded.v1 import master_pb2
from coded.wire.tensor import TensorError

__all__ = ["MAX_FILES", "event_proto", "job_proto", "read_submission", "record_proto", "worker_protos"]

#: files one submission may upload (a spec names at most 16 training and 16 test files, two
#: matrices, two traces): bounds the files a client can make the master open at once
MAX_FILES = 64


async def read_submission(requests: AsyncIterator[master_pb2.SubmitJobRequest], max_upload: int,
                          directory: Path) -> tuple[str, dict[str, Path]]:
    """The spec and the files of a SubmitJob stream: its first message's spec, then the files'
    chunks, each file's in order of offset. Each file is written to ``directory`` as its chunks
    arrive (named by its order of arrival: a name from the network never becomes a path), so an
    upload is never held in memory.

    Raises
    ------
    TensorError
        A first message without the spec, a chunk at the wrong offset, no message at all.
    TooLarge
        Files of more than ``max_upload`` bytes in all, or more than :data:`MAX_FILES` files.
    """
    spec: str | None = None
    files: dict[str, tuple[Path, BinaryIO]] = {}
    written: dict[str, int] = {}
    total = 0
    try:
        async for request in requests:
            if spec is None:
                if not request.spec:
                    raise TensorError("the first message of SubmitJob carries the spec")
                spec = request.spec
                continue
            chunk = request.file
            if chunk.name not in files:
                if len(files) == MAX_FILES:
                    raise TooLarge(f"a job is submitted with at most {MAX_FILES} files")
                path = directory / str(len(files))
                files[chunk.name] = (path, path.open("wb"))
                written[chunk.name] = 0
            if chunk.offset != written[chunk.name]:
                raise TensorError(f"file {chunk.name!r}: chunk at offset {chunk.offset}, "
                                  f"expected {written[chunk.name]}")
            total += len(chunk.data)
            if total > max_upload:
                raise TooLarge(f"uploaded files exceed {max_upload} bytes (master --max-upload-mb)")
            await asyncio.to_thread(files[chunk.name][1].write, chunk.data)
            written[chunk.name] += len(chunk.data)
    finally:
        for _, handle in files.values():
            handle.close()
    if spec is None:
        raise TensorError("SubmitJob needs a spec")
    return spec, {name: path for name, (path, _) in files.items()}


def record_proto(record: Record) -> master_pb2.IterationRecord:
    return master_pb2.IterationRecord(
        iteration=record.iteration, loss=record.loss, elapsed_s=record.elapsed, responders=record.responders,
        duration_s=record.duration, test_loss=record.test_loss, test_accuracy=record.test_accuracy,
        test_auc=record.test_auc, worker_compute_s=record.worker_compute, checked=record.checked,
        errors_detected=record.detected, errors_corrected=record.corrected, located=record.located,
        quarantined=record.quarantined, stopped_pieces=record.stopped_pieces,
        worker_transfer_s=record.worker_transfer, worker_reply_s=record.worker_reply,
        pieces=[master_pb2.PiecesUsed(pieces=record.pieces.get(p, [])) for p in record.responders] if record.pieces
        else [])


def _wrong_replies(s: StoredJob) -> list[master_pb2.WrongReplies]:
    located = {int(p): count for p, count in s.checks.get("located", {}).items()}
    quarantined = {int(p): iteration for p, iteration in s.checks.get("quarantined", {}).items()}
    return [master_pb2.WrongReplies(position=p, worker=s.workers[p] if p < len(s.workers) else "",
                                    located=located.get(p, 0), quarantined=p in quarantined,
                                    quarantined_after=quarantined.get(p, -1))
            for p in sorted(set(located) | set(quarantined))]


def job_proto(s: StoredJob, history: Sequence[Record] | None = None) -> master_pb2.Job:
    job = master_pb2.Job(
        id=s.id, kind=s.kind, state=master_pb2.JobState.Value(s.state), spec=s.spec, iteration=s.iteration,
        iterations=s.iterations, elapsed_s=s.elapsed, loss=s.loss, reason=s.reason, created_unix=s.created,
        workers=s.workers, stats=s.stats, verification=master_pb2.Verification(**s.checks.get("verification", {})),
        wrong_replies=_wrong_replies(s), warnings=s.checks.get("warnings", []))
    if "replies" in s.checks:
        job.replies.CopyFrom(master_pb2.Replies(**s.checks["replies"]))
    if s.test is not None:
        job.test.CopyFrom(master_pb2.Evaluation(iteration=s.test.iteration, loss=s.test.loss,
                                                accuracy=s.test.accuracy, auc=s.test.auc))
    if history is not None:
        job.history.extend(record_proto(r) for r in history)
    return job


def event_proto(event: JobEvent) -> master_pb2.JobEvent:
    proto = master_pb2.JobEvent(job=job_proto(event.job))
    if event.record is not None:
        proto.record.CopyFrom(record_proto(event.record))
    return proto


def worker_protos(workers: Sequence[WorkerInfo], quarantined_by: Mapping[str, Sequence[str]]
                  ) -> list[master_pb2.WorkerInfo]:
    """Every registered worker, with the jobs that quarantined it (by worker name)."""
    return [master_pb2.WorkerInfo(name=w.name, address=w.address, alive=w.alive, last_seen_s=w.last_seen_s,
                                  jobs=w.jobs, models=w.models, quarantined_by=quarantined_by.get(w.name, []),
                                  resident_bytes=w.resident_bytes, peak_resident_bytes=w.peak_resident_bytes,
                                  unusable=w.unusable, link_bits_per_s=w.link_bits_per_s)
            for w in workers]
