"""Generate the gRPC stubs from protos/ as part of every build (stubs are never committed)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent


def generate_stubs() -> None:
    from grpc_tools import protoc  # build requirement (pyproject [build-system])

    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos").rglob("*.proto"))
    if not protos:
        return
    args = ["protoc", f"-I{ROOT / 'protos'}", f"--python_out={ROOT}", f"--grpc_python_out={ROOT}",
            f"--pyi_out={ROOT}", *protos]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on " + " ".join(protos))


class BuildWithStubs(build_py):
    def run(self) -> None:
        generate_stubs()
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
