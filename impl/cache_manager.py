"""`CacheManager`: the scheduler-facing page manager (eSurge's API), and `CachePages`.

The manager checks every argument, translates eSurge's API, computes each request's content
keys (once per full page, with its own `PageHasher`) and hands each checked call to a
coordinator (`verikv.coordinators`), which owns the one record per request and changes state:
the manager keeps no per-request state of its own. Each call that changes state is one
pipeline, snapshot -> check -> plan -> apply (docs/architecture.md): a raised error always
means the call changed nothing. Semantics are eSurge's with the departures of
docs/differences.md; docs/semantics.md states them per call.

Read-only introspection used by the abstraction function and the conformance harness:
``num_pages``, ``page_pool``, ``kv_cache_groups``, ``max_model_len``, ``enable_caching``,
``use_eagle``, ``data_parallel_size``, `group_layouts`, `request_ids`, `get_page_ids`,
`num_cached_pages`, `request_shard`, `page_hashes_of`, `hashed_request_ids` (the protocol of
`verikv.spec.abstraction`; none changes state).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from operator import countOf
from typing import Any, Literal, cast, overload

from verikv.cache_specs import CacheGroupsConfig, CacheGroupSpec
from verikv.coordinators import (
    AllocationStep,
    CacheCoordinator,
    HeldState,
    LastLookup,
    LookupStep,
    PageIds,
    RequestState,
    check_states_move_forward,
    get_kv_cache_coordinator,
)
from verikv.dp_sharding import checked_int, dp_shard_page_bounds
from verikv.errors import (
    ForeignPageError,
    InvalidArgumentError,
    UnknownRequestError,
    describe,
)
from verikv.events import Describer, KVEvent, PrefixCacheStats, StoreContext, describe_run
from verikv.fast_paths import DecodeFastPaths
from verikv.free_queue import NULL_PAGE_ID, CachePage
from verikv.hashing import PageHasher, PageKey
from verikv.page_pool import PagePool
from verikv.request import LAST_UNFINISHED, Request, RequestStatus, identity_version


class CachePages:
    """Pages per cache group, as ids; ``.pages`` gives eSurge's `CachePage` views.

    Returned by `CacheManager.get_computed_pages` (prefix hits) and
    `CacheManager.allocate_slots` (the new pages); hits go back into ``allocate_slots``.
    ``page_ids`` holds one id sequence per group: lists, except in a single-group manager's
    shared "no new page" result of an allocation, whose group is an empty tuple (as vLLM's
    ``empty_kv_cache_blocks``: it cannot be changed through one result and seen in another).
    `get_page_ids` always returns fresh lists.
    """

    __slots__ = ("page_ids", "page_pool")

    def __init__(self, page_ids: Sequence[Sequence[int]], page_pool: PagePool | None = None) -> None:
        if isinstance(page_ids, (str, bytes)) or not isinstance(page_ids, Sequence):
            raise InvalidArgumentError("page_ids must be a sequence with one id list per cache group")
        groups = []
        for ids in page_ids:
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
                raise InvalidArgumentError(f"each group's page ids must be a sequence of ints, got {describe(ids)}")
            groups.append([_page_id(p) for p in ids])
        if page_pool is not None and not isinstance(page_pool, PagePool):
            raise InvalidArgumentError(f"page_pool must be a PagePool, got {type(page_pool).__name__}")
        self.page_ids: PageIds = tuple(groups)
        self.page_pool: PagePool | None = page_pool

    @classmethod
    def _of(cls, page_ids: PageIds, page_pool: PagePool | None) -> CachePages:
        """Wrap lists the manager built (already valid) without copying them."""
        out = object.__new__(cls)
        out.page_ids = page_ids
        out.page_pool = page_pool
        return out

    @property
    def pages(self) -> tuple[list[CachePage], ...]:
        """The pages as `CachePage` views of their pool (one object per id)."""
        if self.page_pool is None:
            raise InvalidArgumentError("these CachePages were built without a pool; only their ids are known")
        page = self.page_pool.page
        return tuple([page(p) for p in ids] for ids in self.page_ids)

    @overload
    def get_page_ids(self, allow_none: Literal[False] = False, *,
                     group_ids: Sequence[int] | None = None) -> tuple[list[int], ...]: ...

    @overload
    def get_page_ids(self, allow_none: bool, *,
                     group_ids: Sequence[int] | None = None) -> tuple[list[int], ...] | None: ...

    def get_page_ids(self, allow_none: bool = False, *,
                     group_ids: Sequence[int] | None = None) -> tuple[list[int], ...] | None:
        """The ids per group (copies); None instead when ``allow_none`` and every selected group
        is empty. ``group_ids`` selects groups, in that order (default: all); each must be a
        group of this result, ``0 .. len(self) - 1`` (vLLM's ``get_block_ids(allow_none,
        group_ids=...)``, which also takes negative indices: verikv refuses them)."""
        ids = self.page_ids if group_ids is None else self._selected(group_ids)
        if allow_none is not False:
            if allow_none is not True:
                raise InvalidArgumentError(f"allow_none must be a bool, got {describe(allow_none)}")
            if not any(ids):
                return None
        return (list(ids[0]),) if len(ids) == 1 else tuple([list(x) for x in ids])

    def _selected(self, group_ids: object) -> PageIds:
        """The id lists of the groups ``group_ids`` names, checked before any is read."""
        if isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, Sequence):
            raise InvalidArgumentError(f"group_ids must be a sequence of group ids, got {describe(group_ids)}")
        if group_ids and not self.page_ids:
            raise InvalidArgumentError("these CachePages have no group to select")
        chosen = [checked_int(g, "group id", minimum=0, maximum=len(self.page_ids) - 1) for g in group_ids]
        return tuple(self.page_ids[g] for g in chosen)

    def get_unhashed_page_ids(self) -> list[int]:
        """Ids of the pages without a content key (single-group managers only, as eSurge)."""
        if len(self.page_ids) != 1:
            raise InvalidArgumentError(f"get_unhashed_page_ids needs exactly one group, got {len(self.page_ids)}")
        if self.page_pool is None:
            raise InvalidArgumentError("these CachePages were built without a pool; keys are unknown")
        key_of = self.page_pool.key_of
        return [p for p in self.page_ids[0] if key_of(p) is None]

    def get_unhashed_page_ids_all_groups(self) -> list[list[int]]:
        """Per group, the ids of the pages without a content key, null placeholders left out
        (vLLM's ``get_unhashed_block_ids_all_groups``)."""
        if self.page_pool is None:
            raise InvalidArgumentError("these CachePages were built without a pool; keys are unknown")
        key_of = self.page_pool.key_of
        return [[p for p in ids if p != NULL_PAGE_ID and key_of(p) is None] for ids in self.page_ids]

    def __add__(self, other: CachePages) -> CachePages:
        """Concatenate group by group; both must have the same number of groups and pool."""
        if not isinstance(other, CachePages):
            raise InvalidArgumentError(f"can only add CachePages to CachePages, not {type(other).__name__}")
        if len(self.page_ids) != len(other.page_ids):
            raise InvalidArgumentError(
                f"cannot add CachePages of {len(self.page_ids)} and {len(other.page_ids)} groups")
        if self.page_pool is not None and other.page_pool is not None and self.page_pool is not other.page_pool:
            raise ForeignPageError("cannot add CachePages of two different pools")
        return CachePages._of(tuple([*a, *b] for a, b in zip(self.page_ids, other.page_ids)),
                              self.page_pool if self.page_pool is not None else other.page_pool)

    def new_empty(self) -> CachePages:
        """Empty lists, one per group, same pool."""
        return CachePages._of(tuple([] for _ in self.page_ids), self.page_pool)

    def __len__(self) -> int:
        """Number of cache groups."""
        return len(self.page_ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CachePages):
            return NotImplemented
        return self.get_page_ids() == other.get_page_ids()

    __hash__ = cast(Any, None)  # unhashable, as the lists it holds

    def __repr__(self) -> str:
        return f"CachePages({self.get_page_ids()!r})"


class _NoNewPages(CachePages):
    """A single-group manager's result of an allocation that takes no page, shared by every such
    call. Its group is an empty tuple, so it cannot be changed through one result and seen in
    another."""

    __slots__ = ()

    def get_page_ids(self, allow_none: bool = False, *, group_ids: Sequence[int] | None = None) -> Any:
        """``([],)``: a fresh empty list (None when ``allow_none``). (Callers see `CachePages`'
        overloaded signature: this shortcut of its common call returns exactly what it does.)"""
        if allow_none is False and group_ids is None:
            return ([],)
        return super().get_page_ids(allow_none, group_ids=group_ids)



#: `x is _ZERO`: x is the plain int 0 (the decode step's guard: anything else takes the checked path)
_ZERO = 0


def _int(value: object, name: str, minimum: int) -> int:
    """`checked_int` with a lower bound, a plain int passing without the call."""
    if type(value) is int:
        if value < minimum:
            raise InvalidArgumentError(f"{name} must be >= {minimum}, got {describe(value)}")
        return value
    return checked_int(value, name, minimum=minimum)


def _page_id(page: object) -> int:
    """A page id given by the caller as an exact int >= 0 (range against a pool is checked
    where it is used)."""
    if type(page) is int and page >= 0:
        return page
    if isinstance(page, bool) or not isinstance(page, numbers.Integral):  # (no repr: it may be deep)
        raise ForeignPageError(f"a page id must be an integer, got {type(page).__name__}")
    return checked_int(page, "page id", minimum=0, error=ForeignPageError)


def _request(request: object) -> Request:
    if not isinstance(request, Request):
        raise InvalidArgumentError(f"expected a verikv.Request, got {type(request).__name__}")
    return request


def _flag(value: object, name: str) -> bool:
    if value is not False and value is not True:
        raise InvalidArgumentError(f"{name} must be a bool, got {describe(value)}")
    return value


class CacheManager:
    """Pages for every request of a scheduler: prefix lookup, allocation, caching, freeing.

    ``kv_cache_groups`` lists the model's cache groups (one `CacheGroupSpec` each); all share
    one pool of ``num_pages`` pages (page 0 is the null page). ``hash_scheme`` /
    ``hash_seed`` choose the content keys (see `verikv.hashing`), ``free_order`` the free-list
    policy, ``enable_kv_events`` event recording, ``data_parallel_size`` the DP size the
    pool's shards are cut for (calls pass it with ``dp_shard_hint``, as eSurge's scheduler).
    ``mamba_cache_mode`` is how Mamba groups are cached: ``"none"`` (default: one state page per
    request, never a hit) or ``"align"`` (states at page-aligned positions are cached and hit;
    the engine must keep the state contract of docs/semantics.md, "Mamba prefix caching").
    ``skip_unreachable_sliding_pages`` (default off) leaves uncached the sliding-window pages
    that can never serve a hit in a hybrid model (vLLM 0.33's policy; docs/semantics.md).
    ``eagle_rule`` is how a lookup with ``use_eagle`` drops the last hit page (it changes
    nothing without EAGLE): ``"drop-once"`` (default: the groups' common hit, recomputed once
    from one largest page fewer; eSurge's rule without its second drop in hybrids, so eSurge
    callers see the hits they expect) or ``"vllm"`` (vLLM 0.33's rule: in a hybrid each group
    looks one page past the candidate and drops it, so a resent page-aligned prompt keeps its
    hit; `verikv.vllm_eagle`). docs/differences.md compares them.

    Every call that changes state is one pipeline (docs/architecture.md): the request's record
    is read once (the snapshot), every argument is checked against it and every content key
    computed (the check stage: a bad argument raises with nothing changed), then the coordinator
    takes the checked call in one method, which plans (pure) and applies.
    """

    def __init__(
        self,
        num_pages: int,
        kv_cache_groups: Sequence[CacheGroupSpec],
        max_model_len: int,
        enable_caching: bool = True,
        use_eagle: bool = False,
        *,
        hash_scheme: str = "sha256",
        hash_seed: int | str | bytes | None = None,
        free_order: str = "esurge",
        enable_kv_events: bool = False,
        data_parallel_size: int | None = None,
        mamba_cache_mode: str = "none",
        skip_unreachable_sliding_pages: bool = False,
        eagle_rule: str = "drop-once",
    ) -> None:
        dp_size = 1 if data_parallel_size is None else checked_int(data_parallel_size, "data_parallel_size", minimum=1)
        self.hasher: PageHasher = PageHasher(hash_scheme, seed=hash_seed)
        self.coordinator: CacheCoordinator = get_kv_cache_coordinator(
            num_pages, kv_cache_groups, max_model_len, use_eagle, enable_caching,
            free_order=free_order, enable_kv_events=enable_kv_events, mamba_cache_mode=mamba_cache_mode,
            skip_unreachable_sliding_pages=skip_unreachable_sliding_pages, eagle_rule=eagle_rule,
        )
        coordinator = self.coordinator
        self.page_pool: PagePool = coordinator.page_pool
        self.num_pages: int = self.page_pool.num_pages
        self.kv_cache_groups: tuple[CacheGroupSpec, ...] = coordinator.kv_cache_groups
        self.max_model_len: int = coordinator.max_model_len
        self.enable_caching: bool = coordinator.enable_caching  # False when there is no group
        self.use_eagle: bool = coordinator.use_eagle
        #: whether sliding-window pages that can never serve a hit are left uncached
        self.skip_unreachable_sliding_pages: bool = skip_unreachable_sliding_pages
        #: "drop-once" or "vllm" (see the class docstring)
        self.eagle_rule: str = coordinator.eagle_rule
        #: eSurge's attribute: the first group's page size when caching, else None
        self.page_size: int | None = self.kv_cache_groups[0].kv_cache_spec.page_size if self.enable_caching else None
        #: "none" or "align" (see the class docstring; "none" whenever caching is off)
        self.mamba_cache_mode: str = coordinator.mamba_cache_mode
        #: the page size of the request keys, None when no group caches (only Mamba groups in
        #: "none" mode, or caching off): then no keys are computed
        self._key_page_size: int | None = coordinator.key_page_size
        self._mamba_align = self.mamba_cache_mode == "align" and any(
            m.kind == "mamba_align" for m in coordinator.single_type_managers)
        self._page_sizes = tuple(g.kv_cache_spec.page_size for g in self.kv_cache_groups)
        self._windowed_groups = tuple(m.frees_skipped_pages for m in coordinator.single_type_managers)
        #: the no-new-page decode step and the batched step (`verikv.fast_paths`)
        self._fast = DecodeFastPaths(coordinator, self._caching)
        #: a single-group allocation's result when it takes no page: shared, its group immutable
        self._no_new_page = _NoNewPages._of(cast("PageIds", ((),)), self.page_pool) if len(self._page_sizes) == 1 \
            else None
        #: DP size the shards are cut for (1: no DP); calls may only ask for this size
        self.data_parallel_size: int = dp_size
        #: constructed without a DP size: the first call whose DP is active fixes it (eSurge's
        #: scheduler passes the size with every call)
        self._dp_open = data_parallel_size is None
        self.prefix_cache_stats: PrefixCacheStats = PrefixCacheStats()
        log = self.page_pool.event_log
        if log is not None:  # KV events: a call's page reports become its events (docs/events.md)
            # the recorded calls shadow the methods on this instance
            self.__dict__.update(allocate_slots=log.recording(self.allocate_slots, self._describer),
                                 cache_pages=log.recording(self.cache_pages, self._describer))

    @classmethod
    def from_plan(cls, plan: Any, max_model_len: int, **kwargs: Any) -> CacheManager:
        """A manager for a sizing plan (anything with ``to_cache_groups_config()``, e.g.
        `verikv.sizing.KVCachePlan`); its ``data_parallel_size`` (if any) is used unless
        given. ``kwargs`` are the other constructor arguments."""
        to_config = getattr(plan, "to_cache_groups_config", None)
        if not callable(to_config):
            raise InvalidArgumentError(f"{type(plan).__name__} has no to_cache_groups_config()")
        config = to_config()
        if not isinstance(config, CacheGroupsConfig):
            raise InvalidArgumentError("to_cache_groups_config() must return a CacheGroupsConfig")
        if "data_parallel_size" not in kwargs:
            kwargs["data_parallel_size"] = getattr(plan, "data_parallel_size", None)
        return cls(config.num_pages, config.kv_cache_groups, max_model_len, **kwargs)

    # ---- metrics --------------------------------------------------------------------------

    @property
    def usage(self) -> float:
        """Fraction of usable pages held or cached-but-not-free: 1 - free / (N - 1); idle: 0.0."""
        return self.page_pool.get_usage()

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        """Lookup statistics (tokens queried, tokens hit) since the last call; counters restart."""
        return self.prefix_cache_stats.take()

    def _describer(self, request: Any) -> Describer:
        """How the runs of pages cached for ``request`` in one call are described in events."""
        def describe(group_id: int | None, page_ids: tuple[int, ...]) -> StoreContext:
            gid = group_id or 0
            page_size = self._page_sizes[gid]
            # the request holds the pages it just cached, and their keys
            rec = cast(HeldState, self.coordinator.records[request.request_id])
            first = rec.pages[gid].index(page_ids[0])
            stride = page_size // (self._key_page_size or page_size)
            parent = cast("list[PageKey]", rec.keys)[first * stride - 1] if first else None
            return describe_run(request, self.kv_cache_groups[gid].kv_cache_spec, page_size, first, len(page_ids),
                                parent, self.hasher.page_extra_keys)
        return describe

    def take_events(self) -> list[KVEvent]:
        """KV events (stored, removed, all cleared) since the last call; empty unless enabled."""
        return self.page_pool.take_events()

    # ---- prefix lookup --------------------------------------------------------------------------

    def get_computed_pages(
        self, request: Request, *, dp_shard_hint: int | None = None, data_parallel_size: int | None = None,
        max_cache_hit_length: int | None = None,
    ) -> tuple[CachePages, int]:
        """The request's prefix-cache hit: pages per group and the hit length in tokens.

        At most ``num_tokens - 1`` tokens hit (one is always computed), and at most
        ``max_cache_hit_length`` when given (vLLM's cap, e.g. to stop before a point a KV
        connector or an injection must start from). No reference count changes (the hit is taken
        by `allocate_slots`). Skipped (no hit, no statistics) when caching is off or the request
        wants prompt logprobs.
        """
        req = _request(request)
        rec = self.coordinator.records.get(req.request_id)  # the snapshot
        step = self._checked_lookup(req, rec, dp_shard_hint, data_parallel_size, max_cache_hit_length)
        hits, length = self.coordinator.lookup(step)
        self._adopt_dp(step.dp)
        if step.looked_up:
            self.prefix_cache_stats.record(req.num_tokens, length)
        return CachePages._of(hits, self.page_pool), length

    def _checked_lookup(self, req: Request, rec: RequestState | None, dp_shard_hint: object,
                        data_parallel_size: object, max_cache_hit_length: object) -> LookupStep:
        """The check stage of `get_computed_pages`: every argument checked against the record
        ``rec`` and the keys the request's list lacks computed. Pure."""
        request_id, status = req.request_id, req.status
        if status > LAST_UNFINISHED:
            raise InvalidArgumentError(f"request {request_id!r} is finished")
        cap = None if max_cache_hit_length is None else _int(max_cache_hit_length, "max_cache_hit_length", 0)
        shard, dp = self._shard_of(rec, dp_shard_hint, data_parallel_size)
        stale = self._stale_keys(req, rec)
        looked_up = self.enable_caching and not req.prompt_logprobs
        num_tokens = req.num_tokens
        new_keys = None
        if looked_up and self._key_page_size is not None:
            new_keys = self._new_keys(req, None if stale or rec is None else rec.keys, num_tokens)
        max_length = num_tokens - 1 if cap is None else min(num_tokens - 1, cap)
        return LookupStep(req, request_id, new_keys, stale, looked_up, max_length, shard, dp)

    # ---- allocation -------------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_pages: CachePages | None = None,
        num_lookahead_tokens: int = 0,
        delay_cache_pages: bool = False,
        *,
        dp_shard_hint: int | None = None,
        data_parallel_size: int | None = None,
        num_external_computed_tokens: int = 0,
    ) -> CachePages | None:
        """Make room for ``num_new_tokens`` tokens (after ``num_new_computed_tokens`` hit tokens
        given as ``new_computed_pages``), plus ``num_lookahead_tokens`` speculative slots.

        ``num_external_computed_tokens`` (vLLM's KV-connector tokens) follow the local hits: they
        get pages like new tokens but are not hits (no cached page is taken for them) and need
        no compute; ``num_new_tokens`` may then be 0 (an allocation only for an asynchronous
        load, with ``delay_cache_pages=True`` and `cache_pages` once loaded). Not supported with
        a Mamba align group (nor by vLLM).

        All or nothing (INV-ATOMIC): returns the new pages per group, or None having changed
        nothing when they do not fit. Lookahead slots beyond ``max_model_len`` are dropped;
        real tokens beyond it raise. Unless caching is off or ``delay_cache_pages``, full pages
        up to the computed tokens are then registered in the prefix cache. With one cache group,
        a call that takes no new page returns the manager's one shared result (its group is
        empty and cannot be changed).
        """
        if (num_new_computed_tokens is _ZERO and new_computed_pages is None and num_lookahead_tokens is _ZERO
                and delay_cache_pages is False and dp_shard_hint is None and data_parallel_size is None
                and num_external_computed_tokens is _ZERO and type(num_new_tokens) is int and num_new_tokens > 0
                and type(request) is Request):  # a plain decode step (separate tests: a chained `is` costs more)
            checked = self._fast.step(request, num_new_tokens)  # the check and plan stages, for this shape
            if checked is True:
                return self._no_new_page
            if checked is not False:
                held, computed, num_tokens, cache_keys, cache_tokens, new_pages = checked
                if new_pages is None:
                    return None
                new = self.coordinator.extend(held, new_pages, None, None, num_tokens, cache_keys, cache_tokens,
                                              computed)
                return self._no_new_page if not new[0] else CachePages._of(new, self.page_pool)
        req = _request(request)
        rec = self.coordinator.records.get(req.request_id)  # the snapshot
        step = self._checked_allocation(req, rec, num_new_tokens, num_new_computed_tokens, new_computed_pages,
                                        num_lookahead_tokens, delay_cache_pages, dp_shard_hint, data_parallel_size,
                                        num_external_computed_tokens)
        return self._allocated(step)

    def _allocated(self, step: AllocationStep) -> CachePages | None:
        """The result of a checked allocation: the coordinator plans and applies it (None: it did
        not fit, nothing changed); a manager built without a DP size then adopts the call's."""
        new = self.coordinator.allocate(step)
        if new is None:
            return None
        if step.dp is not None:
            self._adopt_dp(step.dp)
        if self._no_new_page is not None and not new[0]:
            return self._no_new_page
        return CachePages._of(new, self.page_pool)

    def _checked_allocation(
        self, req: Request, rec: RequestState | None, num_new_tokens: object, num_new_computed_tokens: object,
        new_computed_pages: object, num_lookahead_tokens: object, delay_cache_pages: object, dp_shard_hint: object,
        data_parallel_size: object, num_external_computed_tokens: object,
    ) -> AllocationStep:
        """The check stage of `allocate_slots`: every argument checked against the record ``rec``
        (the snapshot) and the keys its caching needs computed. Pure."""
        request_id, status, computed = req.request_id, req.status, req.num_computed_tokens
        external = _int(num_external_computed_tokens, "num_external_computed_tokens", 0)
        if external and self._mamba_align:
            raise InvalidArgumentError("external computed tokens are not supported with Mamba align groups")
        num_new = _int(num_new_tokens, "num_new_tokens", 0 if external else 1)
        num_hit = _int(num_new_computed_tokens, "num_new_computed_tokens", 0)
        lookahead = _int(num_lookahead_tokens, "num_lookahead_tokens", 0)
        delay = _flag(delay_cache_pages, "delay_cache_pages")
        if status > LAST_UNFINISHED:
            raise InvalidArgumentError(f"request {request_id!r} is finished")
        held = rec if type(rec) is HeldState else None
        num_tokens = computed + num_hit + external + num_new
        num_slots = self._checked_slots(request_id, computed, held, num_tokens, num_new, lookahead)
        stale = self._stale_keys(req, rec)
        shard, dp = self._shard_of(rec, dp_shard_hint, data_parallel_size)
        hits = self._checked_hits(req, rec, new_computed_pages, num_hit, shard, dp, stale)
        if held is not None and self._mamba_align:
            check_states_move_forward(self.coordinator.single_type_managers, held.pages, computed, num_tokens)
        cache_keys, cache_tokens = (None, 0) if delay else self._caching(req, rec, held, num_tokens, stale)
        return AllocationStep(request_id, req, held, computed, num_tokens, num_slots, hits, shard, dp, cache_keys,
                              cache_tokens, stale)

    def _checked_slots(self, request_id: str, computed: int, held: HeldState | None, num_tokens: int,
                       num_new_tokens: int, num_lookahead_tokens: int) -> int:
        """The slots to cover: ``num_tokens`` (which must fit ``max_model_len``) plus the
        lookahead, capped at ``max_model_len``. A request holding nothing must have no
        computed tokens (its KV is gone)."""
        max_model_len = self.max_model_len
        if num_tokens > max_model_len:
            raise InvalidArgumentError(
                f"request {request_id!r}: {describe(num_tokens - num_new_tokens)} computed (local and external) + "
                f"{describe(num_new_tokens)} new tokens exceed max_model_len {max_model_len}")
        if computed and self.kv_cache_groups and held is None:
            raise InvalidArgumentError(
                f"request {request_id!r} holds no pages but has num_computed_tokens="
                f"{computed}: its KV is gone (reset num_computed_tokens to 0 on preemption)")
        return min(num_tokens + num_lookahead_tokens, max_model_len)

    def _caching(self, req: Request, rec: RequestState | None, held: HeldState | None, num_tokens: int,
                 stale: bool) -> tuple[list[PageKey] | None, int]:
        """What an allocation to ``num_tokens`` tokens caches: the keys it needs and the computed
        tokens whose full pages it registers, when those reach the record's next caching point
        (`HeldState.cache_at`: before it, no group has a new full page); ``(None, 0)`` otherwise."""
        cache_at = self.coordinator.initial_cache_at if held is None else held.cache_at
        if num_tokens < cache_at or not self.kv_cache_groups:
            return None, 0
        known = len(req.token_array)
        cached = num_tokens if num_tokens <= known else known  # (lookahead slots hold no computed token)
        if cached < cache_at:
            return None, 0
        return self._new_keys(req, None if stale or rec is None else rec.keys, cached), cached

    # ---- the batched step -------------------------------------------------------------------

    def allocate_slots_batch(
        self,
        requests: Sequence[Request],
        num_new_tokens: int | Sequence[int],
        num_lookahead_tokens: int = 0,
        delay_cache_pages: bool = False,
        *,
        data_parallel_size: int | None = None,
    ) -> list[CachePages | None]:
        """One step for many requests: ``allocate_slots(request, n, 0, None, num_lookahead_tokens,
        delay_cache_pages, data_parallel_size=data_parallel_size)`` for each pair in order
        (``num_new_tokens``: one count per request, or one int for all).

        Returns one result per request: its new pages per group, or None when they did not fit,
        having changed nothing for it (INV-ATOMIC per request; the later requests still run, so
        a smaller one may fit after a larger one did not). Every argument is checked and every
        content key computed before anything changes: a bad element raises, as does a failing
        hash function, and the whole batch changes nothing. Request ids must be distinct. No
        hits and no DP hint: a request holding no pages gets them from the whole pool (admit new
        requests with a lookup and a single `allocate_slots`).
        """
        fast = None
        if num_lookahead_tokens is _ZERO and delay_cache_pages is False and data_parallel_size is None:
            fast = self._fast.batch_steps(requests, num_new_tokens)  # None: not a plain batch
        if fast is None:
            reqs, counts = self._checked_batch(requests, num_new_tokens)
            fast = [(i, None) for i in range(len(reqs))]
        else:  # a plain batch (`DecodeFastPaths.batch_steps` checked its form): only its uncovered positions run
            reqs = requests
            counts = num_new_tokens if isinstance(num_new_tokens, list) else [num_new_tokens] * len(reqs)
        steps = [(i, step or self._checked_allocation(
                     reqs[i], self.coordinator.records.get(reqs[i].request_id), counts[i], 0, None,
                     num_lookahead_tokens, delay_cache_pages, None, data_parallel_size, 0))
                 for i, step in fast]
        # every element is checked and every key computed: from here on the state changes
        results: list[CachePages | None] = [self._no_new_page] * len(reqs)
        log = self.page_pool.event_log
        # with KV events, each element is one recorded call, as the single call it stands for
        apply = self._allocated_element if log is None else log.recording(self._allocated_element, self._describer)
        for i, step in steps:
            results[i] = apply(reqs[i], step)
        return results

    def _allocated_element(self, request: Request, step: AllocationStep) -> CachePages | None:
        """`_allocated` for one element of a batch (``request``: the element, for KV events)."""
        return self._allocated(step)

    def _checked_batch(self, requests: object, num_new_tokens: object) -> tuple[Sequence[Request], Sequence[object]]:
        """The batch's requests and one count per request (each count is checked with its
        element); distinct ids make each element's check independent of the elements before it,
        as an allocation changes only its own request's record. Pure."""
        if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
            raise InvalidArgumentError(f"requests must be a sequence of verikv.Request, got {describe(requests)}")
        reqs = [_request(r) for r in requests]
        if isinstance(num_new_tokens, Sequence) and not isinstance(num_new_tokens, (str, bytes)):
            counts: Sequence[object] = num_new_tokens
            if len(counts) != len(reqs):
                raise InvalidArgumentError(f"{len(reqs)} requests but {len(counts)} token counts")
        else:
            counts = [num_new_tokens] * len(reqs)
        if len({req.request_id for req in reqs}) != len(reqs):
            raise InvalidArgumentError("a request appears twice in the batch (one step schedules a request once)")
        return reqs, counts

    # ---- checks shared by the calls ---------------------------------------------------------

    def _shard_of(self, rec: RequestState | None, dp_shard_hint: object,
                  data_parallel_size: object) -> tuple[int | None, int | None]:
        """(shard, dp) for a call: the request's remembered shard while it holds pages, else
        ``dp_shard_hint % dp`` when the call's DP is active (``data_parallel_size > 1`` divides
        ``num_pages``; it must then equal the construction value), else (None, None).
        The arguments are validated in every case, before any change."""
        held_shard = rec.shard if type(rec) is HeldState else None
        if dp_shard_hint is None and data_parallel_size is None:  # the common call: no DP arguments
            return held_shard, (None if held_shard is None else self.data_parallel_size)
        hint = None if dp_shard_hint is None else checked_int(dp_shard_hint, "dp_shard_hint")
        shard = None
        dp_size = self.data_parallel_size
        if data_parallel_size is not None:
            dp = checked_int(data_parallel_size, "data_parallel_size", minimum=1)
            if dp > 1 and self.num_pages % dp == 0:
                if dp != dp_size and not self._dp_open:
                    raise InvalidArgumentError(
                        f"data_parallel_size {dp} differs from this manager's {dp_size}")
                dp_size = dp  # (adopted by `_adopt_dp` once the call succeeds)
                if hint is not None:
                    shard = hint % dp
        if type(rec) is HeldState:
            shard = held_shard
        return shard, (None if shard is None else dp_size)

    def _adopt_dp(self, dp: int | None) -> None:
        """A manager built without a DP size takes the one its first successful active DP call used."""
        if dp is not None and self._dp_open:
            self.data_parallel_size = dp
            self._dp_open = False

    def _stale_keys(self, req: Request, rec: RequestState | None) -> bool:
        """True if the id's kept keys were computed for another `Request` object (a reused id) or
        an older identity of this one, so they are dropped before use. Raises if another object
        holds pages under the id: one id cannot name two live requests (so while pages are held,
        their holder owns the id's keys, if any). Pure."""
        if rec is None:
            return False
        if type(rec) is HeldState and rec.request is not req:
            raise InvalidArgumentError(
                f"request id {req.request_id!r} belongs to another Request object that holds pages")
        return rec.keys is not None and (rec.request is not req or rec.keys_version != identity_version(req))

    # ---- keys -------------------------------------------------------------------------------

    def _new_keys(self, req: Request, kept: list[PageKey] | None, num_tokens: int) -> list[PageKey]:
        """The keys a list holding ``kept`` (None: none) lacks to hold one per full key page of
        ``num_tokens`` tokens, computed but not stored, so a failing hash function changes
        nothing. None when no group caches (`CacheCoordinator.keys_needed` is then 0). A step
        that fills one page hashes it alone (`PageHasher.page_key`)."""
        size = self._key_page_size
        if size is None:
            return []
        count = num_tokens // size
        have = 0 if kept is None else len(kept)
        if count <= have:
            return []
        if kept and count == have + 1:
            return [self.hasher.page_key(req, size, have, kept[-1])]
        return self.hasher.hash_request(req, size, have, kept[-1] if kept else None, count)

    # ---- prefix hits given back to allocate_slots ---------------------------------------------

    def _checked_hits(self, req: Request, rec: RequestState | None, pages: object, num_new_computed_tokens: int,
                      shard: int | None, dp: int | None, stale: bool) -> PageIds | None:
        """The hit ids if they are a current lookup result for this request covering exactly
        ``num_new_computed_tokens`` tokens; None when there is no hit at all. The shape is
        always checked; where null placeholders sit and the page-by-page key comparison are
        skipped only for the request's own last lookup result, unchanged, while no key has
        changed since (INV-HIT-SAFE)."""
        if pages is None and num_new_computed_tokens == 0:
            return None
        request_id = req.request_id
        if stale:
            raise InvalidArgumentError(f"these hits were not looked up for this request {request_id!r}")
        ids = self._hit_ids(pages)
        if num_new_computed_tokens == 0 and not any(ids):
            return None
        if not self.enable_caching:
            raise InvalidArgumentError("prefix caching is off: there can be no computed pages")
        if type(rec) is HeldState:
            raise InvalidArgumentError(f"request {request_id!r} already holds pages; hits are only taken first")
        self._check_hit_lengths(ids, num_new_computed_tokens)
        self._check_hit_ids(ids)
        if rec is None or not self._is_last_lookup(rec.last_lookup, ids, num_new_computed_tokens, shard):
            self._check_hit_nulls(ids)  # (the last lookup's own ids hold them where its groups' rules put them)
            self._check_hit_keys(ids, () if rec is None or rec.keys is None else rec.keys)
        if shard is not None:
            self._check_hit_shard(ids, shard, cast(int, dp))
        return ids

    def _is_last_lookup(self, last: LastLookup | None, ids: PageIds, num_new_computed_tokens: int,
                        shard: int | None) -> bool:
        """``ids`` are the record's last lookup's, for the same length and shard, and no key of
        the pool has changed since."""
        return (last is not None and last.key_version == self.page_pool.key_version
                and last.num_tokens == num_new_computed_tokens and last.shard == shard and last.page_ids == ids)

    def _hit_ids(self, pages: object) -> PageIds:
        """The ids of ``new_computed_pages`` (None: no hit), one list per group of this pool."""
        if pages is None:
            return tuple([] for _ in self.kv_cache_groups)
        if not isinstance(pages, CachePages):
            raise InvalidArgumentError(f"new_computed_pages must be CachePages, got {type(pages).__name__}")
        if pages.page_pool is not None and pages.page_pool is not self.page_pool:
            raise ForeignPageError("new_computed_pages belong to another pool")
        if len(pages.page_ids) != len(self.kv_cache_groups):
            raise InvalidArgumentError(
                f"new_computed_pages has {len(pages.page_ids)} groups, the manager has {len(self.kv_cache_groups)}")
        return pages.page_ids

    def _check_hit_lengths(self, ids: PageIds, num_new_computed_tokens: int) -> None:
        """Each group's hit covers exactly ``num_new_computed_tokens`` tokens (INV-HIT-SHAPE)."""
        for gid, group_ids in enumerate(ids):
            ps = self._page_sizes[gid]
            if num_new_computed_tokens % ps or len(group_ids) != num_new_computed_tokens // ps:
                raise InvalidArgumentError(
                    f"group {gid}: {len(group_ids)} hit pages of {ps} tokens do not cover "
                    f"num_new_computed_tokens={num_new_computed_tokens}")

    def _check_hit_ids(self, ids: PageIds) -> None:
        """Every hit id is an exact int (so comparing ids runs no user code). Ranges are checked
        by the pool wherever it reads its tables by id (the keys of `_check_hit_keys`; the last
        lookup's ids are its own), and by the coordinator's plan, before anything changes."""
        for group_ids in ids:
            if countOf(map(type, group_ids), int) != len(group_ids):
                page = next(p for p in group_ids if type(p) is not int)
                raise ForeignPageError(f"page id {describe(page)} is not a page of this pool (0..{self.num_pages - 1})")

    def _check_hit_nulls(self, ids: PageIds) -> None:
        """Null placeholders in a group's hit only lead, and only where the group's rule makes
        them: a windowed group, or a Mamba align group (placeholders, then one state page)."""
        for gid, group_ids in enumerate(ids):
            if NULL_PAGE_ID not in group_ids:
                continue
            first_real = next((j for j, p in enumerate(group_ids) if p != NULL_PAGE_ID), len(group_ids))
            if first_real and not self._windowed_groups[gid]:
                raise InvalidArgumentError(f"group {gid}: null page at hit position 0")
            if NULL_PAGE_ID in group_ids[first_real:]:
                j = group_ids.index(NULL_PAGE_ID, first_real)
                raise InvalidArgumentError(f"group {gid}: null page at hit position {j}")
            if first_real != len(group_ids) - 1 and self.coordinator.single_type_managers[gid].kind == "mamba_align":
                raise InvalidArgumentError(f"group {gid}: a Mamba hit is null placeholders then one state page")

    def _check_hit_keys(self, ids: PageIds, keys: Sequence[PageKey]) -> None:
        """Every real hit page holds this request's key at its position (INV-HIT-SAFE)."""
        for m, group_ids in zip(self.coordinator.single_type_managers, ids):
            j = m.hit_mismatch(group_ids, keys)
            if j is not None:
                raise InvalidArgumentError(
                    f"group {m.kv_cache_group_id}: page {group_ids[j]} at hit position {j} does not hold "
                    f"this request's content (stale or foreign hit)")

    def _check_hit_shard(self, ids: PageIds, shard: int, dp: int) -> None:
        """Every real hit page lies in the request's DP shard."""
        lo, hi = dp_shard_page_bounds(shard, self.num_pages // dp)
        for group_ids in ids:
            for page in group_ids:
                if page != NULL_PAGE_ID and not lo <= page < hi:
                    raise ForeignPageError(f"hit page {page} is outside DP shard {shard}")

    # ---- caching and freeing ------------------------------------------------------------------

    def cache_pages(self, request: Request, num_computed_tokens: int) -> None:
        """Register the request's full pages up to ``num_computed_tokens`` tokens (e.g. after a
        delayed allocation). A lower count than already cached is a no-op; no-op without caching."""
        req = _request(request)
        request_id, computed = req.request_id, req.num_computed_tokens
        rec = self.coordinator.records.get(request_id)  # the snapshot
        if type(rec) is not HeldState:
            raise UnknownRequestError(f"request {request_id!r} holds no pages")
        self._stale_keys(req, rec)  # raises if the pages belong to another object with this id
        n = _int(num_computed_tokens, "num_computed_tokens", 0)
        if n > req.num_tokens:
            raise InvalidArgumentError(
                f"num_computed_tokens {describe(n)} exceeds the request's {req.num_tokens} tokens")
        for gid, (ps, pages) in enumerate(zip(self._page_sizes, rec.pages)):
            if n // ps > len(pages):
                raise InvalidArgumentError(
                    f"group {gid}: {n} tokens span {n // ps} pages, the request holds {len(pages)}")
        if self.enable_caching:
            self.coordinator.cache(rec, self._new_keys(req, rec.keys, n), n, computed)

    def free(self, request: Request) -> None:
        """Release all the request's pages (each group last page first). Its keys are kept for
        a resumption (`free_page_hashes` drops them). No-op for a request without pages."""
        self.coordinator.free(_request(request).request_id)

    def free_page_hashes(self, request: Request) -> None:
        """Forget the request's content keys (on finish). No-op if it has none."""
        self.coordinator.drop_keys(_request(request).request_id)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached key, only when no page is held (returns False and changes nothing
        otherwise). Request key lists are kept: they describe content, not pages."""
        done = self.page_pool.reset_prefix_cache()
        if done:
            self.prefix_cache_stats.reset = True
        return done

    # ---- queries ----------------------------------------------------------------------------

    def get_num_common_prefix_pages(self, request: Request | str, num_running_requests: int | None = None
                                    ) -> list[int]:
        """Per group, the leading pages held by at least ``num_running_requests`` requests
        (cascade attention; 0 for windowed and Mamba groups).

        eSurge's shape: a RUNNING `Request` and the number of running requests. vLLM's shape:
        ``get_num_common_prefix_pages(running_request_id)``, a request id (str) and no count:
        the leading pages every request that holds pages shares (their reference count equals
        the number of such requests).
        """
        if isinstance(request, str):
            request_id = request
        else:
            req = _request(request)
            request_id = req.request_id
            if self.coordinator.holding(request_id) is not None and req.status is not RequestStatus.RUNNING:
                raise InvalidArgumentError(f"request {request_id!r} is {req.status.name}, not RUNNING")
        if num_running_requests is None:
            n = len(self.request_ids())
        else:
            n = _int(num_running_requests, "num_running_requests", 1)
        if self.coordinator.holding(request_id) is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return self.coordinator.get_num_common_prefix_pages(request_id, n)

    def get_page_ids(self, request_id: str) -> tuple[list[int], ...]:
        """The request's page ids per group (null placeholders as 0); copies."""
        pages = self.coordinator.get_pages(request_id) if isinstance(request_id, str) else None
        if pages is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return pages

    def create_empty_page_list(self) -> CachePages:
        """`CachePages` with one empty list per group."""
        return CachePages._of(tuple([] for _ in self.kv_cache_groups), self.page_pool)

    def request_ids(self) -> list[str]:
        """Ids of the requests that hold pages."""
        return [rid for rid, rec in self.coordinator.records.items() if type(rec) is HeldState]

    def num_cached_pages(self, request_id: str) -> list[int]:
        """Per group, how many leading pages of the request are registered in the cache."""
        rec = self.coordinator.holding(request_id)
        if rec is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return list(rec.num_cached)

    def group_layouts(self) -> list[tuple[str, int, int]]:
        """Per group ``(kind, page_size, span)``: kind "full", "sliding", "chunked", "mamba" or
        "mamba_align", span the window or chunk size (0 otherwise)."""
        return [m.layout for m in self.coordinator.single_type_managers]

    def page_hashes_of(self, request_id: str) -> tuple[PageKey, ...]:
        """The request's content keys so far (at the smallest page size); empty if none."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        rec = self.coordinator.records.get(request_id)
        return () if rec is None or rec.keys is None else tuple(rec.keys)

    def hashed_request_ids(self) -> list[str]:
        """Ids of the requests whose content keys are kept."""
        return [rid for rid, rec in self.coordinator.records.items() if rec.keys is not None]

    def request_shard(self, request_id: str) -> int | None:
        """The DP shard of a request that holds pages (None: the whole pool)."""
        held = self.coordinator.holding(request_id)
        if held is None:
            raise UnknownRequestError(f"request {describe(request_id)} holds no pages")
        return held.shard
