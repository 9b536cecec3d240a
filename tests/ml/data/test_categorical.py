"""Categorical CSVs, their one-hot encoding with interactions (against scikit-learn), the Amazon-shaped generator."""

from __future__ import annotations

import hashlib
import io
import itertools

import numpy as np
import pytest
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import LabelEncoder, OneHotEncoder

from coded.ml.data.amazon import AMAZON_COLUMNS, AMAZON_LABEL, AMAZON_ROWS, AMAZON_SKIP, amazon_like
from coded.ml.data.categorical_csv import MAX_COLUMNS, CategoricalTable, read_categorical_csv
from coded.ml.data.one_hot import column_names, encode

#: l of amazon_like() with interactions=2 and AMAZON_SKIP, as its docstring states
AMAZON_LIKE_L = 248_575
#: SHA-256 of amazon_like(rows=3000, seed=4)
AMAZON_LIKE_3000_4 = "ef96d15c46b74441cc82ed3aa0bf63ba43186b1d2b43d455a426947d3328d1b7"


def read(text: str, **options) -> CategoricalTable:
    return read_categorical_csv(io.StringIO(text), **options)


@pytest.fixture(scope="module")
def amazon_text() -> str:
    return amazon_like()


@pytest.fixture(scope="module")
def amazon(amazon_text) -> CategoricalTable:
    return read(amazon_text)


def random_csv(rng: np.random.Generator, rows: int, cardinalities: list[int]) -> str:
    """A CSV with the label first and columns C0, C1, ... of random integer ids of those cardinalities."""
    header = ",".join(["ACTION"] + [f"C{j}" for j in range(len(cardinalities))])
    ids = [rng.choice(100_000, size=count, replace=False)[rng.integers(count, size=rows)] for count in cardinalities]
    labels = rng.integers(2, size=rows)
    labels[:2] = 0, 1
    lines = [",".join(map(str, row)) for row in np.column_stack([labels, *ids]).tolist()]
    return "\n".join([header, *lines]) + "\n"


def oracle(text: str, interactions: int, skip: tuple[tuple[str, str], ...]):
    """Tandon et al.'s preprocessing recomputed independently: LabelEncoder per column, tuples of codes
    label-encoded by sorting them, scikit-learn's OneHotEncoder over all rows."""
    lines = text.splitlines()
    names = lines[0].split(",")[1:]
    raw = np.array([line.split(",")[1:] for line in lines[1:]], dtype=np.int64)
    base = np.column_stack([LabelEncoder().fit_transform(raw[:, j]) for j in range(len(names))])
    encoded = []
    for degree in range(1, interactions + 1):
        for combination in itertools.combinations(range(len(names)), degree):
            chosen = {names[j] for j in combination}
            if any(a in chosen and b in chosen for a, b in skip):
                continue
            tuples = [tuple(row) for row in base[:, combination].tolist()]
            rank = {value: k for k, value in enumerate(sorted(set(tuples)))}
            encoded.append([rank[value] for value in tuples])
    return OneHotEncoder(sparse_output=True, dtype=np.float64).fit_transform(np.array(encoded).T).tocsr()


def assert_same_csr(ours, theirs) -> None:
    theirs.sort_indices()
    assert ours.shape == theirs.shape and ours.dtype == np.float64
    assert ours.has_canonical_format
    np.testing.assert_array_equal(ours.indptr, theirs.indptr)
    np.testing.assert_array_equal(ours.indices, theirs.indices)
    np.testing.assert_array_equal(ours.data, theirs.data)


# --- the encoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("interactions", [1, 2, 3])
@pytest.mark.parametrize("skip", [(), (("C0", "C2"), ("C3", "C1"))], ids=["all", "skip"])
def test_encoding_equals_label_then_one_hot_encoding(interactions, skip):
    text = random_csv(np.random.default_rng(interactions), 400, [30, 7, 2, 50, 11])
    x = encode(read(text), interactions, skip)
    assert_same_csr(x, oracle(text, interactions, skip))
    assert x.indices.dtype == np.int32 and x.indptr.dtype == np.int32


@pytest.mark.parametrize("interactions", [2, 3])
def test_encoding_of_amazon_shaped_data(interactions):
    text = amazon_like(rows=1500, seed=3)
    assert_same_csr(encode(read(text), interactions, AMAZON_SKIP), oracle(text, interactions, AMAZON_SKIP))


def test_each_row_holds_one_per_encoded_column():
    table = read(random_csv(np.random.default_rng(0), 200, [5, 9, 3]))
    x = encode(table, 3)
    assert np.all(np.diff(x.indptr) == 7) and np.all(x.data == 1.0)
    assert x.shape[1] == sum(len({tuple(row) for row in table.codes[:, list(c)].tolist()})
                             for d in (1, 2, 3) for c in itertools.combinations(range(3), d))


def test_column_names_follow_the_order_of_the_combinations():
    table = read("ACTION,A,B,C\n0,1,2,3\n1,4,5,6\n")
    assert column_names(table, 1) == ["A", "B", "C"]
    assert column_names(table, 3) == ["A", "B", "C", "A*B", "A*C", "B*C", "A*B*C"]
    assert column_names(table, 3, [("C", "A")]) == ["A", "B", "C", "A*B", "B*C"]


def test_the_references_combinations_of_the_amazon_columns(amazon):
    names = column_names(amazon, 2, AMAZON_SKIP)
    assert names[:9] == list(AMAZON_COLUMNS) and len(names) == 9 + 36 - 2
    assert "ROLE_ROLLUP_1*ROLE_ROLLUP_2" not in names and "ROLE_TITLE*ROLE_FAMILY" not in names
    assert "RESOURCE*MGR_ID" in names and "ROLE_TITLE*ROLE_CODE" in names
    assert len(column_names(amazon, 3, AMAZON_SKIP)) == 43 + 84 - 2 * 7


def test_encode_refuses_bad_arguments():
    table = read("ACTION,A,B\n0,1,2\n1,3,4\n")
    with pytest.raises(ValueError, match=r"interactions must be in 1\.\.3 \(got 4\)"):
        encode(table, 4)
    with pytest.raises(ValueError, match="interactions must be >= 1"):
        encode(table, 0)
    with pytest.raises(TypeError, match="interactions must be an integer"):
        encode(table, "2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"skip names 'Z', not a column of the table \(its columns: A, B\)"):
        encode(table, 2, [("A", "Z")])
    with pytest.raises(ValueError, match="two different columns"):
        encode(table, 2, [("A", "A")])
    with pytest.raises(TypeError, match="pairs of column names"):
        encode(table, 2, ["AB"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="table must be a CategoricalTable"):
        encode(np.zeros((2, 2)))  # type: ignore[arg-type]


def test_table_is_validated_and_read_only():
    table = CategoricalTable(("A",), np.array([[1], [0]]), np.array([0, 1]), (2,))
    assert table.codes.dtype == np.int64 and not table.codes.flags.writeable and not table.labels.flags.writeable
    with pytest.raises(ValueError, match=r"codes of column 'A' must take every value 0\.\.2"):
        CategoricalTable(("A",), np.array([[0], [2]]), np.array([0, 1]), (3,))
    with pytest.raises(ValueError, match=r"codes must have shape \(N, 2\)"):
        CategoricalTable(("A", "B"), np.array([[0], [1]]), np.array([0, 1]), (2, 2))
    with pytest.raises(ValueError, match=r"labels must have shape \(2,\)"):
        CategoricalTable(("A",), np.array([[0], [1]]), np.array([0, 1, 1]), (2,))
    with pytest.raises(TypeError, match="codes must be an integer array"):
        CategoricalTable(("A",), np.array([[0.0], [1.0]]), np.array([0, 1]), (2,))


# --- the reader ---------------------------------------------------------------------------------


def test_reader_label_encodes_by_sorted_values():
    table = read("ACTION,N,T,M\n1,10,b,7\n0, 9,a,x\n1,100 ,b,7\n0,9,c,x\n")
    assert table.columns == ("N", "T", "M") and table.cardinalities == (3, 3, 2)
    np.testing.assert_array_equal(table.codes, [[1, 1, 0], [0, 0, 1], [2, 1, 0], [0, 2, 1]])
    np.testing.assert_array_equal(table.labels, [1, 0, 1, 0])
    assert table.codes.dtype == np.int64 and table.labels.dtype == np.int64


def test_reader_keeps_the_named_columns_in_their_order():
    table = read("A,ACTION,B\nx,0,1\ny,1,1\n", columns=["B", "A"])
    assert table.columns == ("B", "A") and table.cardinalities == (1, 2)


def test_minus_one_plus_one_labels_become_zero_one():
    table = read("ACTION,A\n-1,3\n1,4\n1,3\n\n")  # and a blank line is skipped
    np.testing.assert_array_equal(table.labels, [0, 1, 1])


def test_reader_takes_a_path_and_names_it(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("\ufeffACTION,A\n1,2\n0,3\n", encoding="utf-8")
    assert read_categorical_csv(path).columns == ("A",)
    path.write_text("ACTION,A\n1,2\n0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.csv: line 3 has 1 fields; the header has 2"):
        read_categorical_csv(str(path))


@pytest.mark.parametrize(("text", "options", "message"), [
    ("RESOURCE,MGR_ID\n1,2\n", {}, r"the CSV has no label column 'ACTION' \(its columns: RESOURCE, MGR_ID\)"),
    ("ACTION,A,B\n1,2,3\n0,4\n", {}, "line 3 has 2 fields; the header has 3"),
    ("ACTION,A,B\n1,2,3\n0,4,5,6\n", {}, "line 3 has 4 fields; the header has 3"),
    ("ACTION,A,B\n1,2, \n0,4,5\n", {}, "line 2: the field of column 'B' is empty"),
    ("ACTION,A\n1,2\n0,3\nyes,4\n", {}, "line 4: the label 'yes' is not an integer"),
    ("ACTION,A\n1,2\n0,3\n2.0,4\n", {}, "line 4: the label '2.0' is not an integer"),
    ("ACTION,A\n1,2\n-2,3\n", {}, "line 3: the label -2 is negative"),
    ("ACTION,A\n0,2\n0,3\n", {}, "at least 2 classes"),
    ("ACTION,A\n-1,2\n-1,3\n", {}, "at least 2 classes"),
    ("ACTION,A\n1,2\n-1,3\n0,4\n", {}, "line 3: the label -1 is negative"),
    ("ACTION,A\n1,2\n0,3\n", {"columns": ["A", "B"]}, r"the CSV has no column 'B' \(its columns: ACTION, A\)"),
    ("ACTION,A\n1,2\n0,3\n", {"columns": ["ACTION"]}, "label column 'ACTION' cannot also be"),
    ("ACTION,A\n1,2\n0,3\n", {"columns": []}, "at least one column"),
    ("ACTION,A\n1,2\n0,3\n", {"label": "Y"}, "no label column 'Y'"),
    ("ACTION\n1\n0\n", {}, "no column besides the label"),
    ("ACTION,A,A\n1,2,3\n", {}, r"line 1: column names must be distinct \(A repeated\)"),
    ("ACTION,,B\n1,2,3\n", {}, "line 1: column 2 has no name"),
    ("ACTION,A\n", {}, "no data rows"),
    ("", {}, "the CSV is empty"),
    ("ACTION,A\n1," + "x" * 200_000 + "\n", {}, "line 2: field larger than field limit"),
    (",".join(f"C{j}" for j in range(MAX_COLUMNS + 1)) + "\n", {"label": "C0"}, "65 columns; at most 64"),
])
def test_reader_errors_name_the_line_and_the_problem(text, options, message):
    with pytest.raises(ValueError, match=message):
        read(text, **options)


def test_reader_type_errors():
    with pytest.raises(TypeError, match="source must be a path or a text stream"):
        read_categorical_csv(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="columns must be a sequence of column names"):
        read("ACTION,A\n1,2\n0,3\n", columns="A")


# --- the Amazon-shaped generator ----------------------------------------------------------------


def test_generator_has_the_amazon_files_shape(amazon_text, amazon):
    assert amazon_text.splitlines()[0] == ",".join([AMAZON_LABEL, *AMAZON_COLUMNS])
    assert amazon.rows == AMAZON_ROWS and amazon.columns == tuple(AMAZON_COLUMNS)
    assert amazon.cardinalities == tuple(AMAZON_COLUMNS.values())
    assert abs(amazon.labels.mean() - 0.94) < 0.002
    ids = np.array([line.split(",")[1:] for line in amazon_text.splitlines()[1:]], dtype=np.int64)
    assert ids.min() >= 1
    title, code = list(AMAZON_COLUMNS).index("ROLE_TITLE"), list(AMAZON_COLUMNS).index("ROLE_CODE")
    assert len({(a, b) for a, b in ids[:, [title, code]].tolist()}) == 343  # one to one


def test_generator_gives_the_stated_number_of_features(amazon):
    x = encode(amazon, 2, AMAZON_SKIP)
    assert x.shape == (AMAZON_ROWS, AMAZON_LIKE_L) and 200_000 <= x.shape[1] <= 350_000


def test_generator_is_deterministic():
    """The same text on every machine: its digest is fixed (it changes only if numpy changes the streams
    of its Generator; then the l and AUC in amazon_like's docstring need measuring again)."""
    text = amazon_like(rows=3000, seed=4)
    assert hashlib.sha256(text.encode()).hexdigest() == AMAZON_LIKE_3000_4
    assert amazon_like(rows=3000, seed=4) == text and amazon_like(rows=3000, seed=5) != text


def test_generator_labels_are_learnable(amazon):
    """Logistic regression (trained by SGD: seconds less than L-BFGS) separates the held-out rows."""
    x, y = encode(amazon, 2, AMAZON_SKIP), amazon.labels
    cut = int(0.8 * amazon.rows)
    model = SGDClassifier(loss="log_loss", max_iter=20, tol=None, random_state=0).fit(x[:cut], y[:cut])
    assert roc_auc_score(y[cut:], model.decision_function(x[cut:])) > 0.8


@pytest.mark.parametrize(("rows", "positive"), [(2, 0.94), (50, 0.5), (5000, 0.7)])
def test_generator_with_other_rows_and_shares(rows, positive):
    table = read(amazon_like(rows=rows, seed=1, positive=positive))
    assert table.rows == rows and set(np.unique(table.labels).tolist()) == {0, 1}
    assert all(count <= min(rows, full) for count, full in zip(table.cardinalities, AMAZON_COLUMNS.values(),
                                                               strict=True))
    assert abs(table.labels.mean() - positive) <= max(0.01, 1 / rows)


def test_generator_refuses_bad_arguments():
    with pytest.raises(ValueError, match="rows must be >= 2"):
        amazon_like(rows=1)
    with pytest.raises(ValueError, match="positive must be finite and in"):
        amazon_like(positive=1.0)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        amazon_like(seed=-1)
    with pytest.raises(TypeError, match="rows must be an integer"):
        amazon_like(rows=100.0)  # type: ignore[arg-type]
