"""The layers of the package, read from the code's own imports: the shared library never imports
the master, the worker or the application; the master's core never imports gRPC, and neither do the
data plane and the shared library's wire-free parts, however deep one looks."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
APPLICATION = ("coded.cli", "coded.client", "coded.cluster", "coded.links", "coded.config")

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


@functools.cache
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


#: what must run without gRPC: the shared library's wire-free parts, the statuses, and the data
#: plane (its frames, and both ends)
WITHOUT_GRPC = ("coded.base", "coded.codes", "coded.jobs", "coded.ml", "coded.wire.status", "coded.wire.frames",
                "coded.master.dataplane", "coded.master.data_connections", "coded.worker.dataplane")


def is_grpc(name: str) -> bool:
    """gRPC itself, its companions (grpc_health, grpc_reflection) and generated service stubs."""
    return name.split(".")[0] in ("grpc", "grpc_health", "grpc_reflection") or name.endswith("_pb2_grpc")


@functools.cache
def absolute_imports(name: str, path: Path) -> set[str]:
    """What a module imports, relative imports resolved (``from .base import X`` in coded.ml.models)."""
    found = set(imports(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
            module = f"{base}.{node.module}" if node.module else base
            found |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return found


def imported_by(start: str) -> dict[str, str | None]:
    """Every module of the package that importing ``start`` runs (packages' ``__init__`` too),
    each with the module that brought it in (None for ``start``)."""
    table = modules()
    seen: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for imported in absolute_imports(name, table[name]) | {".".join(parts[:i]) for i in range(1, len(parts))}:
            steps = imported.split(".")
            for prefix in (".".join(steps[:i]) for i in range(1, len(steps) + 1)):
                if prefix in table and prefix not in seen:
                    seen[prefix] = name
                    todo.append(prefix)
    return seen


def chain(seen: dict[str, str | None], name: str) -> str:
    links = [name]
    while (before := seen[links[-1]]) is not None:
        links.append(before)
    return " <- ".join(links)


@pytest.mark.parametrize("module", sorted(name for name in modules()
                                          if any(name == p or name.startswith(p + ".") for p in WITHOUT_GRPC)))
def test_the_data_plane_and_the_wire_free_library_import_no_grpc_however_deep(module):
    seen = imported_by(module)
    table = modules()
    wrong = {f"{chain(seen, name)} imports {sorted(filter(is_grpc, absolute_imports(name, table[name])))}"
             for name in seen if any(is_grpc(i) for i in absolute_imports(name, table[name]))}
    assert not wrong, wrong


def test_the_closure_follows_imports_through_the_package():
    """The check above looks deep enough to see gRPC where it is: through the links to rpc.py."""
    seen = imported_by("coded.master.grpc_links")
    assert {"coded.master.data_connections", "coded.master.dataplane", "coded.wire.rpc", "coded.master",
            "coded"} <= set(seen)
    assert any(is_grpc(i) for i in absolute_imports("coded.wire.rpc", modules()["coded.wire.rpc"]))


def test_importing_the_data_plane_loads_no_grpc_at_all():
    """The same at run time, third-party libraries included."""
    ends = [name for name in WITHOUT_GRPC if name.startswith(("coded.master", "coded.worker", "coded.wire"))]
    code = (f"import importlib, sys\nfor name in {ends!r}: importlib.import_module(name)\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('grpc', 'grpc_health', 'grpc_reflection')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout


MOST_LINES = 450  # a module longer than this holds more than one thing: split it by what it holds


def test_no_module_of_the_package_runs_over_450_lines():
    long = {name: n for name, path in modules().items() if not name.startswith("coded.v1")
            and (n := len(path.read_text().splitlines())) > MOST_LINES}
    assert modules() and not long, f"modules over {MOST_LINES} lines: {long}"
