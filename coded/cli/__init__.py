"""The ``coded`` command: run masters and workers, submit and follow jobs, try it locally.

One module per group of commands (:mod:`~coded.cli.servers`, :mod:`~coded.cli.jobs`,
:mod:`~coded.cli.cluster`, :mod:`~coded.cli.plan`), each with its sub-commands' arguments; the
options they share in :mod:`~coded.cli.arguments`, all of them assembled by
:mod:`~coded.cli.parser`; what they print in :mod:`~coded.cli.output`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coded.base.errors import JobSpecError, StorageError
from coded.cli.parser import build_parser
from coded.config import default_master

if TYPE_CHECKING:
    import grpc

__all__ = ["main"]


def _rpc_error() -> type[grpc.RpcError]:
    # imported when an error is raised, not before: `coded --help` never loads gRPC
    import grpc

    return grpc.RpcError


def _cluster_error() -> type[BaseException]:
    from coded.cluster.local import ClusterError

    return ClusterError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command that ``argv`` (default: the process's arguments) names; its exit status:
    2 for a failure it explains in one line (a spec's problems: a line each), 130 when interrupted."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except _rpc_error() as error:
        from coded.client.client import unreachable

        # commands that talk to a master (all but `coded health`) say so when they cannot reach it
        why = unreachable(error, args.master or default_master()) if "master" in vars(args) else None
        print(f"error: {why or f'{error.code().name}: {error.details()}'}", file=sys.stderr)
        return 2
    except (JobSpecError, OSError, ValueError, StorageError, _cluster_error()) as error:
        for problem in error.problems if isinstance(error, JobSpecError) else [error]:
            print(f"error: {problem}", file=sys.stderr)
        return 2
