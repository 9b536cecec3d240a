"""The README's tour runs top to bottom as written (`make test-readme`).

Its ``sh`` blocks run in one bash shell, in order, with its ``python`` blocks in between, in a
scratch directory that holds the project's ``.venv``: the commands a newcomer types, unchanged.
Only the environment differs: ``$CODED_MASTER`` points the tour's cluster and clients at a free
port instead of 50051, which the README documents as what sets the default address.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from coded.cluster.local import free_port

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """The README's ``sh`` and ``python`` blocks, in order; untagged blocks (make, deployment) are
    shown, not run."""
    return [(language, body) for language, body in BLOCK.findall(text) if language in ("sh", "python")]


def script(blocks: list[tuple[str, str]]) -> str:
    """One bash script: the sh blocks as they are, each python block fed to the venv's python."""
    parts = ["set -euo pipefail"]
    for index, (language, body) in enumerate(blocks):
        if language == "sh":
            parts.append(body)
        else:
            parts.append(f"python - <<'README_PYTHON_{index}'\n{body}README_PYTHON_{index}")
    return "\n".join(parts) + "\n"


def test_the_readme_blocks_are_found_in_order():
    blocks = runnable_blocks(README.read_text())
    assert [language for language, _ in blocks] == ["sh", "sh", "python", "python", "sh"]
    assert blocks[0][1].startswith(". .venv/bin/activate")
    assert "coded local" in blocks[0][1] and all("coded local" not in body for _, body in blocks[1:])
    assert blocks[-1][1].rstrip().splitlines()[-1].startswith("kill %1")  # the tour stops its cluster


@pytest.mark.readme
@pytest.mark.timeout(1200)
def test_the_readme_tour_runs_as_written(tmp_path):
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODED_")}
    env["CODED_MASTER"] = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(["bash", "-c", script(runnable_blocks(README.read_text()))], cwd=tmp_path,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=900)
    finally:
        if process.poll() is None:  # timed out: the tour's own cluster goes with it
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
    assert process.returncode == 0, output[-6000:]
    # what the tour says it writes
    params = np.load(tmp_path / "params.npz")
    assert sorted(params.files) == ["layer0.bias", "layer0.weights"] and params["layer0.weights"].size == 100
    # mm.yaml's inputs are the documented seeded standard normals (docs/jobs.md, inputs.generate)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2000, 2000)), rng.standard_normal((2000, 500))
    product = np.load(tmp_path / "C.npy")
    assert product.shape == (2000, 500)
    assert np.abs(product - a @ b).max() <= 1e-9 * np.abs(a @ b).max()  # corrected around the bit flips
    assert "SUCCEEDED" in output and "Traceback" not in output, output[-6000:]
