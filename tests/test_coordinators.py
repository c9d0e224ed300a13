"""Coordinators: dispatch, group-layout checks, the fixed-point hybrid hit, all-or-nothing allocation."""

from __future__ import annotations

import pytest
from layouts import KW, chunked, mamba, sliding

from verikv import (
    CacheCoordinatorNoPrefixCache,
    CacheGroupSpec,
    CacheSpecError,
    FullAttentionSpec,
    HybridCacheCoordinator,
    Request,
    UnitaryCacheCoordinator,
    get_kv_cache_coordinator,
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
