"""Integer helpers shared by every sizing formula, written once for two kinds of numbers.

The sizing formulas run on Python ints when a plan is computed and on symbolic integers when
``verikv prove`` proves theorems about those same formulas. Python's ``//``, ``min``, ``max``
and ``if`` need concrete values, so the formulas use only ``+``, ``-``, ``*``, comparisons and
the helpers below. On ints the helpers are plain Python. On anything else they delegate to a
*symbolic backend* registered by the prover (``verikv.proofs`` registers Z3), so this module
imports nothing beyond the standard library.

Every division in the sizing code has a positive divisor; for those, floor division is the
same in Python and in Z3 (whose integer division is Euclidean).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

SymInt = int
"""Annotation of the sizing formulas' integers: an ``int`` when planning; when proving, the
prover passes symbolic integers standing for ints (the formulas never inspect the type)."""

INT32_MAX = 2**31 - 1
"""Largest value of a signed 32-bit index (page ids, page-table entries, TPU flat slots)."""


@dataclass(frozen=True)
class SymbolicBackend:
    """How to divide and choose on symbolic integers: floor division (positive divisor) and if-then-else."""

    floordiv: Callable[[Any, Any], Any]
    ite: Callable[[Any, Any, Any], Any]


_backend: SymbolicBackend | None = None


def set_symbolic_backend(backend: SymbolicBackend) -> None:
    """Install the backend used when a helper receives a non-``int`` value (called by the prover)."""
    global _backend
    _backend = backend


def _symbolic() -> SymbolicBackend:
    if _backend is None:
        raise TypeError("sizing arithmetic got a non-int value but no symbolic backend is registered")
    return _backend


def _concrete(*values: Any) -> bool:
    return all(isinstance(v, int) for v in values)


def fdiv(a: Any, b: Any) -> SymInt:
    """Floor of ``a / b`` for a positive divisor ``b``."""
    if _concrete(a, b):
        return cast(SymInt, a // b)
    return cast(SymInt, _symbolic().floordiv(a, b))


def cdiv(a: Any, b: Any) -> SymInt:
    """Ceiling of ``a / b`` for a positive divisor ``b``."""
    return -fdiv(-a, b)


def align(a: Any, b: Any) -> SymInt:
    """Smallest multiple of ``b`` (positive) that is ``>= a``."""
    return cast(SymInt, cdiv(a, b) * b)


def ite(cond: Any, then: Any, otherwise: Any) -> SymInt:
    """``then`` if ``cond`` holds else ``otherwise``; symbolic when ``cond`` is symbolic."""
    if isinstance(cond, bool):
        return cast(SymInt, then if cond else otherwise)
    return cast(SymInt, _symbolic().ite(cond, then, otherwise))


def imin(a: Any, b: Any) -> SymInt:
    """The smaller of two integers."""
    return ite(a <= b, a, b)


def imax(a: Any, b: Any) -> SymInt:
    """The larger of two integers."""
    return ite(a >= b, a, b)


def prod(values: Iterable[Any]) -> SymInt:
    """Product of the values (1 for none)."""
    result: Any = 1
    for v in values:
        result = result * v
    return cast(SymInt, result)
