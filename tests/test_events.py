"""Prefix-cache statistics and KV events validate what they are given (issue 12)."""

from __future__ import annotations

import numpy as np
import pytest

from verikv.errors import InvalidArgumentError
from verikv.events import PageRemoved, PageStored, PrefixCacheStats, describe_key
from verikv.hashing import PageHash, PageHashWithGroupId


@pytest.mark.parametrize("fields", [dict(requests=-1), dict(queries="4"), dict(queries=1, hits=2),
                                    dict(reset=1), dict(hits=1.0)])
def test_stats_fields_are_checked(fields: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        PrefixCacheStats(**fields)


def test_record_checks_its_counts_and_changes_nothing_on_error() -> None:
    stats = PrefixCacheStats(requests=1, queries=4, hits=2)
    for queries, hits in (("4", 1), (1, 2), (-1, 0), (3, None)):
        with pytest.raises(InvalidArgumentError):
            stats.record(queries, hits)  # type: ignore[arg-type]
    assert (stats.requests, stats.queries, stats.hits) == (1, 4, 2)
    stats.record(np.int64(3), 1)  # type: ignore[arg-type]
    assert (stats.requests, stats.queries, stats.hits) == (2, 7, 3)


def test_events_check_and_normalise_their_fields() -> None:
    assert PageStored(1, np.int64(5), None, [1, 2]) == PageStored(1, 5, None, (1, 2))  # type: ignore[arg-type]
    for bad in (dict(page_id=0), dict(page_hash="x"), dict(page_hash=True), dict(group_id=-1)):
        with pytest.raises(InvalidArgumentError):
            PageRemoved(**{**dict(page_id=1, page_hash=5, group_id=None), **bad})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        PageStored(1, 5, None, "12")  # type: ignore[arg-type]


def test_describe_key_never_fails_on_odd_keys() -> None:
    key = PageHashWithGroupId(PageHash(9, (1, 2), None), 3)
    assert describe_key(key) == (9, 3, (1, 2))
    assert describe_key(True) == (1, None, ())
    assert describe_key("k") == (hash("k"), None, ())

    class LooksLikeAKey:
        page_hash = "p"
        group_id = "not an int"

        def get_hash_value(self) -> int:
            return 0

    odd = LooksLikeAKey()
    assert describe_key(odd) == (hash(odd), None, ())
