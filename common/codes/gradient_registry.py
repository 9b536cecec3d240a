"""The gradient schemes by name: the registry each scheme module adds its class to, and the factory.

The scheme modules (:mod:`~coded.codes.repetition`, :mod:`~coded.codes.ye_abbe`,
:mod:`~coded.codes.partial`, :mod:`~coded.codes.lwpd`) register themselves when imported; the
package imports them in the order :func:`gradient_schemes` lists them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from coded.base.checks import check_int

from .gradient import GradientCode

__all__ = ["adds_redundancy", "gradient_code", "gradient_schemes", "register", "takes_stragglers"]

CodeT = TypeVar("CodeT", bound=type[GradientCode])
_SCHEMES: dict[str, type[GradientCode]] = {}


def register(name: str) -> Callable[[CodeT], CodeT]:
    """Class decorator: make a scheme available to :func:`gradient_code` under ``name``."""

    def add(cls: CodeT) -> CodeT:
        cls.scheme = name
        _SCHEMES[name] = cls
        return cls

    return add


def gradient_schemes() -> tuple[str, ...]:
    """Names accepted by :func:`gradient_code`."""
    return tuple(_SCHEMES)


def takes_stragglers(scheme: str) -> bool:
    """Whether a scheme uses s (uncoded and lwpd ignore it).

    >>> takes_stragglers("cyclic"), takes_stragglers("lwpd")
    (True, False)
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown gradient scheme {scheme!r}; choose one of {', '.join(_SCHEMES)}")
    return _SCHEMES[scheme].uses_stragglers


def adds_redundancy(scheme: str) -> bool:
    """Whether s buys redundancy that can check replies: the exact synchronous schemes that use s
    (frc, cyclic, ye_abbe, partial); replies of the others can only be checked for being finite.

    >>> adds_redundancy("cyclic"), adds_redundancy("ignore_stragglers"), adds_redundancy("kasync")
    (True, False, False)
    """
    cls = _SCHEMES[scheme] if takes_stragglers(scheme) else None
    return cls is not None and cls.exact and not cls.asynchronous


def gradient_code(scheme: str, n: int, s: int = 0, seed: int = 0, **params: Any) -> GradientCode:
    """Build a gradient code.

    Parameters
    ----------
    scheme : str
        One of :func:`gradient_schemes`: uncoded, ignore_stragglers, frc, cyclic, ye_abbe,
        partial, lwpd, kasync.
    n : int
        Workers (0..n-1).
    s : int
        Stragglers to tolerate (ignored by uncoded and lwpd; kasync steps with the first n - s).
    seed : int
        Seed of every random choice (cyclic's H, conditioning samples).
    **params
        Scheme parameters: ye_abbe ``m``, ``points``; partial ``alpha``, ``base``; lwpd ``t``;
        every exact scheme ``max_error``.

    Examples
    --------
    >>> gc = gradient_code("frc", n=6, s=2)
    >>> gc.partitions(0), gc.partitions(1)
    ((0, 1, 2), (3, 4, 5))
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown gradient scheme {scheme!r}; choose one of {', '.join(_SCHEMES)}")
    cls = _SCHEMES[scheme]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "n", "s", "seed")]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"scheme {scheme!r} takes no parameter {unknown[0]!r} "
            f"(its parameters: {', '.join(accepted) or 'none'})"
        )
    n = check_int("workers n", n, 1)
    s = check_int("stragglers s", s, 0)
    seed = check_int("seed", seed, 0)
    if s >= n:
        raise ValueError(f"stragglers must be < workers (got s={s}, n={n})")
    build: Callable[..., GradientCode] = cls  # every registered scheme takes (n, s, seed, **params)
    return build(n=n, s=s, seed=seed, **params)
