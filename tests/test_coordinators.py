"""Coordinators: dispatch, group-layout checks, the fixed-point hybrid hit, all-or-nothing allocation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from layouts import KW, chunked, ids, mamba, named, running, sliding

from verikv import (
    CacheCoordinatorNoPrefixCache,
    CacheGroupSpec,
    CacheManager,
    CacheSpecError,
    FullAttentionSpec,
    HybridCacheCoordinator,
    InvalidArgumentError,
    Request,
    RequestStatus,
    UnitaryCacheCoordinator,
    UnknownRequestError,
    get_kv_cache_coordinator,
)
from verikv.coordinators import (
    MAX_MODEL_LEN,
    CacheCoordinator,
    HeldState,
    sliding_page_can_hit,
)
from verikv.hashing import PageHasher
from verikv.spec import hit_rules

HASHER = PageHasher("sha256", seed=3)


def full(ps: int = 4, heads: int = 1) -> CacheGroupSpec:
    return CacheGroupSpec(FullAttentionSpec(page_size=ps, **{**KW, "num_kv_heads": heads}))


def state(c) -> tuple:
    pool = c.page_pool
    return (pool.free_list_ids(), [pool.ref_count(p) for p in range(pool.num_pages)],
            sorted(map(repr, pool.cached_items())),
            {rid: (c.get_pages(rid), c.holding(rid) and list(c.holding(rid).num_cached)) for rid in c.records})


def test_dispatch():
    assert type(get_kv_cache_coordinator(8, [full()], 32, False, False)) is CacheCoordinatorNoPrefixCache
    assert type(get_kv_cache_coordinator(8, [], 32, False, True)) is CacheCoordinatorNoPrefixCache
    assert type(get_kv_cache_coordinator(8, [full()], 32, False, True)) is UnitaryCacheCoordinator
    assert type(get_kv_cache_coordinator(8, [full(), sliding(4, 8)], 32, False, True)) is HybridCacheCoordinator
    # eSurge Q9: two full-attention geometries with caching used to fail construction
    c = get_kv_cache_coordinator(8, [full(4, 1), full(4, 2), full(8, 3)], 32, False, True)
    assert type(c) is HybridCacheCoordinator and c.key_page_size == 4


@pytest.mark.parametrize(
    "groups, kwargs",
    [
        ([full(4), full(6)], {}),  # 6 is not a multiple of 4
        ([full(4), chunked(4, 8)], {"use_eagle": True}),
        ([full(4), mamba(16)], {}),  # a Mamba page must hold max_model_len (32) tokens
    ],
)
def test_bad_layouts(groups, kwargs):
    with pytest.raises(CacheSpecError):
        get_kv_cache_coordinator(16, groups, 32, kwargs.get("use_eagle", False), True)


def test_class_constructors_check_group_counts():
    with pytest.raises(CacheSpecError):
        UnitaryCacheCoordinator(8, [full(), full()], 32, False, True)
    with pytest.raises(CacheSpecError):
        UnitaryCacheCoordinator(8, [], 32, False, True)
    with pytest.raises(CacheSpecError):
        HybridCacheCoordinator(8, [full()], 32, False, True)


def cached_prompt(c, tokens: list[int]) -> list:
    """Allocate, cache and free a request holding ``tokens``; return its keys."""
    req = Request("seed", tokens)
    keys = HASHER.hash_request(req, c.key_page_size)
    assert c.allocate_slots("seed", 0, len(tokens), None) is not None
    c.cache_pages("seed", keys, len(tokens))
    c.free("seed")
    return keys


def test_hybrid_fixed_point_matches_the_spec_rule():
    # full + sliding(sw 8): the sliding group lost its early pages to eviction; the common hit
    # is the longest length both accept, found by iterating (eSurge's two passes, generalised).
    c = get_kv_cache_coordinator(40, [full(4), sliding(4, 8)], 64, False, True)
    tokens = list(range(100, 125))
    keys = cached_prompt(c, tokens)
    hits, length = c.find_longest_cache_hit(keys, len(tokens))
    assert length == 24 and hits[0] == [p for p in hits[0] if p] and len(hits[1]) == 6
    assert hits[1][:4] == [0, 0, 0, 0]  # sliding: null placeholders before the window

    def rule(g):
        def f(n):
            layout = c.single_type_managers[g].layout
            per = c.find_longest_cache_hit(keys, n)[0][g]
            flags = [p != 0 or layout[0] != "full" for p in per]
            return hit_rules.group_rule(layout[0], layout[2], flags, layout[1], n).end * layout[1]
        return f
    assert hit_rules.common_hit_length([rule(0), rule(1)], [4, 4], len(tokens), False) == length


def test_eagle_drops_exactly_one_page_once_in_hybrid():
    # eSurge Q11: ps 4, sw 8, 17 cached tokens: eSurge's hybrid drops a page in both passes (8
    # tokens) while its unitary full lookup gives 12. Here the hybrid hit is 12 as well.
    tokens = list(range(17))
    uni = get_kv_cache_coordinator(40, [full(4)], 64, True, True)
    keys = cached_prompt(uni, tokens)
    assert uni.find_longest_cache_hit(keys, 17)[1] == 12
    hyb = get_kv_cache_coordinator(40, [full(4), sliding(4, 8)], 64, True, True)
    keys = cached_prompt(hyb, tokens)
    hits, length = hyb.find_longest_cache_hit(keys, 17)
    assert length == 12 and len(hits[0]) == 3 and hits[1][0] == 0 and all(hits[1][1:])


def test_three_types_and_mamba():
    c = get_kv_cache_coordinator(60, [full(4), sliding(4, 5), chunked(4, 8)], 64, False, True)
    tokens = list(range(30))
    keys = cached_prompt(c, tokens)
    hits, length = c.find_longest_cache_hit(keys, 29)
    assert length == 28 and [len(h) for h in hits] == [7, 7, 7]
    m = get_kv_cache_coordinator(60, [full(4), mamba(64)], 64, False, True)
    keys = cached_prompt(m, tokens)
    assert m.find_longest_cache_hit(keys, 29) == (([], []), 0)  # Mamba never hits


def test_allocation_that_does_not_fit_changes_nothing():
    # eSurge Q2/Q16: the sliding group would free window pages and the full group would take
    # pages before discovering the shortage. Here the call is refused with no change at all.
    c = get_kv_cache_coordinator(10, [full(4), sliding(4, 4)], 64, False, True)
    assert c.allocate_slots("a", 0, 12, None) == ([1, 2, 3], [4, 5, 6])
    before = state(c)
    assert c.allocate_slots("a", 12, 32, None) is None  # needs 5 + 5 pages, 3 free + 2 reclaimed
    assert state(c) == before


def test_window_frees_count_as_available_to_the_same_call():
    c = get_kv_cache_coordinator(8, [sliding(4, 4)], 64, False, True)
    assert c.allocate_slots("a", 0, 28, None) == ([1, 2, 3, 4, 5, 6, 7],)
    # 28 tokens computed: pages 0..5 leave the window; 2 more pages fit only thanks to them
    # pages 1..6 are freed in descending index order (6 first), then the head is reused
    assert c.allocate_slots("a", 28, 36, None) == ([6, 5],)
    assert c.get_pages("a") == ([0, 0, 0, 0, 0, 0, 7, 6, 5],) and c.page_pool.free_list_ids() == [4, 3, 2, 1]


def test_skip_freed_pages_shared_with_another_request_are_not_counted():
    c = get_kv_cache_coordinator(5, [sliding(4, 4)], 64, False, True)
    c.allocate_slots("a", 0, 8, None)  # pages 1, 2
    assert c.allocate_slots("b", 0, 4, ([1],)) == ([],)  # b takes page 1 as a hit: shared
    c.allocate_slots("c", 0, 8, None)  # pages 3, 4: nothing free now
    before = state(c)
    # a's page 0 leaves the window but b still holds it: no page reaches ref 0, one is needed
    assert c.allocate_slots("a", 8, 12, None) is None
    assert state(c) == before


def test_no_prefix_cache_coordinator_never_hits_or_caches():
    c = get_kv_cache_coordinator(8, [full(4), sliding(4, 4)], 32, False, False)
    assert c.allocate_slots("a", 0, 8, None) == ([1, 2], [3, 4])
    c.cache_pages("a", HASHER.hash_request(Request("a", list(range(8))), 4), 8)
    assert c.page_pool.cached_items() == [] and c.keys_needed(8) == 0
    assert c.find_longest_cache_hit([], 7) == (([], []), 0)
    assert c.get_num_common_prefix_pages("a", 1) == [2, 0]
    c.free("a")
    assert c.get_pages("a") is None and c.page_pool.get_num_free_pages() == 7


def test_remove_skipped_pages_on_its_own():
    c = get_kv_cache_coordinator(16, [full(4), sliding(4, 4)], 64, False, True)
    c.allocate_slots("a", 0, 16, None)
    c.remove_skipped_pages("a", 13)  # (13 - 4 + 1) // 4 = 2 sliding pages leave the window
    assert c.get_pages("a") == ([1, 2, 3, 4], [0, 0, 7, 8])
    assert c.page_pool.free_list_ids()[-2:] == [6, 5]
    c.remove_skipped_pages("unknown", 13)  # no entry: nothing to do


def test_caching_off_accepts_any_page_sizes():
    # without prefix caching there are no keys, so page sizes need not be multiples (eSurge)
    c = get_kv_cache_coordinator(16, [full(4), full(6)], 32, False, False)
    assert c.key_page_size is None
    assert c.allocate_slots("a", 0, 12, None) == ([1, 2, 3], [4, 5])


def _freed_prompt(c, groups_hit: int = 2) -> tuple:
    """Request "a" caches 8 tokens (two pages of 4) and frees them; returns its hit."""
    keys = HASHER.hash_request(Request("a", list(range(9))), 4)
    assert c.allocate_slots("a", 0, 9, None) is not None
    c.cache_pages("a", keys, 9)
    c.free("a")
    hits, length = c.find_longest_cache_hit(keys, 8)
    assert length == 4 * groups_hit
    return hits


@pytest.mark.parametrize("bad", [-1, 16, 10**6])  # (16: the first id past the 16-page pool)
@pytest.mark.parametrize("group_shape", [list, tuple])
@pytest.mark.parametrize("slots", [12, 4 * 40])  # the plan fits / its new pages alone do not
def test_a_hit_id_outside_the_pool_is_refused_whether_or_not_the_plan_fits(bad, group_shape, slots):
    """The plan fails without counting the free hits when its new pages alone do not fit
    (`_plan`); an id that is not a page of the pool is still the pool's `ForeignPageError`,
    naming the id, and nothing changes."""
    from verikv import ForeignPageError

    c = get_kv_cache_coordinator(16, [full(4)], 4 * 64, False, True)
    hits = _freed_prompt(c)
    before = state(c)
    with pytest.raises(ForeignPageError, match=str(bad)):
        c.allocate_slots("b", 0, slots, (group_shape([hits[0][0], bad]),))
    assert state(c) == before


def test_a_plan_whose_new_pages_fit_but_not_with_its_free_hits_changes_nothing():
    """16 pages (15 usable), the 2 hit pages free: 52 slots need 13 pages, 11 new ones plus the
    2 free hits taken off the list = 13 <= 15 fits; 60 slots need 15 = 13 new + 2 hits, fits
    exactly; 64 slots need 16 - 2 = 14 new pages (fit 15) + 2 hits = 16 > 15: refused after
    the hits are counted, with nothing changed."""
    c = get_kv_cache_coordinator(16, [full(4)], 4 * 64, False, True)
    hits = _freed_prompt(c)
    before = state(c)
    assert c.allocate_slots("b", 0, 64, hits) is None
    assert state(c) == before
    assert c.allocate_slots("b", 0, 60, hits) is not None
    assert c.page_pool.get_num_free_pages() == 0


def test_a_plan_whose_new_pages_alone_do_not_fit_is_refused_with_nothing_changed():
    c = get_kv_cache_coordinator(16, [full(4)], 4 * 64, False, True)
    hits = _freed_prompt(c)
    before = state(c)
    assert c.allocate_slots("b", 0, 4 * 18, hits) is None  # 16 new pages > 15 free
    assert state(c) == before


# --- the records: a keys-only `RequestState`, or a `HeldState` while pages are held ----------------


def test_a_record_keeps_keys_only_until_pages_are_held_and_again_after_free() -> None:
    from verikv import CacheManager
    from verikv.coordinators import HeldState, RequestState

    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    c, req = m.coordinator, Request("a", list(range(9)))
    hits, n = m.get_computed_pages(req)
    rec = c.records["a"]
    assert type(rec) is RequestState and rec.request is req and len(rec.keys or ()) == 2
    assert c.holding("a") is None and c.holding(3) is None
    assert rec.last_lookup is not None and rec.last_lookup.num_tokens == n == 0
    assert m.allocate_slots(req, 9, n, hits) is not None
    held = c.holding("a")
    assert type(held) is HeldState and held is c.records["a"] and held.keys == rec.keys
    assert held.pages == ([1, 2, 3],) and held.num_cached == [2] and held.shard is None and held.cache_at == 12
    m.free(req)
    kept = c.records["a"]
    assert type(kept) is RequestState and kept.keys == held.keys and c.holding("a") is None
    m.free_page_hashes(req)
    assert "a" not in c.records


def test_a_record_without_keys_goes_when_its_pages_are_freed() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 64, False, True)
    assert c.allocate_slots("a", 0, 8, None) == ([1, 2],)
    c.free("a")
    assert "a" not in c.records


def test_the_retired_coordinator_entry_points_warn_and_keep_their_contracts() -> None:
    """Each names its replacement in a `DeprecationWarning` and still does what it promised."""
    from verikv.coordinators import HeldState, RequestState

    c = get_kv_cache_coordinator(32, [full(4), sliding(4, 8)], 64, False, True)
    req = Request("x", [1, 2])
    with pytest.deprecated_call(match="CacheCoordinator.records"):
        rec = c.record_for("x", req)
    assert type(rec) is RequestState and rec.request is req and c.records["x"] is rec
    with pytest.deprecated_call(match="drop_keys"):
        c.forget_if_idle("x")
    assert "x" not in c.records
    with pytest.deprecated_call(match="allocate_slots"):
        assert c.decode_step(req, 1) is None and c.extend_held(rec, 2) is None
    with pytest.deprecated_call(match="allocate_slots_batch"):
        assert c.decode_work([req, req], 1) == [0, 1]
        c.held_steps([req], 1, [0])
    keys = {}
    for k, rid in enumerate("ab"):
        assert c.allocate_slots(rid, 0, 8, None) is not None
        keys[rid] = HASHER.hash_request(Request(rid, list(range(10 * k, 10 * k + 8))), 4)
    records = [c.holding(rid) for rid in "ab"]
    assert all(type(r) is HeldState for r in records)
    with pytest.deprecated_call(match="CacheManager.cache_pages"):
        c.cache_held_batch(records, [keys["a"], keys["b"]], [8, 8])  # type: ignore[arg-type]
    assert [r.num_cached for r in records if r is not None] == [[2, 2], [2, 2]]
    head = c.page_pool.free_list_ids()[0]
    with pytest.deprecated_call(match="allocate_slots_batch"):
        assert c.decode_steps(records, [1, 0]) == [[head], []]  # type: ignore[arg-type]
    assert c.get_pages("a") == ([1, 2, head], [3, 4]) and c.get_pages("b") == ([5, 6], [7, 8])


def test_a_retired_record_field_warns_and_reads_as_before() -> None:
    from verikv import CacheManager

    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    req = Request("a", list(range(9)))
    m.get_computed_pages(req)
    rec = m.coordinator.records["a"]
    with pytest.deprecated_call(match="last_lookup"):
        assert rec.lookup == (None, *rec.last_lookup)  # type: ignore[attr-defined, misc]
    with pytest.deprecated_call(match="HeldState"):
        assert rec.pages is None and rec.num_cached == [] and rec.shard is None  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        rec.anything_else  # type: ignore[attr-defined]  # noqa: B018


# ---- Checks written for mutants of impl/coordinators.py that the suite let through
# (docs/mutation.md; the equivalent ones are in tools/mutation/triage.toml).
# They state documented behaviour of the coordinators, with expected values derived from the
# arguments (a count of ``n`` tokens needs ``ceil(n / page_size)`` pages, a hit is a multiple of
# every page size, EAGLE drops one largest page), never from what the code returned:
# - every rejected argument is named in its typed error, and the documented bounds accept their
#   edges (``num_pages >= 1``, ``1 <= max_model_len <= 2**31 - 1``);
# - the keyword defaults of the coordinator classes (eSurge's free order, no KV events, Mamba
#   "none" mode) and the Mamba mode falling back to "none" without caching;
# - the hit length is rounded down to the least common multiple of the page sizes before any
#   group is asked, EAGLE drops one page of the largest size, the fixed point covers every group;
# - the all-or-nothing plan counts exactly the pages the step needs and the pages its window
#   frees return, shard by shard;
# - the decode step and the batched decode step take new pages exactly when a page fills up.


SEED11_HASHER = PageHasher("sha256", seed=11)


def held(c: CacheCoordinator, rid: str) -> tuple[list[int], ...]:
    pages = c.get_pages(rid)
    assert pages is not None
    return pages


def record(c: CacheCoordinator, rid: str) -> HeldState:
    """The record of ``rid``, which holds pages."""
    rec = c.holding(rid)
    assert rec is not None
    return rec


def cache_prompt(c: CacheCoordinator, rid: str, tokens: list[int]) -> list[Any]:
    """Allocate and cache ``tokens`` for ``rid`` (it keeps its pages); return its keys."""
    assert c.key_page_size is not None
    keys = SEED11_HASHER.hash_request(Request(rid, tokens), c.key_page_size)
    assert c.allocate_slots(rid, 0, len(tokens), None) is not None
    c.cache_pages(rid, keys, len(tokens))
    return keys


# --- construction: argument names, bounds, defaults ------------------------------------------

@pytest.mark.parametrize("num_pages", [0, -3, "8", 2.0])
def test_a_bad_pool_size_is_rejected_by_name(num_pages: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=named("num_pages")):
        CacheCoordinator(num_pages, [full()], 32, False, True)


@pytest.mark.parametrize("max_model_len", [0, -1, MAX_MODEL_LEN + 1, "32", None])
def test_a_bad_max_model_len_is_rejected_by_name(max_model_len: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=named("max_model_len")):
        CacheCoordinator(8, [full()], max_model_len, False, True)


@pytest.mark.parametrize("max_model_len", [1, MAX_MODEL_LEN])
def test_max_model_len_accepts_both_edges(max_model_len: int) -> None:
    c = CacheCoordinator(8, [full()], max_model_len, False, True)
    assert c.max_model_len == max_model_len


def test_a_pool_of_only_the_null_page_is_accepted() -> None:
    c = CacheCoordinator(1, [full()], 32, False, True)
    assert c.page_pool.num_pages == 1 and c.page_pool.get_num_free_pages() == 0
    assert c.allocate_slots("a", 0, 1, None) is None  # no page to give


@pytest.mark.parametrize("mode", ["bogus", "ALIGN", "", 1, None])
def test_a_bad_mamba_cache_mode_is_rejected(mode: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=named("mamba_cache_mode")):
        CacheCoordinator(8, [full()], 32, False, True, mamba_cache_mode=mode)


@pytest.mark.parametrize("use_eagle, enable_caching", [(1, True), (False, 1), ("yes", False)])
def test_flags_must_be_bools(use_eagle: Any, enable_caching: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        CacheCoordinator(8, [full()], 32, use_eagle, enable_caching)


@pytest.mark.parametrize("cls, groups", [(UnitaryCacheCoordinator, [full()]),
                                         (HybridCacheCoordinator, [full(), sliding(4, 8)]),
                                         (CacheCoordinator, [full()])])
def test_the_keyword_defaults_are_esurge_order_no_events_and_no_mamba_caching(cls: Any, groups: Any) -> None:
    c = cls(8, groups, 32, False, True)
    assert c.page_pool.free_order == "esurge"
    assert c.page_pool.event_log is None
    assert c.mamba_cache_mode == "none"


def test_the_keyword_options_reach_the_pool() -> None:
    c = HybridCacheCoordinator(8, [full(), sliding(4, 8)], 32, False, True, free_order="unhashed-first",
                               enable_kv_events=True)
    assert c.page_pool.free_order == "unhashed-first" and c.page_pool.event_log is not None


def test_mamba_align_needs_caching_and_keeps_the_mode_with_it() -> None:
    on = get_kv_cache_coordinator(16, [full(4), mamba(4)], 32, False, True, mamba_cache_mode="align")
    assert on.mamba_cache_mode == "align"
    assert [m.kind for m in on.single_type_managers] == ["full", "mamba_align"]
    # without caching a Mamba group keeps one state page: the "none" rule (a page >= max_model_len)
    off = get_kv_cache_coordinator(16, [full(4), mamba(32)], 32, False, False, mamba_cache_mode="align")
    assert off.mamba_cache_mode == "none"
    assert [m.kind for m in off.single_type_managers] == ["full", "mamba"]
    with pytest.raises(CacheSpecError):
        get_kv_cache_coordinator(16, [full(4), mamba(4)], 32, False, False, mamba_cache_mode="align")


# --- lookups ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cap", [-1, "8", 8.0, None])
def test_a_bad_hit_cap_is_rejected_by_name(cap: Any) -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    with pytest.raises(InvalidArgumentError, match=named("max_cache_hit_length")):
        c.find_longest_cache_hit([], cap)


@pytest.mark.parametrize("keys", ["ab", b"ab", 5, {1, 2}])
def test_keys_that_are_not_a_sequence_are_rejected(keys: Any) -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    with pytest.raises(InvalidArgumentError, match=named("keys")):
        c.find_longest_cache_hit(keys, 8)


def test_keys_may_be_any_sequence() -> None:
    c = get_kv_cache_coordinator(16, [full(4), sliding(4, 8)], 32, False, True)
    keys = cache_prompt(c, "a", list(range(12)))
    expected = c.find_longest_cache_hit(list(keys), 12)
    assert expected[1] == 12
    assert c.find_longest_cache_hit(tuple(keys), 12) == expected


@pytest.mark.parametrize("page_size, cap, expected", [(3, 9, 9), (3, 8, 6), (3, 5, 3), (5, 14, 10)])
def test_an_odd_page_size_hits_every_whole_page_under_the_cap(page_size: int, cap: int, expected: int) -> None:
    """A hit is the longest whole-page prefix within the cap: cap // page_size pages."""
    c = get_kv_cache_coordinator(16, [full(page_size)], 32, False, True)
    keys = cache_prompt(c, "a", list(range(3 * page_size)))
    hits, length = c.find_longest_cache_hit(keys, cap)
    assert length == expected and len(hits[0]) == expected // page_size


def test_a_hybrid_hit_is_a_multiple_of_every_page_size() -> None:
    c = get_kv_cache_coordinator(32, [full(4), full(8)], 64, False, True)
    keys = cache_prompt(c, "a", list(range(24)))
    for cap, expected in [(24, 24), (23, 16), (15, 8), (7, 0)]:
        hits, length = c.find_longest_cache_hit(keys, cap)
        assert length == expected and [len(h) for h in hits] == [expected // 4, expected // 8]


def test_eagle_drops_one_page_of_the_largest_size() -> None:
    c = get_kv_cache_coordinator(32, [full(4), full(8)], 64, True, True)
    keys = cache_prompt(c, "a", list(range(24)))
    hits, length = c.find_longest_cache_hit(keys, 24)
    assert length == 16 and [len(h) for h in hits] == [4, 2]
    assert c.find_longest_cache_hit(keys, 7) == (([], []), 0)  # no hit: nothing to drop


def test_eagle_with_one_group_drops_one_page() -> None:
    c = get_kv_cache_coordinator(32, [full(4)], 64, True, True)
    keys = cache_prompt(c, "a", list(range(16)))
    hits, length = c.find_longest_cache_hit(keys, 16)
    assert length == 12 and len(hits[0]) == 3


# --- allocation: arguments, the all-or-nothing plan ------------------------------------------------

@pytest.mark.parametrize("arg", ["num_computed_tokens", "num_slots"])
@pytest.mark.parametrize("value", [-1, "4", 4.0, None])
def test_a_bad_token_count_of_an_allocation_is_rejected_by_name(arg: str, value: Any) -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    args = {"num_computed_tokens": 0, "num_slots": 4, arg: value}
    with pytest.raises(InvalidArgumentError, match=named(arg)):
        c.allocate_slots("a", args["num_computed_tokens"], args["num_slots"], None)
    assert c.records == {} and c.page_pool.get_num_free_pages() == 15


@pytest.mark.parametrize("value", [-1, "4", 4.0])
def test_a_bad_state_token_count_is_rejected_by_name(value: Any) -> None:
    c = get_kv_cache_coordinator(16, [full(4), mamba(4)], 32, False, True, mamba_cache_mode="align")
    with pytest.raises(InvalidArgumentError, match=named("num_state_tokens")):
        c.allocate_slots("a", 0, 8, None, num_state_tokens=value)
    assert c.records == {} and c.page_pool.get_num_free_pages() == 15


def test_a_request_id_must_be_a_str() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    with pytest.raises(InvalidArgumentError, match=named("request_id")):
        c.allocate_slots(7, 0, 4, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=named("request_id")):
        c.free(7)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, "4", None])
def test_a_bad_token_count_of_a_page_estimate_is_rejected_by_name(value: Any) -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    with pytest.raises(InvalidArgumentError, match=named("num_tokens")):
        c.get_num_pages_to_allocate("a", value, ([],))
    with pytest.raises(InvalidArgumentError, match=named("num_tokens")):
        c.keys_needed(value)


def test_the_page_estimate_counts_the_pages_each_group_lacks() -> None:
    c = get_kv_cache_coordinator(32, [full(4), sliding(4, 8)], 64, False, True)
    assert c.get_num_pages_to_allocate("a", 9, ([], [])) == 3 + 3  # ceil(9 / 4) per group
    assert c.allocate_slots("a", 0, 8, None) is not None  # 2 pages per group
    assert c.get_num_pages_to_allocate("a", 8, ([], [])) == 0
    assert c.get_num_pages_to_allocate("a", 13, ([], [])) == 2 + 2
    assert c.get_num_pages_to_allocate("a", 0, ([], [])) == 0


def test_hits_are_only_taken_by_a_request_that_holds_nothing() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    assert c.allocate_slots("a", 0, 4, None) == ([1],)
    with pytest.raises(InvalidArgumentError, match="already holds pages"):
        c.allocate_slots("a", 4, 8, ([],))
    assert c.get_pages("a") == ([1],)


@pytest.mark.parametrize("groups", [[full(4)], [full(4), full(8)], [full(4), sliding(4, 8)]])
def test_an_allocation_fits_exactly_when_the_free_pages_cover_it(groups: Any) -> None:
    """A request holding 8 tokens' pages grows to 16 tokens: it needs ceil(16 / ps) - held pages
    per group; with exactly that many free pages it fits, with one fewer nothing changes."""
    sizes = [g.kv_cache_spec.page_size for g in groups]
    held = sum(-(-8 // ps) for ps in sizes)
    need = sum(-(-16 // ps) - -(-8 // ps) for ps in sizes)
    for spare, fits in [(0, True), (-1, False)]:
        c = get_kv_cache_coordinator(1 + held + need + spare, groups, 64, False, True)
        assert c.allocate_slots("a", 0, 8, None) is not None
        before = (c.page_pool.free_list_ids(), c.get_pages("a"))
        new = c.allocate_slots("a", 0, 16, None)
        if fits:
            assert new is not None and sum(map(len, new)) == need
            assert c.page_pool.get_num_free_pages() == 0
        else:
            assert new is None and (c.page_pool.free_list_ids(), c.get_pages("a")) == before


def test_a_window_free_makes_room_for_exactly_the_pages_it_returns() -> None:
    """Sliding window 4, page 4: after 16 computed tokens the first 3 pages have left the
    window; they return to the pool and pay for the step's 3 new pages (no page is free)."""
    c = get_kv_cache_coordinator(5, [sliding(4, 4)], 64, False, True)
    assert c.allocate_slots("a", 0, 16, None) == ([1, 2, 3, 4],)
    assert c.page_pool.get_num_free_pages() == 0
    assert c.allocate_slots("a", 16, 28, None) is not None  # 3 freed, 3 taken
    assert c.page_pool.get_num_free_pages() == 0
    assert [p != 0 for p in held(c, "a")[0]] == [False] * 3 + [True] * 4
    c2 = get_kv_cache_coordinator(5, [sliding(4, 4)], 64, False, True)
    c2.allocate_slots("a", 0, 16, None)
    before = (c2.page_pool.free_list_ids(), c2.get_pages("a"))
    assert c2.allocate_slots("a", 16, 32, None) is None  # needs 4, 3 return
    assert (c2.page_pool.free_list_ids(), c2.get_pages("a")) == before


def test_an_allocation_of_a_dp_shard_counts_only_that_shards_free_pages() -> None:
    # 8 pages, DP 2: shards are 4 pages wide: shard 0 = pages 1..3 (page 0 is the null page),
    # shard 1 = pages 4..7
    c = get_kv_cache_coordinator(8, [full(4)], 64, False, True)
    assert c.allocate_slots("a", 0, 12, None, shard=0, dp=2) == ([1, 2, 3],)
    assert c.allocate_slots("b", 0, 4, None, shard=0, dp=2) is None  # shard 0 is full
    assert c.allocate_slots("b", 0, 16, None, shard=1, dp=2) == ([4, 5, 6, 7],)
    assert record(c, "b").shard == 1


# --- caching, freeing, queries ---------------------------------------------------------------------

def test_caching_needs_the_keys_of_every_groups_full_pages() -> None:
    c = get_kv_cache_coordinator(32, [full(4), full(8)], 64, False, True)
    # keys are at the smallest page size (4): a group of 8-token pages reads every second one
    assert [c.keys_needed(n) for n in (0, 3, 4, 15, 16, 17)] == [0, 0, 1, 3, 4, 4]
    keys = SEED11_HASHER.hash_request(Request("a", list(range(16))), 4)
    assert c.allocate_slots("a", 0, 16, None) is not None
    before = c.page_pool.cached_items()
    with pytest.raises(InvalidArgumentError, match="keys"):
        c.cache_pages("a", keys[:3], 16)
    with pytest.raises(InvalidArgumentError):
        c.cache_pages("a", "not keys", 4)  # type: ignore[arg-type]
    assert c.page_pool.cached_items() == before and record(c, "a").num_cached == [0, 0]
    c.cache_pages("a", keys, 16)
    assert record(c, "a").num_cached == [4, 2]


def test_caching_more_tokens_than_a_group_holds_pages_for_changes_nothing() -> None:
    c = get_kv_cache_coordinator(32, [full(4), full(8)], 64, False, True)
    keys = SEED11_HASHER.hash_request(Request("a", list(range(24))), 4)
    assert c.allocate_slots("a", 0, 8, None) is not None  # 2 + 1 pages
    with pytest.raises(InvalidArgumentError, match="too few pages"):
        c.cache_pages("a", keys, 12)  # group 0 would need 3 pages
    assert c.page_pool.cached_items() == [] and record(c, "a").num_cached == [0, 0]
    c.cache_pages("a", keys, 8)  # exactly what it holds
    assert record(c, "a").num_cached == [2, 1]


def test_caching_a_request_that_holds_nothing_is_an_unknown_request() -> None:
    c = get_kv_cache_coordinator(32, [full(4), full(8)], 64, False, True)
    with pytest.raises(UnknownRequestError):
        c.cache_pages("nobody", [], 0)


def test_free_returns_each_groups_pages_last_first_group_by_group() -> None:
    c = get_kv_cache_coordinator(16, [full(4), full(4)], 64, False, True)
    assert c.allocate_slots("a", 0, 8, None) == ([1, 2], [3, 4])
    c.free("a")
    assert c.page_pool.free_list_ids()[-4:] == [2, 1, 4, 3]
    assert "a" not in c.records and c.get_pages("a") is None
    c.free("a")  # holds nothing: a no-op
    assert c.page_pool.get_num_free_pages() == 15


def test_a_record_with_keys_outlives_its_pages() -> None:
    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    req = Request("a", list(range(9)))
    m.get_computed_pages(req)  # keeps two keys
    m.allocate_slots(req, 9)
    m.free(req)
    assert m.coordinator.holding("a") is None and "a" in m.coordinator.records
    assert m.hashed_request_ids() == ["a"] and m.request_ids() == []
    m.free_page_hashes(req)
    assert m.coordinator.records == {}


def test_common_prefix_pages_are_those_every_running_request_holds() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 64, False, True)
    keys = cache_prompt(c, "a", list(range(12)))
    hits, length = c.find_longest_cache_hit(keys, 11)
    assert length == 8
    assert c.allocate_slots("b", 0, 12, hits) is not None  # shares a's first 2 pages
    assert c.get_num_common_prefix_pages("a", 2) == [2]
    assert c.get_num_common_prefix_pages("a", 1) == [3]
    with pytest.raises(InvalidArgumentError, match=named("num_running_requests")):
        c.get_num_common_prefix_pages("a", 0)
    with pytest.raises(UnknownRequestError):
        c.get_num_common_prefix_pages("nobody", 1)


# --- the decode step and the batched decode step ------------------------------------------------


def decode(m: CacheManager, req: Request, token: int = 7) -> Any:
    """One decode step of ``req``: one new token, then allocate its slot."""
    req.append_output_token_ids(token)
    out = m.allocate_slots(req, 1)
    if out is not None:
        req.num_computed_tokens += 1
    return out


@pytest.mark.parametrize("caching", [True, False])
def test_a_decode_step_takes_a_page_exactly_when_the_last_one_is_full(caching: bool) -> None:
    m = CacheManager(16, [full(4)], 64, caching, hash_seed=1)
    req = running(m, "a", list(range(5)))  # pages 1, 2: room for 8 tokens
    got = [ids(decode(m, req)) for _ in range(5)]  # tokens 6..10
    assert got == [([],), ([],), ([],), ([3],), ([],)]
    assert m.get_page_ids("a") == ([1, 2, 3],)


def test_a_decode_step_up_to_max_model_len_and_not_beyond() -> None:
    m = CacheManager(16, [full(4)], 8, hash_seed=1)
    req = running(m, "a", list(range(7)))
    assert ids(decode(m, req)) == ([],)  # 8 = max_model_len tokens
    req.append_output_token_ids(9)
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots(req, 1)
    assert m.get_page_ids("a") == ([1, 2],)


def test_a_decode_step_that_needs_a_page_when_none_is_free_changes_nothing() -> None:
    m = CacheManager(3, [full(4)], 64, hash_seed=1)
    req = running(m, "a", list(range(8)))  # pages 1, 2: the pool is empty
    assert decode(m, req) is None
    assert m.get_page_ids("a") == ([1, 2],) and req.num_computed_tokens == 8


def test_a_decode_step_of_a_dp_request_takes_its_page_from_its_shard() -> None:
    m = CacheManager(8, [full(4)], 64, hash_seed=1, data_parallel_size=2)  # shard 1 = pages 4..7
    req = running(m, "a", list(range(4)), dp_shard_hint=1, data_parallel_size=2)
    assert m.get_page_ids("a") == ([4],)
    assert ids(decode(m, req)) == ([5],)  # from shard 1, not the pool's head (page 1)
    assert m.request_shard("a") == 1


def test_a_decode_step_of_a_full_shard_fails_even_with_other_shards_free() -> None:
    m = CacheManager(8, [full(4)], 64, hash_seed=1, data_parallel_size=2)  # shard 0 = pages 1..3
    req = running(m, "a", list(range(12)), dp_shard_hint=0, data_parallel_size=2)
    assert m.get_page_ids("a") == ([1, 2, 3],)
    assert decode(m, req) is None and m.page_pool.get_num_free_pages() == 4


def test_a_decode_step_that_fills_a_page_caches_it() -> None:
    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    req = running(m, "a", list(range(6)))  # pages 1, 2; page 1 cached
    assert m.num_cached_pages("a") == [1]
    decode(m, req, 6)  # 7 tokens
    assert m.num_cached_pages("a") == [1]
    decode(m, req, 7)  # 8 tokens: page 2 is full and computed after the next step
    decode(m, req, 8)  # 9 tokens computed up to 8: page 2 cached, page 3 taken
    assert m.num_cached_pages("a") == [2] and m.get_page_ids("a") == ([1, 2, 3],)
    hit, n = m.get_computed_pages(Request("b", list(range(9)) + [50]))
    assert (hit.get_page_ids(), n) == (([1, 2],), 8)


def test_a_batch_of_decode_steps_hands_pages_out_in_order() -> None:
    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    reqs = [running(m, rid, list(range(k * 10, k * 10 + n))) for k, (rid, n) in enumerate(
        [("a", 4), ("b", 5), ("c", 8), ("d", 3)])]
    assert [m.get_page_ids(r.request_id) for r in reqs] == [([1],), ([2, 3],), ([4, 5],), ([6],)]
    for r in reqs:
        r.append_output_token_ids(1)
    out = m.allocate_slots_batch(reqs, 1)
    # a (5 tokens) and c (9 tokens) cross a page boundary, b (6) and d (4) do not
    assert [ids(o) for o in out] == [([7],), ([],), ([8],), ([],)]
    assert m.page_pool.get_num_free_pages() == 15 - 8


def test_a_batch_of_decode_steps_that_do_not_all_fit_gives_pages_in_order_until_none_is_left() -> None:
    m = CacheManager(7, [full(4)], 64, hash_seed=1)  # pages 1..6
    reqs = [running(m, rid, list(range(k * 10, k * 10 + 4))) for k, rid in enumerate("abcde")]
    assert m.page_pool.get_num_free_pages() == 1
    for r in reqs:
        r.append_output_token_ids(1)
    out = m.allocate_slots_batch(reqs, 1)
    assert [None if o is None else ids(o) for o in out] == [([6],), None, None, None, None]
    assert [m.get_page_ids(r.request_id) for r in reqs] == [([1, 6],), ([2],), ([3],), ([4],), ([5],)]


def test_a_batch_with_a_dp_request_takes_its_pages_from_the_shards() -> None:
    m = CacheManager(8, [full(4)], 64, hash_seed=1, data_parallel_size=2)
    a = running(m, "a", list(range(4)), dp_shard_hint=1, data_parallel_size=2)  # page 4
    b = running(m, "b", list(range(10, 14)), dp_shard_hint=0, data_parallel_size=2)  # page 1
    for r in (a, b):
        r.append_output_token_ids(1)
    out = m.allocate_slots_batch([a, b], 1)
    assert [ids(o) for o in out] == [([5],), ([2],)]


def test_a_batch_of_steps_within_their_pages_changes_nothing() -> None:
    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    reqs = [running(m, rid, list(range(k * 10, k * 10 + 5))) for k, rid in enumerate("ab")]
    for r in reqs:
        r.append_output_token_ids([1, 2])
    free = m.page_pool.free_list_ids()
    assert [ids(o) for o in m.allocate_slots_batch(reqs, [1, 2])] == [([],), ([],)]
    assert m.page_pool.free_list_ids() == free
    assert [m.get_page_ids(r.request_id) for r in reqs] == [([1, 2],), ([3, 4],)]


def test_a_batch_step_up_to_max_model_len_and_not_beyond() -> None:
    m = CacheManager(16, [full(4)], 8, hash_seed=1)
    a = running(m, "a", list(range(7)))
    a.append_output_token_ids(1)
    assert [ids(o) for o in m.allocate_slots_batch([a], 1)] == [([],)]
    a.num_computed_tokens = 8
    a.append_output_token_ids(1)
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots_batch([a], 1)


def test_a_batch_step_of_a_hybrid_model_takes_pages_in_every_group() -> None:
    m = CacheManager(32, [full(4), sliding(4, 4)], 64, hash_seed=1)
    a = running(m, "a", list(range(8)))  # ([1, 2], [3, 4])
    a.append_output_token_ids(1)
    out = m.allocate_slots_batch([a], 1)
    assert ids(out[0]) == ([5], [6])


# --- Mamba align: the plan with state pages ---------------------------------------------------------
# full attention (page 4) + Mamba align (page 8): a step ending at T tokens puts the state in
# Mamba page cdiv(T, 8) - 1; the state page the step starts from is kept for that step and the
# older ones are freed.

def mamba_manager(num_pages: int, groups: list[CacheGroupSpec] | None = None, **kw: Any) -> CacheManager:
    return CacheManager(num_pages, groups or [full(4), mamba(8)], 64, hash_seed=1, mamba_cache_mode="align", **kw)


def step(m: CacheManager, req: Request, n: int, **kw: Any) -> Any:
    """Allocate ``n`` more tokens of ``req``'s prompt; on success they count as computed."""
    out = m.allocate_slots(req, n, **kw)
    if out is not None:
        req.num_computed_tokens += n
    return out


def snapshot(m: CacheManager, rid: str) -> tuple[Any, ...]:
    return m.page_pool.free_list_ids(), m.get_page_ids(rid)


def test_mamba_a_step_fits_when_its_freed_state_page_makes_up_the_shortfall() -> None:
    """8 tokens, then 9 (a new state page, the first kept), then 17: the full group needs 2 more
    pages and the state 1 (3 in all); the step frees the state after 8 tokens, so 2 free pages
    and that one cover it exactly."""
    m = mamba_manager(8)  # pages 1..7
    req = Request("a", list(range(17)))
    assert ids(step(m, req, 8)) == ([1, 2], [3])
    assert ids(step(m, req, 1)) == ([4], [5])
    assert m.get_page_ids("a") == ([1, 2, 4], [3, 5]) and m.page_pool.get_num_free_pages() == 2
    new = step(m, req, 8)
    assert new is not None and sorted(ids(new)[0] + ids(new)[1]) == [3, 6, 7]
    assert m.page_pool.get_num_free_pages() == 0 and m.get_page_ids("a")[1][:2] == [0, 5]


def test_mamba_a_step_one_page_short_changes_nothing() -> None:
    m = mamba_manager(7)  # pages 1..6: one page fewer than the step above needs
    req = Request("a", list(range(17)))
    step(m, req, 8)
    step(m, req, 1)
    before = snapshot(m, "a")
    assert m.allocate_slots(req, 8) is None
    assert snapshot(m, "a") == before


def test_mamba_lookahead_slots_need_attention_pages_but_no_state_page() -> None:
    """From 9 to 10 tokens with 8 lookahead slots (18): the full group needs 5 pages (2 more), the
    state after 10 tokens stays in its page; the state after 8 is freed: 1 free page is enough."""
    m = mamba_manager(7)  # pages 1..6
    req = Request("a", list(range(10)))
    step(m, req, 8)
    step(m, req, 1)
    assert m.page_pool.get_num_free_pages() == 1
    new = step(m, req, 1, num_lookahead_tokens=8)
    assert new is not None and len(ids(new)[0]) == 2 and ids(new)[1] == []
    assert m.get_page_ids("a")[1] == [0, 5]


def test_mamba_lookahead_slots_are_counted_for_attention_pages() -> None:
    m = mamba_manager(4)  # pages 1..3
    req = Request("a", list(range(6)))
    before = m.page_pool.free_list_ids()
    assert m.allocate_slots(req, 6, num_lookahead_tokens=4) is None  # 3 attention + 1 state pages
    assert m.page_pool.free_list_ids() == before and m.request_ids() == []
    m5 = mamba_manager(5)
    assert ids(m5.allocate_slots(req, 6, num_lookahead_tokens=4)) == ([1, 2, 3], [4])


def test_mamba_a_dp_request_takes_every_page_from_its_shard() -> None:
    m = mamba_manager(16, data_parallel_size=2)  # shard 1 = pages 8..15
    req = Request("a", list(range(17)))
    assert ids(step(m, req, 8, dp_shard_hint=1, data_parallel_size=2)) == ([8, 9], [10])
    assert m.request_shard("a") == 1
    assert ids(step(m, req, 1)) == ([11], [12])
    assert all(8 <= p < 16 for group in m.get_page_ids("a") for p in group if p)


def test_mamba_a_dp_request_is_refused_when_its_shard_is_short() -> None:
    m = mamba_manager(16, data_parallel_size=2)  # each shard holds 8 pages (shard 0: 7 real)
    req = Request("a", list(range(28)))
    before = m.page_pool.free_list_ids()
    # 28 tokens: 7 attention pages + 1 state page = 8 > the 7 pages of shard 0 (15 are free)
    assert m.allocate_slots(req, 28, dp_shard_hint=0, data_parallel_size=2) is None
    assert m.page_pool.free_list_ids() == before and m.request_ids() == []
    assert ids(m.allocate_slots(req, 24, dp_shard_hint=0, data_parallel_size=2)) == (
        [1, 2, 3, 4, 5, 6], [7])


def test_mamba_with_a_sliding_window_counts_the_pages_both_groups_free() -> None:
    """Sliding window 4 (page 4) + Mamba align (page 8). A step from ``n`` computed tokens frees
    the window pages before index (n - 4 + 1) // 4 and the state pages before the one after
    ``n`` tokens; those that return to the pool pay for the step's new pages."""
    m = mamba_manager(7, [sliding(4, 4), mamba(8)])  # pages 1..6
    req = Request("a", list(range(25)))
    assert ids(step(m, req, 8)) == ([1, 2], [3])
    assert ids(step(m, req, 1)) == ([4], [5])  # page 1 left the window (to the tail)
    assert m.get_page_ids("a") == ([0, 2, 4], [3, 5]) and m.page_pool.free_list_ids() == [6, 1]
    # to 17: 2 window pages + 1 state page; 2 free + the state after 8 tokens (page 3)
    assert ids(step(m, req, 8)) == ([6, 1], [3])
    assert m.get_page_ids("a") == ([0, 2, 4, 6, 1], [0, 5, 3]) and m.page_pool.get_num_free_pages() == 0
    # to 25: 2 window pages + 1 state page, none free; window pages 2, 4 and state page 5 return
    new = step(m, req, 8)
    assert new is not None and sorted(ids(new)[0] + ids(new)[1]) == [2, 4, 5]
    assert [p != 0 for p in m.get_page_ids("a")[0]] == [False] * 3 + [True] * 4
    assert [p != 0 for p in m.get_page_ids("a")[1]] == [False, False, True, True]


def test_mamba_with_a_sliding_window_one_page_short_changes_nothing() -> None:
    m = mamba_manager(6, [sliding(4, 4), mamba(8)])  # pages 1..5: one fewer than above
    req = Request("a", list(range(25)))
    step(m, req, 8)
    step(m, req, 1)
    before = snapshot(m, "a")
    assert m.allocate_slots(req, 8) is None  # needs 3: 1 free + 1 state page returning
    assert snapshot(m, "a") == before


def test_mamba_remove_skipped_pages_frees_the_states_before_the_current_one() -> None:
    m = mamba_manager(16)
    req = Request("a", list(range(17)))
    step(m, req, 8)
    step(m, req, 1)
    assert m.get_page_ids("a") == ([1, 2, 4], [3, 5])
    m.coordinator.remove_skipped_pages("a", 9)  # the state after 9 tokens is page 5's
    assert m.get_page_ids("a") == ([1, 2, 4], [0, 5])
    assert m.page_pool.ref_count(3) == 0 and m.page_pool.free_list_ids()[-1] == 3
    m.coordinator.remove_skipped_pages("a", 9)  # nothing more to free
    assert m.get_page_ids("a") == ([1, 2, 4], [0, 5])


# --- the shape of prefix hits given back ----------------------------------------------------------

def hit_pages(groups: list[CacheGroupSpec]) -> tuple[CacheCoordinator, tuple[list[int], ...]]:
    """A coordinator whose request "a" cached 8 tokens and was freed, and the hit it left."""
    c = get_kv_cache_coordinator(16, groups, 64, False, True)
    keys = cache_prompt(c, "a", list(range(9)))
    c.free("a")
    hits, length = c.find_longest_cache_hit(keys, 8)
    assert length == 8
    return c, hits


@pytest.mark.parametrize("shape", [tuple, list])
@pytest.mark.parametrize("group_shape", [tuple, list])
def test_hits_may_be_any_sequence_of_sequences_of_page_ids(shape: Any, group_shape: Any) -> None:
    c, hits = hit_pages([full(4), sliding(4, 8)])
    given = shape(group_shape(h) for h in hits)
    assert c.allocate_slots("b", 0, 12, given) is not None
    assert held(c, "b")[0][:2] == list(hits[0])
    assert [c.page_pool.ref_count(p) for p in hits[0]] == [1, 1]


@pytest.mark.parametrize("bad", [{(1, 2)}, "ab", b"ab", 3, {0: [1, 2]}])
def test_hits_that_are_not_one_sequence_per_group_are_rejected(bad: Any) -> None:
    c, _ = hit_pages([full(4)])
    free = c.page_pool.free_list_ids()
    with pytest.raises(InvalidArgumentError, match="one page-id list per group"):
        c.allocate_slots("b", 0, 12, bad)
    assert c.page_pool.free_list_ids() == free and c.get_pages("b") is None


@pytest.mark.parametrize("bad", ["ab", b"\x01\x02", {1, 2}, 7])
def test_a_groups_hits_that_are_not_a_sequence_are_rejected(bad: Any) -> None:
    c, _ = hit_pages([full(4)])
    with pytest.raises(InvalidArgumentError, match="hits must be a sequence") as raised:
        c.allocate_slots("b", 0, 12, (bad,))
    assert not isinstance(raised.value, __import__("verikv").ForeignPageError)
    assert c.get_pages("b") is None


def test_hit_page_ids_must_be_ints_and_not_the_null_page_in_a_full_group() -> None:
    from verikv import ForeignPageError

    c, hits = hit_pages([full(4), sliding(4, 8)])
    with pytest.raises(ForeignPageError):
        c.allocate_slots("b", 0, 12, ([1.0, 2], hits[1]))  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="null page"):
        c.allocate_slots("b", 0, 12, ([0, hits[0][1]], hits[1]))
    assert c.allocate_slots("b", 0, 12, (hits[0], [0, hits[1][1]])) is not None  # a window may lead with it


def test_common_prefix_pages_need_one_running_request_even_without_a_full_group() -> None:
    c = get_kv_cache_coordinator(16, [sliding(4, 4)], 64, False, True)
    c.allocate_slots("a", 0, 8, None)
    assert c.get_num_common_prefix_pages("a", 1) == [0]
    with pytest.raises(InvalidArgumentError, match=named("num_running_requests")):
        c.get_num_common_prefix_pages("a", 0)


def test_the_page_estimate_takes_integral_counts_and_counts_the_hits() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 64, False, True)
    assert c.get_num_pages_to_allocate("a", np.int64(9), ([],)) == 3  # type: ignore[arg-type]
    assert c.get_num_pages_to_allocate("a", np.int64(0), ([],)) == 0  # type: ignore[arg-type]
    keys = cache_prompt(c, "a", list(range(9)))  # a keeps pages 1..3
    hits, length = c.find_longest_cache_hit(keys, 8)
    assert (hits, length) == (([1, 2],), 8)
    # 12 tokens from an 8-token hit of held pages: one new page
    assert c.get_num_pages_to_allocate("b", 12, hits) == 1
    c.free("a")  # the hit pages are free now: reviving them takes them from the free list too
    assert c.get_num_pages_to_allocate("b", 12, hits) == 3


def test_mamba_a_hit_of_held_pages_leaves_the_free_pages_for_the_new_ones() -> None:
    """b hits the 8 tokens a still holds (2 attention pages, the state after 8 tokens): it needs
    one attention page and one state page, exactly the 2 free pages."""
    m = mamba_manager(8)  # pages 1..7
    a = Request("a", list(range(9)))
    step(m, a, 8)
    step(m, a, 1)
    assert m.get_page_ids("a") == ([1, 2, 4], [3, 5]) and m.page_pool.get_num_free_pages() == 2
    b = Request("b", list(range(8)) + [99])
    hit, n = m.get_computed_pages(b)
    assert (hit.get_page_ids(), n) == (([1, 2], [3]), 8)
    assert ids(m.allocate_slots(b, 1, 8, hit)) == ([6], [7])
    assert m.get_page_ids("b") == ([1, 2, 6], [3, 7])


def test_mamba_remove_skipped_pages_goes_on_to_the_groups_after_a_mamba_group() -> None:
    m = mamba_manager(16, [mamba(8), sliding(4, 4)])
    req = Request("a", list(range(17)))
    step(m, req, 8)
    step(m, req, 1)
    assert m.get_page_ids("a") == ([1, 4], [0, 3, 5])  # page 2 left the window at the second step
    m.coordinator.remove_skipped_pages("a", 12)  # the state after 8 goes; window start (12 - 4 + 1) // 4 = 2
    assert m.get_page_ids("a") == ([0, 4], [0, 0, 5])


@pytest.mark.parametrize("groups", [[full(4), sliding(4, 8)], [full(4), full(8)]])
def test_a_hybrid_lookup_of_a_dp_shard_hits_only_that_shards_pages(groups: Any) -> None:
    """16 pages, DP 2 (shard 1 = pages 8..15): a prompt cached in shard 1 is a hit there and a
    miss in shard 0."""
    c = get_kv_cache_coordinator(16, groups, 64, False, True)
    tokens = list(range(17))
    assert c.key_page_size is not None
    keys = SEED11_HASHER.hash_request(Request("a", tokens), c.key_page_size)
    assert c.allocate_slots("a", 0, 16, None, shard=1, dp=2) is not None
    c.cache_pages("a", keys, 16)
    assert all(8 <= p < 16 for group in held(c, "a") for p in group)
    hits, length = c.find_longest_cache_hit(keys, 16, shard=1, dp=2)
    assert length == 16 and all(8 <= p < 16 for group in hits for p in group if p)
    assert c.find_longest_cache_hit(keys, 16, shard=0, dp=2)[1] == 0


def test_each_groups_hit_pages_are_its_own_rule_at_the_common_length() -> None:
    """Seeded random hybrid layouts (full, sliding, chunked; page 4 or 8) and prompts sharing
    prefixes, some pages evicted: the common hit gives each group exactly the pages its own
    manager's rule gives at the common length (docstring: every group accepts exactly it)."""
    import random

    rng = random.Random(0)
    make = {"full": lambda ps, span: full(ps), "sliding": sliding, "chunked": chunked}
    checked = 0
    for _ in range(300):
        kinds = [(rng.choice(["full", "sliding", "chunked"]), rng.choice([4, 8]), rng.choice([4, 8, 12, 16]))
                 for _ in range(rng.choice([2, 3, 3, 4]))]
        if not any(k == "full" for k, _, _ in kinds) and rng.random() < 0.5:
            kinds[0] = ("full", kinds[0][1], 0)
        eagle = rng.random() < 0.4
        if eagle:
            kinds = [("sliding" if k == "chunked" else k, p, s) for k, p, s in kinds]
        try:
            c = get_kv_cache_coordinator(64, [make[k](p, s) for k, p, s in kinds], 128, eagle, True)
        except CacheSpecError:
            continue
        assert c.key_page_size is not None
        base = [rng.randrange(5) for _ in range(40)]
        for r in range(4):
            tokens = base[: rng.randrange(8, 40)] + [rng.randrange(5) for _ in range(rng.randrange(0, 8))]
            keys = SEED11_HASHER.hash_request(Request(f"r{r}", tokens), c.key_page_size)
            if c.allocate_slots(f"r{r}", 0, len(tokens), None) is None:
                continue
            c.cache_pages(f"r{r}", keys, len(tokens))
            if rng.random() < 0.7:
                c.free(f"r{r}")
            if rng.random() < 0.5 and c.allocate_slots("filler", 0, rng.randrange(1, 6) * 8, None) is not None:
                c.free("filler")
            query = base[: rng.randrange(8, 40)] + [9]
            qkeys = SEED11_HASHER.hash_request(Request("q", query), c.key_page_size)
            for cap in (len(query) - 1, rng.randrange(0, len(query))):
                hits, length = c.find_longest_cache_hit(qkeys, cap)
                for gid, m in enumerate(c.single_type_managers):
                    assert hits[gid] == m.find_longest_cache_hit(qkeys, length, (gid,))[0], (kinds, eagle, cap)
                checked += 1
    assert checked > 1000


def test_a_batch_step_past_max_model_len_is_rejected_even_with_room_in_its_pages() -> None:
    """max_model_len 6, pages of 4: a request of 6 tokens holds 2 pages (room for 8); one more
    token would be its 7th: the batch is work for the checked path, which rejects it."""
    m = CacheManager(16, [full(4)], 6, hash_seed=1)
    a = running(m, "a", list(range(6)))
    a.append_output_token_ids(1)
    free = m.page_pool.free_list_ids()
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots_batch([a], 1)
    assert m.page_pool.free_list_ids() == free and m.get_page_ids("a") == ([1, 2],)


def test_a_hit_cap_of_any_integral_type_is_an_exact_int() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    keys = cache_prompt(c, "a", list(range(9)))
    assert c.find_longest_cache_hit(keys, np.int64(0)) == (([],), 0)  # type: ignore[arg-type]
    assert c.find_longest_cache_hit(keys, np.int64(8)) == (([1, 2],), 8)  # type: ignore[arg-type]


def test_the_pool_size_is_checked_first_and_accepts_its_upper_edge() -> None:
    """num_pages is checked before max_model_len: at its upper edge (page ids up to MAX_PAGE_ID)
    the error is about max_model_len, one page more and it is about num_pages. (A bad
    max_model_len stops the construction before a pool that size is allocated.)"""
    from verikv.free_queue import MAX_PAGE_ID

    with pytest.raises(InvalidArgumentError, match=named("max_model_len")):
        CacheCoordinator(MAX_PAGE_ID + 1, [full()], 0, False, True)
    with pytest.raises(InvalidArgumentError, match=named("num_pages")):
        CacheCoordinator(MAX_PAGE_ID + 2, [full()], 0, False, True)


def test_without_caching_no_request_keeps_keys() -> None:
    m = CacheManager(16, [full(4)], 8, False, hash_seed=1)
    req = Request("a", list(range(8)))
    assert ids(m.allocate_slots(req, 8)) == ([1, 2],)
    assert m.hashed_request_ids() == [] and m.page_hashes_of("a") == ()
    assert m.get_computed_pages(Request("b", list(range(8))))[1] == 0


def test_a_one_token_hit_of_one_token_pages_is_looked_up_in_every_group() -> None:
    c = get_kv_cache_coordinator(16, [full(1), full(1)], 32, False, True)
    keys = cache_prompt(c, "a", [5, 6, 7])
    pages = held(c, "a")
    assert c.find_longest_cache_hit(keys, 1) == (([pages[0][0]], [pages[1][0]]), 1)
    assert c.find_longest_cache_hit(keys, 2) == ((pages[0][:2], pages[1][:2]), 2)


@pytest.mark.parametrize("groups", [[full(4)], [full(4), sliding(4, 8)]])
@pytest.mark.parametrize("caching", [True, False])
def test_the_dispatch_passes_every_option_to_the_coordinator_it_picks(groups: Any, caching: bool) -> None:
    c = get_kv_cache_coordinator(16, groups, 32, False, caching, free_order="unhashed-first", enable_kv_events=True)
    assert c.page_pool.free_order == "unhashed-first" and c.page_pool.event_log is not None
    assert c.page_pool.enable_caching is caching
    plain = get_kv_cache_coordinator(16, groups, 32, False, caching)
    assert plain.page_pool.free_order == "esurge" and plain.page_pool.event_log is None


def test_the_dispatch_passes_the_mamba_mode() -> None:
    c = get_kv_cache_coordinator(16, [full(4), mamba(8)], 32, False, True, mamba_cache_mode="align")
    assert [m.kind for m in c.single_type_managers] == ["full", "mamba_align"]


def test_allocation_counts_of_any_integral_type_are_exact_ints() -> None:
    c = get_kv_cache_coordinator(16, [full(4)], 32, False, True)
    assert c.allocate_slots("a", np.int64(0), np.int64(5), None) == ([1, 2],)  # type: ignore[arg-type]
    assert c.allocate_slots("a", np.int64(5), np.int64(0), None) == ([],)  # type: ignore[arg-type]
    assert c.keys_needed(np.int64(9)) == 2 and c.keys_needed(np.int64(0)) == 0  # type: ignore[arg-type]


def test_caching_a_partial_last_page_caches_the_whole_ones() -> None:
    c = get_kv_cache_coordinator(32, [full(4), sliding(4, 8)], 64, False, True)
    keys = SEED11_HASHER.hash_request(Request("a", list(range(9))), 4)
    assert c.allocate_slots("a", 0, 8, None) is not None  # 2 pages per group
    c.cache_pages("a", keys, 9)  # 9 tokens: 2 whole pages in each group
    assert record(c, "a").num_cached == [2, 2]


def test_eagle_drops_a_one_token_hit() -> None:
    c = get_kv_cache_coordinator(16, [full(1)], 32, True, True)
    keys = cache_prompt(c, "a", [5, 6, 7])
    assert c.find_longest_cache_hit(keys, 1) == (([],), 0)
    assert c.find_longest_cache_hit(keys, 2)[1] == 1


def test_eagle_lookups_of_a_dp_shard_stay_in_it() -> None:
    """The same prompt is cached in both shards (16 pages, DP 2): a lookup in shard 0 returns
    shard-0 pages in both of EAGLE's passes."""
    c = get_kv_cache_coordinator(16, [full(4), full(8)], 64, True, True)
    tokens = list(range(17))
    keys = SEED11_HASHER.hash_request(Request("x", tokens), 4)
    for rid, shard in (("in1", 1), ("in0", 0)):
        assert c.allocate_slots(rid, 0, 16, None, shard=shard, dp=2) is not None
        c.cache_pages(rid, keys, 16)
    for shard, (lo, hi) in ((0, (1, 8)), (1, (8, 16))):
        hits, length = c.find_longest_cache_hit(keys, 16, shard=shard, dp=2)
        assert length == 8 and all(lo <= p < hi for group in hits for p in group), (shard, hits)


def test_a_layout_whose_groups_never_cache_has_no_key_page_size() -> None:
    c = get_kv_cache_coordinator(8, [mamba(64)], 64, False, True)
    assert c.key_page_size is None and c.keys_needed(64) == 0


def test_two_windowed_groups_both_count_the_pages_they_free() -> None:
    """Two sliding-window groups (window 4, page 4) hold 4 pages each and the pool is empty. The
    step from 16 to 28 tokens frees pages 0..2 of each group and needs 3 new pages in each: the
    6 returning pages cover it exactly."""
    c = get_kv_cache_coordinator(9, [sliding(4, 4), sliding(4, 4)], 64, False, True)
    assert c.allocate_slots("a", 0, 16, None) == ([1, 2, 3, 4], [5, 6, 7, 8])
    new = c.allocate_slots("a", 16, 28, None)
    assert new is not None and sorted(new[0] + new[1]) == [1, 2, 3, 5, 6, 7]
    assert c.page_pool.get_num_free_pages() == 0


def test_a_window_step_fits_on_free_pages_plus_the_pages_it_frees() -> None:
    """Sliding window 4 (page 4): 4 pages held, 1 free. From 16 to 32 tokens the step needs 4
    pages and frees 3: 1 + 3 covers it."""
    c = get_kv_cache_coordinator(6, [sliding(4, 4)], 64, False, True)
    assert c.allocate_slots("a", 0, 16, None) == ([1, 2, 3, 4],)
    new = c.allocate_slots("a", 16, 32, None)
    assert new is not None and sorted(new[0]) == [1, 2, 3, 5]
    assert c.page_pool.get_num_free_pages() == 0


def test_mamba_a_state_page_taken_as_a_hit_is_freed_once_the_state_moves_on() -> None:
    m = mamba_manager(16)
    a = Request("a", list(range(9)))
    step(m, a, 8)
    step(m, a, 1)  # a holds the state after 8 tokens in page 3
    b = Request("b", list(range(8)) + [99] * 9)
    hit, n = m.get_computed_pages(b)
    assert (hit.get_page_ids()[1], n) == ([3], 8)
    b.num_computed_tokens = 0
    m.allocate_slots(b, 1, 8, hit)
    b.num_computed_tokens = 9
    held_b = m.get_page_ids("b")[1]
    assert held_b[0] == 3 and m.page_pool.ref_count(3) == 2
    step(m, b, 8)  # 17 tokens: b's step starts from its state after 9; the hit state is dropped
    assert m.get_page_ids("b")[1][0] == 0 and m.page_pool.ref_count(3) == 1


def test_mamba_the_state_goes_to_the_slots_end_by_default() -> None:
    c = get_kv_cache_coordinator(16, [full(4), mamba(8)], 64, False, True, mamba_cache_mode="align")
    assert c.allocate_slots("a", 0, 9, None) == ([1, 2, 3], [4])  # state after 9 tokens: Mamba page 1
    assert held(c, "a") == ([1, 2, 3], [0, 4])


def test_a_hit_given_back_after_the_request_freed_its_pages_is_checked_by_its_keys() -> None:
    m = CacheManager(16, [full(4)], 64, hash_seed=1)
    seed = Request("seed", list(range(9)))
    m.allocate_slots(seed, 9)
    m.free(seed)
    a = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(a)
    assert m.allocate_slots(a, 1, n, hit) is not None
    m.free(a)  # a keeps its keys
    again, n = m.get_computed_pages(Request("other", list(range(9))))
    assert n == 8 and m.allocate_slots(a, 1, 8, again) is not None


@pytest.mark.parametrize("zero", [0, np.int64(0)])
def test_mamba_zero_state_tokens_take_no_state_page(zero: Any) -> None:
    c = get_kv_cache_coordinator(16, [full(4), mamba(8)], 64, False, True, mamba_cache_mode="align")
    assert c.allocate_slots("a", 0, 4, None, num_state_tokens=zero) == ([1], [])


# --- found by the run on ecbc580 ------------------------------------------------------------------


@pytest.mark.parametrize(("per", "need", "keyed"), [
    (4, 1, [3, 7]), (4, 2, [2, 3, 6, 7]), (4, 3, [1, 2, 3, 5, 6, 7]), (4, 4, list(range(8))), (4, 6, list(range(8))),
])
def test_a_sliding_page_can_hit_only_among_the_last_pages_of_each_hit_unit(per: int, need: int,
                                                                            keyed: list[int]) -> None:
    """docs/semantics.md: page j is kept when ``need >= per`` or ``j % per >= per - need``."""
    assert [j for j in range(8) if sliding_page_can_hit(j, per, need)] == keyed


@pytest.mark.parametrize(("window", "keyed"), [
    (1, [3, 7]), (2, [3, 7]), (3, [3, 7]), (4, [2, 3, 6, 7]), (5, [2, 3, 6, 7]), (7, [1, 2, 3, 5, 6, 7]),
    (9, list(range(8))),
])
def test_skipping_unreachable_sliding_pages_keys_the_pages_a_hit_needs(window: int, keyed: list[int]) -> None:
    """Full attention (page 8) + sliding (page 2): a hit unit is 4 sliding pages, and a hit needs
    the last ``max(1, cdiv(window - 1, 2))`` of them (docs/semantics.md); 16 tokens fill 8 pages."""
    c = get_kv_cache_coordinator(64, [full(8), sliding(2, window)], 64, False, True,
                                 skip_unreachable_sliding_pages=True)
    tokens = list(range(16))
    assert c.allocate_slots("r", 0, 16, None) is not None
    c.cache_pages("r", SEED11_HASHER.hash_request(Request("r", tokens), 2), 16)
    pages = c.get_pages("r")
    assert pages is not None
    assert [j for j, p in enumerate(pages[1]) if c.page_pool.key_of(p) is not None] == keyed
    assert all(c.page_pool.key_of(p) is not None for p in pages[0])  # full attention: every page


# --- the decode batch's work list (DecodeFastPaths.batch_work, through the manager's batch) -----
# Every position whose single call may do something or raises is in the work list; leaving one
# out returns "no new page" for it without the call.

COUNTS = [pytest.param(lambda n: 1, id="one count"), pytest.param(lambda n: [1] * n, id="a count each")]


def _manager() -> CacheManager:
    return CacheManager(32, [full(4)], 64, hash_seed=1)


def _pages_and_keys(m: CacheManager) -> tuple[Any, ...]:
    return (m.page_pool.free_list_ids(), {rid: m.get_page_ids(rid) for rid in m.request_ids()},
            sorted(map(repr, m.page_pool.cached_items())))


def _held_and_imposter() -> tuple[CacheManager, Request]:
    """A manager where "a" runs with 2 pages (room for 8 tokens, caching next due at 8), and
    another RUNNING object under the id "a" whose 6 + 1 tokens would fit."""
    m = _manager()
    running(m, "a", list(range(6)))
    imposter = Request("a", list(range(7)))
    imposter.num_computed_tokens, imposter.status = 6, RequestStatus.RUNNING
    return m, imposter


@pytest.mark.parametrize("counts", COUNTS)
def test_a_batch_refuses_another_object_under_a_held_id_even_when_its_step_fits(counts: Any) -> None:
    m, imposter = _held_and_imposter()
    before = _pages_and_keys(m)
    with pytest.raises(InvalidArgumentError, match="another Request object"):
        m.allocate_slots_batch([imposter], counts(1))
    assert _pages_and_keys(m) == before


@pytest.mark.parametrize("counts", COUNTS)
def test_a_batch_admits_a_request_that_holds_nothing(counts: Any) -> None:
    m = _manager()
    out = m.allocate_slots_batch([Request("new", [1, 2, 3])], counts(1))
    assert out[0] is not None and len(out[0].get_page_ids()[0]) == 1


@pytest.mark.parametrize("counts", COUNTS)
def test_a_batch_readmits_a_preempted_request_whose_keys_are_kept(counts: Any) -> None:
    m = _manager()
    req = running(m, "a", list(range(8)))  # its 2 pages are cached: the record keeps the keys
    m.free(req)
    req.num_computed_tokens, req.status = 0, RequestStatus.PREEMPTED
    out = m.allocate_slots_batch([req], counts(1))
    assert out[0] is not None and len(out[0].get_page_ids()[0]) == 1


@pytest.mark.parametrize("counts", COUNTS)
def test_a_finished_request_in_a_batch_raises_even_when_its_step_fits(counts: Any) -> None:
    m = _manager()
    req = running(m, "a", list(range(6)))  # room for 8 tokens
    req.status = RequestStatus.FINISHED_STOPPED
    before = _pages_and_keys(m)
    with pytest.raises(InvalidArgumentError, match="finished"):
        m.allocate_slots_batch([req], counts(1))
    assert _pages_and_keys(m) == before


def test_a_coordinator_keys_every_full_sliding_page_by_default() -> None:
    """skip_unreachable_sliding_pages is off unless asked for (docs/differences.md)."""
    c = get_kv_cache_coordinator(64, [full(8), sliding(2, 2)], 64, False, True)
    assert c.allocate_slots("r", 0, 16, None) is not None
    c.cache_pages("r", SEED11_HASHER.hash_request(Request("r", list(range(16))), 2), 16)
    pages = c.get_pages("r")
    assert pages is not None and all(c.page_pool.key_of(p) is not None for group in pages for p in group)


def test_the_coordinators_cache_pages_keys_no_mamba_align_state() -> None:
    """Documented: `CacheCoordinator.cache_pages` is not told which tokens are computed, so a
    Mamba align group keys no state there (the attention pages are keyed). One token on pages
    of one token: the state page after it would be keyable by its position."""
    c = get_kv_cache_coordinator(16, [full(1), mamba(1)], 32, False, True, mamba_cache_mode="align")
    assert c.key_page_size == 1
    keys = SEED11_HASHER.hash_request(Request("r", [5]), 1)
    assert c.allocate_slots("r", 0, 1, None) is not None
    c.cache_pages("r", keys, 1)
    attention, states = held(c, "r")
    assert len(attention) == 1 and c.page_pool.key_of(attention[0]) is not None
    assert states[-1] != 0 and c.page_pool.key_of(states[-1]) is None


# --- the decode work list as rebuilt on febc211 ----------------------------------------------------


def test_a_failed_plans_hit_id_equal_to_the_pool_size_is_the_pools_error() -> None:
    """The plan fails before counting the free hits when its new pages alone do not fit; the
    first id past the pool (``num_pages``) is still refused by name, and nothing changes."""
    from verikv import ForeignPageError

    c, hits = hit_pages([full(4)])  # 16 pages
    before = (c.page_pool.free_list_ids(), c.get_pages("b"))
    with pytest.raises(ForeignPageError, match=r"\b16\b"):
        c.allocate_slots("b", 0, 4 * 40, ([hits[0][0], 16],))  # 40 pages: more than the pool
    assert (c.page_pool.free_list_ids(), c.get_pages("b")) == before
