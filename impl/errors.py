"""The verikv error hierarchy: every error the library raises on purpose derives from VeriKVError.

Each class also derives from the builtin exception eSurge raised in the same situation
(ValueError, RuntimeError), so callers written against eSurge keep catching what they caught.
A raised error always means the call changed nothing.
"""

from __future__ import annotations

import reprlib
from dataclasses import KW_ONLY, dataclass

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = 8


def describe(value: object) -> str:
    """A short repr of ``value`` for an error message that never raises: deep nesting, huge
    ints (beyond the int-to-str digit limit) and a failing ``__repr__`` all print something."""
    try:
        return _REPR.repr(value)
    except Exception:  # a message must not fail: fall back to the type
        bits = value.bit_length() if isinstance(value, int) else None
        return f"<{type(value).__name__}{'' if bits is None else f' of {bits} bits'}>"


class VeriKVError(Exception):
    """Root of every error verikv raises deliberately."""


class InvalidArgumentError(VeriKVError, ValueError):
    """An argument has the wrong type, is out of range, or is inconsistent with the others."""


class UnknownRequestError(InvalidArgumentError):
    """The request id is not known to the manager (never allocated, or already freed/finished)."""


class ForeignPageError(InvalidArgumentError):
    """A page id is out of range or a page object belongs to another pool."""


class CacheSpecError(InvalidArgumentError):
    """A cache spec, or a set of cache groups, is invalid or unsupported."""


class OutOfPagesError(VeriKVError, ValueError):
    """Fewer free pages than requested (globally, or in the requested data-parallel shard)."""


class PageStateError(VeriKVError, RuntimeError):
    """The operation is illegal for the page's current state (e.g. re-hashing a hashed page,
    appending a page that is already linked in the free queue)."""


class DoubleFreeError(PageStateError):
    """A page with reference count 0 was freed again."""


class NullPageError(PageStateError):
    """The null page (id 0) was freed, hashed, or appended to the free queue."""


class CorruptedStateError(VeriKVError, RuntimeError):
    """An internal invariant was found broken; the structure must not be used further."""


class HashingError(VeriKVError, ValueError):
    """A page key could not be computed: a user-supplied hash function raised or returned a
    non-integer. Raised before any state changes."""


class SizingError(InvalidArgumentError):
    """Invalid device or model geometry given to the sizing planner."""


class DoesNotFitError(VeriKVError):
    """Not even one request of ``max_model_len`` fits in the device budget."""


@dataclass(eq=False, repr=False)  # (an exception: identity equality, the builtin repr)
class KVCacheDoesNotFitError(DoesNotFitError):
    """The planned KV cache cannot hold one request of ``max_model_len``; carries the numbers.

    ``largest_max_model_len`` is the longest request that would fit with the same device,
    geometry and page size (0 when not even one page fits).
    """

    message: str
    _: KW_ONLY
    max_model_len: int
    largest_max_model_len: int
    pages_per_request: int
    num_pages: int
    budget_bytes: int
    page_bytes: int

    def __post_init__(self) -> None:
        super().__init__(self.message)
