"""The manager-level spec on worked examples: hit rules, allocation, atomicity, windows, reset.

The examples with eSurge numbers replay eSurge's own worked examples of its hit rules and
window drops (EasyDeL commit `090a03b`); the others are computed by hand from the semantics in
the module docstrings.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from verikv.spec import hit_rules as hr, invariants as inv, manager as m
from verikv.spec.pool import PreconditionError

FULL4 = m.GroupLayout("full", 4)


def cfg(*groups: m.GroupLayout, num_pages: int = 8, max_model_len: int = 32, **kw: object) -> m.ManagerConfig:
    return m.ManagerConfig(tuple(groups), num_pages, max_model_len, **kw)  # type: ignore[arg-type]


def req(rid: str, tokens: tuple[int, ...], computed: int = 0, **kw: object) -> m.RequestView:
    return m.RequestView(rid, tokens, computed, **kw)  # type: ignore[arg-type]


def healthy(s: m.ManagerState) -> None:
    assert inv.violated_manager_invariants(s, ghost=True) == []


# --- hit rules ------------------------------------------------------------------------------

def test_full_rule_is_the_prefix_run_capped_by_max_length() -> None:
    assert hr.full_rule((True, True, False, True), 4, 100) == hr.Span(0, 2)
    assert hr.full_rule((True, True, True), 4, 11) == hr.Span(0, 2)


def test_sliding_rule_esurge_example() -> None:
    # ps 4, sw 8, 25-token cached prompt, lookup with 26 tokens: 24 tokens, pages 4 and 5 real.
    assert hr.sliding_rule((True,) * 6, 4, 25, 8) == hr.Span(4, 6)


def test_sliding_rule_falls_back_to_the_prefix_run_and_window_one_takes_one_hit() -> None:
    assert hr.sliding_rule((True, False, True, False), 4, 16, 9) == hr.Span(0, 1)
    assert hr.sliding_rule((True, False, True, False), 4, 16, 1) == hr.Span(2, 3)
    assert hr.sliding_rule((False,) * 4, 4, 16, 1) == hr.Span(0, 0)


def test_chunked_rule_reports_earlier_chunks_even_with_an_empty_cache() -> None:
    # ps 4, C 8, 20-token prompt: 16 tokens "hit", all null placeholders (eSurge's sliding-window example).
    assert hr.chunked_rule((), 4, 19, 8) == hr.Span(4, 4)
    assert hr.chunked_rule((True,) * 5, 4, 19, 8) == hr.Span(4, 4)
    assert hr.chunked_rule((False,) * 4 + (True,), 4, 23, 8) == hr.Span(4, 5)


def test_fixed_point_full_plus_sliding_and_eagle_drops_once() -> None:
    full = (True, True, True, True)        # 4 pages hit in the full group
    sliding = (False, True, True, False)   # pages 1 and 2 hit in the sliding group (sw 8 -> 2 pages)

    def f(n: int) -> int:
        return hr.full_rule(full, 4, n).end * 4

    def w(n: int) -> int:
        return hr.sliding_rule(sliding, 4, n, 8).end * 4

    assert hr.fixed_point([f, w], [4, 4], 17) == 12
    # EAGLE: recompute once from 12 - 4 = 8: within 2 pages sliding needs pages 0 and 1, page 0
    # misses, and its prefix run is empty, so the common hit becomes 0 (full alone: 12 -> 8).
    assert hr.common_hit_length([f, w], [4, 4], 17, use_eagle=True) == 0
    assert hr.common_hit_length([f], [4], 17, use_eagle=True) == 12
    assert hr.common_hit_length([f], [4], 17, use_eagle=False) == 16


def test_mamba_never_hits() -> None:
    assert hr.mamba_rule((True,) * 9, 4, 100) == hr.Span(0, 0)


# --- the manager spec ------------------------------------------------------------------------

def test_allocate_cache_free_then_hit_with_lru_order() -> None:
    s = m.init(cfg(FULL4))
    a = req("a", tuple(range(9)))
    s, new = m.allocate_slots(s, a, 9)
    assert new == ((1, 2, 3),)
    assert s.entry("a") == m.Entry(((1, 2, 3),), (2,))
    healthy(s)
    s = m.free_request(s, "a")
    assert s.pool.free == (4, 5, 6, 7, 3, 2, 1)  # reverse order: the chain tail is evicted first
    b = req("b", tuple(range(8)) + (50, 51))
    hit = m.lookup(s, b)
    assert hit == m.Hit(((1, 2),), 8)
    assert m.inv_hit_safe(s, b, hit) and m.inv_hit_shape(s, b, hit)
    s, new = m.allocate_slots(s, b, 2, 8, hit.pages)
    assert new == ((4,),) and s.pages(0, "b") == (1, 2, 4)
    assert s.pool.free == (5, 6, 7, 3)
    healthy(s)


def test_hit_is_capped_at_num_tokens_minus_one_and_salt_isolates() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(8))), 8)
    assert m.lookup(s, req("b", tuple(range(8)))).num_tokens == 4
    assert m.lookup(s, req("c", tuple(range(8)) + (9,), cache_salt="t1")).num_tokens == 0
    assert m.lookup(s, req("d", tuple(range(9)), prompt_logprobs=True)).num_tokens == 0


def test_eagle_drops_one_full_page() -> None:
    s = m.init(cfg(FULL4, use_eagle=True))
    s, _ = m.allocate_slots(s, req("a", tuple(range(13))), 13)
    assert m.lookup(s, req("b", tuple(range(13)))).num_tokens == 8


def test_failed_multi_group_allocation_changes_nothing() -> None:
    s = m.init(cfg(FULL4, m.GroupLayout("sliding", 4, 4), num_pages=6))
    s, new = m.allocate_slots(s, req("a", tuple(range(8))), 8)
    assert new == ((1, 2), (3, 4))
    before = s
    after, new = m.allocate_slots(s, req("b", tuple(range(20, 28))), 8)  # needs 4, one free
    assert new is None and after is before and m.inv_atomic(before, after, new)


def test_sliding_window_frees_out_of_window_pages_descending_and_counts_them_available() -> None:
    s = m.init(cfg(m.GroupLayout("sliding", 4, 4), num_pages=4))
    a = req("a", tuple(range(12)))
    s, new = m.allocate_slots(s, a, 12)
    assert new == ((1, 2, 3),) and s.pool.free == ()
    # 12 computed: pages before (12 - 4 + 1) // 4 = 2 leave the window; they pay for page 3.
    s, new = m.allocate_slots(s, req("a", tuple(range(13)), 12), 1)
    assert new == ((2,),)
    assert s.pages(0, "a") == (0, 0, 3, 2) and s.pool.free == (1,)
    healthy(s)


def test_cache_pages_never_lowers_num_cached_and_skips_null_pages() -> None:
    s = m.init(cfg(m.GroupLayout("sliding", 4, 1)))
    a = req("a", tuple(range(12)))
    s, _ = m.allocate_slots(s, a, 8, delay_cache_pages=True)
    assert s.num_cached(0, "a") == 0
    s = m.remove_skipped(s, "a", 8)
    assert s.pages(0, "a") == (0, 0)
    s = m.cache_pages(s, a, 8)
    assert s.num_cached(0, "a") == 2 and all(k is None for k in s.pool.key_of)  # nulls never hashed
    assert m.cache_pages(s, a, 4) == s
    healthy(s)


def test_reset_only_when_idle_and_keeps_nothing_cached() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(9))), 9)
    assert m.reset_prefix_cache(s) == (s, False)
    s = m.free_request(s, "a")
    t, done = m.reset_prefix_cache(s)
    assert done and t.pool.cached == frozenset() and m.usage(t) == 0.0
    healthy(t)


def test_dp_shard_is_fixed_by_the_hint_and_lookups_stay_in_it() -> None:
    s = m.init(cfg(FULL4, num_pages=8, data_parallel_size=2))
    s, new = m.allocate_slots(s, req("a", tuple(range(8))), 8, dp_shard_hint=1, data_parallel_size=2)
    entry = s.entry("a")
    assert new == ((4, 5),) and entry is not None and entry.shard == 1
    b = req("b", tuple(range(9)))
    assert m.lookup(s, b, dp_shard_hint=0, data_parallel_size=2).num_tokens == 0
    assert m.lookup(s, b, dp_shard_hint=3, data_parallel_size=2).num_tokens == 8
    with pytest.raises(PreconditionError):
        m.allocate_slots(s, b, 1, data_parallel_size=4)


@pytest.mark.parametrize("call", [
    lambda s: m.allocate_slots(s, req("x", (1, 2)), 0),
    lambda s: m.allocate_slots(s, req("x", (1, 2)), 1, -1),
    lambda s: m.allocate_slots(s, req("x", (1, 2)), 1, num_lookahead_tokens=-1),
    lambda s: m.allocate_slots(s, req("x", (1,) * 40), 33),
    lambda s: m.allocate_slots(s, req("x", (1, 2), finished=True), 1),
    lambda s: m.allocate_slots(s, req("x", tuple(range(9))), 1, 4, ((9,),)),
    lambda s: m.allocate_slots(s, req("x", tuple(range(9))), 1, 4, ((1,), (2,))),
    lambda s: m.cache_pages(s, req("nobody", (1, 2)), 1),
    lambda s: m.remove_skipped(s, "x", -1),
    lambda s: m.lookup(s, req("x", ())),
    lambda s: m.lookup(s, req("x", (1, 2), finished=True)),
])
def test_bad_inputs_raise_precondition_errors(call: object) -> None:
    s = m.init(cfg(FULL4))
    with pytest.raises(PreconditionError):
        call(s)  # type: ignore[operator]


def test_init_rejects_eagle_with_chunked_and_short_mamba_pages() -> None:
    with pytest.raises(PreconditionError):
        m.init(cfg(m.GroupLayout("chunked", 4, 8), use_eagle=True))
    with pytest.raises(PreconditionError):
        m.init(cfg(FULL4, m.GroupLayout("mamba", 8)))


def test_invariant_predicates_reject_broken_states() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(9))), 9)
    leaked = m.ManagerState(s.config, s.pool, frozenset(), s.keys, s.content)
    assert not m.inv_ref_count(leaked)
    wrong = m.ManagerState(s.config, s.pool, s.entries, s.keys, (None, s.content[2]) + s.content[2:])
    assert not m.inv_hit_safe_state(wrong)
    b = req("b", (7,) * 9)
    assert not m.inv_hit_safe(s, b, m.Hit(((1,),), 4))
    assert m.inv_hit_shape(s, b, m.Hit(((1, 2),), 8))  # well shaped, yet unsafe for b
    assert not m.inv_hit_safe(s, b, m.Hit(((1, 2),), 8))
    assert not m.inv_hit_shape(s, req("c", tuple(range(8))), m.Hit(((1, 2),), 8))  # > num_tokens - 1
    assert not m.inv_atomic(s, m.init(cfg(FULL4)), None)


def test_hit_safety_is_judged_by_the_content_the_allocation_wrote_not_by_the_key() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(9))), 9)
    healthy(s)
    assert s.content[1] == s.pool.key_of[1] and s.content[3] is None  # page 3: one token of 4
    neighbour = replace(s, content=(None, s.content[2], s.content[1]) + s.content[3:])
    assert not m.inv_hit_safe_state(neighbour)  # each keyed page holds its neighbour's content
    assert m.inv_keyed_computed(neighbour)  # (both pages were computed)
    never = replace(s, content=(None,) * 8)
    assert not m.inv_keyed_computed(never) and not m.inv_hit_safe_state(never)  # keyed, never computed


def test_content_ghost_is_written_by_allocation_not_by_caching() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(8))), 8, delay_cache_pages=True)
    assert s.pool.key_of[1] is None and s.content[1] == m.page_key(s, req("a", tuple(range(8))), 0, 0)
    cached = m.cache_pages(s, req("a", tuple(range(8)), 8), 8)
    assert cached.content == s.content and cached.pool.key_of[1] == s.content[1]
    healthy(cached)


def test_content_ghost_is_written_only_for_the_pages_a_step_completes() -> None:
    s = m.init(cfg(FULL4))
    a = req("a", tuple(range(8)))
    s, _ = m.allocate_slots(s, a, 8)
    hit = m.lookup(s, req("b", tuple(range(8)) + (9,)))
    assert hit.num_tokens == 8
    before = s.content
    s, _ = m.allocate_slots(s, req("b", tuple(range(8)) + (9,)), 1, 8, hit.pages)
    assert s.content[:3] == before[:3]  # the hit pages keep what they hold; page 3 is not complete
    healthy(s)


def test_reset_forgets_keys_but_not_what_pages_hold() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(8))), 8)
    s = m.free_request(s, "a")
    after, done = m.reset_prefix_cache(s)
    assert done and after.content == s.content and all(k is None for k in after.pool.key_of)
    healthy(after)


def test_computed_is_a_deprecated_name_of_content() -> None:
    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(8))), 8)
    with pytest.warns(DeprecationWarning, match="content"):
        assert s.computed == s.content
    with pytest.warns(DeprecationWarning, match="content"):
        old = m.ManagerState(s.config, s.pool, s.entries, s.keys, (None,) * 8, s.content, s.progress)
    assert old == s and old.content == s.content and old.progress == s.progress
    with pytest.warns(DeprecationWarning, match="content"):
        assert replace(s, computed=(None,) * 8).content == (None,) * 8  # type: ignore[call-arg]


def test_window_live_needs_pages_the_next_token_attends() -> None:
    sliding = m.GroupLayout("sliding", 4, 5)
    s = m.init(cfg(sliding))
    s, _ = m.allocate_slots(s, req("a", tuple(range(12))), 12)
    s, _ = m.allocate_slots(s, req("a", tuple(range(13)), 12), 1)
    healthy(s)
    assert dict(s.progress) == {"a": 12} and m.skipped_before(sliding, 12) == 2
    (rid, e), = s.entries
    assert e.pages[0][:2] == (0, 0)
    early = replace(s, entries=frozenset({(rid, replace(e, pages=((0, 0, 0) + e.pages[0][3:],)))}))
    assert not m.inv_window_live(early)
    assert m.inv_window_live(early, {"a": 16})  # a later position no longer reaches page 2


# --- the rules against direct restatements ----------------------------------------------------

HITS = st.lists(st.booleans(), max_size=8).map(tuple)


def esurge_sliding_scan(hit: tuple[bool, ...], ps: int, max_length: int, window: int) -> hr.Span:
    """eSurge's sliding-window hit procedure: scan from the right, count the run,
    stop when it reaches cdiv(window - 1, ps) (tested after a hit), else keep the run at 0."""
    need = -(-(window - 1) // ps)
    run = 0
    for i in range(max_length // ps - 1, -1, -1):
        if i < len(hit) and hit[i]:
            run += 1
            if run >= need:
                return hr.Span(i, i + run)
        else:
            run = 0
    return hr.Span(0, run)


@given(HITS, st.integers(1, 5), st.integers(0, 40), st.integers(1, 13))
def test_sliding_rule_is_esurge_scan(hit: tuple[bool, ...], ps: int, max_length: int, window: int) -> None:
    assert hr.sliding_rule(hit, ps, max_length, window) == esurge_sliding_scan(hit, ps, max_length, window)


@given(HITS, HITS, HITS, st.integers(0, 40), st.sampled_from([(4, 4, 4), (4, 8, 4), (8, 4, 8)]))
def test_fixed_point_is_the_longest_length_every_group_accepts(full: tuple[bool, ...], sliding: tuple[bool, ...],
                                                               chunked: tuple[bool, ...], max_length: int,
                                                               sizes: tuple[int, int, int]) -> None:
    fps, sps, cps = sizes
    rules = [lambda n: hr.full_rule(full, fps, n).end * fps,
             lambda n: hr.sliding_rule(sliding, sps, n, 6).end * sps,
             lambda n: hr.chunked_rule(chunked, cps, n, 8).end * cps]
    got = hr.fixed_point(rules, sizes, max_length)
    accepted = [n for n in range(max_length + 1) if all(rule(n) == n for rule in rules)]
    assert got == max(accepted)


def test_without_cache_groups_allocation_succeeds_with_no_pages_and_no_entry() -> None:
    s = m.init(cfg(num_pages=4))
    assert not s.config.enable_caching
    t, new = m.allocate_slots(s, req("a", (1, 2, 3)), 3)
    assert new == () and t == s and t.entry("a") is None
    with pytest.raises(PreconditionError):
        m.cache_pages(t, req("a", (1, 2, 3)), 3)


def test_failing_key_computation_is_a_named_transition_that_changes_nothing() -> None:
    s = m.init(cfg(FULL4))
    r = req("r", tuple(range(9)))
    s1, _ = m.allocate_slots(s, r, 9)
    grown = req("r", tuple(range(13)), 9)
    after, error = m.fail_key_computation(s1, grown, "allocate_slots", "hash backend down")
    assert after is s1 and after.keys == s1.keys and after.content == s1.content
    assert isinstance(error, PreconditionError) and error.reason == "key-computation"
    assert error.transition == "manager.allocate_slots" and "'r'" in str(error)
    for transition in m.KEY_COMPUTATION_TRANSITIONS:
        assert m.fail_key_computation(s1, grown, transition, "x")[0] is s1
    with pytest.raises(PreconditionError):
        m.fail_key_computation(s1, grown, "free_request", "x")


def test_common_prefix_pages_count_leading_pages_held_by_enough_requests() -> None:
    s = m.init(cfg(FULL4, m.GroupLayout("sliding", 4, 5), num_pages=16))
    a = req("a", tuple(range(9)))
    s, _ = m.allocate_slots(s, a, 9)
    b = req("b", tuple(range(8)) + (99,))
    hit = m.lookup(s, b)
    s, _ = m.allocate_slots(s, b, 9 - hit.num_tokens, hit.num_tokens, hit.pages)
    assert m.num_common_prefix_pages(s, "a", 2) == (2, 0)  # two full pages shared; windowed: 0
    assert m.num_common_prefix_pages(s, "a", 1) == (3, 0) and m.num_common_prefix_pages(s, "b", 3) == (0, 0)
    with pytest.raises(PreconditionError):
        m.num_common_prefix_pages(s, "nobody", 1)
    with pytest.raises(PreconditionError):
        m.num_common_prefix_pages(s, "a", 0)


def test_statistics_count_lookups_that_are_made_and_resets_that_happen() -> None:
    from verikv.spec import stats

    s = m.init(cfg(FULL4))
    s, _ = m.allocate_slots(s, req("a", tuple(range(9))), 9)
    b = req("b", tuple(range(9)))
    counted = stats.record_lookup(stats.PrefixCacheStats(), s, b, m.lookup(s, b))
    assert counted == stats.PrefixCacheStats(requests=1, queries=9, hits=8)
    assert stats.record_lookup(counted, s, replace(b, prompt_logprobs=True), m.Hit(((),), 0)) == counted
    taken, fresh = stats.take(stats.record_reset(counted, True))
    assert taken.reset and fresh == stats.PrefixCacheStats()
    assert stats.record_reset(counted, False) == counted
