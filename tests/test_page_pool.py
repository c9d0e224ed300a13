"""PagePool: eSurge behaviours, the deliberate departures, and errors that change nothing."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Hashable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, strategies as st
from pool_helpers import ShiftyKey, apply_ops

import verikv.free_queue as free_queue
from verikv import page_pool
from verikv.errors import (
    CorruptedStateError,
    DoubleFreeError,
    ForeignPageError,
    InvalidArgumentError,
    NullPageError,
    OutOfPagesError,
    PageStateError,
)
from verikv.events import AllPagesCleared, EventLog, PageRemoved, PageStored, wire_hash
from verikv.free_queue import CachePage
from verikv.hashing import PageHash, PageHasher, PageHashWithGroupId, PageKey, group_pool_key
from verikv.page_pool import PagePool
from verikv.spec.abstraction import abstract_pool

K: list[Any] = [PageHash(i, (i,), None) for i in range(4)]  # eSurge-shaped keys: events read their tokens


def key(i: int, group: int = 0) -> PageHashWithGroupId:
    return PageHashWithGroupId(K[i], group)


def test_fresh_pool() -> None:
    pool = PagePool(5)
    assert pool.free_list_ids() == [1, 2, 3, 4]
    assert pool.null_page.is_null and pool.null_page.page_id == 0
    assert pool.get_num_free_pages() == 4 and pool.get_usage() == 0.0
    assert pool.free_page_queue.num_free_pages == 4
    assert PagePool(1).get_usage() == 0.0 and PagePool(1).get_num_free_pages() == 0


@pytest.mark.parametrize("bad", [0, -3, True, 2.0, "8", None])
def test_num_pages_must_be_a_positive_integer(bad) -> None:
    with pytest.raises(InvalidArgumentError):
        PagePool(bad)


def test_numpy_integer_page_count_is_accepted() -> None:
    assert PagePool(np.int64(4)).num_pages == 4  # type: ignore[arg-type]  # numpy integers are accepted at run time


def test_constructor_options_are_validated() -> None:
    with pytest.raises(InvalidArgumentError):
        PagePool(4, free_order="lifo")
    with pytest.raises(InvalidArgumentError):
        PagePool(4, enable_caching=1)  # type: ignore[arg-type]


def test_issue_example_reverse_free_order() -> None:
    pool = PagePool(8)
    held = pool.get_new_pages(4)
    assert [p.page_id for p in held] == [1, 2, 3, 4]
    assert pool.free_list_ids() == [5, 6, 7]
    pool.free_pages(reversed(held))
    assert pool.free_list_ids() == [5, 6, 7, 4, 3, 2, 1]


def test_allocation_sets_ref_and_over_allocation_changes_nothing() -> None:
    pool = PagePool(4)
    pages = pool.get_new_pages(2)
    assert [p.ref_cnt for p in pages] == [1, 1]
    before = abstract_pool(pool)
    with pytest.raises(OutOfPagesError) as info:
        pool.get_new_pages(2)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidArgumentError):
        pool.get_new_page_ids(-1)
    assert abstract_pool(pool) == before
    assert pool.get_usage() == pytest.approx(2 / 3)


def test_double_free_and_null_free_raise_and_change_nothing() -> None:
    pool = PagePool(6)
    a, b = pool.get_new_page_ids(2)
    pool.free_page_ids([a])
    before = abstract_pool(pool)
    for bad, error in [([b, a], DoubleFreeError), ([b, 0], NullPageError), ([b, 6], ForeignPageError),
                       ([b, b], DoubleFreeError), ([b, "1"], InvalidArgumentError)]:
        with pytest.raises(error):
            pool.free_page_ids(bad)  # type: ignore[arg-type]
        assert abstract_pool(pool) == before
    with pytest.raises(NullPageError):
        pool.free_pages([pool.null_page])
    assert abstract_pool(pool) == before


def test_a_page_held_twice_can_be_freed_twice_in_one_call() -> None:
    pool = PagePool(4)
    (p,) = pool.get_new_page_ids(1)
    pool.touch_ids([p])
    pool.free_page_ids([p, p])
    assert pool.ref_count(p) == 0 and pool.free_list_ids()[-1] == p


def test_touch_revives_a_free_cached_page_and_skips_null_placeholders() -> None:
    pool = PagePool(6)
    ids = pool.get_new_page_ids(3)
    pool.cache_page_id(ids[1], key(0))
    pool.free_page_ids(ids[::-1])
    assert pool.free_list_ids() == [4, 5, 3, 2, 1]
    hit = pool.get_cached_page(K[0], [0])
    assert hit is not None and hit[0].page_id == 2
    pool.touch((hit, [pool.null_page]))
    assert pool.free_list_ids() == [4, 5, 3, 1]
    assert pool.ref_count(2) == 1 and pool.ref_count(0) == 0 and pool.key_of(2) == key(0)
    with pytest.raises(ForeignPageError):
        pool.touch_ids([2, 6])
    assert pool.ref_count(2) == 1


def test_lazy_eviction_when_a_cached_page_is_reused() -> None:
    pool = PagePool(3, enable_kv_events=True)
    a, b = pool.get_new_page_ids(2)
    pool.cache_page_id(a, key(1))
    pool.free_page_ids([a, b])
    assert pool.lookup_id(key(1)) == a  # still hit-able while free
    assert pool.get_new_page_ids(1) == [a]
    assert pool.key_of(a) is None and pool.lookup_id(key(1)) is None and pool.cached_items() == []
    events = pool.take_events()
    one = wire_hash(1)
    assert events == [PageStored((one,), None, (1,), 1, 0, extra_keys=(None,), page_ids=(a,)),
                      PageRemoved((one,), 0, page_ids=(a,))]
    assert pool.take_events() == []


def test_lookup_returns_the_oldest_of_equal_pages() -> None:
    pool = PagePool(6)
    ids = pool.get_new_page_ids(3)
    for pid in (ids[2], ids[0], ids[1]):
        pool.cache_page_id(pid, key(2))
    assert pool.lookup_id(key(2)) == ids[2]
    assert pool.cached_items() == [(key(2), (ids[2], ids[0], ids[1]))]
    pool.free_page_ids([ids[2]])
    pool.get_new_page_ids(3)  # reuses 4, 5 and then ids[2]
    assert pool.lookup_id(key(2)) == ids[0]


def test_get_cached_page_needs_every_group() -> None:
    pool = PagePool(6)
    a, b = pool.get_new_page_ids(2)
    pool.cache_page_id(a, key(0, group=0))
    assert pool.get_cached_page(K[0], [0, 1]) is None
    pool.cache_page_id(b, key(0, group=1))
    hit = pool.get_cached_page(K[0], [0, 1])
    assert hit is not None and [p.page_id for p in hit] == [a, b]


def test_cache_page_errors_change_nothing() -> None:
    pool = PagePool(4)
    (a,) = pool.get_new_page_ids(1)
    pool.cache_page_id(a, key(0))
    before = abstract_pool(pool)
    for call, error in [(lambda: pool.cache_page_id(0, key(1)), NullPageError),
                        (lambda: pool.cache_page_id(a, key(1)), PageStateError),
                        (lambda: pool.cache_page_id(9, key(1)), ForeignPageError),
                        (lambda: pool.cache_page_id(2, None), InvalidArgumentError),
                        (lambda: pool.cache_page_id(2, [1]), InvalidArgumentError)]:  # type: ignore[arg-type]
        with pytest.raises(error):
            call()
        assert abstract_pool(pool) == before
    with pytest.raises(InvalidArgumentError):
        PagePool(4, enable_caching=False).cache_page_id(1, key(0))


def test_unhashed_first_reuses_pages_without_keys_first() -> None:
    pool = PagePool(8, free_order="unhashed-first")
    ids = pool.get_new_page_ids(4)
    pool.cache_page_id(2, key(0))
    pool.free_page_ids(ids[::-1])
    assert pool.free_list_ids() == [4, 3, 1, 5, 6, 7, 2]


def test_reset_prefix_cache_only_when_nothing_is_held() -> None:
    pool = PagePool(4, enable_kv_events=True)
    a, b = pool.get_new_page_ids(2)
    pool.cache_page_id(a, key(0))
    pool.free_page_ids([a])
    before = abstract_pool(pool)
    assert pool.reset_prefix_cache() is False
    assert abstract_pool(pool) == before
    pool.free_page_ids([b])
    order = pool.free_list_ids()
    assert pool.reset_prefix_cache() is True
    assert pool.key_of(a) is None and pool.cached_items() == [] and pool.free_list_ids() == order
    assert pool.take_events()[-1] == AllPagesCleared()
    assert pool.make_prefix_cache_stats().reset is True


def test_prefix_cache_stats_count_lookups_and_reset_when_taken() -> None:
    pool = PagePool(4)
    (a,) = pool.get_new_page_ids(1)
    pool.cache_page_id(a, key(0))
    pool.lookup_id(key(0))
    pool.lookup_id(key(1))
    pool.get_cached_page(K[0], [0])
    stats = pool.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (3, 3, 2)
    assert stats.hit_rate == pytest.approx(2 / 3)
    assert pool.make_prefix_cache_stats().queries == 0 and pool.prefix_cache_stats.hit_rate == 0.0


def test_events_are_off_by_default() -> None:
    pool = PagePool(4)
    (a,) = pool.get_new_page_ids(1)
    pool.cache_page_id(a, key(0))
    assert pool.take_events() == []


def test_cache_full_pages_computes_missing_keys_and_skips_null_placeholders() -> None:
    hasher = PageHasher(seed=1)
    pool = PagePool(8)
    req = SimpleNamespace(all_token_ids=list(range(12)))
    pages = pool.get_new_pages(3)
    page_hashes = hasher.hash_request(req, 4, stop=1)
    pool.cache_full_pages(req, pages, page_hashes, 0, 2, 4, 0, hasher=hasher)
    assert page_hashes == hasher.hash_request(req, 4, stop=2)
    assert [pool.key_of(p.page_id) for p in pages] == [group_pool_key(h, 0) for h in page_hashes] + [None]
    with_null = [pool.null_page, pages[1], pages[2]]
    pool.cache_full_pages(req, with_null, page_hashes, 2, 3, 4, 0, hasher=hasher)
    assert len(page_hashes) == 3 and pool.key_of(pages[2].page_id) == page_hashes[2]  # group 0: the key itself
    assert pool.key_of(0) is None


def test_cache_full_pages_errors_change_nothing() -> None:
    pool = PagePool(8)
    req = SimpleNamespace(all_token_ids=list(range(6)))
    pages = pool.get_new_pages(2)
    page_hashes: list[PageKey] = []
    before = abstract_pool(pool)
    with pytest.raises(InvalidArgumentError):  # only one full page of tokens
        pool.cache_full_pages(req, pages, page_hashes, 0, 2, 4, 0)
    with pytest.raises(InvalidArgumentError):
        pool.cache_full_pages(req, pages, page_hashes, 1, 2, 4, 0)  # hashes shorter than num_cached
    with pytest.raises(ForeignPageError):
        pool.cache_full_pages(req, PagePool(8).get_new_pages(1), page_hashes, 0, 1, 4, 0)
    pool.cache_page_id(pages[1].page_id, key(3))
    before = abstract_pool(pool)
    with pytest.raises(PageStateError):
        pool.cache_full_pages(req, pages, page_hashes, 0, 2, 4, 0)
    assert page_hashes == [] and abstract_pool(pool) == before


def test_views_are_cached_and_checked() -> None:
    pool = PagePool(4)
    assert pool.page(2) is pool.page(2)
    with pytest.raises(ForeignPageError):
        pool.page(4)
    with pytest.raises(PageStateError):
        pool.page(2).ref_cnt = 5
    with pytest.raises(ForeignPageError):
        pool.free_pages([PagePool(4).page(1)])


def test_dp_shard_allocation_takes_the_shards_earliest_free_pages() -> None:
    pool = PagePool(8)
    pool.free_page_ids(pool.get_new_page_ids(7)[::-1])  # list order 7..1
    dp = {"data_parallel_size": 2}
    assert pool.get_new_page_ids(2, dp_shard_hint=1, **dp) == [7, 6]
    assert pool.get_new_page_ids(2, dp_shard_hint=2, **dp) == [3, 2]  # hint % dp = shard 0
    assert pool.free_list_ids() == [5, 4, 1]
    pool.free_page_ids([6, 2])
    assert pool.get_new_page_ids(3, dp_shard_hint=1, **dp) == [5, 4, 6]
    assert pool.free_list_ids() == [1, 2]


def test_dp_shards_follow_the_global_order_and_reject_another_dp() -> None:
    pool = PagePool(8)
    dp = {"data_parallel_size": 2}
    a = pool.get_new_page_ids(3, dp_shard_hint=1, **dp)
    assert a == [4, 5, 6]
    before = abstract_pool(pool)
    with pytest.raises(OutOfPagesError):
        pool.get_new_page_ids(2, dp_shard_hint=1, **dp)  # shard 1 has only page 7 left
    with pytest.raises(InvalidArgumentError):
        pool.get_new_page_ids(1, dp_shard_hint=0, data_parallel_size=4)
    assert abstract_pool(pool) == before
    pool.free_page_ids([6, 4])
    pool.get_new_page_ids(2)  # global head: 1, 2 (shard 0)
    assert pool.get_new_page_ids(3, dp_shard_hint=1, **dp) == [7, 6, 4]
    assert pool.get_new_page_ids(1, dp_shard_hint=0, **dp) == [3]


def test_dp_hint_inactive_without_a_valid_partition() -> None:
    pool = PagePool(9)
    assert pool.get_new_page_ids(2, dp_shard_hint=1, data_parallel_size=2) == [1, 2]  # 9 % 2 != 0
    assert pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=1) == [3]
    assert pool.get_new_page_ids(1, dp_shard_hint=1) == [4]


def test_dp_shard_lookup_stays_inside_the_shard() -> None:
    pool = PagePool(8)
    a, b = pool.get_new_page_ids(1)[0], pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2)[0]
    pool.cache_page_id(a, key(0))
    pool.cache_page_id(b, key(0))
    assert pool.lookup_id(key(0)) == a
    assert pool.lookup_id(key(0), dp_shard_hint=1, data_parallel_size=2) == b
    hit = pool.get_cached_page(K[0], [0], dp_shard_hint=0, data_parallel_size=2)
    assert hit is not None and hit[0].page_id == a


def test_million_page_pool_is_usable() -> None:
    pool = PagePool(1_000_000)
    assert pool.get_num_free_pages() == 999_999
    assert pool.get_new_page_ids(3) == [1, 2, 3]
    pool.free_page_ids([3, 2, 1])
    assert pool.get_new_page_ids(1, dp_shard_hint=3, data_parallel_size=4) == [750_000]


def test_lookup_run_ids_is_lookup_id_up_to_the_first_miss() -> None:
    pool = PagePool(8)
    ids = pool.get_new_page_ids(4)
    pool.cache_page_id(ids[0], key(0))
    pool.cache_page_id(ids[1], key(1))
    pool.cache_page_id(ids[2], key(1))
    pool.cache_page_id(ids[3], key(3))
    pool.make_prefix_cache_stats()
    assert pool.lookup_run_ids([key(0), key(1), key(2), key(3)]) == [ids[0], ids[1]]
    stats = pool.make_prefix_cache_stats()
    assert (stats.queries, stats.hits) == (3, 2)
    assert pool.lookup_run_ids(iter([key(1), key(0)])) == [ids[1], ids[0]]
    assert pool.lookup_run_ids([]) == []
    dp = {"dp_shard_hint": 1, "data_parallel_size": 2}
    assert pool.lookup_run_ids([key(3)], **dp) == [ids[3]]
    assert pool.lookup_run_ids([key(0)], **dp) == []  # page 1 lies in shard 0
    # any sequence of keys: (page key, group id) pairs, as the group managers compose them
    pairs = [(k.page_hash, k.group_id) for k in (key(0), key(1), key(2), key(3))]
    pool.make_prefix_cache_stats()
    assert pool.lookup_run_ids(pairs) == [ids[0], ids[1]]
    stats = pool.make_prefix_cache_stats()
    assert (stats.queries, stats.hits) == (3, 2)
    assert pool.lookup_run_ids([(p, 1) for p, _ in pairs]) == []
    assert pool.lookup_run_ids(pairs[3:], **dp) == [ids[3]]
    with pytest.raises(InvalidArgumentError):
        pool.lookup_run_ids([[1]])  # type: ignore[list-item]  # unhashable


def test_lookup_run_ids_consumes_a_lazy_run_up_to_its_miss_and_counts_it() -> None:
    pool = PagePool(8)
    ids = pool.get_new_page_ids(2)
    pool.cache_page_id(ids[0], key(0))
    pool.cache_page_id(ids[1], key(1))
    pool.make_prefix_cache_stats()
    consumed: list[object] = []
    run = (consumed.append(k) or k for k in [key(0), key(1), key(2), key(3)])  # type: ignore[func-returns-value]
    assert pool.lookup_run_ids(run) == ids
    assert consumed == [key(0), key(1), key(2)]  # stopped at the miss: key(3) never read
    stats = pool.make_prefix_cache_stats()
    assert (stats.queries, stats.hits) == (3, 2)
    assert pool.lookup_run_ids(iter([key(0), key(1)])) == ids  # ended with the keys: no miss counted
    stats = pool.make_prefix_cache_stats()
    assert (stats.queries, stats.hits) == (2, 2)


def _cache_one_by_one(pool: PagePool, ids: list[int], keys: Sequence[object]) -> None:
    for pid, k in zip(ids, keys):
        pool.cache_page_id(pid, k)  # type: ignore[arg-type]


@pytest.mark.parametrize("events", [False, True])
@pytest.mark.parametrize("case", ["distinct", "equal in batch", "equal cached", "empty"])
def test_cache_page_ids_equals_the_calls_it_stands_for(case: str, events: bool) -> None:
    batch, single = (PagePool(10, enable_kv_events=events) for _ in range(2))
    for pool in (batch, single):
        pool.get_new_page_ids(8)
        if case == "equal cached":
            pool.cache_page_id(8, key(3))
    ids, keys = {"distinct": ([1, 2, 3], [key(0), key(1), key(2)]),
                 "equal in batch": ([1, 2, 3], [key(0), key(1), key(0)]),
                 "equal cached": ([2, 1], [key(3), key(0)]),
                 "empty": ([], [])}[case]
    version = batch.key_version
    batch.cache_page_ids(ids, keys)
    _cache_one_by_one(single, ids, keys)
    assert abstract_pool(batch) == abstract_pool(single)
    assert batch.cached_items() == single.cached_items()
    assert [type(e) for e in batch.take_events()] == [type(e) for e in single.take_events()]
    assert (batch.key_version > version) == bool(ids)


@pytest.mark.parametrize(("ids", "keys", "error"), [
    ([1, 2], [key(0)], InvalidArgumentError),  # lengths differ
    ([1, 0], [key(0), key(1)], NullPageError),
    ([1, 9], [key(0), key(1)], ForeignPageError),
    ([1, 4], [key(0), key(1)], PageStateError),  # page 4 has a key already
    ([1, 1], [key(0), key(1)], PageStateError),  # a page twice
    ([1, 2], [key(0), None], InvalidArgumentError),
    ([1, 2], [key(0), [1]], InvalidArgumentError),  # unhashable
    ([1, 2], [key(0), float("nan")], InvalidArgumentError),  # not equal to itself
    ([1, 2.0], [key(0), key(1)], InvalidArgumentError),
    ("ab", [key(0), key(1)], InvalidArgumentError),
    ([1, 2], None, InvalidArgumentError),
])
def test_a_failing_cache_page_ids_registers_nothing(ids: Any, keys: Any, error: type[Exception]) -> None:
    pool = PagePool(9)
    pool.get_new_page_ids(5)
    pool.cache_page_id(4, key(3))
    before = _full_state(pool)
    with pytest.raises(error):
        pool.cache_page_ids(ids, keys)
    assert _full_state(pool) == before


def test_cache_page_ids_raises_what_the_first_failing_call_would() -> None:
    pool = PagePool(9)
    pool.get_new_page_ids(5)
    with pytest.raises(ForeignPageError):  # pair 0 fails first, though pair 1 has a None key
        pool.cache_page_ids([9, 1], [key(0), None])
    with pytest.raises(InvalidArgumentError):
        pool.cache_page_ids([1, 9], [None, key(0)])
    disabled = PagePool(4, enable_caching=False)
    disabled.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError):
        disabled.cache_page_ids([1, 2], [key(0), key(1)])


def test_count_free_ids_and_shard_free_counts() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(3)
    assert pool.count_free_ids([0, *held, 4, 5, 5]) == 3  # null never counts; duplicates do
    with pytest.raises(ForeignPageError):
        pool.count_free_ids([1, 8])
    with pytest.raises(InvalidArgumentError):
        pool.count_free_ids([1, "2"])  # type: ignore[list-item]
    dp = {"dp_shard_hint": 0, "data_parallel_size": 2}
    assert pool.get_num_free_pages(**dp) == 0  # shard 0 = pages 1..3, all held
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == 4
    assert pool.get_num_free_pages() == 4
    pool.free_page_ids(held[:1])
    assert pool.get_num_free_pages(**dp) == 1


def test_key_version_moves_exactly_when_the_cached_map_changes() -> None:
    pool = PagePool(4)
    ids = pool.get_new_page_ids(2)
    seen = [pool.key_version]
    pool.cache_page_id(ids[0], key(0))  # registered
    seen.append(pool.key_version)
    pool.free_page_ids(ids)
    pool.touch_ids([ids[0]])
    pool.lookup_run_ids([key(0)])
    pool.free_page_ids([ids[0]])  # refs and free list only: the lookup result cannot change
    seen.append(pool.key_version)
    pool.get_new_page_ids(3)  # reuses the cached page: its key is evicted
    seen.append(pool.key_version)
    pool.free_page_ids([1, 2, 3])
    assert pool.reset_prefix_cache()
    seen.append(pool.key_version)
    assert seen[0] < seen[1] == seen[2] < seen[3] < seen[4]


# --- hostile input on the pool (typed errors, nothing changed) -----------------------

def _deep(depth: int = 5000) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


def _full_state(pool: PagePool) -> tuple:
    return (abstract_pool(pool), pool.free_list_ids(), pool._shards is None, pool._dp, pool.key_version,
            dataclasses.astuple(pool.prefix_cache_stats))


@pytest.mark.parametrize("bad", [5, None, 2.5, _deep()])
def test_page_id_arguments_that_are_not_lists_are_typed_errors(bad: object) -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(3)
    before = _full_state(pool)
    for call in (pool.touch_ids, pool.free_page_ids, pool.count_free_ids, pool.touch, pool.free_pages):
        with pytest.raises(InvalidArgumentError):
            call(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        pool.get_cached_page(PageHash(1, (1,), None), bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        pool.lookup_run_ids(bad)  # type: ignore[arg-type]
    assert _full_state(pool) == before


def test_pool_size_is_bounded_and_free_order_checked() -> None:
    with pytest.raises(InvalidArgumentError):
        PagePool(2**31)
    with pytest.raises(InvalidArgumentError):
        PagePool(8, free_order=np.array([1, 2]))  # type: ignore[arg-type]


def test_failed_dp_calls_build_no_shard_lists() -> None:
    """A DP allocation or lookup that fails leaves the pool as it was."""
    pool = PagePool(16)
    before = _full_state(pool)
    with pytest.raises(OutOfPagesError):  # enough pages in the pool, not in shard 0 (7 usable)
        pool.get_new_page_ids(8, dp_shard_hint=0, data_parallel_size=2)
    with pytest.raises(OutOfPagesError):
        pool.get_new_page_ids(99, dp_shard_hint=0, data_parallel_size=2)
    with pytest.raises(InvalidArgumentError):
        pool.lookup_id(["unhashable"], dp_shard_hint=0, data_parallel_size=2)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        pool.get_new_page_ids(1, dp_shard_hint="0")  # type: ignore[arg-type]  # a hint is checked even without a DP size
    assert _full_state(pool) == before
    assert pool.get_new_page_ids(7, dp_shard_hint=0, data_parallel_size=2) == list(range(1, 8))
    assert pool._shards is not None


def test_keys_not_equal_to_themselves_are_refused() -> None:
    pool = PagePool(8, enable_kv_events=True)
    pid = pool.get_new_page_ids(1)[0]
    before = _full_state(pool)
    with pytest.raises(InvalidArgumentError):
        pool.cache_page_id(pid, float("nan"))
    assert _full_state(pool) == before and pool.take_events() == []


def test_bool_and_int_subclass_keys_are_described_as_plain_ints() -> None:
    """An event never fails after the pool changed: a bool key is reported by its hash."""
    pool = PagePool(8, enable_kv_events=True)
    a, b = pool.get_new_page_ids(2)
    pool.cache_page_id(a, True)
    pool.cache_page_id(b, 7)
    assert pool.take_events() == [PageStored((wire_hash(1),), page_ids=(a,)),
                                  PageStored((wire_hash(7),), page_ids=(b,))]


class _HashFlip(str):
    """A key whose hash and equality change when ``flip`` is set."""

    flip = 0

    def __hash__(self) -> int:
        return hash((str(self), self.flip))

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) is True and getattr(other, "flip", self.flip) == self.flip


@pytest.mark.parametrize("equal_pages", [1, 2])
def test_a_key_that_changes_its_hash_loses_no_page_on_eviction(equal_pages: int) -> None:
    """Pages cached under a key whose hash changes are still evicted cleanly when reused."""
    from verikv.spec.invariants import violated_pool_invariants

    pool = PagePool(6)
    key = _HashFlip("k")
    flipping = pool.get_new_page_ids(equal_pages)
    for pid in flipping:
        pool.cache_page_id(pid, key)
    stable = pool.get_new_page_ids(1)[0]
    pool.cache_page_id(stable, "other")
    pool.free_page_ids(flipping + [stable])
    key.flip = 1
    assert len(pool.get_new_page_ids(5)) == 5  # every usable page, the flipped ones included
    assert pool.get_num_free_pages() == 0
    assert pool.cached_items() == []
    assert all(pool.key_of(p) is None for p in range(6))
    assert violated_pool_invariants(abstract_pool(pool)) == []


@pytest.mark.parametrize("bad", [
    dict(pages=5), dict(page_hashes=None), dict(page_hashes=(1,)), dict(page_hashes=[1, 2]),
    dict(hasher=False), dict(hasher=np.array([1, 2])), dict(request=None), dict(page_size="4"),
])
def test_cache_full_pages_rejects_bad_arguments_before_any_change(bad: dict) -> None:
    pool = PagePool(8, enable_kv_events=True)
    hashes: list[PageHash] = []
    args: dict[str, Any] = dict(request=SimpleNamespace(all_token_ids=list(range(9))), pages=pool.get_new_pages(2),
                page_hashes=hashes, num_cached_pages=0, num_full_pages=2, page_size=4, kv_cache_group_id=0,
                hasher=PageHasher("sha256", seed=0))
    before = _full_state(pool)
    with pytest.raises(InvalidArgumentError):
        pool.cache_full_pages(**{**args, **bad})
    assert _full_state(pool) == before and hashes == [] and pool.take_events() == []
    pool.cache_full_pages(**args)  # the same call with valid arguments caches both pages
    assert len(hashes) == 2 and all(pool.key_of(p.page_id) is not None for p in args["pages"])


def test_shared_entry_count_follows_equal_pages_through_cache_evict_and_reset() -> None:
    # lookup_run_ids resolves entries only while some key is held by several pages: the count of
    # such entries must follow every promotion (a second equal page), demotion and reset
    pool = PagePool(10)
    ids = pool.get_new_page_ids(6)  # pages 1-6; 7, 8, 9 stay free

    def shared() -> int:
        return sum(isinstance(entry, dict) for entry in pool._cached.values())

    for pid in ids[:3]:
        pool.cache_page_id(pid, b"same")
    pool.cache_page_id(ids[3], b"other")
    pool.cache_page_id(ids[4], b"other")
    assert pool._num_shared == shared() == 2
    assert pool.lookup_run_ids([b"same", b"other"]) == [ids[0], ids[3]]  # the oldest of each
    pool.free_page_ids([ids[3], ids[0]])
    pool.get_new_page_ids(3)  # pages 7, 8, 9: nothing evicted yet
    assert pool._num_shared == shared() == 2
    pool.get_new_page_ids(2)  # evicts ids[3] ("other" keeps one page) and ids[0] ("same" keeps two)
    assert pool._num_shared == shared() == 1
    assert pool.lookup_run_ids([b"same", b"other"]) == [ids[1], ids[4]]
    pool.free_page_ids([p for p in range(1, 10) if pool.ref_count(p)])
    assert pool.reset_prefix_cache() and pool._num_shared == shared() == 0

# --- the batched paths equal the per-page ones: frees (`_free_shaped`, its links per page and by
# NumPy scatters around `_BULK_LINK`), and the inline eviction of `get_new_page_ids` (events off)
# against `_evict` per page (events on), including its fallback cases ----------------------------

PoolState = tuple[object, ...]
Op = tuple[str, list[int]]
NEVER = 10**9


def _general_path_only(pool: PagePool, ids: list[int]) -> bool:
    """Patched over `PagePool._free_shaped`: every free takes the general path (`_release`)."""
    return False


def _state(pool: PagePool) -> PoolState:
    """Everything a pool holds, compared whole: lists, counts, keys, the cached map (entries and
    their order), ``key_version``, the count of shared entries and the raw links."""
    links = pool.free_page_queue.links
    pages = range(pool.num_pages)
    return (pool.free_list_ids(), [pool.ref_count(p) for p in pages], [pool.key_of(p) for p in pages],
            pool.cached_items(), pool.key_version, pool._num_shared, links.next.tolist(), links.prev.tolist())


def _run(ops: Sequence[Op], *, events: bool) -> tuple[PoolState, list[object]]:
    """Run ``ops`` ("get" [n], "touch" ids, "free" ids, "free held" [n, *extra], "cache" [id,
    key]) on a 24-page pool; its state and each call's result or error (type and message)."""
    pool = PagePool(24, enable_kv_events=events)
    results = apply_ops(pool, ops)
    return _state(pool), results


_ids = st.lists(st.integers(0, 23), max_size=12)
_few_ids = st.lists(st.integers(1, 6), min_size=2, max_size=8)  # repeats and shared pages, often
_op = st.one_of(
    st.tuples(st.just("get"), st.lists(st.integers(0, 10), min_size=1, max_size=1)),
    st.tuples(st.just("touch"), _ids),
    st.tuples(st.just("touch"), _few_ids),
    st.tuples(st.just("free"), _ids),
    st.tuples(st.just("free"), _few_ids),
    # a request's free (own pages, then shared ones), sometimes spoiled by a repeat or a bad id
    st.tuples(st.just("free held"), st.tuples(st.integers(0, 23), st.lists(st.integers(-1, 24), max_size=2))
              .map(lambda t: [t[0], *t[1]])),
    # keys 0..3 only: pages of equal content share an entry (a dict), which eviction must handle
    st.tuples(st.just("cache"), st.tuples(st.integers(0, 23), st.integers(0, 3)).map(list)),
)


@given(st.lists(_op, max_size=30), st.sampled_from([1, 3, NEVER]))
def test_batched_frees_and_inline_evictions_equal_the_per_page_paths(ops: list[Op], link_from: int) -> None:
    """The pool under test tries every free on the request-shaped path and links lists of
    ``link_from`` pages or more by NumPy, events off (inline eviction); the reference frees per
    page, links page by page and evicts with `_evict` per page (events on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PagePool, "_free_shaped", _general_path_only)
        mp.setattr(free_queue, "_BULK_LINK", NEVER)
        reference = _run(ops, events=True)
        mp.undo()
        mp.setattr(free_queue, "_BULK_LINK", link_from)
        assert _run(ops, events=False) == reference


# --- which frees take the batched path ---------------------------------------------------------


def _recorded(pool: PagePool, name: str, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record what each call of ``pool``'s method ``name`` (such as `_free_shaped`)
    returns (True: that path did the work)."""
    seen: list[bool] = []
    method = getattr(pool, name)

    def recorded(*args: object) -> bool:
        seen.append(method(*args))
        return seen[-1]

    monkeypatch.setattr(pool, name, recorded)
    return seen


def _held_pool(length: int, num_shared: int) -> tuple[PagePool, list[int]]:
    """A pool holding ``length`` pages, the first ``num_shared`` of them twice (a prefix hit
    shared with another request), and their ids."""
    pool = PagePool(300)
    held = pool.get_new_page_ids(length)
    pool.touch_ids(held[:num_shared])
    return pool, held


@pytest.mark.parametrize(("length", "num_shared"), [
    (100, 30),
    (100, 0),  # every page held once
    (100, 100),  # every page shared: nothing reaches 0
    (3, 1),  # short lists too
])
def test_a_request_shaped_free_takes_the_batched_path(length: int, num_shared: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pool, held = _held_pool(length, num_shared)
    scalar, _ = _held_pool(length, num_shared)
    order = held[::-1]  # a request's free lists its last page first: its shared prefix last
    seen = _recorded(pool, "_free_shaped", monkeypatch)
    pool.free_page_ids(order)
    assert seen == [True]
    monkeypatch.setattr(PagePool, "_free_shaped", _general_path_only)
    scalar.free_page_ids(order)
    assert _state(pool) == _state(scalar)
    assert [pool.ref_count(p) for p in held] == [1] * num_shared + [0] * (length - num_shared)
    assert pool.free_list_ids()[len(pool.free_list_ids()) - (length - num_shared):] == order[:length - num_shared]


@pytest.mark.parametrize("shape", ["shared first", "repeated shared page", "repeated own page",
                                   "own page after shared", "null page", "free page"])
def test_a_free_of_another_shape_takes_the_scalar_path(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pool, held = _held_pool(100, 30)
    scalar, _ = _held_pool(100, 30)
    ids = {"shared first": held, "repeated shared page": [*held[::-1], held[0]],
           "repeated own page": [held[50], *held[::-1]], "own page after shared": [*held[::-1], held[50]],
           "null page": [*held[::-1], 0], "free page": [*held[::-1], 200]}[shape]
    seen = _recorded(pool, "_free_shaped", monkeypatch)
    outcomes: list[tuple[str, str] | None] = []
    for target in (pool, scalar):
        try:
            target.free_page_ids(ids)
            outcomes.append(None)
        except Exception as exc:  # compared between the two paths, whatever it is
            outcomes.append((type(exc).__name__, str(exc)))
        monkeypatch.setattr(PagePool, "_free_shaped", _general_path_only)
    assert seen == [False]
    fails = shape in ("repeated own page", "own page after shared", "null page", "free page")
    assert outcomes[0] == outcomes[1] and (outcomes[0] is not None) == fails
    assert _state(pool) == _state(scalar)


@pytest.mark.parametrize(("last", "error"), [
    ("a string", InvalidArgumentError), (10**6, ForeignPageError), (-10**30, ForeignPageError),
    (-1, ForeignPageError), (2**40, ForeignPageError)])
def test_a_free_ending_with_a_bad_id_takes_the_scalar_path_and_its_error(
        last: object, error: type[Exception], monkeypatch: pytest.MonkeyPatch) -> None:
    pool, held = _held_pool(80, 10)
    before = _state(pool)
    seen = _recorded(pool, "_free_shaped", monkeypatch)
    with pytest.raises(error):
        pool.free_page_ids([*held, last])  # type: ignore[list-item]
    assert seen == [False]
    assert _state(pool) == before


# --- inline eviction: the fallback cases ------------------------------------------------------------


def _evicting_pool(events: bool, case: str) -> tuple[PagePool, list[Hashable]]:
    """A pool whose free list holds, in order, pages 1..4 cached and page 5 without a key.
    Pages 1 and 3 have ordinary keys (their entry is their own id); pages 2 and 4 make the
    fallback ``case``: "equal" (both under one key: a dict entry), "hash changed" (page 2's
    key no longer hashes as when stored), "equals another" (page 2's key now equals page 4's,
    whose entry is page 4)."""
    pool = PagePool(6, enable_kv_events=events)
    pool.get_new_page_ids(5)
    second, fourth = (("same", "same") if case == "equal" else (ShiftyKey(20), ShiftyKey(40)))
    # (the ordinary keys hash alike in every process: a str key's randomized hash could put it on
    # the probe path of the changed key, which the dict then finds by identity, inline)
    keys: list[Hashable] = [ShiftyKey(1), second, ShiftyKey(3), fourth]
    for pid, key in zip(range(1, 5), keys):
        pool.cache_page_id(pid, key)
    pool.free_page_ids([1, 2, 3, 4, 5])
    if isinstance(second, ShiftyKey):
        second.value = 21 if case == "hash changed" else 40
    return pool, keys


@pytest.mark.parametrize(("case", "fallbacks"), [
    ("equal", [2]), ("hash changed", [2]), ("equals another", [2])])  # (then page 4's entry is its own id)
def test_inline_eviction_equals_per_page_eviction_in_every_fallback_case(
        case: str, fallbacks: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    quiet, _ = _evicting_pool(False, case)
    loud, keys = _evicting_pool(True, case)
    calls: list[int] = []
    evict = PagePool._evict

    def counted(self: PagePool, pid: int, entry: int | dict[int, None] | None) -> None:
        calls.append(pid)
        evict(self, pid, entry)

    monkeypatch.setattr(PagePool, "_evict", counted)
    removed: list[tuple[int, object]] = []
    monkeypatch.setattr(EventLog, "removed", lambda _log, pid, key: removed.append((pid, key)))
    version = quiet.key_version
    assert quiet.get_new_page_ids(5) == [1, 2, 3, 4, 5]
    assert calls == fallbacks  # events off: only the pages whose entry is not their own id
    assert loud.get_new_page_ids(5) == [1, 2, 3, 4, 5]
    assert calls[len(fallbacks):] == [1, 2, 3, 4]  # events on: every page, in order
    assert removed == list(zip(range(1, 5), keys))
    assert _state(quiet) == _state(loud)
    assert quiet.key_version == version + 4  # one bump per evicted page
    assert quiet.cached_items() == []
    assert [quiet.ref_count(p) for p in range(1, 6)] == [1] * 5


def test_inline_eviction_of_one_of_equal_pages_keeps_the_others() -> None:
    pool = PagePool(6)
    pool.get_new_page_ids(3)
    for pid in (1, 2, 3):
        pool.cache_page_id(pid, "same")
    pool.free_page_ids([1, 2, 3])  # the free list: 4, 5, 1, 2, 3
    assert pool.get_new_page_ids(3) == [4, 5, 1]
    assert pool.cached_items() == [("same", (2, 3))]
    assert pool.get_new_page_ids(1) == [2]
    assert pool.cached_items() == [("same", (3,))]
    assert pool.lookup_id("same") == 3


def test_a_missing_entry_raises_after_the_evictions_before_it_as_per_page_eviction_does() -> None:
    pools = [PagePool(6, enable_kv_events=events) for events in (False, True)]
    outcomes = []
    for pool in pools:
        pool.get_new_page_ids(5)
        for pid in range(1, 6):
            pool.cache_page_id(pid, f"k{pid}")
        pool.free_page_ids([1, 2, 3, 4, 5])
        del pool._cached["k3"]  # corrupted: page 3's key is not in the cached map
        with pytest.raises(CorruptedStateError):
            pool.get_new_page_ids(5)
        outcomes.append((pool.key_version, [pool.key_of(p) for p in range(6)], [pool.ref_count(p) for p in range(6)]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == [None, None, None, "k3", "k4", "k5"]


# --- the reads that bound the ids: `count_free_ids` and the batch of `cache_page_ids` check the
# upper bound of their ids by the IndexError of their ``ref``/``key`` reads (no ``max`` pass), and
# the batch checks the null page in its ``min`` pass; every bad id still gets its error and
# changes nothing ------------------------------------------------------------------------------

#: ids of an 11-page pool, with ids past it (11, 12, 2**40), negative ones, and non-ints
_any_ids = st.lists(st.one_of(st.integers(-3, 12), st.sampled_from([2**40, -2**40, True, 2.0, "1"])), max_size=10)


def _count_free_by_hand(pool: PagePool, ids: list[Any]) -> int | type[Exception]:
    """What `count_free_ids` documents, computed without it: `InvalidArgumentError` for a
    non-int, else `ForeignPageError` for an id out of range, else the free non-null ids."""
    if any(type(pid) is not int for pid in ids):
        return InvalidArgumentError
    if any(not 0 <= pid < pool.num_pages for pid in ids):
        return ForeignPageError
    return sum(1 for pid in ids if pid != 0 and pool.ref_count(pid) == 0)


@given(_any_ids)
def test_count_free_ids_equals_its_definition_for_any_ids(ids: list[Any]) -> None:
    pool = PagePool(11)
    held = pool.get_new_page_ids(6)
    pool.free_page_ids(held[::2])  # pages 1, 3, 5 free again, 2, 4, 6 held
    before = _full_state(pool)
    expected = _count_free_by_hand(pool, ids)
    if isinstance(expected, int):
        assert pool.count_free_ids(ids) == expected
    else:
        with pytest.raises(expected):
            pool.count_free_ids(ids)
    assert _full_state(pool) == before


@pytest.mark.parametrize("last", [11, 12, 2**40])
def test_count_free_ids_of_an_id_past_the_pool_is_a_foreign_page(last: int) -> None:
    pool = PagePool(11)
    with pytest.raises(ForeignPageError, match=f"page id {last} is not a page of this pool"):
        pool.count_free_ids([1, 2, last, 3])


_cache_ids = st.lists(st.one_of(st.integers(-2, 12), st.sampled_from([2**40, True])), max_size=6)
_cache_keys = st.lists(st.one_of(st.integers(0, 3).map(key), st.sampled_from([None, float("nan")])), max_size=6)


def _caching_pool(events: bool) -> PagePool:
    """An 11-page pool holding pages 1..9; page 9 is cached under key(3), page 10 is free."""
    pool = PagePool(11, enable_kv_events=events)
    pool.get_new_page_ids(9)
    pool.cache_page_id(9, key(3))
    pool.take_events()
    return pool


@given(_cache_ids, _cache_keys, st.booleans())
def test_cache_page_ids_is_all_or_nothing_of_the_calls_it_stands_for(ids: list[Any], keys: list[Any],
                                                                     events: bool) -> None:
    """A batch either does what its `cache_page_id` calls do, or raises the error of the first
    failing call (same type and message) and changes nothing."""
    batch, single = _caching_pool(events), _caching_pool(events)
    ids, keys = ids[:len(keys)], keys[:len(ids)]
    before = _full_state(batch)
    try:
        _cache_one_by_one(single, ids, keys)
    except (InvalidArgumentError, ForeignPageError, NullPageError, PageStateError) as error:
        with pytest.raises(type(error)) as raised:
            batch.cache_page_ids(ids, keys)
        assert str(raised.value) == str(error)
        assert _full_state(batch) == before
        assert batch.take_events() == []
    else:
        batch.cache_page_ids(ids, keys)
        assert abstract_pool(batch) == abstract_pool(single)
        assert batch.cached_items() == single.cached_items()
        assert batch.take_events() == single.take_events()


@pytest.mark.parametrize(("ids", "error"), [
    ([1, 2], None),  # the common case: the batch path
    ([1, 11], ForeignPageError),  # past the pool: the key read's IndexError
    ([1, 2**40], ForeignPageError),
    ([1, -1], ForeignPageError),  # negative: the min pass (a key read would wrap around)
    ([1, 0], NullPageError),  # the null page: the same min pass
    ([True, 2], InvalidArgumentError),  # a bool is no page id
    ([2, 2], PageStateError),  # a page twice
    ([1, 9], PageStateError),  # a page with a key
])
def test_which_cache_batches_take_the_batch_path(ids: list[int], error: type[Exception] | None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _caching_pool(False)
    before = _full_state(pool)
    checked: list[list[int]] = []
    check = PagePool._check_cache_pairs

    def recorded(self: PagePool, ids: list[int], keys: list[Hashable]) -> None:
        checked.append(ids)
        check(self, ids, keys)

    monkeypatch.setattr(PagePool, "_check_cache_pairs", recorded)
    if error is None:
        pool.cache_page_ids(ids, [key(0), key(1)])
        assert checked == [] and pool.lookup_run_ids([key(0), key(1)]) == ids
        return
    with pytest.raises(error):
        pool.cache_page_ids(ids, [key(0), key(1)])
    assert checked == [ids]  # rejected by the batch's checks, reported by the pair-by-pair one
    assert _full_state(pool) == before


class _RaisingKey:
    """A key whose ``__hash__`` or ``__eq__`` raises an arbitrary exception."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __hash__(self) -> int:
        if self.where == "hash":
            raise RuntimeError("hash exploded")
        return hash(b"k")  # collides with the cached key b"k": the dict then calls __eq__

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq exploded")


@pytest.mark.parametrize("where", ["hash", "eq"])
@pytest.mark.parametrize("lookup", ["lookup_id", "lookup_run_ids", "lookup_all_ids"])
def test_a_lookup_whose_key_raises_is_a_typed_error_and_counts_nothing(where: str, lookup: str) -> None:
    pool = PagePool(4)
    (page,) = pool.get_new_page_ids(1)
    pool.cache_page_id(page, b"k")
    before = abstract_pool(pool), pool.prefix_cache_stats.queries, pool.prefix_cache_stats.hits
    bad = _RaisingKey(where)
    call = getattr(pool, lookup)
    with pytest.raises(InvalidArgumentError, match="cannot be looked up: RuntimeError"):
        call(bad) if lookup == "lookup_id" else call([b"k", bad])
    assert (abstract_pool(pool), pool.prefix_cache_stats.queries, pool.prefix_cache_stats.hits) == before


# ---- Checks written for mutants of impl/page_pool.py that the suite let through (tools/mutation/triage.toml)
#
# They pin what `PagePool`'s docstrings promise: rejected arguments are named, zero pages is a
# valid request on every path, eSurge's `get_new_pages` honours the shard hint like
# `get_new_page_ids`, the pool's free queue hands out views of the pool's pages, and a refused
# prefix-cache reset says how many pages are held. Expected values come from the arguments.


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


# --- argument names and shapes of every id-level call --------------------------


@pytest.mark.parametrize(("call", "name"), [
    (lambda p: p.cache_page_ids("ab", [b"k"]), "page_ids"),
    (lambda p: p.cache_page_ids([1], "ab"), "keys"),
    (lambda p: p.free_page_ids("ab"), "page_ids"),
    (lambda p: p.check_cacheable("ab"), "page_ids"),
    (lambda p: p.free_pages(5), "pages"),
    (lambda p: p.touch(5), "pages"),
    (lambda p: p.touch([[p.page(1)], 5]), "pages of a group"),
    (lambda p: p.lookup_all_ids("ab"), "keys"),
    (lambda p: p.get_new_page_ids(1, data_parallel_size="x"), "data_parallel_size"),
    (lambda p: p.get_new_page_ids(1, data_parallel_size=0), "data_parallel_size"),
    (lambda p: p.lookup_run_ids([b"k"], data_parallel_size=-1), "data_parallel_size"),
    (lambda p: p.lookup_run_ids([b"k"], dp_shard_hint="x"), "dp_shard_hint"),
    (lambda p: p.lookup_run_ids([b"k"], data_parallel_size="x"), "data_parallel_size"),
    (lambda p: p.lookup_run_ids([b"k"], dp_shard_hint="x", data_parallel_size=2), "dp_shard_hint"),
    (lambda p: p.get_new_page_ids("2"), "num_pages"),
], ids=["cache ids", "cache keys", "free", "check_cacheable", "free_pages", "touch", "touch group", "lookup_all",
        "allocate dp without hint", "allocate dp 0 without hint", "run dp -1 without hint",
        "run hint without dp", "run dp without hint", "run bad hint", "num_pages str"])
def test_every_rejected_argument_is_named_and_nothing_changes(call: Callable[[PagePool], object], name: str) -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call(pool)
    assert pool.get_num_free_pages() == 5 and pool.ref_count(held[0]) == 1


@pytest.mark.parametrize("call", [
    lambda p: p.lookup_run_ids(5), lambda p: p.free_page_ids(5), lambda p: p.cache_page_ids(5, [b"k"]),
    lambda p: p.cache_page_ids([1], 5),
], ids=["run keys", "free", "cache ids", "cache keys"])
def test_a_rejected_container_is_shown_by_its_type(call: Callable[[PagePool], object]) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("int")):
        call(PagePool(8))


def test_id_level_calls_take_any_iterable_of_ids() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(4)
    pool.cache_page_ids(iter([1, 2]), iter([b"a", b"b"]))  # type: ignore[arg-type]
    pool.cache_page_ids((3,), (b"c",))
    assert pool.keys_of_ids([1, 2, 3, 4]) == [b"a", b"b", b"c", None]
    pool.free_page_ids((4, 3))
    pool.free_page_ids(iter([2]))
    assert pool.free_list_ids() == [5, 6, 7, 4, 3, 2]
    pool.free_page_ids([])  # an empty free is a no-op
    assert pool.ref_count(1) == 1 and pool.get_num_free_pages() == 6


def test_the_page_count_bound_is_max_page_id_plus_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids run 0..MAX_PAGE_ID, so a pool has at most MAX_PAGE_ID + 1 pages (checked with a small
    bound: the real one is 2**29 pages)."""
    monkeypatch.setattr(page_pool, "MAX_PAGE_ID", 7)
    assert PagePool(8).num_pages == 8
    with pytest.raises(InvalidArgumentError, match=_named("num_pages")):
        PagePool(9)


def test_cache_page_id_refuses_a_non_int_id_and_the_id_past_the_last() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(7)
    with pytest.raises(InvalidArgumentError):
        pool.cache_page_id(np.int64(1), b"k")  # type: ignore[arg-type]
    with pytest.raises(ForeignPageError):
        pool.cache_page_id(8, b"k")
    assert pool.keys_of_ids(list(range(8))) == [None] * 8


def test_a_page_cached_twice_in_one_batch_is_refused_showing_its_first_key() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(2)
    with pytest.raises(PageStateError, match="first-key"):
        pool.cache_page_ids([1, 1], [b"first-key", b"second-key"])
    assert pool.cached_items() == []


def test_the_first_bad_page_of_a_free_is_the_one_reported() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)  # 1, 2: each held once
    pool.free_page_ids([2])
    with pytest.raises(DoubleFreeError, match=r"page 2\b"):
        pool.free_page_ids([1, 2])  # page 1 is held; page 2 is not
    with pytest.raises(ForeignPageError, match=r"\b99\b"):
        pool.keys_of_ids([0, 99])  # 0 is an id of the pool; 99 is not
    assert pool.ref_count(held[0]) == 1


def test_a_long_free_of_pages_held_twice_drops_one_reference_each() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    pool.touch_ids(held)
    pool.free_page_ids(list(held))
    assert [pool.ref_count(p) for p in held] == [1] * LONG
    assert pool.get_num_free_pages() == 0


def test_a_long_free_with_a_non_int_id_is_refused() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    with pytest.raises(InvalidArgumentError):
        pool.free_page_ids([*held[:-1], "x"])  # type: ignore[list-item]
    assert pool.get_num_free_pages() == 0


# --- equal pages, evictions and keys whose hash changed -----------------------------------------


def _equal_keys(count: int) -> list[bytes]:
    """``count`` equal keys that are distinct objects."""
    return [b"".join([b"sa", b"me"]) for _ in range(count)]


def test_evicting_one_of_equal_pages_keeps_the_others(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(6)
    pool.get_new_page_ids(5)
    for pid, key in zip((1, 2, 3), _equal_keys(3)):
        pool.cache_page_id(pid, key)
    pool.free_page_ids([2, 1, 3, 4, 5])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [2]  # evicts page 2's key
    assert caplog.records == []  # an ordinary eviction: no key changed
    assert pool.cached_items() == [(b"same", (1, 3))]
    assert pool.get_new_page_ids(1) == [1]
    assert pool.cached_items() == [(b"same", (3,))]
    assert pool.lookup_id(b"same") == 3


def test_an_ordinary_eviction_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(4)
    pool.get_new_page_ids(3)
    pool.cache_page_id(1, b"one")
    pool.free_page_ids([1, 2, 3])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [1]
    assert caplog.records == []
    assert pool.key_of(1) is None and pool.cached_items() == []


def test_a_key_changed_to_equal_another_is_evicted_and_the_other_entry_kept(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(4)
    pool.get_new_page_ids(3)
    changed, other = ShiftyKey(1), ShiftyKey(2)
    pool.cache_page_id(1, changed)
    pool.cache_page_id(2, other)
    changed.value = 2  # now equal to `other`, and hashed like it
    pool.free_page_ids([1, 2, 3])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [1]
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "ShiftyKey(2)" in caplog.records[0].getMessage()
    assert pool.key_of(1) is None
    assert pool.cached_items() == [(ShiftyKey(2), (2,))]
    assert pool.cached_items()[0][0] is other  # the entry is kept under its own key object
    assert pool.get_new_page_ids(2) == [2, 3]
    assert pool.get_num_free_pages() == 0


def test_a_key_whose_hash_changed_is_evicted_beside_equal_pages(caplog: pytest.LogCaptureFixture) -> None:
    """The equal keys are tuples of ints, whose hash is the same in every process (that of
    bytes changes with PYTHONHASHSEED): a dict finds a key by identity when the probe of its new
    hash reaches its old slot, and then nothing shows that the key changed. With these hashes
    the probe misses it, in every process."""
    pool = PagePool(5)
    pool.get_new_page_ids(4)
    for pid in (2, 3):
        pool.cache_page_id(pid, tuple([7, 7]))  # equal keys, distinct objects
    changed = ShiftyKey(10)
    pool.cache_page_id(1, changed)
    changed.value = 11
    pool.free_page_ids([1, 2, 3, 4])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [1]
    assert pool.cached_items() == [((7, 7), (2, 3))]
    assert len(caplog.records) == 1
    assert "ShiftyKey(11)" in caplog.records[0].getMessage()  # the key, as it is now


# --- shards: lookups, front links, repeated allocations ------------------------------------------


def test_lookups_inside_a_shard_see_only_its_pages() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 0..3 and 4..7
    pool.get_new_page_ids(7)
    for pid, key in zip((4, 5), _equal_keys(2)):  # equal pages, both in shard 1
        pool.cache_page_id(pid, key)
    pool.cache_page_id(6, b"six")
    for shard, expected in ((0, None), (1, 4)):
        assert pool.lookup_id(b"same", dp_shard_hint=shard, data_parallel_size=2) == expected
    assert pool.lookup_all_ids([b"six"], dp_shard_hint=0, data_parallel_size=2) is None
    assert pool.lookup_all_ids([b"six", b"same"], dp_shard_hint=1, data_parallel_size=2) == [6, 4]
    assert pool.lookup_all_ids([b"six"], dp_shard_hint=2, data_parallel_size=2) is None  # hint 2 is shard 0


def test_equal_pages_at_a_shards_upper_bound_are_outside_it() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(7)
    for pid, key in zip((4, 5), _equal_keys(2)):
        pool.cache_page_id(pid, key)
    assert pool.lookup_run_ids([b"same"], dp_shard_hint=0, data_parallel_size=2) == []


def test_each_lookup_counts_one_query_and_a_hit_only_when_it_hits() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(1)
    pool.cache_page_id(1, b"k")
    for call, hit in ((lambda: pool.lookup_id(b"k"), True), (lambda: pool.lookup_id(b"miss"), False),
                      (lambda: pool.lookup_all_ids([b"miss"]), False), (lambda: pool.lookup_all_ids([b"k"]), True),
                      (lambda: pool.lookup_all_ids([b"k", b"miss"]), False)):
        pool.make_prefix_cache_stats()
        call()
        stats = pool.make_prefix_cache_stats()
        assert (stats.queries, stats.hits) == (1, int(hit))


def test_every_registration_changes_the_key_version() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(6)
    seen = [pool.key_version]
    for batch in ([1, 2], [3, 4], [5], [6]):
        pool.cache_page_ids(batch, [bytes([p]) for p in batch])
        assert pool.key_version not in seen
        seen.append(pool.key_version)


def test_a_bad_key_is_reported_before_a_bad_page() -> None:
    with pytest.raises(InvalidArgumentError) as excinfo:
        PagePool(8).cache_page_id(0, [1])  # type: ignore[arg-type]  # the null page, an unhashable key
    assert excinfo.type is InvalidArgumentError


def test_unhashed_first_frees_put_keyless_pages_before_their_shards_head() -> None:
    pool = PagePool(8, free_order="unhashed-first")  # shards: 1..3 and 4..7
    held = pool.get_new_page_ids(3, dp_shard_hint=1, data_parallel_size=2)
    assert held == [4, 5, 6]
    pool.cache_page_id(4, b"four")
    pool.free_page_ids([4, 5, 6])  # 5 and 6 have no key: before the head; 4 to the tail
    assert pool.free_list_ids() == [5, 6, 1, 2, 3, 7, 4]
    assert pool.get_new_page_ids(4, dp_shard_hint=1, data_parallel_size=2) == [5, 6, 7, 4]
    assert pool.get_num_free_pages(dp_shard_hint=0, data_parallel_size=2) == 3


def test_repeated_shard_allocations_keep_the_shard_counts() -> None:
    pool = PagePool(8)
    assert pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2) == [4]
    assert pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2) == [5]
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == 2
    assert pool.get_new_page_ids(2, dp_shard_hint=1, data_parallel_size=2) == [6, 7]


# --- eSurge's touch of page views; the spec's view of a pool -----------------------------------


def test_touch_takes_a_flat_list_of_pages_or_one_list_per_group() -> None:
    pool = PagePool(8)
    pages = pool.get_new_pages(2)
    pool.touch(pages)
    pool.touch([pages[:1], pages[1:]])
    pool.touch([])
    assert [pool.ref_count(p.page_id) for p in pages] == [3, 3]


def test_abstract_pool_is_the_spec_state_of_this_pool() -> None:
    pool = PagePool(4)
    pool.get_new_page_ids(1)
    state = page_pool.abstract_pool(pool)
    assert (state.num_pages, state.ref, state.free) == (4, (0, 1, 0, 0), (2, 3))


def test_a_batch_of_new_keys_moves_the_key_version_once() -> None:
    """cache_page_ids' documented common case: every id a keyless page, every key new and
    distinct, ``key_version`` bumped once, as one cache_page_id call bumps it."""
    pool = PagePool(8)
    pool.get_new_page_ids(4)
    before = pool.key_version
    pool.cache_page_id(1, b"one")
    single = pool.key_version - before
    before = pool.key_version
    pool.cache_page_ids([2, 3, 4], [b"two", b"three", b"four"])
    assert single > 0 and pool.key_version - before == single
    assert pool.keys_of_ids([1, 2, 3, 4]) == [b"one", b"two", b"three", b"four"]


# --- found by the run on ecbc580 ------------------------------------------------------------------


def test_a_key_changed_to_equal_a_key_of_equal_pages_is_evicted_and_that_entry_kept() -> None:
    pool = PagePool(5)
    pool.get_new_page_ids(4)
    changed, first, second = ShiftyKey(1), ShiftyKey(2), ShiftyKey(2)
    pool.cache_page_id(1, changed)
    pool.cache_page_id(2, first)
    pool.cache_page_id(3, second)  # equal to `first`: pages 2 and 3 are equal pages
    changed.value = 2  # now equal to them
    pool.free_page_ids([1, 2, 3, 4])
    assert pool.get_new_page_ids(1) == [1]
    assert pool.key_of(1) is None
    assert pool.cached_items() == [(ShiftyKey(2), (2, 3))]
    assert pool.cached_items()[0][0] is first  # kept under its own key object


def test_a_long_free_of_pages_held_once_puts_them_at_the_tail_in_order() -> None:
    pool = PagePool(LONG + 2)
    held = pool.get_new_page_ids(LONG)  # one page stays free: the freed ones go after it
    before = pool.free_list_ids()
    pool.free_page_ids(held[::-1])
    assert pool.free_list_ids() == [*before, *held[::-1]]
    assert pool.get_num_free_pages() == LONG + 1
    assert pool.get_new_page_ids(LONG + 1) == [*before, *held[::-1]]


def test_a_long_free_listing_a_page_as_often_as_it_is_held_frees_it() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    pool.touch_ids(held[:1])  # page held[0] is held twice, and listed twice below
    pool.free_page_ids([*held, held[0]])
    assert [pool.ref_count(p) for p in held] == [0] * LONG
    assert pool.free_list_ids() == [*held[1:], held[0]]  # each joins the tail when it reaches 0


# --- touch_ids of a long list (the bulk path of febc211) -------------------------------------------


def test_a_long_touch_skips_the_null_page() -> None:
    pool = PagePool(600)
    ids = pool.get_new_page_ids(299)  # all held: only the null page could leave the free list
    free = pool.get_num_free_pages()
    pool.touch_ids([0, *ids])  # null ids are skipped
    assert pool.ref_count(0) == 0
    assert pool.get_num_free_pages() == free
    assert [pool.ref_count(p) for p in ids] == [2] * len(ids)


def test_a_long_touch_takes_the_pages_out_of_their_dp_shard() -> None:
    pool = PagePool(1201)  # 2 shards of 600 pages
    dp = {"dp_shard_hint": 0, "data_parallel_size": 2}
    ids = pool.get_new_page_ids(300, **dp)
    pool.free_page_ids(ids)  # free again: one run of the free list
    free = pool.get_num_free_pages(**dp)
    pool.touch_ids(ids)  # each leaves the free list, and so its shard
    assert pool.get_num_free_pages(**dp) == free - 300
    assert pool.get_num_free_pages() == 1200 - 300


@pytest.mark.parametrize("bad", [-1, -2])
def test_a_negative_id_is_foreign_even_where_it_would_index_a_held_page(bad: int) -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(7)  # pages 1..7, each held once: ref[-1] is page 7's count
    with pytest.raises(ForeignPageError, match=str(bad)):
        pool.free_page_ids([*held[:3], bad])
    assert [pool.ref_count(p) for p in range(8)] == [0] + [1] * 7
    assert pool.get_num_free_pages() == 0


@pytest.mark.parametrize("part", ["own", "shared"])
@pytest.mark.parametrize("at", [0, 7, 14])
def test_a_shaped_free_with_an_id_past_the_pool_inside_a_part_changes_nothing(part: str, at: int) -> None:
    """A free shaped as a request's (20 pages held once, then 15 held twice) with an id past the
    pool inside one part: each loop of the shaped free stops there and locates where it stopped,
    so exactly its own stores are undone; the general path then names the id."""
    pool = PagePool(64)
    held = pool.get_new_page_ids(35)
    pool.touch_ids(held[:15])
    own, shared = held[:14:-1], held[14::-1]
    ids = [*own[:at], 64, *own[at:], *shared] if part == "own" else [*own, *shared[:at], 64, *shared[at:]]
    before = (pool.free_list_ids(), [pool.ref_count(p) for p in range(64)])
    with pytest.raises(ForeignPageError, match=r"\b64\b"):
        pool.free_page_ids(ids)
    assert (pool.free_list_ids(), [pool.ref_count(p) for p in range(64)]) == before
