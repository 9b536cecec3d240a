"""Certificates for a TLS cluster: a private CA and one certificate it signs for every process.

Internal calls (master <-> workers, peer <-> peer) connect by address, and addresses change
(containers, pods). So every certificate names the cluster, ``coded``, and clients verify that name
(``--tls-server-name``, default ``coded``) against the cluster CA instead of the address: with
mutual TLS, only holders of a certificate from this CA can join or talk to the cluster.

    coded certs --out certs/                 # ca.pem, cert.pem, key.pem (+ ca-key.pem: keep it safe)

A directory that already holds certificates is never overwritten by accident: a new CA would lock
out every running process that trusts the old one (``--keep`` uses what is there, as a container
that makes the certificates at every start needs; ``--replace`` rotates them).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CLUSTER_NAME", "make_certs"]

CLUSTER_NAME = "coded"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


Existing = Literal["refuse", "keep", "replace"]


def make_certs(out: Path, hosts: Sequence[str] = ("localhost", "127.0.0.1"), days: int = 365,
               ca_name: str = "coded cluster CA", existing: Existing = "refuse",
               ca_key: Path | None = None) -> dict[str, Path]:
    """Write ca.pem, cert.pem and key.pem into ``out``, and the CA's private key to ``ca_key``
    (default ``out``/ca-key.pem).

    Parameters
    ----------
    hosts : sequence of str
        Extra DNS names or IP addresses the certificate is valid for (besides ``coded``).
    existing : {"refuse", "keep", "replace"}
        What to do when ``out`` already holds some of the files: raise, use a complete set as it is
        (nothing is written), or make new ones over them.
    ca_key : Path, optional
        Where the CA's key goes: somewhere the cluster's processes cannot read, since whoever holds
        it can make certificates the cluster trusts (docker-compose.yml keeps it in its own volume).

    Returns
    -------
    dict of str to Path
        The files, by role: ``ca``, ``ca_key``, ``cert``, ``key``.

    Raises
    ------
    FileExistsError
        Some of the files exist and ``existing`` is "refuse", or ``existing`` is "keep" and the set
        is incomplete.
    """
    out = Path(out)
    files = {"ca": out / "ca.pem", "ca_key": Path(ca_key) if ca_key else out / "ca-key.pem", "cert": out / "cert.pem",
             "key": out / "key.pem"}
    present = [path.name for path in files.values() if path.exists()]
    if existing == "keep" and len(present) == len(files):
        return files
    if present and existing != "replace":
        raise FileExistsError(
            f"{out} already holds {', '.join(present)}"
            + (f": --keep needs the whole set ({', '.join(str(path) for path in files.values())})"
               if existing == "keep" else
               ": pass --keep to use them, or --replace to make a new CA (it locks out every process that "
               "trusts the old one until they get the new files)"))
    out.mkdir(parents=True, exist_ok=True)
    files["ca_key"].parent.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    authority = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
          .public_key(authority.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(authority, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(CLUSTER_NAME)]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(_name(CLUSTER_NAME)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(authority, hashes.SHA256()))
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for name, data in (("ca_key", _pem_key(authority)), ("key", _pem_key(key))):
        files[name].touch(mode=0o600)
        files[name].write_bytes(data)
    return files
