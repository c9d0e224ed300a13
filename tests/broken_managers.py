"""Deliberately broken page managers, used only to show that the conformance harness catches them.

Each factory builds a `verikv.CacheManager` with one plausible bug reintroduced and wraps it in
the harness' ready adapter. ``BROKEN`` maps a short name to (factory, the invariant it breaks).
The page-in-use bug reuses a pool mutant of `verikv.proofs.mutants.pool`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from verikv.cache_manager import CachePages
from verikv.errors import OutOfPagesError
from verikv.hashing import PageHasher
from verikv.page_pool import PagePool
from verikv.proofs.mutants.pool import RevivedPageStaysFree
from verikv.spec.manager import ManagerConfig
from verikv.testing.adapter import build_cache_manager
from verikv.testing.conformance import AdapterFactory, CacheManagerAdapter


class RefcountsNeverDecremented(PagePool):
    """Freeing accepts the pages and does nothing: no count drops, no page rejoins the free list."""

    def free_page_ids(self, page_ids: Iterable[int]) -> None:
        """Drop nothing (the bug)."""


class StaleKeyOnReuse(PagePool):
    """A cached page handed out again forgets its key but stays in the cached map under it (the
    lazy eviction is half done), so a lookup of its old content returns it while it holds new
    content."""

    def _claim(self, ids: list[int]) -> None:
        for pid in ids:
            self._key[pid] = None
            self._ref[pid] = 1


class GroupByGroupAllocation:
    """Coordinator mixin: plans only the first group, then allocates group by group; a later
    group's shortfall returns None and the earlier groups keep their new pages (eSurge Q2)."""

    def allocate(self: Any, step: Any) -> Any:
        managers = self.single_type_managers
        hits = step.hits or tuple([] for _ in managers)
        free = self.page_pool.get_num_free_pages() if step.shard is None else self.page_pool.get_num_free_pages(
            dp_shard_hint=step.shard, data_parallel_size=step.dp)
        held = tuple([] for _ in managers) if step.held is None else step.held.pages
        if managers[0].get_num_pages_to_allocate(held[0], step.num_slots, hits[0]) > free:
            return None
        self.remove_skipped_pages(step.request_id, step.num_computed_tokens)
        record = step.held if step.held is not None else self._start(step)  # first pages: the hits, or none
        new = []
        for m, pages in zip(managers, record.pages):
            try:
                new.append(m.allocate_new_pages(pages, step.num_slots, step.shard, step.dp))
            except OutOfPagesError:
                return None
        if step.cache_keys is not None:
            self._cache_held(record, step.cache_keys, step.cache_tokens, step.num_computed_tokens)
        return tuple(new)


class TrustsItsOwnHit:
    """Manager mixin: a hit that is the very object the request's latest lookup returned is
    taken as that lookup returned it, whatever count comes with it and whatever was removed
    from it since (a shortcut that skips validating the manager's own result)."""

    def get_computed_pages(self: Any, request: Any, **dp: Any) -> Any:
        pages, num_tokens = super().get_computed_pages(request, **dp)  # type: ignore[misc]
        self.own_hit = (pages, pages.get_page_ids(), num_tokens)
        return pages, num_tokens

    def allocate_slots(self: Any, request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_pages: Any = None, *args: Any, **kwargs: Any) -> Any:
        own = getattr(self, "own_hit", None)
        if own is not None and new_computed_pages is own[0]:
            new_computed_pages, num_new_computed_tokens = CachePages(own[1], self.page_pool), own[2]
        return super().allocate_slots(request, num_new_tokens, num_new_computed_tokens,  # type: ignore[misc]
                                      new_computed_pages, *args, **kwargs)


def _parent_blind_digest(message: tuple[int, tuple[int, ...], Any]) -> int:
    """A page digest that ignores the parent key: equal pages at different places collide."""
    _parent, tokens, extra = message
    return hash((tokens, extra))


def _adapter(name: str, patch: Callable[[Any], None]) -> AdapterFactory:
    """An adapter factory for `verikv.CacheManager` with ``patch`` applied after construction."""
    def make(config: ManagerConfig) -> Any:
        manager = build_cache_manager(config)
        patch(manager)
        return manager

    def factory(config: ManagerConfig) -> CacheManagerAdapter:
        return CacheManagerAdapter(config, make)

    factory.__name__ = name
    return factory


def _pool_class(cls: type) -> Callable[[Any], None]:
    def patch(manager: Any) -> None:
        manager.page_pool.__class__ = cls
    return patch


def _group_by_group(manager: Any) -> None:
    coordinator = manager.coordinator
    coordinator.__class__ = type("GroupByGroup" + type(coordinator).__name__,
                                 (GroupByGroupAllocation, type(coordinator)), {})


def _trusts_own_hit(manager: Any) -> None:
    manager.__class__ = type("TrustsItsOwnHit" + type(manager).__name__, (TrustsItsOwnHit, type(manager)), {})


def _parent_blind_keys(manager: Any) -> None:
    manager.hasher = PageHasher(_parent_blind_digest, seed=0)


def _null_page_in_free_list(manager: Any) -> None:
    """The free list starts at page 0 (an off-by-one when it is built), so 0 is handed out."""
    manager.page_pool._free.link_front(0, [0])


BROKEN: dict[str, tuple[AdapterFactory, str]] = {
    "never-decrements-refcounts": (_adapter("NeverDecrements", _pool_class(RefcountsNeverDecremented)),
                                   "INV-REF-COUNT"),
    "evicts-page-in-use": (_adapter("EvictsPageInUse", _pool_class(RevivedPageStaysFree)), "INV-FREE-IFF-ZERO"),
    "hit-of-wrong-content": (_adapter("ParentBlindKeys", _parent_blind_keys), "INV-HIT-SAFE"),
    "non-atomic-multi-group": (_adapter("NonAtomicAllocation", _group_by_group), "INV-ATOMIC"),
}
"""name -> (adapter factory, the invariant a white-box run must report)."""

STALE_KEY: AdapterFactory = _adapter("StaleKeyOnReuse", _pool_class(StaleKeyOnReuse))
"""The toy of docs/model-testing.md: a cached page reused without evicting its key (a false hit)."""

MALFORMED_OWN_HIT: AdapterFactory = _adapter("TrustsItsOwnHit", _trusts_own_hit)
"""Accepts its own latest lookup result claimed with the wrong token count or after a page id
was removed from it: only the bad-input cases ``own-hit-miscounted`` and ``own-hit-edited``
show it (a scheduler that passes hits back unchanged never does)."""

OBSERVABLE: dict[str, tuple[AdapterFactory, str]] = {
    "evicts-page-in-use": (BROKEN["evicts-page-in-use"][0], "INV-FREE-IFF-ZERO"),
    "hands-out-null-page": (_adapter("NullPageHandedOut", _null_page_in_free_list), "INV-NULL"),
}
"""Bugs a black-box run also catches through the pages an allocation returns: name ->
(adapter factory, the invariant reported when only that check is enforced)."""
