"""The client's own checks, before any call: a file a spec names but that is missing."""

from __future__ import annotations

import pytest

from coded.client import CodedClient
from coded.jobs.spec import JobSpecError

SPEC = """kind: gradient_coding
workers: 2
code: {scheme: cyclic, stragglers: 1}
model: {type: logistic}
data: {type: npz, path: train.npz}
optimizer: {type: sgd, lr: 0.1}
iterations: 2
"""


def test_a_missing_file_is_named_by_its_field(tmp_path):
    (tmp_path / "job.yaml").write_text(SPEC)
    with CodedClient("127.0.0.1:1") as client, pytest.raises(JobSpecError) as error:
        client.submit_file(tmp_path / "job.yaml")  # never reaches the (absent) master
    assert str(error.value) == "data.path: cannot read 'train.npz' next to job.yaml: No such file or directory"
