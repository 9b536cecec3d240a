"""User data files: .npz and .csv round trips, and every malformed file refused with a ValueError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coded.ml.data import load_file


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_npz_round_trip_with_test_arrays(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((30, 4)), rng.integers(3, size=30)
    x_test, y_test = rng.standard_normal((5, 4)), np.array([0, 1, 2, 3, 1])
    np.savez(tmp_path / "train.npz", x=x, y=y, x_test=x_test, y_test=y_test)
    data = load_file(tmp_path / "train.npz")
    np.testing.assert_array_equal(data.x_train, x)
    np.testing.assert_array_equal(data.y_train, y)
    np.testing.assert_array_equal(data.x_test, x_test)
    np.testing.assert_array_equal(data.y_test, y_test)
    assert data.classes == 4 and data.y_train.dtype == np.int64 and data.name == "train.npz"


def test_npz_round_trip_regression_without_test_arrays(tmp_path):
    x, y = np.arange(12, dtype=np.float32).reshape(6, 2), np.linspace(-1, 1, 6)
    np.savez_compressed(tmp_path / "d.npz", x=x, y=y)
    data = load_file(str(tmp_path / "d.npz"), task="regression")
    np.testing.assert_array_equal(data.x_train, x)
    np.testing.assert_array_equal(data.y_train, y)
    assert data.classes == 0 and data.x_train.dtype == np.float64
    assert data.x_test.shape == (0, 2) and data.y_test.shape == (0,)


@pytest.mark.parametrize("header", ["", "f1,f2,f3,label\n"])
def test_csv_round_trip(tmp_path, header):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((20, 3)), rng.integers(2, size=20)
    rows = "".join(",".join(repr(float(v)) for v in row) + f",{label}\n" for row, label in zip(x, y, strict=True))
    data = load_file(write_csv(tmp_path / "data.csv", header + rows))
    np.testing.assert_array_equal(data.x_train, x)
    np.testing.assert_array_equal(data.y_train, y)
    assert data.classes == 2 and len(data.y_test) == 0


def test_csv_regression_and_a_single_row(tmp_path):
    data = load_file(write_csv(tmp_path / "one.csv", "1.5,2.5,-0.25\n"), task="regression")
    np.testing.assert_array_equal(data.x_train, [[1.5, 2.5]])
    np.testing.assert_array_equal(data.y_train, [-0.25])


def test_a_byte_order_mark_is_not_a_header(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf1,2,0\n3,4,1\n")
    np.testing.assert_array_equal(load_file(path).x_train, [[1, 2], [3, 4]])


def test_format_can_be_given_for_files_without_a_suffix(tmp_path):
    np.savez(tmp_path / "upload.npz", x=np.eye(3), y=np.array([0, 1, 1]))
    (tmp_path / "upload.npz").rename(tmp_path / "upload")
    assert load_file(tmp_path / "upload", format="npz").classes == 2
    write_csv(tmp_path / "upload2", "0,1\n1,0\n")
    assert load_file(tmp_path / "upload2", format="csv").classes == 2


def _npz(**arrays):
    def write(path: Path) -> Path:
        np.savez(path / "bad.npz", **arrays)
        return path / "bad.npz"

    return write


def _csv(text: str):
    return lambda path: write_csv(path / "bad.csv", text)


def _raw(name: str, content: bytes):
    def write(path: Path) -> Path:
        (path / name).write_bytes(content)
        return path / name

    return write


X, Y = np.ones((3, 2)), np.array([0, 1, 1])


@pytest.mark.parametrize(
    ("write", "task", "message"),
    [
        (_npz(x=np.array([[1.0, np.nan], [0, 0], [1, 1]]), y=Y), "classification",
         r"x_train must be finite \(found nan\)"),
        (_npz(x=X, y=np.array([0.0, np.inf, 1.0])), "regression", r"y_train must be finite \(found inf\)"),
        (_npz(x=np.array([[1, 2], [3]], dtype=object), y=Y[:2]), "classification",
         r"member 'x.npy' holds Python objects \(dtype object\), which are never unpickled: save one with "
         r"numpy.savez\(file, x=x, y=y\)"),
        (_npz(x=X.astype(str), y=Y), "classification", r"x must be numeric \(got dtype <U32\)"),
        (_npz(x=X, y=Y, w=Y), "classification", r"unknown array\(s\) \['w'\]"),
        (_npz(x=X), "classification", r"needs arrays x and y, and x_test with y_test or neither \(got \['x'\]\)"),
        (_npz(x=X, y=Y, x_test=X), "classification", "x_test with y_test or neither"),
        (_npz(x=np.ones(3), y=Y), "classification", r"x_train must have shape \(N, f\) \(got \(3,\)\)"),
        (_npz(x=X, y=Y[:2]), "classification", r"y_train must have shape \(3,\) to match x_train \(got \(2,\)\)"),
        (_npz(x=X, y=Y, x_test=np.ones((2, 3)), y_test=Y[:2]), "classification",
         r"x_test must have shape \(M, 2\) like x_train \(got \(2, 3\)\)"),
        (_npz(x=np.ones((0, 2)), y=np.ones(0)), "regression", "the training set must have samples and features"),
        (_npz(x=X, y=np.array([0, 1.5, 1])), "classification",
         r"classification labels must be integers >= 0, or every one -1 or \+1 \(taken as 0 and 1\): "
         r"example 2 has 1.5 "),
        (_npz(x=X, y=np.array([0, -1, 1])), "classification",
         r"classification labels must be integers >= 0, .*: example 2 has -1 and example 1 has 0 "),
        # issue 56: a label 3 in a file of -1/+1 labels named neither the -1/+1 rule nor the line
        (_raw("a.svm", b"1 1:0.5\n-1 2:1\n3 1:2\n-1 2:0.1\n"), "classification",
         r"or every one -1 or \+1 \(taken as 0 and 1\): example 2 has -1 and example 3 has 3 "),
        (_npz(x=X, y=np.zeros(3)), "classification", r"needs labels of at least 2 classes \(largest label: 0\)"),
        (_csv("1,2,0\n3,4\n"), "classification", "not a rectangular table of numbers"),
        (_csv("1,2,0\n3,abc,1\n"), "classification", "not a rectangular table of numbers .*abc"),
        (_csv("1,nan,0\n3,4,1\n"), "classification", r"x_train must be finite \(found nan\)"),
        (_csv("a,b,label\n"), "classification", "has no data rows"),
        (_csv(""), "classification", "has no data rows"),
        (_csv("1\n2\n"), "regression", r"needs at least one feature column and the label column \(got 1 column\)"),
        (_raw("bad.npz", b"this is not a zip archive"), "classification",
         r"the file is text \('this is not a zip archiv'...\), not a .npy or .npz file: save one with numpy.savez"),
        (_raw("bad.npz", b"PK\x03\x04 truncated"), "classification", r"the file is a damaged .npz \(zip\) archive"),
        (_raw("bad.csv", b"\xff\xfe1,2\n"), "classification", "codec can't decode"),
    ],
)
def test_malformed_files_raise_value_error_naming_the_file(tmp_path, write, task, message):
    path = write(tmp_path)
    with pytest.raises(ValueError, match=message) as caught:
        load_file(path, task=task)
    assert str(caught.value).startswith(f"{path}: ")


def test_a_single_npy_array_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "x.npy").rename(tmp_path / "x.npz")
    with pytest.raises(ValueError, match=r"x.npz: not an .npz archive \(a single .npy array\?\)"):
        load_file(tmp_path / "x.npz")


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"task must be one of classification, regression \(got 'ranking'\)"):
        load_file(tmp_path / "a.csv", task="ranking")
    with pytest.raises(ValueError, match=r"a.parquet: format must be one of npz, csv, svmlight \(got 'parquet'\)"):
        load_file(tmp_path / "a.parquet")
    with pytest.raises(FileNotFoundError):
        load_file(tmp_path / "missing.csv")
