"""The refinement checks of `verikv prove` (exhaustive in a tiny world, seeded random walks in a
large one): they pass on the real manager, cover what they claim, reduce states soundly, and
catch every planted implementation bug."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from verikv.proofs.mutants.refinement import mutants
from verikv.proofs.refinement import exhaustive as refinement, walks
from verikv.proofs.runner.registry import Mutant, discover_checks, discover_mutants

MUTANTS = mutants()


@pytest.mark.parametrize("name", ["full", "full+sliding+chunked", "dp2", "mamba"])
def test_real_manager_passes_a_shallow_run(name: str) -> None:
    case = replace(refinement.CASES_BY_NAME[name], depth=2)
    result = refinement.explore(case)
    assert result.failure is None, result.failure
    assert result.states > 10 and result.transitions >= result.states


def test_an_unpicklable_implementation_is_deep_copied() -> None:
    """A planted mutant's one-off class cannot be pickled: the node keeps it live and each child
    deep-copies it (the same run, only slower)."""
    case = replace(refinement.CASES_BY_NAME["full"], depth=2)

    def make(config: object) -> object:
        manager = refinement.build_manager(case)(config)  # type: ignore[arg-type]
        manager.local = lambda: None  # a local function: pickle refuses it
        return manager

    root = refinement._root(case, make)
    assert not isinstance(refinement._park(root).parts, bytes)
    assert isinstance(refinement._park(refinement._root(case, refinement.build_manager(case))).parts, bytes)
    result = refinement.explore(case, make)
    assert result.failure is None and result.states == refinement.explore(case).states


def test_depth_zero_checks_only_the_initial_state() -> None:
    result = refinement.explore(replace(refinement.CASES_BY_NAME["full"], depth=0))
    assert (result.states, result.transitions, result.failure) == (1, 0, None)


def test_request_ids_do_not_split_states() -> None:
    """Symmetry: the same prompt admitted under two different ids is one state."""
    case = refinement.CASES_BY_NAME["full"]
    root = refinement._root(case, refinement.build_manager(case))
    first, second = refinement._child(root), refinement._child(root)
    second.next_id = 7
    refinement.apply(case, first, ("new", 0, "hit", None))
    refinement.apply(case, second, ("new", 0, "hit", None))
    assert set(first.requests) != set(second.requests)
    assert refinement._state(first, False) == refinement._state(second, False)


def _after(case: refinement.Case, *ops: refinement.Op) -> Any:
    node = refinement._child(refinement._root(case, refinement.build_manager(case)))
    for op in ops:
        refinement.apply(case, node, op)
    return node


def test_page_renaming_merges_two_admission_orders() -> None:
    """Symmetry: two prompts admitted in either order hold the same pages up to a renaming."""
    case = refinement.CASES_BY_NAME["full"]
    one = _after(case, ("new", 0, "hit", None), ("new", 2, "hit", None))
    other = _after(case, ("new", 2, "hit", None), ("new", 0, "hit", None))
    assert refinement._state(one, False) != refinement._state(other, False)
    assert refinement._state(one, True) == refinement._state(other, True)


def test_page_renaming_keeps_every_page_in_its_shard() -> None:
    case = refinement.CASES_BY_NAME["dp2"]
    node = _after(case, ("new", 0, "hit", 1), ("new", 2, "chunk", 1))  # both in shard 1
    per = case.num_pages // 2
    tables = [e.pages for _, e in sorted(node.spec.entries, key=lambda x: x[0], reverse=True)]
    label = refinement._page_renaming(node.spec, tables)
    assert sorted(label) == sorted(label.values()) == list(range(case.num_pages))
    assert all((old >= per) == (new >= per) for old, new in label.items())
    assert any(old != new for old, new in label.items())


def test_states_are_spelled_the_same_under_any_string_hash_seed() -> None:
    """Sets in the state are sorted: the run (states, transitions) does not depend on the
    interpreter's hash seed, which orders a frozenset's repr."""
    import os
    import subprocess
    import sys

    code = ("from dataclasses import replace; from verikv.proofs.refinement import exhaustive as r; "
            "x = r.explore(replace(r.CASES_BY_NAME['full+sliding'], depth=3)); print(x.states, x.transitions)")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(runs) == 1, runs


def test_a_child_does_not_share_mutable_state_with_its_parent() -> None:
    case = refinement.CASES_BY_NAME["full"]
    root = refinement._root(case, refinement.build_manager(case))
    before = refinement._state(root, True)
    child = refinement._child(root)
    refinement.apply(case, child, ("new", 1, "hit", None))
    assert refinement._state(root, True) == before != refinement._state(child, True)
    assert root.impl.manager.request_ids() == [] and child.impl.manager.request_ids() == ["r0"]


def test_every_layout_has_one_check_with_its_bound_in_the_name() -> None:
    names = {c.name for c in discover_checks() if c.kind == "refinement"}
    assert {case.check_name for case in refinement.CASES} <= names  # (other providers add option cases)
    assert all(name.endswith("exhaustive") for name in names)
    assert all(f"depth<={case.depth}" in case.check_name for case in refinement.CASES)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_bug_is_caught_naming_its_invariant(mutant: Mutant) -> None:
    caught_by = mutant.detect()
    assert caught_by, f"{mutant.name} survived the exhaustive refinement checks"
    assert any(name.endswith(f": {mutant.invariant}") for name in caught_by), caught_by


def test_the_planted_bugs_are_discovered_by_the_prove_runner() -> None:
    assert len([m for m in MUTANTS if m.kind == "impl"]) == 20
    assert {m.name for m in MUTANTS} <= {m.name for m in discover_mutants()}


def test_an_admission_that_needs_no_key_is_unaffected_by_a_failing_hash_backend() -> None:
    """Mamba never caches, so allocating while every key computation raises must succeed."""
    case = replace(refinement.CASES_BY_NAME["mamba"], key_failures=True, depth=2)
    result = refinement.explore(case)
    assert result.failure is None, result.failure


def test_the_failing_hasher_raises_on_every_key_computation() -> None:
    from verikv.hashing import PageHasher

    failing = refinement._FailingHasher(PageHasher("sha256"))
    with pytest.raises(refinement.KeyComputationFailed):
        failing.hash_page(None, (1, 2))
    assert failing.scheme == "sha256"


def test_the_layouts_cover_every_feature_the_manager_has() -> None:
    cases = refinement.CASES
    kinds = {tuple(g.kind for g in c.groups) for c in cases}
    assert {("full",), ("sliding",), ("chunked",), ("mamba",), ("full", "sliding"),
            ("full", "sliding", "chunked"), ("sliding", "full")} <= kinds
    assert any(c.data_parallel_size == 2 for c in cases) and any(c.use_eagle for c in cases)
    assert any(c.lookahead for c in cases) and any(c.delay for c in cases) and any(c.key_failures for c in cases)
    assert {c.free_order for c in cases} == {"esurge", "unhashed-first"}
    assert {c.hash_scheme for c in cases} == {"sha256", "builtin", "xxh3_128"}


def test_the_proof_table_states_each_refinement_bound() -> None:
    """docs/ci.md's per-layout table names every refinement check with its current bound."""
    from pathlib import Path

    table = (Path(__file__).parents[1] / "docs" / "ci.md").read_text()
    missing = [case.check_name for case in refinement.CASES
               if case.check_name.removesuffix(" exhaustive") not in table]
    assert not missing, missing


# ---- the random walks in the large world -------------------------------------------------------

def test_a_short_walk_passes_and_reaches_its_floor() -> None:
    """The opening scenario alone reaches every floor: hundreds of pages in one call and in one
    hit, three holders of a page, a batched step, a kept lookup."""
    outcome = walks.run_world(walks.WORLDS_BY_NAME["full"], walks=1, steps=4)
    assert outcome.status == "no-counterexample", outcome.detail
    assert "pages in one allocation 2" in outcome.detail and "holders of one page" in outcome.detail


def test_the_floor_fails_a_world_that_does_not_reach_it() -> None:
    world = replace(walks.WORLDS_BY_NAME["full"], floor=walks.Floor(allocation=10_000))
    outcome = walks.run_world(world, walks=1, steps=2)
    assert outcome.status == "failed" and "coverage floor not reached" in outcome.detail


def test_the_vocabulary_has_ids_past_16_32_and_63_bits() -> None:
    assert max(walks.VOCABULARY) == 2**64 - 1
    assert {t & 0xFFFF for t in walks.VOCABULARY if t >= 2**16} <= set(walks.SMALL) | {0xFFFF}
    assert any(2**31 < t < 2**32 for t in walks.VOCABULARY) and any(t > 2**32 for t in walks.VOCABULARY)


def _manager_whose_batch_never_caches(config: Any) -> Any:
    """A batch that registers no full page (as if ``delay_cache_pages`` were always set)."""
    from verikv.testing.adapter import build_cache_manager

    manager = build_cache_manager(config)

    def allocate_slots_batch(requests: Any, counts: Any, lookahead: int = 0, delay: bool = False,
                             **kwargs: Any) -> Any:
        return type(manager).allocate_slots_batch(manager, requests, counts, lookahead, True, **kwargs)
    manager.allocate_slots_batch = allocate_slots_batch
    return manager


def test_a_batch_unequal_to_its_single_calls_is_caught_by_the_walks_and_the_machine() -> None:
    from verikv.testing.manager_machine import LAYOUTS, find_manager_failure

    assert "REFINEMENT" in walks.failed_checks(walks.WORLDS_BY_NAME["full"], _manager_whose_batch_never_caches)
    assert "REFINEMENT" in find_manager_failure(_manager_whose_batch_never_caches, LAYOUTS["full"])


def test_statistics_that_miss_a_lookup_are_caught() -> None:
    from verikv.testing.adapter import build_cache_manager

    def make(config: Any) -> Any:
        manager = build_cache_manager(config)
        real = manager.make_prefix_cache_stats

        def make_prefix_cache_stats() -> Any:
            taken = real()
            taken.requests = max(0, taken.requests - 1)
            return taken
        manager.make_prefix_cache_stats = make_prefix_cache_stats
        return manager
    assert walks.failed_checks(walks.WORLDS_BY_NAME["full"], make) == ["REFINEMENT"]


def test_the_twin_stays_in_step_with_the_real_manager() -> None:
    from verikv.spec.abstraction import abstract_manager

    world = walks.WORLDS_BY_NAME["full+sliding"]
    walk = walks._run_walk(world, 0, None, steps=6)
    tee = walk.node.impl
    assert abstract_manager(tee.manager) == abstract_manager(tee.twin)
    assert walk.reached["batches"] >= 1
