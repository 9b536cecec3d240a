"""The protocol as an outside client sees it: every watch ends with its terminal event, bytes that
are not a message get INVALID_ARGUMENT from every RPC of every service, reflection v1 and v1alpha."""

from __future__ import annotations

import grpc
import pytest
import yaml
from grpc_reflection.v1alpha import reflection_pb2

from coded.client.reports import JobState
from coded.v1 import master_pb2, master_pb2_grpc, peer_pb2, worker_pb2

from .conftest import BASE_SPEC, raw_call

pytestmark = pytest.mark.integration

TERMINAL = {master_pb2.SUCCEEDED, master_pb2.FAILED, master_pb2.CANCELLED}
TRUNCATED = b"\x0a\x10abc"          # field 1, 16 bytes announced, 3 present
BAD_UTF8 = b"\x0a\x02\xff\xfe"      # field 1 (a string in every request that has one): not UTF-8


def methods(descriptor, service: str) -> list[tuple[str, bool, bool, bool]]:
    """(path, client streams, server streams, first field is a string) of every method."""
    out = []
    for method in descriptor.services_by_name[service].methods:
        fields = method.input_type.fields_by_number
        stringy = 1 in fields and fields[1].type == fields[1].TYPE_STRING
        out.append((f"/{descriptor.package}.{service}/{method.name}", method.client_streaming,
                    method.server_streaming, stringy))
    return out


def test_bytes_that_are_not_a_message_get_invalid_argument_from_every_rpc(shared_cluster):
    local = shared_cluster
    from grpc_health.v1 import health_pb2

    targets = {
        local.address: [*methods(master_pb2.DESCRIPTOR, "Master")],
        f"127.0.0.1:{local.worker_ports[0]}": [*methods(worker_pb2.DESCRIPTOR, "Worker"),
                                                *methods(peer_pb2.DESCRIPTOR, "Peer")],
    }
    for address, rpcs in targets.items():
        rpcs += methods(health_pb2.DESCRIPTOR, "Health") + methods(reflection_pb2.DESCRIPTOR, "ServerReflection")
        rpcs += [(path.replace("v1alpha", "v1"), *rest) for path, *rest in methods(reflection_pb2.DESCRIPTOR,
                                                                                     "ServerReflection")]
        with grpc.insecure_channel(address) as channel:
            for path, client_streams, server_streams, stringy in rpcs:
                for payload in (TRUNCATED, BAD_UTF8) if stringy else (TRUNCATED,):
                    with pytest.raises(grpc.RpcError) as error:
                        raw_call(channel, path, client_streams, server_streams, payload)
                    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, payload, error.value)
                    assert "malformed" in error.value.details() and path.rsplit("/", 1)[1] in error.value.details()
    with local.client() as client:  # and the cluster still runs jobs
        job = client.wait(client.submit(yaml.safe_dump({**BASE_SPEC, "workers": 2, "iterations": 2,
                                                        "code": {"scheme": "cyclic", "stragglers": 0}})).id)
        assert job.state == JobState.SUCCEEDED, job.reason


@pytest.mark.parametrize("kind", ["gradient_coding", "matmul", "matvec"])
def test_every_watch_of_a_job_that_ends_ends_with_its_terminal_event(shared_cluster, kind):
    local = shared_cluster
    spec = {
        "gradient_coding": {**BASE_SPEC, "workers": 4, "iterations": 5, "code": {"scheme": "cyclic", "stragglers": 1}},
        "matmul": {"kind": "matmul", "workers": 4, "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 1},
                   "inputs": {"generate": {"a": [20, 10], "b": [10, 6], "seed": 1}}},
        "matvec": {"kind": "matvec", "workers": 4, "code": {"scheme": "polynomial", "m": 2, "d": 1},
                   "inputs": {"generate": {"a": [12, 12], "seed": 1, "symmetric": True}}, "driver": {"rounds": 4}},
    }[kind]
    with local.client() as client, grpc.insecure_channel(local.address) as channel:
        job = client.submit(yaml.safe_dump(spec))
        stub = master_pb2_grpc.MasterStub(channel)
        events = list(stub.WatchJob(master_pb2.WatchJobRequest(job_id=job.id), timeout=120))
        assert events[-1].job.state == master_pb2.SUCCEEDED, events[-1].job.reason
        assert all(e.job.state not in TERMINAL for e in events[:-1])
        again = list(stub.WatchJob(master_pb2.WatchJobRequest(job_id=job.id), timeout=30))
        assert [e.job.state for e in again] == [master_pb2.SUCCEEDED]


def test_reflection_v1_and_v1alpha_list_the_services(shared_cluster):
    local = shared_cluster
    request = reflection_pb2.ServerReflectionRequest(list_services="").SerializeToString()
    with grpc.insecure_channel(local.address) as channel:
        for version in ("v1", "v1alpha"):
            call = channel.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo")
            (reply,) = list(call(iter([request]), timeout=10))
            names = {s.name for s in reflection_pb2.ServerReflectionResponse.FromString(reply)
                     .list_services_response.service}
            assert {"coded.v1.Master", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                    "grpc.reflection.v1alpha.ServerReflection"} <= names, version
