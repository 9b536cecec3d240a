"""docs/jobs.md states what the code does: the defaults it names are the code's defaults, and what
it says of the bundled data is what the loader gives."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from coded.jobs.spec.codenet import DEFAULT_CODENET_OPTIMIZER, CodeNetOptimizer
from coded.jobs.spec.learning import DEFAULT_OPTIMIZER, NesterovOptimizer
from coded.ml.data import digits

JOBS = (Path(__file__).parents[2] / "docs" / "jobs.md").read_text()


def test_the_default_optimizers_are_the_ones_the_docs_name():
    gradient = re.search(r"Without an `optimizer` section a job uses `(\{[^`]+\})`", JOBS)
    codenet = re.search(r"\| `optimizer` \| SGD only .* Without the section: `(\{[^`]+\})`", JOBS)
    assert gradient is not None and codenet is not None
    assert NesterovOptimizer.model_validate(yaml.safe_load(gradient.group(1))) == DEFAULT_OPTIMIZER
    assert CodeNetOptimizer.model_validate(yaml.safe_load(codenet.group(1))) == DEFAULT_CODENET_OPTIMIZER


def test_the_digits_scaling_the_docs_state_is_the_loaders():
    from sklearn.datasets import load_digits

    row = next(line for line in JOBS.splitlines() if line.startswith("| `digits` |"))
    assert "pixel values 0..16 divided by 16, so every feature is in [0, 1]" in row
    raw = load_digits().data
    data = digits(seed=0)
    x = np.concatenate([data.x_train, data.x_test])
    assert raw.min() == 0 and raw.max() == 16
    assert np.array_equal(np.sort(x, axis=None), np.sort(raw / 16, axis=None))


def checking_defaults() -> dict[str, str]:
    """The rows of docs/jobs.md's table of checking defaults: field -> default cell."""
    section = JOBS[JOBS.index("### The defaults"):]
    section = section[: section.index("\n### ")]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `") or line.startswith("| scale")]
    return {cells[0].strip("| `"): cells[1] for cells in rows}


def test_the_checking_defaults_table_states_the_specs_defaults():
    """Every default of the verify section, the tolerance per precision and the scale limit, read
    from the spec classes: the table fails this test when either changes without the other."""
    from coded.codes.sampled import wrong_used_at_most, wrong_used_before_located
    from coded.codes.streaming import SCALE_LIMIT
    from coded.jobs.spec.gradient import DEFAULT_TOLERANCE, GradientJob, GradientVerifySpec
    from coded.jobs.spec.verify import QuarantineSpec

    table = checking_defaults()
    verify, quarantine = GradientVerifySpec(), QuarantineSpec()
    assert set(table) == {"verify.level", "verify.sample", "verify.errors", "verify.tolerance",
                          "verify.quarantine.limit", "verify.quarantine.window", "scale limit (not a field)"}
    assert verify.level is None  # so the level depends on the replies, as the table says
    streamed = GradientJob.model_validate(yaml.safe_load(STREAMED))
    whole = GradientJob.model_validate(yaml.safe_load(STREAMED + "stream: off\n"))
    assert table["verify.level"] == (f"`{streamed.verify_level}` with streamed replies, `{whole.verify_level}` with "
                                     "whole ones")
    assert float(table["verify.sample"]) == verify.sample
    assert int(table["verify.errors"]) == verify.errors
    assert [float(v) for v in re.findall(r"\d+e-\d+", table["verify.tolerance"])] == [
        DEFAULT_TOLERANCE["float64"], DEFAULT_TOLERANCE["float32"], DEFAULT_TOLERANCE["wire float32"]]
    assert int(table["verify.quarantine.limit"]) == quarantine.limit
    assert int(table["verify.quarantine.window"]) == quarantine.window
    assert float(table["scale limit (not a field)"]) == SCALE_LIMIT
    # the levels' table states the sampled guarantee at the default share
    p = verify.sample
    sampled = next(line for line in JOBS.splitlines() if line.startswith("| `sampled`"))
    assert f"with probability p (default {p:g})" in sampled
    assert f"(1 − p)/p on average ({wrong_used_before_located(p):.0f} at p = {p:g})" in sampled
    assert f"(more than {wrong_used_at_most(p)} with probability 1%)" in sampled
    assert f"after 1/p iterations on average ({1 / p:.0f})" in sampled


STREAMED = """
kind: gradient_coding
workers: 6
code: {scheme: cyclic, stragglers: 2}
model: {type: logistic}
data: {type: gaussian_mixture, samples: 600, features: 4, classes: 2, seed: 1}
iterations: 2
"""


def test_the_readme_states_the_default_share_of_the_sampled_check():
    from coded.jobs.spec.gradient import GradientVerifySpec

    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    p = GradientVerifySpec().sample
    assert f"confirms each piece by a second copy with probability {p:.0%}" in readme
    assert f"any single wrong piece is used with probability {1 - p:.0%}" in readme
