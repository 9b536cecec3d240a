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
