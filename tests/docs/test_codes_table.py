"""docs/codes.md's generated tables match what the codes report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_codes_table_is_up_to_date():
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "gen_codes_table.py"), "--check"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
