"""Type-check the ``coded`` package with mypy, as it is laid out once installed.

The repository's folders map into one import package (pyproject's ``package-dir``: ``master/`` is
``coded.master``, ``common/codes/`` is ``coded.codes``, ...). mypy finds modules by their folders,
so this builds that layout from symbolic links in a temporary directory, runs ``mypy -p coded``
there, and prints mypy's report with the repository's own paths.

    python tools/typecheck.py [MYPY OPTIONS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, Path]:
    """Import package -> folder, from pyproject.toml (longest names first)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in sorted(config.items(), key=lambda kv: -len(kv[0]))}


def main() -> int:
    mapping = package_dirs()
    with tempfile.TemporaryDirectory(prefix="coded-typecheck-") as tmp:
        tree = Path(tmp)
        for name, folder in sorted(mapping.items()):
            target = tree.joinpath(*name.split("."))
            target.mkdir(parents=True, exist_ok=True)
            for entry in folder.iterdir():
                if entry.name.startswith((".", "__pycache__")) or (target / entry.name).exists():
                    continue
                if entry.suffix in (".py", ".pyi", ".typed") or (
                        entry.is_dir() and f"{name}.{entry.name}" not in mapping):
                    (target / entry.name).symlink_to(entry)
        done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                               "-p", "coded", *sys.argv[1:]], cwd=tree, capture_output=True, text=True,
                              env={**os.environ, "MYPYPATH": str(tree)})
        report = done.stdout + done.stderr
        for name, folder in mapping.items():  # mypy names files by the tree: give the repository's paths
            report = report.replace(str(Path(*name.split("."))) + "/", str(folder.relative_to(ROOT)) + "/")
        print(report, end="")
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
