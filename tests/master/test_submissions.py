"""Submissions refused by the master's core: each names the field of the file at fault and the
file by its name in the spec, never the master's own paths; nothing is left behind."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import numpy as np
import pytest
import yaml

from coded.jobs.spec import JobSpecError

from .inprocess import Cluster, refusal

GRADIENT = {"kind": "gradient_coding", "workers": 3, "code": {"scheme": "cyclic", "stragglers": 1},
            "model": {"type": "logistic"}, "data": {"type": "npz", "path": "train.npz"},
            "optimizer": {"type": "sgd", "lr": 0.1}, "iterations": 2}
MATMUL = {"kind": "matmul", "workers": 4, "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 1},
          "inputs": {"a": "A.npy", "b": "B.npy"}}


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("spec", "files", "start"),
    [
        (GRADIENT, {"train.npz": b"not an npz archive"}, "data.path: 'train.npz'"),
        (GRADIENT, {}, "data.path: file 'train.npz' named in the spec was not uploaded"),
        (MATMUL, {"A.npy": npy(np.ones((4, 3)))}, "inputs.b: file 'B.npy' named in the spec was not uploaded"),
        (MATMUL, {"A.npy": npy(np.ones((4, 3))), "B.npy": b"\x93NUMPY garbage"}, "inputs.b: "),
        ({**GRADIENT, "data": {"type": "gaussian_mixture", "samples": 100, "features": 3},
          "faults": {"stragglers": {"model": "trace", "path": "delays.csv"}}},
         {"delays.csv": b"0,0,0.1\nnot,a,row\n"}, "faults.stragglers.path: trace row 2"),
        ({**GRADIENT, "data": {"type": "images", "format": "cifar10", "train": ["b1.bin", "b2.bin"]}},
         {"b1.bin": bytes(3073), "b2.bin": bytes(3075)}, "data: 'b2.bin': 3075 bytes is not a whole number"),
    ],
)
def test_a_bad_file_is_refused_naming_its_field_and_not_the_masters_paths(tmp_path: Path, spec, files, start):
    message = refusal(tmp_path, yaml.safe_dump(spec), files, JobSpecError)
    assert message.startswith(start), message
    assert str(tmp_path) not in message and "/files/" not in message, message
    assert not list((tmp_path / "master" / "jobs").glob("*/files/*"))  # uploads of a refused job are gone


def test_a_job_trains_on_uploaded_cifar10_batches(tmp_path: Path):
    """Two classes told apart by which colour plane is bright; the master streams each worker
    only the rows of its partitions, standardised per channel."""
    rng = np.random.default_rng(0)

    def batch(n: int) -> tuple[bytes, np.ndarray]:
        labels = rng.integers(0, 2, n)
        planes = rng.integers(0, 60, (n, 3, 1024)).astype(np.uint8)
        planes[np.arange(n), labels] += 150  # class c: plane c bright
        return b"".join(bytes([int(y)]) + p.tobytes() for y, p in zip(labels, planes, strict=True)), labels

    (train, _), (test, _) = batch(120), batch(40)
    spec = {"kind": "gradient_coding", "workers": 4, "code": {"scheme": "cyclic", "stragglers": 1},
            "model": {"type": "logistic"}, "optimizer": {"type": "sgd", "lr": 0.5, "batch": 10}, "iterations": 20,
            "eval_every": 20,
            "data": {"type": "images", "format": "cifar10", "train": ["data_batch_1.bin"], "test": ["test_batch.bin"]}}

    async def main() -> float:
        cluster = await Cluster(4, tmp_path).start()
        try:
            job = await cluster.run(yaml.safe_dump(spec), {"data_batch_1.bin": train, "test_batch.bin": test})
            assert job.state == "SUCCEEDED", job.stored.reason
            return cluster.service.history(job)[-1].test_accuracy
        finally:
            await cluster.close()

    assert asyncio.run(main()) >= 0.95


TORCH = {"kind": "gradient_coding", "workers": 3, "code": {"scheme": "cyclic", "stragglers": 1},
         "model": {"type": "torch", "name": "lenet"}, "data": {"type": "digits"},
         "optimizer": {"type": "adam", "lr": 0.01, "batch": 16}, "iterations": 2}


@pytest.mark.parametrize(
    ("master_has_torch", "models", "start"),
    [
        (False, [], "model.type: torch needs PyTorch on the master, which lacks it: pip install "
                    "'coded-computing[torch]'"),
        (True, [], "model.name: torch/lenet runs on 0 of the 4 live workers, and the job needs 3; worker-0, "
                   "worker-1, worker-2, worker-3 lack PyTorch (pip install 'coded-computing[torch]'"),
        (True, ["torch/mlp"], "model.name: torch/lenet runs on 0 of the 4 live workers, and the job needs 3; "
                              "worker-0, worker-1, worker-2, worker-3 lack the architecture (its plugin package)"),
    ],
)
def test_a_torch_job_the_cluster_cannot_run_is_refused_with_how_to_install_what_it_lacks(
        tmp_path: Path, monkeypatch, request, master_has_torch, models, start):
    from coded.base.errors import Unsupported
    from coded.ml import pytorch

    monkeypatch.setattr(pytorch, "available", lambda: master_has_torch)
    pytorch.architectures.cache_clear()  # lists the built-ins whenever the master "has" PyTorch
    request.addfinalizer(pytorch.architectures.cache_clear)

    message = refusal(tmp_path, yaml.safe_dump(TORCH), {}, Unsupported, models=models)
    assert message.startswith(start), message


def test_a_refusal_for_workers_without_pytorch_says_that_running_workers_need_a_restart_after_installing_it(
        tmp_path: Path, monkeypatch, request):
    """Issue 40, item 8: after `make install-torch`, running workers still lack PyTorch for the
    master: a worker says what it builds when it registers, at its start."""
    from coded.base.errors import Unsupported
    from coded.ml import pytorch

    monkeypatch.setattr(pytorch, "available", lambda: True)
    pytorch.architectures.cache_clear()
    request.addfinalizer(pytorch.architectures.cache_clear)

    message = refusal(tmp_path, yaml.safe_dump(TORCH), {}, Unsupported, models=[])
    assert "restart running workers after installing it" in message, message
    assert message.count(pytorch.INSTALL) == 1


def test_a_file_not_uploaded_is_reported_with_every_other_problem(tmp_path: Path):
    """The master reports a spec's problems in one answer: the file the stream lacks, and a rule of
    the job (stragglers < workers) that checks once the fields are valid, which the file's field in
    error would otherwise have kept from running."""
    spec = {**GRADIENT, "code": {"scheme": "cyclic", "stragglers": 3}}
    message = refusal(tmp_path, yaml.safe_dump(spec), {}, JobSpecError)
    assert message.split("; ") == [
        "data.path: file 'train.npz' named in the spec was not uploaded with the job",
        "code.stragglers: must be < workers (got 3, workers=3)",
    ]
