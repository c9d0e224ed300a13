"""What the conformance machine accepts as an adapter's answer, before judging it against the spec.

An adapter answers with plain values: counts, a usage fraction, page ids per group, a flag. An
answer of the wrong type or out of range (a NaN usage, a count that is a string, a bool or
``10**100``) is not a departure from the spec the harness could judge: comparing it would pass
by accident (a NaN usage is never "too far" from the expected one) or crash later. Each function
here returns why an answer is malformed, or None; the machine reports it as ``adapter:<method>``.
Standard library only.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from typing import Any

from verikv.testing._arguments import is_int
from verikv.testing.adapter import page_ids_of


def shown(value: Any) -> str:
    """A value as a report or an error message shows it: short, and safe for deeply nested or
    huge values (an adapter, like a caller, may hand over anything)."""
    return reprlib.repr(value)


def count_problem(value: Any, most: int) -> str | None:
    """Why ``value`` is not a count in ``0..most``, or None."""
    if not is_int(value):
        return f"not an int but {type(value).__name__}"
    if not 0 <= value <= most:
        return f"outside 0..{most}"
    return None


def fraction_problem(value: Any) -> str | None:
    """Why ``value`` is not a finite real number, or None (whether it is the right fraction is
    ``INV-USAGE``'s question)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"not a number but {type(value).__name__}"
    if not math.isfinite(value):
        return "not a finite number"
    return None


def flag_problem(value: Any) -> str | None:
    """Why ``value`` is not a bool, or None."""
    return None if isinstance(value, bool) else f"not a bool but {type(value).__name__}"


def page_ids_problem(value: Any, num_pages: int) -> str | None:
    """Why ``value`` is not page ids per group (ids, or an object with ``get_page_ids()`` /
    ``get_block_ids()``) of a pool of ``num_pages`` pages, or None."""
    try:
        groups = page_ids_of(value)
    except Exception as exc:  # whatever the object does when read is the adapter's problem
        return f"not page ids per group ({type(exc).__name__}: {exc})"
    for ids in groups:
        for page in ids:
            problem = count_problem(page, num_pages - 1)
            if problem is not None:
                return f"page id {page!r}: {problem}"
    return None
