"""svmlight/libsvm text read into a checked CSR matrix and its labels, the bad line named.

The text format of libsvm's data sets: a line per sample, its label, then the index and value of
each stored feature. What reads it is scikit-learn's compiled parser; what is here names the
first line it refused.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import scipy.sparse

from .sparse import csr_from_arrays

__all__ = ["read_svmlight"]

_PAIR = re.compile(r"^(-?\d+):(\S+)$")


def read_svmlight(path: str | os.PathLike[str], features: int | None = None, zero_based: bool = False
                  ) -> tuple[scipy.sparse.csr_matrix, np.ndarray]:
    """A CSR matrix and its labels from an svmlight/libsvm text file.

    Each line is ``label index:value index:value ...`` with ascending indices, one-based (libsvm's
    convention) unless ``zero_based``; ``#`` starts a comment; a ``qid:`` field (ranking data) is
    ignored. scikit-learn's compiled parser reads the file; when it refuses it, the file is scanned
    line by line to name the first bad line.

    Parameters
    ----------
    path : str or path-like
    features : int, optional
        Columns of the matrix (default: the largest index + 1); an index beyond it is an error.
    zero_based : bool

    Returns
    -------
    x : (N, features) csr_matrix of float64
    y : (N,) ndarray of float64
        The labels as written.

    Raises
    ------
    ValueError
        Naming the file's line and what is wrong with it.
    """
    from sklearn.datasets import load_svmlight_file  # ~1 s to import: only where svmlight is read

    path = Path(path)
    try:
        x, y = load_svmlight_file(str(path), n_features=features, zero_based=zero_based, dtype=np.float64)
    except (ValueError, RuntimeError, UnicodeDecodeError, OverflowError) as error:  # overflow: an index past int64
        _find_bad_line(path, features, zero_based)
        raise ValueError(f"not svmlight/libsvm text ({error})") from None
    if x.shape[0] == 0:
        raise ValueError("has no data rows")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(x.data))):
        _find_bad_line(path, features, zero_based)
    return csr_from_arrays(x.data, x.indices, x.indptr, x.shape), y


def _find_bad_line(path: Path, features: int | None, zero_based: bool) -> None:
    """Raise ValueError naming the first line of ``path`` that is not svmlight; return when none is."""
    first = 0 if zero_based else 1
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8").split("#", 1)[0].split()
            except UnicodeDecodeError:
                raise ValueError(f"line {number}: not UTF-8 text") from None
            if not line:
                continue
            problem = _line_problem(line, first, features)
            if problem:
                raise ValueError(f"line {number}: {problem}")


def _line_problem(fields: list[str], first: int, features: int | None) -> str | None:
    """What is wrong with one line's fields (label, then index:value pairs); None if nothing."""
    try:
        label = float(fields[0])
    except ValueError:
        return f"the label {fields[0]!r} is not a number"
    if not np.isfinite(label):
        return f"the label {fields[0]!r} is not finite"
    previous = first - 1
    for field in fields[1:]:
        if field.startswith("qid:"):
            continue
        match = _PAIR.match(field)
        if match is None:
            return f"{field!r} is not index:value"
        index = int(match.group(1))
        try:
            value = float(match.group(2))
        except ValueError:
            return f"the value of {field!r} is not a number"
        if not np.isfinite(value):
            return f"the value of {field!r} is not finite"
        if index < first:
            return f"index {index} in {field!r}: indices start at {first} ({'zero' if first == 0 else 'one'}-based)"
        if features is not None and index - first >= features:
            return f"index {index} in {field!r} is beyond the {features} features"
        if index <= previous:
            return f"index {index} in {field!r} does not follow {previous}: indices must ascend"
        previous = index
    return None
