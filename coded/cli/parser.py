"""The ``coded`` command's arguments: one sub-command each, with the function that runs it."""

from __future__ import annotations

import argparse

from coded import __version__
from coded.cli.cluster import DEFAULT_SLOW_FACTOR, cmd_demo, cmd_local, cmd_workers, rate, slow_link
from coded.cli.jobs import cmd_cancel, cmd_result, cmd_status, cmd_submit, cmd_watch
from coded.cli.plan import cmd_plan, cost
from coded.cli.servers import cmd_certs, cmd_health, cmd_master, cmd_worker
from coded.cluster.local import MASTER_LINK
from coded.wire.rpc import DEFAULT_MAX_MESSAGE_MB

__all__ = ["build_parser"]


def _add_security(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security")
    group.add_argument("--tls-cert", help="PEM certificate of this process")
    group.add_argument("--tls-key", help="PEM private key of this process")
    group.add_argument("--tls-ca", help="PEM CA: servers require client certificates from it; clients trust it")
    group.add_argument("--tls-server-name", default="coded", help="name expected in servers' certificates "
                       "(default %(default)s, as made by `coded certs`)")
    group.add_argument("--token", help="bearer token (default: $CODED_TOKEN)")
    group.add_argument("--max-message-mb", type=int, default=DEFAULT_MAX_MESSAGE_MB,
                       help="largest gRPC message; bigger arrays are chunked (default %(default)s)")


def _add_master_address(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default=None, help="master host:port, or unix:PATH (default: $CODED_MASTER or "
                                                       "127.0.0.1:50051)")
    _add_security(parser)


def _add_verbose(parser: argparse.ArgumentParser) -> None:
    # its own name: a subcommand's default would overwrite `coded -v`'s value of the same name
    parser.add_argument("--verbose", dest="in_full", action="store_true",
                        help="say in full what the job checks (default: in a line)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coded", description="Coded distributed computing on a gRPC cluster.")
    parser.add_argument("--version", action="version", version=f"coded {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("master", help="run a master")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50051)
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus /metrics on this port (0: any free port, printed at start)")
    p.add_argument("--state-dir", default="state", help="jobs, checkpoints and uploads (default %(default)s)")
    p.add_argument("--max-upload-mb", type=int, default=1024, help="largest total of files per job")
    p.add_argument("--heartbeat-interval", type=float, default=1.0, help="seconds between worker heartbeats")
    p.add_argument("--worker-timeout", type=float, default=3.0,
                   help="seconds without a heartbeat before a worker counts as gone")
    p.add_argument("--unix-socket", metavar="PATH", help="also listen on this filesystem Unix socket (clients: "
                   "--master unix:PATH): processes on this machine reach it by its path, also from another "
                   "network namespace")
    p.add_argument("--link", metavar="RATE",
                   help="bandwidth of the workers' links (tc's units: 100mbit, 1gbit): what the master predicts a "
                        "gradient job's iterations take, and how its workers reply, streamed or whole, is chosen "
                        "for it at submission (default: none for workers on this machine, 10gbit for others)")
    p.add_argument("--fixed-workers", type=int, metavar="N",
                   help="the cluster is N workers and no others will register (coded local sets it): once all N "
                        "have, a job that needs more workers than are alive is refused, or fails at once, instead "
                        "of waiting timeouts.pending_s for workers that will not come")
    _add_security(p)
    p.set_defaults(func=cmd_master)

    p = sub.add_parser("worker", help="run a worker that registers with a master")
    p.add_argument("--master", default=None, help="master host:port (default: $CODED_MASTER or 127.0.0.1:50051)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--advertise", help="host:port the master should use (default host:port); 'auto': this "
                   "machine's address on the route to the master, with --port (containers, pods)")
    p.add_argument("--name", help="stable worker name (default: the advertised address)")
    p.add_argument("--data-port", type=int, default=0, help="port of the data plane, where the master sends "
                   "rounds (docs/dataplane.md), on the advertised host; 0 picks a free port")
    p.add_argument("--no-shared-memory", dest="shared_memory", action="store_false",
                   help="a master on this host sends the rounds' arrays through the local socket, not shared "
                        "memory (docs/dataplane.md, Shared memory)")
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus /metrics on this port (0: any free port, printed at start)")
    p.add_argument("--state-dir", help="CodeNet checkpoints of this worker (default: a new temporary directory)")
    p.add_argument("--blas-threads", type=int, help="threads of numpy's BLAS and of PyTorch (default: all "
                   "cores); use 1 when several workers share a machine")
    p.add_argument("--torch-device", help="where torch models compute: cpu (default), cuda, cuda:1, ... "
                   "($CODED_TORCH_DEVICE)")
    _add_security(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("submit", help="submit a job spec (YAML)")
    p.add_argument("spec", help="job specification file")
    p.add_argument("--wait", action="store_true", help="follow the job; exit 0 only if it succeeds")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_verbose(p)
    _add_master_address(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="one job, or all jobs")
    p.add_argument("job", nargs="?")
    p.add_argument("--json", action="store_true")
    _add_verbose(p)
    _add_master_address(p)
    p.set_defaults(func=cmd_status)

    for name, func, text in (("watch", cmd_watch, "follow a job to its end"), ("cancel", cmd_cancel, "cancel a job")):
        p = sub.add_parser(name, help=text)
        p.add_argument("job")
        if name == "watch":
            p.add_argument("--json", action="store_true")
        _add_master_address(p)
        p.set_defaults(func=func)

    p = sub.add_parser("result", help="write a job's result: .npz for all arrays, .npy for a result of one array "
                                      "(a product), .safetensors or .pt (with PyTorch) for a model's state dict")
    p.add_argument("job")
    p.add_argument("--out", required=True)
    _add_master_address(p)
    p.set_defaults(func=cmd_result)

    p = sub.add_parser("workers", help="registered workers")
    p.add_argument("--json", action="store_true")
    p.add_argument("--wait", type=int, metavar="N", help="first wait until N workers are alive (and the master "
                   "is up): for scripts that start a cluster, e.g. after `coded local &`")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits (default %(default)s)")
    _add_master_address(p)
    p.set_defaults(func=cmd_workers)

    p = sub.add_parser("health", help="check a server's gRPC health (exit 0 when SERVING)")
    p.add_argument("--address", help="the server's host:port (default: $CODED_MASTER or 127.0.0.1:50051)")
    p.add_argument("--timeout", type=float, default=3.0)
    _add_security(p)
    p.set_defaults(func=cmd_health)

    p = sub.add_parser("certs", help="make a cluster CA and a certificate for mutual TLS")
    p.add_argument("--out", required=True)
    p.add_argument("--host", action="append", default=["localhost", "127.0.0.1"],
                   help="extra DNS name or IP the certificate is valid for (repeatable)")
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--ca-key", help="where the CA's private key goes (default OUT/ca-key.pem): keep it where the "
                                    "cluster's processes cannot read it")
    existing = p.add_mutually_exclusive_group()
    existing.add_argument("--keep", dest="existing", action="store_const", const="keep", default="refuse",
                          help="when --out already holds a complete set, use it and write nothing (a container "
                               "that runs this at every start); without --keep or --replace, existing files "
                               "are an error")
    existing.add_argument("--replace", dest="existing", action="store_const", const="replace",
                          help="make a new CA and certificate over existing ones (rotation: every process "
                               "needs the new files)")
    p.set_defaults(func=cmd_certs)

    p = sub.add_parser(
        "local", help="a master and N workers on loopback (foreground; Ctrl-C stops all)",
        description="Start a master and N workers as processes on 127.0.0.1 and keep them running until "
                    "this command is stopped (Ctrl-C, SIGTERM, SIGHUP; a killed launcher takes them with it). "
                    "A worker that dies is reported and stays gone, as a dead machine would: its jobs go on "
                    "without it, or pause until enough workers are back. A master that dies is reported and "
                    "restarted on its port with its state dir: it resumes its jobs and the workers rejoin. "
                    "Clients use the token in $CODED_TOKEN (or the random one printed). With --link, every "
                    "process runs on a host of its own: a network namespace behind a link shaped with tc tbf in "
                    "each direction (needs root and iproute2; the namespaces are created here and removed when "
                    "it stops, and the machine's own interfaces are never touched: docs/links.md); clients "
                    "reach the master through a Unix socket, whose address it prints (export it as "
                    "CODED_MASTER).")
    p.add_argument("--workers", type=int, default=8, help="workers to start, named worker-0 ... (default: %(default)s)")
    p.add_argument("--port", type=int, help="the master's gRPC port (default: the port of $CODED_MASTER, the "
                                            "address clients use, or 50051)")
    p.add_argument("--state-dir", help="the master's state dir and the logs (default: a temporary directory, "
                                       "deleted when this command stops)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="the master's /metrics port; worker i serves /metrics on this port + 1 + i "
                        "(default: no metrics; docs/architecture.md shows how to scrape them)")
    links = p.add_argument_group("links of finite bandwidth (root and iproute2)")
    links.add_argument("--link", type=rate, metavar="RATE",
                       help="each worker's link, in tc's units: 100mbit, 1gbit, 1.5mbit (bit, kbit, mbit, gbit: "
                            "bits per second; bps, kbps, mbps, gbps: BYTES per second)")
    links.add_argument("--master-link", type=rate, metavar="RATE", help=f"the master's link (default: {MASTER_LINK})")
    links.add_argument("--slow-link", type=slow_link, metavar="N[:FACTOR]",
                       help=f"slow links as a fault: N workers' links run FACTOR times slower (default "
                            f"{DEFAULT_SLOW_FACTOR:g}), the same N all the time unless --slow-every")
    links.add_argument("--slow-every", type=float, metavar="SECONDS",
                       help="draw the slow workers again every SECONDS (default: never)")
    links.add_argument("--slow-seed", type=int, default=0, help="seed of the draws of slow workers (default: 0)")
    p.set_defaults(func=cmd_local)

    p = sub.add_parser("plan", help="the gradient code with the lowest expected iteration time for measured costs; "
                                    "with --matmul, the matmul codes that decode accurately on P workers",
                       description="Rank uncoded and every Ye & Abbe code (m = 1: cyclic) for n workers by "
                                   "expected seconds per iteration (docs/results.md explains the model). With "
                                   "--matmul: for P workers and the matrix sizes, each matmul scheme's split, its "
                                   "recovery threshold and its float64 accuracy (docs/codes.md).")
    p.add_argument("--matmul", action="store_true", help="plan a matmul or matvec job (--workers, --sizes)")
    p.add_argument("--sizes", type=int, nargs="+", metavar="N",
                   help="--matmul: N1 N0 NB for A (N1 x N0) @ B (N0 x NB), or N1 N0 for A @ a vector")
    p.add_argument("--stragglers", type=int, nargs="+", metavar="S",
                   help="--matmul: slowest workers not to wait for (default 1, 2, 4, P/8, P/4)")
    p.add_argument("--max-error", type=float, default=1e-6, help="--matmul: the code.max_error of the job")
    p.add_argument("--verify", choices=("on", "off"), default="on",
                   help="plan for checked jobs (on: the default of every job, one reply beyond decoding) or for "
                        "`verify: off`")
    p.add_argument("--errors", type=int, default=0, metavar="E",
                   help="plan for `verify: {errors: E}`: E + 1 replies beyond decoding (default 0)")
    p.add_argument("--from-job", metavar="JOB",
                   help="fit --compute and --communicate to a finished job's history (a job without injected "
                        "stragglers; uncoded is simplest)")
    _add_master_address(p)
    p.add_argument("--workers", type=int, help="n, or P with --matmul (default: the job's)")
    p.add_argument("--compute", type=cost, metavar="SHIFT[:MEAN]",
                   help="seconds to compute one partition's gradient: shift + exponential of this mean")
    p.add_argument("--communicate", type=cost, metavar="SHIFT[:MEAN]",
                   help="seconds an iteration spends beyond its slowest worker's compute for a whole gradient "
                        "(sending, decoding)")
    p.add_argument("--delay", type=cost, default="0", metavar="SHIFT[:MEAN]",
                   help="straggler delay of each call (the job's faults model, or fitted)")
    p.add_argument("--top", type=int, default=10, help="codes to list")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("demo", help="coded vs uncoded vs ignoring stragglers on a local cluster")
    p.add_argument("--out", default="out/demo", help="directory for the table and the plot")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--iterations", type=int, default=60)
    p.set_defaults(func=cmd_demo)
    return parser
