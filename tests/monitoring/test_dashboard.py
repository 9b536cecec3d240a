"""The committed Grafana dashboard is what the generator produces."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_dashboard_is_generated_and_current():
    run = subprocess.run([sys.executable, str(REPO / "monitoring/grafana/generate.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
