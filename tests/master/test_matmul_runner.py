"""The matrix runner in-process, against real worker services: products exact while the surplus
workers are slow or gone, wrong results corrected up to the verified count, power iteration."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .inprocess import Cluster


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def matmul_spec(**changes: Any) -> str:
    spec = {"kind": "matmul", "workers": 8, "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 2},
            "inputs": {"a": "A.npy", "b": "B.npy"}, "seed": 3}
    spec.update(changes)
    return yaml.safe_dump(spec)


RNG = np.random.default_rng(0)
A, B = RNG.standard_normal((30, 21)), RNG.standard_normal((21, 17))  # nothing divides: padding
FILES = {"A.npy": npy(A), "B.npy": npy(B)}


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_products_are_exact_with_slow_and_killed_workers_and_wrong_ones_are_corrected(tmp_path: Path):
    async def main() -> None:
        cluster = await Cluster(8, tmp_path).start()
        try:
            slow = {"stragglers": {"model": "fixed", "workers": [1, 6], "delay": 60.0}}
            for code in ({"scheme": "gpd", "m": 2, "n": 1, "d": 2}, {"scheme": "polynomial", "m": 2, "d": 3},
                         {"scheme": "matdot", "n": 3}, {"scheme": "polydot", "m": 1, "n": 2, "d": 2},
                         {"scheme": "gpd", "m": 2, "n": 2, "d": 1, "points": "chebyshev"}):
                # P - 2 fast workers: enough for R, not always for R + 1 (a check)
                job = await cluster.run(matmul_spec(code=code, faults=slow, verify="off"), FILES)
                assert job.state == "SUCCEEDED", (code, job.stored.reason)
                assert not {1, 6} & set(cluster.service.history(job)[0].responders)
                assert relative(cluster.service.result(job.id)["product"], A @ B) <= 1e-9, code
            # two wrong results among the awaited R + e + 1 = 4 + 3 are located and decoded around
            wrong = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 10.0, "workers": [2, 5]}}
            job = await cluster.run(matmul_spec(verify={"errors": 2}, faults=wrong), FILES)
            assert job.state == "SUCCEEDED", job.stored.reason
            assert relative(cluster.service.result(job.id)["product"], A @ B) <= 1e-9
            assert cluster.metrics.errors_corrected.labels(job.id)._value.get() == 2
            # three wrong ones with e = 2: a decoding failure, never a product
            three = {"soft_errors": {"probability": 1.0, "model": "bitflip", "workers": [0, 2, 5]}}
            job = await cluster.run(matmul_spec(verify={"errors": 2}, workers=7, faults=three), FILES)
            assert job.state == "FAILED" and "decoding failure" in job.stored.reason
            for name in ("worker-1", "worker-6"):
                cluster.workers[name].kill()
            job = await cluster.run(matmul_spec(), FILES)
            assert job.state == "SUCCEEDED", job.stored.reason
            assert relative(cluster.service.result(job.id)["product"], A @ B) <= 1e-9
        finally:
            await cluster.close()

    asyncio.run(main())


def test_power_iteration_finds_the_top_eigenvector(tmp_path: Path):
    rng = np.random.default_rng(1)
    basis, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    a = (basis * np.concatenate([[3.0], rng.uniform(-1.5, 1.5, 39)])) @ basis.T

    async def main() -> None:
        cluster = await Cluster(8, tmp_path).start()
        try:  # R = 5, checked with 6: the two slow workers are never waited for
            spec = {"kind": "matvec", "workers": 8, "code": {"scheme": "gpd", "m": 2, "n": 2, "d": 1},
                    "inputs": {"a": "A.npy"}, "driver": {"rounds": 50}, "seed": 2,
                    "faults": {"stragglers": {"model": "fixed", "workers": [4, 5], "delay": 60.0}}}
            job = await cluster.run(yaml.safe_dump(spec), {"A.npy": npy(a)})
            assert job.state == "SUCCEEDED", job.stored.reason
            history = cluster.service.history(job)
            assert len(history) == 50 and all(not {4, 5} & set(r.responders) for r in history)
            result = cluster.service.result(job.id)
        finally:
            await cluster.close()
        values, vectors = np.linalg.eigh(a)
        top = vectors[:, np.argmax(np.abs(values))]
        assert abs(abs(float(result["vector"] @ top)) - 1.0) < 1e-10
        assert abs(float(result["eigenvalue"]) - values[np.argmax(np.abs(values))]) < 1e-9

    asyncio.run(main())


def test_a_result_of_another_shape_fails_that_workers_call_not_the_job(tmp_path: Path):
    """A worker whose product block has another shape than the code's (a bug, or a hostile
    worker) is an erasure, as one in the wrong dtype is: the job decodes from the others."""
    async def main() -> None:
        cluster = await Cluster(8, tmp_path).start()
        try:
            for bad, cut in (("worker-2", lambda m: m[:-1]), ("worker-4", lambda m: np.append(m, 0.0))):
                service = cluster.workers[bad].service
                compute = service.compute

                async def misshapen(*args: Any, _compute: Any = compute, _cut: Any = cut) -> Any:
                    async for result in _compute(*args):
                        yield dataclasses.replace(result, message=_cut(result.message))

                service.compute = misshapen
            job = await cluster.run(matmul_spec(), FILES)
            assert job.state == "SUCCEEDED", job.stored.reason
            assert not {2, 4} & set(cluster.service.history(job)[0].responders)
            assert relative(cluster.service.result(job.id)["product"], A @ B) <= 1e-9
            s = A[:21] @ A[:21].T  # symmetric: matvec's power iteration
            job = await cluster.run(matmul_spec(kind="matvec", inputs={"a": "S.npy"}, driver={"rounds": 3},
                                                code={"scheme": "gpd", "m": 2, "n": 1, "d": 1}),
                                    {"S.npy": npy(s)})
            assert job.state == "SUCCEEDED", job.stored.reason
            assert all(not {2, 4} & set(r.responders) for r in cluster.service.history(job))
        finally:
            await cluster.close()

    asyncio.run(main())
