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

from .inprocess import Cluster

GRADIENT = {"kind": "gradient_coding", "workers": 2, "code": {"scheme": "cyclic", "stragglers": 1},
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
    ],
)
def test_a_bad_file_is_refused_naming_its_field_and_not_the_masters_paths(tmp_path: Path, spec, files, start):
    async def main() -> str:
        cluster = await Cluster(4, tmp_path).start()
        try:
            with pytest.raises(JobSpecError) as error:
                await cluster.service.submit(yaml.safe_dump(spec), files)
            assert cluster.service.jobs() == []
            return str(error.value)
        finally:
            await cluster.close()

    message = asyncio.run(main())
    assert message.startswith(start), message
    assert str(tmp_path) not in message and "/files/" not in message, message
    assert not list((tmp_path / "master" / "jobs").glob("*/files/*"))  # uploads of a refused job are gone
