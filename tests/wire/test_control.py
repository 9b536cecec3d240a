"""The control calls' messages: each plain object survives its trip through the API's message,
every field of both included (a field added to one side and forgotten in the conversion fails)."""

from __future__ import annotations

import dataclasses

from coded.jobs.messages import Assignment, PeerStart, PeerStatus
from coded.v1 import peer_pb2, worker_pb2
from coded.wire.control import (
    assignment_of,
    assignment_proto,
    peer_start_of,
    peer_start_proto,
    peer_status_of,
    peer_status_proto,
)


def _set_fields(message) -> set[str]:
    return {field.name for field, _ in message.ListFields()}


def test_an_assignment_survives_the_trip_with_every_field():
    sent = Assignment("job-1", 3, '{"kind": "gradient_coding"}', data_uploaded=True, trace_csv="0,1,0.5\n",
                      features=64, classes=10, shape=(1, 8, 8), slowdown_csv="0,0,2.5\n")
    message = assignment_proto(sent)
    assert _set_fields(message) == {f.name for f in worker_pb2.Assignment.DESCRIPTOR.fields}
    assert assignment_of(worker_pb2.Assignment.FromString(message.SerializeToString())) == sent


def test_a_peer_start_and_status_survive_the_trip_with_every_field():
    start = PeerStart("job-2", 1, "{}", ("a:1", "b:2", "c:3"), {"data.npz": b"\x00\x01"})
    message = peer_start_proto(start)
    assert _set_fields(message) == {f.name for f in peer_pb2.CodeNetStart.DESCRIPTOR.fields}
    assert peer_start_of(peer_pb2.CodeNetStart.FromString(message.SerializeToString())) == start
    status = PeerStatus("job-2", 1, "RUNNING", iteration=7, rollbacks=1, errors_corrected=2, errors_detected=3,
                        repairs=4, cpu_seconds=1.5, reason="fine", evaluations=((5, 0.75), (7, 0.875)),
                        elapsed_s=2.25)
    assert {f.name for f in dataclasses.fields(PeerStatus)} - {"evaluations"} <= {
        f.name for f in peer_pb2.PeerStatus.DESCRIPTOR.fields}
    message = peer_status_proto(status)
    assert _set_fields(message) == {f.name for f in peer_pb2.PeerStatus.DESCRIPTOR.fields}
    assert peer_status_of(peer_pb2.PeerStatus.FromString(message.SerializeToString())) == status
