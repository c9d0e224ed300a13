"""Deliberately broken cache managers, each breaking one manager-level rule, and how each is caught.

A mutant is a real `verikv.CacheManager` with one component swapped for a subclass that
reintroduces a plausible bug (several are eSurge's: non-atomic multi-group
allocation (Q2), window pages freed before a failed allocation (Q16), ``num_cached`` going
down (Q4), EAGLE dropping twice (Q11), a hash chain that skips a parent (Q1)). ``detect``
runs the scheduler-shaped machine of `verikv.testing.manager_machine` against it on one group
layout (bounded, derandomized) and returns the names of the checks that failed; an empty
list means the mutant survived, a defect of the checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verikv.proofs.runner.registry import Mutant


def _override(obj: Any, **methods: Callable[..., Any]) -> None:
    """Give ``obj`` a one-off subclass of its class with ``methods`` replaced (works with
    ``__slots__`` classes: the subclass adds no slots)."""
    cls = type(obj)
    obj.__class__ = type(f"Mutated{cls.__name__}", (cls,), {"__slots__": (), **methods})


def _base(obj: Any) -> type[Any]:
    """The real class behind an overridden object (for calling the original method)."""
    return type(obj).__mro__[1]


# --- the bugs ---------------------------------------------------------------------------------

def free_skips_last_page(manager: Any) -> None:
    """Freeing a request leaves one reference on its last page (a missing decrement)."""
    for stm in manager.coordinator.single_type_managers:
        def free(self: Any, pages: Any) -> None:
            held = [p for p in pages if p != 0]
            if held:
                self.page_pool.touch_ids([held[-1]])
            _base(self).free(self, pages)
        _override(stm, free=free)


def hits_touched_twice(manager: Any) -> None:
    """A successful allocation takes two references on each prefix-hit page instead of one."""
    def allocate(self: Any, step: Any) -> Any:
        new = _base(self).allocate(self, step)
        if new is not None and step.hits is not None:
            self.page_pool.touch_ids([p for group in step.hits for p in group])
        return new
    _override(manager.coordinator, allocate=allocate)


def lookup_returns_foreign_page(manager: Any) -> None:
    """The last page of a non-empty hit is swapped for a page cached under another key (one
    outside the hit: a page of the hit itself would make a malformed hit, INV-HIT-SHAPE's
    case, not a false one)."""
    def find_longest_cache_hit(self: Any, keys: Any, max_length: int, *args: Any) -> Any:
        hits, length = _base(self).find_longest_cache_hit(self, keys, max_length, *args)
        if length and hits[0]:
            hit = set(hits[0])
            other = next((ids[0] for _, ids in self.page_pool.cached_items() if not hit.intersection(ids)), None)
            if other is not None:
                hits[0][-1] = other
        return hits, length
    _override(manager.coordinator, find_longest_cache_hit=find_longest_cache_hit)


def salt_ignored(manager: Any) -> None:
    """Keys leave out ``cache_salt``, so tenants with equal prompts share KV (no isolation)."""
    from types import SimpleNamespace

    from verikv.hashing import PageHasher

    class SaltBlindHasher(PageHasher):
        def hash_request(self, request: Any, page_size: int, start: int = 0, parent: Any = None,
                         stop: int | None = None) -> list[Any]:
            unsalted = SimpleNamespace(all_token_ids=request.all_token_ids, lora_id=request.lora_id,
                                       mm_features=request.mm_features, cache_salt=None)
            return super().hash_request(unsalted, page_size, start, parent, stop)

    manager.hasher = SaltBlindHasher("sha256")


def chain_skips_parent(manager: Any) -> None:
    """Page i's key chains to page i - 2 (page 1 to the root), as when a nulled window page is
    skipped while hashing (eSurge Q1): equal pages at different depths share a key."""
    from verikv.hashing import PageHasher

    class SkippedParentHasher(PageHasher):
        def hash_request(self, request: Any, page_size: int, start: int = 0, parent: Any = None,
                         stop: int | None = None) -> list[Any]:
            last = len(request.all_token_ids) // page_size if stop is None else stop
            keys: list[Any] = []
            for i in range(last):
                grand = keys[i - 2] if i >= 2 else self.root_key
                keys += super().hash_request(request, page_size, i, grand, i + 1)
            return keys[start:]

    manager.hasher = SkippedParentHasher("sha256")


def hit_covers_last_token(manager: Any) -> None:
    """The hit cap is ``num_tokens`` instead of ``num_tokens - 1`` (nothing left to compute)."""
    def find_longest_cache_hit(self: Any, keys: Any, max_length: int, *args: Any) -> Any:
        return _base(self).find_longest_cache_hit(self, keys, max_length + 1, *args)
    _override(manager.coordinator, find_longest_cache_hit=find_longest_cache_hit)


def partial_allocation_kept(manager: Any) -> None:
    """When the plan does not fit, the first group still takes what it can (eSurge Q2)."""
    from verikv.errors import OutOfPagesError

    def allocate(self: Any, step: Any) -> Any:
        new = _base(self).allocate(self, step)
        first = self.single_type_managers[0]
        rec = self.holding(step.request_id)
        if new is None and rec is not None:
            try:
                first.allocate_new_pages(rec.pages[0], step.num_slots)
            except OutOfPagesError:
                pass
        return new
    _override(manager.coordinator, allocate=allocate)


def window_freed_before_failing(manager: Any) -> None:
    """Out-of-window pages are freed before the plan is checked (eSurge Q16)."""
    def allocate(self: Any, step: Any) -> Any:
        if self.holding(step.request_id) is not None:
            self.remove_skipped_pages(step.request_id, step.num_computed_tokens)
        return _base(self).allocate(self, step)
    _override(manager.coordinator, allocate=allocate)


def num_cached_decreases(manager: Any) -> None:
    """cache_pages with fewer tokens lowers ``num_cached`` (eSurge Q4)."""
    for stm in manager.coordinator.single_type_managers:
        def cache_pages(self: Any, pages: Any, num_cached: int, keys: Any, num_tokens: int) -> int:
            return min(_base(self).cache_pages(self, pages, num_cached, keys, num_tokens), num_tokens // self.page_size)
        _override(stm, cache_pages=cache_pages)


def free_in_forward_order(manager: Any) -> None:
    """A request's pages are freed first page first, so chain heads are evicted before tails."""
    for stm in manager.coordinator.single_type_managers:
        def free(self: Any, pages: Any) -> None:
            held = [p for p in pages if p != 0]
            if held:
                self.page_pool.free_page_ids(held)
        _override(stm, free=free)


def shard_ignored(manager: Any) -> None:
    """Allocation ignores the request's DP shard and takes pages from the whole pool."""
    def allocate(self: Any, step: Any) -> Any:
        return _base(self).allocate(self, step._replace(shard=None, dp=None))
    _override(manager.coordinator, allocate=allocate)


def eagle_drops_twice(manager: Any) -> None:
    """With EAGLE the hit is shortened a second time (eSurge Q11's hybrid double drop)."""
    def find_longest_cache_hit(self: Any, keys: Any, max_length: int, *args: Any) -> Any:
        hits, length = _base(self).find_longest_cache_hit(self, keys, max_length, *args)
        if length > 0:
            hits, length = _base(self).find_longest_cache_hit(self, keys, length - 1, *args)
        return hits, length
    _override(manager.coordinator, find_longest_cache_hit=find_longest_cache_hit)


@dataclass(frozen=True)
class _Case:
    bug: Callable[[Any], None]
    invariant: str
    layout: str


_CATALOGUE: tuple[_Case, ...] = (
    _Case(free_skips_last_page, "INV-REF-COUNT", "full"),
    _Case(hits_touched_twice, "INV-REF-COUNT", "full"),
    _Case(lookup_returns_foreign_page, "INV-HIT-SAFE", "full"),
    _Case(salt_ignored, "INV-HIT-SAFE", "full"),
    _Case(chain_skips_parent, "INV-HIT-SAFE", "full"),
    _Case(hit_covers_last_token, "INV-HIT-SHAPE", "full"),
    _Case(partial_allocation_kept, "INV-ATOMIC", "full+sliding(window>page)"),
    _Case(window_freed_before_failing, "INV-ATOMIC", "full+sliding(window<=page)"),
    _Case(num_cached_decreases, "REFINEMENT", "full"),
    _Case(free_in_forward_order, "REFINEMENT", "full"),
    _Case(shard_ignored, "REFINEMENT", "dp2"),
    _Case(eagle_drops_twice, "REFINEMENT", "full+sliding(eagle)"),
)


def _detector(case: _Case) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        from verikv.testing.adapter import build_cache_manager
        from verikv.testing.manager_machine import LAYOUTS, find_manager_failure

        def make(config: Any) -> Any:
            manager = build_cache_manager(config)
            case.bug(manager)
            return manager

        return find_manager_failure(make, LAYOUTS[case.layout])
    return detect


def mutants() -> list[Mutant]:
    """Every broken manager, named ``manager:<bug>``, with the check expected to catch it."""
    return [Mutant(name=f"manager:{case.bug.__name__}", kind="impl", invariant=case.invariant,
                   description=f"{(case.bug.__doc__ or '').strip()} [layout {case.layout}]",
                   detect=_detector(case))
            for case in _CATALOGUE]
