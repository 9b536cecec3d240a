"""Categorical tables: label-encoded columns read from CSV text.

The gradient coding papers (Tandon et al., ICML 2017; Ye & Abbe, ICML 2018) train logistic
regression on Kaggle's Amazon Employee Access data: a label ``ACTION`` and nine categorical columns
of integer ids. :func:`read_categorical_csv` reads such a CSV into a :class:`CategoricalTable`, each
column label-encoded as their preprocessing (Tandon et al.'s ``arrange_real_data.py``) does;
:mod:`coded.ml.data.one_hot` encodes the table as they did, and :mod:`coded.ml.data.amazon` writes
a synthetic file of the same shape.

>>> import io
>>> table = read_categorical_csv(io.StringIO("ACTION,A,B\\n1,7,x\\n0,3,x\\n1,7,y\\n"))
>>> table.codes.tolist(), table.labels.tolist(), table.cardinalities
([[1, 0], [0, 0], [1, 1]], [1, 0, 1], (2, 2))
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from coded.base.checks import check_int

from .dataset import read_only

__all__ = ["DEFAULT_LABEL", "MAX_COLUMNS", "CategoricalTable", "read_categorical_csv"]

#: the label column when none is named: the Amazon Employee Access file's
DEFAULT_LABEL = "ACTION"
#: the most columns a categorical CSV may have (the Amazon file has 10)
MAX_COLUMNS = 64


@dataclass(frozen=True)
class CategoricalTable:
    """Label-encoded categorical columns and integer labels, validated; the arrays are read-only.

    Attributes
    ----------
    columns : tuple of str
        The categorical columns' names, in file order; distinct, at least one.
    codes : (N, c) ndarray of int64
        ``codes[i, j]`` is row i's value of column j as its rank among the column's distinct
        values, in ``0..cardinalities[j] - 1``; N >= 1.
    labels : (N,) ndarray of int64
        Class labels >= 0.
    cardinalities : tuple of int
        The number of distinct values of each column; each occurs in ``codes``.

    Raises
    ------
    TypeError, ValueError
        For shapes or dtypes that do not fit, or codes that are not ranks of every value.
    """

    columns: tuple[str, ...]
    codes: np.ndarray
    labels: np.ndarray
    cardinalities: tuple[int, ...]

    def __post_init__(self) -> None:
        columns = () if isinstance(self.columns, str) else tuple(self.columns)
        if not columns or not all(isinstance(name, str) for name in columns):
            raise TypeError(f"columns must be a non-empty tuple of names (got {self.columns!r})")
        if len(set(columns)) != len(columns):
            raise ValueError(f"columns must be distinct (got {', '.join(columns)})")
        codes, labels = np.asarray(self.codes), np.asarray(self.labels)
        for name, array in (("codes", codes), ("labels", labels)):
            if array.dtype.kind not in "iu":
                raise TypeError(f"{name} must be an integer array (got dtype {array.dtype})")
        if codes.ndim != 2 or codes.shape[0] < 1 or codes.shape[1] != len(columns):
            raise ValueError(f"codes must have shape (N, {len(columns)}) with N >= 1 (got {codes.shape})")
        if labels.shape != (codes.shape[0],):
            raise ValueError(f"labels must have shape ({codes.shape[0]},) to match codes (got {labels.shape})")
        if labels.min() < 0:
            raise ValueError(f"labels must be >= 0 (got {labels.min()})")
        cardinalities = tuple(check_int("a cardinality", count, 1) for count in self.cardinalities)
        if len(cardinalities) != len(columns):
            raise ValueError(f"{len(columns)} columns need {len(columns)} cardinalities (got {len(cardinalities)})")
        for name, column, count in zip(columns, codes.T, cardinalities, strict=True):
            if column.min() < 0 or column.max() >= count or np.count_nonzero(np.bincount(column)) != count:
                raise ValueError(f"the codes of column {name!r} must take every value 0..{count - 1}, "
                                 "and no other")
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "codes", read_only(codes.astype(np.int64, copy=False)))
        object.__setattr__(self, "labels", read_only(labels.astype(np.int64, copy=False)))
        object.__setattr__(self, "cardinalities", cardinalities)

    @property
    def rows(self) -> int:
        """N."""
        return self.codes.shape[0]


def read_categorical_csv(
    source: str | os.PathLike[str] | TextIO, label: str = DEFAULT_LABEL, columns: Sequence[str] | None = None
) -> CategoricalTable:
    """A categorical table from CSV text such as Kaggle's Amazon Employee Access ``train.csv``.

    The first line names the columns. Every field is a value compared as text (stripped of
    surrounding blanks): two values are the same category exactly when their texts are equal.
    A column's codes rank its distinct values: numerically when every value of the column is an
    integer (as in the Amazon file, where this matches ``sklearn.preprocessing.LabelEncoder``),
    otherwise as text. Blank lines are skipped.

    Labels must be integers >= 0 with a largest label >= 1; labels that are all -1 or +1 (the
    papers' convention) are mapped to 0 and 1.

    Parameters
    ----------
    source : str, path-like or text stream
        A file's path (read as UTF-8, a byte-order mark ignored) or an open text stream; wrap CSV
        text in ``io.StringIO``.
    label : str
        The label column.
    columns : sequence of str, optional
        The categorical columns to keep, in this order; default: every column but the label, in
        file order.

    Returns
    -------
    CategoricalTable

    Raises
    ------
    ValueError
        Naming the file (for a path), the line (1-based, the header being line 1) and the problem:
        no header, more than :data:`MAX_COLUMNS` columns, a missing, empty or repeated column
        name, a row with the wrong number of fields, an empty field, a label that is not an
        integer >= 0, fewer than 2 classes, no data rows.
    TypeError
        If ``source`` is neither a path nor a text stream.
    OSError
        If the file cannot be opened.

    >>> import io
    >>> table = read_categorical_csv(io.StringIO("ACTION,ID\\n1,70\\n-1,8\\n"))
    >>> table.codes.ravel().tolist(), table.labels.tolist()
    ([1, 0], [1, 0])
    """
    if not isinstance(label, str):
        raise TypeError(f"label must be a column name (got {label!r})")
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        with path.open(encoding="utf-8-sig", newline="") as stream:
            try:
                return _read(stream, label, columns)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from None
    if not callable(getattr(source, "read", None)):
        raise TypeError(f"source must be a path or a text stream (got {type(source).__name__})")
    return _read(source, label, columns)


def _read(stream: TextIO, label: str, columns: Sequence[str] | None) -> CategoricalTable:
    records = _records(csv.reader(stream))
    first = next(records, None)
    names = _header(None if first is None else first[1])
    if label not in names:
        raise ValueError(f"the CSV has no label column {label!r} (its columns: {', '.join(names)})")
    selected = _selected(names, label, columns)
    data = [(line, _fields(row, names, line)) for line, row in records if row]  # blank lines: []
    if not data:
        raise ValueError("the CSV has no data rows (only its header)")
    lines, rows = zip(*data, strict=True)
    at = names.index(label)
    labels = _labels([fields[at] for fields in rows], lines)
    values = np.array(rows)
    codes, cardinalities = zip(*(_label_encode(values[:, names.index(name)]) for name in selected), strict=True)
    return CategoricalTable(tuple(selected), np.column_stack(codes), labels, tuple(cardinalities))


def _records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each record of a ``csv.reader``; its errors become ValueErrors naming the line."""
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as error:
        raise ValueError(f"line {reader.line_num}: {error}") from None


def _fields(row: list[str], names: list[str], line: int) -> list[str]:
    """A data line's fields, stripped; ValueError for a wrong number of fields or an empty one."""
    if len(row) != len(names):
        raise ValueError(f"line {line} has {len(row)} fields; the header has {len(names)}")
    fields = [field.strip() for field in row]
    if "" in fields:
        raise ValueError(f"line {line}: the field of column {names[fields.index('')]!r} is empty")
    return fields


def _header(header: list[str] | None) -> list[str]:
    if header is None:
        raise ValueError("the CSV is empty: its first line must name the columns")
    names = [name.strip() for name in header]
    names[0] = names[0].lstrip("\ufeff").strip()
    if len(names) > MAX_COLUMNS:
        raise ValueError(f"line 1: {len(names)} columns; at most {MAX_COLUMNS} are read")
    if "" in names:
        raise ValueError(f"line 1: column {names.index('') + 1} has no name")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"line 1: column names must be distinct ({', '.join(repeated)} repeated)")
    return names


def _selected(names: list[str], label: str, columns: Sequence[str] | None) -> list[str]:
    if columns is None:
        selected = [name for name in names if name != label]
        if not selected:
            raise ValueError(f"the CSV has no column besides the label {label!r}")
        return selected
    if isinstance(columns, str) or not all(isinstance(name, str) for name in columns):
        raise TypeError(f"columns must be a sequence of column names (got {columns!r})")
    selected = list(columns)
    missing = [name for name in selected if name not in names]
    if missing:
        raise ValueError(f"the CSV has no column {', '.join(map(repr, missing))} (its columns: {', '.join(names)})")
    if label in selected:
        raise ValueError(f"the label column {label!r} cannot also be a categorical column")
    if not selected or len(set(selected)) != len(selected):
        raise ValueError(f"columns must name at least one column, each once (got {', '.join(selected)})")
    return selected


def _labels(texts: list[str], lines: Sequence[int]) -> np.ndarray:
    """Integer labels >= 0 (all -1/+1: mapped to 0/1) of at least 2 classes; errors name the line."""
    labels = np.empty(len(texts), dtype=np.int64)
    for k, text in enumerate(texts):
        try:
            labels[k] = int(text)
        except (ValueError, OverflowError):
            raise ValueError(f"line {lines[k]}: the label {text!r} is not an integer (of int64)") from None
    if np.all((labels == -1) | (labels == 1)):
        labels = (labels + 1) // 2
    if labels.min() < 0:
        k = int(np.argmax(labels < 0))
        raise ValueError(f"line {lines[k]}: the label {labels[k]} is negative; labels are integers >= 0 "
                         "(or all -1 and +1)")
    if labels.max() < 1:
        raise ValueError("every label is 0 (or every one -1): classification needs labels of at least 2 classes")
    return labels


def _label_encode(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(codes, cardinality) of one column of texts: ranks numeric when every text is an integer."""
    distinct, codes = np.unique(values, return_inverse=True)
    try:
        numbers = [int(text) for text in distinct.tolist()]
    except ValueError:
        return codes, len(distinct)
    order = sorted(range(len(distinct)), key=lambda k: (numbers[k], distinct[k]))
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return rank[codes], len(distinct)
