"""Planning a matmul code: best splits, accuracy per option, and ``coded plan --matmul``."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from coded.cli import main
from coded.codes import matmul_code
from coded.codes.matmul import recovery_threshold
from coded.codes.matmul_plan import best_split, matmul_options


@pytest.mark.parametrize("most", [7, 12, 29, 30, 61])
@pytest.mark.parametrize(("scheme", "vector"),
                         [("polynomial", False), ("matdot", False), ("polydot", False), ("gpd", False),
                          ("gpd", True), ("polynomial", True)])
def test_best_split_has_the_largest_threshold_that_fits(scheme, vector, most):
    split = best_split(scheme, most, vector)
    assert split is not None and (not vector or split.get("d", 1) == 1)
    got = recovery_threshold(scheme, **split)
    # brute force over the formula R(m, n, d) of each scheme, independently of the code's tables
    formula = {"polynomial": lambda m, n, d: m * d, "matdot": lambda m, n, d: 2 * n - 1,
               "polydot": lambda m, n, d: m * (2 * n - 1) * d, "gpd": lambda m, n, d: m * n * d + n - 1}[scheme]
    ns = [1] if scheme == "polynomial" else range(2, most)
    ms = [1] if scheme == "matdot" else range(1, most + 1)
    ds = [1] if scheme == "matdot" or vector else range(1, most + 1)
    best = max(r for m, n, d in itertools.product(ms, ns, ds) if (r := formula(m, n, d)) <= most)
    assert got == best


def test_every_accurate_option_decodes_to_its_estimate():
    options = matmul_options(40, (64, 64, 64))
    assert {o.scheme for o in options} == {"polynomial", "matdot", "polydot", "gpd"}
    assert all(o.error is not None for o in options)  # P = 40 with up to 10 stragglers: all accepted
    assert all(o.chebyshev_error is None for o in options)  # and all refused on real points
    rng = np.random.default_rng(1)
    for option in options:
        code = matmul_code(option.scheme, workers=40, **dict(option.params))
        assert code.recovery_threshold == option.recovery_threshold == 40 - option.stragglers
        assert option.padded == tuple(-(-size // step) * step for size, step in zip((64, 64, 64),
                                                                                   code.size_multiples, strict=True))
        a, b = rng.standard_normal(option.padded[:2]), rng.standard_normal(option.padded[1:])
        results = {p: x @ y for p, (x, y) in enumerate(code.encode(a, b))}
        run = range(option.recovery_threshold)  # neighbouring workers: the worst kind of set
        error = np.abs(code.decode({p: results[p] for p in run}) - a @ b).max() / np.abs(a @ b).max()
        assert error <= option.error


def test_coded_plan_matmul_prints_each_scheme_and_recommends_an_accurate_code(capsys):
    assert main(["plan", "--matmul", "--workers", "40", "--sizes", "300", "200", "100", "--stragglers", "4"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["polynomial"], ["matdot"],
                                                                              ["polydot"], ["gpd"])]
    assert len(rows) == 4 and all(row[-1] == "refused" and row[-2] != "refused" for row in rows)
    recommended = json.loads(out.splitlines()[-1].split(": ", 1)[1].split(": ", 1)[1])
    code = matmul_code(workers=40, **recommended)
    assert 40 - (code.recovery_threshold + 1) >= 4  # checked by default: R + 1 results leave 4 out


@pytest.mark.parametrize(("verify", "check"), [([], 1), (["--verify", "off"], 0), (["--errors", "1"], 2)])
def test_coded_plan_matmul_recommends_splits_that_do_not_wait_for_the_stragglers(capsys, verify, check):
    """Six workers: the split recommended for s stragglers leaves s workers out of what a round
    waits for, its check included (the split for s = 1 once waited for all 6 under the check)."""
    assert main(["plan", "--matmul", "--workers", "6", "--sizes", "60", "60", "60", *verify]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("s = ")]
    assert lines
    for line in lines:
        s = int(line.split()[2].rstrip(":"))
        code = matmul_code(workers=6, **json.loads(line.split(": ", 2)[2]))
        assert code.recovery_threshold + check <= 6 - s, line


def test_coded_plan_matmul_says_when_nothing_is_accurate(capsys):
    assert main(["plan", "--matmul", "--workers", "96", "--sizes", "100", "100", "--stragglers", "24"]) == 0
    assert "no code tolerates 24 stragglers accurately on 96 workers" in capsys.readouterr().out
    assert main(["plan", "--matmul", "--workers", "12", "--sizes", "10"]) == 2
    assert "--sizes: give N1 N0" in capsys.readouterr().err
