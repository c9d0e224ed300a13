"""vLLM 0.33's EAGLE lookup (``eagle_rule="vllm"``) beside the drop-once rule: the resent prompt,
one group, caps, the option's validation, the sliding mask and the checks' registration.

Expected lengths are worked out by hand from the rule (`verikv.spec.hit_rules.vllm_eagle_hit`)
in the comments; the spec and the manager are asked the same questions and must agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, InvalidArgumentError, Request, SlidingWindowSpec
from verikv.proofs.refinement import vllm_eagle as vllm_eagle_checks
from verikv.proofs.runner.registry import discover_checks, discover_mutants
from verikv.spec import hit_rules as hr, manager as m
from verikv.spec.pool import PreconditionError
from verikv.testing.adapter import build_cache_manager
from verikv.vllm_eagle import EAGLE_RULES

GEOMETRY: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype="float16", use_mla=False)
PROMPT = tuple(range(8))


def full(page: int = 4) -> m.GroupLayout:
    return m.GroupLayout("full", page)


def sliding(page: int = 4, window: int = 6) -> m.GroupLayout:
    return m.GroupLayout("sliding", page, window)


def config(*groups: m.GroupLayout, rule: str = "vllm", eagle: bool = True, **kw: Any) -> m.ManagerConfig:
    return m.ManagerConfig(tuple(groups), 16, 64, use_eagle=eagle, eagle_rule=rule, **kw)  # type: ignore[arg-type]


def resend(cfg: m.ManagerConfig, prompt: tuple[int, ...] = PROMPT, cap: int | None = None,
           second: tuple[int, ...] | None = None) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Compute ``prompt`` once (allocate, cache, free), then look up ``second`` (default: the
    same prompt again) on the real manager; the spec must return the same hit."""
    manager = build_cache_manager(cfg)
    first = Request("a", list(prompt))
    hit, n = manager.get_computed_pages(first)
    manager.allocate_slots(first, len(prompt), n, hit)
    first.num_computed_tokens = len(prompt)
    manager.free(first)
    again = Request("b", list(second or prompt))
    pages, length = manager.get_computed_pages(again, max_cache_hit_length=cap)
    got = (tuple(tuple(group) for group in pages.get_page_ids()), length)

    s = m.init(cfg)
    s, _ = m.allocate_slots(s, m.RequestView("a", prompt), len(prompt))
    s = m.free_request(s, "a")
    want = m.lookup(s, m.RequestView("b", second or prompt), max_cache_hit_length=cap)
    assert got == (want.pages, want.num_tokens)
    return got


# --- the resent prompt -----------------------------------------------------------------------------

def test_a_resent_page_aligned_prompt_keeps_a_page_under_the_vllm_rule() -> None:
    # page 4, 8 tokens computed once, the same 8 again with EAGLE on full + sliding (window 6):
    # full peeks min(7 + 4, 8) = 8 tokens (2 pages), drops one: 4; sliding peeks min(4 + 4, 8):
    # no run of 2 + 1 pages, the run from page 0 (2 pages) drops one: 4. vLLM 0.33 hits 4 tokens.
    pages, length = resend(config(full(), sliding()))
    assert length == 4 and all(len(group) == 1 and group[0] != 0 for group in pages)


def test_the_same_resend_hits_nothing_under_the_drop_once_rule() -> None:
    # the fixed point at 7 is 4 (page 0; page 1 would end past 7), minus one page: 0.
    assert resend(config(full(), sliding(), rule="drop-once"))[1] == 0
    assert CacheManager(8, [CacheGroupSpec(FullAttentionSpec(page_size=4, **GEOMETRY))], 32).eagle_rule == "drop-once"


def test_mixed_page_sizes_and_a_resend_that_goes_on() -> None:
    # full page 8, sliding page 4 (window 5), 16 tokens resent: full peeks min(15 + 8, 16) = 16
    # (2 pages), drops one: 8; sliding peeks min(8 + 4, 16) = 12: a run of 1 + 1 pages ending at
    # page 3, whose end after the drop (2 pages, 8 tokens) is whole units: 8. The drop-once rule:
    # the fixed point at 15 is 8, recomputed from 8 - 8: 0.
    prompt = tuple(range(16))
    mixed = (full(8), sliding(4, 5))
    assert resend(config(*mixed), prompt)[1] == 8
    assert resend(config(*mixed, rule="drop-once"), prompt)[1] == 0
    # 13 tokens cached, a 13-token request sharing the first 12: 3 key pages, max_length 12,
    # full peeks min(12 + 4, 12) = 12 (3 pages), drops to 8; sliding peeks 12: 3 pages hit,
    # dropped to 8.
    assert resend(config(full(), sliding()), tuple(range(13)), second=tuple(range(12)) + (99,))[1] == 8


def test_the_vllm_rule_respects_max_cache_hit_length_and_num_tokens_minus_one() -> None:
    # cap 4: full peeks min(4 + 4, 8) = 8 and drops back to 4; sliding likewise: 4. Cap 3:
    # full peeks 7 -> 1 page, dropped: 0.
    assert resend(config(full(), sliding()), cap=4)[1] == 4
    assert resend(config(full(), sliding()), cap=3)[1] == 0
    # 9 tokens: 2 full key pages, max_length 8; full peeks min(12, 8) = 8 -> drops to 4.
    assert resend(config(full(), sliding()), tuple(range(9)))[1] == 4
    for n in range(1, 14):
        length = resend(config(full(), sliding()), tuple(range(n)))[1]
        assert length <= n - 1 and length % 4 == 0


# --- one group -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 18))
def test_one_full_group_hits_what_the_drop_once_rule_hits(n: int) -> None:
    prompt = tuple(range(n))
    assert resend(config(full()), prompt) == resend(config(full(), rule="drop-once"), prompt)


def test_one_sliding_group_follows_vllms_unitary_lookup_where_the_rules_part() -> None:
    # pages 0 and 2 cached, 1 not, window 5 (one page): drop-once takes page 2 (the fixed point
    # at 3 pages), then page 0 at 2 pages: 4 tokens. vLLM looks for 1 + 1 pages: none; the run
    # from page 0 (1 page) loses its page: 0.
    hit = (True, False, True)
    group = hr.LookupGroup("sliding", 4, 5, hit)
    once = hr.common_hit_length([lambda n: hr.sliding_rule(hit, 4, n, 5).end * 4], [4], 12, use_eagle=True)
    assert (once, hr.vllm_eagle_hit([group], 12, 12)[0]) == (4, 0)


def test_without_eagle_the_rule_changes_nothing() -> None:
    for prompt in (PROMPT, tuple(range(13))):
        assert resend(config(full(), sliding(), eagle=False), prompt) == \
            resend(config(full(), sliding(), eagle=False, rule="drop-once"), prompt)


# --- the option ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["VLLM", "esurge", "", None, 1, np.str_("vllm"), b"vllm", ["vllm"]])
def test_a_bad_eagle_rule_is_a_typed_error(rule: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="eagle_rule"):
        CacheManager(8, [CacheGroupSpec(FullAttentionSpec(page_size=4, **GEOMETRY))], 32, use_eagle=True,
                     eagle_rule=rule)
    with pytest.raises(PreconditionError):
        m.init(config(full(), rule=rule))  # type: ignore[arg-type]


def test_the_rule_names_agree_between_spec_and_manager() -> None:
    assert EAGLE_RULES == hr.EAGLE_RULES
    manager = CacheManager(8, [CacheGroupSpec(FullAttentionSpec(page_size=4, **GEOMETRY))], 32, use_eagle=True,
                           eagle_rule="vllm")
    assert (manager.eagle_rule, manager.coordinator.eagle_rule) == ("vllm", "vllm")


# --- sliding pages that can never serve a hit ------------------------------------------------------

def _keyed_sliding_pages(rule: str, prompt: tuple[int, ...], full_page: int) -> list[bool]:
    manager = CacheManager(32, [CacheGroupSpec(FullAttentionSpec(page_size=full_page, **GEOMETRY)),
                                CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=5, **GEOMETRY))],
                           64, use_eagle=True, eagle_rule=rule, skip_unreachable_sliding_pages=True)
    request = Request("a", list(prompt))
    manager.allocate_slots(request, len(prompt))
    pages = manager.get_page_ids("a")[1]  # type: ignore[index]
    return [manager.page_pool.key_of(page) is not None for page in pages]


def test_the_vllm_rule_keeps_the_page_past_each_hit_unit() -> None:
    # sliding page 4, window 5: a hit reads one page (drop-once), or that page and the next one
    # (vLLM's peek). Hit unit 12 (three pages): drop-once keys the last page of each unit, the
    # vLLM rule also the first page of the next unit. Hit unit 8 (two pages): vLLM's two pages
    # fill a unit, so every page is keyed.
    prompt = tuple(range(24))
    assert _keyed_sliding_pages("drop-once", prompt, 12) == [False, False, True, False, False, True]
    assert _keyed_sliding_pages("vllm", prompt, 12) == [False, False, True, True, False, True]
    assert _keyed_sliding_pages("vllm", prompt, 8) == [True] * 6
    spec_config = config(full(12), sliding(4, 5), skip_unreachable_sliding_pages=True)
    assert [m.sliding_page_can_hit(spec_config, 1, j) for j in range(6)] == [False, False, True, True, False, True]


@pytest.mark.parametrize("full_page", [8, 12])
@pytest.mark.parametrize("n", [8, 9, 12, 13, 16, 17, 24, 25])
def test_skipping_unreachable_pages_loses_no_vllm_hit(n: int, full_page: int) -> None:
    prompt = tuple(range(n))
    mixed = (full(full_page), sliding(4, 5))
    assert resend(config(*mixed, skip_unreachable_sliding_pages=True), prompt)[1] == \
        resend(config(*mixed), prompt)[1]


# --- the checks are registered and pass ------------------------------------------------------------

def test_the_checks_and_mutants_are_registered() -> None:
    checks = {c.name for c in discover_checks()}
    mutants = {mu.name for mu in discover_mutants()}
    assert {vllm_eagle_checks.CHECK_NAME, "lookup.eagle-vllm(full+sliding)/INV-HIT-SHAPE",
            "refine:eagle-vllm(full+sliding):N<=7,depth<=6 exhaustive"} <= checks
    assert {"spec:eagle-vllm-no-peek", "spec:eagle-vllm-drops-twice", "impl:eagle_vllm_no_peek",
            "spec:layout-eagle-vllm-peek-kept"} <= mutants


@pytest.mark.parametrize("check", vllm_eagle_checks.checks(), ids=lambda c: c.name)
def test_the_vllm_rule_checks_pass(check: Any) -> None:
    outcome = check.run()
    assert outcome.ok, outcome.detail


@pytest.mark.parametrize("mutant", [mu for mu in vllm_eagle_checks.mutants() if mu.kind == "spec"],
                         ids=lambda mu: mu.name)
def test_a_broken_vllm_rule_is_caught(mutant: Any) -> None:
    assert mutant.detect()


# --- conformance: a manager that follows vLLM's rule declares it -----------------------------------

def _vllm_rule_manager(config: m.ManagerConfig) -> Any:
    """An engine's manager that always follows vLLM 0.33's EAGLE rule, whatever it is told."""
    from dataclasses import replace

    from verikv.testing.adapter import CacheManagerAdapter

    return CacheManagerAdapter(config, lambda c: build_cache_manager(replace(c, eagle_rule="vllm")))


def test_a_vllm_rule_manager_fails_refinement_unless_it_declares_the_rule() -> None:
    from verikv.testing.conformance import ConformanceConfig, ConformanceError, check_conformance

    settings = dict(mode="black-box", shrink=False, profile="ci", max_examples=30)
    with pytest.raises(ConformanceError) as failure:
        check_conformance(_vllm_rule_manager, "full+sliding(eagle)", ConformanceConfig(**settings))  # type: ignore[arg-type]
    assert "REFINEMENT" in failure.value.names
    declared = ConformanceConfig(eagle_rule="vllm", **settings)  # type: ignore[arg-type]
    for layout in ("full+sliding(eagle)", "full(page 8)+sliding(page 4)(eagle, vllm rule)"):
        check_conformance(_vllm_rule_manager, layout, declared)


def test_the_claimed_rule_selects_and_converts_eagle_layouts() -> None:
    from verikv.testing.conformance import LAYOUTS, ConformanceConfig

    vllm_only = "full(page 8)+sliding(page 4)(eagle, vllm rule)"
    default = {layout.name: layout.config for layout in ConformanceConfig().resolved_layouts()}
    assert vllm_only not in default and default["full+sliding(eagle)"].eagle_rule == "drop-once"
    vllm = {layout.name: layout.config for layout in ConformanceConfig(eagle_rule="vllm").resolved_layouts()}
    assert {name for name, c in vllm.items() if c.use_eagle} == {"full+sliding(eagle)", vllm_only}
    assert all(c.eagle_rule == "vllm" for c in vllm.values() if c.use_eagle)
    both = ConformanceConfig(eagle_rule=None, free_order=None).resolved_layouts()
    assert {layout.name for layout in both} == set(LAYOUTS)
