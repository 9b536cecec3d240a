"""``coded plan``: the gradient code with the lowest expected iteration time for measured costs, or
the matmul codes that decode accurately on P workers; its arguments (``add_plan``) beside the
functions that run it."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from coded.base.words import link_words, plural
from coded.cli.arguments import Commands, add_master_address, slowed
from coded.cli.options import connect

if TYPE_CHECKING:  # the models (numpy, scipy) are imported by the command, not by `coded --help`
    from coded.client.costs import JobCosts
    from coded.codes.plan import ClusterModel, ShiftedExponential

__all__ = ["add_plan", "cmd_plan", "cost"]


def cost(text: str) -> ShiftedExponential:
    """An argument ``SHIFT`` or ``SHIFT:MEAN`` (seconds): a shift plus an exponential of that mean."""
    from coded.codes.plan import ShiftedExponential

    shift, _, mean = text.partition(":")
    try:
        return ShiftedExponential(float(shift), float(mean or 0))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: want SHIFT or SHIFT:MEAN in seconds, >= 0 ({error})") from None


def _measured_costs(args: argparse.Namespace) -> JobCosts:
    """Each worker's costs fitted to a finished job's history (:func:`coded.client.costs.fit_job`),
    said as they are fitted."""
    from coded.client.costs import fit_job

    with connect(args) as client:
        job = client.get(args.from_job, history=True)
    costs = fit_job(job)
    print(f"measured on job {job.id} ({costs.mode}): each responder computed {costs.partitions:.3g} partitions' "
          "worth of samples per iteration (median)")
    if costs.per_worker:
        print(f"{'worker':>6}  {'name':<12}  {'replies used':>12}  {'compute/partition':>34}  "
              f"{'gradient over link':>18}")
        iterations = len(job.history) - 1  # the first is not fitted
        for position, (worker, used) in enumerate(zip(costs.model.workers, costs.replied, strict=True)):
            name = job.workers[position] if position < len(job.workers) else "?"
            seconds = f"{worker.compute}" if used >= 2 else f">= {worker.compute.shift:.4g} s"
            print(f"{position:>6}  {name:<12}  {used:>5} of {iterations:<4}  {seconds:>34}  "
                  f"{worker.communicate.shift:>16.4g} s")
        print(f"compute/partition: one partition's gradient as the clock saw it (waits for a core or a CPU quota "
              f"included), beside {costs.model.workers[0].fixed:.4g} s every round of a worker costs whatever it "
              "computes; a worker whose reply was used in fewer than 2 iterations was slower than the others "
              "every time: its time is at least when the iterations' last used reply arrived")
    if costs.link_measured:
        typical = costs.typical()
        trip = typical.communicate.shift
        bits = 8 * costs.gradient_bytes / max(trip, 1e-12)
        print(f"measured on job {job.id}: a whole gradient of {costs.gradient_bytes} bytes crosses the median "
              f"worker's link in {trip:.4g} s ({link_words(bits)}); every iteration also spends "
              f"{costs.model.overhead:.4g} s after its last reply that no code changes (decoding, the step)")
    return costs


def _what_if(args: argparse.Namespace, model: ClusterModel) -> ClusterModel:
    """The model with ``--slow-link`` and ``--slow-worker`` applied: the first N positions, said."""
    n = len(model.workers)
    changes: dict[str, dict[int, float]] = {"link": {}, "worker": {}}
    for what, given in (("link", args.slow_link), ("worker", args.slow_worker)):
        if given is not None:
            count, factor = given
            if count > n:
                raise ValueError(f"--slow-{what} {count}: more than the {n} workers")
            changes[what] = dict.fromkeys(range(count), factor)
            print(f"what if: worker{'s' if count > 1 else ''} {', '.join(map(str, range(count)))}'s "
                  f"{'link' if what == 'link' else 'computing'} ran {factor:g} times slower")
    return model.slowed(changes["link"], changes["worker"])


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


def add_plan(commands: Commands) -> None:
    p = commands.add_parser("plan", help="the gradient code with the lowest expected iteration time for measured "
                                         "costs; with --matmul, the matmul codes that decode accurately on P workers",
                            description="Rank uncoded and every Ye & Abbe code (m = 1: cyclic) for n workers by "
                                        "expected seconds per iteration (docs/results.md explains the model). With "
                                        "--matmul: for P workers and the matrix sizes, each matmul scheme's split, "
                                        "its recovery threshold and its float64 accuracy (docs/codes.md).")
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
    add_master_address(p)
    p.add_argument("--workers", type=int, help="n, or P with --matmul (default: the job's)")
    p.add_argument("--compute", type=cost, metavar="SHIFT[:MEAN]",
                   help="seconds to compute one partition's gradient: shift + exponential of this mean")
    p.add_argument("--communicate", type=cost, metavar="SHIFT[:MEAN]",
                   help="seconds an iteration spends beyond its slowest worker's compute for a whole gradient "
                        "(sending, decoding)")
    p.add_argument("--delay", type=cost, default="0", metavar="SHIFT[:MEAN]",
                   help="straggler delay of each call (the job's faults model, or fitted)")
    p.add_argument("--slow-link", type=slowed, metavar="N[:FACTOR]",
                   help="what if N workers' links ran FACTOR times slower (default 10), both ways: as `coded local "
                        "--slow-link` makes them")
    p.add_argument("--slow-worker", type=slowed, metavar="N[:FACTOR]",
                   help="what if N workers computed FACTOR times slower (default 10): a slower machine, a CPU quota")
    p.add_argument("--top", type=int, default=10, help="codes to list")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from coded.codes.plan import ClusterModel, RuntimeModel, plan, recommend, refusal
    from coded.jobs.spec.gradient import DEFAULT_SAMPLE

    if args.matmul:
        return cmd_plan_matmul(args)
    check = _check_replies(args)
    chunks = 1
    if args.from_job:
        costs = _measured_costs(args)
        model, chunks = costs.model, costs.chunks
        if args.workers and args.workers != costs.workers:
            model = ClusterModel((costs.typical(),) * args.workers, overhead=model.overhead)
            print(f"--workers {args.workers}: job {args.from_job} measured {costs.workers} workers; planned for "
                  f"{args.workers} alike, each with the median of their costs")
    elif args.workers and args.compute and args.communicate:
        model = RuntimeModel(args.compute, args.communicate).cluster(args.workers)
    else:
        raise ValueError("give --from-job JOB, or --workers, --compute and --communicate")
    model = _what_if(args, dataclasses.replace(model, delay=args.delay))
    n = len(model.workers)
    # a checked streamed job confirms a share of its pieces by default (its sampled check)
    ranked = plan(model, n, check=check, streamed=True, chunks=chunks, confirm=DEFAULT_SAMPLE if check else 0.0)
    uncoded = next(c for c in ranked if c.scheme == "uncoded").predicted_s
    print(f"n = {n}: worker i's time = the parameters' trip out + d x its compute + its link's time for a gradient / "
          f"m + delay {args.delay}; an iteration ends at the (n - s)-th fastest worker, then spends "
          f"{model.overhead:.4g} s whatever the code; codes {_checking_words(check)}, so a code that does not wait "
          f"for s workers holds d = s + {check} + m partitions per worker (uncoded: 1, unchecked)")
    slow = model.slow()
    for line in slow:
        print(f"slow: {line}")
    print(f"{'rank':>4}  {'code':<32} {'d':>2}  {'sends':>5}  {'s/iteration':>11}  {'vs uncoded':>10}  builds")
    for rank, candidate in enumerate(ranked[: args.top], 1):
        why = refusal(candidate, n)
        name = ("uncoded" if candidate.scheme == "uncoded" else f"cyclic streamed stragglers={candidate.s}"
                if candidate.streamed else f"ye_abbe stragglers={candidate.s} m={candidate.m}")
        print(f"{rank:>4}  {name:<32} {candidate.d:>2}  1/{candidate.m:<3}  {candidate.predicted_s:>11.4g}  "
              f"{uncoded / candidate.predicted_s:>9.2f}x  {'yes' if why is None else 'no: ' + why[:60]}")
    print("columns: code: the job's code section (ye_abbe with m = 1 costs what cyclic with `stream: off` does; "
          "cyclic streamed is cyclic's default, whose workers share the partitions' pieces as they go: its time is "
          "simulated over its layout, each piece settled by its first copy or the second its sampled check waits "
          "for, and it holds d partitions but computes about one); d: data partitions each worker holds "
          "(whole replies: computes); sends: the share of a gradient each worker sends; s/iteration: expected seconds "
          "per iteration under the model above; vs uncoded: uncoded's expected time divided by this code's; "
          "builds: whether the code decodes accurately in float64 (else why not)")
    best = recommend(ranked, n)
    without = (f" (it does not wait for the {plural(best.s, 'slowest worker')})" if slow and best.s
               else " (it waits for every worker: none is slow enough to leave out)" if slow else "")
    print(f"recommended code: {json.dumps(best.code())}{without}")
    return 0
