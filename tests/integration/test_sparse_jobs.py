"""Sparse data end to end on real processes: an svmlight upload is partitioned, sent to the
workers and computed on as CSR rows, and every exact code ends where a plain numpy loop over
the dense matrix ends."""

from __future__ import annotations

import io
import re

import grpc
import numpy as np
import pytest
import scipy.sparse
import yaml

from coded.client.reports import JobState

from .conftest import BASE_SPEC, metric, scrape

pytestmark = pytest.mark.integration

ROWS, FEATURES, L2, LR, MOMENTUM, ITERATIONS = 1200, 3000, 1e-3, 2.0, 0.9, 12


def svmlight_text(seed: int = 0) -> tuple[str, scipy.sparse.csr_matrix, np.ndarray]:
    """A sparse binary problem as libsvm writes it (one-based indices, labels -1/+1)."""
    rng = np.random.default_rng(seed)
    x = scipy.sparse.random(ROWS, FEATURES, density=0.004, format="csr", random_state=seed,
                            data_rvs=lambda k: rng.choice([1.0, 0.5, 2.0], k))
    y = np.where(x @ rng.normal(size=FEATURES) + 0.1 * rng.normal(size=ROWS) > 0, 1, -1)
    lines = []
    for row in range(ROWS):
        start, end = x.indptr[row], x.indptr[row + 1]
        pairs = " ".join(f"{j + 1}:{v:g}" for j, v in zip(x.indices[start:end], x.data[start:end], strict=True))
        lines.append(f"{y[row]:+d} {pairs}".rstrip())
    return "\n".join(lines) + "\n", x, (y > 0).astype(float)


def reference(x: scipy.sparse.csr_matrix, y: np.ndarray) -> np.ndarray:
    """Full-batch L2 logistic regression with Nesterov momentum, in plain numpy over the dense
    matrix: the independent computation every job is compared with."""
    dense = x.toarray()
    w, b = np.zeros(FEATURES), 0.0
    vw, vb = np.zeros(FEATURES), 0.0
    for _ in range(ITERATIONS):
        residual = 1 / (1 + np.exp(-(dense @ w + b))) - y
        gw, gb = dense.T @ residual / ROWS + L2 * w, residual.sum() / ROWS
        vw, vb = MOMENTUM * vw - LR * gw, MOMENTUM * vb - LR * gb
        w, b = w + MOMENTUM * vw - LR * gw, b + MOMENTUM * vb - LR * gb
    return np.concatenate([w, [b]])


CODES = [
    {"code": {"scheme": "uncoded"}},
    {"code": {"scheme": "cyclic", "stragglers": 2}},  # replies as the master chooses
    {"code": {"scheme": "cyclic", "stragglers": 2}, "stream": {}},
    {"code": {"scheme": "cyclic", "stragglers": 2}, "stream": "off"},
    {"code": {"scheme": "frc", "stragglers": 1}, "stream": {"chunks": 2}},
    {"code": {"scheme": "ye_abbe", "stragglers": 1, "m": 2}},
    {"code": {"scheme": "partial", "stragglers": 1, "alpha": 2.0}},
]


def test_every_exact_code_trains_on_svmlight_rows_to_the_numpy_reference(shared_cluster):
    text, x, y = svmlight_text()
    expected = reference(x, y)
    local = shared_cluster
    slow = {"stragglers": {"model": "fixed", "workers": [4], "delay": 0.2}}
    with local.client() as client:
        for changes in CODES:
            spec = {**BASE_SPEC, "model": {"type": "logistic", "l2": L2},
                    "data": {"type": "svmlight", "path": "train.svm", "features": FEATURES, "test_fraction": 0},
                    "optimizer": {"type": "nesterov", "lr": LR, "momentum": MOMENTUM},
                    "iterations": ITERATIONS, "eval_every": 0, "faults": slow, **changes}
            job = client.wait(client.submit(yaml.safe_dump(spec), {"train.svm": text.encode()}).id)
            assert job.state == JobState.SUCCEEDED, (changes, job.reason)
            assert job.replies is not None and job.replies.received_bytes == (FEATURES + 1) * 8
            # the master predicted its rounds for where they ran: its six workers registered from
            # its machine, sharing its cores, with no links between them
            assert job.replies.predicted_s > 0 and "6 worker(s) on the master's" in job.replies.reason
            assert "no links" in job.replies.reason
            if "stream" in changes:
                assert job.replies.streamed == (changes["stream"] != "off")
            result = client.result(job.id)
            params = np.concatenate([result["layer0.weights"].ravel(), result["layer0.bias"]])
            difference = np.abs(params - expected).max() / np.abs(expected).max()
            assert difference <= 1e-8, (changes, difference)


WIRE_CODES = [
    {"code": {"scheme": "uncoded"}},
    {"code": {"scheme": "cyclic", "stragglers": 2}, "stream": {}},
    {"code": {"scheme": "cyclic", "stragglers": 2}, "stream": "off"},
    {"code": {"scheme": "ye_abbe", "stragglers": 1, "m": 2}},
]


def test_float32_on_the_wire_halves_the_bytes_and_stays_within_float32_rounding(cluster):
    text, x, y = svmlight_text(1)
    expected = reference(x, y)
    local = cluster(6, metrics=True)
    received = {}
    with local.client() as client:
        for changes in WIRE_CODES:
            for wire in ("float64", "float32"):
                spec = {**BASE_SPEC, "model": {"type": "logistic", "l2": L2},
                        "data": {"type": "svmlight", "path": "train.svm", "features": FEATURES, "test_fraction": 0},
                        "optimizer": {"type": "nesterov", "lr": LR, "momentum": MOMENTUM},
                        "iterations": ITERATIONS, "eval_every": 0, "wire": wire, **changes}
                job = client.wait(client.submit(yaml.safe_dump(spec), {"train.svm": text.encode()}).id)
                assert job.state == JobState.SUCCEEDED, (changes, wire, job.reason)
                result = client.result(job.id)
                params = np.concatenate([result["layer0.weights"].ravel(), result["layer0.bias"]])
                difference = np.abs(params - expected).max() / np.abs(expected).max()
                # float32 messages: rounding of ~6e-8 per entry, grown by the decode and the iterations
                assert difference <= (1e-8 if wire == "float64" else 1e-4), (changes, wire, difference)
                received[changes["code"]["scheme"], wire] = metric(
                    scrape(local.metrics_ports["master"]), "coded_master_received_bytes_total", job_id=job.id)
    # uncoded replies are every worker's whole message in every iteration: exactly half the bytes
    assert received["uncoded", "float32"] * 2 == received["uncoded", "float64"] > 0


def test_bad_sparse_uploads_are_refused_naming_the_problem_and_the_cluster_goes_on(shared_cluster):
    local = shared_cluster
    base = {**BASE_SPEC, "workers": 3, "code": {"scheme": "cyclic", "stragglers": 1}, "iterations": 3}
    bad_line = "+1 1:1 2:1\n-1 2:1 1:1\n"
    x = scipy.sparse.random(30, 10, density=0.3, format="csr", random_state=0)
    out_of_range = io.BytesIO()
    np.savez(out_of_range, format="csr", shape=np.array([30, 8]), data=x.data, indices=x.indices, indptr=x.indptr,
             y=np.arange(30) % 2)
    cases = [
        ({"type": "svmlight", "path": "a.svm"}, {"a.svm": bad_line.encode()},
         r"line 2: index 1 in '1:1' does not follow 2: indices must ascend"),
        ({"type": "svmlight", "path": "e.svm"}, {"e.svm": b"1 1:1 9223372036854775806:1\n0 2:1\n"},
         r"not svmlight/libsvm text"),  # an index past int64: scikit-learn's reader overflows
        ({"type": "npz", "path": "b.npz"}, {"b.npz": out_of_range.getvalue()},
         r"column index [89] in row \d+ is out of range \(the matrix has 8 columns"),
        ({"type": "categorical", "path": "c.csv"}, {"c.csv": b"RESOURCE,MGR_ID\n1,2\n3,4\n"},
         r"has no label column 'ACTION' \(its columns: RESOURCE, MGR_ID\)"),
        ({"type": "categorical", "path": "d.csv", "label": "y"}, {"d.csv": b"y,a,b\n1,2,3\n0,4\n"},
         r"line 3 has 2 fields; the header has 3"),
    ]
    with local.client() as client:
        for data, files, message in cases:
            with pytest.raises(grpc.RpcError) as raised:
                client.submit(yaml.safe_dump({**base, "data": data}), files)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert raised.value.details().startswith("data.path: "), raised.value.details()
            assert re.search(message, raised.value.details()), raised.value.details()
        job = client.wait(client.submit(yaml.safe_dump(base)).id)  # the cluster runs other jobs as before
        assert job.state == JobState.SUCCEEDED


def test_the_amazon_shaped_data_train_to_the_same_parameters_with_and_without_a_code(shared_cluster):
    """The papers' workload, generated and encoded on the master and on every worker alike."""
    local = shared_cluster
    spec = {**BASE_SPEC, "workers": 5, "model": {"type": "logistic", "l2": 1e-4},
            "data": {"type": "amazon_like", "rows": 8000, "seed": 2}, "optimizer": {"type": "nesterov", "lr": 1.0},
            "iterations": 6, "eval_every": 3}
    with local.client() as client:
        results = []
        for code in ({"scheme": "uncoded"}, {"scheme": "cyclic", "stragglers": 1},
                     {"scheme": "ye_abbe", "stragglers": 1, "m": 2}):
            job = client.wait(client.submit(yaml.safe_dump({**spec, "code": code})).id)
            assert job.state == JobState.SUCCEEDED, job.reason
            assert job.history[-1].test_auc > 0.5
            results.append(client.result(job.id)["layer0.weights"].ravel())
        assert results[0].size > 20_000  # one-hot columns of 9 columns and their pairs
        for other in results[1:]:
            assert np.abs(other - results[0]).max() <= 1e-8 * np.abs(results[0]).max()


def refused_upload(local) -> grpc.RpcError:
    """Submit a 1.1 MB upload that ``local``'s master refuses; check that the refusal kept no job
    and no staged file, and that the master then runs a job. Returns the refusal."""
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    np.savez(buffer, x=rng.standard_normal((1400, 100)), y=rng.integers(0, 2, 1400))  # 1.1 MB > 1 MiB
    spec = yaml.safe_dump({**BASE_SPEC, "workers": 2, "code": {"scheme": "uncoded"}, "iterations": 2,
                           "data": {"type": "npz", "path": "big.npz"}})
    with local.client() as client:
        with pytest.raises(grpc.RpcError) as refused:
            client.submit(spec, {"big.npz": buffer.getvalue()})
        assert client.jobs() == []
        assert not any((local.state_dir / "uploads").iterdir())  # its staging dir went with it
        small = io.BytesIO()
        np.savez(small, x=rng.standard_normal((200, 10)), y=rng.integers(0, 2, 200))
        job = client.wait(client.submit(spec.replace("big.npz", "small.npz"), {"small.npz": small.getvalue()}).id)
        assert job.state == JobState.SUCCEEDED, job.reason
    return refused.value


def test_an_upload_over_max_upload_mb_is_refused_naming_the_flag_and_leaves_nothing_behind(cluster):
    """Issue 42: ``--max-upload-mb`` on a real master; the refused upload's staging files are
    gone, and the master runs the next job."""
    refused = refused_upload(cluster(2, master_args=["--max-upload-mb", "1"]))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "uploaded files exceed 1048576 bytes (master --max-upload-mb)" in refused.details()


def test_an_upload_the_state_dir_refuses_gets_a_storage_error_naming_it_and_leaves_nothing_behind(cluster):
    """A write refused while an upload arrives (here: the kernel's file-size limit on the master
    process, EFBIG, as a full disk's ENOSPC would be) is the state dir's error, not INTERNAL; the
    staging files go, and the master runs the next job."""
    import resource

    local = cluster(2)
    assert local.master is not None
    limit = 1 << 20
    resource.prlimit(local.master.pid, resource.RLIMIT_FSIZE, (limit, limit))
    refused = refused_upload(local)
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused
    assert f"cannot write an upload to the state dir {local.state_dir}" in refused.details()
    assert "File too large" in refused.details()
