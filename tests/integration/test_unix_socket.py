"""The master's second listener, a filesystem Unix socket (`coded master --unix-socket`): what a
process in another network namespace reaches it by (``coded local --link``). The same API, TLS and
token as on its TCP port; a socket a live master holds is not taken over."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest

from coded.client import CodedClient
from coded.client.reports import JobState
from coded.cluster.certs import make_certs
from coded.wire.rpc import Security

from .conftest import make_spec

pytestmark = pytest.mark.integration
TOKEN = "unix-socket-token"


@pytest.fixture
def secure(cluster, tmp_path):
    files = make_certs(tmp_path / "certs")
    tls = ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"]), "--tls-ca", str(files["ca"])]
    socket_path = tmp_path / "master.sock"
    local = cluster(2, master_args=[*tls, "--unix-socket", str(socket_path)], worker_args=tls,
                    security=Security(files["cert"], files["key"], files["ca"]), token=TOKEN)
    return local, tls, socket_path


def test_a_job_runs_through_the_unix_socket_with_tls_and_the_token(secure):
    local, _tls, socket_path = secure
    with CodedClient(f"unix:{socket_path}", local.security) as client:
        assert sorted(w.name for w in client.workers()) == ["worker-0", "worker-1"]
        job = client.wait(client.submit(make_spec(workers=2, code={"scheme": "uncoded"}, iterations=3)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
    untrusted = Security(token="wrong")  # plaintext against a TLS listener: no connection at all
    with CodedClient(f"unix:{socket_path}", untrusted, timeout=5) as client, pytest.raises(grpc.RpcError):
        client.workers()


def test_the_command_line_takes_a_unix_master_from_the_flag_or_the_environment(secure):
    _local, tls, socket_path = secure
    env = {**os.environ, "CODED_TOKEN": TOKEN, "CODED_MASTER": f"unix:{socket_path}"}
    by_env = subprocess.run([sys.executable, "-m", "coded", "workers", *tls], capture_output=True, text=True,
                            timeout=60, env=env)
    assert by_env.returncode == 0 and "worker-1" in by_env.stdout, by_env.stderr
    env.pop("CODED_MASTER")
    by_flag = subprocess.run([sys.executable, "-m", "coded", "workers", "--master", f"unix:{socket_path}", *tls],
                             capture_output=True, text=True, timeout=60, env=env)
    assert by_flag.returncode == 0 and "worker-1" in by_flag.stdout, by_flag.stderr
    missing = socket_path.with_name("none.sock")
    nobody = subprocess.run([sys.executable, "-m", "coded", "workers", "--master", f"unix:{missing}", *tls],
                            capture_output=True, text=True, timeout=60, env=env)
    assert nobody.returncode == 2
    assert nobody.stderr.strip().splitlines()[-1] == (f"error: cannot reach the master at unix:{missing}: no socket "
                                                      "at that path (is a master listening there: `coded master "
                                                      "--unix-socket`, `coded local --link`?)")


def test_a_second_master_does_not_take_a_live_masters_socket(secure, tmp_path):
    local, _tls, socket_path = secure
    second = subprocess.run([sys.executable, "-m", "coded", "master", "--port", "0", "--state-dir",
                             str(tmp_path / "second"), "--unix-socket", str(socket_path)],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 2
    assert f"cannot listen on unix:{socket_path}: another server listens there" in second.stderr, second.stderr
    with CodedClient(f"unix:{socket_path}", local.security) as client:  # still the first master's
        assert len(client.workers()) == 2
    too_long = tmp_path / ("x" * 120)
    refused = subprocess.run([sys.executable, "-m", "coded", "master", "--port", "0", "--state-dir",
                              str(tmp_path / "third"), "--unix-socket", str(too_long)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "longer than a Unix socket's 107 bytes" in refused.stderr, refused.stderr
