"""The MPI baseline of bench.mpi: a gradient job's iterations as an MPI program runs them.

    mpiexec -n N+1 python -m bench.mpi_loop JOB.yaml OUT.npz

Rank 0 is the master, rank i + 1 the worker at position i of the job's code. The workload is
the job's own, built by the same functions as the cluster's (``coded.jobs.build``): the data, the
partitions, the model, the optimizer and the gradient code (whole replies; ``verify`` and
``stream`` are not read), and the seeded straggler delays (``coded.jobs.faults``). What differs is
only the transport and the loop, written the way an MPI program of the papers' era writes it:

* the master sends the parameters to every worker with non-blocking sends (tag = iteration) and
  keeps one receive posted per worker (any tag); ``Waitany`` hands it replies as they come, and
  it decodes as soon as the replies of the iteration are decodable. A reply of an older
  iteration is dropped and the receive posted again: a straggler is never waited for.
* a worker receives the newest parameters (older ones still queued are skipped), sleeps its
  injected delay, computes each of its partitions' gradient (loss appended) with one call of the
  model, encodes with the code and sends the message.

The loop measures what the papers' MPI scripts measured: the time of each iteration on the
master, from sending the parameters to the updated parameters. OUT.npz holds ``ends`` (the
master's clock after each iteration, s), ``loss`` (each iteration's training loss) and ``params``
(the final parameters), so a test can check that both systems trained the same model.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from coded.codes import GradientCode
from coded.jobs.build import build_optimizer, check_fit, load_data, split_rows
from coded.jobs.faults import faults_of
from coded.jobs.spec import GradientJob, parse_job
from coded.ml.models import Model

STOP = 32_000  # the tag that ends the loop (MPI guarantees tags up to 32767; iterations stay below)


def master(comm: MPI.Comm, spec: GradientJob, code: GradientCode, model: Model, samples: int) -> dict[str, np.ndarray]:
    """Run the job's iterations; the master's record of them."""
    n = spec.workers
    length = model.size + 1
    buffers = np.empty((n, code.message_size(length)))
    status = MPI.Status()
    receives = [comm.Irecv(buffers[i], source=i + 1, tag=MPI.ANY_TAG) for i in range(n)]
    sending: list[tuple[MPI.Request, np.ndarray]] = []  # a send's buffer lives until it completes
    optimizer = build_optimizer(spec.optimizer, spec.iterations)
    params = model.init_params(np.random.default_rng(spec.seed))
    ends, losses = [], []
    for t in range(spec.iterations):
        sending = [(request, data) for request, data in sending if not request.Test()]
        sending += [(comm.Isend(params, dest=i + 1, tag=t), params) for i in range(n)]
        arrived: dict[int, np.ndarray] = {}
        while not code.decodable(arrived):
            i = MPI.Request.Waitany(receives, status)
            if status.Get_tag() == t:
                arrived[i] = buffers[i]
            else:  # a straggler's reply to an older iteration
                receives[i] = comm.Irecv(buffers[i], source=i + 1, tag=MPI.ANY_TAG)
        decoded = code.decode(arrived, length)
        for i in arrived:
            receives[i] = comm.Irecv(buffers[i], source=i + 1, tag=MPI.ANY_TAG)
        reg_loss, reg_grad = model.regularization(params)
        params = optimizer.step(params, decoded[:-1] / samples + reg_grad)
        ends.append(time.perf_counter())
        losses.append(decoded[-1] / samples + reg_loss)
    for i in range(n):  # stop, then drain each worker up to its goodbye (tag STOP)
        comm.Send(np.zeros(model.size), dest=i + 1, tag=STOP)
    for i in range(n):
        while True:
            receives[i].Wait(status)
            if status.Get_tag() == STOP:
                break
            receives[i] = comm.Irecv(buffers[i], source=i + 1, tag=MPI.ANY_TAG)
    MPI.Request.Waitall([request for request, _ in sending])
    return {"ends": np.array(ends), "loss": np.array(losses), "params": params}


def worker(comm: MPI.Comm, spec: GradientJob, code: GradientCode, model: Model,
           rows: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """Answer the master's iterations until it says stop."""
    index = comm.Get_rank() - 1
    stragglers = faults_of(spec.faults, spec.seed, spec.workers).stragglers
    params = np.empty(model.size)
    status = MPI.Status()
    while True:
        comm.Recv(params, source=0, tag=MPI.ANY_TAG, status=status)
        while comm.Iprobe(source=0, tag=MPI.ANY_TAG):  # behind: only the newest parameters count
            comm.Recv(params, source=0, tag=MPI.ANY_TAG, status=status)
        iteration = status.Get_tag()
        if iteration == STOP:
            comm.Send(np.zeros(1), dest=0, tag=STOP)
            return
        delay = stragglers.delay(iteration, index)
        if delay:
            time.sleep(delay)
        partials = {j: model.partial(params, *rows[j]) for j in code.partitions(index)}
        comm.Send(code.encode(index, partials), dest=0, tag=iteration)


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
        record = master(comm, spec, code, model, samples=len(dataset.y_train))
        np.savez(out, **record)
    else:
        held = code.partitions(comm.Get_rank() - 1)
        worker(comm, spec, code, model, {j: (dataset.x_train[parts[j]], dataset.y_train[parts[j]]) for j in held})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
