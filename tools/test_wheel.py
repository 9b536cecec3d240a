"""The release as a user gets it (``make test-wheel``): the wheel that ``python -m build`` made,
installed with its dependencies into a fresh virtualenv outside the clone, runs a job on a local
cluster that the installed ``coded`` starts.

    python tools/test_wheel.py dist/

Exits 0 when the job succeeded and its loss fell; says what failed otherwise. Uses the standard
library only: it runs before anything of the project is importable from where it stands.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: a job that each of a cyclic code's rounds decodes from 3 of the 4 workers
JOB = """\
kind: gradient_coding
name: from-the-wheel
workers: 4
code: {scheme: cyclic, stragglers: 1}
model: {type: logistic, l2: 0.001}
data: {type: gaussian_mixture, samples: 2000, features: 10, classes: 2, seed: 1}
optimizer: {type: nesterov, lr: 0.5}
iterations: 20
seed: 3
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(*argv: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(map(str, argv)), flush=True)
    return subprocess.run(list(map(str, argv)), check=True, text=True, **kwargs)  # type: ignore[call-overload]


def main(dist: Path) -> int:
    version = re.findall(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)[0]
    (wheel,) = dist.glob(f"coded_computing-{version}-*.whl")
    (sdist,) = dist.glob(f"coded_computing-{version}.tar.gz")
    print(f"release {version}: {wheel.name}, {sdist.name}")
    with tempfile.TemporaryDirectory(prefix="coded-wheel-") as place:
        home = Path(place)  # outside the clone: nothing of the source tree is importable from here
        venv.create(home / "venv", with_pip=True)
        bin_dir = home / "venv" / "bin"
        run(bin_dir / "pip", "install", "--quiet", wheel.resolve(), cwd=home)
        where = run(bin_dir / "python", "-c", "import coded, coded.cli; print(coded.__version__, coded.cli.__file__)",
                    cwd=home, capture_output=True).stdout.split()
        if where[0] != version or not Path(where[1]).is_relative_to(home / "venv"):
            print(f"FAILED: the venv imports coded {where[0]} from {where[1]}, not {version} from its own install")
            return 1
        port = free_port()
        env = {**os.environ, "CODED_TOKEN": "wheel-check", "CODED_MASTER": f"127.0.0.1:{port}",
               "PYTHONPATH": ""}
        local = subprocess.Popen([bin_dir / "coded", "local", "--workers", "4", "--port", str(port)], cwd=home,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert local.stdout is not None
            for line in local.stdout:  # its lines until it says it is ready (or ends)
                print(f"  coded local: {line.rstrip()}", flush=True)
                if line.startswith("ready:"):
                    break
            else:
                print(f"FAILED: `coded local` ended before it was ready (exit status {local.wait()})")
                return 1
            (home / "job.yaml").write_text(JOB)
            done = run(bin_dir / "coded", "submit", "job.yaml", "--wait", "--json", cwd=home, env=env,
                       capture_output=True, timeout=300)
            shown = run(bin_dir / "coded", "status", json.loads(done.stdout)["id"], "--json", cwd=home, env=env,
                        capture_output=True)  # with its history
            job = json.loads(shown.stdout)
        finally:
            local.send_signal(signal.SIGINT)  # stops the master and every worker
            local.wait(timeout=60)
        losses = [record["loss"] for record in job["history"]]
        print(f"job {job['id']}: {job['state']} after {job['iterations']} iterations, loss {losses[0]:.4g} -> "
              f"{losses[-1]:.4g}")
        if job["state"] != "SUCCEEDED" or job["iterations"] != 20 or not losses[-1] < losses[0]:
            print("FAILED: the job did not run to its end with a falling loss")
            return 1
    print(f"the wheel of {version} installs and runs a job")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
