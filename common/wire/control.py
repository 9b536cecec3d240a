"""The master's control calls to a worker, between their plain objects (:mod:`coded.jobs.messages`)
and the API's messages (worker.proto, peer.proto): one conversion each way, used by the master's
links and the worker's servicers alike, so the two sides cannot drift apart."""

from __future__ import annotations

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.v1 import peer_pb2, worker_pb2

__all__ = ["assignment_of", "assignment_proto", "peer_start_of", "peer_start_proto", "peer_status_of",
           "peer_status_proto"]


def assignment_proto(a: Assignment) -> worker_pb2.Assignment:
    return worker_pb2.Assignment(
        job_id=a.job_id, worker_index=a.index, spec_json=a.spec_json, data_uploaded=a.data_uploaded,
        trace_csv=a.trace_csv, features=a.features, classes=a.classes, sample_shape=a.shape,
        slowdown_csv=a.slowdown_csv)


def assignment_of(m: worker_pb2.Assignment) -> Assignment:
    return Assignment(m.job_id, m.worker_index, m.spec_json, m.data_uploaded, m.trace_csv, m.features, m.classes,
                      tuple(m.sample_shape), m.slowdown_csv)


def peer_start_proto(s: PeerStart) -> peer_pb2.CodeNetStart:
    return peer_pb2.CodeNetStart(job_id=s.job_id, peer=s.peer, spec_json=s.spec_json, peers=s.peers,
                                 files=dict(s.files))


def peer_start_of(m: peer_pb2.CodeNetStart) -> PeerStart:
    return PeerStart(job_id=m.job_id, peer=m.peer, spec_json=m.spec_json, peers=tuple(m.peers), files=dict(m.files))


def peer_status_proto(s: PeerStatus) -> peer_pb2.PeerStatus:
    return peer_pb2.PeerStatus(
        job_id=s.job_id, peer=s.peer, state=s.state, iteration=s.iteration, rollbacks=s.rollbacks,
        errors_corrected=s.errors_corrected, errors_detected=s.errors_detected, repairs=s.repairs,
        cpu_seconds=s.cpu_seconds, reason=s.reason, elapsed_s=s.elapsed_s,
        eval_iterations=[i for i, _ in s.evaluations], eval_accuracy=[a for _, a in s.evaluations])


def peer_status_of(m: peer_pb2.PeerStatus) -> PeerStatus:
    return PeerStatus(
        job_id=m.job_id, peer=m.peer, state=m.state, iteration=m.iteration, rollbacks=m.rollbacks,
        errors_corrected=m.errors_corrected, errors_detected=m.errors_detected, repairs=m.repairs,
        cpu_seconds=m.cpu_seconds, reason=m.reason, elapsed_s=m.elapsed_s,
        evaluations=tuple((int(i), a) for i, a in zip(m.eval_iterations, m.eval_accuracy, strict=True)))
