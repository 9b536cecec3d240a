"""Counts in messages agree with their nouns: "1 iteration", never "1 iterations"."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from coded.base.words import plural
from coded.codes import NotDecodableError, matmul_code
from coded.jobs.spec import parse_job
from coded.master.runner import pending_reason
from coded.master.verification import verification_of


def test_plural_is_singular_for_one_only():
    assert [plural(n, "iteration") for n in (0, 1, 2)] == ["0 iterations", "1 iteration", "2 iterations"]
    assert plural(1, "reply", "replies") == "1 reply" and plural(3, "reply", "replies") == "3 replies"


def test_one_wrong_reply_is_one_wrong_one_in_what_a_job_checks():
    matmul = parse_job(yaml.safe_dump({"kind": "matmul", "workers": 8, "verify": {"errors": 1},
                                       "code": {"scheme": "gpd", "m": 2, "n": 1, "d": 2},
                                       "inputs": {"generate": {"a": [8, 4], "b": [4, 4]}}}))
    assert ", correcting up to 1 wrong one;" in verification_of(matmul).summary
    gradient = parse_job(yaml.safe_dump({"kind": "gradient_coding", "workers": 8, "model": {"type": "softmax"},
                                         "code": {"scheme": "cyclic", "stragglers": 3}, "data": {"type": "digits"},
                                         "iterations": 1, "verify": {"errors": 1}, "stream": "off"}))
    assert "; up to 1 wrong one is located and left out;" in verification_of(gradient).summary
    assert pending_reason(gradient.model_copy(update={"workers": 1}), 0).startswith("waiting for 1 worker (0 ")


def test_a_decoder_short_of_results_counts_one_wrong_one():
    code = matmul_code("polynomial", workers=6, m=2, d=1)
    a, b = np.ones((4, 2)), np.ones((2, 3))
    results = {p: ap @ bp for p, (ap, bp) in enumerate(code.encode(a, b)) if p < 3}
    with pytest.raises(NotDecodableError, match=r"needs 4 results to correct 1 wrong one, got 3$"):
        code.decode(results, max_errors=1)


def test_an_mds_code_short_of_symbols_says_how_many_are_left_in_the_singular():
    from coded.codes.mds import SystematicMDS

    code = SystematicMDS(2, 3)
    with pytest.raises(NotDecodableError, match=r"^need 2 symbols, 1 is left$"):
        code.decode(code.encode(np.ones((2, 4))), erased=[0, 1])


@pytest.mark.parametrize("verify", ["sampled", "strict"])
def test_every_sentence_of_what_a_streamed_job_checks_starts_with_a_capital(verify):
    """Issue 40, item 6: `... every piece. two copies agree ...`."""
    spec = parse_job(yaml.safe_dump({"kind": "gradient_coding", "workers": 8, "model": {"type": "softmax"},
                                     "code": {"scheme": "cyclic", "stragglers": 2}, "data": {"type": "digits"},
                                     "iterations": 1, "verify": verify}))
    summary = verification_of(spec).summary
    assert "two copies agree" in summary.lower()
    assert re.findall(r"\. +[a-z]\w*", summary) == []
