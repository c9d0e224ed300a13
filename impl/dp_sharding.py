"""Data-parallel page sharding: which contiguous range of page ids each DP shard owns.

The device page buffer's first axis is split over the data-parallel mesh axis, so shard ``s``
owns the ids ``[s * pps, (s + 1) * pps)`` with ``pps = num_pages // dp``. Page 0, the null
page, lives in shard 0, so shard 0 has one usable page fewer than the others.

Results for valid inputs are eSurge's. Invalid inputs raise ``InvalidArgumentError`` (or its
``ForeignPageError`` subclass for a page id outside the partition) instead of being clamped
with ``max(0, ...)`` / ``min(..., dp - 1)`` as eSurge does. Integer arguments accept Python
``int`` and NumPy integer scalars; ``bool`` and floats (even integral ones such as ``8.0``) are
rejected, because a float page count means an upstream computation went wrong.
"""

from __future__ import annotations

import numbers

from verikv.errors import ForeignPageError, InvalidArgumentError, describe


def checked_int(
    value: object,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[InvalidArgumentError] = InvalidArgumentError,
) -> int:
    """Return ``value`` as a Python int, or raise ``error`` if it is not an integer in range.

    Accepts ``int`` and NumPy integer scalars; rejects ``bool``, NumPy booleans, floats and
    anything else, so a wrong type is reported instead of being silently truncated.
    """
    if type(value) is int:  # fast path: plain ints skip the ABC dispatch of numbers.Integral
        result = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"{name} must be an integer, got {type(value).__name__} {describe(value)}")
    else:
        result = int(value)
    if minimum is not None and result < minimum:
        raise error(f"{name} must be >= {minimum}, got {result}")
    if maximum is not None and result > maximum:
        raise error(f"{name} must be <= {maximum}, got {result}")
    return result


def usable_pages_count(num_pages: int) -> int:
    """Number of pages that can be handed out: every page but the null page (id 0).

    A pool always contains the null page, so ``num_pages`` must be at least 1.
    """
    return checked_int(num_pages, "num_pages", minimum=1) - 1


def pages_per_dp_shard(num_pages: int, data_parallel_size: int | None) -> int | None:
    """Pages per DP shard, or ``None`` when there is no valid partition.

    ``None`` (as in eSurge) when ``data_parallel_size`` is ``None`` or 1, or when ``num_pages``
    is not divisible by it: schedulers treat that as "allocate from the whole pool". A DP size
    below 1 is not a size and raises.
    """
    pages = checked_int(num_pages, "num_pages", minimum=1)
    if data_parallel_size is None:
        return None
    dp = checked_int(data_parallel_size, "data_parallel_size", minimum=1)
    if dp == 1 or pages % dp != 0:
        return None
    return pages // dp


def dp_shard_for_page_id(page_id: int, pages_per_shard: int, dp_size: int) -> int | None:
    """The DP shard owning ``page_id``; ``None`` for the null page, which no shard hands out.

    A page id beyond the last shard (``>= pages_per_shard * dp_size``) raises
    ``ForeignPageError``; eSurge silently mapped it to the last shard.
    """
    pps = checked_int(pages_per_shard, "pages_per_shard", minimum=1)
    dp = checked_int(dp_size, "dp_size", minimum=1)
    page = checked_int(page_id, "page_id", minimum=0, error=ForeignPageError)
    if page >= pps * dp:
        raise ForeignPageError(
            f"page_id {page} is outside the {dp} shards of {pps} pages (ids 0..{pps * dp - 1})"
        )
    if page == 0:
        return None
    return page // pps


def dp_shard_page_bounds(
    shard_index: int, pages_per_shard: int, dp_size: int | None = None
) -> tuple[int, int]:
    """Half-open range ``(low, high)`` of allocatable page ids owned by shard ``shard_index``.

    Shard 0 starts at 1 because page 0 is the null page. ``dp_size``, when given, also checks
    that the shard exists.
    """
    pps = checked_int(pages_per_shard, "pages_per_shard", minimum=1)
    upper = None
    if dp_size is not None:
        upper = checked_int(dp_size, "dp_size", minimum=1) - 1
    shard = checked_int(shard_index, "shard_index", minimum=0, maximum=upper)
    low = shard * pps
    return (1 if shard == 0 else low, low + pps)
