"""A synthetic CSV of the shape of Kaggle's Amazon Employee Access data, and that file's facts.

The gradient coding papers ran logistic regression on that file (Tandon et al., ICML 2017; Ye &
Abbe, ICML 2018); it cannot be downloaded here, so :func:`amazon_like` writes a file of its shape
(its columns, their cardinalities, skewed frequencies, hierarchical roles, ~94% positive labels)
that goes through the same reader and encoding (:mod:`coded.ml.data.categorical_csv`,
:mod:`coded.ml.data.one_hot`) as the real one.
It is synthetic: labels follow a planted model, not real access decisions.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import scipy.sparse

from coded.base.checks import check_int, check_real

from .categorical_csv import DEFAULT_LABEL, CategoricalTable
from .one_hot import encode

__all__ = ["AMAZON_COLUMNS", "AMAZON_LABEL", "AMAZON_ROWS", "AMAZON_SKIP", "amazon_like"]

#: the label column of the Amazon Employee Access file
AMAZON_LABEL = DEFAULT_LABEL
#: data rows of Kaggle's Amazon Employee Access training file
AMAZON_ROWS = 32769
#: the categorical columns of that file, in file order, and how many distinct ids each holds
AMAZON_COLUMNS = MappingProxyType({
    "RESOURCE": 7518,
    "MGR_ID": 4243,
    "ROLE_ROLLUP_1": 128,
    "ROLE_ROLLUP_2": 177,
    "ROLE_DEPTNAME": 449,
    "ROLE_TITLE": 343,
    "ROLE_FAMILY_DESC": 2358,
    "ROLE_FAMILY": 67,
    "ROLE_CODE": 343,
})
#: the pairs Tandon et al.'s preprocessing does not combine (``util.interactionTermsAmazon``)
AMAZON_SKIP = (("ROLE_ROLLUP_1", "ROLE_ROLLUP_2"), ("ROLE_TITLE", "ROLE_FAMILY"))



# --- a synthetic file of the Amazon shape --------------------------------------------------------

#: ids are drawn from 1..this, like the real file's (which run to ~312,000)
_ID_RANGE = 320_000
#: per mille of the encoded features the planted model weights, were none certain (amazon_like)
_PLANTED_PER_MILLE = 30
#: the standard deviation of a planted weight
_PLANTED_SCALE = 0.5
#: roles in a department's pool, roles in a manager's team, favourite resources of a role or department
_POOL, _TEAM, _FAVOURITES = 6, 2, 4
#: per mille of the rows whose resource is a favourite of their role (else of their department),
#: and whose resource is drawn from all resources by popularity instead
_BY_ROLE, _GLOBAL = 500, 150
#: weights and noise are rounded to multiples of 2**-_FIXED_BITS before anything compares them
_FIXED_BITS = 20


def amazon_like(rows: int = AMAZON_ROWS, seed: int = 0, positive: float = 0.94) -> str:
    """CSV text of the shape of Kaggle's Amazon Employee Access ``train.csv``: synthetic, not the real data.

    The header is ``ACTION`` then :data:`AMAZON_COLUMNS`; every value is a positive integer id
    (drawn at random from 1..320,000 per column, like the real ids). With ``rows`` >= 7518 (the
    largest cardinality) every column has exactly its cardinality of distinct ids, each at least
    once; with fewer rows, as many as the rows hold. Frequencies are skewed (Zipf-Mandelbrot
    weights ``1 / (rank + q)``; ``ROLE_ROLLUP_1`` has one value in ~64% of the rows, as in the
    real file), and the columns are structured like the real ones:

    - every manager (``MGR_ID``) belongs to a department (``ROLE_DEPTNAME``), every department to a
      ``ROLE_ROLLUP_2`` and that to a ``ROLE_ROLLUP_1``; a row mostly has its manager's;
    - every department has a pool of 6 roles (``ROLE_FAMILY_DESC``) and every manager a team of 2
      of them; a row mostly takes one of its manager's; a role mostly determines ``ROLE_TITLE``
      and ``ROLE_FAMILY``, and ``ROLE_CODE`` is a one-to-one function of ``ROLE_TITLE``, as in the
      real file;
    - ``RESOURCE`` is mostly one of a few favourites of the row's role or department, otherwise
      drawn by popularity;
    - "mostly": 1% to 15% of the rows deviate, at each step, to a value drawn by popularity; a
      value that no row holds then replaces a value in a random row (not its last occurrence).

    So the pairwise encoding is about as large as the real one's: with ``interactions=2`` and
    :data:`AMAZON_SKIP`, :func:`encode` gives l = 248,575, 250,402 and 247,789 one-hot columns
    for seeds 0, 1 and 2 at the default rows (the real file: 241,914, then the reference's
    intercept).

    ``ACTION`` follows a planted sparse logistic model over those encoded features: feature f
    gets a weight from N(0, 0.5**2) with probability ``min(1, 0.03 l n_f / nnz)``, ``n_f`` the
    rows it occurs in (frequent features are the learnable ones): about 2.4% of the features
    (~6,000, among them every feature of at least ~190 rows). A row is 1 when its score plus
    logistic noise exceeds the threshold (the intercept) that makes ``positive`` of the rows 1
    (exactly, up to ties; at least one row of each class). A logistic regression learns it:
    trained on the first 80% of the rows (scikit-learn's defaults, C = 1), its AUC on the rest
    is 0.87, 0.88 and 0.91 for seeds 0, 1 and 2.

    The text is a pure function of the arguments, the same on every machine: the values come
    from integer draws and integer arithmetic only; the labels from integer arithmetic on the
    weights and the noise, each rounded to a multiple of 2**-20 first. Floating point decides
    nothing else: numpy's normal sampler (which calls ``exp``/``log`` in rare steps) and the
    noise ``logit(u)`` could differ in a last digit between math libraries, and that changes
    a label only when it moves a value across a rounding tie, with a probability below 1e-9 per
    file.

    Parameters
    ----------
    rows : int
        >= 2.
    seed : int
        >= 0.
    positive : float
        The share of rows labelled 1, in (0, 1) (the real file: 0.942).

    Returns
    -------
    str
        The CSV text, header first, lines ending in newlines.

    Raises
    ------
    TypeError, ValueError
        For an argument of the wrong type or out of range (naming it).

    >>> text = amazon_like(rows=5, seed=1)
    >>> text.splitlines()[0]
    'ACTION,RESOURCE,MGR_ID,ROLE_ROLLUP_1,ROLE_ROLLUP_2,ROLE_DEPTNAME,ROLE_TITLE,ROLE_FAMILY_DESC,ROLE_FAMILY,ROLE_CODE'
    >>> len(text.splitlines())
    6
    """
    rows = check_int("rows", rows, 2)
    positive = check_real("positive", positive, 0.0, 1.0, low_open=True)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    ids = {name: rng.permutation(_ID_RANGE)[:count] + 1 for name, count in AMAZON_COLUMNS.items()}
    values = _amazon_values(rng, rows)
    columns = tuple(AMAZON_COLUMNS)
    id_columns = [ids[name][values[name]] for name in columns]
    codes = np.column_stack([np.unique(column, return_inverse=True)[1] for column in id_columns])
    cardinalities = tuple(len(np.unique(column)) for column in id_columns)
    table = CategoricalTable(columns, codes, np.zeros(rows, dtype=np.int64), cardinalities)
    labels = _planted_labels(rng, encode(table, 2, AMAZON_SKIP), positive)
    lines = [",".join(map(str, row)) for row in np.column_stack([labels, *id_columns]).tolist()]
    return "\n".join([",".join([AMAZON_LABEL, *columns]), *lines]) + "\n"


def _amazon_values(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    """Each column's value indices (0..cardinality - 1, 0 the most frequent) for ``rows`` rows."""
    count = AMAZON_COLUMNS
    managers, departments, roles = count["MGR_ID"], count["ROLE_DEPTNAME"], count["ROLE_FAMILY_DESC"]
    # the organisation: manager -> department -> rollup 2 -> rollup 1
    department_of = _skewed(rng, departments, managers, 3)
    rollup2_of = _skewed(rng, count["ROLE_ROLLUP_2"], departments, 2)
    rollup1_of = _skewed(rng, count["ROLE_ROLLUP_1"], count["ROLE_ROLLUP_2"], 1, power=2)
    # the work: each department has a pool of roles (family descriptions), each manager a team of
    # roles from that pool; a role has a title and a family, a title its code (one to one)
    pool = _skewed(rng, roles, (departments, _POOL), 5)
    team = pool[department_of[:, None], _skewed(rng, _POOL, (managers, _TEAM), 1)]
    title_of = _skewed(rng, count["ROLE_TITLE"], roles, 2)
    family_of = _skewed(rng, count["ROLE_FAMILY"], roles, 1)
    code_of = rng.permutation(count["ROLE_CODE"])
    # the resources each role and each department uses most
    by_role = _skewed(rng, count["RESOURCE"], (roles, _FAVOURITES), 10)
    by_department = _skewed(rng, count["RESOURCE"], (departments, _FAVOURITES), 10)

    manager = _filled(rng, _skewed(rng, managers, rows, 20), managers)
    department = _filled(rng, _sometimes(rng, department_of[manager], 100, departments, 3), departments)
    rollup2 = _filled(rng, _sometimes(rng, rollup2_of[department], 20, count["ROLE_ROLLUP_2"], 2),
                      count["ROLE_ROLLUP_2"])
    rollup1 = _filled(rng, _sometimes(rng, rollup1_of[rollup2], 10, count["ROLE_ROLLUP_1"], 1),
                      count["ROLE_ROLLUP_1"])
    role = _filled(rng, _sometimes(rng, team[manager, _skewed(rng, _TEAM, rows, 1)], 60, roles, 5), roles)
    title = _filled(rng, _sometimes(rng, title_of[role], 20, count["ROLE_TITLE"], 2), count["ROLE_TITLE"])
    family = _filled(rng, _sometimes(rng, family_of[role], 20, count["ROLE_FAMILY"], 1), count["ROLE_FAMILY"])
    favourite = _skewed(rng, _FAVOURITES, rows, 1)
    resource = np.where(rng.integers(0, 1000, size=rows) < _BY_ROLE, by_role[role, favourite],
                        by_department[department, favourite])
    resource = _filled(rng, _sometimes(rng, resource, _GLOBAL, count["RESOURCE"], 10), count["RESOURCE"])
    return {"RESOURCE": resource, "MGR_ID": manager, "ROLE_ROLLUP_1": rollup1, "ROLE_ROLLUP_2": rollup2,
            "ROLE_DEPTNAME": department, "ROLE_TITLE": title, "ROLE_FAMILY_DESC": role,
            "ROLE_FAMILY": family, "ROLE_CODE": code_of[title]}


def _skewed(rng: np.random.Generator, count: int, size: int | tuple[int, ...], shift: int, power: int = 1
            ) -> np.ndarray:
    """Draws from 0..count-1 with weights ``1 / (k + shift)**power``, in integer arithmetic only."""
    weights = (1 << 40) // (np.arange(count, dtype=np.int64) + shift) ** power
    cumulative = np.cumsum(weights)
    return np.searchsorted(cumulative, rng.integers(0, cumulative[-1], size=size), side="right")


def _sometimes(rng: np.random.Generator, usual: np.ndarray, per_mille: int, count: int, shift: int
               ) -> np.ndarray:
    """``usual``, except in about ``per_mille``/1000 of the rows: a skewed draw instead."""
    other = rng.integers(0, 1000, size=len(usual)) < per_mille
    return np.where(other, _skewed(rng, count, len(usual), shift), usual)


def _filled(rng: np.random.Generator, values: np.ndarray, count: int) -> np.ndarray:
    """``values`` with the values of 0..count-1 that do not occur put in random rows, as many as
    the rows allow, without removing the last occurrence of any value."""
    values = values.copy()
    order = rng.permutation(len(values))
    spare = np.ones(len(values), dtype=bool)
    spare[order[np.unique(values[order], return_index=True)[1]]] = False  # one occurrence of each stays
    missing = np.setdiff1d(np.arange(count), values)
    rows = order[spare[order]][:len(missing)]
    values[rows] = missing[:len(rows)]
    return values


def _planted_labels(rng: np.random.Generator, x: scipy.sparse.csr_matrix, positive: float) -> np.ndarray:
    """0/1 labels of a sparse logistic model over the columns of ``x`` (one 1 per encoded column)."""
    rows, features = x.shape
    # each feature with a probability in proportion to its frequency (1 for the most frequent ones)
    frequency = np.bincount(x.indices, minlength=features)
    wanted = features * _PLANTED_PER_MILLE // 1000
    planted = np.flatnonzero(rng.integers(0, x.nnz, size=features) < frequency * wanted)
    weights = np.zeros(features, dtype=np.int64)
    weights[planted] = _fixed(_PLANTED_SCALE * rng.standard_normal(len(planted)))
    u = (rng.integers(0, 1 << 52, size=rows) + 0.5) / (1 << 52)  # exact, in (0, 1)
    score = weights[x.indices].reshape(rows, -1).sum(axis=1) + _fixed(np.log(u) - np.log1p(-u))
    negatives = min(max(round((1.0 - positive) * rows), 1), rows - 1)
    threshold = np.sort(score)[negatives - 1]
    return (score > threshold).astype(np.int64)


def _fixed(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to integer multiples of 2**-_FIXED_BITS."""
    return np.rint(np.ldexp(values, _FIXED_BITS)).astype(np.int64)
