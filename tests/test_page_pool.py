"""PagePool: eSurge behaviours, the deliberate departures, and errors that change nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, strategies as st
from pool_helpers import ShiftyKey, apply_ops

import verikv.free_queue as free_queue
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


# --- issue 12: hostile input on the pool (typed errors, nothing changed) -----------------------

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
    """Issue 12 item 7: a DP allocation or lookup that fails leaves the pool as it was."""
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
    """A key whose hash and equality change when ``flip`` is set (issue 12, defect 1)."""

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
