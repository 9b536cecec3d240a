"""TLS, mutual TLS and the bearer token, with real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
import yaml

from coded.certs import make_certs
from coded.client import CodedClient
from coded.reports import JobState
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import Security, sync_channel

from .conftest import make_spec

pytestmark = pytest.mark.integration
TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def secure(cluster, tmp_path):
    files = make_certs(tmp_path / "certs")
    other = make_certs(tmp_path / "other")  # another CA entirely
    tls = ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"]), "--tls-ca", str(files["ca"])]
    security = Security(files["cert"], files["key"], files["ca"], TOKEN)
    local = cluster(3, master_args=[*tls, "--token", TOKEN], worker_args=[*tls, "--token", TOKEN], security=security)
    return local, files, other, security


def test_a_job_runs_over_mutual_tls_with_a_token(secure):
    local, _files, _other, _security = secure
    with local.client() as client:
        job = client.wait(client.submit(make_spec(workers=3, code={"scheme": "cyclic", "stragglers": 1},
                                                  iterations=5)).id)
        assert job.state == JobState.SUCCEEDED, job.reason


def test_without_or_with_a_wrong_token_clients_are_unauthenticated(secure):
    local, files, _other, _security = secure
    for token in (None, "wrong"):
        credentials = Security(files["cert"], files["key"], files["ca"], token)
        with CodedClient(local.address, credentials) as client:
            with pytest.raises(grpc.RpcError) as caught:
                client.submit(make_spec(workers=3))
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as caught:
                client.jobs()
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_worker_certificate_from_another_ca_cannot_register(secure):
    local, files, other, _security = secure
    intruder = Security(other["cert"], other["key"], files["ca"], TOKEN)  # trusts the cluster, is not trusted
    with sync_channel(local.address, intruder) as channel:
        stub = master_pb2_grpc.MasterStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.RegisterWorker(master_pb2.RegisterWorkerRequest(name="intruder", address="127.0.0.1:1"), timeout=10,
                                metadata=(("authorization", f"Bearer {TOKEN}"),))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    with local.client() as client:
        assert "intruder" not in {w.name for w in client.workers()}


def test_a_client_of_another_ca_is_told_in_one_line_that_the_tls_handshake_failed(secure):
    """What `docker compose run` met when a re-run of `coded certs` made a new CA under a running
    master: the command must name the cause, not print gRPC's status."""
    local, _files, other, _security = secure
    tls = ["--tls-cert", str(other["cert"]), "--tls-key", str(other["key"]), "--tls-ca", str(other["ca"])]
    run = subprocess.run([sys.executable, "-m", "coded.cli", "status", "--master", local.address, *tls],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "CODED_TOKEN": TOKEN})
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == (
        f"error: cannot reach the master at {local.address}: the TLS handshake failed: the master's certificate is "
        "not signed by the CA this client trusts (--tls-ca), or the master does not trust this client's "
        "certificate; both must come from the same `coded certs`")


def test_a_plaintext_client_cannot_talk_to_a_tls_server(secure):
    local, _files, _other, _security = secure
    with CodedClient(local.address, Security(token=TOKEN)) as client:
        with pytest.raises(grpc.RpcError) as caught:
            client.jobs()
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_workers_refuse_calls_without_the_cluster_token(secure):
    local, files, _other, _security = secure
    from coded.v1 import worker_pb2, worker_pb2_grpc

    no_token = Security(files["cert"], files["key"], files["ca"], None)
    with sync_channel(f"127.0.0.1:{local.worker_ports[0]}", no_token) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            worker_pb2_grpc.WorkerStub(channel).Assign(worker_pb2.Assignment(job_id="x", spec_json=yaml.safe_dump({})),
                                                       timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_data_plane_takes_only_mutual_tls_and_the_token(secure):
    """Rounds travel on the workers' data plane (docs/dataplane.md): a plaintext connection gets no
    frame at all, and a TLS client with the cluster's certificate but a wrong token gets ERROR
    UNAUTHENTICATED; the job above ran over it with both."""
    import socket
    import ssl
    import struct

    local, files, _other, security = secure
    port = local.data_ports[0]
    hello = struct.pack("<H", 1) + b"j" + struct.pack("<H", 5) + b"wrong" + struct.pack("<i", 0)
    frame = struct.pack("<2sBBIQQ", b"CD", 3, 1, len(hello), 0, 0) + hello
    with socket.create_connection(("127.0.0.1", port), timeout=20) as plain:
        plain.sendall(frame)
        assert not plain.recv(1 << 16).startswith(b"CD")  # a TLS alert or nothing: never a frame
    context = security.client_context()
    assert context is not None
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            context.wrap_socket(raw, server_hostname=security.server_name) as tls:
        tls.sendall(frame)
        reply = b""
        while chunk := tls.recv(1 << 16):
            reply += chunk
    kind, meta_length = reply[3], struct.unpack_from("<I", reply, 4)[0]
    code, message = struct.unpack_from("<I", reply, 24)[0], reply[28:24 + meta_length].decode()
    assert (kind, code, message) == (7, 11, "missing or wrong token")  # ERROR UNAUTHENTICATED
    with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            security.client_context().wrap_socket(raw, server_hostname="not-the-cluster"):  # type: ignore[union-attr]
        pass
    # mutual TLS: a client that trusts the cluster but shows no certificate gets no frame either
    anonymous = Security(tls_ca=files["ca"]).client_context()
    assert anonymous is not None
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        try:
            with anonymous.wrap_socket(raw, server_hostname=security.server_name) as tls:
                tls.sendall(frame)
                assert not tls.recv(1 << 16)  # the server ends the handshake's session: nothing comes
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass  # refused during or right after the handshake (TLS 1.3 reports it on the first read)
