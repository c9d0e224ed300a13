"""eSurge's reproduced bugs Q1-Q6 (docs/differences.md): each scenario replayed here,
asserting the safe outcome. The comment above each test says what eSurge does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import (
    CacheGroupSpec,
    CacheManager,
    DoubleFreeError,
    FullAttentionSpec,
    NullPageError,
    Request,
    SlidingWindowSpec,
)
from verikv.hashing import PageHasher, group_pool_key
from verikv.spec.abstraction import abstract_manager

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
FULL = CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))
SW4 = CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=4, **KW))


def admit(m: CacheManager, req: Request, **kw):
    hits, n = m.get_computed_pages(req, **kw)
    new = m.allocate_slots(req, req.num_tokens - n, n, hits, **kw)
    if new is not None:
        req.num_computed_tokens = req.num_tokens
    return new


def decode(m: CacheManager, req: Request, token: int) -> None:
    """One decode step: schedule the last sampled token, then sample ``token``."""
    assert m.allocate_slots(req, 1) is not None
    req.num_computed_tokens += 1
    req.append_output_token_ids([token])


@pytest.mark.parametrize("groups", [[SW4, FULL], [FULL, SW4], [SW4]], ids=["sliding-first", "full-first", "sliding"])
def test_q1_window_nulling_never_breaks_the_hash_chain(groups):
    # eSurge: with sw <= ps the predecessor of a filling page is already nulled, so the page is
    # hashed as a *first* page; B = [5,6,7,8,100,101] then hits A's second page (KV computed
    # after [1,2,3,4]) in the sliding-first layout.
    m = CacheManager(32, groups, 64, hash_seed=0)
    a = Request("A", [1, 2, 3, 4, 5])
    admit(m, a)
    for token in (6, 7, 8, 9):
        decode(m, a, token)
    sliding_gid = groups.index(SW4)
    assert m.get_page_ids("A")[sliding_gid][0] == 0  # page 0 left the window
    b = Request("B", [5, 6, 7, 8, 100, 101])
    hits, n = m.get_computed_pages(b)
    assert n == 0 and not any(hits.get_page_ids())
    # A's second page is keyed with A's real chain: parent = key of [1, 2, 3, 4]
    chain = PageHasher("sha256", seed=0).hash_request(Request("x", list(range(1, 9))), 4)
    page = m.get_page_ids("A")[sliding_gid][1]
    assert m.page_pool.key_of(page) == group_pool_key(chain[1], sliding_gid)


def test_q2_refused_multi_group_allocation_leaves_nothing_behind_and_retry_with_hits_works():
    # eSurge: group 0 takes pages, group 1 fails (DP shard exhausted); group 0 keeps its pages,
    # and a retry with a prefix hit fails an assert in save_new_computed_pages.
    full8 = CacheGroupSpec(FullAttentionSpec(page_size=4, num_kv_heads=2, head_size=8, dtype=np.float16, use_mla=False))
    m = CacheManager(16, [FULL, full8], 64, hash_seed=0, data_parallel_size=2)  # shard 0: ids 1..7
    dp = dict(dp_shard_hint=0, data_parallel_size=2)
    seed = Request("seed", list(range(8)))
    admit(m, seed, **dp)  # 2 + 2 pages of shard 0, cached
    filler = Request("filler", [9, 9, 9, 9])
    admit(m, filler, **dp)  # 2 more: 1 page left in shard 0
    m.free(seed)  # its 4 pages are free again but stay cached
    r = Request("r", list(range(8)) + [50] * 12)  # 20 tokens: 5 + 5 pages, 4 of them hits
    before = abstract_manager(m)
    hits, n = m.get_computed_pages(r, **dp)
    assert n == 8
    assert m.allocate_slots(r, 12, n, hits, **dp) is None  # needs 3 + 3 new pages + 4 revived
    assert abstract_manager(m) == before and m.request_ids() == ["filler"]
    m.free(filler)
    hits, n = m.get_computed_pages(r, **dp)
    assert m.allocate_slots(r, 12, n, hits, **dp) is None  # still one page short: no change
    assert abstract_manager(m).entries == frozenset()
    short = Request("short", list(range(8)) + [50] * 4)
    hits, n = m.get_computed_pages(short, **dp)
    new = m.allocate_slots(short, 4, n, hits, **dp)  # the retry with hits just works
    assert n == 8 and new is not None and m.get_page_ids("short")[0][:2] == hits.get_page_ids()[0]


def test_q3_the_null_page_is_never_hashed():
    # eSurge: with delay_cache_pages the window nulls pages that were never cached; the next
    # cache_pages hashes page 0 into the map, and it is later served as a hit.
    m = CacheManager(32, [FULL, SW4], 64, hash_seed=0)
    r = Request("r", list(range(6)))
    m.allocate_slots(r, 6, delay_cache_pages=True)
    r.num_computed_tokens = 6
    for token in range(10, 18):
        r.append_output_token_ids([token])
        m.allocate_slots(r, 1, delay_cache_pages=True)
        r.num_computed_tokens += 1
    assert m.get_page_ids("r")[1][:2] == [0, 0] and m.num_cached_pages("r") == [0, 0]
    m.cache_pages(r, r.num_computed_tokens)
    assert m.page_pool.key_of(0) is None
    assert all(0 not in ids for _, ids in m.page_pool.cached_items())
    again = Request("again", list(r.all_token_ids))
    hits, n = m.get_computed_pages(again)
    assert n > 0 and 0 not in hits.get_page_ids()[0]


def test_q4_num_cached_never_decreases():
    # eSurge: a lower cache_pages count overwrites num_cached; a later higher count re-hashes
    # pages that already have a key and raises RuntimeError.
    m = CacheManager(16, [FULL], 64, hash_seed=0)
    r = Request("r", list(range(12)))
    m.allocate_slots(r, 12, delay_cache_pages=True)
    m.cache_pages(r, 12)
    m.cache_pages(r, 4)
    assert m.num_cached_pages("r") == [3]
    m.cache_pages(r, 12)  # no error, nothing re-keyed
    assert m.num_cached_pages("r") == [3] and len(m.page_pool.cached_items()) == 3


def test_q5_extra_keys_are_attached_on_every_path():
    # eSurge: pages hashed after a skipped lookup (prompt_logprobs) get no image key, so a
    # request with the same tokens and another image hits them.
    m = CacheManager(32, [FULL], 64, hash_seed=0)
    tokens = list(range(12))
    first = Request("a", tokens, mm_features=[("image-a", 0, 4)], prompt_logprobs=True)
    admit(m, first)
    other_image = Request("b", tokens, mm_features=[("image-b", 0, 4)])
    assert m.get_computed_pages(other_image)[1] == 0
    moved = Request("c", tokens, mm_features=[("image-a", 4, 4)])
    assert m.get_computed_pages(moved)[1] == 0
    other_tenant = Request("s", tokens, mm_features=[("image-a", 0, 4)], cache_salt="tenant-2")
    assert m.get_computed_pages(other_tenant)[1] == 0
    same = Request("d", tokens, mm_features=[("image-a", 0, 4)])
    assert m.get_computed_pages(same)[1] == 8


def test_q6_double_free_is_refused_and_loses_no_page():
    # eSurge: a double free drives ref_cnt to -1; the next allocation that pops the page raises
    # after unlinking its batch, and those pages are lost for good.
    m = CacheManager(8, [FULL], 64, hash_seed=0)
    r = Request("r", list(range(8)))
    new = admit(m, r).get_page_ids()[0]
    m.free(r)
    pool = m.page_pool
    before = abstract_manager(m)
    with pytest.raises(DoubleFreeError):
        pool.free_page_ids([new[0]])
    with pytest.raises(NullPageError):
        pool.free_page_ids([0])
    m.free(r)  # freeing a request twice is a no-op, not a double free
    assert abstract_manager(m) == before and pool.get_num_free_pages() == 7
    big = Request("big", list(range(100, 128)))
    assert len(admit(m, big).get_page_ids()[0]) == 7  # every page is still usable
