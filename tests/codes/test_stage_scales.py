"""A stage that is a plain combination of partial gradients says so (``stage_scales``), and the
combination it names is the stage ``encode_stage`` computes: a worker adds each partition into its
message with that coefficient instead of encoding partials (worker/jobs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from coded.codes import gradient_code

CODES = [
    ("uncoded", {"n": 4}),
    ("ignore_stragglers", {"n": 5, "s": 1}),
    ("kasync", {"n": 5, "s": 2}),
    ("frc", {"n": 6, "s": 2}),
    ("cyclic", {"n": 7, "s": 3}),
    ("cyclic", {"n": 12, "s": 2}),
    ("ye_abbe", {"n": 5, "s": 2, "m": 1}),
    ("ye_abbe", {"n": 8, "s": 2, "m": 3}),
    ("partial", {"n": 4, "s": 1, "alpha": 2.0}),
    ("partial", {"n": 6, "s": 2, "alpha": 4.0, "base": "frc"}),
    ("lwpd", {"n": 8, "t": 2}),
]


@pytest.mark.parametrize(("scheme", "params"), CODES)
def test_stated_scales_give_the_encoded_stage(scheme, params):
    code = gradient_code(scheme, **params)
    g = np.random.default_rng(3).standard_normal((code.k, 37))
    for i in range(code.n):
        for stage, partitions in enumerate(code.stage_partitions(i)):
            scales = code.stage_scales(i, stage)
            if scales is None:
                continue
            assert sorted(scales) == sorted(partitions)
            encoded = code.encode_stage(i, stage, {j: g[j] for j in partitions})
            combined = sum(c * g[j] for j, c in scales.items())
            np.testing.assert_allclose(combined, encoded, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("scheme", "params", "combination"), [
    ("uncoded", {"n": 4}, True), ("cyclic", {"n": 7, "s": 3}, True), ("frc", {"n": 6, "s": 2}, True),
    ("ye_abbe", {"n": 8, "s": 2, "m": 3}, False), ("lwpd", {"n": 8, "t": 2}, False)])
def test_which_codes_are_combinations(scheme, params, combination):
    """Tandon et al.'s codes are; Ye & Abbe's with m > 1 (coordinates mixed) and LWPD's
    projection are not, and must be encoded."""
    code = gradient_code(scheme, **params)
    assert (code.stage_scales(0, 0) is not None) == combination


def test_a_stage_the_message_does_not_have_is_refused():
    with pytest.raises(ValueError, match="single stage"):
        gradient_code("cyclic", n=5, s=1).stage_scales(0, 1)
