"""Hostile-input fuzzing at benchmark scale: tests/integration/test_hostile.py with enough examples
for about 10,000 malformed calls against a real master and real workers, counted per RPC family.

    python -m bench.fuzz                 # ~10,000 cases
    python -m bench.fuzz --quick         # ~700 cases (what `make test` runs)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from bench.common import REPO_ROOT
from bench.skeleton import Bench


def main(argv: list[str] | None = None) -> int:
    bench = Bench(__doc__, argv)
    examples = 50 if bench.quick else 720
    bench.open(f"bench/fuzz.py: {examples} examples per RPC family")
    env = {**os.environ, "CODED_FUZZ_EXAMPLES": str(examples)}
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "tests/integration/test_hostile.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    counts = re.search(r"hostile-input cases per RPC family: (\{.*\}) \(total (\d+)\)", run.stdout)
    outcome = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    lines = [f"pytest: {outcome}", f"seconds: {seconds:.0f}",
             f"cases: {counts.group(2) if counts else '?'} — {counts.group(1) if counts else run.stdout[-2000:]}",
             "Every case ended in OK or one of INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, "
             "UNIMPLEMENTED with a message (raw bytes that protobuf itself cannot parse: INVALID_ARGUMENT exactly); "
             "the servers answered health checks and ran a job afterwards."]
    print("\n".join(lines))
    bench.finish()
    bench.page("fuzz.md", "Hostile-input fuzzing", bench.header(), ["\n\n".join(lines)])
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
