"""Checks written for mutants of impl/page_pool.py that the suite let through (mutation/triage.toml).

They pin what `PagePool`'s docstrings promise: rejected arguments are named, zero pages is a
valid request on every path, eSurge's `get_new_pages` honours the shard hint like
`get_new_page_ids`, the pool's free queue hands out views of the pool's pages, and a refused
prefix-cache reset says how many pages are held. Expected values come from the arguments.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import numpy as np
import pytest

from verikv.errors import DoubleFreeError, ForeignPageError, InvalidArgumentError, NullPageError
from verikv.free_queue import CachePage
from verikv.page_pool import PagePool


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("num_pages of the pool", lambda: PagePool(0), "num_pages"),
    ("num_pages to allocate", lambda: PagePool(8).get_new_page_ids(-1), "num_pages"),
    ("page_ids to count", lambda: PagePool(8).count_free_ids("ab"), "page_ids"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_what_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


def test_zero_pages_is_a_valid_request() -> None:
    pool = PagePool(8)
    assert pool.get_new_page_ids(0) == []
    assert pool.get_new_page_ids(np.int64(0)) == []  # type: ignore[arg-type]
    assert pool.get_new_pages(0) == []


def test_count_free_ids_takes_any_sequence() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)  # pages 1 and 2
    assert pool.count_free_ids((1, 2, 3)) == 1
    assert pool.count_free_ids([3, 4]) == 2
    assert held == [1, 2]


def test_get_new_pages_honours_the_shard_hint() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    pages = pool.get_new_pages(2, dp_shard_hint=1, data_parallel_size=2)
    assert all(isinstance(p, CachePage) for p in pages)
    assert [p.page_id for p in pages] == [4, 5]


def test_the_free_queue_hands_out_the_pools_pages() -> None:
    pool = PagePool(4)
    free = pool.free_page_queue.get_all_free_pages()
    assert [p.page_id for p in free] == [1, 2, 3]
    assert all(isinstance(p, CachePage) for p in free)


def test_a_refused_reset_logs_how_many_pages_are_held(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(2)
    with caplog.at_level(logging.WARNING):
        assert pool.reset_prefix_cache() is False
    assert any(re.search(r"(?<!\w)2 pages are still held(?!\w)", record.getMessage()) for record in caplog.records)


# --- survivors of the run on 2cf7d95: keys_of_ids, touch_ids, lookup_run_ids ----------------


def test_keys_of_ids_reads_each_pages_key() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(3)  # pages 1, 2, 3
    pool.cache_page_id(held[0], "a")
    pool.cache_page_id(held[2], "c")
    expected = ["a", None, "c"]
    assert pool.keys_of_ids(held) == expected
    assert pool.keys_of_ids(tuple(held)) == expected  # any sequence, not only a list
    assert pool.keys_of_ids([]) == []


def test_keys_of_ids_rejects_foreign_ids_and_names_a_bad_argument() -> None:
    pool = PagePool(8)
    with pytest.raises(ForeignPageError):
        pool.keys_of_ids([8])
    with pytest.raises(InvalidArgumentError, match=_named("page_ids")):
        pool.keys_of_ids("ab")  # type: ignore[arg-type]


def test_touch_ids_names_a_bad_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("page_ids")):
        PagePool(8).touch_ids("ab")  # type: ignore[arg-type]


def test_touch_ids_skips_a_null_id_and_touches_the_rest() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)  # pages 1 and 2
    pool.touch_ids((0, held[0], 0, held[1]))  # any sequence; null ids are skipped, not a stop
    assert [pool.ref_count(p) for p in held] == [2, 2]


def test_touching_a_free_cached_page_in_a_sharded_pool_takes_it_off_both_lists() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    pid = pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2)[0]
    pool.cache_page_id(pid, "k")
    pool.free_page_ids([pid])
    before = pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2)
    pool.touch_ids([pid])
    assert pool.ref_count(pid) == 1
    assert pid not in pool.free_list_ids()
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == before - 1
    assert pid not in pool.get_new_page_ids(3, dp_shard_hint=1, data_parallel_size=2)


def test_lookup_run_ids_names_a_bad_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        PagePool(8).lookup_run_ids("ab")


def test_lookup_run_ids_statistics_accumulate_one_query_per_key_looked_up() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)
    pool.cache_page_id(held[0], "a")
    pool.cache_page_id(held[1], "b")
    stats = pool.prefix_cache_stats
    assert pool.lookup_run_ids(["a", "b"]) == held  # a full run: 2 keys looked up, 2 hits
    assert pool.lookup_run_ids(iter(["a", "x", "b"])) == held[:1]  # stops at the miss: 2 looked up, 1 hit
    assert (stats.requests, stats.queries, stats.hits) == (4, 4, 3)


def test_lookup_run_ids_inside_a_shard_stops_at_a_key_held_only_outside_it() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    low = pool.get_new_page_ids(1, dp_shard_hint=0, data_parallel_size=2)[0]
    high = pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2)[0]
    pool.cache_page_id(high, "a")
    pool.cache_page_id(low, "b")
    stats = pool.prefix_cache_stats
    assert pool.lookup_run_ids(["a", "b"], dp_shard_hint=1, data_parallel_size=2) == [high]
    assert (stats.queries, stats.hits) == (2, 1)  # "b" was looked up and missed in shard 1
    assert pool.lookup_run_ids(["a", "b"], dp_shard_hint=0, data_parallel_size=2) == []
    assert pool.lookup_run_ids(["a", "b"]) == [high, low]  # no hint: the whole pool


# --- long frees (64 ids or more take a vectorized path): the same documented contract ---------

LONG = 80  # more ids than the vectorized path's threshold


def test_a_long_free_drops_one_reference_per_page_and_frees_those_reaching_zero_in_order() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    twice = held[::2]
    pool.touch_ids(twice)  # every other page held twice
    pool.free_page_ids(held[::-1])
    assert [pool.ref_count(p) for p in held] == [1 if p in twice else 0 for p in held]
    assert pool.free_list_ids()[-(LONG // 2):] == [p for p in held[::-1] if p not in twice]  # at the tail, in order


@pytest.mark.parametrize(("bad", "error"), [
    (0, NullPageError), (LONG + 1, ForeignPageError), (-1, InvalidArgumentError),
])
def test_a_long_free_with_one_bad_id_raises_and_changes_nothing(bad: int, error: type[Exception]) -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    free_before = pool.free_list_ids()
    with pytest.raises(error):
        pool.free_page_ids([*held[1:], bad])
    assert [pool.ref_count(p) for p in held] == [1] * LONG
    assert pool.free_list_ids() == free_before


def test_a_long_double_free_raises_and_changes_nothing() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    pool.free_page_ids(held[:1])
    with pytest.raises(DoubleFreeError):
        pool.free_page_ids(held)  # page held[0] is no longer held
    assert [pool.ref_count(p) for p in held] == [0] + [1] * (LONG - 1)


def test_a_long_free_under_unhashed_first_puts_keyless_pages_before_the_head() -> None:
    pool = PagePool(LONG + 1, free_order="unhashed-first")
    held = pool.get_new_page_ids(LONG)
    pool.cache_page_id(held[0], "a")
    pool.free_page_ids(held)
    assert pool.free_list_ids() == [*held[1:], held[0]]


def test_a_long_free_in_a_sharded_pool_returns_pages_to_their_shard() -> None:
    pool = PagePool(2 * LONG)  # two shards of LONG pages
    held = pool.get_new_page_ids(LONG - 1, dp_shard_hint=1, data_parallel_size=2)
    pool.free_page_ids(held)
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == LONG
    assert sorted(pool.get_new_page_ids(LONG, dp_shard_hint=1, data_parallel_size=2)) == list(range(LONG, 2 * LONG))


# --- the shard hint's arguments (written after the run on 476be5a) ----------------------------


@pytest.mark.parametrize(("hint", "size", "name"), [
    ("1", 2, "dp_shard_hint"), (1.5, 2, "dp_shard_hint"), (1, 0, "data_parallel_size"), (1, "2", "data_parallel_size"),
])
def test_a_bad_shard_hint_argument_is_named_and_changes_nothing(hint: object, size: object, name: str) -> None:
    pool = PagePool(8)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        pool.get_new_page_ids(1, dp_shard_hint=hint, data_parallel_size=size)  # type: ignore[arg-type]
    assert pool.get_num_free_pages() == 7


def test_a_numpy_shard_hint_is_taken_as_its_int() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    assert pool.get_new_page_ids(2, dp_shard_hint=np.int64(3), data_parallel_size=np.int64(2)) == [4, 5]  # type: ignore[arg-type]
