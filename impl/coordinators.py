"""Coordinators: one page pool shared by every cache group, one single-type manager per group.

A coordinator fans the manager-level operations out to its groups and owns the two rules that
span groups:

- the common prefix-cache hit (`find_longest_cache_hit`): each group's own rule applied in
  group order, repeated until a whole pass leaves the hit length unchanged (a fixed point, for
  any number of attention types); with EAGLE the fixed point is recomputed once from one
  largest page fewer;
- all-or-nothing allocation (`allocate_slots`, INV-ATOMIC): the whole plan (window frees,
  revived hits, new pages per group, shard-local availability) is computed first; if it does
  not fit nothing changes, otherwise it is applied in eSurge's order.

`CacheCoordinatorNoPrefixCache` serves caching-off managers (never hits, never caches),
`UnitaryCacheCoordinator` one group, `HybridCacheCoordinator` several; the rules are shared,
the classes exist for eSurge's names and dispatch (`get_kv_cache_coordinator`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import countOf
from typing import TypedDict, cast

from verikv.cache_specs import (
    CacheGroupsConfig,
    CacheGroupSpec,
    ChunkedLocalAttentionSpec,
    MambaSpec,
    split_cache_groups,
)
from verikv.dp_sharding import checked_int
from verikv.errors import (
    CacheSpecError,
    ForeignPageError,
    InvalidArgumentError,
    UnknownRequestError,
    describe,
)
from verikv.free_queue import MAX_PAGE_ID
from verikv.hashing import PageHash
from verikv.page_pool import PagePool
from verikv.single_type_managers import (
    NULL_PAGE,
    MambaAlignManager,
    SingleTypeCacheManager,
    get_manager_for_kv_cache_spec,
)

PageIds = tuple[list[int], ...]

MAMBA_CACHE_MODES = ("none", "align")
"""How Mamba groups are cached: ``"none"`` (one state page per request, never cached: vLLM's
mode without prefix caching, and eSurge's only one) or ``"align"`` (states kept and hit at
page-aligned positions: `verikv.single_type_managers.MambaAlignManager`)."""

#: token positions and slot numbers are int32 on the device too (slot mappings, positions)
MAX_MODEL_LEN = 2**31 - 1


class CacheCoordinator:
    """Shared machinery; use `get_kv_cache_coordinator` to pick the right subclass.

    ``shard`` arguments are DP shard indices (``None``: the whole pool) and ``dp`` the DP size
    the pool's shard lists use; the manager resolves them before calling.
    """

    def __init__(
        self,
        num_pages: int,
        kv_cache_groups: Sequence[CacheGroupSpec],
        max_model_len: int,
        use_eagle: bool,
        enable_caching: bool,
        *,
        free_order: str = "esurge",
        enable_kv_events: bool = False,
        mamba_cache_mode: str = "none",
    ) -> None:
        checked_int(num_pages, "num_pages", minimum=1, maximum=MAX_PAGE_ID + 1)  # the pool's bound, checked first
        if not isinstance(mamba_cache_mode, str) or mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise InvalidArgumentError(f"mamba_cache_mode must be one of {MAMBA_CACHE_MODES}, got "
                                       f"{describe(mamba_cache_mode)}")
        #: "align": Mamba states are cached at page-aligned positions (only with caching on)
        self.mamba_cache_mode: str = mamba_cache_mode if enable_caching else "none"
        # CacheGroupsConfig validates any value and stores a tuple (eSurge callers pass lists)
        groups = CacheGroupsConfig(num_pages, cast("tuple[CacheGroupSpec, ...]", kv_cache_groups)).kv_cache_groups
        self.max_model_len: int = checked_int(max_model_len, "max_model_len", minimum=1, maximum=MAX_MODEL_LEN)
        if not isinstance(use_eagle, bool) or not isinstance(enable_caching, bool):
            raise InvalidArgumentError("use_eagle and enable_caching must be bools")
        if enable_caching:
            split_cache_groups(groups)  # the page-size rule (CacheSpecError names the group)
        for gid, group in enumerate(groups):
            spec = group.kv_cache_spec
            if isinstance(spec, MambaSpec) and self.mamba_cache_mode == "none" and spec.page_size < self.max_model_len:
                raise CacheSpecError(
                    f"Mamba cache group {gid} has page size {spec.page_size} < max_model_len "
                    f"{self.max_model_len}: a request's state must fit one page"
                )
            if use_eagle and isinstance(spec, ChunkedLocalAttentionSpec):
                raise CacheSpecError(f"EAGLE is not supported with chunked local attention (cache group {gid})")
        self.kv_cache_groups: tuple[CacheGroupSpec, ...] = groups
        self.use_eagle: bool = use_eagle
        self.enable_caching: bool = enable_caching
        try:
            self.page_pool: PagePool = PagePool(num_pages, enable_caching, free_order=free_order,
                                                enable_kv_events=enable_kv_events)
        except MemoryError:
            raise InvalidArgumentError(
                f"num_pages {num_pages}: not enough host memory for the pool's bookkeeping") from None
        sizes = [g.kv_cache_spec.page_size for g in groups]
        #: the page size request keys are computed at: the smallest of the groups that cache
        #: (all but Mamba in "none" mode); None when no group caches (or caching is off: any
        #: page sizes then)
        self.key_page_size: int | None = min(
            (g.kv_cache_spec.page_size for g in groups
             if self.mamba_cache_mode == "align" or not isinstance(g.kv_cache_spec, MambaSpec)),
            default=None) if enable_caching else None
        self.single_type_managers: tuple[SingleTypeCacheManager, ...] = tuple(
            get_manager_for_kv_cache_spec(g.kv_cache_spec, self.page_pool, gid, self.key_page_size,
                                          self.mamba_cache_mode)
            for gid, g in enumerate(groups)
        )
        #: the Mamba align groups' managers (their state pages follow `MambaAlignManager`'s rules)
        self._mamba_align: tuple[MambaAlignManager, ...] = tuple(
            m for m in self.single_type_managers if isinstance(m, MambaAlignManager))
        self._windowed = tuple(m for m in self.single_type_managers if m.frees_skipped_pages)
        self._lcm_page_size = math.lcm(*sizes) if sizes else 1
        self._max_page_size = max(sizes) if sizes else 1

    # ---- lookups --------------------------------------------------------------------------

    def find_longest_cache_hit(
        self, keys: Sequence[PageHash], max_cache_hit_length: int, shard: int | None = None, dp: int | None = None
    ) -> tuple[PageIds, int]:
        """Hit pages per group and the hit length in tokens (a multiple of every page size).

        Every group accepts exactly the returned length (fixed point of the per-group rules,
        started from ``max_cache_hit_length`` rounded down to the lcm of the page sizes).
        """
        managers = self.single_type_managers
        if type(max_cache_hit_length) is not int or max_cache_hit_length < 0:
            max_cache_hit_length = checked_int(max_cache_hit_length, "max_cache_hit_length", minimum=0)
        if type(keys) is not list and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence)):
            raise InvalidArgumentError(f"keys must be a sequence of PageHash, got {type(keys).__name__}")
        start = max_cache_hit_length // self._lcm_page_size * self._lcm_page_size
        if len(managers) == 1 and managers[0].hit_is_stable and not self.use_eagle:
            hits = managers[0].find_longest_cache_hit(keys, start, (0,), shard, dp)[0]  # its own fixed point
            return (hits,), len(hits) * managers[0].page_size
        results: list[list[int]] = [[] for _ in managers]
        at = [-1] * len(managers)  # the max_length each group's result was computed with
        length = self._fixed_point(keys, start, shard, dp, results, at)
        if self.use_eagle and length > 0:
            length = self._fixed_point(keys, length - self._max_page_size, shard, dp, results, at)
        return tuple(results), length

    def _fixed_point(
        self, keys: Sequence[PageHash], length: int, shard: int | None, dp: int | None,
        results: list[list[int]], at: list[int],
    ) -> int:
        """Apply each group's rule in group order until a whole pass keeps ``length``.

        A group already evaluated at exactly ``length`` is not looked up again (its rule is a
        pure function of the length), so a stable pass costs nothing; a group whose rule is
        stable (``hit_is_stable``) counts as evaluated at the length it returned.
        """
        managers = self.single_type_managers
        while True:
            start = length
            for gid, manager in enumerate(managers):
                if at[gid] == length:
                    continue
                hits = manager.find_longest_cache_hit(keys, length, (gid,), shard, dp)[0]
                results[gid] = hits
                found = len(hits) * manager.page_size
                at[gid] = found if manager.hit_is_stable else length
                length = found
            if length == start:
                return length

    # ---- planning and allocation -------------------------------------------------------------

    def get_num_pages_to_allocate(self, request_id: str, num_tokens: int, new_computed_pages: PageIds) -> int:
        """Free-list pages the request takes to cover ``num_tokens`` slots (all groups)."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        self._check_hit_shape(new_computed_pages)
        return self._pages_to_allocate(request_id, num_tokens, new_computed_pages)

    def _pages_to_allocate(self, request_id: str, num_tokens: int, new_computed_pages: PageIds,
                           num_state_tokens: int | None = None) -> int:
        """`get_num_pages_to_allocate` for hits already checked (Mamba align groups hold the
        state after ``num_state_tokens``, default ``num_tokens``)."""
        state = num_tokens if num_state_tokens is None else num_state_tokens
        total = 0
        for m, hits in zip(self.single_type_managers, new_computed_pages):
            total += m._pages_needed(request_id, state if m.kind == "mamba_align" else num_tokens, hits)
        return total

    def allocate_slots(
        self,
        request_id: str,
        num_computed_tokens: int,
        num_slots: int,
        new_computed_pages: PageIds | None,
        shard: int | None = None,
        dp: int | None = None,
        num_state_tokens: int | None = None,
    ) -> PageIds | None:
        """All-or-nothing: drop out-of-window pages, take the hits, and cover ``num_slots`` slots.

        ``num_computed_tokens`` is the request's count before this step (it decides the window
        frees). Mamba align groups hold the state after ``num_state_tokens`` (the step's end
        without lookahead slots; default ``num_slots``). Returns the new page ids per group, or
        None with no state change when the pool (or the request's shard) cannot supply the
        plan. Window frees whose pages reach ref 0 count as available to the same call.
        """
        self._check_allocation(request_id, num_computed_tokens, num_slots, new_computed_pages)
        if num_state_tokens is not None:
            checked_int(num_state_tokens, "num_state_tokens", minimum=0)
        return self._allocate_checked(request_id, num_computed_tokens, num_slots, new_computed_pages, shard, dp,
                                      num_state_tokens)

    def _allocate_checked(
        self, request_id: str, num_computed_tokens: int, num_slots: int, new_computed_pages: PageIds | None,
        shard: int | None, dp: int | None, num_state_tokens: int | None = None,
    ) -> PageIds | None:
        """`allocate_slots` once `_check_allocation` has passed: plan, then apply."""
        if self._mamba_align:
            return self._allocate_with_states(request_id, num_computed_tokens, num_slots, new_computed_pages,
                                              shard, dp, num_slots if num_state_tokens is None else num_state_tokens)
        managers = self.single_type_managers
        pool = self.page_pool
        skips = None
        reclaimed = 0
        if self._windowed:
            skips = [m.skipped_range(request_id, num_computed_tokens) for m in managers]
            ref_count = pool.ref_count
            for m, (start, stop) in zip(managers, skips):
                if start < stop:
                    pages = m.req_to_pages[request_id]
                    reclaimed += sum(1 for j in range(start, stop) if ref_count(pages[j]) == 1)
        need = 0
        if new_computed_pages is None:
            known = True
            for m in managers:
                held: Sequence[int] | None = m.req_to_pages.get(request_id)
                if held is None:
                    known = False
                    held = ()
                n = -(-num_slots // m.page_size) - len(held)
                if n > 0:
                    need += n
            if need == 0 and known and skips is None:  # the decode fast path: nothing to do
                return ([],) if len(managers) == 1 else tuple([] for _ in managers)
        else:
            need = self._pages_to_allocate(request_id, num_slots, new_computed_pages)
        if need > reclaimed:
            available = pool.get_num_free_pages() if shard is None else pool.get_num_free_pages(
                dp_shard_hint=shard, data_parallel_size=dp)
            if need > available + reclaimed:
                return None
        if skips is not None:
            for m, (start, stop) in zip(managers, skips):
                m.remove_skipped_pages(request_id, start, stop)
        if new_computed_pages is not None:
            for hits in new_computed_pages:
                if hits:
                    pool.touch_ids(hits)
            for m, hits in zip(managers, new_computed_pages):
                m._save_hits(request_id, hits)
        if len(managers) == 1:
            return (managers[0].allocate_new_pages(request_id, num_slots, shard, dp),)
        return tuple([m.allocate_new_pages(request_id, num_slots, shard, dp) for m in managers])

    def _allocate_with_states(
        self, request_id: str, num_computed_tokens: int, num_slots: int, new_computed_pages: PageIds | None,
        shard: int | None, dp: int | None, state_end: int,
    ) -> PageIds | None:
        """`_allocate_checked` with Mamba align groups: the same plan, each Mamba group growing
        by its state page for ``state_end`` tokens; a state that would move back raises first."""
        managers = self.single_type_managers
        for mamba in self._mamba_align:
            mamba.check_state_moves_forward(request_id, num_computed_tokens, state_end)
        hits = new_computed_pages if new_computed_pages is not None else tuple([] for _ in managers)
        skips = [m.skipped_range(request_id, num_computed_tokens) for m in managers]
        ref_count = self.page_pool.ref_count
        reclaimed = 0
        for m, (start, stop) in zip(managers, skips):
            if start < stop:
                pages = m.req_to_pages[request_id]
                reclaimed += sum(1 for j in range(start, stop) if pages[j] != NULL_PAGE and ref_count(pages[j]) == 1)
        need = self._pages_to_allocate(request_id, num_slots, hits, state_end)
        available = self.page_pool.get_num_free_pages() if shard is None else self.page_pool.get_num_free_pages(
            dp_shard_hint=shard, data_parallel_size=dp)
        if need > available + reclaimed:
            return None
        for m, (start, stop) in zip(managers, skips):
            m.remove_skipped_pages(request_id, start, stop)
        if new_computed_pages is not None:
            for group_hits in new_computed_pages:
                if group_hits:
                    self.page_pool.touch_ids(group_hits)
            for m, group_hits in zip(managers, new_computed_pages):
                m._save_hits(request_id, group_hits)
        return tuple([m.allocate_new_pages(request_id, state_end if m.kind == "mamba_align" else num_slots, shard, dp)
                      for m in managers])

    def _check_hit_shape(self, new_computed_pages: object) -> None:
        """Hits are one sequence of int page ids per group, with no null page in a group that
        never drops pages. (Ranges are checked by the pool when the plan counts the revived
        hits, before anything changes.)"""
        groups = self.single_type_managers
        if type(new_computed_pages) is not tuple and (
                isinstance(new_computed_pages, (str, bytes)) or not isinstance(new_computed_pages, Sequence)):
            raise InvalidArgumentError(f"new_computed_pages must hold one page-id list per group ({len(groups)})")
        if len(new_computed_pages) != len(groups):
            raise InvalidArgumentError(f"new_computed_pages must hold one page-id list per group ({len(groups)})")
        for m, hits in zip(groups, new_computed_pages):
            if type(hits) is not list and (isinstance(hits, (str, bytes)) or not isinstance(hits, Sequence)):
                raise InvalidArgumentError(f"group {m.kv_cache_group_id}: hits must be a sequence of page ids")
            if countOf(map(type, hits), int) != len(hits):
                raise ForeignPageError(f"group {m.kv_cache_group_id}: hit page ids must be ints, got {describe(hits)}")
            if not m.frees_skipped_pages and NULL_PAGE in hits:
                raise InvalidArgumentError(f"group {m.kv_cache_group_id}: the null page cannot be a full-attention hit")

    def _check_allocation(self, request_id: object, num_computed_tokens: object, num_slots: object,
                          new_computed_pages: Sequence[Sequence[int]] | None) -> None:
        """The arguments of `allocate_slots`, checked before its plan (plain ints at no cost)."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        if type(num_computed_tokens) is not int or num_computed_tokens < 0:
            checked_int(num_computed_tokens, "num_computed_tokens", minimum=0)
        if type(num_slots) is not int or num_slots < 0:
            checked_int(num_slots, "num_slots", minimum=0)
        if new_computed_pages is not None:
            self._check_hit_shape(new_computed_pages)
            managers = self.single_type_managers
            if managers and request_id in managers[0].req_to_pages:
                raise InvalidArgumentError(f"request {request_id!r} already holds pages; hits are only taken first")

    def remove_skipped_pages(self, request_id: str, num_computed_tokens: int) -> None:
        """Free the pages that left every window once ``num_computed_tokens`` are computed."""
        for m in self._windowed:
            start, stop = m.skipped_range(request_id, num_computed_tokens)
            m.remove_skipped_pages(request_id, start, stop)

    # ---- caching, freeing, queries ----------------------------------------------------------------

    def keys_needed(self, num_tokens: int) -> int:
        """How many request keys caching up to ``num_tokens`` tokens reads (0 when caching is off)."""
        if type(num_tokens) is not int or num_tokens < 0:
            checked_int(num_tokens, "num_tokens", minimum=0)
        needed = 0
        for m in self.single_type_managers:
            k = m.keys_needed(num_tokens)
            if k > needed:
                needed = k
        return needed

    def cache_pages(self, request_id: str, keys: Sequence[PageHash], num_tokens: int,
                    num_computed_tokens: int = 0) -> None:
        """Register the request's full pages up to ``num_tokens`` tokens in every group (the
        arguments are checked against every group before the first one caches); Mamba align
        groups key the state of the request's ``num_computed_tokens`` (`MambaAlignManager.cache_states`)."""
        managers = self.single_type_managers
        if len(managers) > 1:
            needed = self.keys_needed(num_tokens)
            if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) or len(keys) < needed:
                raise InvalidArgumentError(f"caching {describe(num_tokens)} tokens needs {describe(needed)} keys")
            for m in managers:
                if num_tokens // m.page_size > len(m._pages_of(request_id)):
                    raise InvalidArgumentError(f"group {m.kv_cache_group_id}: request {request_id!r} holds too "
                                               f"few pages to cache {describe(num_tokens)} tokens")
        for m in managers:
            if m.kind == "mamba_align":
                cast(MambaAlignManager, m).cache_states(request_id, keys, num_tokens, num_computed_tokens)
            else:
                m.cache_pages(request_id, keys, num_tokens)

    def free(self, request_id: str) -> None:
        """Release the request's pages, group by group, each last page first."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        for m in self.single_type_managers:
            m.free(request_id)

    def get_num_common_prefix_pages(self, request_id: str, num_running_requests: int) -> list[int]:
        """Per group: leading pages every running request shares (0 for windowed groups)."""
        checked_int(num_running_requests, "num_running_requests", minimum=1)
        if self.get_pages(request_id) is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return [m.get_num_common_prefix_pages(request_id, num_running_requests) for m in self.single_type_managers]

    def get_pages(self, request_id: str) -> PageIds | None:
        """Copies of the request's page ids per group, or None for an unknown request."""
        managers = self.single_type_managers
        if not managers or not isinstance(request_id, str) or request_id not in managers[0].req_to_pages:
            return None
        return tuple(list(m.req_to_pages[request_id]) for m in managers)


class CacheCoordinatorNoPrefixCache(CacheCoordinator):
    """Prefix caching off: lookups never hit and nothing is cached; any groups are allowed."""

    def find_longest_cache_hit(
        self, keys: Sequence[PageHash], max_cache_hit_length: int, shard: int | None = None, dp: int | None = None
    ) -> tuple[PageIds, int]:
        """No hit: one empty list per group, 0 tokens."""
        return tuple([] for _ in self.single_type_managers), 0

    def keys_needed(self, num_tokens: int) -> int:
        """Nothing is cached, so no key is ever needed."""
        return 0

    def cache_pages(self, request_id: str, keys: Sequence[PageHash], num_tokens: int,
                    num_computed_tokens: int = 0) -> None:
        """Caching is off: nothing to register."""


class UnitaryCacheCoordinator(CacheCoordinator):
    """Exactly one cache group, prefix caching on."""

    def __init__(self, num_pages: int, kv_cache_groups: Sequence[CacheGroupSpec], max_model_len: int,
                 use_eagle: bool, enable_caching: bool, **pool_options: object) -> None:
        if not isinstance(kv_cache_groups, Sequence) or len(kv_cache_groups) != 1:
            raise CacheSpecError("UnitaryCacheCoordinator needs exactly one cache group")
        super().__init__(num_pages, kv_cache_groups, max_model_len, use_eagle, enable_caching, **pool_options)  # type: ignore[arg-type]


class HybridCacheCoordinator(CacheCoordinator):
    """Two or more cache groups of any attention types, prefix caching on."""

    def __init__(self, num_pages: int, kv_cache_groups: Sequence[CacheGroupSpec], max_model_len: int,
                 use_eagle: bool, enable_caching: bool, **pool_options: object) -> None:
        if not isinstance(kv_cache_groups, Sequence) or len(kv_cache_groups) < 2:
            raise CacheSpecError("HybridCacheCoordinator needs at least two cache groups")
        super().__init__(num_pages, kv_cache_groups, max_model_len, use_eagle, enable_caching, **pool_options)  # type: ignore[arg-type]


class _CoordinatorOptions(TypedDict):
    """The keyword-only options every coordinator takes."""

    free_order: str
    enable_kv_events: bool
    mamba_cache_mode: str


def get_kv_cache_coordinator(
    num_pages: int,
    kv_cache_groups: Sequence[CacheGroupSpec],
    max_model_len: int,
    use_eagle: bool,
    enable_caching: bool,
    *,
    free_order: str = "esurge",
    enable_kv_events: bool = False,
    mamba_cache_mode: str = "none",
) -> CacheCoordinator:
    """eSurge's dispatch: caching off (or no group) -> no-prefix-cache; one group -> unitary;
    otherwise hybrid."""
    if not isinstance(use_eagle, bool) or not isinstance(enable_caching, bool):
        raise InvalidArgumentError("use_eagle and enable_caching must be bools")
    if not isinstance(free_order, str):  # (the pool checks the name)
        raise InvalidArgumentError(f"free_order must be a str, got {type(free_order).__name__}")
    options: _CoordinatorOptions = {"free_order": free_order, "enable_kv_events": enable_kv_events,
                                    "mamba_cache_mode": mamba_cache_mode}
    if not enable_caching or (isinstance(kv_cache_groups, Sequence) and len(kv_cache_groups) == 0):
        return CacheCoordinatorNoPrefixCache(num_pages, kv_cache_groups, max_model_len, use_eagle, False, **options)
    if isinstance(kv_cache_groups, Sequence) and len(kv_cache_groups) == 1:
        return UnitaryCacheCoordinator(num_pages, kv_cache_groups, max_model_len, use_eagle, True, **options)
    return HybridCacheCoordinator(num_pages, kv_cache_groups, max_model_len, use_eagle, True, **options)
