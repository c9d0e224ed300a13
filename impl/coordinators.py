"""Coordinators: one page pool shared by every cache group, one single-type manager per group,
and the one record per request (`RequestState`) that says what the manager knows about it.

A coordinator owns ``records`` (request id -> `RequestState`), fans the manager-level
operations out to its groups (passing each group its page list from the record) and owns the
two rules that span groups:

- the common prefix-cache hit (`find_longest_cache_hit`): each group's own rule applied in
  group order, repeated until a whole pass leaves the hit length unchanged (a fixed point, for
  any number of attention types); with EAGLE the fixed point is recomputed once from one
  largest page fewer, or vLLM 0.33's rule is followed (``eagle_rule="vllm"``,
  `verikv.vllm_eagle`);
- all-or-nothing allocation (`allocate_slots`, INV-ATOMIC): a pure plan (window frees, revived
  hits, new pages per group, shard-local availability) is computed first; if it does not fit
  nothing changes, otherwise it is applied in eSurge's order. The decode step (`decode_step`)
  is the same plan for its one simple case, decided in a few comparisons.

`CacheCoordinatorNoPrefixCache` serves caching-off managers (never hits, never caches),
`UnitaryCacheCoordinator` one group, `HybridCacheCoordinator` several; the rules are shared,
the classes exist for eSurge's names and dispatch (`get_kv_cache_coordinator`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import count
from operator import countOf
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack, cast

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
    OutOfPagesError,
    UnknownRequestError,
    describe,
)
from verikv.free_queue import MAX_PAGE_ID
from verikv.hashing import PageKey
from verikv.page_pool import PagePool
from verikv.request import RequestStatus
from verikv.single_type_managers import (
    NULL_PAGE,
    MambaAlignManager,
    SingleTypeCacheManager,
    SlidingWindowManager,
    get_manager_for_kv_cache_spec,
)
from verikv.vllm_eagle import EAGLE_RULES, VllmEagleLookup

if TYPE_CHECKING:
    from verikv.request import Request

PageIds = tuple[list[int], ...]

MAMBA_CACHE_MODES = ("none", "align")
"""How Mamba groups are cached: ``"none"`` (one state page per request, never cached: vLLM's
mode without prefix caching, and eSurge's only one) or ``"align"`` (states kept and hit at
page-aligned positions: `verikv.single_type_managers.MambaAlignManager`)."""

#: token positions and slot numbers are int32 on the device too (slot mappings, positions)
MAX_MODEL_LEN = 2**31 - 1


class RequestState:
    """Everything the manager knows about one request id, in one record (``records[id]``).

    ``request``: the `Request` object the record describes (one id names one live object;
    None for a record a coordinator made for a bare id). Its content keys: ``keys`` (None:
    none kept), computed at identity version ``keys_version`` of the object, and ``lookup``,
    its last prefix lookup (result object, pool key_version, hit tokens, shard, copy of the
    ids) that lets the hit check skip comparing keys page by page. While it holds pages:
    ``pages`` one page-id list per group (None: it holds nothing), ``num_cached`` per group how
    many leading pages are registered in the prefix cache, ``shard`` the DP shard they come
    from (None: the whole pool) and ``cache_at`` the token count at which caching is next due
    (the end of the first key page not yet covered by a caching call, at most
    ``max_model_len + 1``: a step below it is within ``max_model_len``; it never decreases);
    ``states``, per group, the indices of its real pages in a Mamba align group (empty lists
    for the other groups; `verikv.single_type_managers.MambaAlignManager`).
    A record with neither keys nor pages is dropped (`CacheCoordinator.forget_if_idle`).
    """

    __slots__ = ("cache_at", "keys", "keys_version", "lookup", "num_cached", "pages", "request", "shard", "states")

    def __init__(self, request: Request | None) -> None:
        self.request: Request | None = request
        self.keys: list[PageKey] | None = None
        self.keys_version: int = 0 if request is None else request._identity_version
        self.lookup: tuple[object, int, int, int | None, PageIds] | None = None
        self.pages: PageIds | None = None
        self.num_cached: list[int] = []
        self.shard: int | None = None
        self.cache_at: int = 0
        self.states: list[list[int]] = []


class _Plan(NamedTuple):
    """An allocation that fits: per group the window range to free (None: no windowed group
    or nothing held yet)."""

    skips: list[tuple[int, int]] | None


class CacheCoordinator:
    """Shared machinery; use `get_kv_cache_coordinator` to pick the right subclass.

    ``shard`` arguments are DP shard indices (``None``: the whole pool) and ``dp`` the DP size
    the pool's shards use; the manager resolves them before calling.
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
        skip_unreachable_sliding_pages: bool = False,
        eagle_rule: str = "drop-once",
    ) -> None:
        checked_int(num_pages, "num_pages", minimum=1, maximum=MAX_PAGE_ID + 1)  # the pool's bound, checked first
        _check_mamba_cache_mode(mamba_cache_mode)
        _check_eagle_rule(eagle_rule)
        #: "align": Mamba states are cached at page-aligned positions (only with caching on)
        self.mamba_cache_mode: str = mamba_cache_mode if enable_caching is True else "none"
        # CacheGroupsConfig validates any value and stores a tuple (eSurge callers pass lists)
        groups = CacheGroupsConfig(num_pages, cast("tuple[CacheGroupSpec, ...]", kv_cache_groups)).kv_cache_groups
        self.max_model_len: int = checked_int(max_model_len, "max_model_len", minimum=1, maximum=MAX_MODEL_LEN)
        _check_flags(use_eagle, enable_caching)
        _check_group_rules(groups, self.max_model_len, use_eagle, enable_caching, self.mamba_cache_mode)
        self.kv_cache_groups: tuple[CacheGroupSpec, ...] = groups
        self.use_eagle: bool = use_eagle
        #: how a lookup with EAGLE drops the last page (`verikv.vllm_eagle.EAGLE_RULES`)
        self.eagle_rule: str = eagle_rule
        self.enable_caching: bool = enable_caching
        self.page_pool: PagePool = _new_pool(num_pages, enable_caching, free_order, enable_kv_events)
        sizes = [g.kv_cache_spec.page_size for g in groups]
        #: the page size request keys are computed at: the smallest of the groups that cache
        #: (all but Mamba in "none" mode); None when no group caches (or caching is off: any
        #: page sizes then)
        self.key_page_size: int | None = _key_page_size(groups, self.mamba_cache_mode) if enable_caching else None
        self.single_type_managers: tuple[SingleTypeCacheManager, ...] = self._make_managers(groups)
        #: the Mamba align groups' managers (their state pages follow `MambaAlignManager`'s rules)
        self._mamba_align: tuple[MambaAlignManager, ...] = tuple(
            m for m in self.single_type_managers if isinstance(m, MambaAlignManager))
        self._windowed = tuple(m for m in self.single_type_managers if m.frees_skipped_pages)
        self._lcm_page_size = math.lcm(*sizes, 1)
        self._max_page_size = max(sizes, default=1)
        #: group id -> ``(pages per hit unit, pages a hit needs)`` of each sliding group whose
        #: pages that can never serve a hit are left uncached (`sliding_page_can_hit`)
        vllm_eagle = use_eagle and eagle_rule == "vllm"
        self._sparse_sliding = _sparse_sliding_groups(self.single_type_managers, self._lcm_page_size,
                                                      skip_unreachable_sliding_pages, vllm_eagle)
        #: vLLM 0.33's EAGLE lookup when it applies, else None (the fixed point decides)
        self._vllm_eagle = VllmEagleLookup(self.single_type_managers) if vllm_eagle and groups else None
        managers = self.single_type_managers
        #: the one group's manager when `extend_held` can decide a step alone (a single group
        #: that never drops pages), else None; its page size (0: None)
        self._solo = _solo_manager(managers)
        self._solo_page_size = 0 if self._solo is None else self._solo.page_size
        #: a new record's `RequestState.cache_at`: 0, or with caching off a count never reached
        self.initial_cache_at: int = 0 if enable_caching else self.max_model_len + 1
        #: the page lists of a request that holds nothing (one empty tuple per group)
        self._no_pages: tuple[tuple[int, ...], ...] = tuple(() for _ in managers)
        #: request id -> its record: the only per-request state of the manager
        self.records: dict[str, RequestState] = {}

    def _make_managers(self, groups: tuple[CacheGroupSpec, ...]) -> tuple[SingleTypeCacheManager, ...]:
        """One manager per group, on this coordinator's pool, at its key page size and Mamba mode."""
        return tuple(get_manager_for_kv_cache_spec(g.kv_cache_spec, self.page_pool, gid, self.key_page_size,
                                                   self.mamba_cache_mode)
                     for gid, g in enumerate(groups))

    # ---- records --------------------------------------------------------------------------

    def holding(self, request_id: object) -> RequestState | None:
        """The record of a request that holds pages, else None."""
        rec = self.records.get(request_id) if isinstance(request_id, str) else None
        return rec if rec is not None and rec.pages is not None else None

    def record_for(self, request_id: str, request: Request) -> RequestState:
        """The id's record, created for ``request`` on first use."""
        rec = self.records.get(request_id)
        if rec is None:
            rec = self.records[request_id] = RequestState(request)
        return rec

    def forget_if_idle(self, request_id: str) -> None:
        """Drop the id's record once it holds no pages and keeps no keys (the one place
        records are dropped)."""
        rec = self.records.get(request_id)
        if rec is not None and rec.pages is None and rec.keys is None:
            del self.records[request_id]

    # ---- lookups --------------------------------------------------------------------------

    def find_longest_cache_hit(
        self, keys: Sequence[PageKey], max_cache_hit_length: int, shard: int | None = None, dp: int | None = None
    ) -> tuple[PageIds, int]:
        """Hit pages per group and the hit length in tokens (a multiple of every page size).

        Every group accepts exactly the returned length (fixed point of the per-group rules,
        started from ``max_cache_hit_length`` rounded down to the lcm of the page sizes). With
        vLLM's EAGLE rule, `verikv.vllm_eagle.VllmEagleLookup` decides instead (groups may read
        up to the last page ``keys`` cover).
        """
        managers = self.single_type_managers
        if type(max_cache_hit_length) is not int or max_cache_hit_length < 0:
            max_cache_hit_length = checked_int(max_cache_hit_length, "max_cache_hit_length", minimum=0)
        if type(keys) is not list and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence)):
            raise InvalidArgumentError(f"keys must be a sequence of PageKey, got {type(keys).__name__}")
        if self._vllm_eagle is not None:
            return self._vllm_eagle.find(keys, max_cache_hit_length, len(keys) * (self.key_page_size or 1), shard, dp)
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
        self, keys: Sequence[PageKey], length: int, shard: int | None, dp: int | None,
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
        return self._pages_to_allocate(self._held_pages(request_id), num_tokens, new_computed_pages)

    def _held_pages(self, request_id: object) -> Sequence[Sequence[int]]:
        """The request's page lists, or empty ones when it holds nothing."""
        rec = self.holding(request_id)
        return self._no_pages if rec is None else rec.pages  # type: ignore[return-value]

    def _pages_to_allocate(self, held: Sequence[Sequence[int]], num_tokens: int, new_computed_pages: PageIds) -> int:
        """Free-list pages a request holding ``held`` takes to cover ``num_tokens`` slots after the
        hits ``new_computed_pages``, the hits that are free included (each group's own rule)."""
        return sum(m.pages_needed(pages, num_tokens, hits)
                   for m, pages, hits in zip(self.single_type_managers, held, new_computed_pages))

    def _new_pages(self, held: Sequence[Sequence[int]], num_tokens: int, new_computed_pages: PageIds | None) -> int:
        """New pages a request holding ``held`` takes to cover ``num_tokens`` slots after the hits
        (the hits that are free not counted: `_pages_to_allocate` counts them). Not for Mamba
        align groups (their state page is one page whatever the count)."""
        hits = self._no_pages if new_computed_pages is None else new_computed_pages
        need = 0
        for m, pages, group_hits in zip(self.single_type_managers, held, hits):
            n = -(-num_tokens // m.page_size) - len(pages) - len(group_hits)
            if n > 0:
                need += n
        return need

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
        plan. Window frees whose pages reach ref 0 count as available to the same call. The
        first allocation of an id creates its pages in its record (the record itself, if it has
        none).
        """
        rec = self._check_allocation(request_id, num_computed_tokens, num_slots, new_computed_pages)
        if not self.single_type_managers:
            return ()
        if self._mamba_align:
            state_end = num_slots if num_state_tokens is None else checked_int(
                num_state_tokens, "num_state_tokens", minimum=0)
            return self._allocate_with_states(request_id, num_computed_tokens, num_slots, new_computed_pages,
                                              shard, dp, state_end)
        held = None if rec is None else rec.pages
        plan = self._plan(held, num_computed_tokens, num_slots, new_computed_pages, shard, dp)
        if plan is None:
            return None
        if held is None:
            held = self._start(request_id, new_computed_pages, shard)
        return self._apply(held, plan, num_slots, shard, dp)

    def _plan(
        self, held: PageIds | None, num_computed_tokens: int, num_slots: int,
        new_computed_pages: PageIds | None, shard: int | None, dp: int | None,
    ) -> _Plan | None:
        """The allocation's plan if it fits, else None. Pure.

        The new pages are counted first: when they alone do not fit, the plan fails without
        counting which hits are free (touching those only adds to the need), the hit ids'
        range checked all the same (`_check_hit_range`)."""
        skips = None
        reclaimed = 0
        if self._windowed and held is not None:
            skips = [m.skipped_range(pages, num_computed_tokens) for m, pages in zip(self.single_type_managers, held)]
            ref_count = self.page_pool.ref_count
            for pages, (start, stop) in zip(held, skips):
                reclaimed += countOf(map(ref_count, pages[start:stop]), 1)
        pages_held = self._no_pages if held is None else held
        need = self._new_pages(pages_held, num_slots, new_computed_pages)
        if need > reclaimed and need > self._num_free(shard, dp) + reclaimed:
            if new_computed_pages is not None:
                self._check_hit_range(new_computed_pages)
            return None
        # with the hits that are free (they leave the free list); a request taking hits holds
        # nothing (`_check_allocation`), so no window frees count here
        if (new_computed_pages is not None
                and self._pages_to_allocate(pages_held, num_slots, new_computed_pages) > self._num_free(shard, dp)):
            return None
        return _Plan(skips)

    def _check_hit_range(self, new_computed_pages: PageIds) -> None:
        """The pool's `ForeignPageError` when a hit id is not a page of the pool: what the pool
        checks when the plan counts the free hits, for a plan that fails before it counts them
        (the ids are exact ints: `_check_hit_shape`)."""
        num_pages = self.page_pool.num_pages
        for hits in new_computed_pages:
            if hits:
                ordered = sorted(hits)  # (exact ints: sorting them compares far faster than min and max)
                if ordered[0] < 0 or ordered[-1] >= num_pages:
                    self.page_pool.count_free_ids(hits)  # raises the pool's error, naming the id

    def _num_free(self, shard: int | None, dp: int | None) -> int:
        """Free pages of the pool, or of the DP shard."""
        pool = self.page_pool
        return pool.get_num_free_pages() if shard is None else pool.get_num_free_pages(
            dp_shard_hint=shard, data_parallel_size=dp)

    def _start(self, request_id: str, new_computed_pages: PageIds | None, shard: int | None) -> PageIds:
        """Give the id's record its first pages: the prefix hits (touched in the pool; they
        count as cached), or empty lists."""
        rec = self.records.get(request_id)
        if rec is None:
            rec = self.records[request_id] = RequestState(None)
        managers = self.single_type_managers
        if new_computed_pages is None:
            rec.pages = tuple([] for _ in managers)
        else:
            for hits in new_computed_pages:
                if hits:
                    self.page_pool.touch_ids(hits)
            rec.pages = tuple(list(hits) for hits in new_computed_pages)
        rec.num_cached = [len(pages) for pages in rec.pages]
        rec.states = [m.first_states(pages) if isinstance(m, MambaAlignManager) else []
                      for m, pages in zip(managers, rec.pages)] if self._mamba_align else []
        rec.shard = shard
        rec.cache_at = self.initial_cache_at
        rec.lookup = None  # hits are only taken first
        return rec.pages

    def _apply(self, held: PageIds, plan: _Plan, num_slots: int, shard: int | None, dp: int | None) -> PageIds:
        """Carry out a plan that fits, in eSurge's order: window frees, then new pages."""
        managers = self.single_type_managers
        if plan.skips is not None:
            for m, pages, (start, stop) in zip(managers, held, plan.skips):
                m.remove_skipped_pages(pages, start, stop)
        if len(managers) == 1:
            return (managers[0].allocate_new_pages(held[0], num_slots, shard, dp),)
        return tuple([m.allocate_new_pages(pages, num_slots, shard, dp) for m, pages in zip(managers, held)])

    # ---- Mamba align: the allocation plan with state pages ---------------------------------

    def _allocate_with_states(
        self, request_id: str, num_computed_tokens: int, num_slots: int, new_computed_pages: PageIds | None,
        shard: int | None, dp: int | None, state_end: int,
    ) -> PageIds | None:
        """`allocate_slots` with Mamba align groups: the same plan and order, each Mamba group
        freeing the state pages before the one the step starts from and growing by the state
        page for ``state_end`` tokens; a state that would move back raises first."""
        rec = self.holding(request_id)
        held: Sequence[Sequence[int]] = self._no_pages if rec is None else rec.pages  # type: ignore[assignment]
        states: Sequence[Sequence[int]] = self._no_pages if rec is None else rec.states
        frees = self._state_step_frees(held, states, num_computed_tokens, state_end)
        reclaimed = self._count_reclaimed(held, frees)
        hits = new_computed_pages if new_computed_pages is not None else self._no_pages
        need = sum(m.pages_needed(pages, state_end if isinstance(m, MambaAlignManager) else num_slots, group_hits)
                   for m, pages, group_hits in zip(self.single_type_managers, held, hits))
        if need > reclaimed and need > self._num_free(shard, dp) + reclaimed:
            return None
        if rec is None:
            self._start(request_id, new_computed_pages, shard)
            rec = self.records[request_id]
        else:
            self._free_step_pages(rec, frees)
        return tuple([m.allocate_state(pages, group_states, state_end, shard, dp) if isinstance(m, MambaAlignManager)
                      else m.allocate_new_pages(pages, num_slots, shard, dp)
                      for m, pages, group_states in zip(self.single_type_managers, rec.pages, rec.states)])  # type: ignore[arg-type]

    def _state_step_frees(self, held: Sequence[Sequence[int]], states: Sequence[Sequence[int]],
                          num_computed_tokens: int, state_end: int) -> list[Any]:
        """Per group, what the step frees (pure): a Mamba align group's state page indices, a
        windowed group's skipped range, else the empty range. Raises if a state would move back."""
        managers = self.single_type_managers
        for m, pages in zip(managers, held):
            if isinstance(m, MambaAlignManager):
                m.check_state_moves_forward(pages, num_computed_tokens, state_end)
        return [m.skipped_states(group_states, num_computed_tokens) if isinstance(m, MambaAlignManager)
                else m.skipped_range(pages, num_computed_tokens) if m.frees_skipped_pages else (0, 0)
                for m, pages, group_states in zip(managers, held, states)]

    def _count_reclaimed(self, held: Sequence[Sequence[int]], frees: list[Any]) -> int:
        """How many of the pages a step frees return to the free list (held by this request only)."""
        ref_count = self.page_pool.ref_count
        reclaimed = 0
        for pages, free in zip(held, frees):
            picked = [pages[j] for j in free] if isinstance(free, list) else pages[free[0]:free[1]]
            reclaimed += countOf(map(ref_count, picked), 1)
        return reclaimed

    def _free_step_pages(self, rec: RequestState, frees: list[Any]) -> None:
        """Free what `_state_step_frees` planned, group by group."""
        for m, pages, group_states, free in zip(self.single_type_managers, rec.pages, rec.states, frees):  # type: ignore[arg-type]
            if isinstance(m, MambaAlignManager):
                m.free_states(pages, group_states, free)
            else:
                m.remove_skipped_pages(pages, *free)

    def decode_step(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """`allocate_slots` for a decode step of ``request`` (``num_new_tokens``: an int >= 1, checked
        by the caller) when nothing else is due: this very object holds pages, it is not finished,
        caching is not due (its keys must be computed first: `extend_held` then) and the step is
        one `extend_held` decides. Returns that group's new pages (none or one); None (nothing
        changed) otherwise. The common step, covered by the pages held, is decided here without
        another call."""
        rec = self.records.get(request._request_id, _NO_RECORD)
        pages = rec.pages
        if rec.request is not request or pages is None or request._status > _PREEMPTED:
            return None
        num_tokens = request._num_computed_tokens + num_new_tokens
        if num_tokens < rec.cache_at:  # (so within max_model_len: `RequestState.cache_at`)
            if num_tokens <= len(pages[0]) * self._solo_page_size:
                return _NO_PAGE
        elif len(request._tokens) >= rec.cache_at:  # caching is due
            return None
        return self.extend_held(rec, num_tokens)

    def extend_held(self, rec: RequestState, num_tokens: int) -> list[int] | None:
        """`allocate_slots` for the step to ``num_tokens`` tokens of a request ``rec`` that holds
        pages, when it is simple: one group that never drops pages, at most one new page, from the
        whole pool, and it fits. Returns that group's new pages (none or one); None (nothing
        changed) when the step is not that simple and must be planned by `allocate_slots`."""
        page_size = self._solo_page_size  # (0: no solo group)
        if not page_size or num_tokens > self.max_model_len:
            return None
        pages: list[int] = rec.pages[0]  # type: ignore[index]  # the caller checked it holds pages
        covered = len(pages) * page_size
        if num_tokens <= covered:
            return _NO_PAGE
        if num_tokens > covered + page_size or rec.shard is not None:
            return None
        try:  # (what `SingleTypeCacheManager.allocate_new_pages` does for one page, from the whole pool)
            new = self.page_pool.get_new_page_ids(1)
        except OutOfPagesError:  # (nothing changed)
            return None
        pages += new
        return new

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
                          new_computed_pages: Sequence[Sequence[int]] | None) -> RequestState | None:
        """The arguments of `allocate_slots`, checked before its plan (plain ints at no cost);
        returns the id's record while it holds pages."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        if type(num_computed_tokens) is not int or num_computed_tokens < 0:
            checked_int(num_computed_tokens, "num_computed_tokens", minimum=0)
        if type(num_slots) is not int or num_slots < 0:
            checked_int(num_slots, "num_slots", minimum=0)
        rec = self.holding(request_id)
        if new_computed_pages is not None:
            self._check_hit_shape(new_computed_pages)
            if rec is not None:
                raise InvalidArgumentError(f"request {request_id!r} already holds pages; hits are only taken first")
        return rec

    def remove_skipped_pages(self, request_id: str, num_computed_tokens: int) -> None:
        """Free the pages that left every window once ``num_computed_tokens`` are computed."""
        rec = self.holding(request_id)
        if rec is None:
            return
        states = rec.states or [[] for _ in self.single_type_managers]
        for m, pages, group_states in zip(self.single_type_managers, rec.pages, states):  # type: ignore[arg-type]
            if isinstance(m, MambaAlignManager):
                m.free_states(pages, group_states, m.skipped_states(group_states, num_computed_tokens))
                continue
            start, stop = m.skipped_range(pages, num_computed_tokens)
            m.remove_skipped_pages(pages, start, stop)

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

    def cache_pages(self, request_id: str, keys: Sequence[PageKey], num_tokens: int) -> None:
        """Register the request's full pages up to ``num_tokens`` tokens in every group. A Mamba
        align group keys no state here: a state is keyed only once the step that ends it is over,
        and the coordinator is not told which tokens are computed (`CacheManager.cache_pages`
        is, and keys it)."""
        rec = self.holding(request_id)
        if rec is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        self.cache_held(rec, keys, num_tokens)

    def cache_held(self, rec: RequestState, keys: Sequence[PageKey], num_tokens: int,
                   num_computed_tokens: int = 0) -> None:
        """`cache_pages` for the record of a request that holds pages (the arguments are
        checked against every group before the first one caches). A Mamba align group keys the
        state of ``num_computed_tokens`` (`MambaAlignManager.cache_states`); the default, 0,
        keys none."""
        managers = self.single_type_managers
        pages: PageIds = rec.pages  # type: ignore[assignment]
        cached = rec.num_cached
        if len(managers) == 1 and not self._mamba_align:
            cached[0] = managers[0].cache_pages(pages[0], cached[0], keys, num_tokens)
            return
        needed = self.keys_needed(num_tokens)
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) or len(keys) < needed:
            raise InvalidArgumentError(f"caching {describe(num_tokens)} tokens needs {describe(needed)} keys")
        for m, group_pages in zip(managers, pages):
            if num_tokens // m.page_size > len(group_pages):
                raise InvalidArgumentError(f"group {m.kv_cache_group_id}: the request holds too "
                                           f"few pages to cache {describe(num_tokens)} tokens")
        for gid, m in enumerate(managers):
            if isinstance(m, MambaAlignManager):  # the state of the request's computed count
                cached[gid] = m.cache_states(pages[gid], cached[gid], keys, num_tokens, num_computed_tokens)
            else:
                cached[gid] = m.cache_pages(self._hittable(gid, pages[gid]), cached[gid], keys, num_tokens)

    def _hittable(self, gid: int, pages: list[int]) -> list[int]:
        """The pages of group ``gid`` to cache: with `skip_unreachable_sliding_pages`, a sliding
        group's pages that can never serve a hit become null placeholders (never hashed)."""
        sparse = self._sparse_sliding.get(gid)
        if sparse is None:
            return pages
        per, need, peek = sparse
        return [p if sliding_page_can_hit(j, per, need, peek) else NULL_PAGE for j, p in enumerate(pages)]

    def cache_held_batch(self, records: list[RequestState], keys: list[list[PageKey]], num_tokens: list[int]) -> None:
        """`cache_held` for each of distinct records in order (each holds pages), with one group
        (not Mamba align) as one registration (`SingleTypeCacheManager.cache_pages_batch`)."""
        managers = self.single_type_managers
        if len(managers) != 1 or self._mamba_align:
            for rec, request_keys, n in zip(records, keys, num_tokens):
                self.cache_held(rec, request_keys, n)
            return
        lists: list[list[int]] = [rec.pages[0] for rec in records]  # type: ignore[index]  # all hold pages
        counts = managers[0].cache_pages_batch(lists, [rec.num_cached[0] for rec in records], keys, num_tokens)
        for rec, cached in zip(records, counts):
            rec.num_cached[0] = cached

    def free(self, request_id: str) -> None:
        """Release the request's pages, group by group, each last page first. No-op for a
        request that holds none."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        rec = self.holding(request_id)
        if rec is None:
            return
        pages: PageIds = rec.pages  # type: ignore[assignment]
        rec.pages, rec.num_cached, rec.shard, rec.states = None, [], None, []
        for m, group_pages in zip(self.single_type_managers, pages):
            m.free(group_pages)
        self.forget_if_idle(request_id)

    def get_num_common_prefix_pages(self, request_id: str, num_running_requests: int) -> list[int]:
        """Per group: leading pages every running request shares (0 for windowed groups)."""
        checked_int(num_running_requests, "num_running_requests", minimum=1)
        rec = self.holding(request_id)
        if rec is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return [m.get_num_common_prefix_pages(pages, num_running_requests)
                for m, pages in zip(self.single_type_managers, rec.pages)]  # type: ignore[arg-type]

    def get_pages(self, request_id: str) -> PageIds | None:
        """Copies of the request's page ids per group, or None for an unknown request."""
        rec = self.holding(request_id)
        return None if rec is None else tuple(list(pages) for pages in rec.pages)  # type: ignore[union-attr]

    # ---- the batched decode step (`CacheManager.allocate_slots_batch`) ----------------------------

    def decode_work(self, requests: list[Request], counts: int | list[int]) -> list[int]:
        """The positions of a decode batch (``counts``: >= 1 new tokens for each request, or one
        int for all) whose `allocate_slots` call may do something. Every other one is a request
        that holds pages under this very object, one group that never drops pages (`extend_held`
        decides its step alone), with room in its pages for ``computed + count`` tokens, below its
        next caching point (so within ``max_model_len``: `RequestState.cache_at`): its call
        returns "no new page" and changes nothing. A finished request is one of the positions (its
        call raises). Pure; one pass over the batch, the only one that reads every request's
        record (the walrus keeps it one expression per request)."""
        solo = self._solo
        if solo is None:
            return list(range(len(requests)))
        page_size, get = solo.page_size, self.records.get
        if isinstance(counts, int):  # the common step: one count for all (no second sequence to zip)
            return [i for i, req in enumerate(requests)
                    if (rec := get(req._request_id, _NO_RECORD)).request is not req or rec.pages is None
                    or not rec.cache_at > req._num_computed_tokens + counts <= len(rec.pages[0]) * page_size
                    or req._status > _PREEMPTED]
        return [i for i, req, c in zip(count(), requests, counts)
                if (rec := get(req._request_id, _NO_RECORD)).request is not req or rec.pages is None
                or not rec.cache_at > req._num_computed_tokens + c <= len(rec.pages[0]) * page_size
                or req._status > _PREEMPTED]

    def held_steps(self, requests: list[Request], counts: int | list[int], work: list[int]
                   ) -> tuple[list[RequestState], list[int], list[int], list[int]] | None:
        """For the positions ``work`` of a decode batch (as `decode_work`), when each is a step
        `extend_held` decides alone (this very object holds pages, it is running, one group that
        never drops pages, within ``max_model_len``, at most one new page, from the whole pool),
        all the new pages are free and no KV events are recorded: their records, token counts,
        new-page counts (0 or 1) and the indices (into ``work``) of those whose caching is due
        (`RequestState.cache_at`). None otherwise (the single calls decide). Pure."""
        solo = self._solo
        if solo is None or self.page_pool.event_log is not None:
            return None
        page_size, limit, get = solo.page_size, self.max_model_len, self.records.get
        records: list[RequestState] = []
        num_tokens: list[int] = []
        needs: list[int] = []
        due: list[int] = []
        for j, i in enumerate(work):
            req = requests[i]
            rec = get(req._request_id, _NO_RECORD)
            pages = rec.pages
            n = req._num_computed_tokens + (counts if isinstance(counts, int) else counts[i])
            if rec.request is not req or pages is None or req._status > _PREEMPTED or n > limit:
                return None
            need = -(-n // page_size) - len(pages[0])
            if need > 0 and (need > 1 or rec.shard is not None):
                return None
            if n >= rec.cache_at and len(req._tokens) >= rec.cache_at:
                due.append(j)
            records.append(rec)
            num_tokens.append(n)
            needs.append(need)
        if countOf(needs, 1) > self.page_pool.get_num_free_pages():
            return None
        return records, num_tokens, needs, due

    def decode_steps(self, records: list[RequestState], needs: list[int]) -> list[list[int]]:
        """Apply the steps `held_steps` accepted: their new pages taken in one pool call and handed
        out in order, so the pages each step gets and the keys evicted are those of the steps one
        by one (their caching comes after all of them: with no KV events the state is the same).
        Returns each step's new pages (none or one)."""
        new = iter(self.page_pool.get_new_page_ids(countOf(needs, 1)))
        out: list[list[int]] = []
        for rec, need in zip(records, needs):
            if need > 0:
                page = next(new)
                rec.pages[0].append(page)  # type: ignore[index]  # (it holds pages)
                out.append([page])
            else:
                out.append(_NO_PAGE)
        return out


#: every status above this one is a finished request's
_PREEMPTED = RequestStatus.PREEMPTED
#: the record of an id that has none (its ``request`` is never a request's object)
_NO_RECORD = RequestState(None)
#: `decode_step`'s and `extend_held`'s "no new page" (never changed: the caller returns a shared empty result)
_NO_PAGE: list[int] = []


def _key_page_size(groups: tuple[CacheGroupSpec, ...], mamba_cache_mode: str) -> int | None:
    """The smallest page size of the groups that cache (all but Mamba in "none" mode); None if
    there is none."""
    return min((g.kv_cache_spec.page_size for g in groups
                if mamba_cache_mode == "align" or not isinstance(g.kv_cache_spec, MambaSpec)), default=None)


def _new_pool(num_pages: int, enable_caching: bool, free_order: str, enable_kv_events: bool) -> PagePool:
    """The coordinator's pool (`InvalidArgumentError` when the host cannot hold its tables)."""
    try:
        return PagePool(num_pages, enable_caching, free_order=free_order, enable_kv_events=enable_kv_events)
    except MemoryError:
        raise InvalidArgumentError(
            f"num_pages {num_pages}: not enough host memory for the pool's bookkeeping") from None


def _check_mamba_cache_mode(mode: object) -> None:
    if not isinstance(mode, str) or mode not in MAMBA_CACHE_MODES:
        raise InvalidArgumentError(f"mamba_cache_mode must be one of {MAMBA_CACHE_MODES}, got {describe(mode)}")


def _check_eagle_rule(rule: object) -> None:
    if type(rule) is not str or rule not in EAGLE_RULES:
        raise InvalidArgumentError(f"eagle_rule must be one of {EAGLE_RULES}, got {describe(rule)}")


def _sparse_sliding_groups(managers: tuple[SingleTypeCacheManager, ...], hit_unit: int,
                           skip_unreachable_sliding_pages: object, vllm_eagle: bool) -> dict[int, tuple[int, int, int]]:
    """``{group id: (pages per hit unit, pages a hit reads, pages it peeks past the unit's
    end)}`` of the sliding groups whose unreachable pages are skipped (none unless the option
    is on). vLLM's EAGLE rule (``vllm_eagle``) reads one page more, one page past the end."""
    if not isinstance(skip_unreachable_sliding_pages, bool):
        raise InvalidArgumentError("skip_unreachable_sliding_pages must be a bool")
    if not skip_unreachable_sliding_pages:
        return {}
    peek = int(vllm_eagle)
    return {m.kv_cache_group_id: (hit_unit // m.page_size, sliding_pages_for_hit(m) + peek, peek)
            for m in managers if isinstance(m, SlidingWindowManager)}


def sliding_pages_for_hit(m: SlidingWindowManager) -> int:
    """Consecutive pages a sliding-window hit needs (the lookup's rule, at least one)."""
    return m.pages_for_hit


def sliding_page_can_hit(j: int, per: int, need: int, peek: int = 0) -> bool:
    """Whether page ``j`` of a sliding group can ever serve a hit (vLLM 0.33's reachable-page
    mask, dense retention): a hit ends on a multiple of the hit unit (the lcm of the page
    sizes, ``per`` pages of this group) and reads the ``need`` pages before it, so only the last
    ``need`` pages of each unit can be part of one (all of them when ``need >= per``). With
    vLLM's EAGLE rule a lookup reads ``need`` pages ending ``peek`` = 1 page past the unit's end
    (and drops the last): the mask moves one page right."""
    return need >= per or (j >= peek and (j - peek) % per >= per - need)


def _check_flags(use_eagle: object, enable_caching: object) -> None:
    if not isinstance(use_eagle, bool) or not isinstance(enable_caching, bool):
        raise InvalidArgumentError("use_eagle and enable_caching must be bools")


def _solo_manager(managers: tuple[SingleTypeCacheManager, ...]) -> SingleTypeCacheManager | None:
    """The one group's manager when there is one group that never drops pages, else None."""
    return managers[0] if len(managers) == 1 and not managers[0].frees_skipped_pages else None


def _check_group_rules(groups: tuple[CacheGroupSpec, ...], max_model_len: int, use_eagle: bool,
                       enable_caching: bool, mamba_cache_mode: str = "none") -> None:
    """The rules on the groups a coordinator serves (`CacheSpecError` names the group)."""
    if enable_caching:
        split_cache_groups(groups)  # the page-size rule
    for gid, group in enumerate(groups):
        spec = group.kv_cache_spec
        if isinstance(spec, MambaSpec) and mamba_cache_mode == "none" and spec.page_size < max_model_len:
            raise CacheSpecError(
                f"Mamba cache group {gid} has page size {spec.page_size} < max_model_len "
                f"{max_model_len}: a request's state must fit one page"
            )
        if use_eagle and isinstance(spec, ChunkedLocalAttentionSpec):
            raise CacheSpecError(f"EAGLE is not supported with chunked local attention (cache group {gid})")


class CacheCoordinatorNoPrefixCache(CacheCoordinator):
    """Prefix caching off: lookups never hit and nothing is cached; any groups are allowed."""

    def find_longest_cache_hit(
        self, keys: Sequence[PageKey], max_cache_hit_length: int, shard: int | None = None, dp: int | None = None
    ) -> tuple[PageIds, int]:
        """No hit: one empty list per group, 0 tokens."""
        return tuple([] for _ in self.single_type_managers), 0

    def keys_needed(self, num_tokens: int) -> int:
        """Nothing is cached, so no key is ever needed."""
        return 0

    def cache_pages(self, request_id: str, keys: Sequence[PageKey], num_tokens: int) -> None:
        """Caching is off: nothing to register."""

    def cache_held(self, rec: RequestState, keys: Sequence[PageKey], num_tokens: int,
                   num_computed_tokens: int = 0) -> None:
        """Caching is off: nothing to register."""

    def cache_held_batch(self, records: list[RequestState], keys: list[list[PageKey]], num_tokens: list[int]) -> None:
        """Caching is off: nothing to register."""


class UnitaryCacheCoordinator(CacheCoordinator):
    """Exactly one cache group, prefix caching on."""

    def __init__(self, num_pages: int, kv_cache_groups: Sequence[CacheGroupSpec], max_model_len: int,
                 use_eagle: bool, enable_caching: bool, **options: Unpack[_CoordinatorOptions]) -> None:
        if not isinstance(kv_cache_groups, Sequence) or len(kv_cache_groups) != 1:
            raise CacheSpecError("UnitaryCacheCoordinator needs exactly one cache group")
        super().__init__(num_pages, kv_cache_groups, max_model_len, use_eagle, enable_caching, **options)


class HybridCacheCoordinator(CacheCoordinator):
    """Two or more cache groups of any attention types, prefix caching on."""

    def __init__(self, num_pages: int, kv_cache_groups: Sequence[CacheGroupSpec], max_model_len: int,
                 use_eagle: bool, enable_caching: bool, **options: Unpack[_CoordinatorOptions]) -> None:
        if not isinstance(kv_cache_groups, Sequence) or len(kv_cache_groups) < 2:
            raise CacheSpecError("HybridCacheCoordinator needs at least two cache groups")
        super().__init__(num_pages, kv_cache_groups, max_model_len, use_eagle, enable_caching, **options)


class _CoordinatorOptions(TypedDict, total=False):
    """The keyword-only options every coordinator takes (defaults: `CacheCoordinator.__init__`)."""

    free_order: str
    enable_kv_events: bool
    mamba_cache_mode: str
    skip_unreachable_sliding_pages: bool
    eagle_rule: str


def get_kv_cache_coordinator(
    num_pages: int, kv_cache_groups: Sequence[CacheGroupSpec], max_model_len: int, use_eagle: bool,
    enable_caching: bool, **options: Unpack[_CoordinatorOptions],
) -> CacheCoordinator:
    """eSurge's dispatch: caching off (or no group) -> no-prefix-cache; one group -> unitary;
    otherwise hybrid. ``options``: `CacheCoordinator`'s keyword-only options, passed on."""
    if not isinstance(use_eagle, bool) or not isinstance(enable_caching, bool):
        raise InvalidArgumentError("use_eagle and enable_caching must be bools")
    free_order = options.get("free_order", "esurge")
    if not isinstance(free_order, str):  # (the pool checks the name)
        raise InvalidArgumentError(f"free_order must be a str, got {type(free_order).__name__}")
    if not enable_caching or (isinstance(kv_cache_groups, Sequence) and len(kv_cache_groups) == 0):
        return CacheCoordinatorNoPrefixCache(num_pages, kv_cache_groups, max_model_len, use_eagle, False, **options)
    if isinstance(kv_cache_groups, Sequence) and len(kv_cache_groups) == 1:
        return UnitaryCacheCoordinator(num_pages, kv_cache_groups, max_model_len, use_eagle, True, **options)
    return HybridCacheCoordinator(num_pages, kv_cache_groups, max_model_len, use_eagle, True, **options)
