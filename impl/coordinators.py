"""Coordinators: one page pool shared by every cache group, one single-type manager per group,
and the one record per request that says what the manager knows about it.

A coordinator owns ``records`` (request id -> record) whole: a `RequestState` while the id only
has content keys kept, a `HeldState` while it holds pages. It takes the manager's checked calls
(`lookup`, `allocate`, `cache`, `free`, `drop_keys`), one per public call of
`verikv.CacheManager`, fans them out to its groups (passing each group its page list from the
record) and owns the two rules that span groups:

- the common prefix-cache hit (`find_longest_cache_hit`): each group's own rule applied in
  group order, repeated until a whole pass leaves the hit length unchanged (a fixed point, for
  any number of attention types); with EAGLE the fixed point is recomputed once from one
  largest page fewer, or vLLM 0.33's rule is followed (``eagle_rule="vllm"``,
  `verikv.vllm_eagle`);
- all-or-nothing allocation (`allocate`, INV-ATOMIC): a pure plan (`_plan`: the pages the step
  frees and those only it held, new pages per group, the free pages among the hits,
  shard-local availability) is computed first; if it does not fit nothing changes, otherwise
  `apply`, the one function through which an allocation changes state, carries it out in
  eSurge's order and caches the full pages.

It also keeps eSurge's id-level API (`allocate_slots`, `cache_pages`, `remove_skipped_pages`,
`get_num_pages_to_allocate`, ...), which checks its own arguments and runs the same plan.
`CacheCoordinatorNoPrefixCache` serves caching-off managers (never hits, never caches),
`UnitaryCacheCoordinator` one group, `HybridCacheCoordinator` several; the rules are shared,
the classes exist for eSurge's names and dispatch (`get_kv_cache_coordinator`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from operator import countOf
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, TypedDict, Unpack, cast

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
from verikv.free_queue import MAX_PAGE_ID, NULL_PAGE_ID
from verikv.hashing import PageKey
from verikv.page_pool import PagePool
from verikv.request import count_holder, identity_version
from verikv.single_type_managers import (
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


# ---- the records ----------------------------------------------------------------------------

def _deprecated(old: str, new: str) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (it keeps working for one minor version)."""
    warnings.warn(f"{old} is deprecated since verikv 0.2.0 and will be removed in 0.3.0; use {new}",
                  DeprecationWarning, stacklevel=3)


def _retired_field(name: str, new: str, value: Callable[[RequestState], object]) -> property:
    """A deprecated read-only record field: warns, naming ``new``, and reads ``value(record)``."""
    def read(rec: RequestState) -> object:
        _deprecated(f"RequestState.{name}", new)
        return value(rec)
    return property(read)


class LastLookup(NamedTuple):
    """A request's last prefix lookup. A hit given back with these very ids, for the same length
    and shard, while the pool's ``key_version`` is unchanged, holds this request's content page by
    page (no key changed since the lookup found it), so its keys need not be compared again."""

    key_version: int
    num_tokens: int
    shard: int | None
    page_ids: PageIds  # a copy: the caller may change the lists of the result it was given


class RequestState:
    """What the manager knows about a request id that holds no pages: its content keys.

    ``request``: the `Request` object they describe (one id names one live object; None for an
    id the coordinator's id-level API was given). ``keys``: the keys of its full key pages (None:
    none kept), computed at identity version ``keys_version`` of the object. ``last_lookup``: its
    last prefix lookup (`LastLookup`), or None. A record with no keys and no pages is dropped.
    """

    __slots__ = ("keys", "keys_version", "last_lookup", "request")

    def __init__(self, request: Request | None, keys: list[PageKey] | None = None, keys_version: int = 0,
                 last_lookup: LastLookup | None = None) -> None:
        self.request: Request | None = request
        self.keys: list[PageKey] | None = keys
        self.keys_version: int = keys_version
        self.last_lookup: LastLookup | None = last_lookup

    if not TYPE_CHECKING:  # the retired fields, deprecated (type checkers see only the fields a record has)
        lookup = _retired_field("lookup", "RequestState.last_lookup",
                                lambda rec: None if rec.last_lookup is None else (None, *rec.last_lookup))
        # (as a record that held nothing read them; a `HeldState`'s own fields shadow these)
        pages = _retired_field("pages", "isinstance(record, HeldState)", lambda rec: None)
        num_cached = _retired_field("num_cached", "HeldState.num_cached", lambda rec: [])
        shard = _retired_field("shard", "HeldState.shard", lambda rec: None)
        cache_at = _retired_field("cache_at", "HeldState.cache_at", lambda rec: 0)
        states = _retired_field("states", "HeldState.states", lambda rec: [])


class HeldState(RequestState):
    """The record of a request id that holds pages: its keys, as `RequestState`, and its pages.

    ``pages``: one page-id list per group (null placeholders for pages a window no longer
    needs); ``num_cached``: per group, how many leading pages are registered in the prefix
    cache; ``shard``: the DP shard the pages come from (None: the whole pool); ``cache_at``: the
    token count at which caching is next due (the end of the first key page no caching call has
    covered yet, at most ``max_model_len + 1``, so a step below it is within ``max_model_len``;
    it never decreases); ``states``: per group, the indices of the real pages of a Mamba align
    group (empty lists for the other groups; `verikv.single_type_managers.MambaAlignManager`).
    """

    __slots__ = ("cache_at", "num_cached", "pages", "shard", "states")

    def __init__(self, request: Request | None, pages: PageIds, shard: int | None, cache_at: int,
                 states: list[list[int]], keys: list[PageKey] | None = None, keys_version: int = 0) -> None:
        super().__init__(request, keys, keys_version)
        self.pages: PageIds = pages
        self.num_cached: list[int] = [len(group) for group in pages]  # first pages are hits: cached already
        self.shard: int | None = shard
        self.cache_at: int = cache_at
        self.states: list[list[int]] = states


# ---- the manager's checked calls ------------------------------------------------------------

class LookupStep(NamedTuple):
    """A checked prefix lookup (`CacheCoordinator.lookup`): the keys the request's list lacks
    (None: no keys are kept, as when it is not looked up or no group caches), whether the kept
    keys are stale (another object's, or an older identity's: dropped first), and the hit's
    bounds."""

    request: Request
    request_id: str
    new_keys: list[PageKey] | None
    drop_keys: bool
    looked_up: bool
    max_length: int
    shard: int | None
    dp: int | None


class AllocationStep(NamedTuple):
    """A checked allocation (`CacheCoordinator.allocate`).

    ``held``: the id's record when it holds pages (the snapshot the step was checked against);
    ``num_computed_tokens``: the request's count before the step (it decides the window and
    state frees, and which Mamba state is keyed); ``num_tokens``: the step's end without
    lookahead slots (where a Mamba state goes); ``num_slots``: the slots to cover; ``hits``:
    prefix hits taken first (checked), or None; ``cache_keys``: the keys the request's list lacks
    to cache the full pages up to ``cache_tokens`` tokens once the pages are held (None: the step
    caches nothing); ``drop_keys``: the id's kept keys are stale and are dropped when the record
    gets its first pages.
    """

    request_id: str
    request: Request | None
    held: HeldState | None
    num_computed_tokens: int
    num_tokens: int
    num_slots: int
    hits: PageIds | None
    shard: int | None
    dp: int | None
    cache_keys: list[PageKey] | None
    cache_tokens: int
    drop_keys: bool


#: per group, what a step frees: a window's range of page indices, or a Mamba group's state indices
StepFrees: TypeAlias = "list[tuple[int, int] | list[int]]"


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
        managers = self.single_type_managers
        #: per group, whether it is a Mamba align group (its state page follows the step's end
        #: without lookahead slots, and the request's computed count keys it)
        self._holds_states: tuple[bool, ...] = tuple(isinstance(m, MambaAlignManager) for m in managers)
        self._mamba_align = any(self._holds_states)
        #: whether any group frees pages as a request moves on (windows, Mamba align states)
        self._frees_pages = any(m.frees_skipped_pages for m in managers)
        self._lcm_page_size = math.lcm(*sizes, 1)
        self._max_page_size = max(sizes, default=1)
        #: group id -> ``(pages per hit unit, pages a hit reads, pages it peeks past)`` of each
        #: sliding group whose pages that can never serve a hit are left uncached
        #: (`sliding_page_can_hit`)
        vllm_eagle = use_eagle and eagle_rule == "vllm"
        self._sparse_sliding = _sparse_sliding_groups(managers, self._lcm_page_size, skip_unreachable_sliding_pages,
                                                      vllm_eagle)
        #: vLLM 0.33's EAGLE lookup when it applies, else None (the fixed point decides)
        self._vllm_eagle = VllmEagleLookup(managers) if vllm_eagle and groups else None
        #: a new record's `HeldState.cache_at`: 0, or with caching off a count never reached
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

    def holding(self, request_id: object) -> HeldState | None:
        """The record of a request that holds pages, else None."""
        rec = self.records.get(request_id) if isinstance(request_id, str) else None
        return rec if type(rec) is HeldState else None

    # ---- the manager's calls: each checked by the manager, planned, then applied here ---------

    def lookup(self, step: LookupStep) -> tuple[PageIds, int]:
        """A prefix lookup: the id's keys brought up to date (stale ones dropped, the new ones
        appended), then its hit pages per group and length (pure), remembered as its last lookup."""
        if step.drop_keys:
            self.drop_keys(step.request_id)
        if step.new_keys is None:
            keys: list[PageKey] = []
            rec = None
        else:
            rec = self._keys_record(step.request_id, step.request)
            keys = self._stored_keys(rec, step.new_keys)
        if not step.looked_up:
            return tuple([] for _ in self.single_type_managers), 0
        hits, length = self.find_longest_cache_hit(keys, step.max_length, step.shard, step.dp)
        if rec is not None:
            rec.last_lookup = LastLookup(self.page_pool.key_version, length, step.shard, tuple(map(list, hits)))
        return hits, length

    def allocate(self, step: AllocationStep) -> PageIds | None:
        """An allocation: the new page ids per group, or None, with nothing changed, when the
        plan does not fit the pool (or the request's shard). INV-ATOMIC: `_plan` is pure and
        `apply`, which changes the state, only runs a plan that fits."""
        if not self.single_type_managers:
            return ()
        new_pages = self._plan(step)
        if new_pages is None:
            return None
        return self.apply(step, new_pages)

    def cache(self, held: HeldState, new_keys: list[PageKey], num_tokens: int, num_computed_tokens: int) -> None:
        """Caching on its own (`CacheManager.cache_pages`): the request holds pages; ``new_keys``
        are the keys its list lacks to cache the full pages up to ``num_tokens`` tokens."""
        self._cache_held(held, new_keys, num_tokens, num_computed_tokens)

    def free(self, request_id: str) -> None:
        """Release the request's pages, group by group, each last page first; its keys stay
        (a record with no keys is dropped). No-op for a request that holds none."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        rec = self.holding(request_id)
        if rec is None:
            return
        if rec.request is not None:
            count_holder(rec.request, -1)
        if rec.keys is None:
            del self.records[request_id]
        else:
            self.records[request_id] = RequestState(rec.request, rec.keys, rec.keys_version, rec.last_lookup)
        for m, group_pages in zip(self.single_type_managers, rec.pages):
            m.free(group_pages)

    def drop_keys(self, request_id: str) -> None:
        """Forget the id's keys and last lookup (a record that holds no pages goes)."""
        rec = self.records.get(request_id)
        if type(rec) is HeldState:
            rec.keys = rec.last_lookup = None
        elif rec is not None:
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

    # ---- keys -----------------------------------------------------------------------------

    def _keys_record(self, request_id: str, request: Request) -> RequestState:
        """The id's record, created for ``request`` (keys only) on first use."""
        rec = self.records.get(request_id)
        if rec is None:
            rec = self.records[request_id] = RequestState(request)
        return rec

    @staticmethod
    def _stored_keys(rec: RequestState, new_keys: list[PageKey]) -> list[PageKey]:
        """The record's key list with ``new_keys`` appended (a list is started, for the record's
        request at its current identity version, when none is kept)."""
        keys = rec.keys
        if keys is None:
            keys = rec.keys = []
            rec.keys_version = 0 if rec.request is None else identity_version(rec.request)
        keys += new_keys
        return keys

    # ---- the plan and its application ------------------------------------------------------

    def _plan(self, step: AllocationStep) -> tuple[int, ...] | None:
        """The allocation's plan if it fits: how many new pages each group takes (what each frees
        is its rule on the record, `_step_frees`); None when it does not fit. Pure.

        The new pages are counted first: when they alone do not fit, the plan fails without
        counting which hits are free (touching those only adds to the need), the hit ids' range
        checked all the same (`_check_hit_range`). Pages the step frees that no other request
        holds count as available to it."""
        held, hits = step.held, step.hits
        pages = self._no_pages if held is None else held.pages
        reclaimed = 0
        if held is not None and self._frees_pages:
            reclaimed = self._count_reclaimed(pages, self._step_frees(held, step.num_computed_tokens))
        new_pages = self._new_pages(pages, step)
        need = new_pages[0] if len(new_pages) == 1 else sum(new_pages)
        if need > reclaimed or hits is not None:
            shard, pool = step.shard, self.page_pool
            free = pool.get_num_free_pages() if shard is None else pool.get_num_free_pages(
                dp_shard_hint=shard, data_parallel_size=step.dp)
            if need > reclaimed and need > free + reclaimed:
                if hits is not None:
                    self._check_hit_range(hits)
                return None
            # a request taking hits holds nothing, so no frees count here
            if hits is not None and need + self._free_hits(hits) > free:
                return None
        return new_pages

    def _new_pages(self, pages: Sequence[Sequence[int]], step: AllocationStep) -> tuple[int, ...]:
        """Per group, the new pages the step takes from the free list, its hits not counted
        (`_free_hits`): the group's own rule, to the step's slots (a Mamba align group: to its
        end)."""
        hits = self._no_pages if step.hits is None else step.hits
        managers = self.single_type_managers
        if len(managers) == 1 and not self._mamba_align:
            # (`SingleTypeCacheManager.new_pages`' rule, inlined: a single group that keeps it is
            # the common layout, and this runs at every allocation)
            need = -(-step.num_slots // managers[0].page_size) - len(pages[0]) - len(hits[0])
            return (need if need > 0 else 0,)
        num_slots, num_tokens = step.num_slots, step.num_tokens
        return tuple([m.new_pages(len(group_pages), num_tokens if state else num_slots, len(group_hits))
                      for m, state, group_pages, group_hits in zip(managers, self._holds_states, pages, hits)])

    def _free_hits(self, hits: PageIds) -> int:
        """How many hit pages are free (touching them takes them off the free list)."""
        count_free = self.page_pool.count_free_ids
        return sum(count_free(group_hits) for group_hits in hits if group_hits)

    def _check_hit_range(self, hits: PageIds) -> None:
        """The pool's `ForeignPageError` when a hit id is not a page of the pool: what the pool
        checks when the plan counts the free hits, for a plan that fails before it counts them
        (the ids are exact ints)."""
        num_pages = self.page_pool.num_pages
        for group_hits in hits:
            if group_hits:
                ordered = sorted(group_hits)  # (exact ints: one sort compares faster than min and max)
                if ordered[0] < 0 or ordered[-1] >= num_pages:
                    self.page_pool.count_free_ids(group_hits)  # raises the pool's error, naming the id

    def _step_frees(self, held: HeldState, num_computed_tokens: int) -> StepFrees:
        """Per group, what a step from ``num_computed_tokens`` frees (pure): a Mamba align group's
        state pages before the one the step starts from, a windowed group's pages the window
        left, else the empty range."""
        return [m.skipped_states(group_states, num_computed_tokens) if isinstance(m, MambaAlignManager)
                else m.skipped_range(pages, num_computed_tokens) if m.frees_skipped_pages else (0, 0)
                for m, pages, group_states in zip(self.single_type_managers, held.pages,
                                                  held.states or self._no_pages)]

    def _count_reclaimed(self, pages: Sequence[Sequence[int]], frees: StepFrees) -> int:
        """How many of the pages a step frees return to the free list (held by this request only)."""
        ref_count = self.page_pool.ref_count
        reclaimed = 0
        for group_pages, free in zip(pages, frees):
            picked = [group_pages[j] for j in free] if isinstance(free, list) else group_pages[free[0]:free[1]]
            reclaimed += countOf(map(ref_count, picked), 1)
        return reclaimed

    def apply(self, step: AllocationStep, new_pages: tuple[int, ...]) -> PageIds:
        """Carry out a plan that fits (``new_pages``: each group's new pages, from `_plan`), in
        eSurge's order: the record's first pages (the hits) or the pages the step frees, then the
        rest of the application (`extend`). With `extend`, the one path through which an
        allocation changes state."""
        held = step.held
        if held is None:
            held = self._start(step)
        elif self._frees_pages:
            self._free_step_pages(held, self._step_frees(held, step.num_computed_tokens))
        return self.extend(held, new_pages, step.shard, step.dp, step.num_tokens, step.cache_keys, step.cache_tokens,
                           step.num_computed_tokens)

    def extend(self, held: HeldState, new_pages: tuple[int, ...], shard: int | None, dp: int | None, num_tokens: int,
               cache_keys: list[PageKey] | None, cache_tokens: int, num_computed_tokens: int) -> PageIds:
        """The application of a plan that fits to a record that holds pages, its frees done:
        each group's ``new_pages`` (a Mamba align group's state page for the step's end,
        ``num_tokens``, after null placeholders), then the caching of the full pages up to
        ``cache_tokens`` tokens with the keys the request's list lacked (``cache_keys``; None: no
        caching; ``num_computed_tokens``: the request's count, whose Mamba state is keyed).
        `apply` ends here; the decode step's fast path (`verikv.fast_paths`), whose steps free
        nothing, starts here."""
        if len(new_pages) == 1 and not self._mamba_align:  # one group: no per-group walk
            new: PageIds = (self.single_type_managers[0].take_new_pages(held.pages[0], new_pages[0], shard, dp)
                            if new_pages[0] else [],)
        else:
            new = self._take_new_pages(held, new_pages, shard, dp, num_tokens)
        if cache_keys is not None:
            self._cache_held(held, cache_keys, cache_tokens, num_computed_tokens)
        return new

    def _start(self, step: AllocationStep) -> HeldState:
        """Give the id its first pages: the prefix hits (touched in the pool; they count as
        cached), or empty lists. Its kept keys carry over unless they are stale."""
        managers = self.single_type_managers
        if step.hits is None:
            pages: PageIds = tuple([] for _ in managers)
        else:
            for group_hits in step.hits:
                if group_hits:
                    self.page_pool.touch_ids(group_hits)
            pages = tuple(list(group_hits) for group_hits in step.hits)
        states = [m.first_states(group_pages) if isinstance(m, MambaAlignManager) else []
                  for m, group_pages in zip(managers, pages)] if self._mamba_align else []
        old = self.records.get(step.request_id)
        kept = None if old is None or step.drop_keys else old.keys
        held = HeldState(step.request, pages, step.shard, self.initial_cache_at, states, kept,
                         0 if kept is None or old is None else old.keys_version)
        self.records[step.request_id] = held
        if step.request is not None:
            count_holder(step.request, 1)
        return held

    def _free_step_pages(self, held: HeldState, frees: StepFrees) -> None:
        """Free what `_step_frees` planned, group by group."""
        for m, pages, group_states, free in zip(self.single_type_managers, held.pages, held.states or self._no_pages,
                                                frees):
            if isinstance(free, list):
                cast(MambaAlignManager, m).free_states(pages, cast("list[int]", group_states), free)
            else:
                m.remove_skipped_pages(pages, *free)

    def _take_new_pages(self, held: HeldState, counts: Sequence[int], shard: int | None, dp: int | None,
                        num_tokens: int) -> PageIds:
        """Each group's planned new pages, appended to the record's lists (a Mamba align group's
        state page for ``num_tokens`` tokens, after null placeholders)."""
        managers, pages = self.single_type_managers, held.pages
        if not self._mamba_align:
            return tuple([m.take_new_pages(group_pages, count, shard, dp) if count else []
                          for m, group_pages, count in zip(managers, pages, counts)])
        return tuple([cast(MambaAlignManager, m).allocate_state(group_pages, group_states, num_tokens, shard, dp)
                      if state else m.take_new_pages(group_pages, count, shard, dp) if count else []
                      for m, state, group_pages, group_states, count in zip(managers, self._holds_states, pages,
                                                                             held.states, counts)])

    # ---- caching --------------------------------------------------------------------------

    def _cache_held(self, held: HeldState, new_keys: list[PageKey], num_tokens: int, num_computed_tokens: int) -> None:
        """Store the keys the request's list lacked, register its full pages up to ``num_tokens``
        tokens in every group, and move the record's next caching point past them
        (`HeldState.cache_at`): to the end of the key page after ``num_tokens`` tokens (every page
        size is a multiple of the key page size, so no group fills a page before), or never
        (``max_model_len + 1``) when that page ends past ``max_model_len``. A Mamba align group
        keys the state of the request's computed count, which moves without new full pages, so
        caching stays due at every call then."""
        keys = self._stored_keys(held, new_keys)
        self._register(held, keys, num_tokens, num_computed_tokens)
        if not self._mamba_align:
            size = self.key_page_size or 1
            due = (num_tokens // size + 1) * size
            if due > held.cache_at:
                held.cache_at = due if due <= self.max_model_len else self.max_model_len + 1

    def _register(self, held: HeldState, keys: Sequence[PageKey], num_tokens: int, num_computed_tokens: int) -> None:
        """Register the record's full pages up to ``num_tokens`` tokens under ``keys`` in every
        group (the arguments are checked against every group before the first one caches). A
        Mamba align group keys the state of ``num_computed_tokens`` (0: none;
        `MambaAlignManager.cache_states`)."""
        managers = self.single_type_managers
        pages, cached = held.pages, held.num_cached
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
        for gid, (m, state) in enumerate(zip(managers, self._holds_states)):
            if state:  # the state of the request's computed count
                cached[gid] = cast(MambaAlignManager, m).cache_states(pages[gid], cached[gid], keys, num_tokens,
                                                                      num_computed_tokens)
            else:
                cached[gid] = m.cache_pages(self._hittable(gid, pages[gid]), cached[gid], keys, num_tokens)

    def _hittable(self, gid: int, pages: list[int]) -> list[int]:
        """The pages of group ``gid`` to cache: with `skip_unreachable_sliding_pages`, a sliding
        group's pages that can never serve a hit become null placeholders (never hashed)."""
        sparse = self._sparse_sliding.get(gid)
        if sparse is None:
            return pages
        per, need, peek = sparse
        return [p if sliding_page_can_hit(j, per, need, peek) else NULL_PAGE_ID for j, p in enumerate(pages)]

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

    # ---- eSurge's id-level API (its own argument checks, then the same plan) -----------------

    def get_num_pages_to_allocate(self, request_id: str, num_tokens: int, new_computed_pages: PageIds) -> int:
        """Free-list pages the request takes to cover ``num_tokens`` slots (all groups)."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        check_hit_shape(self.single_type_managers, new_computed_pages)
        rec = self.holding(request_id)
        held: Sequence[Sequence[int]] = self._no_pages if rec is None else rec.pages
        return sum(m.pages_needed(pages, num_tokens, hits)
                   for m, pages, hits in zip(self.single_type_managers, held, new_computed_pages))

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
        first allocation of an id creates its record, holding the hits.
        """
        held = self._check_allocation(request_id, num_computed_tokens, num_slots, new_computed_pages)
        state_end = num_slots if num_state_tokens is None else checked_int(
            num_state_tokens, "num_state_tokens", minimum=0)
        if held is not None:
            check_states_move_forward(self.single_type_managers, held.pages, num_computed_tokens, state_end)
        return self.allocate(AllocationStep(request_id, None, held, num_computed_tokens, state_end, num_slots,
                                            new_computed_pages, shard, dp, None, 0, False))

    def _check_allocation(self, request_id: object, num_computed_tokens: object, num_slots: object,
                          new_computed_pages: Sequence[Sequence[int]] | None) -> HeldState | None:
        """The arguments of `allocate_slots`, checked before its plan; returns the id's record
        while it holds pages."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        checked_int(num_computed_tokens, "num_computed_tokens", minimum=0)
        checked_int(num_slots, "num_slots", minimum=0)
        rec = self.holding(request_id)
        if new_computed_pages is not None:
            check_hit_shape(self.single_type_managers, new_computed_pages)
            if rec is not None:
                raise InvalidArgumentError(f"request {request_id!r} already holds pages; hits are only taken first")
        return rec

    def remove_skipped_pages(self, request_id: str, num_computed_tokens: int) -> None:
        """Free the pages that left every window once ``num_computed_tokens`` are computed."""
        rec = self.holding(request_id)
        if rec is None:
            return
        computed = checked_int(num_computed_tokens, "num_computed_tokens", minimum=0)
        self._free_step_pages(rec, self._step_frees(rec, computed))

    def cache_pages(self, request_id: str, keys: Sequence[PageKey], num_tokens: int) -> None:
        """Register the request's full pages up to ``num_tokens`` tokens in every group under
        ``keys`` (the request's keys, which the record does not keep). A Mamba align group keys
        no state here: a state is keyed only once the step that ends it is over, and this call is
        not told which tokens are computed (`CacheManager.cache_pages` is, and keys it)."""
        rec = self.holding(request_id)
        if rec is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        self._register(rec, keys, num_tokens, 0)

    def get_num_common_prefix_pages(self, request_id: str, num_running_requests: int) -> list[int]:
        """Per group: leading pages every running request shares (0 for windowed groups)."""
        checked_int(num_running_requests, "num_running_requests", minimum=1)
        rec = self.holding(request_id)
        if rec is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return [m.get_num_common_prefix_pages(pages, num_running_requests)
                for m, pages in zip(self.single_type_managers, rec.pages)]

    def get_pages(self, request_id: str) -> PageIds | None:
        """Copies of the request's page ids per group, or None for an unknown request."""
        rec = self.holding(request_id)
        return None if rec is None else tuple(list(pages) for pages in rec.pages)

    # ---- deprecated: the decode entry points the manager's pipeline replaced ------

    def decode_step(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Deprecated: always None ("not decided here"); `CacheManager.allocate_slots` decides."""
        _deprecated("CacheCoordinator.decode_step", "CacheManager.allocate_slots")
        return None

    def extend_held(self, rec: RequestState, num_tokens: int) -> list[int] | None:
        """Deprecated: always None ("not decided here"); `CacheManager.allocate_slots` decides."""
        _deprecated("CacheCoordinator.extend_held", "CacheManager.allocate_slots")
        return None

    def decode_work(self, requests: list[Request], counts: int | list[int]) -> list[int]:
        """Deprecated: every position (each may do something); `CacheManager.allocate_slots_batch`
        finds the ones that do."""
        _deprecated("CacheCoordinator.decode_work", "CacheManager.allocate_slots_batch")
        return list(range(len(requests)))

    def held_steps(self, requests: list[Request], counts: int | list[int], work: list[int]) -> None:
        """Deprecated: always None (the single calls decide); use `CacheManager.allocate_slots_batch`."""
        _deprecated("CacheCoordinator.held_steps", "CacheManager.allocate_slots_batch")

    def decode_steps(self, records: list[HeldState], needs: list[int]) -> list[list[int]]:
        """Deprecated: each record's list grows by ``needs[i]`` (0 or 1) new page, all taken in one
        pool call; use `CacheManager.allocate_slots_batch`."""
        _deprecated("CacheCoordinator.decode_steps", "CacheManager.allocate_slots_batch")
        new = iter(self.page_pool.get_new_page_ids(countOf(needs, 1)))
        taken = [[next(new)] if need > 0 else [] for need in needs]
        for rec, pages in zip(records, taken):
            rec.pages[0].extend(pages)
        return taken

    def cache_held(self, rec: HeldState, keys: Sequence[PageKey], num_tokens: int,
                   num_computed_tokens: int = 0) -> None:
        """Deprecated: `cache_pages` for a record; use `CacheManager.cache_pages`."""
        _deprecated("CacheCoordinator.cache_held", "CacheManager.cache_pages")
        self._register(rec, keys, num_tokens, num_computed_tokens)

    def cache_held_batch(self, records: list[HeldState], keys: list[list[PageKey]], num_tokens: list[int]) -> None:
        """Deprecated: `cache_held` for each record in order; use `CacheManager.cache_pages`."""
        _deprecated("CacheCoordinator.cache_held_batch", "CacheManager.cache_pages")
        for rec, request_keys, n in zip(records, keys, num_tokens):
            self._register(rec, request_keys, n, 0)

    def record_for(self, request_id: str, request: Request) -> RequestState:
        """Deprecated: the id's record, created for ``request`` on first use; records are the
        coordinator's own (`records` reads them)."""
        _deprecated("CacheCoordinator.record_for", "CacheCoordinator.records")
        return self._keys_record(request_id, request)

    def forget_if_idle(self, request_id: str) -> None:
        """Deprecated: drop the id's record if it holds no pages and keeps no keys (the
        coordinator drops such records itself)."""
        _deprecated("CacheCoordinator.forget_if_idle", "CacheCoordinator.drop_keys")
        rec = self.records.get(request_id)
        if type(rec) is RequestState and rec.keys is None:
            del self.records[request_id]


def check_hit_shape(managers: Sequence[SingleTypeCacheManager], hits: object) -> None:
    """Hits are one sequence of exact-int page ids per group, with no null page in a group that
    never drops pages. (Ranges are checked by the pool when the plan counts the revived hits,
    before anything changes.)"""
    if type(hits) is not tuple and (isinstance(hits, (str, bytes)) or not isinstance(hits, Sequence)):
        raise InvalidArgumentError(f"new_computed_pages must hold one page-id list per group ({len(managers)})")
    if len(hits) != len(managers):
        raise InvalidArgumentError(f"new_computed_pages must hold one page-id list per group ({len(managers)})")
    for m, group_hits in zip(managers, hits):
        gid = m.kv_cache_group_id
        if type(group_hits) is not list and (isinstance(group_hits, (str, bytes))
                                             or not isinstance(group_hits, Sequence)):
            raise InvalidArgumentError(f"group {gid}: hits must be a sequence of page ids")
        if countOf(map(type, group_hits), int) != len(group_hits):
            raise ForeignPageError(f"group {gid}: hit page ids must be ints, got {describe(group_hits)}")
        if not m.frees_skipped_pages and NULL_PAGE_ID in group_hits:
            raise InvalidArgumentError(f"group {gid}: the null page cannot be a full-attention hit")


def check_states_move_forward(managers: Sequence[SingleTypeCacheManager], pages: PageIds, num_computed_tokens: int,
                              state_end: int) -> None:
    """`InvalidArgumentError` when a step from ``num_computed_tokens`` to ``state_end`` tokens
    would put a Mamba align group's state over an earlier or cached one
    (`MambaAlignManager.check_state_moves_forward`); no-op for the other groups."""
    for m, group_pages in zip(managers, pages):
        if isinstance(m, MambaAlignManager):
            m.check_state_moves_forward(group_pages, num_computed_tokens, state_end)


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
    _check_flags(use_eagle, enable_caching)
    free_order = options.get("free_order", "esurge")
    if not isinstance(free_order, str):  # (the pool checks the name)
        raise InvalidArgumentError(f"free_order must be a str, got {type(free_order).__name__}")
    if not enable_caching or (isinstance(kv_cache_groups, Sequence) and len(kv_cache_groups) == 0):
        return CacheCoordinatorNoPrefixCache(num_pages, kv_cache_groups, max_model_len, use_eagle, False, **options)
    if isinstance(kv_cache_groups, Sequence) and len(kv_cache_groups) == 1:
        return UnitaryCacheCoordinator(num_pages, kv_cache_groups, max_model_len, use_eagle, True, **options)
    return HybridCacheCoordinator(num_pages, kv_cache_groups, max_model_len, use_eagle, True, **options)
