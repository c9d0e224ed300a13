"""From device memory to a page count: the utilisation rule, the per-shard page count, int32 limits.

Two utilisation rules exist in the engines this mirrors, and they mean different things by
the same number:

* ``"total"`` (vLLM, tpu-inference): ``floor(memory * u) - used - reserved``: ``u`` is a share
  of the device's *total* memory, and everything already in use counts against it;
* ``"free"`` (EasyDeL / eSurge): ``floor((memory - used) * u) - reserved``: ``u`` is a share of
  the memory still *free* after the weights are loaded, so the same 0.9 gives KV more bytes.

``used`` is what is resident before the cache is allocated (weights and any other memory in
use); ``reserved`` is kept back after the utilisation is applied (EasyDeL's 256 MiB safety
margin, a backend workspace, activation headroom). ``u`` is a fraction ``util_num / util_den``
so the arithmetic stays exact.

The page axis is split over ``dp`` data-parallel shards, so the count is computed per shard
(``budget // page_bytes`` with ``page_bytes`` the padded bytes one page costs on one device)
and multiplied by ``dp``: every shard is equal and one more page per shard would not fit.
Page ids and page-table entries are int32, and TPU kernels also address the flat slot
``page * page_size + offset`` as int32, so the count is also capped by
``num_pages * index_unit <= 2**31 - 1`` (``index_unit`` = page size on TPU, 1 on GPU). The cap
is reported in the plan when it binds, never applied silently.

All functions run on ints and on Z3 integers (``verikv.sizing.arith``).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Literal

from verikv.errors import SizingError
from verikv.sizing.arith import INT32_MAX, SymInt, fdiv, imax, imin, ite

UtilizationRule = Literal["total", "free"]
UTILIZATION_RULES: tuple[str, ...] = ("total", "free")


def device_budget(
    memory: SymInt, used: SymInt, reserved: SymInt, util_num: SymInt, util_den: SymInt, rule: str
) -> SymInt:
    """Bytes of one device the KV pages may use under ``rule`` (may be negative: nothing fits).

    pre: memory >= 0 and used >= 0 and reserved >= 0
    pre: 1 <= util_num <= util_den
    pre: rule in ("total", "free")
    post: used > memory or __return__ + used + reserved <= memory
    """
    if rule == "total":
        return fdiv(memory * util_num, util_den) - used - reserved
    return fdiv((memory - used) * util_num, util_den) - reserved


def memory_page_limit(budget: SymInt, page_bytes: SymInt) -> SymInt:
    """How many pages of ``page_bytes`` fit in ``budget`` (0 for a negative budget).

    pre: page_bytes >= 1
    post: __return__ >= 0
    post: __return__ * page_bytes <= max(budget, 0)
    post: (__return__ + 1) * page_bytes > budget
    """
    return fdiv(imax(budget, 0), page_bytes)


def index_page_limit(dp: SymInt, index_unit: SymInt) -> SymInt:
    """Most pages per shard such that ``num_pages * index_unit`` stays within int32.

    pre: dp >= 1 and index_unit >= 1
    post: __return__ * dp * index_unit <= 2**31 - 1
    post: (__return__ + 1) * dp * index_unit > 2**31 - 1
    """
    return fdiv(INT32_MAX, dp * index_unit)


def pages_per_shard(budget: SymInt, page_bytes: SymInt, dp: SymInt, index_unit: SymInt) -> SymInt:
    """Pages each DP shard holds: as many as fit in the budget, within the int32 index limit.

    pre: page_bytes >= 1 and dp >= 1 and index_unit >= 1
    post: __return__ >= 0
    post: __return__ * page_bytes <= max(budget, 0)
    post: __return__ * dp * index_unit <= 2**31 - 1
    post: (__return__ + 1) * page_bytes > budget or (__return__ + 1) * dp * index_unit > 2**31 - 1
    """
    return imin(memory_page_limit(budget, page_bytes), index_page_limit(dp, index_unit))


def shard_range(shard: SymInt, pages_in_shard: SymInt) -> tuple[SymInt, SymInt]:
    """Half-open range of page ids ``[start, end)`` that DP shard ``shard`` owns (the null page is id 0 of shard 0).

    pre: shard >= 0 and pages_in_shard >= 0
    post: __return__[1] - __return__[0] == pages_in_shard
    """
    start = shard * pages_in_shard
    return (start, start + pages_in_shard)


def usable_pages_in_shard(shard: SymInt, pages_in_shard: SymInt) -> SymInt:
    """Pages shard ``shard`` can hand out: all of them, except the null page in shard 0.

    pre: shard >= 0 and pages_in_shard >= 1
    post: __return__ == pages_in_shard - (1 if shard == 0 else 0)
    """
    return pages_in_shard - ite(shard == 0, 1, 0)


_DECIMAL = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE]([+-]?[0-9]{1,3}))?", re.ASCII)
_RATIO = re.compile(r"\+?([0-9]{1,30})/([0-9]{1,30})", re.ASCII)
MAX_UTILIZATION_CHARS = 64
"""Longest utilisation text accepted; with at most three exponent digits, converting it to an
exact fraction is instant (``1e999999999`` is refused, not expanded)."""


def utilization_fraction(utilization: float | str | Fraction) -> Fraction:
    """The utilisation as an exact fraction in (0, 1]: ``0.9`` means 9/10 (its decimal form), not a binary float.

    Accepted: a float or int, a ``Fraction``, or text that is a decimal (``"0.9"``, ``"9e-1"``,
    exponent of at most three digits) or a ratio of integers (``"9/10"``), at most
    ``MAX_UTILIZATION_CHARS`` characters of ASCII digits and signs, without spaces or underscores.
    """
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float, str, Fraction)):
        raise SizingError(f"utilization must be a number in (0, 1], got {type(utilization).__name__}")
    if isinstance(utilization, Fraction):
        value = utilization
    else:
        text = utilization if isinstance(utilization, str) else repr(float(utilization))
        value = _parse_utilization(text)
    if not 0 < value <= 1:
        raise SizingError(f"utilization must be in (0, 1], got {_shown(utilization)}")
    return value


def _parse_utilization(text: str) -> Fraction:
    if len(text) > MAX_UTILIZATION_CHARS:
        raise SizingError(f"utilization text longer than {MAX_UTILIZATION_CHARS} characters")
    ratio = _RATIO.fullmatch(text)
    if ratio:
        if int(ratio.group(2)) == 0:
            raise SizingError(f"utilization {text!r} divides by zero")
        return Fraction(int(ratio.group(1)), int(ratio.group(2)))
    if not _DECIMAL.fullmatch(text):
        raise SizingError(f"utilization must be a decimal in (0, 1] or a ratio such as 9/10, got {_shown(text)}")
    return Fraction(text)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
