"""Checks written for mutants of impl/dp_sharding.py that the suite let through (tools/mutation/triage.toml).

The module's docstring promises a typed error for every invalid argument; these tests pin that
the error names the argument and shows the value, and that the smallest valid sizes (one page,
one shard) are accepted. Expected values are derived from the arguments, not from the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from verikv.dp_sharding import (
    checked_int,
    dp_shard_for_page_id,
    dp_shard_page_bounds,
    pages_per_dp_shard,
    usable_pages_count,
)
from verikv.errors import InvalidArgumentError


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
