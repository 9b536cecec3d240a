"""What README.md and docs/ cite exists: every repository path (in prose, code or a link), every
``make`` target, every ``python -m`` module and every ``coded.*`` module a reader is pointed to.

A file moved or renamed leaves its old path in the docs; this test names each such citation, with
the doc that makes it, all at once. Paths that .gitignore lists (made at run time: a token, a CA's
certificates) and ../shared/ (outside the repository) may be missing; web links are not followed.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# the repository's top-level folders, less build outputs: a path cited from the root starts with one
NOT_SOURCE = {"out", "results", "build", "dist"}
TOP = sorted(entry.name for entry in REPO.iterdir() if entry.is_dir() and not entry.name.startswith(".")
             and entry.name not in NOT_SOURCE and not entry.name.endswith(".egg-info"))

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(rf"(?<![\w./-])((?:\.\./)*(?:{'|'.join(map(re.escape, TOP))})/[\w.*/-]*)")
MAKE = re.compile(r"(?:^|[;&|(]\s*|\$\s+|sudo\s+)make((?:\s+[\w.=-]+)+)", re.MULTILINE)
PYTHON_M = re.compile(r"\bpython3?\s+-m\s+([\w.]+)")
MODULE = re.compile(r"(?<![\w./\"-])coded(?:\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = {"yaml", "yml", "json", "md", "py", "log", "txt", "npz", "npy", "csv", "pem", "env"}

# coded.* as pyproject.toml's [tool.setuptools.package-dir] lays it out (see coded/__init__.py)
PACKAGE_DIR = {"coded": "coded", "coded.base": "common/base", "coded.codes": "common/codes",
               "coded.jobs": "common/jobs", "coded.wire": "common/wire", "coded.ml": "common/ml",
               "coded.master": "master", "coded.worker": "worker"}


def parts(text: str) -> tuple[str, list[str], str]:
    """A markdown text as (prose, inline code spans, fenced code): prose less its spans, fences and
    link targets (which links() reads, relative to the doc's folder)."""
    code = "\n".join(FENCE.findall(text))
    outside = FENCE.sub("", text)
    return re.sub(r"\]\([^)\s]+\)", "]", SPAN.sub(" ", outside)), SPAN.findall(outside), code


def links(text: str) -> list[str]:
    """The targets of a markdown text's links and images, outside code."""
    return LINK.findall(SPAN.sub(" ", FENCE.sub("", text)))


def ignored(path: str) -> bool:
    """Whether .gitignore lists the path or a folder above it (made at run time, never committed):
    a pattern with a slash matches from the root, one without matches a name at any depth."""
    lines = [line.strip() for line in (REPO / ".gitignore").read_text().splitlines()]
    patterns = [(line.strip("/"), "/" in line.rstrip("/")) for line in lines if line and not line.startswith("#")]
    pieces = path.strip("/").split("/")
    prefixes = ["/".join(pieces[: i + 1]) for i in range(len(pieces))]
    return any(fnmatch.fnmatch(prefixes[i] if anchored else pieces[i], pattern)
               for pattern, anchored in patterns for i in range(len(pieces)))


def exists(base: Path, path: str) -> bool:
    if any(c in path for c in "*?["):
        return any(base.glob(path))
    return (base / path).exists()


# a results page's provenance: the files that differed from a past commit when it was measured,
# which that commit's tree holds, not necessarily today's
PROVENANCE = re.compile(r"^- code: commit [0-9a-f]+ with uncommitted changes to .*$", re.MULTILINE)


def missing_paths(doc: Path) -> list[str]:
    text = PROVENANCE.sub("", doc.read_text())
    prose, spans, code = parts(text)
    missing = []
    for target in links(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web link or an anchor in the same page
        path = target.split("#")[0]
        if not (doc.parent / path).resolve().exists():
            missing.append(f"link ({target})")
    for path in {match.rstrip(".") for source in (prose, code, *spans) for match in PATH.findall(source)}:
        base = doc.parent if path.startswith("../") else REPO
        if path.startswith("../shared/") or path == "../shared" or ignored(path.removeprefix("../")):
            continue
        if re.search(r"[A-Z]{3,}", path) and not (REPO / path).exists():
            continue  # a placeholder: bench/NAME.py
        if not exists(base, path):
            missing.append(f"path {path}")
    return missing


def makefile_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        match = re.match(r"([\w.][\w. -]*?)\s*:(?!=)", line)
        if match and not line.startswith("\t"):
            targets.update(match.group(1).split())
    return targets - {".PHONY"}


def missing_make_targets(doc: Path) -> list[str]:
    _, spans, code = parts(doc.read_text())
    targets = makefile_targets()
    missing = []
    for source in (code, *spans):
        for arguments in MAKE.findall(source):
            for target in arguments.split():
                if not target.startswith("-") and "=" not in target and target not in targets:
                    missing.append(f"make {target}")
    return missing


def module_file(name: str) -> Path | None:
    """The file or folder of a coded.* module, by the package-dir mapping; None where there is none."""
    package = max((p for p in PACKAGE_DIR if name == p or name.startswith(p + ".")), key=len)
    folder = REPO / PACKAGE_DIR[package]
    rest = name[len(package):].lstrip(".").split(".") if name != package else []
    for piece in rest[:-1]:
        folder = folder / piece
    if not rest:
        return folder if folder.is_dir() else None
    for candidate in (folder / f"{rest[-1]}.py", folder / rest[-1]):
        if candidate.exists():
            return candidate
    return None


def defines(source: Path, names: list[str]) -> bool:
    """Whether a module's source defines each of the names (a class, a function, a constant)."""
    if source.is_dir():
        source = source / "__init__.py"
    text = source.read_text() if source.exists() else ""
    return all(re.search(rf"^\s*(?:class|def|async def)\s+{name}\b|^\s*{name}\s*[:=]|\bimport .*\b{name}\b",
                         text, re.MULTILINE) for name in names)


def missing_coded_names(doc: Path) -> list[str]:
    """coded.x.y[.Attr...]: the longest prefix that is a module exists, and defines what follows.
    Two kinds of coded.* name are not modules: the gRPC services coded.v1.Master and the like (in
    protos/), and the ``coded.models`` entry-point group that coded.ml.pytorch reads."""
    protos = "\n".join(p.read_text() for p in (REPO / "protos" / "coded" / "v1").glob("*.proto"))
    group = (REPO / "common" / "ml" / "pytorch" / "__init__.py").read_text()
    missing = []
    for name in set(MODULE.findall(doc.read_text())):
        pieces = name.split(".")
        if pieces[-1] in FILE_SUFFIXES:
            continue  # a file name: coded.yaml
        if len(pieces) == 3 and pieces[1] == "v1" and re.search(rf"^service {pieces[2]}\b", protos, re.MULTILINE):
            continue
        if f'ENTRY_POINT_GROUP = "{name}"' in group:
            continue
        for cut in range(len(pieces), 0, -1):
            found = module_file(".".join(pieces[:cut]))
            if found is not None:
                break
        if (cut == 1 and len(pieces) > 1) or found is None or not defines(found, pieces[cut:]):
            missing.append(f"module {name}")
    return missing


def missing_python_modules(doc: Path) -> list[str]:
    missing = []
    for name in set(PYTHON_M.findall(doc.read_text())):
        name = name.rstrip(".")
        if re.search(r"[A-Z]{3,}", name):
            continue  # a placeholder: bench.NAME
        top = name.split(".")[0]
        if top == "coded":
            found = module_file(name) is not None
        elif (REPO / top).is_dir():
            path = REPO.joinpath(*name.split("."))
            found = path.with_suffix(".py").exists() or (path / "__main__.py").exists()
        else:
            found = importlib.util.find_spec(name) is not None
        if not found:
            missing.append(f"python -m {name}")
    return missing


def test_the_docs_are_found():
    assert {"README.md", "jobs.md", "codes.md", "results.md"} <= {doc.name for doc in DOCS}
    assert {"bench", "common", "master", "worker", "coded", "tests", "docs"} <= set(TOP)


def test_the_extractors_find_what_they_should():
    prose, spans, code = parts("See bench/x.py and `master/y.py:12`.\n```\nmake test demo\n```\n")
    assert PATH.findall(prose) == ["bench/x.py"] and PATH.findall(spans[0]) == ["master/y.py"]
    assert MAKE.findall(code) == [" test demo"] and MAKE.findall("we make a new CA") == []
    assert "bench.codenet" in PYTHON_M.findall("`python -m bench.codenet --quick`")
    assert module_file("coded.codes.streaming") == REPO / "common" / "codes" / "streaming.py"
    assert module_file("coded.nothing_here") is None
    assert PATH.findall("master:/home/coded/certs ./certs") == []
    assert ignored("k8s/overlays/aws/token.env") and ignored("k8s/base/certs/ca.pem") and ignored("x/y.pyc")
    assert not ignored("bench/results/detection.md") and ignored("results/detection.md")
    assert links("[a](../bench/x.md) `[b](c.md)`") == ["../bench/x.md"] and parts("[a](../bench/x.md)")[0] == "[a]"


def test_every_cited_path_command_and_module_exists():
    missing = [f"{doc.relative_to(REPO)}: {item}" for doc in DOCS
               for check in (missing_paths, missing_make_targets, missing_python_modules, missing_coded_names)
               for item in sorted(set(check(doc)))]
    assert not missing, "cited in the docs but not in the repository:\n" + "\n".join(missing)


# the code whose docstrings and comments a reader follows: the package, the benchmarks, the tools
SOURCES = sorted(path for folder in ("coded", "common", "master", "worker", "bench", "tools")
                 for path in (REPO / folder).rglob("*.py") if "v1" not in path.relative_to(REPO).parts)


def prose_of(source: Path) -> str:
    """A Python file's docstrings and comments, where it points its reader to other files."""
    text = source.read_text()
    found = [ast.get_docstring(node, clean=False) or "" for node in ast.walk(ast.parse(text))
             if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    found += [token.string for token in tokenize.generate_tokens(io.StringIO(text).readline)
              if token.type == tokenize.COMMENT]
    return "\n".join(found)


def test_every_path_cited_in_a_docstring_or_comment_exists():
    missing = []
    for source in SOURCES:
        prose = prose_of(source)
        # a path that goes on in a placeholder is a pattern: bench/results/cluster_<name>.csv, x.{csv,md}
        cited = {m.group(1).rstrip(".:,") for m in PATH.finditer(prose) if prose[m.end():m.end() + 1] not in "<{"}
        for path in cited:
            if path.startswith("../") or ignored(path) or re.search(r"[A-Z]{3,}", path):
                continue  # outside the repository, made at run time, or a placeholder: bench/NAME.py
            if not exists(REPO, path):
                missing.append(f"{source.relative_to(REPO)}: {path}")
    assert not missing, "cited in a docstring or comment but not in the repository:\n" + "\n".join(sorted(missing))
