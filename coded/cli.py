"""The ``coded`` command: run masters and workers, submit and follow jobs, try it locally."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from coded import __version__
from coded.base.errors import StorageError
from coded.base.words import plural
from coded.client import TERMINAL_STATES, CodedClient, Job, JobEvent, JobState, unreachable
from coded.codes.plan import ShiftedExponential
from coded.config import default_master, default_token, default_torch_device
from coded.jobs.spec import JobSpecError
from coded.local import LocalCluster, Stopped, StopSignals
from coded.v1 import master_pb2
from coded.wire.rpc import DEFAULT_MAX_MESSAGE_MB, Security

__all__ = ["main"]


def _security(args: argparse.Namespace) -> Security:
    return Security(
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        tls_ca=Path(args.tls_ca) if args.tls_ca else None,
        token=args.token or default_token(), server_name=args.tls_server_name)


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
    parser.add_argument("--master", default=None, help="master host:port (default: $CODED_MASTER or 127.0.0.1:50051)")
    _add_security(parser)


def route_address(master: str) -> str:
    """This machine's IP address on the route to ``master`` (host:port); no packet is sent."""
    import socket

    host = master.rsplit(":", 1)[0].strip("[]")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(host), 9))
        return probe.getsockname()[0]


def _client(args: argparse.Namespace) -> CodedClient:
    return CodedClient(args.master or default_master(), _security(args), max_message_mb=args.max_message_mb)


def _coded(args: argparse.Namespace, *words: str) -> str:
    """A `coded` command line that reaches the same master as this one (for hints)."""
    return "`coded " + " ".join([*words, *(["--master", args.master] if args.master else [])]) + "`"


# --- servers ---------------------------------------------------------------------------------------


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run a server's event loop: uvloop, which cuts the master's CPU per iteration by ~30%
    (measured, 8 workers), where it is installed; asyncio's own loop otherwise."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def cmd_master(args: argparse.Namespace) -> int:
    from coded.master.server import MasterConfig, run_master

    _run(run_master(MasterConfig(
        host=args.host, port=args.port, state_dir=Path(args.state_dir), metrics_port=args.metrics_port,
        security=_security(args), max_message_mb=args.max_message_mb, max_upload_mb=args.max_upload_mb,
        heartbeat_interval=args.heartbeat_interval, worker_timeout=args.worker_timeout)))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from coded.worker.server import WorkerConfig, run_worker

    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=args.blas_threads)
        os.environ["OMP_NUM_THREADS"] = str(args.blas_threads)  # PyTorch's threads, read when it is imported

    master = args.master or default_master()
    advertise = args.advertise or ""
    if advertise == "auto":
        if not args.port:
            raise ValueError("--advertise auto needs a fixed --port")
        advertise = f"{route_address(master)}:{args.port}"
    _run(run_worker(WorkerConfig(
        master=master, host=args.host, port=args.port, advertise=advertise,
        name=args.name or "", metrics_port=args.metrics_port, data_port=args.data_port, security=_security(args),
        max_message_mb=args.max_message_mb, state_dir=Path(args.state_dir) if args.state_dir else None,
        torch_device=args.torch_device or default_torch_device())))
    return 0


# --- jobs ------------------------------------------------------------------------------------------


def _job_json(job: Job) -> dict:
    def number(value: float) -> float | None:
        return None if math.isnan(value) else value

    return {
        "id": job.id, "state": job.state.name, "reason": job.reason, "iterations": job.iteration,
        "elapsed_s": job.elapsed_s, "final_loss": number(job.loss), "workers": list(job.workers),
        "stats": dict(job.stats),
        "verification": {"mode": job.verification.mode, "errors": job.verification.errors,
                         "tolerance": job.verification.tolerance, "summary": job.verification.summary},
        "wrong_replies": [{"position": w.position, "worker": w.worker, "located": w.located,
                           "quarantined": w.quarantined, "quarantined_after": w.quarantined_after}
                          for w in job.wrong_replies],
        "history": [{
            "iteration": r.iteration, "loss": number(r.loss), "elapsed_s": r.elapsed_s,
            "duration_s": r.duration_s, "responders": list(r.responders),
            "test_loss": number(r.test_loss), "test_accuracy": number(r.test_accuracy), "test_auc": number(r.test_auc),
            "checked": r.checked, "errors_detected": r.errors_detected, "errors_corrected": r.errors_corrected,
            "located": list(r.located), "quarantined": list(r.quarantined),
        } for r in job.history],
    }


def _measures(job: Job) -> str:
    """What a job has measured so far that applies to its kind ("" before its first iteration):
    a gradient job's training loss, a matvec job's eigen-residual, a CodeNet job's rollbacks and
    corrections; a matmul job has its product and nothing to show before it."""
    if job.kind == "codenet":
        stats = job.stats
        return (f"{plural(int(stats['rollbacks']), 'rollback')}, {int(stats.get('errors_corrected', 0))} corrected"
                if "rollbacks" in stats else "")
    if math.isnan(job.loss) or job.kind == "matmul":
        return ""
    return f"{'residual' if job.kind == 'matvec' else 'loss'} {job.loss:.6g}"


def _state_line(job: Job) -> str:
    """The job's state and, while it waits or has ended badly, why."""
    return f"{job.id} {job.state}" + (f": {job.reason}" if job.reason else "")


def _checks_lines(job: Job) -> list[str]:
    """What a job checks and what it found, for `coded status JOB`."""
    stats = job.stats
    lines = [f"  checks: {job.verification.mode or '-'}: {job.verification.summary or '-'}"]
    if job.verification.mode not in ("", "off", "codenet"):
        lines.append(f"  iterations checked {int(stats.get('iterations_checked', 0))}, unchecked "
                     f"{int(stats.get('iterations_unchecked', 0))}; wrong replies detected "
                     f"{int(stats.get('errors_detected', 0))}, corrected {int(stats.get('errors_corrected', 0))}")
    if "pieces_used" in stats:
        used, stopped = int(stats["pieces_used"]), int(stats.get("stopped_pieces", 0))
        lines.append(f"  streamed: {plural(stopped, 'piece')} of the {used} used came from workers stopped before "
                     f"they had sent their own partition (slow workers' partial work)")
    for w in job.wrong_replies:
        out = f", quarantined after iteration {w.quarantined_after}" if w.quarantined else ""
        lines.append(f"  worker {w.worker} (position {w.position}): located as wrong in "
                     f"{plural(w.located, 'iteration')}{out}")
    return lines


def _follow(client: CodedClient, job: Job, args: argparse.Namespace) -> Job:
    """Follow a job to its end: a progress bar on a terminal (not with --json), and on stderr a line
    for every change of state or of its reason (PENDING: how many workers it waits for)."""
    from tqdm import tqdm

    bar = None
    if not args.json and sys.stderr.isatty():
        bar = tqdm(total=job.iterations, initial=job.iteration, unit="it", file=sys.stderr)
    said = (job.state, job.reason)  # the caller has shown this one

    def show(event: JobEvent) -> None:
        nonlocal said
        now = event.job
        if (now.state, now.reason) != said and now.state not in TERMINAL_STATES:  # the end: _finish's line
            said = (now.state, now.reason)
            tqdm.write(_state_line(now), file=sys.stderr)
        if bar is not None:
            bar.n = now.iteration
            bar.set_postfix_str(f"{now.state} {_measures(now)}".strip(), refresh=False)
            bar.refresh()

    try:
        return client.wait(job.id, show)
    finally:
        if bar is not None:
            bar.close()


@contextlib.contextmanager
def _on_ctrl_c(args: argparse.Namespace, job: Job) -> Iterator[None]:
    """On Ctrl-C, say that the job goes on (only a client stopped) and how to follow or cancel it,
    and exit with 130 at once: a KeyboardInterrupt raised inside a gRPC call can leave the
    channel's teardown waiting (seen: a client that never exited), and nothing here needs
    cleaning up, as the job runs on the master."""
    def interrupted(signum: int, frame: object) -> None:
        print(f"\ninterrupted: job {job.id} goes on running on the master; {_coded(args, 'watch', job.id)} "
              f"follows it again, {_coded(args, 'cancel', job.id)} cancels it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _finish(job: Job, as_json: bool) -> int:
    if as_json:
        print(json.dumps(_job_json(job)))
    else:
        measures = _measures(job)
        line = f"{job.id} {job.state} after {plural(job.iteration, 'iteration')}, {job.elapsed_s:.1f} s"
        print(line + (f", {measures}" if measures else "") + (f": {job.reason}" if job.reason else ""))
        if job.wrong_replies:
            print("\n".join(_checks_lines(job)[1:]))
    return 0 if job.state == JobState.SUCCEEDED else 1


def _note_checks(job: Job) -> None:
    """Say on stderr what a submitted job waits for and checks, and whether it checks nothing."""
    if job.verification.summary:
        unchecked = job.verification.mode in ("off", "unchecked")
        print(f"{'note' if unchecked else 'checks'}: {job.verification.summary}", file=sys.stderr)


def cmd_submit(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.submit_file(args.spec)
        with _on_ctrl_c(args, job):
            # on stderr, whatever the output: the id is known even if the wait is interrupted
            print(f"submitted {_state_line(job)}", file=sys.stderr)
            if not args.json:
                _note_checks(job)
            if not args.wait:
                print(json.dumps(_job_json(job)) if args.json else job.id)
                return 0
            return _finish(_follow(client, job, args), args.json)


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.job:
            job = client.get(args.job, history=args.json)
            if args.json:
                print(json.dumps(_job_json(job)))
            else:
                measures = _measures(job)
                print(f"{job.id} {job.state} {job.iteration}/{job.iterations}" + (f" {measures}" if measures else "")
                      + (f" ({job.reason})" if job.reason else ""))
                print("\n".join(_checks_lines(job)))
            return 0
        jobs = client.jobs()
        if args.json:
            print(json.dumps([_job_json(j) for j in jobs]))
        for job in [] if args.json else jobs:
            wrong = int(job.stats.get("errors_detected", 0))
            out = sum(w.quarantined for w in job.wrong_replies)
            waiting = f"  ({job.reason})" if job.state in (JobState.PENDING, JobState.PAUSED) and job.reason else ""
            print(f"{job.id}  {job.state:9}  {job.iteration:>6}/{job.iterations:<6}  {_measures(job):<26}  "
                  f"checks {job.verification.mode or '-':9}  wrong {wrong}" + (f", {out} quarantined" if out else "")
                  + waiting)
        return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.get(args.job)
        with _on_ctrl_c(args, job):
            if job.state not in TERMINAL_STATES:  # an ended job: _finish's line says it
                print(_state_line(job), file=sys.stderr)
            return _finish(_follow(client, job, args), args.json)


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.cancel(args.job)
        print(f"{job.id} {job.state}")
        return 0


def cmd_result(args: argparse.Namespace) -> int:
    from coded.weights import check_suffix, write_result

    check_suffix(Path(args.out))  # before fetching anything
    with _client(args) as client:
        arrays = client.result(args.job)
        spec = json.loads(client.get(args.job).spec)
    # a torch model's parameters keep its compute dtype; the header says what built them
    model = spec.get("model", {})
    dtype = model.get("dtype", "float64") if model.get("type") == "torch" else "float64"
    metadata = {"coded.job": args.job, "coded.kind": spec["kind"], "coded.model": json.dumps(model)}
    print(f"wrote {args.out}: {write_result(Path(args.out), arrays, dtype, metadata)}")
    return 0


def _await_workers(client: CodedClient, count: int, timeout: float) -> list[master_pb2.WorkerInfo]:
    """The registered workers once ``count`` of them are alive; waits for the master to start too."""
    if count < 1 or timeout <= 0:
        raise ValueError(f"--wait and --timeout must be > 0 (got {count}, {timeout:g})")
    deadline, alive = time.monotonic() + timeout, -1
    while True:
        try:
            workers = client.workers()
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            workers = []  # the master is still starting
        now = sum(w.alive for w in workers)
        if now != alive:
            print(f"{now}/{count} workers alive", file=sys.stderr, flush=True)
            alive = now
        if now >= count:
            return workers
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {plural(now, 'worker')} of {count} alive at {client.address} after "
                               f"{timeout:g} s")
        time.sleep(0.2)


def cmd_workers(args: argparse.Namespace) -> int:
    with _client(args) as client:
        workers = _await_workers(client, args.wait, args.timeout) if args.wait else client.workers()
    if args.json:
        print(json.dumps([{"name": w.name, "address": w.address, "alive": w.alive,
                           "last_seen_s": w.last_seen_s, "jobs": list(w.jobs), "models": list(w.models),
                           "quarantined_by": list(w.quarantined_by)}
                          for w in workers]))
    for w in [] if args.json else workers:
        # the PyTorch architectures it builds (every worker has the numpy models)
        torch = sorted(m.removeprefix("torch/") for m in w.models if m.startswith("torch/"))
        builds = f"torch: {', '.join(torch)}" if torch else "numpy only"
        quarantined = f"  QUARANTINED by {', '.join(w.quarantined_by)}" if w.quarantined_by else ""
        print(f"{w.name:20} {w.address:22} {'alive' if w.alive else 'gone':5} {builds:26} "
              f"jobs: {', '.join(w.jobs) or '-'}{quarantined}")
    return 0


# --- local cluster ---------------------------------------------------------------------------------


def cmd_health(args: argparse.Namespace) -> int:
    """Exit 0 when the server at --address reports SERVING (container health checks)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from coded.wire.rpc import sync_channel

    with sync_channel(args.address, _security(args)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=args.timeout)
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if serving else 1


def cmd_certs(args: argparse.Namespace) -> int:
    from coded.certs import make_certs

    files = make_certs(Path(args.out), hosts=args.host, days=args.days)
    print("wrote " + ", ".join(str(p) for p in files.values()) + f"; keep {files['ca_key']} private")
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1 (got {args.workers})")
    if args.metrics_port and not 0 < args.metrics_port <= 65535 - args.workers:
        raise ValueError(f"--metrics-port must leave room for {args.workers} worker ports after it "
                         f"(got {args.metrics_port})")
    # a token by default: without one, anything that reaches the port could register as a worker
    token = default_token() or secrets.token_hex(16)
    with StopSignals() as stop:
        try:
            return _run_local(args, token, stop)
        except Stopped:  # SIGTERM, SIGINT or SIGHUP: a requested stop that completes is not a failure
            return 0


def _run_local(args: argparse.Namespace, token: str, stop: StopSignals) -> int:
    """Start the cluster, report it ready and supervise it until ``stop`` hears a signal; stop every
    process and remove the temporary state however it ends."""
    temporary = None if args.state_dir else tempfile.TemporaryDirectory(prefix="coded-local-")
    state = Path(temporary.name if temporary is not None else args.state_dir)
    port = args.port
    if port is None:
        port_text = default_master().rpartition(":")[2]
        if not port_text.isdigit():
            raise ValueError(f"$CODED_MASTER={default_master()!r} has no port: give --port")
        port = int(port_text)
    cluster = LocalCluster(args.workers, state, master_port=port, token=token, metrics_port=args.metrics_port,
                           stop=stop)
    try:
        cluster.start_master()
        print(f"master at {cluster.address} (state in {state}); starting {args.workers} workers", flush=True)
        cluster.start_workers(range(args.workers))
        cluster.wait_for_workers(args.workers, lambda alive: print(
            f"  {alive}/{args.workers} workers registered", flush=True))
        for key, process in [("master", cluster.master), *cluster.workers.items()]:
            name = "master" if key == "master" else f"worker-{key}"
            metrics = f", metrics on :{cluster.metrics_ports[key]}" if key in cluster.metrics_ports else ""
            print(f"  {name:10} pid {process.pid if process else '?'}{metrics}", flush=True)
        hint = "" if default_token() else f"; clients need the token: export CODED_TOKEN={token}"
        print(f"ready: {cluster.address} with {args.workers} workers{hint}; Ctrl-C stops all", flush=True)
        cluster.supervise(lambda line: print(line, flush=True))  # ends only with Stopped
    finally:
        cluster.stop()
        if temporary is not None:
            temporary.cleanup()


def cmd_demo(args: argparse.Namespace) -> int:
    from coded.demo import run_demo

    return run_demo(Path(args.out), workers=args.workers, iterations=args.iterations)


def _cost(text: str) -> ShiftedExponential:
    shift, _, mean = text.partition(":")
    try:
        return ShiftedExponential(float(shift), float(mean or 0))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: want SHIFT or SHIFT:MEAN in seconds, >= 0 ({error})") from None


def _measured_costs(args: argparse.Namespace) -> tuple[int, ShiftedExponential, ShiftedExponential]:
    """Workers, per-partition compute and the rest of an iteration, from a finished job's history."""
    from coded.codes.plan import fit_costs
    from coded.jobs.build import build_code
    from coded.jobs.spec import GradientJob, parse_job

    with _client(args) as client:
        job = client.get(args.from_job, history=True)
    spec = parse_job(job.spec)
    code = build_code(spec) if isinstance(spec, GradientJob) else None
    if code is None or code.asynchronous:
        raise ValueError(f"job {job.id}: plans are made from a synchronous gradient_coding job")
    if spec.faults.stragglers.model != "none":
        raise ValueError(f"job {job.id} injects stragglers (faults.stragglers), which its iteration times include: "
                         "measure on a job without injected faults and give the delay with --delay")
    records = list(job.history)[1:]  # the first iteration sets up channels
    d = len(code.partitions(0))
    compute, rest = fit_costs([r.duration_s for r in records], [list(r.worker_compute_s) for r in records], d)
    return args.workers or spec.workers, compute, rest


def _fraction(value: Any) -> str:
    return str(value) if value.denominator != 1 else f"{value.numerator}"


def _check_replies(args: argparse.Namespace) -> int:
    """What the planned job's check waits for beyond decoding: errors + 1, none with --verify off."""
    if args.errors < 0:
        raise ValueError(f"--errors must be >= 0 (got {args.errors})")
    return 0 if args.verify == "off" else args.errors + 1


def _checking_words(check: int) -> str:
    if not check:
        return "unchecked (verify: off)"
    return (f"checked as jobs are by default: each round waits for {check} "
            f"{'reply' if check == 1 else 'replies'} beyond what decoding needs")


def cmd_plan_matmul(args: argparse.Namespace) -> int:
    from coded.codes.matmul_plan import default_stragglers, matmul_options

    if not args.workers or not args.sizes:
        raise ValueError("plan --matmul needs --workers P and --sizes N1 N0 [NB]")
    if len(args.sizes) not in (2, 3) or min(args.sizes) < 1:
        raise ValueError(f"--sizes: give N1 N0 (A @ vector) or N1 N0 NB, all >= 1 (got {args.sizes})")
    check = _check_replies(args)
    vector = len(args.sizes) == 2
    sizes = (args.sizes[0], args.sizes[1], 1 if vector else args.sizes[2])
    most = args.workers - 2 - check  # a threshold R >= 2 must be left
    if args.stragglers and (min(args.stragglers) < 0 or max(args.stragglers) > most):
        raise ValueError(f"--stragglers: each must be in 0..{most} with {args.workers} workers, "
                         f"{_checking_words(check)} (got {args.stragglers})")
    wanted = sorted(set(args.stragglers or default_stragglers(args.workers, check)))
    options = matmul_options(args.workers, sizes, wanted, vector, args.max_error, check)
    b = f"a vector of {sizes[1]}" if vector else f"B {sizes[1]} x {sizes[2]}"
    print(f"P = {args.workers} workers, A {sizes[0]} x {sizes[1]}, {b}, {_checking_words(check)}: for each number "
          f"of stragglers s, each scheme's split with the largest recovery threshold R <= P - s - {check}")
    print(f"{'code':<26} {'R':>3} {'waits for':>9} {'tolerates':>9} {'work':>6} {'A':>5} {'B':>5} {'returns':>7} "
          f"{'master gets':>11} {'padding':>7}  {'unit circle':<20} chebyshev")
    for option in options:
        name = option.scheme + " " + " ".join(f"{k}={v}" for k, v in option.params)
        circle = f"{option.error:.1e}" if option.error is not None else "refused"
        real = f"{option.chebyshev_error:.1e}" if option.chebyshev_error is not None else "refused"
        print(f"{name:<26} {option.recovery_threshold:>3} {option.recovery_threshold + check:>9} "
              f"{option.stragglers:>9} {_fraction(option.work):>6} "
              f"{_fraction(option.stored_a):>5} {_fraction(option.stored_b):>5} {_fraction(option.returned):>7} "
              f"{_fraction(option.received) + 'x':>11} {100 * option.padding(sizes):>6.1f}%  {circle:<20} {real}")
    print("columns: R, the recovery threshold: results that decode A @ B; waits for: results a round waits for "
          "(R and the check); tolerates: slowest workers it does not wait for; work, A, B: each worker's share of "
          "the multiply-adds and of the inputs; returns: its result as a share of A @ B; master gets: what the "
          "master receives to decode, in multiples of A @ B; padding: extra multiply-adds of padding the inputs "
          "to the blocks; unit circle, chebyshev: the estimated worst relative float64 error of each construction "
          f"(refused above {args.max_error:g}; the unit circle is the default, chebyshev the original)")
    for s in wanted:
        accurate = [o for o in options if o.error is not None and o.stragglers >= s]
        if accurate:
            best = min(accurate, key=lambda o: (o.work, o.received))
            print(f"s = {s}: least work per worker among the accurate codes: {json.dumps(best.code())}")
        else:
            print(f"s = {s}: no code tolerates {plural(s, 'straggler')} accurately on {args.workers} workers; split "
                  "the product into independent jobs on fewer workers each (docs/codes.md, Numerical limits)")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from coded.codes.plan import RuntimeModel, plan, recommend, refusal

    if args.matmul:
        return cmd_plan_matmul(args)
    check = _check_replies(args)
    if args.from_job:
        args.workers, args.compute, args.communicate = _measured_costs(args)
    elif not (args.workers and args.compute and args.communicate):
        raise ValueError("give --from-job JOB, or --workers, --compute and --communicate")
    model = RuntimeModel(args.compute, args.communicate, args.delay)
    ranked = plan(model, args.workers, check=check, streamed=True)
    uncoded = next(c for c in ranked if c.scheme == "uncoded").predicted_s
    print(f"n = {args.workers}: worker time = d x compute {args.compute} + communicate {args.communicate} / m "
          f"+ delay {args.delay}; an iteration ends at the (n - s)-th fastest worker; codes "
          f"{_checking_words(check)}, so a code that does not wait for s workers holds d = s + {check} + m "
          "partitions per worker (uncoded: 1, unchecked)")
    print(f"{'rank':>4}  {'code':<32} {'d':>2}  {'sends':>5}  {'s/iteration':>11}  {'vs uncoded':>10}  builds")
    for rank, candidate in enumerate(ranked[: args.top], 1):
        why = refusal(candidate, args.workers)
        name = ("uncoded" if candidate.scheme == "uncoded" else f"cyclic streamed stragglers={candidate.s}"
                if candidate.streamed else f"ye_abbe stragglers={candidate.s} m={candidate.m}")
        print(f"{rank:>4}  {name:<32} {candidate.d:>2}  1/{candidate.m:<3}  {candidate.predicted_s:>11.4g}  "
              f"{uncoded / candidate.predicted_s:>9.2f}x  {'yes' if why is None else 'no: ' + why[:60]}")
    print("columns: code: the job's code section (ye_abbe with m = 1 costs what cyclic with `stream: off` does; "
          "cyclic streamed is cyclic's default, whose workers share the partitions' pieces as they go: its time is "
          "a fluid bound, and it holds d partitions but computes about one); d: data partitions each worker holds "
          "(whole replies: computes); sends: the share of a gradient each worker sends; s/iteration: expected seconds "
          "per iteration under the model above; vs uncoded: uncoded's expected time divided by this code's; "
          "builds: whether the code decodes accurately in float64 (else why not)")
    print(f"recommended code: {json.dumps(recommend(ranked, args.workers).code())}")
    return 0


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
    _add_master_address(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="one job, or all jobs")
    p.add_argument("job", nargs="?")
    p.add_argument("--json", action="store_true")
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
    p.add_argument("--address", default="127.0.0.1:50051")
    p.add_argument("--timeout", type=float, default=3.0)
    _add_security(p)
    p.set_defaults(func=cmd_health)

    p = sub.add_parser("certs", help="make a cluster CA and a certificate for mutual TLS")
    p.add_argument("--out", required=True)
    p.add_argument("--host", action="append", default=["localhost", "127.0.0.1"],
                   help="extra DNS name or IP the certificate is valid for (repeatable)")
    p.add_argument("--days", type=int, default=365)
    p.set_defaults(func=cmd_certs)

    p = sub.add_parser(
        "local", help="a master and N workers on loopback (foreground; Ctrl-C stops all)",
        description="Start a master and N workers as processes on 127.0.0.1 and keep them running until "
                    "this command is stopped (Ctrl-C, SIGTERM, SIGHUP; a killed launcher takes them with it). "
                    "A worker that dies is reported and stays gone, as a dead machine would: its jobs go on "
                    "without it, or pause until enough workers are back. A master that dies is reported and "
                    "restarted on its port with its state dir: it resumes its jobs and the workers rejoin. "
                    "Clients use the token in $CODED_TOKEN (or the random one printed).")
    p.add_argument("--workers", type=int, default=8, help="workers to start, named worker-0 ... (default: %(default)s)")
    p.add_argument("--port", type=int, help="the master's gRPC port (default: the port of $CODED_MASTER, the "
                                            "address clients use, or 50051)")
    p.add_argument("--state-dir", help="the master's state dir and the logs (default: a temporary directory, "
                                       "deleted when this command stops)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="the master's /metrics port; worker i serves /metrics on this port + 1 + i "
                        "(default: no metrics; docs/architecture.md shows how to scrape them)")
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
    p.add_argument("--compute", type=_cost, metavar="SHIFT[:MEAN]",
                   help="seconds to compute one partition's gradient: shift + exponential of this mean")
    p.add_argument("--communicate", type=_cost, metavar="SHIFT[:MEAN]",
                   help="seconds an iteration spends beyond its slowest worker's compute for a whole gradient "
                        "(sending, decoding)")
    p.add_argument("--delay", type=_cost, default="0", metavar="SHIFT[:MEAN]",
                   help="straggler delay of each call (the job's faults model, or fitted)")
    p.add_argument("--top", type=int, default=10, help="codes to list")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("demo", help="coded vs uncoded vs ignoring stragglers on a local cluster")
    p.add_argument("--out", default="out/demo", help="directory for the table and the plot")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--iterations", type=int, default=60)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except grpc.RpcError as error:
        # commands that talk to a master (all but `coded health`) say so when they cannot reach it
        why = unreachable(error, args.master or default_master()) if "master" in vars(args) else None
        print(f"error: {why or f'{error.code().name}: {error.details()}'}", file=sys.stderr)
        return 2
    except (JobSpecError, OSError, ValueError, StorageError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
