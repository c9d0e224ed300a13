"""Single-type managers on a real pool: hit rules, window drops, allocation, caching, freeing.

Numbers marked "eSurge" are the worked examples of reference/esurge-core.md §1.4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import (
    CacheSpecError,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    InvalidArgumentError,
    MambaSpec,
    PagePool,
    PageStateError,
    Request,
    SlidingWindowSpec,
)
from verikv.hashing import PageHasher, PageHashWithGroupId, group_pool_key
from verikv.single_type_managers import (
    ChunkedLocalAttentionManager,
    FullAttentionManager,
    MambaManager,
    SlidingWindowManager,
    get_manager_for_kv_cache_spec,
)

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
HASHER = PageHasher("sha256", seed=7)


def full(ps: int = 4) -> FullAttentionSpec:
    return FullAttentionSpec(page_size=ps, **KW)


def sliding(ps: int, window: int) -> SlidingWindowSpec:
    return SlidingWindowSpec(page_size=ps, sliding_window=window, **KW)


def chunked(ps: int, chunk: int) -> ChunkedLocalAttentionSpec:
    return ChunkedLocalAttentionSpec(page_size=ps, attention_chunk_size=chunk, **KW)


def keys_of(tokens: list[int], ps: int = 4) -> list:
    return HASHER.hash_request(Request("k", tokens), ps)


def cache_positions(pool: PagePool, keys: list, positions: list[int], gid: int = 0, stride: int = 1) -> list[int]:
    """Put one fresh page per position in the cache (then free it, so it is evictable)."""
    ids = pool.get_new_page_ids(len(positions))
    for page, j in zip(ids, positions):
        pool.cache_page_id(page, group_pool_key(keys[(j + 1) * stride - 1], gid))
    pool.free_page_ids(ids)
    return ids


def test_dispatch_on_exact_spec_type():
    pool = PagePool(8)
    assert type(get_manager_for_kv_cache_spec(full(), pool, 0)) is FullAttentionManager
    assert type(get_manager_for_kv_cache_spec(sliding(4, 8), pool, 0)) is SlidingWindowManager
    assert type(get_manager_for_kv_cache_spec(chunked(4, 8), pool, 0)) is ChunkedLocalAttentionManager
    mamba = MambaSpec(page_size=64, shapes=((2, 2),), dtype=np.float16)
    assert type(get_manager_for_kv_cache_spec(mamba, pool, 0)) is MambaManager
    with pytest.raises(CacheSpecError):
        FullAttentionManager(sliding(4, 8), pool, 0)
    with pytest.raises(CacheSpecError):
        FullAttentionManager(full(6), pool, 0, key_page_size=4)
    assert FullAttentionManager(full(8), pool, 1, key_page_size=4).layout == ("full", 8, 0)
    assert SlidingWindowManager(sliding(4, 9), pool, 0).layout == ("sliding", 4, 9)


def test_full_hit_is_the_prefix_run_and_is_pure():
    pool = PagePool(12)
    keys = keys_of(list(range(20)))
    p0, p1, _, p3 = cache_positions(pool, keys, [0, 1, 2, 3])
    m = FullAttentionManager(full(), pool, 0)
    before = (pool.free_list_ids(), [pool.ref_count(p) for p in range(12)])
    assert m.find_longest_cache_hit(keys, 19, [0]) == ([p0, p1, pool.lookup_id(group_pool_key(keys[2], 0)), p3],)
    assert m.find_longest_cache_hit(keys, 11, [0])[0] == [p0, p1]  # capped by max_length
    assert (pool.free_list_ids(), [pool.ref_count(p) for p in range(12)]) == before
    other = keys_of([0, 1, 2, 3, 9, 9, 9, 9])
    assert m.find_longest_cache_hit(other, 7, [0]) == ([p0],)  # miss at page 1 ends the hit
    # joint lookup: group 1 has only page 0 cached -> both groups hit one page
    q0 = cache_positions(pool, keys, [0], gid=1)[0]
    assert m.find_longest_cache_hit(keys, 19, [0, 1]) == ([p0], [q0])


def test_full_hit_with_a_larger_page_size_uses_every_kth_key():
    pool = PagePool(8)
    keys = keys_of(list(range(16)))  # 4 keys at page size 4
    (page,) = cache_positions(pool, keys, [1], stride=1)  # key index 1 = end of the first 8-token page
    m = FullAttentionManager(full(8), pool, 0, key_page_size=4)
    assert m.find_longest_cache_hit(keys, 15, [0]) == ([page],)


def test_sliding_hit_esurge_example():
    # eSurge: ps 4, sw 8, a 25-token prompt cached; a 26-token lookup hits 24 tokens [0,0,0,0,P5,P6].
    pool = PagePool(16)
    tokens = list(range(100, 126))
    keys = keys_of(tokens)
    pages = cache_positions(pool, keys, list(range(6)))
    m = SlidingWindowManager(sliding(4, 8), pool, 0)
    assert m.find_longest_cache_hit(keys, 25, [0]) == ([0, 0, 0, 0, pages[4], pages[5]],)


def test_sliding_hit_takes_the_rightmost_run_else_the_prefix_run():
    pool = PagePool(16)
    keys = keys_of(list(range(32)))
    pages = dict(zip([0, 2, 3, 5], cache_positions(pool, keys, [0, 2, 3, 5])))
    m = SlidingWindowManager(sliding(4, 9), pool, 0)  # needs cdiv(8, 4) = 2 consecutive pages
    assert m.find_longest_cache_hit(keys, 31, [0]) == ([0, 0, pages[2], pages[3]],)
    m3 = SlidingWindowManager(sliding(4, 13), pool, 0)  # needs 3: never reached -> prefix run [P0]
    assert m3.find_longest_cache_hit(keys, 31, [0]) == ([pages[0]],)
    m1 = SlidingWindowManager(sliding(4, 1), pool, 0)  # window 1: the rightmost single hit
    assert m1.find_longest_cache_hit(keys, 31, [0]) == ([0, 0, 0, 0, 0, pages[5]],)


def test_chunked_hit_reports_earlier_chunks_as_null_pages():
    # eSurge: ps 4, C 8, 20-token prompt, empty cache -> 16 tokens of null pages.
    pool = PagePool(8)
    keys = keys_of(list(range(20)))
    m = ChunkedLocalAttentionManager(chunked(4, 8), pool, 0)
    assert m.find_longest_cache_hit(keys, 19, [0]) == ([0, 0, 0, 0],)
    (p4,) = cache_positions(pool, keys, [4])
    assert m.find_longest_cache_hit(keys + keys_of(list(range(24)))[5:], 23, [0]) == ([0, 0, 0, 0, p4],)


def test_mamba_never_hits_and_never_caches():
    pool = PagePool(8)
    keys = keys_of(list(range(8)))
    m = MambaManager(MambaSpec(page_size=64, shapes=((2, 2),), dtype=np.float16), pool, 0)
    cache_positions(pool, keys, [0])
    assert m.find_longest_cache_hit(keys, 7, [0]) == ([],)
    pages: list[int] = []
    assert m.allocate_new_pages(pages, 40) == [2] and pages == [2]
    assert m.cache_pages(pages, 0, keys, 64) == 0
    assert pool.key_of(2) is None and m.keys_needed(64) == 0


def test_allocation_needs_and_revived_hits():
    pool = PagePool(10)
    keys = keys_of(list(range(12)))
    hits = cache_positions(pool, keys, [0, 1])  # free but cached
    m = FullAttentionManager(full(), pool, 0)
    # 10 slots -> 3 pages; 2 hits; both hits are free so they also leave the free list
    assert m.get_num_pages_to_allocate([], 10, hits) == 1 + 2
    pool.touch_ids(hits)
    assert m.get_num_pages_to_allocate([], 10, hits) == 1
    pages = list(hits)  # the request's list starts with its hits (the coordinator's record)
    head = pool.free_list_ids()[0]
    assert m.allocate_new_pages(pages, 10) == [head]
    assert pages == hits + [head]
    assert m.allocate_new_pages(pages, 12) == []  # already covered
    assert m.get_num_pages_to_allocate(pages, 12, []) == 0


def test_cache_pages_is_monotone_and_keys_fresh_pages_only():
    pool = PagePool(10)
    req = Request("r", list(range(13)))
    keys = HASHER.hash_request(req, 4)
    m = FullAttentionManager(full(), pool, 0)
    pages: list[int] = []
    new = m.allocate_new_pages(pages, 13)
    assert m.cache_pages(pages, 0, keys, 8) == 2
    assert [pool.key_of(p) is not None for p in new] == [True, True, False, False]
    assert m.cache_pages(pages, 2, keys, 4) == 2  # lower: no-op (eSurge Q4 lowered the count)
    assert m.cache_pages(pages, 2, keys, 12) == 3
    assert pool.key_of(new[2]) == group_pool_key(keys[2], 0)
    assert m.keys_needed(12) == 3


def test_cache_pages_registers_a_long_run_as_one_step_with_the_group_keys():
    keys = keys_of(list(range(33 * 4 + 1)))  # 33 full pages: a run long enough for one batch
    for taken in (None, 20):
        pool = PagePool(40)
        m = FullAttentionManager(full(), pool, 2)
        pages: list[int] = []
        new = m.allocate_new_pages(pages, 33 * 4 + 1)
        if taken is None:
            assert m.cache_pages(pages, 0, keys, 33 * 4) == 33
            assert [pool.key_of(p) for p in new[:33]] == m.group_keys(keys[:33]) == [m.group_key(k) for k in keys[:33]]
            assert all(type(pool.key_of(p)) is PageHashWithGroupId for p in new[:33])
            continue
        pool.cache_page_id(new[taken], PageHashWithGroupId(b"taken", 2))  # this page cannot take a key
        before = pool.cached_items()
        with pytest.raises(PageStateError):
            m.cache_pages(pages, 0, keys, 33 * 4)
        assert pool.cached_items() == before  # pages 0-19 were not registered either
        assert m.cache_pages(pages, 0, keys, 8) == 2  # a short run: per-page calls
        assert [pool.key_of(p) for p in new[:2]] == [group_pool_key(k, 2) for k in keys[:2]]


def test_sliding_window_drops_pages_and_skips_placeholders_when_caching():
    pool = PagePool(12)
    req = Request("r", list(range(20)))
    keys = HASHER.hash_request(req, 4)
    m = SlidingWindowManager(sliding(4, 4), pool, 0)
    held: list[int] = []
    pages = m.allocate_new_pages(held, 20)
    assert m.skipped_range(held, 7) == (0, 1)  # (7 - 4 + 1) // 4 = 1 page before the window
    assert m.skipped_range(held, 16) == (0, 3)
    m.remove_skipped_pages(held, 0, 3)
    assert held == [0, 0, 0, pages[3], pages[4]]
    assert pool.free_list_ids()[-3:] == [pages[2], pages[1], pages[0]]  # descending index order
    assert m.skipped_range(held, 16) == (3, 3)  # already dropped: nothing new
    assert m.cache_pages(held, 0, keys, 20) == 5  # placeholders are never hashed (eSurge Q3)
    assert pool.key_of(0) is None and pool.key_of(pages[4]) == group_pool_key(keys[4], 0)
    m.free(held)
    assert pool.free_list_ids()[-2:] == [pages[4], pages[3]]


def test_chunked_drops_pages_before_the_current_chunk():
    pool = PagePool(12)
    m = ChunkedLocalAttentionManager(chunked(4, 8), pool, 0)
    held: list[int] = []
    m.allocate_new_pages(held, 20)
    assert m.skipped_range(held, 7) == (0, 0)
    assert m.skipped_range(held, 17) == (0, 4)  # chunk starts at 16 -> pages 0..3
    assert m.skipped_range([], 17) == (0, 0)


def test_free_reverse_order_and_common_prefix():
    pool = PagePool(8)
    m = FullAttentionManager(full(), pool, 0)
    a: list[int] = []
    ids = m.allocate_new_pages(a, 16)
    assert ids == [1, 2, 3, 4]
    b = ids[:2]
    pool.touch_ids(b)
    assert m.get_num_common_prefix_pages(a, 2) == 2 and m.get_num_common_prefix_pages(a, 1) == 4
    m.free(b)
    m.free(a)
    assert pool.free_list_ids() == [5, 6, 7, 4, 3, 2, 1]  # eSurge §1.3 rule 2
    m.free([])  # nothing held: no-op
    assert SlidingWindowManager(sliding(4, 4), pool, 0).get_num_common_prefix_pages([], 1) == 0


def test_page_lists_are_checked_before_any_change():
    pool = PagePool(8)
    m = FullAttentionManager(full(), pool, 0)
    with pytest.raises(InvalidArgumentError):
        m.allocate_new_pages((), 8)  # type: ignore[arg-type]  # a request's list is a list
    with pytest.raises(InvalidArgumentError):
        m.free("a")  # type: ignore[arg-type]
    assert pool.free_list_ids() == list(range(1, 8))
