"""The client's conversions between the API's messages (master.proto) and plain objects
(:mod:`coded.client.reports`): the one place the client builds a submission's requests and reads the
master's replies."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from coded.client.reports import (
    Evaluation,
    IterationRecord,
    Job,
    JobEvent,
    JobState,
    Replies,
    Verification,
    WorkerInfo,
    WrongReplies,
)
from coded.v1 import master_pb2

__all__ = ["FILE_CHUNK", "event_of", "job_of", "submit_requests", "workers_of"]

#: bytes of a file per SubmitJob message
FILE_CHUNK = 1 << 20


def submit_requests(spec: str, files: Mapping[str, bytes]) -> Iterator[master_pb2.SubmitJobRequest]:
    """A SubmitJob stream: the spec, then each file's chunks in order (an empty file: one empty chunk)."""
    yield master_pb2.SubmitJobRequest(spec=spec)
    for name, data in files.items():
        for offset in range(0, max(len(data), 1), FILE_CHUNK):
            chunk = master_pb2.FileChunk(name=name, offset=offset, data=data[offset : offset + FILE_CHUNK])
            yield master_pb2.SubmitJobRequest(file=chunk)


def record_of(message: master_pb2.IterationRecord) -> IterationRecord:
    return IterationRecord(
        iteration=message.iteration, loss=message.loss, elapsed_s=message.elapsed_s,
        responders=tuple(message.responders), duration_s=message.duration_s, test_loss=message.test_loss,
        test_accuracy=message.test_accuracy, test_auc=message.test_auc,
        worker_compute_s=tuple(message.worker_compute_s), checked=message.checked,
        errors_detected=message.errors_detected, errors_corrected=message.errors_corrected,
        located=tuple(message.located), quarantined=tuple(message.quarantined),
        pieces=tuple(tuple(used.pieces) for used in message.pieces), stopped_pieces=message.stopped_pieces,
        worker_transfer_s=tuple(message.worker_transfer_s), worker_reply_s=tuple(message.worker_reply_s))


def job_of(message: master_pb2.Job) -> Job:
    v = message.verification
    return Job(
        id=message.id, kind=message.kind, state=JobState(master_pb2.JobState.Name(message.state)), spec=message.spec,
        iteration=message.iteration, iterations=message.iterations, elapsed_s=message.elapsed_s, loss=message.loss,
        reason=message.reason, created_unix=message.created_unix, workers=tuple(message.workers),
        stats=dict(message.stats), verification=Verification(v.mode, v.errors, v.tolerance, v.summary),
        wrong_replies=tuple(WrongReplies(w.position, w.worker, w.located, w.quarantined, w.quarantined_after)
                            for w in message.wrong_replies),
        history=tuple(record_of(r) for r in message.history),
        replies=Replies(message.replies.streamed, message.replies.sent_bytes, message.replies.received_bytes,
                        message.replies.reason, message.replies.predicted_s or math.nan,
                        message.replies.gradient_bytes, message.replies.local_workers, message.replies.cores)
        if message.HasField("replies") else None,
        test=Evaluation(message.test.iteration, message.test.loss, message.test.accuracy, message.test.auc)
        if message.HasField("test") else None,
        warnings=tuple(message.warnings))


def event_of(message: master_pb2.JobEvent) -> JobEvent:
    return JobEvent(job_of(message.job), record_of(message.record) if message.HasField("record") else None)


def workers_of(message: master_pb2.ListWorkersReply) -> list[WorkerInfo]:
    return [WorkerInfo(w.name, w.address, w.alive, w.last_seen_s, tuple(w.jobs), tuple(w.models),
                       tuple(w.quarantined_by), w.resident_bytes, w.peak_resident_bytes, w.unusable, w.link_bits_per_s)
            for w in message.workers]
