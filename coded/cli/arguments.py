"""The arguments several sub-commands share: the security options of every process that talks
gRPC, the master's address of every client command, and ``--verbose`` of those that say what a job
checks. Each command's module declares its own sub-commands with these (``add_<command>``)."""

from __future__ import annotations

import argparse
from typing import TypeAlias

from coded.wire.limits import DEFAULT_MAX_MESSAGE_MB

__all__ = ["DEFAULT_SLOW_FACTOR", "Commands", "add_master_address", "add_security", "add_verbose", "slowed"]

#: how much slower ``--slow-link`` and ``--slow-worker`` make a worker's link or computing by default
DEFAULT_SLOW_FACTOR = 10.0

#: what ``ArgumentParser.add_subparsers`` returns: each ``add_<command>`` adds its sub-command to it
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_security(parser: argparse.ArgumentParser) -> None:
    """The TLS files, the token and the largest message: what ``options.security`` reads."""
    group = parser.add_argument_group("security")
    group.add_argument("--tls-cert", help="PEM certificate of this process")
    group.add_argument("--tls-key", help="PEM private key of this process")
    group.add_argument("--tls-ca", help="PEM CA: servers require client certificates from it; clients trust it")
    group.add_argument("--tls-server-name", default="coded", help="name expected in servers' certificates "
                       "(default %(default)s, as made by `coded certs`)")
    group.add_argument("--token", help="bearer token (default: $CODED_TOKEN)")
    group.add_argument("--max-message-mb", type=int, default=DEFAULT_MAX_MESSAGE_MB,
                       help="largest gRPC message; bigger arrays are chunked (default %(default)s)")


def add_master_address(parser: argparse.ArgumentParser) -> None:
    """``--master`` and the security options: a client of the master (``options.connect``)."""
    parser.add_argument("--master", default=None, help="master host:port, or unix:PATH (default: $CODED_MASTER or "
                                                       "127.0.0.1:50051)")
    add_security(parser)


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """``--verbose``: say in full what a job checks."""
    # its own name: a subcommand's default would overwrite `coded -v`'s value of the same name
    parser.add_argument("--verbose", dest="in_full", action="store_true",
                        help="say in full what the job checks (default: in a line)")


def slowed(text: str) -> tuple[int, float]:
    """An argument ``N`` or ``N:FACTOR``: N workers whose links (``coded local``, ``coded plan``)
    or computing (``coded plan``) run FACTOR times slower."""
    count, _, factor = text.partition(":")
    try:
        parsed = int(count), float(factor or DEFAULT_SLOW_FACTOR)
    except ValueError:
        parsed = (0, 0.0)
    if parsed[0] < 1 or not parsed[1] > 1:
        raise argparse.ArgumentTypeError(f"{text!r}: want N or N:FACTOR, N >= 1 workers FACTOR > 1 times slower "
                                         f"(default {DEFAULT_SLOW_FACTOR:g})")
    return parsed
