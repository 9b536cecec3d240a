"""One rank of bench.ddp's PyTorch DDP run: a gradient job's training the way PyTorch users run it.

    python -m torch.distributed.run --standalone --nproc-per-node N -m bench.ddp_rank JOB.yaml OUT.npz \\
        [--file SPEC_PATH=LOCAL_PATH ...] [--replay-check] [--stop-at ACCURACY]

Rank r is the job's worker r of an uncoded job (``workers`` ranks, one partition each). The
workload is the job's own, built by the cluster's functions: the data, the partitions, the
mini-batch each partition draws at each iteration, the initial parameters, and the faults
(``coded.jobs.faults.faults_of``: the same delays and slowdowns at every (iteration, rank) as the
cluster's worker r). What differs is what users run: a ``torch.nn.Module`` in float32 wrapped in
``DistributedDataParallel`` on the gloo backend, gradients averaged by all-reduce, and
``torch.optim.Adam`` on every rank.

The faults are applied inside the training step, where the cluster's worker applies them: a
straggler's delay before the forward pass, a slowdown's extra time ((factor - 1) times the
rank's forward and backward so far) in DDP's communication hook, before the gradients are
all-reduced.

``--replay-check`` checks every step as torchtitan's deterministic replay does: the step's
forward and backward (with their all-reduce) run again on the same batch, the two averaged
gradients are compared, and the step applies the replay's (the gradients the replay left); a slow
rank is as slow in the replay as in the step. Such a check detects a wrong gradient
but cannot say which rank computed it. The comparison is bench.ddp's (OUT.npz keeps each step's
difference): the two agree bit for bit except in step 0, where DDP's first backward pass
rebuilds its gradient buckets and gloo then sums in another order (a float32 rounding, ~1e-7).

Rank 0 evaluates the test accuracy every ``eval_every`` steps and at the end, and writes OUT.npz:
``ends`` (seconds after the start of step 0 at the end of each step), ``curve`` (rows of step,
seconds, test accuracy), ``param:NAME`` (the final parameters by their names, float64),
``replay_diff`` (each replayed step's largest difference between its two gradients, relative to
the largest entry) and ``init_s`` (seconds from the rank's start to step 0).
"""

# no `from __future__ import annotations`: DDP checks the hook's annotations against the real classes
import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from coded.jobs.build import check_fit, load_data, split_rows
from coded.jobs.faults import Faults, faults_of
from coded.jobs.spec import GradientJob, parse_job
from coded.jobs.spec.learning import AdamOptimizer, TorchModel
from coded.ml.data import batch_rows
from coded.ml.pytorch import factory


class Slowdown:
    """The state of :func:`slowed_allreduce`: the rank's slowdowns and when its step began."""

    def __init__(self, faults: Faults, rank: int) -> None:
        self.faults, self.rank = faults, rank
        self.step, self.started, self.slowed = 0, 0.0, False

    def begin(self, step: int) -> None:
        """A new step (or its replay) starts computing now."""
        self.step, self.started, self.slowed = step, time.perf_counter(), False


def slowed_allreduce(state: Slowdown, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's all-reduce, after the extra time a slowed-down rank takes over its step so far."""
    if not state.slowed:  # once per step: the first bucket is ready when the backward pass is
        state.slowed = True
        factor = state.faults.slowdowns.factor(state.step, state.rank)
        if factor > 1:
            time.sleep((factor - 1) * (time.perf_counter() - state.started))
    return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]  # None: the default group


def accuracy(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((module(x).argmax(dim=1) == y).float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--file", action="append", default=[], help="SPEC_PATH=LOCAL_PATH of a file the job names")
    parser.add_argument("--replay-check", action="store_true")
    parser.add_argument("--stop-at", type=float, help="stop at the first evaluation at or above this accuracy")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(1)  # as the cluster's workers compute (one thread each)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    spec = parse_job(args.job.read_text())
    assert isinstance(spec, GradientJob) and isinstance(spec.model, TorchModel), "bench.ddp_rank runs torch jobs"
    assert isinstance(spec.optimizer, AdamOptimizer) and spec.optimizer.schedule is None, "bench.ddp_rank: adam"
    assert spec.code.scheme == "uncoded" and spec.workers == n, f"an uncoded job of {n} workers"
    files = dict(item.split("=", 1) for item in args.file)
    dataset = load_data(spec, {name: Path(path) for name, path in files.items()})
    model = check_fit(spec, len(dataset.y_train), dataset.sample_shape, dataset.classes)
    rows = split_rows(spec, dataset, n)[rank]
    x_part = torch.tensor(dataset.x_train[rows], dtype=torch.float32).reshape(-1, *dataset.sample_shape)
    y_part = torch.tensor(dataset.y_train[rows])
    x_test = torch.tensor(dataset.x_test, dtype=torch.float32).reshape(-1, *dataset.sample_shape)
    y_test = torch.tensor(dataset.y_test)
    traces = {field: Path(files[path]).read_text() for path, field in spec.faults.files().items()}
    faults = faults_of(spec.faults, spec.seed, n, traces.get("faults.stragglers.path", ""),
                       traces.get("faults.slowdown.path", ""))

    module = factory(spec.model.name)(dataset.sample_shape, dataset.classes, **spec.model.args)
    init = model.init_params(np.random.default_rng(spec.seed))  # the cluster's initial parameters
    torch.nn.utils.vector_to_parameters(torch.tensor(init, dtype=torch.float32), module.parameters())
    ddp = DistributedDataParallel(module)
    hook = Slowdown(faults, rank)
    ddp.register_comm_hook(hook, slowed_allreduce)
    opt = spec.optimizer
    optimizer = torch.optim.Adam(ddp.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps,
                                 weight_decay=0.0)
    assert opt.weight_decay == 0.0, "bench.ddp_rank: adam without weight decay"

    def gradients(step: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The step's averaged gradient: forward, backward, all-reduce (slowed as the rank is)."""
        optimizer.zero_grad(set_to_none=False)
        hook.begin(step)
        # the sum over the rank's batch / batch: DDP's average over ranks is then the cluster's
        # decoded sum / (batch * n)
        loss = torch.nn.functional.cross_entropy(ddp(x), y, reduction="sum") / len(y)
        loss.backward()
        return torch.cat([p.grad.reshape(-1) for p in ddp.parameters() if p.grad is not None])

    curve: list[tuple[int, float, float]] = []
    ends: list[float] = []
    replay_diff: list[float] = []
    dist.barrier()
    zero = time.perf_counter()
    init_s = zero - started
    for step in range(spec.iterations):
        delay = faults.stragglers.delay(step, rank)
        if delay:
            time.sleep(delay)
        batch = torch.from_numpy(batch_rows(len(y_part), opt.batch or len(y_part), spec.seed, step, rank))
        x, y = x_part[batch], y_part[batch]
        first = gradients(step, x, y)
        if args.replay_check:
            first = first.clone()
            again = gradients(step, x, y)
            replay_diff.append(float((again - first).abs().max() / first.abs().max().clamp(min=1e-30)))
        optimizer.step()
        ends.append(time.perf_counter() - zero)
        last = step + 1 == spec.iterations
        if spec.eval_every and ((step + 1) % spec.eval_every == 0 or last):
            stop = torch.zeros(1)
            if rank == 0:
                curve.append((step + 1, time.perf_counter() - zero, accuracy(module, x_test, y_test)))
                stop[0] = float(args.stop_at is not None and curve[-1][2] >= args.stop_at)
            dist.broadcast(stop, 0)  # every rank stops at the same step
            if stop[0]:
                break
    if rank == 0:
        params = {f"param:{name}": p.detach().to(torch.float64).numpy() for name, p in module.named_parameters()}
        np.savez(args.out, ends=np.array(ends), curve=np.array(curve).reshape(-1, 3), replay_diff=np.array(replay_diff),
                 init_s=np.array(init_s), **params)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
