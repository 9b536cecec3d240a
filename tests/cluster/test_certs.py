"""`coded certs` never replaces a cluster's CA by accident: existing files are an error unless the
caller keeps them (a container that runs it at every start) or replaces them (rotation)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from coded.cluster.certs import make_certs


def contents(files: dict[str, Path]) -> dict[str, bytes]:
    return {role: path.read_bytes() for role, path in files.items()}


def test_existing_certificates_are_refused_kept_or_replaced_as_asked(tmp_path):
    first = contents(make_certs(tmp_path))
    with pytest.raises(FileExistsError, match=r"already holds ca\.pem, ca-key\.pem, cert\.pem, key\.pem: pass --keep"):
        make_certs(tmp_path)
    assert contents(make_certs(tmp_path, existing="keep")) == first
    replaced = contents(make_certs(tmp_path, existing="replace"))
    assert replaced["ca_key"] != first["ca_key"]
    new_ca = x509.load_pem_x509_certificate(replaced["ca"])
    x509.load_pem_x509_certificate(replaced["cert"]).verify_directly_issued_by(new_ca)


def test_the_ca_key_can_live_apart_from_what_the_servers_mount(tmp_path):
    from cryptography.hazmat.primitives import serialization

    files = make_certs(tmp_path / "certs", ca_key=tmp_path / "ca/ca-key.pem")
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    key = serialization.load_pem_private_key(files["ca_key"].read_bytes(), None)
    assert key.public_key() == x509.load_pem_x509_certificate(files["ca"].read_bytes()).public_key()
    assert oct(files["ca_key"].stat().st_mode & 0o777) == "0o600"
    assert make_certs(tmp_path / "certs", ca_key=tmp_path / "ca/ca-key.pem", existing="keep") == files


def test_keep_needs_the_whole_set(tmp_path):
    make_certs(tmp_path)
    (tmp_path / "key.pem").unlink()
    with pytest.raises(FileExistsError, match=r"--keep needs the whole set"):
        make_certs(tmp_path, existing="keep")
    assert not (tmp_path / "key.pem").exists()  # nothing was written over the rest


def test_the_command_says_kept_or_fails_in_one_line(tmp_path):
    def certs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coded.cli", "certs", "--out", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=60)

    assert certs().stdout.startswith("wrote ")
    again = certs()
    assert again.returncode == 2 and again.stderr.startswith(f"error: {tmp_path} already holds ca.pem")
    assert certs("--keep").stdout.startswith("kept ")
    assert certs("--replace").stdout.startswith("wrote ")
    assert certs("--keep", "--replace").returncode == 2  # one or the other
