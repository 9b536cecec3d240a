"""TLS, mutual TLS and the bearer token, with real processes."""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coded.client.client import CodedClient, unreachable
from coded.client.reports import TERMINAL_STATES, Job, JobState
from coded.cluster.certs import CLUSTER_NAME, make_certs
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import Security, call_metadata, sync_channel

from .conftest import make_spec, wait_until

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


def test_a_client_and_a_worker_whose_certificate_the_master_refuses_say_so_at_the_default_level(secure):
    """Issue 52: such a client said "Socket closed" (TLS 1.3: the master checks the client's
    certificate once the handshake is done, and closes), and such a worker logged nothing at all."""
    local, files, other, _security = secure
    tls = ["--tls-cert", str(other["cert"]), "--tls-key", str(other["key"]), "--tls-ca", str(files["ca"])]
    env = {**os.environ, "CODED_TOKEN": TOKEN}
    why = ("the master closed the connection as it opened: it does not trust this client's certificate (--tls-cert "
           "and --tls-key must come from the same `coded certs` as the master's), or it expects TLS and this client "
           "has none (--tls-ca)")
    run = subprocess.run([sys.executable, "-m", "coded.cli", "status", "--master", local.address, *tls],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == f"error: cannot reach the master at {local.address}: {why}", run.stderr
    worker = subprocess.Popen([sys.executable, "-m", "coded.cli", "worker", "--master", local.address, "--port", "0",
                               *tls], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert worker.stderr is not None
        lines = []
        while not lines or "cannot register" not in lines[-1]:  # the first failure is told at once
            lines.append(worker.stderr.readline())
            assert lines[-1], "".join(lines)
        assert lines[-1].split(" WARNING coded.worker.registration: ")[1] == (
            f"cannot register with master {local.address}: {why}; trying again until it answers\n"), lines
    finally:
        worker.kill()
        worker.wait(timeout=60)


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


# --- variants: one-way TLS, another server name, a wrong name, an expired certificate, rotation ------------------

QUICK = {"code": {"scheme": "uncoded"}, "iterations": 3}


def _signed(files: dict[str, Path], out: Path, names: tuple[str, ...] = (CLUSTER_NAME,),
            expired: bool = False) -> dict[str, Path]:
    """A certificate for ``names`` (and its key), signed by the CA of ``files`` (as ``make_certs``
    made them) for client and server use, as ``make_certs`` signs its own; ``expired``: it was valid
    from 30 days ago until yesterday."""
    out.mkdir(parents=True)
    authority = serialization.load_pem_private_key(files["ca_key"].read_bytes(), None)
    ca = x509.load_pem_x509_certificate(files["ca"].read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = ((now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)) if expired else
                  (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name) for name in names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(authority, hashes.SHA256()))
    (out / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    return {"ca": files["ca"], "cert": out / "cert.pem", "key": out / "key.pem"}


def _tls_args(files: dict[str, Path], ca: bool = True) -> list[str]:
    return ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"]),
            *(["--tls-ca", str(files["ca"])] if ca else []), "--token", TOKEN]


def _succeeds(client: CodedClient, workers: int, **changes: object) -> Job:
    """A job of ``workers`` workers, followed to its end: it succeeded, with a round per iteration."""
    spec = {**QUICK, **changes}
    job_id = client.submit(make_spec(workers=workers, **spec)).id
    # a hang guard only: a job whose rounds cannot reach a worker's data plane stays PAUSED (the
    # worker is back with its next heartbeat, and its rounds fail again), it does not fail
    ended = wait_until(lambda: client.get(job_id).state in TERMINAL_STATES, timeout=90)
    job = client.get(job_id, history=True)
    assert ended, f"job {job_id} is still {job.state.value}: {job.reason}"
    assert job.state == JobState.SUCCEEDED, job.reason
    assert [record.iteration for record in job.history] == list(range(spec["iterations"]))
    assert all(record.responders for record in job.history)
    return job


def _say_hello(port: int, context: ssl.SSLContext, server_name: str) -> bytes:
    """Say HELLO with a wrong token on a worker's data plane over TLS; all that comes back."""
    hello = struct.pack("<H", 1) + b"j" + struct.pack("<H", 5) + b"wrong" + struct.pack("<i", 0)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall(struct.pack("<2sBBIQQ", b"CD", 3, 1, len(hello), 0, 0) + hello)
        reply = b""
        while chunk := tls.recv(1 << 16):
            reply += chunk
    return reply


def _hello(port: int, context: ssl.SSLContext, server_name: str) -> tuple[int, int, str]:
    """The reply to a HELLO with a wrong token on a worker's data plane: its kind, code and message."""
    reply = _say_hello(port, context, server_name)
    meta_length = struct.unpack_from("<I", reply, 4)[0]
    return reply[3], struct.unpack_from("<I", reply, 24)[0], reply[28:24 + meta_length].decode()


def _no_frame(port: int, context: ssl.SSLContext) -> bool:
    """Whether a HELLO from a client whose certificate the worker refuses gets nothing back: refused
    during the handshake or right after it (TLS 1.3 reports a refused client certificate on the
    first read)."""
    try:
        return not _say_hello(port, context, CLUSTER_NAME)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True


UNAUTHENTICATED_HELLO = (7, 11, "missing or wrong token")  # ERROR UNAUTHENTICATED: the handshake went through


@pytest.mark.slow  # a cluster of its own with its own certificates: make test-slow
def test_one_way_tls_servers_without_a_ca_take_clients_without_certificates(cluster, tmp_path):
    """One-way TLS: --tls-ca is both the CA a process trusts and the one its servers require client
    certificates from, so servers without it ask for none; a client with --tls-ca alone checks the
    server's certificate and shows none. A master and workers with --tls-cert/--tls-key only then
    check each other's certificates (gRPC and the data plane) against the default trust store:
    a cluster on a public CA's certificates. Here the cluster's CA is made the default one
    ($GRPC_DEFAULT_SSL_ROOTS_FILE_PATH for gRPC, $SSL_CERT_FILE for Python's ssl)."""
    files = make_certs(tmp_path / "certs")
    one_way = _tls_args(files, ca=False)
    local = cluster(2, master_args=one_way, worker_args=one_way, security=Security(tls_ca=files["ca"], token=TOKEN),
                    env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(files["ca"]), "SSL_CERT_FILE": str(files["ca"])})
    with local.client() as client:  # no certificate of its own
        _succeeds(client, 2)
    with CodedClient(local.address, Security(token=TOKEN)) as plaintext:
        with pytest.raises(grpc.RpcError) as caught:
            plaintext.jobs()
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    with CodedClient(local.address, Security(tls_ca=make_certs(tmp_path / "other")["ca"], token=TOKEN)) as stranger:
        with pytest.raises(grpc.RpcError) as caught:
            stranger.jobs()  # TLS still checks the server: not signed by the CA this client trusts
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    # the data plane too: TLS without a client certificate gets as far as the token; plaintext gets no frame
    anonymous = Security(tls_ca=files["ca"]).client_context()
    assert anonymous is not None
    assert _hello(local.data_ports[0], anonymous, CLUSTER_NAME) == UNAUTHENTICATED_HELLO
    with socket.create_connection(("127.0.0.1", local.data_ports[0]), timeout=20) as plain:
        plain.sendall(struct.pack("<2sBBIQQ", b"CD", 3, 1, 0, 0, 0))
        assert not plain.recv(1 << 16).startswith(b"CD")


@pytest.mark.slow  # a cluster of its own with its own certificates: make test-slow
def test_a_cluster_on_another_server_name_runs_and_refuses_clients_expecting_coded(cluster, tmp_path):
    """Certificates that name `thatname` only, and every process on --tls-server-name thatname: gRPC
    and the data plane check that name, and a client expecting `coded` is told so in one line."""
    files = make_certs(tmp_path / "certs")
    named = _signed(files, tmp_path / "named", ("thatname",))
    tls = [*_tls_args(named), "--tls-server-name", "thatname"]
    local = cluster(2, master_args=tls, worker_args=tls,
                    security=Security(named["cert"], named["key"], named["ca"], TOKEN, server_name="thatname"))
    with local.client() as client:
        _succeeds(client, 2)  # its rounds went over the workers' data planes
    context = Security(named["cert"], named["key"], named["ca"]).client_context()
    assert context is not None
    assert _hello(local.data_ports[0], context, "thatname") == UNAUTHENTICATED_HELLO
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _hello(local.data_ports[0], context, CLUSTER_NAME)
    run = subprocess.run([sys.executable, "-m", "coded.cli", "status", "--master", local.address, *_tls_args(named)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == (
        f"error: cannot reach the master at {local.address}: the master's certificate does not name the server name "
        "this client expects (--tls-server-name, default `coded`: the name `coded certs` gives)")


@pytest.mark.slow  # a cluster of its own with its own certificates: make test-slow
def test_a_worker_whose_certificate_names_another_name_registers_but_cannot_serve(cluster, tmp_path):
    """The master checks no client's name, so a worker with a certificate of the cluster's CA for
    `elsewhere` registers; but the master, calling it, expects `coded`: its assignment fails (the
    master's log says why), the job runs on the other workers (the code leaves one out), and its
    data plane fails the same check."""
    files = make_certs(tmp_path / "certs")
    local = cluster(2, master_args=_tls_args(files), worker_args=_tls_args(files),
                    security=Security(files["cert"], files["key"], files["ca"], TOKEN))
    local.worker_args = _tls_args(_signed(files, tmp_path / "elsewhere", ("elsewhere",)))
    local.start_workers([2])
    local.wait_for_workers(3)
    with local.client() as client:
        job = _succeeds(client, 3, code={"scheme": "cyclic", "stragglers": 1}, iterations=5)
    position = job.workers.index("worker-2")
    assert all(position not in record.responders for record in job.history)
    log = local.log_files["master"].read_text()
    assert f"job {job.id}: assigning position {position} failed: UNAVAILABLE" in log
    assert "Hostname Verification Check failed" in log
    context = local.security.client_context()
    assert context is not None
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _hello(local.data_ports[2], context, CLUSTER_NAME)


def _cannot_register(address: str, security: Security, name: str) -> None:
    """A RegisterWorker with these TLS files and the token fails the handshake (UNAVAILABLE)."""
    with sync_channel(address, security) as channel, pytest.raises(grpc.RpcError) as caught:
        master_pb2_grpc.MasterStub(channel).RegisterWorker(
            master_pb2.RegisterWorkerRequest(name=name, address="127.0.0.1:1"), timeout=10,
            metadata=call_metadata(TOKEN))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.slow  # a cluster of its own with its own certificates: make test-slow
def test_an_expired_certificate_of_the_cluster_ca_is_refused_by_servers_and_by_clients(cluster, tmp_path):
    """A certificate signed by the cluster's CA, for `coded`, but valid only until yesterday."""
    files = make_certs(tmp_path / "certs")
    local = cluster(1, master_args=_tls_args(files), worker_args=_tls_args(files),
                    security=Security(files["cert"], files["key"], files["ca"], TOKEN))
    expired = _signed(files, tmp_path / "expired", expired=True)
    # a client presenting it: the master refuses the handshake, and with it the registration
    _cannot_register(local.address, Security(expired["cert"], expired["key"], expired["ca"], TOKEN), "expired")
    with local.client() as client:
        assert "expired" not in {w.name for w in client.workers()}
    # ... and so does a worker's data plane, which answers the cluster's certificate (with a wrong token)
    presenting = Security(expired["cert"], expired["key"], expired["ca"]).client_context()
    context = local.security.client_context()
    assert presenting is not None and context is not None
    assert _hello(local.data_ports[0], context, CLUSTER_NAME) == UNAUTHENTICATED_HELLO
    assert _no_frame(local.data_ports[0], presenting)
    # a server presenting it: a worker started with it listens, but clients refuse it, on gRPC and the data plane
    local.worker_args = _tls_args(expired)
    local.start_workers([1])
    with sync_channel(f"127.0.0.1:{local.worker_ports[1]}", local.security) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "certificate has expired" in (caught.value.details() or "")
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        _hello(local.data_ports[1], context, CLUSTER_NAME)
    assert refused.value.verify_message == "certificate has expired"


@pytest.mark.slow  # a cluster of its own with its own certificates: make test-slow
def test_rotating_the_certificates_and_restarting_keeps_the_jobs_and_locks_out_the_old_ca(cluster, tmp_path):
    """docs/security.md: rotate by re-running `coded certs --replace` and restarting the processes."""
    certs = tmp_path / "certs"
    files = make_certs(certs)
    local = cluster(2, master_args=_tls_args(files), worker_args=_tls_args(files),
                    security=Security(files["cert"], files["key"], files["ca"], TOKEN))
    with local.client() as client:
        before = _succeeds(client, 2)
    old = tmp_path / "old"
    old.mkdir()
    kept = {role: Path(shutil.copy(files[role], old)) for role in ("ca", "cert", "key")}
    run = subprocess.run([sys.executable, "-m", "coded.cli", "certs", "--out", str(certs), "--replace"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert files["ca"].read_bytes() != kept["ca"].read_bytes()
    for index in (0, 1):
        local.kill_worker(index, signal.SIGTERM)
    local.kill_master(signal.SIGTERM)
    local.start_master()  # same port, same state dir, the same file names: now the new files
    local.start_workers([0, 1])
    local.wait_for_workers(2)
    with local.client() as client:
        after = _succeeds(client, 2)
        assert {job.id: job.state for job in client.jobs()} == {before.id: JobState.SUCCEEDED,
                                                                after.id: JobState.SUCCEEDED}
    # a client still holding the old files: the master's new certificate is not from the CA it trusts
    with CodedClient(local.address, Security(kept["cert"], kept["key"], kept["ca"], TOKEN)) as stale, \
            pytest.raises(grpc.RpcError) as caught:
        stale.jobs()
    assert unreachable(caught.value, local.address) == (
        f"cannot reach the master at {local.address}: the TLS handshake failed: the master's certificate is not "
        "signed by the CA this client trusts (--tls-ca), or the master does not trust this client's certificate; "
        "both must come from the same `coded certs`")
    # ... and its old certificate, next to the new CA, is not one the master trusts: it cannot register
    _cannot_register(local.address, Security(kept["cert"], kept["key"], files["ca"], TOKEN), "stale")
    with local.client() as client:
        assert {w.name for w in client.workers()} == {"worker-0", "worker-1"}
