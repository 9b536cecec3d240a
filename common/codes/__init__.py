"""Pure math of coded computing: gradient codes, matmul codes and real MDS codes.

No I/O, no gRPC, no logging: the master, the workers and the peers call these objects.

>>> from coded.codes import gradient_code
>>> gc = gradient_code("cyclic", n=5, s=1)
>>> gc.partitions(4)
(0, 4)
"""

# Importing the scheme modules registers them with gradient_code, in this order.
from . import repetition, ye_abbe, partial, lwpd  # noqa: F401, I001
from .errors import CodeError, DecodingFailure, IllConditionedError, NotDecodableError
from .gradient import CheckedGradient, GradientCode
from .gradient_registry import adds_redundancy, gradient_code, gradient_schemes, takes_stragglers
from .linear_gradient import LinearGradientCode
from .linear_matmul import MatmulCode
from .matmul import matmul_code, matmul_schemes

__all__ = [
    "CheckedGradient",
    "CodeError",
    "DecodingFailure",
    "GradientCode",
    "IllConditionedError",
    "LinearGradientCode",
    "MatmulCode",
    "NotDecodableError",
    "adds_redundancy",
    "gradient_code",
    "gradient_schemes",
    "matmul_code",
    "matmul_schemes",
    "takes_stragglers",
]
