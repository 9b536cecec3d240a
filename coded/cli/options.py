"""What every command that talks to a server takes from its arguments: the security settings, the
client of the master they name, and a hint of a command line that reaches the same master."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from coded.config import default_master, default_token

if TYPE_CHECKING:  # gRPC is imported by the commands that talk to a server, not by `coded --help`
    from coded.client import CodedClient
    from coded.wire.rpc import Security

__all__ = ["connect", "hint", "security"]


def security(args: argparse.Namespace) -> Security:
    """The TLS files and the token the arguments give (the token: --token, else $CODED_TOKEN)."""
    from coded.wire.rpc import Security

    return Security(
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        tls_ca=Path(args.tls_ca) if args.tls_ca else None,
        token=args.token or default_token(), server_name=args.tls_server_name)


def connect(args: argparse.Namespace) -> CodedClient:
    """A client of the master that ``--master`` (or $CODED_MASTER) names."""
    from coded.client import CodedClient

    return CodedClient(args.master or default_master(), security(args), max_message_mb=args.max_message_mb)


def hint(args: argparse.Namespace, *words: str) -> str:
    """A `coded` command line that reaches the same master as this one (for hints)."""
    return "`coded " + " ".join([*words, *(["--master", args.master] if args.master else [])]) + "`"
