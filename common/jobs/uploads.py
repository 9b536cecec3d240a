"""The names of a gradient job's uploaded partitions, made by the master and read by the worker
that holds them: ``x/<j>`` (dense rows) or ``x/<j>/data``, ``x/<j>/indices``, ``x/<j>/indptr``
(CSR rows), and ``y/<j>`` (labels), for partition j."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

import numpy as np

from coded.ml.data.sparse import CSR_MEMBERS, csr_arrays, csr_from_members, is_sparse

__all__ = ["partition_arrays", "read_partitions"]


def partition_arrays(j: int, x: Any, y: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """Partition ``j``'s rows ``x`` ((rows, features) ndarray, or CSR) and labels ``y`` ((rows,)) as
    named arrays, x first."""
    if is_sparse(x):
        yield from ((f"x/{j}/{member}", array) for member, array in csr_arrays(x).items())
    else:
        yield f"x/{j}", x
    yield f"y/{j}", y


def read_partitions(arrays: Mapping[str, np.ndarray], held: Collection[int], features: int
                    ) -> dict[int, tuple[Any, np.ndarray]]:
    """The partitions whose rows and labels are all among ``arrays``: j -> (x, y), x a float64
    (rows, features) ndarray or CSR with ``features`` columns, y of shape (rows,).

    Raises
    ------
    ValueError
        A name that is not one of a partition in ``held``; rows of another width; labels that do
        not match the rows.
    """
    for name in arrays:
        part, _, rest = name.partition("/")
        index, _, member = rest.partition("/")
        if (part not in ("x", "y") or not index.isdigit() or int(index) not in held
                or (member and (part != "x" or member not in CSR_MEMBERS))):
            raise ValueError(f"upload {name!r} is not x/<j>, x/<j>/{{{','.join(CSR_MEMBERS)}}} or y/<j> for a "
                             "partition this worker holds")
    found = {}
    for j in held:
        sparse = {member: arrays[f"x/{j}/{member}"] for member in CSR_MEMBERS if f"x/{j}/{member}" in arrays}
        if f"y/{j}" not in arrays or not (sparse or f"x/{j}" in arrays):
            continue
        y = np.asarray(arrays[f"y/{j}"])
        if sparse:
            x = csr_from_members(sparse, features, f"partition {j}")
        else:
            x = np.asarray(arrays[f"x/{j}"], np.float64)
            if x.ndim != 2 or x.shape[1] != features:
                raise ValueError(f"partition {j}: x {x.shape} does not fit the model's {features} features")
        if y.shape != (x.shape[0],):
            raise ValueError(f"partition {j}: y {y.shape} does not match x's {x.shape[0]} rows")
        found[j] = (x, y)
    return found
