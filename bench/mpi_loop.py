"""The MPI baseline of bench.mpi: a gradient job's iterations as an MPI program runs them.

    mpiexec -n N+1 python -m bench.mpi_loop JOB.yaml OUT.npz

Rank 0 is the master, rank i + 1 the worker at position i of the job's code. The workload is
the job's own, built by the same functions as the cluster's (``coded.jobs.build``): the data, the
partitions, the model, the optimizer and the gradient code (whole replies; ``verify`` and
``stream`` are not read), and the seeded straggler delays (``coded.jobs.faults``). What differs is
the transport and the loop, which does per iteration what the 2017 reference implementation of
gradient coding does (bench/mpi_reference.md: where it differs from it, and why):

* before the loop, the master posts a receive for every iteration and worker (tag = iteration,
  one buffer per worker); each iteration it sends the parameters to every worker with
  non-blocking sends, ``Waitany`` hands it the iteration's replies as they come, and after the
  first ``n - s`` (or, for codes that need particular workers, once they decode) it decodes
  with one weighted sum of their buffers (the code's cached weights) and steps the optimizer.
  Nothing else happens per arrival; a straggler is never waited for, and its late replies land
  in their own iteration's receive.
* a worker posts a receive for every iteration before the loop and answers them in order: it
  sleeps its injected delay and sends its encoded gradient, ``model.size`` floats (no loss
  appended). For logistic regression and a real linear code (uncoded, cyclic, frc) it computes
  the message as the reference does: one product with all its rows stacked (and a column of
  ones for the bias) and the code's coefficient folded into each row's weight,
  ``X^T (c * (sigmoid(X w) - y))``; other models and codes compute each partition's gradient
  with the model and encode it with the code. Once the master is done, a late worker stops
  instead of working through the iterations it is behind by.

The loop measures what the papers' MPI scripts measured: the time of each iteration on the
master, from sending the parameters to the updated parameters. OUT.npz holds ``ends`` (the
master's clock after each iteration, s), ``loss`` (each iteration's training loss: of the
parameters sent in it, computed after the loop from the parameters the master kept, as the
reference computes its losses) and ``params`` (the final parameters), so a test can check that
both systems trained the same model.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from mpi4py import MPI

from coded.codes import GradientCode
from coded.codes.linear_gradient import LinearGradientCode
from coded.jobs.build import build_optimizer, check_fit, load_data, split_rows
from coded.jobs.faults import faults_of
from coded.jobs.spec import GradientJob, parse_job
from coded.ml.models import AffineModel, LogisticRegression, Model

STOP = 32_000  # the tag that ends the loop (MPI guarantees tags up to 32767; iterations stay below)


def linear(code: GradientCode) -> bool:
    """Whether the code's messages are real weighted sums of whole partial gradients (m = 1)."""
    return isinstance(code, LinearGradientCode) and code.m == 1 and not np.iscomplexobj(code.coefficients)


def master(comm: MPI.Comm, spec: GradientJob, code: GradientCode, model: Model,
           x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Run the job's iterations; the master's record of them."""
    n, rounds, samples = spec.workers, spec.iterations, len(y)
    buffers = np.empty((n, code.message_size(model.size)))
    receives = [[comm.Irecv(buffers[i], source=i + 1, tag=t) for i in range(n)] for t in range(rounds)]
    # codes that decode from any n - s replies (uncoded, cyclic) count them, as the reference does
    needed = n - code.s if type(code)._decodable is GradientCode._decodable else None
    weighted = linear(code)  # decoded as one weighted sum of the buffers (the reference's decode)
    decoders: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
    # an affine model's regularizer has the gradient l2 * weights (biases 0): a fixed vector times
    # the parameters, what the reference's update does; other models ask theirs every iteration
    decay = model.regularization(np.ones(model.size))[1] if isinstance(model, AffineModel) else None
    optimizer = build_optimizer(spec.optimizer, rounds)
    params = model.init_params(np.random.default_rng(spec.seed))
    sent, sends, ends = [], [], []
    status = MPI.Status()
    comm.Barrier()
    for t in range(rounds):
        sends += [comm.Isend(params, dest=i + 1, tag=t) for i in range(n)]
        sent.append(params)  # kept until the end: the sends' buffers, and the losses' parameters
        arrived: list[int] = []
        while len(arrived) < needed if needed is not None else not code.decodable(arrived):
            arrived.append(MPI.Request.Waitany(receives[t], status))
        if weighted:
            key = tuple(sorted(arrived))
            if key not in decoders:
                weights = code.decode_weights(key)
                decoders[key] = np.array(weights.workers), np.ascontiguousarray(weights.matrix[:, 0])
            rows, weight = decoders[key]
            gradient = weight @ buffers[rows]
        else:
            gradient = code.decode({i: buffers[i] for i in arrived}, model.size)
        regularizer = decay * params if decay is not None else model.regularization(params)[1]
        params = optimizer.step(params, gradient / samples + regularizer)
        ends.append(time.perf_counter())
    for i in range(n):  # stop, then wait for each worker's goodbye (after its last reply)
        comm.Send(np.zeros(1), dest=i + 1, tag=STOP)
    for i in range(n):
        comm.Recv(np.empty(1), source=i + 1, tag=STOP)
    pending = [request for row in receives for request in row if request]
    for request in pending:  # the receives of iterations a straggler skipped
        request.Cancel()
    MPI.Request.Waitall(pending)
    MPI.Request.Waitall(sends)
    losses = [model.loss(p, x, y) / samples + model.regularization(p)[0] for p in sent]
    return {"ends": np.array(ends), "loss": np.array(losses), "params": params}


def fused_message(code: GradientCode, model: Model, index: int,
                  rows: dict[int, tuple[np.ndarray, np.ndarray]]) -> Callable[[np.ndarray], np.ndarray] | None:
    """Worker ``index``'s message as one pass over its rows stacked, as the reference computes it:
    a function of the parameters filling a reused buffer; None where the model or code has no
    such form (then each partition's gradient is computed and encoded)."""
    if type(model) is not LogisticRegression or not linear(code):
        return None
    held = code.partitions(index)
    # the rows with a column of ones: the bias is a weight, its gradient one entry of the product
    x = np.concatenate([np.column_stack([rows[j][0], np.ones(len(rows[j][1]))]) for j in held]).astype(np.float64)
    sign = np.concatenate([2.0 * rows[j][1] - 1.0 for j in held])  # labels as -1, +1
    # sigmoid(z) - y = -sign / (exp(sign z) + 1), times the code's coefficient of the row's partition
    scaled = -sign * np.concatenate([np.full(len(rows[j][1]), code.coefficients[index, j, 0]) for j in held])
    message = np.empty(code.message_size(model.size))  # = model.size: weights, then the bias

    def compute(params: np.ndarray) -> np.ndarray:
        z = x @ params
        z *= sign
        np.exp(z, out=z)
        z += 1.0
        np.divide(scaled, z, out=z)
        return np.dot(z, x, out=message)

    return compute


def worker(comm: MPI.Comm, spec: GradientJob, code: GradientCode, model: Model,
           rows: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """Answer the master's iterations, in order, until they are done or it says stop."""
    index = comm.Get_rank() - 1
    stragglers = faults_of(spec.faults, spec.seed, spec.workers).stragglers
    compute = fused_message(code, model, index, rows)
    if compute is None:
        def compute(params: np.ndarray) -> np.ndarray:
            return code.encode(index, {j: model.loss_and_grad(params, *rows[j])[1] for j in code.partitions(index)})
    params = np.empty((spec.iterations, model.size))  # one buffer per iteration: all posted at once
    receives = [comm.Irecv(params[t], source=0, tag=t) for t in range(spec.iterations)]
    stop = comm.Irecv(np.empty(1), source=0, tag=STOP)
    sending = MPI.REQUEST_NULL
    comm.Barrier()
    late = stragglers.applies(index)
    with np.errstate(over="ignore"):  # exp(sign z) -> inf gives the right 0
        for t in range(spec.iterations):
            receives[t].Wait()
            delay = late and stragglers.delay(t, index)
            if delay:
                time.sleep(delay)
                if stop.Test():  # the master is done: a late worker stops here
                    break
            sending.Wait()  # the previous message's buffer is written again
            sending = comm.Isend(compute(params[t]), dest=0, tag=t)
    stop.Wait()
    sending.Wait()
    comm.Send(np.zeros(1), dest=0, tag=STOP)  # after every reply: the master may cancel its receives
    for request in receives:
        if request:
            request.Cancel()
    MPI.Request.Waitall(receives)


def main(argv: list[str]) -> int:
    spec_path, out = Path(argv[0]), Path(argv[1])
    spec = parse_job(spec_path.read_text())
    assert isinstance(spec, GradientJob), "bench.mpi_loop runs gradient jobs"
    comm = MPI.COMM_WORLD
    if comm.Get_size() != spec.workers + 1:
        raise SystemExit(f"the job has {spec.workers} workers: run {spec.workers + 1} ranks, not {comm.Get_size()}")
    code = spec.gradient_code
    dataset = load_data(spec)
    model = check_fit(spec, len(dataset.y_train), dataset.sample_shape, dataset.classes)
    parts = split_rows(spec, dataset, code.k)
    if comm.Get_rank() == 0:
        record = master(comm, spec, code, model, dataset.x_train, dataset.y_train)
        np.savez(out, **record)
    else:
        held = code.partitions(comm.Get_rank() - 1)
        worker(comm, spec, code, model, {j: (dataset.x_train[parts[j]], dataset.y_train[parts[j]]) for j in held})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
