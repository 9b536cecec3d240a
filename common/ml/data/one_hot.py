"""The one-hot encoding of a categorical table with interactions, as the gradient coding papers did.

Their preprocessing (Tandon et al.'s ``arrange_real_data.py``) label-encodes each column (as
:func:`~coded.ml.data.categorical_csv.read_categorical_csv` does), adds one column per pair of
columns whose value is the pair of values (some pairs skipped), label-encodes those too and
one-hot encodes every column. :func:`encode` computes that matrix, sparse, without densifying
anything.

>>> import io
>>> from coded.ml.data.categorical_csv import read_categorical_csv
>>> table = read_categorical_csv(io.StringIO("ACTION,A,B\\n1,7,x\\n0,3,x\\n1,7,y\\n"))
>>> column_names(table), encode(table).shape
(['A', 'B', 'A*B'], (3, 7))
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse

from coded.base.checks import check_int

from .categorical_csv import CategoricalTable

__all__ = ["MAX_INTERACTIONS", "column_names", "encode"]

#: the most columns combined into one interaction column
MAX_INTERACTIONS = 3


def column_names(table: CategoricalTable, interactions: int = 2, skip: Sequence[Sequence[str]] = ()
                 ) -> list[str]:
    """The names of the columns :func:`encode` one-hot encodes, in its order: ``"A"``, ``"A*B"``, ...

    Raises
    ------
    TypeError, ValueError
        As :func:`encode`.
    """
    _check_table(table)
    return ["*".join(table.columns[j] for j in combination)
            for combination in _combinations(table.columns, interactions, skip)]


def encode(table: CategoricalTable, interactions: int = 2, skip: Sequence[Sequence[str]] = ()
           ) -> scipy.sparse.csr_matrix:
    """The one-hot encoding of a table's columns and their interactions (Tandon et al.'s preprocessing).

    The encoded columns are, in this order (:func:`column_names`): the table's columns, then for
    each degree 2..``interactions`` every combination of that many columns in
    ``itertools.combinations`` order, except those holding both columns of a ``skip`` pair. An
    interaction column's value is the tuple of its columns' values, label-encoded by rank among
    the tuples that occur (lexicographic in the columns' codes). Each encoded column then becomes
    one indicator per distinct value, in code order; so every row holds exactly one 1 per
    encoded column, and ``l`` is the sum of their numbers of distinct values.

    There is no intercept column: the logistic model has its own bias, so it has ``l + 1``
    parameters, which is the reference's ``l`` with its column of ones (241,915 on the Kaggle
    file with ``interactions=2, skip=AMAZON_SKIP``).

    Parameters
    ----------
    table : CategoricalTable
        N rows of c columns.
    interactions : int
        The largest number of columns combined, 1..3 (1: the columns alone).
    skip : sequence of (str, str)
        Pairs of column names never combined (Tandon et al.'s: :data:`AMAZON_SKIP`).

    Returns
    -------
    (N, l) csr_matrix of float64
        Canonical: indices sorted within each row, no duplicates; int32 index arrays when N times
        the number of encoded columns fits in int32.

    Raises
    ------
    TypeError
        If ``table`` is not a CategoricalTable or an argument has the wrong type.
    ValueError
        If ``interactions`` is not in 1..3 or ``skip`` names a column the table does not have.

    >>> import numpy as np
    >>> table = CategoricalTable(("A", "B"), np.array([[0, 1], [1, 0], [1, 1]]), np.array([1, 0, 1]), (2, 2))
    >>> encode(table).toarray().astype(int).tolist()
    [[1, 0, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 1, 0], [0, 1, 0, 1, 0, 0, 1]]
    """
    _check_table(table)
    combinations = _combinations(table.columns, interactions, skip)
    rows, width = table.rows, len(combinations)
    index_dtype = np.int32 if rows * width < np.iinfo(np.int32).max else np.int64
    indices = np.empty((rows, width), dtype=index_dtype)
    known: dict[tuple[int, ...], np.ndarray] = {}  # the codes of the columns that prefix later ones
    offset = 0
    for at, combination in enumerate(combinations):
        codes, count = _combined(table, combination, known)
        if len(combination) < interactions:
            known[combination] = codes
        np.add(codes, offset, out=indices[:, at], casting="unsafe")
        offset += count
    indptr = np.arange(0, rows * width + 1, width, dtype=index_dtype)
    matrix = scipy.sparse.csr_matrix(
        (np.ones(rows * width), indices.ravel(), indptr), shape=(rows, offset), copy=False)
    matrix.has_sorted_indices = True  # each row's indices ascend: one per encoded column, by offset
    return matrix


def _combined(table: CategoricalTable, combination: tuple[int, ...],
              known: dict[tuple[int, ...], np.ndarray]) -> tuple[np.ndarray, int]:
    """(codes, number of distinct values) of one encoded column; tuples extend their known prefix."""
    last = combination[-1]
    if len(combination) == 1:
        return table.codes[:, last], table.cardinalities[last]
    key = known[combination[:-1]] * table.cardinalities[last] + table.codes[:, last]  # < N * N: no int64 overflow
    distinct, codes = np.unique(key, return_inverse=True)
    return codes, len(distinct)


def _combinations(columns: tuple[str, ...], interactions: int, skip: Sequence[Sequence[str]]
                  ) -> list[tuple[int, ...]]:
    """The column indices of each encoded column, in encoding order."""
    interactions = check_int("interactions", interactions, 1)
    if interactions > MAX_INTERACTIONS:
        raise ValueError(f"interactions must be in 1..{MAX_INTERACTIONS} (got {interactions})")
    position = {name: j for j, name in enumerate(columns)}
    pairs = []
    for pair in skip:
        if isinstance(pair, str) or len(pair) != 2 or not all(isinstance(name, str) for name in pair):
            raise TypeError(f"skip must hold pairs of column names (got {pair!r})")
        unknown = [name for name in pair if name not in position]
        if unknown:
            raise ValueError(f"skip names {', '.join(map(repr, unknown))}, not a column of the table "
                             f"(its columns: {', '.join(columns)})")
        if pair[0] == pair[1]:
            raise ValueError(f"a skip pair must name two different columns (got {pair!r})")
        pairs.append({position[pair[0]], position[pair[1]]})
    return [combination
            for degree in range(1, interactions + 1)
            for combination in itertools.combinations(range(len(columns)), degree)
            if not any(pair <= set(combination) for pair in pairs)]


def _check_table(table: Any) -> None:
    if not isinstance(table, CategoricalTable):
        raise TypeError(f"table must be a CategoricalTable (got {type(table).__name__})")

