"""Data-parallel page-range arithmetic: eSurge's results on valid input, typed errors otherwise."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, strategies as st

from verikv.dp_sharding import (
    checked_int,
    dp_shard_for_page_id,
    dp_shard_page_bounds,
    pages_per_dp_shard,
    usable_pages_count,
)
from verikv.errors import ForeignPageError, InvalidArgumentError


def test_pages_per_dp_shard_requires_num_pages_divisible() -> None:
    assert pages_per_dp_shard(8780, 4) == 2195
    assert pages_per_dp_shard(8781, 4) is None


@pytest.mark.parametrize("dp", [None, 1])
def test_pages_per_dp_shard_is_none_without_data_parallelism(dp: int | None) -> None:
    assert pages_per_dp_shard(8780, dp) is None


def test_numpy_integers_are_accepted() -> None:
    assert pages_per_dp_shard(np.int64(12), np.int32(4)) == 3  # type: ignore[arg-type]
    assert usable_pages_count(np.uint16(9)) == 8  # type: ignore[arg-type]
    assert dp_shard_for_page_id(np.int64(5), 3, 3) == 1  # type: ignore[arg-type]


def test_dp_shard_mapping_uses_floor_division() -> None:
    mapping = {page: dp_shard_for_page_id(page, 3, 3) for page in range(9)}
    assert mapping == {0: None, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 2, 7: 2, 8: 2}


def test_dp_shard_bounds_shard0_skips_null_page() -> None:
    assert dp_shard_page_bounds(0, 4) == (1, 4)
    assert dp_shard_page_bounds(1, 4) == (4, 8)
    assert dp_shard_page_bounds(3, 4, dp_size=4) == (12, 16)


def test_usable_pages_count_excludes_null_page() -> None:
    assert usable_pages_count(1) == 0
    assert usable_pages_count(57) == 56


@given(pps=st.integers(1, 50), dp=st.integers(2, 8))
def test_shards_partition_the_allocatable_ids(pps: int, dp: int) -> None:
    """Every id 1..N-1 is in exactly one shard's bounds, and that shard is the one it maps to."""
    num_pages = pps * dp
    assert pages_per_dp_shard(num_pages, dp) == pps
    seen: list[int] = []
    for shard in range(dp):
        low, high = dp_shard_page_bounds(shard, pps, dp_size=dp)
        for page in range(low, high):
            assert dp_shard_for_page_id(page, pps, dp) == shard
        seen.extend(range(low, high))
    assert seen == list(range(1, num_pages))
    assert sum(h - lo for lo, h in (dp_shard_page_bounds(s, pps) for s in range(dp))) == usable_pages_count(
        num_pages
    )


# (ill-typed arguments are the point here: their lines carry `type: ignore[arg-type]`)
BAD_CALLS = [
    ("usable_zero_pages", lambda: usable_pages_count(0), InvalidArgumentError),
    ("usable_negative_pages", lambda: usable_pages_count(-3), InvalidArgumentError),
    ("usable_bool_pages", lambda: usable_pages_count(True), InvalidArgumentError),
    ("usable_float_pages", lambda: usable_pages_count(8.0), InvalidArgumentError),  # type: ignore[arg-type]
    ("pps_zero_pages", lambda: pages_per_dp_shard(0, 4), InvalidArgumentError),
    ("pps_zero_dp", lambda: pages_per_dp_shard(8, 0), InvalidArgumentError),
    ("pps_negative_dp", lambda: pages_per_dp_shard(8, -2), InvalidArgumentError),
    ("pps_float_dp", lambda: pages_per_dp_shard(8, 2.0), InvalidArgumentError),  # type: ignore[arg-type]
    ("pps_bool_dp", lambda: pages_per_dp_shard(8, True), InvalidArgumentError),
    ("pps_numpy_bool_dp", lambda: pages_per_dp_shard(8, np.True_), InvalidArgumentError),  # type: ignore[arg-type]
    ("pps_string_pages", lambda: pages_per_dp_shard("8", 2), InvalidArgumentError),  # type: ignore[arg-type]
    ("shard_negative_page", lambda: dp_shard_for_page_id(-1, 3, 3), ForeignPageError),
    ("shard_page_beyond_partition", lambda: dp_shard_for_page_id(9, 3, 3), ForeignPageError),
    ("shard_zero_pps", lambda: dp_shard_for_page_id(1, 0, 3), InvalidArgumentError),
    ("shard_zero_dp", lambda: dp_shard_for_page_id(1, 3, 0), InvalidArgumentError),
    ("bounds_negative_shard", lambda: dp_shard_page_bounds(-1, 4), InvalidArgumentError),
    ("bounds_shard_beyond_dp", lambda: dp_shard_page_bounds(4, 4, dp_size=4), InvalidArgumentError),
    ("bounds_zero_pps", lambda: dp_shard_page_bounds(0, 0), InvalidArgumentError),
    ("bounds_float_shard", lambda: dp_shard_page_bounds(1.0, 4), InvalidArgumentError),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("call, error", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_input_dp_sharding(call, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_checked_int_reports_name_and_bounds() -> None:
    with pytest.raises(InvalidArgumentError, match="num_pages must be >= 1, got 0"):
        checked_int(0, "num_pages", minimum=1)
    with pytest.raises(InvalidArgumentError, match="row must be <= 3, got 4"):
        checked_int(4, "row", maximum=3)
    assert checked_int(np.int8(-2), "x") == -2


def test_error_messages_survive_hostile_values() -> None:
    """A deeply nested list or a raising __repr__ still yields the typed error."""
    from verikv.dp_sharding import checked_int

    value: list = [1]
    for _ in range(5000):
        value = [value]

    class BadRepr:
        def __repr__(self) -> str:
            raise RuntimeError("repr exploded")

    for bad in (value, BadRepr()):
        with pytest.raises(InvalidArgumentError):
            checked_int(bad, "n")


# ---- Checks written for mutants of impl/dp_sharding.py that the suite let through (tools/mutation/triage.toml)
#
# The module's docstring promises a typed error for every invalid argument; these tests pin that
# the error names the argument and shows the value, and that the smallest valid sizes (one page,
# one shard) are accepted. Expected values are derived from the arguments, not from the code.


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased argument name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("usable_pages_count", lambda: usable_pages_count(0), "num_pages"),
    ("pages_per_dp_shard num_pages", lambda: pages_per_dp_shard(0, 2), "num_pages"),
    ("pages_per_dp_shard dp", lambda: pages_per_dp_shard(8, 0), "data_parallel_size"),
    ("shard_for_page pages_per_shard", lambda: dp_shard_for_page_id(1, 0, 2), "pages_per_shard"),
    ("shard_for_page dp_size", lambda: dp_shard_for_page_id(1, 4, 0), "dp_size"),
    ("shard_for_page page_id", lambda: dp_shard_for_page_id(-1, 4, 2), "page_id"),
    ("page_bounds pages_per_shard", lambda: dp_shard_page_bounds(0, 0, 2), "pages_per_shard"),
    ("page_bounds dp_size", lambda: dp_shard_page_bounds(0, 4, 0), "dp_size"),
    ("page_bounds shard_index", lambda: dp_shard_page_bounds(-1, 4, 2), "shard_index"),
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_what_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


def test_a_non_integer_is_reported_with_its_type_and_value() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("size")) as caught:
        checked_int(1.5, "size")
    assert "float" in str(caught.value)
    assert "1.5" in str(caught.value)


def test_a_page_beyond_the_shards_reports_the_valid_ids() -> None:
    # 2 shards of 4 pages: ids 0..7
    with pytest.raises(InvalidArgumentError, match=re.escape("0..7")):
        dp_shard_for_page_id(8, 4, 2)


def test_the_smallest_valid_sizes_are_accepted() -> None:
    assert pages_per_dp_shard(1, 1) is None  # one page, one shard: no partition
    assert dp_shard_for_page_id(3, 4, 1) == 0
    assert dp_shard_page_bounds(0, 4, 1) == (1, 4)
