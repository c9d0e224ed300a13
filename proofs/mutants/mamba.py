"""Mamba prefix-caching bugs (align mode), planted in a real `CacheManager` and in the spec, and
shown to make the exhaustive refinement check ``refine:full+mamba(align)`` fail.

What they show: a Mamba state restored at an unaligned position or for a different prefix is
caught. Each bug changes one rule of `verikv.single_type_managers.MambaAlignManager`
(or of the spec's Mamba block) the way a plausible off-by-one would; the refinement checker
drives the real manager beside the spec and judges hits by the harness' own record of which
state each page holds (`verikv.testing.manager_machine.ManagerMachine.record_mamba_state`),
so a state keyed under the wrong prefix fails INV-HIT-SAFE when a lookup returns it.
Discovered by `verikv.proofs.runner.registry` (``verikv prove --mutants``) through `mutants`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verikv.proofs.mutants.manager import _base, _override
from verikv.proofs.mutants.refinement import _Bug, _detector, _doc
from verikv.proofs.refinement.exhaustive import CASES_BY_NAME, build_manager, failed_checks
from verikv.proofs.runner.registry import Mutant
from verikv.spec import manager as spec

CASE = "full+mamba(align)"


def _mamba_groups(manager: Any) -> list[Any]:
    return [m for m in manager.coordinator.single_type_managers if m.kind == "mamba_align"]


def state_cached_unaligned(manager: Any) -> None:
    """A state is keyed when the computed count ends inside a page: the page holding the state
    after ``c`` tokens is registered under the key of its whole page (restored at an unaligned
    position)."""
    for stm in _mamba_groups(manager):
        def cache_states(self: Any, pages: list[int], num_cached: int, keys: Any, num_tokens: int,
                         num_computed_tokens: int) -> int:
            size = self.page_size
            rounded = min(-(-num_computed_tokens // size) * size, num_tokens // size * size)
            return int(_base(self).cache_states(self, pages, num_cached, keys, num_tokens,
                                                max(rounded, num_computed_tokens)))
        _override(stm, cache_states=cache_states)


def state_cached_for_next_prefix(manager: Any) -> None:
    """The state after ``c`` tokens is registered under the key of the next page's prefix
    (``c + page_size`` tokens): restored for a different prefix."""
    for stm in _mamba_groups(manager):
        def cache_states(self: Any, pages: list[int], num_cached: int, keys: Any, num_tokens: int,
                         num_computed_tokens: int) -> int:
            c, size = num_computed_tokens, self.page_size
            j = c // size
            if c and c % size == 0 and j < len(pages) and self.key_index(j) < len(keys) and c <= num_tokens:
                page = pages[j - 1]
                if page and self.page_pool.key_of(page) is None:
                    self.page_pool.cache_page_id(page, self.group_key(keys[self.key_index(j)]))
            return int(max(num_cached, min(num_tokens, c) // size))
        _override(stm, cache_states=cache_states)


def hit_under_attention_key(manager: Any) -> None:
    """The Mamba lookup pairs each content key with the first group's id (the attention group)
    instead of its own: it returns an attention page of that prefix as the state."""
    for stm in _mamba_groups(manager):
        def find_longest_cache_hit(self: Any, keys: Any, max_length: int, group_ids: Any,
                                   shard: Any = None, dp: Any = None) -> Any:
            return _base(self).find_longest_cache_hit(self, keys, max_length, [0] * len(group_ids), shard, dp)
        _override(stm, find_longest_cache_hit=find_longest_cache_hit)


def start_state_freed(manager: Any) -> None:
    """The page holding the state a step starts from is freed before the step (the engine copies
    from a page that is no longer held)."""
    for stm in _mamba_groups(manager):
        def skipped_states(self: Any, states: Any, num_computed_tokens: int) -> list[int]:
            return list(_base(self).skipped_states(self, states, num_computed_tokens + self.page_size))
        _override(stm, skipped_states=skipped_states)


_CATALOGUE: tuple[_Bug, ...] = (
    _Bug("mamba_state_cached_unaligned", "INV-HIT-SAFE", (CASE,), state_cached_unaligned),
    _Bug("mamba_state_cached_for_next_prefix", "INV-HIT-SAFE", (CASE,), state_cached_for_next_prefix),
    _Bug("mamba_hit_under_attention_key", "INV-HIT-SAFE", (CASE,), hit_under_attention_key),
    _Bug("mamba_start_state_freed", "INV-WINDOW-LIVE", (CASE,), start_state_freed),
)


def _spec_keys_unaligned_state(original: Callable[..., Any]) -> Callable[..., Any]:
    """spec: the Mamba page `cache_pages` may key is the page holding the state after the
    computed tokens even when they end inside it (a state keyed for a longer prefix)."""
    def cacheable(layout: Any, req: Any, num_tokens: int) -> int | None:
        c = req.num_computed_tokens
        if c == 0 or c > num_tokens:
            return None
        return spec.mamba_state_index(layout, c)
    return cacheable


def _spec_detector() -> list[str]:
    case = CASES_BY_NAME[CASE]
    original = spec.mamba_cacheable_page
    spec.mamba_cacheable_page = _spec_keys_unaligned_state(original)
    try:
        return [f"{case.check_name}: {name}" for name in failed_checks(case, build_manager(case))]
    finally:
        spec.mamba_cacheable_page = original


def mutants() -> list[Mutant]:
    """The Mamba align bugs (``impl:mamba_*``) and one spec bug (``spec:mamba-state-keyed-unaligned``),
    each caught by ``refine:full+mamba(align)``."""
    impl = [Mutant(name=f"impl:{bug.name}", kind="impl", invariant=bug.invariant,
                   description=f"{_doc(bug.plant)} [refine: {CASE}]" if bug.plant else bug.name,
                   detect=_detector(bug))
            for bug in _CATALOGUE]
    # (the mutated spec keys a state the correct implementation does not key: the refinement
    # check reports the disagreement, before any invariant of the spec's own state is read)
    return impl + [Mutant(name="spec:mamba-state-keyed-unaligned", kind="spec", invariant="REFINEMENT",
                          description=f"{_doc(_spec_keys_unaligned_state)} [refine: {CASE}]",
                          detect=_spec_detector)]
