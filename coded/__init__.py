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

Importing ``coded`` loads nothing else.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("coded-computing")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
