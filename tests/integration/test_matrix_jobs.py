"""Coded matrix jobs on a real local cluster: exact under slow and killed workers, wrong results
corrected up to the verified count and reported beyond it, power iteration that converges."""

from __future__ import annotations

import io
import pickle

import grpc
import numpy as np
import pytest
import yaml

from coded.client.reports import JobState
from coded.codes import matmul_code

from .conftest import metric, scrape

pytestmark = pytest.mark.integration


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def object_npy() -> bytes:
    """A .npy of Python objects, which only a pickle can hold."""
    buffer = io.BytesIO()
    np.save(buffer, np.array([[1.0, None]], dtype=object), allow_pickle=True)
    return buffer.getvalue()


SAVE_IT = "save it with numpy.save(file, array, allow_pickle=False); accepted: a .npy file (format 1.0, 2.0 or 3.0)"
#: files a client written against the protos might send as a matrix, and what the refusal says they are
UNREADABLE = [
    (b"garbage", "is text ('garbage'), not a .npy or .npz file"),
    (b"", "is empty (0 bytes)"),
    (b"1.0,2.0\n3.0,4.0\n", "is text ('1.0,2.0\\n3.0,4.0\\n'), not a .npy or .npz file"),
    (pickle.dumps(np.ones((3, 4))), "is a Python pickle, which is never loaded, not a .npy or .npz file"),
    (object_npy(), "holds Python objects (dtype object), which are never unpickled"),
    (npy(np.ones((3, 4)))[:-8],
     "is truncated: its .npy header promises a (3, 4) float64 array of 96 bytes, and 88 bytes follow it"),
]


def matmul_spec(**changes) -> str:
    spec = {"kind": "matmul", "workers": 8, "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 2},
            "inputs": {"a": "A.npy", "b": "B.npy"}, "seed": 3}
    spec.update(changes)
    return yaml.safe_dump(spec)


@pytest.fixture
def matrices():
    rng = np.random.default_rng(0)
    return rng.standard_normal((30, 21)), rng.standard_normal((21, 17))  # nothing divides: padding


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_product_is_exact_while_the_surplus_workers_are_slow_or_dead(cluster, matrices):
    a, b = matrices
    local = cluster(8, metrics=True)
    files = {"A.npy": npy(a), "B.npy": npy(b)}
    slow = {"stragglers": {"model": "fixed", "workers": [1, 6], "delay": 30.0}}
    with local.client() as client:
        for scheme in ({"scheme": "gpd", "m": 2, "n": 1, "d": 2}, {"scheme": "polynomial", "m": 2, "d": 3},
                       {"scheme": "matdot", "n": 3}, {"scheme": "polydot", "m": 1, "n": 2, "d": 2}):
            # unchecked: P - 2 fast workers are R but not always R + 1 (checked runs: test_verification.py)
            job = client.wait(client.submit(matmul_spec(code=scheme, faults=slow, verify="off"), files).id)
            assert job.state == JobState.SUCCEEDED, (scheme, job.reason)
            assert not {1, 6} & set(job.history[0].responders)
            assert relative(client.result(job.id)["product"], a @ b) <= 1e-9, scheme
            # the 30 s stragglers were cut off: their calls ended cancelled, not completed
            slow_worker = scrape(local.metrics_ports[1])
            assert metric(slow_worker, "coded_worker_calls_total", job_id=job.id, outcome="completed") == 0
        local.kill_worker(1)
        local.kill_worker(6)
        job = client.wait(client.submit(matmul_spec(), files).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert relative(client.result(job.id)["product"], a @ b) <= 1e-9


def test_wrong_results_are_corrected_and_too_many_are_reported(cluster, matrices):
    a, b = matrices
    local = cluster(8, metrics=True)
    files = {"A.npy": npy(a), "B.npy": npy(b)}
    # R = 4 (gpd m=2, n=1, d=2); verify 2 errors: wait for 4 + 3 = 7 results
    with local.client() as client:
        slow = {"model": "fixed", "workers": [7], "delay": 30.0}  # so both wrong workers are among the 7
        wrong = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 100.0, "workers": [0, 5]},
                 "stragglers": slow}
        job = client.wait(client.submit(matmul_spec(verify={"errors": 2}, faults=wrong), files).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert relative(client.result(job.id)["product"], a @ b) <= 1e-9
        assert not {0, 5} & set(job.history[0].responders)
        master = scrape(local.metrics_ports["master"])
        assert metric(master, "coded_errors_corrected_total", job_id=job.id) == 2
        flips = {"soft_errors": {"probability": 1.0, "model": "bitflip", "workers": [2]}}
        job = client.wait(client.submit(matmul_spec(verify={"errors": 1}, faults=flips), files).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert relative(client.result(job.id)["product"], a @ b) <= 1e-9
        # 4 wrong among all 8 results: the disagreement among the 7 awaited waits for the eighth, and
        # R + 4 results locate at most 3
        too_many = {"soft_errors": {"probability": 1.0, "model": "gaussian", "scale": 1.0, "workers": [0, 3, 5, 6]}}
        job = client.wait(client.submit(matmul_spec(verify={"errors": 2}, faults=too_many), files).id)
        assert job.state == JobState.FAILED
        assert "decoding failure" in job.reason
        with pytest.raises(grpc.RpcError) as caught:
            client.result(job.id)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert metric(scrape(local.metrics_ports["master"]), "coded_decoding_failures_total", job_id=job.id) == 1


def test_power_iteration_converges_to_the_top_eigenvector(shared_cluster):
    rng = np.random.default_rng(1)
    basis, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    a = (basis * np.concatenate([[3.0], rng.uniform(-1.5, 1.5, 39)])) @ basis.T
    local = shared_cluster  # R = 5, checked with 6: the two slow workers are never waited for
    spec = {"kind": "matvec", "workers": 8, "code": {"scheme": "gpd", "m": 2, "n": 2, "d": 1},
            "inputs": {"a": "A.npy"}, "driver": {"type": "power_iteration", "rounds": 50},
            "faults": {"stragglers": {"model": "fixed", "workers": [4, 5], "delay": 30.0}}, "seed": 2}
    with local.client() as client:
        job = client.wait(client.submit(yaml.safe_dump(spec), {"A.npy": npy(a)}).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert len(job.history) == 50
        assert all(not {4, 5} & set(r.responders) for r in job.history)
        result = client.result(job.id)
    values, vectors = np.linalg.eigh(a)
    top = vectors[:, np.argmax(np.abs(values))]
    assert abs(abs(float(result["vector"] @ top)) - 1.0) < 1e-10
    assert abs(float(result["eigenvalue"]) - values[np.argmax(np.abs(values))]) < 1e-9


def test_bad_matrix_jobs_are_refused_before_any_worker(shared_cluster, matrices):
    a, b = matrices
    local = shared_cluster
    cases = [
        (matmul_spec(), {"A.npy": npy(a), "B.npy": npy(b[:20])}, "inner dimensions differ"),
        (matmul_spec(), {"A.npy": npy(np.full((4, 4), np.nan)), "B.npy": npy(np.ones((4, 4)))},
         "inputs.a: contains NaN"),
        *[(matmul_spec(), {"A.npy": content, "B.npy": npy(b)}, f"inputs.a: 'A.npy' {what}: {SAVE_IT}")
          for content, what in UNREADABLE],
        (matmul_spec(), {"A.npy": npy(a), "B.npy": npz(b=b, c=b)},
         f"inputs.b: 'B.npy' is an .npz archive of 2 arrays (b, c), not one: {SAVE_IT}"),
        (matmul_spec(), {"A.npy": npy(a.astype(complex)), "B.npy": npy(b)},
         f"inputs.a: 'A.npy' holds complex128 values, not real numbers: {SAVE_IT}"),
        (matmul_spec(workers=3), {"A.npy": npy(a), "B.npy": npy(b)},
         "needs at least 5 workers (recovery threshold 4 + 1 to check it), got 3; or set `verify: off`"),
        (matmul_spec(workers=3, verify="off"), {"A.npy": npy(a), "B.npy": npy(b)}, "needs at least 4 workers"),
        (matmul_spec(code={"scheme": "uncoded"}), {"A.npy": npy(a), "B.npy": npy(b)},
         "verify: uncoded has no redundancy to check its product with; set `verify: off`"),
        (matmul_spec(verify={"errors": 4}), {"A.npy": npy(a), "B.npy": npy(b)}, "needs at least 9 workers"),
        (matmul_spec(workers=40, code={"scheme": "matdot", "n": 12, "points": "chebyshev"}),
         {"A.npy": npy(a), "B.npy": npy(b)}, "code: matdot"),
        (matmul_spec(workers=96, code={"scheme": "polynomial", "m": 8, "d": 11}), {"A.npy": npy(a), "B.npy": npy(b)},
         "code: polynomial with 96 workers and recovery threshold 88 cannot decode"),
        (matmul_spec(), {"A.npy": npy(a)}, "inputs.b: file 'B.npy' named in the spec was not uploaded"),
    ]
    with local.client() as client:
        before = {job.id for job in client.jobs()}  # the shared cluster's jobs of other tests
        for text, files, words in cases:
            with pytest.raises(grpc.RpcError) as caught:
                client.submit(text, files)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, words
            assert words in caught.value.details(), caught.value.details()
            assert "unsafely" not in caught.value.details()  # numpy's advice: "load it unsafely using allow_pickle="
        assert {job.id for job in client.jobs()} == before  # none of them became a job
        # the cluster goes on: a job of the same inputs, well saved, runs on the same workers
        fine = matmul_spec(workers=3, code={"scheme": "gpd", "m": 2, "n": 1, "d": 1})  # R = 2, checked with 3
        job = client.wait(client.submit(fine, {"A.npy": npy(a), "B.npy": npz(b=b)}).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert relative(client.result(job.id)["product"], a @ b) <= 1e-9


@pytest.mark.slow  # 40 worker processes: `make test-slow`
def test_gpd_on_40_worker_processes_with_3_killed_and_1_bit_flip(cluster):
    """Beyond what real points can decode: a GPD code with R = 33 on 40 real workers (Chebyshev
    points are refused there), three neighbouring workers killed, two slow, and one returning a
    result with a flipped exponent bit, which the verified decode locates and leaves out."""
    rng = np.random.default_rng(40)
    a, b = rng.standard_normal((30, 21)), rng.standard_normal((21, 17))  # padded to the code's halves
    # a long heartbeat timeout keeps the killed workers registered as alive, so the job is given
    # all 40 and finds three of them dead when it assigns them its blocks (erasures, not a wait)
    local = cluster(40, metrics=True, startup_timeout=600, master_args=["--worker-timeout", "120"])
    by_position = sorted(f"worker-{i}" for i in range(40))  # idle workers are chosen by name
    killed, slow, flipped = [11, 12, 13], [20, 21], 5  # positions in the code (points on the circle)
    for position in killed:
        local.kill_worker(int(by_position[position].split("-")[1]))
    faults = {"soft_errors": {"probability": 1.0, "model": "bitflip", "workers": [flipped]},
              # the 35 awaited results are those of the 37 alive but these two, so the flipped one is among them
              "stragglers": {"model": "fixed", "workers": slow, "delay": 60.0}}
    spec = matmul_spec(workers=40, code={"scheme": "gpd", "m": 4, "n": 2, "d": 4}, verify={"errors": 1},
                       faults=faults)
    with local.client() as client:
        job = client.wait(client.submit(spec, {"A.npy": npy(a), "B.npy": npy(b)}).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert list(job.workers) == by_position
        assert set(job.history[0].responders) == set(range(40)) - {*killed, *slow, flipped}
        assert relative(client.result(job.id)["product"], a @ b) <= 1e-9
    assert metric(scrape(local.metrics_ports["master"]), "coded_errors_corrected_total", job_id=job.id) == 1
    with pytest.raises(ValueError, match="cannot decode every responder set accurately"):
        matmul_code("gpd", workers=40, m=4, n=2, d=4, points="chebyshev")


@pytest.mark.slow  # a 2000 x 2000 product on eight workers: make test-slow
def test_the_readmes_matmul_showcase_always_corrects_its_wrong_worker(cluster):
    """The README's mm.yaml, as written: the worker that flips a bit must be among the replies a
    round waits for (before, the one reply not waited for could be its own, and nothing was
    corrected); the late worker is the one left out, and the product is A @ B all the same."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    spec = re.search(r"cat > mm\.yaml <<'YAML'\n(.*?)\nYAML\n", readme, re.S).group(1)
    local = cluster(8)
    with local.client() as client:
        job = client.wait(client.submit(spec).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        job = client.get(job.id, history=True)
        product = client.result(job.id)["product"]
    (record,) = job.history
    assert 7 not in record.responders  # the late one; 3 was waited for, located and left out of the decode
    assert (record.errors_detected, record.errors_corrected, record.located) == (1, 1, (3,))
    rng = np.random.default_rng(1)  # the documented seeded standard normals (docs/jobs.md, inputs.generate)
    a, b = rng.standard_normal((2000, 2000)), rng.standard_normal((2000, 500))
    assert np.abs(product - a @ b).max() <= 1e-9 * np.abs(a @ b).max()
