"""Sparse data: CSR checks, svmlight and sparse .npz files, models computing on CSR rows."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from coded.ml.data import Dataset, load_file
from coded.ml.data.sparse import csr_from_arrays, row_slice
from coded.ml.data.svmlight import read_svmlight
from coded.ml.evaluation import evaluate
from coded.ml.models import MLP, LinearRegression, LogisticRegression, SoftmaxRegression

X = scipy.sparse.random(60, 40, density=0.1, format="csr", random_state=1)
Y = np.random.default_rng(2).integers(0, 2, 60)


def write_csr_npz(path, x, y, **extra):
    np.savez(path, format="csr", shape=x.shape, data=x.data, indices=x.indices, indptr=x.indptr, y=y, **extra)


def test_a_checked_csr_matrix_is_canonical_and_shares_its_arrays():
    data = np.array([3.0, 1.0, 2.0])
    x = csr_from_arrays(data, np.array([2, 0, 1], np.int32), np.array([0, 2, 3], np.int32), (2, 4))
    assert x.has_canonical_format and x.indices.tolist() == [0, 2, 1]  # sorted within each row
    assert x.toarray().tolist() == [[1.0, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 0.0]]


@pytest.mark.parametrize(("arrays", "message"), [
    (([1.0, 2.0], [0, 5], [0, 1, 2]), r"column index 5 in row 1 is out of range \(the matrix has 4 columns: 0..3\)"),
    (([1.0, 2.0], [0, -1], [0, 1, 2]), r"column index -1 in row 1 is out of range"),
    (([1.0, 2.0], [0, 1], [0, 2, 1, 2]), r"indptr has 4 entries; 2 rows need 3"),
    (([1.0, 2.0], [0, 1], [0, 2, 2]), None),
    (([1.0, 2.0, 3.0], [0, 1, 2], [0, 3, 2]), r"indptr must start at 0 and end at the number of values, 3"),
    (([1.0, 2.0, 3.0], [0, 1, 2], [0, 2, 1]), r"must start at 0 and end"),
    (([1.0, np.nan], [0, 1], [0, 1, 2]), r"row 1 holds nan; values must be finite"),
    (([1.0], [0, 1], [0, 1, 1]), r"2 indices for 1 values"),
])
def test_malformed_csr_arrays_are_refused_naming_the_row(arrays, message):
    data, indices, indptr = (np.asarray(a) for a in arrays)
    if message is None:
        assert csr_from_arrays(data, indices, indptr, (2, 4)).nnz == 2
        return
    with pytest.raises(ValueError, match=message):
        csr_from_arrays(data, indices, indptr, (len(indptr) - 1 if len(indptr) == 3 else 2, 4))


def test_a_decreasing_indptr_names_the_row():
    with pytest.raises(ValueError, match=r"x: indptr decreases at row 1"):
        csr_from_arrays(np.ones(3), np.array([0, 1, 2]), np.array([0, 2, 1, 3]), (3, 4))


def test_svmlight_is_read_as_the_text_says(tmp_path):
    path = tmp_path / "train.svm"
    path.write_text("# a comment line\n+1 1:0.5 3:2.0 # trailing comment\n-1 2:1\n\n-1 qid:7 4:-3e-1\n")
    x, y = read_svmlight(path)
    assert x.toarray().tolist() == [[0.5, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, -0.3]]
    assert y.tolist() == [1.0, -1.0, -1.0]
    dataset = load_file(path)  # -1/+1 labels become 0/1 for classification
    assert dataset.sparse and dataset.y_train.tolist() == [1, 0, 0] and dataset.classes == 2
    assert load_file(path, format="svmlight", features=10).features == 10
    zero = tmp_path / "zero.svm"
    zero.write_text("0 0:1 2:1\n1 1:2\n")
    assert load_file(zero, format="svmlight", zero_based=True).x_train.toarray().tolist() == [[1, 0, 1], [0, 2, 0]]


@pytest.mark.parametrize(("line", "problem"), [
    ("1 0:1", r"line 3: index 0 in '0:1': indices start at 1 \(one-based\)"),
    ("1 3:1 2:1", r"line 3: index 2 in '2:1' does not follow 3: indices must ascend"),
    ("1 2:abc", r"line 3: the value of '2:abc' is not a number"),
    ("yes 2:1", r"line 3: the label 'yes' is not a number"),
    ("1 2:nan", r"line 3: the value of '2:nan' is not finite"),
    ("1 2=1", r"line 3: '2=1' is not index:value"),
    ("1 9:1", r"line 3: index 9 in '9:1' is beyond the 5 features"),
])
def test_a_malformed_svmlight_line_is_named(tmp_path, line, problem):
    path = tmp_path / "bad.svm"
    path.write_text(f"1 1:1\n# comment\n{line}\n0 2:1\n")
    with pytest.raises(ValueError, match=problem):
        load_file(path, format="svmlight", features=5)


def test_an_index_past_int64_is_a_malformed_file(tmp_path):
    path = tmp_path / "huge.svm"
    path.write_text("1 1:1 9223372036854775806:1\n0 2:1\n")  # scikit-learn's reader overflows on it
    with pytest.raises(ValueError, match="not svmlight/libsvm text"):
        load_file(path, format="svmlight")


def test_a_sparse_npz_is_read_as_scipy_reads_it(tmp_path):
    write_csr_npz(tmp_path / "train.npz", X, Y)
    dataset = load_file(tmp_path / "train.npz")
    # the independent reader: scipy's own, of the same file
    assert (dataset.x_train != scipy.sparse.load_npz(tmp_path / "train.npz")).nnz == 0
    assert dataset.sparse and dataset.features == 40 and dataset.y_train.tolist() == Y.tolist()
    assert dataset.x_test.shape == (0, 40) and dataset.x_test.format == "csr"


@pytest.mark.parametrize(("change", "problem"), [
    ({"y": None}, r"a sparse x needs the arrays shape, data, indices, indptr and y \(missing y\)"),
    ({"format": "csc"}, r"the sparse x is stored as 'csc'; only 'csr' is read"),
    ({"shape": np.array([60, 30])}, r"column index 3\d in row \d+ is out of range \(the matrix has 30 columns"),
    ({"shape": np.array([61, 40])}, r"shape says 61 rows, indptr holds 60"),
    ({"extra": np.ones(2)}, r"unknown array\(s\) \['extra'\] beside a sparse x"),
])
def test_a_bad_sparse_npz_is_refused_naming_what_is_wrong(tmp_path, change, problem):
    arrays = {"format": "csr", "shape": np.array(X.shape), "data": X.data, "indices": X.indices, "indptr": X.indptr,
              "y": Y, **change}
    np.savez(tmp_path / "bad.npz", **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(ValueError, match=r"bad.npz: .*" + problem):
        load_file(tmp_path / "bad.npz")


def test_a_dataset_is_sparse_in_both_splits_or_neither():
    assert Dataset(X, Y, X[:5], Y[:5], classes=2).sparse
    with pytest.raises(ValueError, match="both be sparse or both dense"):
        Dataset(X, Y, X[:5].toarray(), Y[:5], classes=2)
    bad = X.copy()
    bad.data[3] = np.inf
    with pytest.raises(ValueError, match=r"x_train: row \d+ holds inf"):
        Dataset(bad, Y, X[:0], Y[:0], classes=2)


def test_logistic_gradients_on_csr_rows_match_the_formula():
    """The independent computation: X^T (sigmoid(X w + b) - y) with dense numpy."""
    model = LogisticRegression(40)
    params = np.random.default_rng(3).normal(size=41)
    loss, grad = model.loss_and_grad(params, X, Y)
    dense = X.toarray()
    z = dense @ params[:-1] + params[-1]
    residual = 1 / (1 + np.exp(-z)) - Y
    assert np.allclose(grad[:-1], dense.T @ residual, rtol=1e-12, atol=1e-12)
    assert np.isclose(grad[-1], residual.sum(), rtol=1e-12)
    assert np.isclose(loss, np.sum(np.logaddexp(0, z) - Y * z), rtol=1e-12)


@pytest.mark.parametrize("model", [LinearRegression(40, l2=0.1), SoftmaxRegression(40, 3), MLP(40, 3, [7])],
                         ids=lambda m: type(m).__name__)
def test_every_numpy_model_computes_the_same_on_csr_and_dense_rows(model):
    rng = np.random.default_rng(4)
    params = rng.normal(size=model.size)
    y = rng.normal(size=60) if model.task == "regression" else rng.integers(0, model.classes, 60)
    sparse, dense = model.loss_and_grad(params, X, y), model.loss_and_grad(params, X.toarray(), y)
    assert np.isclose(sparse[0], dense[0], rtol=1e-12) and np.allclose(sparse[1], dense[1], rtol=1e-12, atol=1e-12)
    assert np.allclose(model.predict(params, X), model.predict(params, X.toarray()), rtol=1e-12)
    assert model.work(60, density=0.1) < model.work(60)


def test_evaluation_on_csr_rows():
    model = LogisticRegression(40)
    params = np.random.default_rng(5).normal(size=41)
    assert evaluate(model, params, X, Y) == pytest.approx(evaluate(model, params, X.toarray(), Y), rel=1e-12)


def test_a_model_refuses_csr_rows_of_another_width():
    with pytest.raises(ValueError, match=r"sparse x must be a float64 CSR matrix of shape \(b, 41\)"):
        LogisticRegression(41).loss(np.zeros(42), X, Y)


@pytest.mark.parametrize(("start", "stop"), [(0, 7), (2, 5), (3, 3), (5, 100), (6, 7)])
def test_a_row_slice_of_csr_shares_its_values_and_equals_scipy_s_slice(start, stop):
    rng = np.random.default_rng(4)
    x = scipy.sparse.random(7, 9, density=0.4, format="csr", random_state=rng)
    rows = row_slice(x, start, stop)
    assert np.array_equal(rows.toarray(), x[start:stop].toarray())  # scipy's own slicing, which copies
    assert rows.nnz == 0 or np.shares_memory(rows.data, x.data)
    dense = x.toarray()
    assert np.shares_memory(row_slice(dense, start, stop), dense) or start >= stop
