"""coded: coded distributed computing on a gRPC cluster.

One import namespace for the whole project; the folders of the repository map into it::

    coded/         coded            the application, in the folders below; its environment variables
    coded/cli/     coded.cli        the ``coded`` command: one module per group of sub-commands
    coded/client/  coded.client     the Python client (CodedClient) and the plain objects it returns
    coded/cluster/ coded.cluster    a master and workers on one machine (``coded local``), the demo, certificates
    coded/links/   coded.links      links of finite bandwidth: network namespaces, tc tbf, slow links
    coded/v1/      coded.v1         gRPC stubs generated from protos/coded/v1
    common/base/   coded.base       argument checks, domain errors, metric machinery, memory
    common/codes/  coded.codes      the math of the codes (numpy and scipy only)
    common/ml/     coded.ml         models, optimizers, data, evaluation
    common/jobs/   coded.jobs       the job schema and what is built from it
    common/wire/   coded.wire       tensors on the wire, gRPC servers and channels, status codes
    master/        coded.master     the master: job runners, registry, store; its gRPC layer
    worker/        coded.worker     the worker: computation, CodeNet peers; its gRPC layer

Importing ``coded`` loads nothing else: ``coded.__version__`` is read from the installed package's
metadata when first asked for (importlib.metadata alone costs every process 40 ms).
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'coded' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("coded-computing")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
