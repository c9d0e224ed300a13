"""Prefix caching for hybrid attention + Mamba models (vLLM's ``mamba_cache_mode="align"``).

A Mamba group in align mode keeps, per request, one list entry per page of tokens; only state
pages are real, and page ``j`` stands for the recurrent state after exactly ``(j + 1) *
page_size`` tokens. Expected values are worked out by hand from the rules in
`verikv.spec.manager` (module docstring, "Mamba in align mode") and vLLM 0.33's behaviour:
the lookup scans right to left for the last cached state and pads earlier positions with null
placeholders; the hybrid hit is the fixed point of every group's rule; a request holds the
state it resumes from and the state it computes, older state pages are freed (they stay
cached); lookahead slots get no state page; ``"none"`` (the default) never hits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, MambaSpec, Request, SlidingWindowSpec
from verikv.errors import InvalidArgumentError, VeriKVError
from verikv.spec import hit_rules as hr, invariants as inv, manager as m
from verikv.spec.pool import NULL_PAGE, PreconditionError
from verikv.testing.manager_machine import LAYOUTS, ManagerMachine, machine_factory

PS = 4
FULL = m.GroupLayout("full", PS)
MAMBA = m.GroupLayout("mamba_align", PS)
KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)


def cfg(*groups: m.GroupLayout, num_pages: int = 16, max_model_len: int = 32) -> m.ManagerConfig:
    return m.ManagerConfig(tuple(groups), num_pages, max_model_len)


def view(rid: str, tokens: tuple[int, ...], computed: int = 0) -> m.RequestView:
    return m.RequestView(rid, tokens, computed)


def healthy(s: m.ManagerState) -> None:
    assert inv.violated_manager_invariants(s, ghost=True) == []


# --- the hit rule ------------------------------------------------------------------------------

def test_align_rule_takes_the_rightmost_cached_state_with_nulls_before_it() -> None:
    assert hr.mamba_align_rule((True, False, True, False), 4, 16) == hr.Span(2, 3)
    assert hr.mamba_align_rule((True, True, True, True), 4, 11) == hr.Span(1, 2)  # capped: 2 pages
    assert hr.mamba_align_rule((False,) * 4, 4, 16) == hr.Span(0, 0)
    assert hr.group_rule("mamba_align", 0, (False, True), 4, 8) == hr.Span(1, 2)
    assert hr.group_rule("mamba", 0, (True, True), 4, 8) == hr.Span(0, 0)  # "none" never hits


def test_fixed_point_with_a_mamba_group_is_the_longest_length_both_accept() -> None:
    full = (True, True, True, False)  # full attention holds 12 tokens
    mamba = (False, True, False, True)  # states after 8 and 16 tokens

    def f(n: int) -> int:
        return hr.full_rule(full, 4, n).end * 4

    def s(n: int) -> int:
        return hr.mamba_align_rule(mamba, 4, n).end * 4

    # 31 -> 28: full gives 12, the Mamba state within 12 is the one after 8, full accepts 8
    assert hr.fixed_point([f, s], [4, 4], 31) == 8
    assert hr.fixed_point([s, f], [4, 4], 31) == 8  # any group order
    assert hr.common_hit_length([f, s], [4, 4], 31, use_eagle=True) == 0  # 8 - 4: no state at 4


# --- the spec: a hybrid attention + Mamba model gets prefix hits ---------------------------------

def _prefill_in_two_chunks(s: m.ManagerState, tokens: tuple[int, ...]) -> m.ManagerState:
    """Request "a": a chunk of 8 tokens, then the rest; each allocation caches what it can."""
    s, new = m.allocate_slots(s, view("a", tokens), 8)
    assert new == ((1, 2), (3,))
    assert s.pages(1, "a") == (NULL_PAGE, 3)  # the state after 8 tokens: page 1 of the group
    assert s.pool.key_of[3] is None  # not cached before that state is computed
    s, new = m.allocate_slots(s, view("a", tokens, 8), len(tokens) - 8)
    return s


def test_spec_hybrid_model_gets_a_hit_on_the_aligned_state() -> None:
    a_tokens = tuple(range(14))
    s = _prefill_in_two_chunks(m.init(cfg(FULL, MAMBA)), a_tokens)
    # the second allocation keyed the state after 8 tokens (its computed count), not the
    # state after 14 (not aligned)
    assert s.pages(1, "a") == (NULL_PAGE, 3, NULL_PAGE, 6)
    assert s.pool.key_of[3] == (m.content_of(view("a", a_tokens), 8, PS), 1)
    assert s.pool.key_of[6] is None
    healthy(s)
    b = view("b", a_tokens[:12] + (99, 98))
    hit = m.lookup(s, b)
    assert hit == m.Hit(((1, 2), (NULL_PAGE, 3)), 8)  # full holds 12 tokens; the state is at 8
    assert m.inv_hit_safe(s, b, hit) and m.inv_hit_shape(s, b, hit)
    s, new = m.allocate_slots(s, b, 6, 8, hit.pages)
    assert new is not None and s.pages(1, "b") == (NULL_PAGE, 3, NULL_PAGE, new[1][0])
    healthy(s)


def test_spec_default_mode_never_hits() -> None:
    s = m.init(cfg(FULL, m.GroupLayout("mamba", 32)))
    s, _ = m.allocate_slots(s, view("a", tuple(range(14))), 14)
    assert m.lookup(s, view("b", tuple(range(14)))).num_tokens == 0


def test_spec_state_moves_one_page_per_step_and_the_old_one_is_freed_but_stays_cached() -> None:
    tokens = tuple(range(16))
    s = m.init(cfg(MAMBA, num_pages=8))
    s, new = m.allocate_slots(s, view("a", tokens[:14]), 14)
    assert s.pages(0, "a") == (0, 0, 0, 1)
    # decode to 16 tokens: the state stays in its page (it is not cached)
    s, new = m.allocate_slots(s, view("a", tokens, 14), 2)
    assert new == ((),) and s.pages(0, "a") == (0, 0, 0, 1)
    assert s.pool.key_of[1] is None
    # the next step starts from the state after 16: it is cached now, a new page takes the state
    s, new = m.allocate_slots(s, view("a", tokens + (7,), 16), 1)
    assert new == ((2,),) and s.pages(0, "a") == (0, 0, 0, 1, 2)
    assert s.pool.key_of[1] == (m.content_of(view("a", tokens), 16, PS), 0)
    # one step later the state after 16 is no longer needed: freed, still cached
    s, new = m.allocate_slots(s, view("a", tokens + (7, 7), 17), 1)
    assert s.pages(0, "a") == (0, 0, 0, 0, 2) and s.pool.ref[1] == 0 and s.pool.key_of[1] is not None
    healthy(s)


def test_spec_lookahead_slots_get_no_state_page() -> None:
    s = m.init(cfg(FULL, MAMBA))
    s, new = m.allocate_slots(s, view("a", tuple(range(6))), 6, num_lookahead_tokens=4)
    assert new == ((1, 2, 3), (4,))  # full: 10 slots; Mamba: the state after 6 tokens
    assert s.pages(1, "a") == (NULL_PAGE, 4)


def test_spec_a_state_never_moves_back_onto_a_cached_page() -> None:
    tokens = tuple(range(13))
    s = m.init(cfg(MAMBA))
    s, _ = m.allocate_slots(s, view("a", tokens[:8]), 8)
    s, _ = m.allocate_slots(s, view("a", tokens, 8), 1)
    assert s.pool.key_of[1] is not None  # the state after 8 tokens
    with pytest.raises(PreconditionError):  # a computed count below the last allocation's
        m.allocate_slots(s, view("a", tokens, 4), 2)


def test_spec_hits_must_be_nulls_then_one_state() -> None:
    tokens = tuple(range(14))
    s = _prefill_in_two_chunks(m.init(cfg(FULL, MAMBA)), tokens)
    with pytest.raises(PreconditionError):
        m.allocate_slots(s, view("b", tokens), 6, 8, ((1, 2), (3, 3)))


def test_spec_hit_safety_catches_a_state_under_another_prefix() -> None:
    tokens = tuple(range(14))
    s = _prefill_in_two_chunks(m.init(cfg(FULL, MAMBA)), tokens)
    b = view("b", tokens)
    wrong = m.Hit(((1, 2, 4), (NULL_PAGE, NULL_PAGE, 3)), 12)  # the state after 8, offered at 12
    assert m.inv_hit_shape(s, b, wrong) and not m.inv_hit_safe(s, b, wrong)
    assert not m.inv_hit_shape(s, b, m.Hit(((1, 2), (3, NULL_PAGE)), 8))  # a state before its nulls


def test_spec_window_live_needs_the_state_the_step_starts_from() -> None:
    tokens = tuple(range(14))
    s = _prefill_in_two_chunks(m.init(cfg(FULL, MAMBA)), tokens)
    assert m.inv_window_live(s)
    e = s.entry("a")
    assert e is not None
    lost = m.Entry((e.pages[0], (NULL_PAGE,) * 4), e.num_cached, e.shard)  # the state after 8 dropped
    broken = m.ManagerState(s.config, s.pool, frozenset({("a", lost)}), s.keys, s.content, s.computed,
                            s.progress)
    assert not m.inv_window_live(broken)


# --- the implementation ------------------------------------------------------------------------

def manager(mode: str = "align", num_pages: int = 16, max_model_len: int = 32, mamba_ps: int = PS) -> CacheManager:
    groups = [CacheGroupSpec(FullAttentionSpec(page_size=PS, **KW)),
              CacheGroupSpec(MambaSpec(page_size=mamba_ps, shapes=((2, 2),), dtype=np.float32))]
    return CacheManager(num_pages, groups, max_model_len, mamba_cache_mode=mode)


def test_hybrid_attention_mamba_model_gets_prefix_hits() -> None:
    mgr = manager()
    a = Request("a", list(range(14)))
    first = mgr.allocate_slots(a, 8)
    assert first is not None and first.get_page_ids() == ([1, 2], [3])
    a.num_computed_tokens = 8
    mgr.allocate_slots(a, 6)
    a.num_computed_tokens = 14
    assert mgr.get_page_ids("a") == ([1, 2, 4, 5], [0, 3, 0, 6])
    b = Request("b", list(range(12)) + [99, 98])
    hit, n = mgr.get_computed_pages(b)
    assert (hit.get_page_ids(), n) == (([1, 2], [0, 3]), 8)
    new = mgr.allocate_slots(b, 6, 8, hit)
    assert new is not None and mgr.get_page_ids("b")[1] == [0, 3, 0, new.get_page_ids()[1][0]]


def test_default_mode_is_none_and_keeps_one_state_page_without_hits() -> None:
    mgr = manager(mode="none", mamba_ps=32)
    a = Request("a", list(range(14)))
    mgr.allocate_slots(a, 14)
    assert mgr.get_page_ids("a") == ([1, 2, 3, 4], [5])
    assert mgr.get_computed_pages(Request("b", list(range(14))))[1] == 0
    assert CacheManager(8, [CacheGroupSpec(FullAttentionSpec(page_size=PS, **KW))], 32).mamba_cache_mode == "none"


def test_state_pages_are_cached_only_at_aligned_positions() -> None:
    mgr = manager()
    a = Request("a", list(range(10)))
    mgr.allocate_slots(a, 10)  # the state after 10 tokens: not a page boundary
    a.num_computed_tokens = 10
    a.append_output_token_ids([5])
    mgr.allocate_slots(a, 1)
    a.num_computed_tokens = 11
    state = mgr.get_page_ids("a")[1][-1]
    assert mgr.page_pool.key_of(state) is None
    b = Request("b", list(range(10)) + [5, 6, 7])
    assert mgr.get_computed_pages(b)[0].get_page_ids()[1] == []  # no state at 4 or 8 was kept


def test_previous_state_page_is_freed_on_the_next_step_and_stays_hit_able() -> None:
    mgr = manager(num_pages=10)
    a = Request("a", list(range(8)))
    mgr.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    a.append_output_token_ids([1])
    mgr.allocate_slots(a, 1)  # caches the state after 8, takes a new state page
    a.num_computed_tokens = 9
    first, second = mgr.get_page_ids("a")[1][1], mgr.get_page_ids("a")[1][2]
    assert mgr.get_page_ids("a")[1] == [0, first, second]
    a.append_output_token_ids([2])
    mgr.allocate_slots(a, 1)
    assert mgr.get_page_ids("a")[1] == [0, 0, second]
    assert mgr.page_pool.ref_count(first) == 0 and mgr.page_pool.key_of(first) is not None
    mgr.free(a)
    hit, n = mgr.get_computed_pages(Request("c", list(range(8)) + [1, 2]))
    assert n == 8 and hit.get_page_ids()[1] == [0, first]


def test_lookahead_slots_get_no_state_page() -> None:
    mgr = manager()
    a = Request("a", list(range(6)))
    new = mgr.allocate_slots(a, 6, num_lookahead_tokens=4)
    assert new is not None and new.get_page_ids() == ([1, 2, 3], [4])


def test_bad_mode_and_bad_mamba_page_size_are_typed_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        manager(mode="all")
    with pytest.raises(VeriKVError):
        manager(mamba_ps=6)  # not a multiple of the attention page (the key page size)


def test_moving_a_state_back_is_rejected_and_changes_nothing() -> None:
    mgr = manager()
    a = Request("a", list(range(13)))
    mgr.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    mgr.allocate_slots(a, 1)
    before = (mgr.get_page_ids("a"), mgr.page_pool.free_list_ids())
    a.num_computed_tokens = 4
    with pytest.raises(InvalidArgumentError):
        mgr.allocate_slots(a, 2)
    assert (mgr.get_page_ids("a"), mgr.page_pool.free_list_ids()) == before


def test_sliding_window_attention_with_mamba_hits_too() -> None:
    groups = [CacheGroupSpec(SlidingWindowSpec(page_size=PS, sliding_window=4, **KW)),
              CacheGroupSpec(MambaSpec(page_size=PS, shapes=((2, 2),), dtype=np.float32))]
    mgr = CacheManager(16, groups, 32, mamba_cache_mode="align")
    a = Request("a", list(range(12)))
    mgr.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    mgr.allocate_slots(a, 4)
    hit, n = mgr.get_computed_pages(Request("b", list(range(12)) + [3]))
    assert n == 8 and hit.get_page_ids()[1][-1] != NULL_PAGE


# --- the implementation's rule is the spec's, exhaustively on small inputs ----------------------

def test_mamba_align_manager_lookup_is_the_spec_rule_on_every_small_pattern() -> None:
    import itertools

    from verikv.proofs.crosshair.targets import _HitPool
    from verikv.single_type_managers import MambaAlignManager

    cases = 0
    for page_size, stride in ((1, 1), (2, 1), (2, 2), (3, 1)):
        spec_cls = MambaSpec(page_size=page_size, shapes=((2,),), dtype=np.float32)
        for pages in range(5):
            for hit in itertools.product((False, True), repeat=pages):
                manager = MambaAlignManager(spec_cls, _HitPool(list(hit), stride), 0,  # type: ignore[arg-type]
                                            page_size // stride)
                keys = [i.to_bytes(8, "little") for i in range(pages * stride)]  # PageKey with value i
                for max_length in range(13):
                    first, end = hr.mamba_align_rule(hit, page_size, max_length)
                    want = [0] * first + [j + 1 for j in range(first, end)]
                    assert manager.find_longest_cache_hit(keys, max_length, (0,))[0] == want
                    cases += 1
    assert cases == 4 * 31 * 13


# --- the planted Mamba bugs are caught ------------------------------------------

@pytest.mark.parametrize("name", ["impl:mamba_state_cached_unaligned", "impl:mamba_state_cached_for_next_prefix",
                                  "impl:mamba_hit_under_attention_key", "impl:mamba_start_state_freed",
                                  "spec:mamba-state-keyed-unaligned"])
def test_mamba_mutant_is_caught_by_the_refinement_check(name: str) -> None:
    from verikv.proofs.mutants.mamba import mutants

    (mutant,) = [m for m in mutants() if m.name == name]
    caught = mutant.detect()
    assert caught and all(c.startswith("refine:full+mamba(align)") for c in caught)
    if name == "impl:mamba_hit_under_attention_key":
        assert any(c.endswith("INV-HIT-SAFE") for c in caught)
    if name == "impl:mamba_start_state_freed":
        assert any(c.endswith("INV-WINDOW-LIVE") for c in caught)


def test_refinement_of_the_real_manager_passes_on_the_mamba_align_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exhaustive check passes, and its lookups do restore Mamba states (not vacuous)."""
    from verikv.proofs.refinement.exhaustive import CASES_BY_NAME, run_case

    state_hits = []
    lookup = ManagerMachine.lookup

    def counted(self: ManagerMachine, rid: str, hint: int | None) -> Any:
        pages, hit = lookup(self, rid, hint)
        state_hits.append(any(p != NULL_PAGE for p in hit.pages[1]))
        return pages, hit

    monkeypatch.setattr(ManagerMachine, "lookup", counted)
    outcome = run_case(CASES_BY_NAME["full+mamba(align)"])
    assert outcome.ok, outcome.detail
    assert sum(state_hits) > 0


def test_a_mamba_only_model_in_align_mode_hits_too() -> None:
    mgr = CacheManager(8, [CacheGroupSpec(MambaSpec(page_size=PS, shapes=((2, 2),), dtype=np.float32))], 32,
                       mamba_cache_mode="align")
    a = Request("a", list(range(9)))
    mgr.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    mgr.allocate_slots(a, 1)  # keys the state after 8 tokens
    state = mgr.get_page_ids("a")[0][1]
    hit, n = mgr.get_computed_pages(Request("b", list(range(8)) + [40, 41]))
    assert (hit.get_page_ids(), n) == (([0, state],), 8)
    assert mgr.group_layouts() == [("mamba_align", PS, 0)]


class _MambaHits(ManagerMachine):
    """The conformance machine, counting lookups that restore a Mamba state (class-level)."""

    state_hits = 0

    def lookup(self, rid: str, hint: Any) -> Any:
        pages, hit = super().lookup(rid, hint)
        _MambaHits.state_hits += any(p != NULL_PAGE for p in hit.pages[1])
        return pages, hit


def test_the_conformance_machine_restores_mamba_states_against_the_spec() -> None:
    """The Hypothesis machine's Mamba align layout is not vacuous: its runs (checked step by step
    against the spec, INV-HIT-SAFE judged by the harness' record of each page's state) include
    lookups that hit a cached state."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    _MambaHits.state_hits = 0
    run_state_machine_as_test(machine_factory(LAYOUTS["full+mamba(align)"], machine=_MambaHits),  # type: ignore[arg-type]
                              settings=settings(max_examples=300, stateful_step_count=60, deadline=None,
                                                derandomize=True, database=None))
    assert _MambaHits.state_hits > 0


@pytest.mark.parametrize("bug", ["state_cached_unaligned"])
def test_hit_safety_alone_catches_a_state_restored_at_an_unaligned_position(bug: str) -> None:
    """With every check but INV-HIT-SAFE switched off (no comparison with the spec's keys), the
    conformance machine still catches the bug when a lookup restores the wrongly keyed state.
    (The state keyed for the next prefix is caught by the exhaustive refinement check, see the
    mutant test above; the machine's random runs do not reach its hit within their budget.)"""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from verikv.proofs.mutants import mamba as mamba_mutants
    from verikv.testing.adapter import CacheManagerAdapter, build_cache_manager
    from verikv.testing.manager_machine import ConformanceFailure, MachineOptions, detection_settings

    plant = getattr(mamba_mutants, bug)

    def make(config: m.ManagerConfig) -> Any:
        manager = build_cache_manager(config)
        plant(manager)
        return manager

    factory = machine_factory(LAYOUTS["full+mamba(align)"], lambda config: CacheManagerAdapter(config, make),
                              MachineOptions(checks=frozenset({"INV-HIT-SAFE"})))
    with pytest.raises(ConformanceFailure) as failure:
        run_state_machine_as_test(factory, settings=settings(detection_settings(), max_examples=600))  # type: ignore[arg-type]
    assert failure.value.names == ["INV-HIT-SAFE"]


# --- the Z3 theorem: a state is hit only at an aligned position, with its exact prefix ----------

def test_the_mamba_state_theorem_proves_unbounded_with_reachable_branches() -> None:
    from verikv.proofs.z3 import mamba as z3_mamba

    outcomes = {c.name: c.run() for c in z3_mamba.checks()}
    assert outcomes["manager.mamba_align/INV-HIT-SAFE"].status == "proved"
    assert outcomes["manager.mamba_align/INV-HIT-SAFE"].vacuity_checked
    assert all(o.ok for o in outcomes.values()), outcomes
    assert sum(name.startswith("witness:manager.mamba_align:") for name in outcomes) == 4


@pytest.mark.parametrize("fault", ["mamba-state-keyed-unaligned", "mamba-hit-next-prefix", "mamba-hit-unaligned"])
def test_the_mamba_state_theorem_catches_each_spec_mutant(fault: str) -> None:
    from verikv.proofs.runner.registry import discover_mutants
    from verikv.proofs.z3 import mamba as z3_mamba

    (mutant,) = [m for m in z3_mamba.mutants() if m.name == f"spec:z3-{fault}"]
    assert "manager.mamba_align/INV-HIT-SAFE" in mutant.detect()
    assert mutant.name in {m.name for m in discover_mutants()}
