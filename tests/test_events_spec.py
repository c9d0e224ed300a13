"""KV events in the spec (`verikv.spec.events`): what a call emits, INV-EVENTS-REPLAY, and the
exhaustive check of the real manager's events (`verikv.proofs.refinement.events`) with its
mutants."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, PageStored, Request
from verikv.proofs.refinement import events as events_refinement
from verikv.proofs.refinement.exhaustive import explore
from verikv.proofs.runner.registry import Mutant, discover_checks, discover_mutants
from verikv.spec import events, manager as spec

FULL = spec.GroupLayout("full", 2)
CONFIG = spec.ManagerConfig((FULL,), 4, 8)
MUTANTS = events_refinement.mutants()


def _admitted(s: spec.ManagerState, rid: str, tokens: tuple[int, ...]) -> tuple[spec.ManagerState, tuple[int, ...]]:
    t, new = spec.allocate_slots(s, spec.RequestView(rid, tokens), len(tokens))
    assert new is not None
    return t, tuple(p for pages in new for p in pages)


def test_an_allocation_stores_its_run_with_parent_page_size_tokens_and_lora() -> None:
    s0 = spec.init(CONFIG)
    s1, new = _admitted(s0, "a", (5, 6, 7))
    (stored,) = events.call_events(s0, s1, new)
    content = spec.content_of(spec.RequestView("a", (5, 6, 7)), 2, 2)
    assert stored == events.Stored(0, (content,), None, 2, (5, 6), None)
    assert events.replay(Counter(), [stored]) == events.cached_keys(s1.pool)


def test_an_eviction_is_removed_before_the_new_run_is_stored() -> None:
    s0 = spec.init(CONFIG)
    s1, _ = _admitted(s0, "a", (1, 2, 3, 4))
    s2 = spec.free_request(s1, "a")
    s3, new = _admitted(s2, "b", (9, 9, 8, 8))
    batch = events.call_events(s2, s3, new)
    assert [type(e) for e in batch] == [events.Removed, events.Stored]
    removed, stored = batch
    assert isinstance(removed, events.Removed) and isinstance(stored, events.Stored)
    # page 3 (never used) and a's chain tail (freed first, so nearer the head) are reused
    assert removed.keys == (spec.content_of(spec.RequestView("a", (1, 2, 3, 4)), 4, 2),) and len(stored.keys) == 2
    assert stored.parent is None and stored.tokens == (9, 9, 8, 8)
    assert events.inv_events_replay(s3, events.replay(events.cached_keys(s2.pool), batch))


def test_a_run_after_the_chain_start_names_its_parent() -> None:
    s0 = spec.init(CONFIG)
    view = spec.RequestView("a", (1, 2, 3, 4))
    s1, _ = spec.allocate_slots(s0, view, 3)
    s2, _ = spec.allocate_slots(s1, replace(view, num_computed_tokens=3), 1)
    (stored,) = events.call_events(s1, s2)
    assert stored == events.Stored(0, (spec.content_of(view, 4, 2),), spec.content_of(view, 2, 2), 2, (3, 4), None)


def test_a_reset_clears_and_a_refused_one_emits_nothing() -> None:
    assert events.call_events(spec.init(CONFIG), spec.init(CONFIG), reset=True) == (events.Cleared(),)
    assert events.replay(Counter({((None, ()), 0): 2}), [events.Cleared()]) == Counter()
    assert events.call_events(spec.init(CONFIG), spec.init(CONFIG)) == ()


def test_replay_refuses_a_removal_of_a_key_no_page_holds() -> None:
    assert events.replay(Counter(), [events.Removed(0, ((None, ()),))]) is None
    assert not events.inv_events_replay(spec.init(CONFIG), None)


def test_a_deep_copy_of_a_manager_with_events_records_into_its_own_log() -> None:
    group = CacheGroupSpec(FullAttentionSpec(page_size=4, num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False))
    original = CacheManager(8, [group], 32, hash_seed=0, enable_kv_events=True)
    twin = copy.deepcopy(original)
    assert twin.allocate_slots(Request("a", list(range(9))), 9) is not None
    assert original.take_events() == [] and original.page_pool.get_num_free_pages() == 7
    (stored,) = twin.take_events()
    assert isinstance(stored, PageStored) and stored.page_ids == (1, 2)


def test_the_real_managers_events_pass_a_shallow_run_that_sees_every_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    case = replace(events_refinement.CASES[0], depth=3)
    seen: list[Any] = []
    real_take = CacheManager.take_events

    def take(self: CacheManager) -> list[Any]:
        got = real_take(self)
        seen.extend(got)
        return got
    monkeypatch.setattr(CacheManager, "take_events", take)
    result = explore(case, events_refinement.make_manager, events_refinement.machine_class())
    assert result.failure is None, result.failure
    assert {"PageStored", "PageRemoved", "AllPagesCleared"} <= {type(e).__name__ for e in seen}


def test_the_event_checks_and_mutants_are_registered() -> None:
    names = {c.name for c in discover_checks()}
    assert {events_refinement.check_name(case) for case in events_refinement.CASES} <= names
    assert {m.name for m in MUTANTS} <= {m.name for m in discover_mutants()}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_event_bug_is_caught_naming_its_invariant(mutant: Mutant) -> None:
    caught = mutant.detect()
    assert any(name.endswith(f": {mutant.invariant}") for name in caught), caught
