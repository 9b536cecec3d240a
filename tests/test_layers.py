"""The layers of the package, read from the code's own imports: the shared library never imports
the master, the worker or the application; the master's core never imports gRPC."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
APPLICATION = ("coded.cli", "coded.client", "coded.convert", "coded.reports", "coded.local", "coded.demo",
               "coded.certs", "coded.config")

#: what each package may import of the project (besides itself)
ALLOWED = {
    "coded.base": (),
    "coded.codes": ("coded.base",),
    "coded.ml": ("coded.base",),
    "coded.jobs": ("coded.base", "coded.codes", "coded.ml"),
    "coded.wire": ("coded.base", "coded.codes", "coded.jobs", "coded.v1"),
    "coded.master": ("coded.base", "coded.codes", "coded.ml", "coded.jobs", "coded.wire", "coded.v1"),
    "coded.worker": ("coded.base", "coded.codes", "coded.ml", "coded.jobs", "coded.wire", "coded.v1"),
}


def modules() -> dict[str, Path]:
    """Every module of the package by its import name, from pyproject's package-dir."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in mapping.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            if package == "coded" and parts[0] == "v1":
                continue  # generated stubs
            found.setdefault(name, path)
    return found


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def package_of(module: str) -> str | None:
    return next((p for p in ALLOWED if module == p or module.startswith(p + ".")), None)


@pytest.mark.parametrize(("module", "path"), sorted(modules().items()))
def test_imports_only_go_down(module, path):
    package = package_of(module)
    if package is None:
        return  # the application may import anything
    allowed = (package, *ALLOWED[package])
    project = {name for name in imports(path) if name == "coded" or name.startswith("coded.")}
    wrong = sorted(name for name in project
                   if not any(name == a or name.startswith(a + ".") for a in allowed) and name != "coded")
    assert not wrong, f"{path.relative_to(REPO)} imports {wrong}"


def test_only_the_servicer_its_conversions_and_the_grpc_links_of_the_master_know_grpc():
    knows = sorted(str(path.relative_to(REPO)) for name, path in modules().items()
                   if name.startswith("coded.master") and any(
                       i == "grpc" or i.startswith("grpc.") or i.endswith("_pb2") or i.endswith("_pb2_grpc")
                       or ".v1." in i or i == "coded.v1" for i in imports(path)))
    assert knows == ["master/convert.py", "master/grpc_links.py", "master/server.py"]


def test_the_application_is_not_imported_by_the_library():
    for name, path in modules().items():
        if package_of(name) is not None:
            assert not {i for i in imports(path) if i.startswith(APPLICATION)}, name
