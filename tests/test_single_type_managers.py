"""Single-type managers on a real pool: hit rules, window drops, allocation, caching, freeing.

Numbers marked "eSurge" replay eSurge's worked examples of its hit rules (EasyDeL commit
`090a03b`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from verikv import (
    CacheSpecError,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    InvalidArgumentError,
    MambaSpec,
    NullPageError,
    PagePool,
    PageStateError,
    Request,
    SlidingWindowSpec,
)
from verikv.hashing import PageHasher, PageHashWithGroupId, group_pool_key
from verikv.single_type_managers import (
    ChunkedLocalAttentionManager,
    FullAttentionManager,
    MambaAlignManager,
    MambaManager,
    SingleTypeCacheManager,
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


@pytest.mark.parametrize("group_ids", [(-1,), [-1], (0, -2), (True,)])
def test_a_negative_or_non_int_group_id_is_refused_in_any_sequence(group_ids: Any) -> None:
    pool = PagePool(4)
    keys = keys_of(list(range(8)))
    m = FullAttentionManager(full(), pool, 0)
    with pytest.raises(InvalidArgumentError, match="group id"):
        m.find_longest_cache_hit(keys, 7, group_ids)


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
    assert pool.free_list_ids() == [5, 6, 7, 4, 3, 2, 1]  # eSurge's free order
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


# ---- Checks written for mutants of impl/single_type_managers.py that the suite let through
# (tools/mutation/triage.toml).
# They pin the validation the managers' docstrings promise for token counts (``_count``: an
# integer >= 0, any integral type, returned as an exact int, anything else an
# `InvalidArgumentError` naming the argument) and for request keys (``_key_list``: a sequence of
# `PageKey`, list or not). Expected values come from the arguments: a count of ``n`` tokens needs
# ``ceil(n / page_size)`` pages.


PAGE_SIZE = 4


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _manager() -> SingleTypeCacheManager:
    return get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), PagePool(16), 0)


@pytest.mark.parametrize("num_tokens", [0, 1, 4, 5, 9, np.int64(0), np.int64(7)])
def test_a_token_count_of_any_integral_type_needs_its_pages(num_tokens: Any) -> None:
    needed = _manager().get_num_pages_to_allocate([], num_tokens, [])
    assert needed == -(-int(num_tokens) // PAGE_SIZE)
    assert type(needed) is int  # the count was taken as an exact int


@pytest.mark.parametrize("num_tokens", [-1, np.int64(-1), "5", 2.0])
def test_a_bad_token_count_is_rejected_by_name(num_tokens: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("num_tokens")):
        _manager().get_num_pages_to_allocate([], num_tokens, [])


def test_a_lookup_takes_keys_as_any_sequence_of_page_keys() -> None:
    manager = _manager()
    keys = PageHasher("sha256", seed=7).hash_request(Request("r", list(range(8))), PAGE_SIZE)
    assert manager.find_longest_cache_hit(list(keys), 8, (0,)) == ([],)  # nothing cached yet
    assert manager.find_longest_cache_hit(tuple(keys), 8, (0,)) == ([],)


@pytest.mark.parametrize("keys", ["ab", b"ab", (b"k", "not a key"), [b"k", 1], 5])
def test_a_lookup_rejects_keys_that_are_not_page_keys(keys: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        _manager().find_longest_cache_hit(keys, 8, (0,))


# --- windows, chunks, DP shards, Mamba align states, hit checks ------------------
#
# Expected values follow the rules the docstrings state: a sliding window ``sw`` needs the
# rightmost run of ``ceil((sw - 1) / ps)`` hits, and the next token (position n) attends to
# positions ``n - sw + 1 .. n``; a chunk ``C`` starts at ``(n // C) * C``; a Mamba align state
# page ``j`` stands for the state after ``(j + 1) * ps`` tokens.

DP = 2
POOL = 16  # two DP shards of 8 pages: ids 0..7 and 8..15


def _keys(num_pages: int, page_size: int = PAGE_SIZE, seed: int = 7) -> list[bytes]:
    tokens = list(range(seed * 100, seed * 100 + num_pages * page_size))
    return PageHasher("sha256", seed=seed).hash_request(Request(f"r{seed}", tokens), page_size)


def _cache(manager: SingleTypeCacheManager, pages: list[int], keys: list[bytes], positions: list[int]) -> None:
    """Register ``pages[j]`` under this group's key of page ``j``, for each ``j`` in ``positions``."""
    for j in positions:
        manager.page_pool.cache_page_id(pages[j], manager.group_key(keys[manager.key_index(j)]))


def _sliding(window: int, pool: PagePool | None = None, key_page_size: int | None = None) -> SingleTypeCacheManager:
    spec = SlidingWindowSpec(page_size=PAGE_SIZE, sliding_window=window, **KW)
    return get_manager_for_kv_cache_spec(spec, pool or PagePool(POOL), 0, key_page_size)


def _chunked(chunk: int, pool: PagePool | None = None, page_size: int = PAGE_SIZE,
             key_page_size: int | None = None) -> SingleTypeCacheManager:
    spec = ChunkedLocalAttentionSpec(page_size=page_size, attention_chunk_size=chunk, **KW)
    return get_manager_for_kv_cache_spec(spec, pool or PagePool(POOL), 0, key_page_size)


def _mamba(pool: PagePool | None = None, key_page_size: int | None = None) -> MambaAlignManager:
    spec = MambaSpec(page_size=PAGE_SIZE, shapes=((2, 2),), dtype=np.float32)
    manager = get_manager_for_kv_cache_spec(spec, pool or PagePool(POOL), 0, key_page_size, mamba_cache_mode="align")
    assert isinstance(manager, MambaAlignManager)
    return manager


def test_a_sliding_hit_needs_a_run_of_window_minus_one_tokens_of_pages() -> None:
    manager = _sliding(6)  # ceil(5 / 4) = 2 pages
    keys = _keys(3)
    pages = manager.page_pool.get_new_page_ids(3)
    _cache(manager, pages, keys, [2])
    assert manager.find_longest_cache_hit(keys, 13, (0,)) == ([],)  # a run of one page is too short
    _cache(manager, pages, keys, [1])
    assert manager.find_longest_cache_hit(keys, 13, (0,)) == ([0, pages[1], pages[2]],)


def test_a_sliding_window_keeps_the_page_holding_the_first_attended_token() -> None:
    manager = _sliding(4)
    pages = [1, 2, 3]
    assert manager.skipped_range(pages, 10) == (0, 1)  # token 10 attends to 7..10: page 1 holds 7
    assert manager.skipped_range(pages, 11) == (0, 2)  # token 11 attends to 8..11


def test_chunked_and_sliding_skips_name_a_bad_token_count() -> None:
    for manager in (_sliding(4), _chunked(8)):
        with pytest.raises(InvalidArgumentError, match=_named("num_computed_tokens")):
            manager.skipped_range([1, 2], -1)


def test_a_chunked_lookup_stops_at_the_first_miss_of_its_chunk() -> None:
    keys = _keys(4)
    manager = _chunked(16)  # one chunk of four pages
    pages = manager.page_pool.get_new_page_ids(4)
    _cache(manager, pages, keys, [0, 2])
    assert manager.find_longest_cache_hit(keys, 15, (0,)) == ([pages[0]],)  # page 1 misses: page 2 is not reached
    manager = _chunked(8)  # chunks of two pages
    pages = manager.page_pool.get_new_page_ids(4)
    _cache(manager, pages, keys, [2])
    assert manager.find_longest_cache_hit(keys, 15, (0,)) == ([0, 0, pages[2]],)  # chunk 1 starts at page 2
    assert manager.find_longest_cache_hit(keys, 7, (0,)) == ([],)  # chunk 0: page 0 misses


def test_a_chunk_of_one_token_puts_every_earlier_page_before_the_hit() -> None:
    manager = _chunked(1, page_size=1)
    keys = _keys(2, page_size=1)
    assert manager.find_longest_cache_hit(keys, 1, (0,)) == ([0],)  # max_length 1: chunk 1 starts at page 1


def test_windowed_managers_key_at_the_key_page_size() -> None:
    for manager in (_chunked(8, key_page_size=2), _sliding(8, key_page_size=2)):
        assert manager.key_index(0) == 1 and manager.key_index(1) == 3  # the last small page each covers
        assert manager.keys_needed(8) == 4


def test_common_prefix_pages_need_a_positive_request_count_by_name() -> None:
    manager = _manager()
    for bad in (0, -1, "1"):
        with pytest.raises(InvalidArgumentError, match=_named("num_running_requests")):
            manager.get_num_common_prefix_pages([1], bad)  # type: ignore[arg-type]


# --- the DP shard reaches the pool in every lookup and allocation ------------------------------


def _in_shard_one(manager: SingleTypeCacheManager, count: int) -> list[int]:
    return manager.page_pool.get_new_page_ids(count, dp_shard_hint=1, data_parallel_size=DP)


@pytest.mark.parametrize("make", [lambda: _sliding(5), lambda: _chunked(16), _mamba],
                         ids=["sliding", "chunked", "mamba"])
def test_a_lookup_inside_a_shard_sees_only_its_pages(make: Any) -> None:
    manager = make()
    keys = _keys(2)
    pages = _in_shard_one(manager, 2)
    _cache(manager, pages, keys, [0, 1])
    assert manager.find_longest_cache_hit(keys, 9, (0,), 0, DP) == ([],)
    inside = manager.find_longest_cache_hit(keys, 9, (0,), 1, DP)
    assert inside[0] and inside[0][-1] == pages[1]


def test_a_joint_full_attention_lookup_inside_a_shard_sees_only_its_pages() -> None:
    pool = PagePool(POOL)
    first = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), pool, 0)
    second = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), pool, 1)
    keys = _keys(2)
    for manager in (first, second):
        _cache(manager, _in_shard_one(manager, 2), keys, [0, 1])
    assert first.find_longest_cache_hit(keys, 9, (0, 1), 0, DP) == ([], [])
    assert [len(hit) for hit in first.find_longest_cache_hit(keys, 9, (0, 1), 1, DP)] == [2, 2]


def test_a_mamba_state_is_allocated_inside_the_shard() -> None:
    manager = _mamba()
    pages: list[int] = []
    states: list[int] = []
    new = manager.allocate_state(pages, states, 9, 1, DP)
    assert len(new) == 1 and 8 <= new[0] < 16
    assert pages == [0, 0, new[0]] and states == [2]  # the state after 9 tokens: page ceil(9 / 4) - 1


# --- Mamba align: states, keys, the pages a step needs ----------------------------------------------


@pytest.mark.parametrize(("call", "name"), [
    (lambda m: m.allocate_state([], [], -1), "num_tokens"),
    (lambda m: m.cache_states([], 0, [], -1, 0), "num_tokens"),
    (lambda m: m.cache_states([], 0, [], 0, -1), "num_computed_tokens"),
    (lambda m: m.skipped_states([1], -1), "num_computed_tokens"),
], ids=["allocate_state", "cache_states tokens", "cache_states computed", "skipped_states"])
def test_mamba_token_counts_are_named_when_bad(call: Any, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call(_mamba())


def test_a_mamba_state_is_keyed_when_the_computed_count_ends_its_page() -> None:
    manager = _mamba()
    keys = _keys(2)
    pages = manager.page_pool.get_new_page_ids(2)
    assert manager.cache_states(pages, 0, keys, 8, 6) == 1  # 6 tokens: no state page is complete
    assert manager.page_pool.keys_of_ids(pages) == [None, None]
    count = manager.cache_states(pages, 0, keys, 4, 4)  # the state after 4 tokens, within 4: page 0
    assert count == 1 and type(count) is int
    assert manager.page_pool.keys_of_ids(pages) == [manager.group_key(keys[0]), None]


def test_a_mamba_state_with_a_bad_key_is_refused_by_name() -> None:
    manager = _mamba()
    pages = manager.page_pool.get_new_page_ids(1)
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        manager.cache_states(pages, 0, ["not a key"], 4, 4)  # type: ignore[list-item]
    assert manager.page_pool.key_of(pages[0]) is None


def test_mamba_caching_needs_the_pages_and_the_keys_it_reads() -> None:
    manager = _mamba(key_page_size=2)  # two keys per page
    keys = _keys(4, page_size=2)
    pages = manager.page_pool.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError):
        manager.cache_states(pages[:1], 0, keys, 8, 8)  # two full pages, one held
    with pytest.raises(InvalidArgumentError):
        manager.cache_states(pages, 0, keys[:2], 8, 8)  # two full pages need four keys
    assert manager.cache_states(pages, 0, keys, 8, 8) == 2
    assert manager.page_pool.key_of(pages[1]) == manager.group_key(keys[3])


def test_a_state_may_stay_only_in_the_last_held_uncached_page() -> None:
    manager = _mamba()
    pool = manager.page_pool
    page = pool.get_new_page_ids(1)
    manager.check_state_moves_forward(page, 4, 4)  # stays in place: allowed
    manager.check_state_moves_forward(page, 4, 5)  # moves to a new page: allowed
    for pages, computed, end in ((page, 5, 4), ([0], 4, 4)):  # computed went back; the last page is null
        with pytest.raises(InvalidArgumentError):
            manager.check_state_moves_forward(pages, computed, end)
    pool.cache_page_id(page[0], manager.group_key(_keys(1)[0]))
    with pytest.raises(InvalidArgumentError):
        manager.check_state_moves_forward(page, 4, 4)  # a cached state is never overwritten


def test_the_first_state_of_a_hit_is_its_last_page() -> None:
    manager = _mamba()
    assert manager.first_states([0, 0, 5]) == [2]
    assert manager.first_states([]) == []


def test_freeing_states_keeps_the_others() -> None:
    manager = _mamba()
    held = manager.page_pool.get_new_page_ids(2)
    pages, states = [0, held[0], 0, held[1]], [1, 3]
    manager.free_states(pages, states, [1])
    assert (pages, states) == ([0, 0, 0, held[1]], [3])
    assert manager.page_pool.ref_count(held[0]) == 0


@pytest.mark.parametrize(("pages", "num_tokens", "hits", "expected"), [
    ("held", 4, [], 0),  # the state stays in the held page
    ("held", 5, [], 1),  # it moves past it
    ("none", 12, "hit at 2", 1),  # a new request starting with a hit of 3 pages: no new page; the free hit page revives
    ("none", 13, "hit at 2", 2),
    ("none", 8, [], 1),
], ids=["stays", "moves", "revived hit", "hit and new page", "new request"])
def test_mamba_pages_needed_counts_a_moving_state_and_revived_hits(pages: str, num_tokens: int, hits: Any,
                                                                    expected: int) -> None:
    manager = _mamba()
    pool = manager.page_pool
    held = pool.get_new_page_ids(1) if pages == "held" else []
    if hits == "hit at 2":
        page = pool.get_new_page_ids(1)
        pool.cache_page_id(page[0], manager.group_key(_keys(3)[2]))
        pool.free_page_ids(page)  # cached and free
        hits = [0, 0, page[0]]
    assert manager.get_num_pages_to_allocate(held, num_tokens, hits) == expected


# --- the arguments of a page count and the check of a hit --------------------------------------


@pytest.mark.parametrize("new_computed_pages", [{1}, (p for p in [1]), [1.5], ["1"]],
                         ids=["set", "generator", "float", "str"])
def test_new_computed_pages_must_be_a_sequence_of_ids(new_computed_pages: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("new_computed_pages")):
        _manager().get_num_pages_to_allocate([], 4, new_computed_pages)


def test_hit_mismatch_reports_the_first_page_not_holding_the_requests_key() -> None:
    manager = _manager()
    keys, other = _keys(2), _keys(2, seed=8)
    pages = manager.page_pool.get_new_page_ids(2)
    _cache(manager, pages, keys, [0])
    manager.page_pool.cache_page_id(pages[1], manager.group_key(other[1]))
    assert manager.hit_mismatch(pages, keys) == 1
    assert manager.hit_mismatch([0, pages[0]], keys) == 1  # placeholder skipped; page 0's key is not key 1
    assert manager.hit_mismatch([pages[0]], keys) is None
    assert manager.hit_mismatch([0], keys) is None


def test_hit_mismatch_at_a_key_stride_reads_the_last_small_key_of_each_page() -> None:
    pool = PagePool(POOL)
    manager = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), pool, 0, 2)
    keys = _keys(4, page_size=2)  # four keys of two tokens: pages 0 and 1 use keys 1 and 3
    pages = pool.get_new_page_ids(2)
    pool.cache_page_id(pages[0], manager.group_key(keys[0]))
    pool.cache_page_id(pages[1], manager.group_key(keys[1]))
    assert manager.hit_mismatch(pages, keys) == 0
    right = pool.get_new_page_ids(2)
    _cache(manager, right, keys, [0, 1])
    assert manager.hit_mismatch(right, keys) is None


# --- dropping pages a window left, caching counts ----------------------------------------------


def test_no_page_is_dropped_before_the_window_has_passed_one() -> None:
    manager = _sliding(8)
    assert manager.skipped_range([1, 2], 1) == (0, 0)  # token 1 attends to everything
    assert manager.skipped_range([], 40) == (0, 0)


def test_the_dropped_run_starts_after_the_last_placeholder() -> None:
    manager = _sliding(4)  # token 15 attends to 12..15: pages 0..2 are behind it
    assert manager.skipped_range([0, 5, 6, 7], 15) == (1, 3)
    assert manager.skipped_range([0, 0, 6, 7], 15) == (2, 3)


def test_a_chunked_lookup_of_no_tokens_is_empty() -> None:
    assert _chunked(8).find_longest_cache_hit(_keys(2), 0, (0,)) == ([],)


def test_held_pages_beyond_the_tokens_need_no_new_page() -> None:
    manager = _manager()
    held = manager.page_pool.get_new_page_ids(3)
    assert manager.get_num_pages_to_allocate(held, 4, []) == 0
    assert manager.get_num_pages_to_allocate(held, 13, []) == 1


def test_removing_skipped_pages_frees_them_last_first_and_leaves_placeholders() -> None:
    manager = _sliding(4)
    pool = manager.page_pool
    pages = pool.get_new_page_ids(4)
    held = list(pages)
    manager.remove_skipped_pages(pages, 1, 2)
    assert pages == [held[0], 0, held[2], held[3]]
    manager.remove_skipped_pages(pages, 2, 4)  # up to the end of the list
    assert pages == [held[0], 0, 0, 0]
    assert pool.free_list_ids()[-3:] == [held[1], held[3], held[2]]
    manager.remove_skipped_pages(pages, 3, 3)  # an empty range: nothing
    assert pages == [held[0], 0, 0, 0]


@pytest.mark.parametrize(("start", "stop", "name"),
                         [(-1, 1, "start"), ("0", 1, "start"), (0, -1, "stop"), (0, 1.5, "stop")])
def test_removing_skipped_pages_names_a_bad_bound(start: Any, stop: Any, name: str) -> None:
    manager = _sliding(4)
    pages = manager.page_pool.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        manager.remove_skipped_pages(pages, start, stop)
    assert manager.page_pool.get_num_free_pages() == POOL - 3


def test_removing_pages_that_are_not_held_is_refused_and_changes_nothing() -> None:
    manager = _sliding(4)
    pages = manager.page_pool.get_new_page_ids(2)
    for start, stop, held in ((0, 3, pages), (0, 2, [0, pages[1]])):
        before = list(held)
        with pytest.raises(InvalidArgumentError):
            manager.remove_skipped_pages(held, start, stop)
        assert held == before
    assert manager.page_pool.get_num_free_pages() == POOL - 3


def test_cache_pages_takes_any_integral_token_count_and_any_sequence_of_keys() -> None:
    manager = _manager()
    keys = _keys(2)
    pages = manager.page_pool.get_new_page_ids(2)
    assert manager.cache_pages(pages, 0, tuple(keys), np.int64(4)) == 1  # type: ignore[arg-type]
    assert manager.cache_pages(pages, 1, keys, np.int64(0)) == 1  # type: ignore[arg-type]  # a lower count: no-op
    assert manager.cache_pages(pages, 1, [], 7) == 1  # no new full page: the keys are not read
    assert manager.cache_pages(pages, 1, keys, 8) == 2
    assert manager.page_pool.keys_of_ids(pages) == manager.group_keys(keys)


@pytest.mark.parametrize("keys", [(k for k in [b"x" * 32]), {b"x" * 32}, ["not a key"], "ab"],
                         ids=["generator", "set", "str key", "str"])
def test_cache_pages_refuses_keys_that_are_not_a_sequence_of_page_keys(keys: Any) -> None:
    manager = _manager()
    pages = manager.page_pool.get_new_page_ids(1)
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        manager.cache_pages(pages, 0, keys, 4)
    assert manager.page_pool.key_of(pages[0]) is None


def test_cache_pages_needs_the_pages_and_the_keys_it_caches() -> None:
    pool = PagePool(POOL)
    manager = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), pool, 0, 2)
    keys = _keys(4, page_size=2)  # two keys per page
    pages = pool.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError):
        manager.cache_pages(pages[:1], 0, keys, 8)  # two full pages, one held
    with pytest.raises(InvalidArgumentError):
        manager.cache_pages(pages, 0, keys[:2], 8)  # two full pages need four keys
    assert pool.keys_of_ids(pages) == [None, None]
    assert manager.cache_pages(pages, 0, keys, 8) == 2
    assert pool.keys_of_ids(pages) == [manager.group_key(keys[1]), manager.group_key(keys[3])]


@pytest.mark.parametrize("num_tokens", [-1, "4", 4.0], ids=["negative", "str", "float"])
def test_cache_pages_and_keys_needed_name_a_bad_token_count(num_tokens: Any) -> None:
    manager = _manager()
    pages = manager.page_pool.get_new_page_ids(1)
    with pytest.raises(InvalidArgumentError, match=_named("num_tokens")):
        manager.cache_pages(pages, 0, _keys(1), num_tokens)
    with pytest.raises(InvalidArgumentError, match=_named("num_tokens")):
        manager.keys_needed(num_tokens)
    assert manager.page_pool.key_of(pages[0]) is None


def test_keys_needed_takes_any_integral_token_count() -> None:
    manager = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), PagePool(POOL), 0, 2)
    for num_tokens, expected in ((np.int64(9), 4), (np.int64(0), 0), (8, 4), (3, 0)):
        needed = manager.keys_needed(num_tokens)  # type: ignore[arg-type]  # two keys per full page
        assert needed == expected and type(needed) is int


# --- lookups' arguments, allocation counts, long cached runs with placeholders -----------------


def test_a_manager_keeps_its_spec_and_key_page_size() -> None:
    spec = FullAttentionSpec(page_size=PAGE_SIZE, **KW)
    manager = get_manager_for_kv_cache_spec(spec, PagePool(POOL), 0, 2)
    assert manager.kv_cache_spec is spec and manager.key_page_size == 2 and manager.page_size == PAGE_SIZE


@pytest.mark.parametrize(("group_ids", "max_length", "name"), [
    ((0, "1"), 8, "group id"), (("1",), 8, "group id"), ([0, -1], 8, "group id"), ([0, 1.5], 8, "group id"),
    ({0}, 8, "group_ids"), ("0", 8, "group_ids"), ((0,), -1, "max_length"), ((0,), "8", "max_length"),
], ids=["one str", "only str", "negative", "list float", "set", "str", "negative length", "str length"])
def test_a_lookup_names_its_bad_argument(group_ids: Any, max_length: Any, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        _sliding(5).find_longest_cache_hit(_keys(2), max_length, group_ids)


@pytest.mark.parametrize(("num_tokens", "expected"), [(np.int64(5), 2), (np.int64(0), 0), (8, 2), (0, 0)])
def test_allocate_new_pages_takes_any_integral_token_count(num_tokens: Any, expected: int) -> None:
    manager = _manager()
    pages: list[int] = []
    new = manager.allocate_new_pages(pages, num_tokens)
    assert len(new) == expected and pages == new


@pytest.mark.parametrize("num_tokens", [-1, "5", 5.0], ids=["negative", "str", "float"])
def test_allocate_new_pages_names_a_bad_token_count(num_tokens: Any) -> None:
    manager = _manager()
    pages: list[int] = []
    with pytest.raises(InvalidArgumentError, match=_named("num_tokens")):
        manager.allocate_new_pages(pages, num_tokens)
    assert pages == [] and manager.page_pool.get_num_free_pages() == 15


def test_a_long_cached_run_skips_its_placeholders() -> None:
    pool = PagePool(64)
    manager = _sliding(8, pool)
    keys = _keys(40)
    real = pool.get_new_page_ids(35)
    pages = [0] * 5 + real  # the window dropped the first five pages
    assert manager.cache_pages(pages, 0, keys, 40 * PAGE_SIZE) == 40
    assert pool.keys_of_ids(real) == [manager.group_key(keys[j]) for j in range(5, 40)]


# --- found by the run on ecbc580 ------------------------------------------------------------------


def _full_with_requests() -> tuple[SingleTypeCacheManager, list[list[int]], list[list[bytes]]]:
    """A full-attention manager whose pool holds three requests' pages (3, 2 and 2 pages)."""
    manager = _manager()
    page_lists = [manager.page_pool.get_new_page_ids(n) for n in (3, 2, 2)]
    keys = [_keys(3, seed=1), _keys(2, seed=2), _keys(2, seed=3)]
    return manager, page_lists, keys


def test_caching_a_batch_ends_as_caching_each_request_in_order() -> None:
    """`cache_pages_batch`: each request's pages registered as its own call registers them,
    the pool ending as after the calls in order, its key version included."""
    num_cached, num_tokens = [0, 1, 2], [12, 8, 8]  # the third request has nothing new to cache
    batch, lists, keys = _full_with_requests()
    counts = batch.cache_pages_batch([list(p) for p in lists], list(num_cached), keys, list(num_tokens))
    one_by_one, lists2, keys2 = _full_with_requests()
    expected = [one_by_one.cache_pages(p, c, k, n) for p, c, k, n in zip(lists2, num_cached, keys2, num_tokens)]
    assert counts == expected == [3, 2, 2]
    assert batch.page_pool.cached_items() == one_by_one.page_pool.cached_items()
    assert batch.page_pool.key_version == one_by_one.page_pool.key_version


def test_a_mamba_group_caches_nothing_in_a_batch_and_reads_nothing_in_a_lookup() -> None:
    pool = PagePool(POOL)
    manager = get_manager_for_kv_cache_spec(MambaSpec(page_size=64, shapes=((2, 2),), dtype=np.float32), pool, 0)
    pages = [pool.get_new_page_ids(1), pool.get_new_page_ids(1)]
    assert manager.cache_pages_batch(pages, [0, 0], [_keys(1), _keys(1, seed=2)], [64, 64]) == [0, 0]
    assert pool.cached_items() == []
    queries = pool.prefix_cache_stats.queries
    assert manager.find_longest_cache_hit(_keys(2), 128, (0,)) == ([],)
    assert pool.prefix_cache_stats.queries == queries  # a recurrent state is not a prefix: no key read


def test_freeing_a_full_attention_list_with_the_null_page_is_refused() -> None:
    manager = _manager()
    pages = manager.page_pool.get_new_page_ids(2)
    with pytest.raises(NullPageError):
        manager.free([pages[0], 0, pages[1]])  # a null page there by mistake
    assert [manager.page_pool.ref_count(p) for p in pages] == [1, 1]


def test_a_full_attention_group_other_than_group_zero_finds_its_own_pages() -> None:
    pool = PagePool(POOL)
    manager = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), pool, 1)
    pages, keys = pool.get_new_page_ids(3), _keys(3)
    _cache(manager, pages, keys, [0, 1, 2])
    assert manager.find_longest_cache_hit(keys, 3 * PAGE_SIZE, (1,)) == (pages,)
    assert manager.find_longest_cache_hit(keys, 3 * PAGE_SIZE, (0,)) == ([],)  # group 0 holds none of them


def test_caching_refuses_keys_that_are_not_page_keys_with_several_keys_per_page() -> None:
    """Page size 4 over key pages of 2: two keys per page, every one of them checked."""
    pool = PagePool(POOL)
    manager = get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), pool, 0, 2)
    pages = pool.get_new_page_ids(2)
    keys: list[Any] = [_keys(1, page_size=2)[0], "not a key", "not a key", "not a key"]
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        manager.cache_pages(pages, 0, keys, 2 * PAGE_SIZE)
    assert pool.cached_items() == []


def test_a_batch_step_over_a_page_the_window_dropped_caches_as_the_call_does() -> None:
    """`cache_pages_batch` of one new full page that a sliding window already replaced by the
    null page ends as `cache_pages` does (the pool's null page is never registered)."""
    def step() -> tuple[SingleTypeCacheManager, list[int], list[bytes]]:
        manager = _sliding(PAGE_SIZE)
        return manager, [0, *manager.page_pool.get_new_page_ids(1)], _keys(2)  # page 0 slid out

    batch, pages, keys = step()
    counts = batch.cache_pages_batch([pages], [0], [keys], [PAGE_SIZE])
    one_by_one, pages2, keys2 = step()
    assert counts == [one_by_one.cache_pages(pages2, 0, keys2, PAGE_SIZE)]
    assert batch.page_pool.cached_items() == one_by_one.page_pool.cached_items()


def test_caching_refuses_pages_that_are_not_a_list_and_names_their_type() -> None:
    manager = _manager()
    pages = manager.page_pool.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError, match="pages must be a request's page list, got tuple"):
        manager.cache_pages(tuple(pages), 0, _keys(2), 2 * PAGE_SIZE)  # type: ignore[arg-type]
    assert manager.page_pool.cached_items() == []
