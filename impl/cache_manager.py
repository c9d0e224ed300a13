"""`CacheManager`: the scheduler-facing page manager (eSurge's API), and `CachePages`.

The manager validates every argument, translates eSurge's API, computes each request's content
keys (once per full page, with its own `PageHasher`) and delegates page bookkeeping to a
coordinator (`verikv.coordinators`), which owns the one record per request (`RequestState`):
the manager keeps no per-request state of its own. Semantics are eSurge's (reference §1.6) with the
departures of docs/differences.md; the refinements both the spec and this code follow are in
docs/semantics.md. A raised error always means the call changed nothing.

Read-only introspection used by the abstraction function and the conformance harness:
``num_pages``, ``page_pool``, ``kv_cache_groups``, ``max_model_len``, ``enable_caching``,
``use_eagle``, ``data_parallel_size``, `group_layouts`, `request_ids`, `get_page_ids`,
`num_cached_pages`, `request_shard`, `page_hashes_of`, `hashed_request_ids` (the protocol of
`verikv.spec.abstraction`; none changes state).
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Sequence
from operator import countOf
from typing import Any, ClassVar, Literal, overload

from verikv.cache_specs import CacheGroupsConfig, CacheGroupSpec
from verikv.coordinators import CacheCoordinator, PageIds, RequestState, get_kv_cache_coordinator
from verikv.dp_sharding import checked_int, dp_shard_page_bounds
from verikv.errors import (
    ForeignPageError,
    InvalidArgumentError,
    UnknownRequestError,
    describe,
)
from verikv.events import Describer, KVEvent, PrefixCacheStats, StoreContext, describe_run
from verikv.free_queue import CachePage
from verikv.hashing import PageHasher, PageKey, _plain
from verikv.page_pool import PagePool
from verikv.request import Request, RequestStatus
from verikv.single_type_managers import NULL_PAGE


class CachePages:
    """Pages per cache group, as ids; ``.pages`` gives eSurge's `CachePage` views.

    Returned by `CacheManager.get_computed_pages` (prefix hits) and
    `CacheManager.allocate_slots` (the new pages); hits go back into ``allocate_slots``.
    ``page_ids`` holds one id sequence per group: lists, except in the manager's shared
    "no new page" result of a decode step, whose groups are empty tuples (as vLLM's
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
        return [[p for p in ids if p != NULL_PAGE and key_of(p) is None] for ids in self.page_ids]

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

    __hash__: ClassVar[None] = None  # type: ignore[assignment]  # holds mutable lists

    def __repr__(self) -> str:
        return f"CachePages({self.get_page_ids()!r})"


class _NoNewPages(CachePages):
    """The decode fast path's result, shared by every call: one group, no new page. Its
    group is an empty tuple, so it cannot be changed through one result and seen in another."""

    __slots__ = ()

    def get_page_ids(self, allow_none: bool = False, *, group_ids: Sequence[int] | None = None) -> Any:
        """``([],)``: a fresh empty list (None when ``allow_none``). (Callers see `CachePages`'
        overloaded signature: this shortcut of its common call returns exactly what it does.)"""
        if allow_none is False and group_ids is None:
            return ([],)
        return super().get_page_ids(allow_none, group_ids=group_ids)


_PREEMPTED = RequestStatus.PREEMPTED
#: what the decode test reads for an id without a record: it describes no request
_NO_RECORD = RequestState(None)
_ZERO = 0  # `x is _ZERO`: x is the plain int 0 (a fast-path guard; anything else takes the checked path)


def _int(value: object, name: str, minimum: int) -> int:
    """Fast path of `checked_int` for plain ints (the hot path passes plain ints)."""
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
        if not isinstance(enable_caching, bool) or not isinstance(use_eagle, bool):
            raise InvalidArgumentError("enable_caching and use_eagle must be bools")
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
        self.use_eagle: bool = use_eagle
        #: whether sliding-window pages that can never serve a hit are left uncached
        self.skip_unreachable_sliding_pages: bool = skip_unreachable_sliding_pages
        #: "drop-once" or "vllm" (see the class docstring)
        self.eagle_rule: str = coordinator.eagle_rule
        #: eSurge's attribute: the first group's page size when caching, else None
        self.page_size: int | None = self.kv_cache_groups[0].kv_cache_spec.page_size if self.enable_caching else None
        self._caching_key_size = coordinator.key_page_size is not None  # False: only Mamba groups, "none" mode
        #: "none" or "align" (see the class docstring; "none" whenever caching is off)
        self.mamba_cache_mode: str = coordinator.mamba_cache_mode
        #: a Mamba align group keys the state of the request's computed count, which moves
        #: without new full pages: caching is then due at every call (`_cache`)
        self._mamba_align = bool(coordinator._mamba_align)
        self._key_page_size = coordinator.key_page_size or 1
        #: whether a decode step's one new key may come from the hasher's key of one full page
        #: from its parent's key (`PageHasher._page_key`, `hash_request`'s loop body, with no
        #: extra keys): cheaper than a `hash_request` call for that page (its set-up is per
        #: call). The page's bytes are the token array's own slice, so only on little-endian
        #: hosts (`hashing._page_bytes`)
        self._one_page_keys = sys.byteorder == "little"
        self._page_sizes = tuple(g.kv_cache_spec.page_size for g in self.kv_cache_groups)
        self._windowed_groups = tuple(m.frees_skipped_pages for m in coordinator.single_type_managers)
        #: the decode step's result when it needs no new page: shared and immutable
        self._no_new_page = _NoNewPages._of(((),), self.page_pool)  # type: ignore[arg-type]  # immutable groups
        #: DP size the shards are cut for (1: no DP); calls may only ask for this size
        self.data_parallel_size: int = dp_size
        #: constructed without a DP size: the first call whose DP is active fixes it (eSurge's
        #: scheduler passes the size with every call)
        self._dp_open = data_parallel_size is None
        self.prefix_cache_stats: PrefixCacheStats = PrefixCacheStats()
        log = self.page_pool.event_log
        if log is not None:  # KV events: a call's page reports become its events (docs/events.md)
            self.allocate_slots = log.recording(self.allocate_slots, self._describer)  # type: ignore[method-assign]
            self.cache_pages = log.recording(self.cache_pages, self._describer)  # type: ignore[method-assign]

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
            rid = request.request_id
            page_size = self._page_sizes[gid]
            rec = self.coordinator.records[rid]  # it holds the pages it just cached, and their keys
            first = rec.pages[gid].index(page_ids[0])  # type: ignore[index]
            stride = page_size // self._key_page_size
            parent = rec.keys[first * stride - 1] if first else None  # type: ignore[index]
            return describe_run(request, self.kv_cache_groups[gid].kv_cache_spec, page_size, first, len(page_ids),
                                parent, self.hasher.page_extra_keys)
        return describe

    def take_events(self) -> list[KVEvent]:
        """KV events (stored, removed, all cleared) since the last call; empty unless enabled."""
        return self.page_pool.take_events()

    # ---- DP -------------------------------------------------------------------------------

    def _shard_of(self, request_id: str, dp_shard_hint: object,
                  data_parallel_size: object) -> tuple[int | None, int | None]:
        """(shard, dp) for a call: the request's remembered shard while it holds pages, else
        ``dp_shard_hint % dp`` when the call's DP is active (``data_parallel_size > 1`` divides
        ``num_pages``; it must then equal the construction value), else (None, None).
        The arguments are validated in every case, before any change."""
        held = self.coordinator.holding(request_id)
        if dp_shard_hint is None and data_parallel_size is None:  # the common call: no DP arguments
            shard = None if held is None else held.shard
            return shard, (None if shard is None else self.data_parallel_size)
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
        if held is not None:
            shard = held.shard
        return shard, (None if shard is None else dp_size)

    def _adopt_dp(self, dp: int | None) -> None:
        """A manager built without a DP size takes the one its first active DP call used."""
        if dp is not None and self._dp_open:
            self.data_parallel_size = dp
            self._dp_open = False

    # ---- request identity (the record is the coordinator's: `RequestState`) ------------------

    def _stale_keys(self, req: Request) -> bool:
        """True if the id's key list was computed for another `Request` object (a reused id),
        so it must be dropped before use. Raises if another object holds pages under the id:
        one id cannot name two live requests (so while pages are held, their holder owns the
        id's keys, if any). Pure."""
        rec = self.coordinator.records.get(req._request_id)
        if rec is None:
            return False
        if rec.pages is not None and rec.request is not req:
            raise InvalidArgumentError(
                f"request id {req._request_id!r} belongs to another Request object that holds pages")
        return rec.keys is not None and (rec.request is not req or rec.keys_version != req._identity_version)

    def _drop_keys(self, request_id: str) -> None:
        """Forget the id's keys and last lookup (the record goes if it holds no pages)."""
        rec = self.coordinator.records.get(request_id)
        if rec is not None:
            rec.keys = rec.lookup = None
            self.coordinator.forget_if_idle(request_id)

    # ---- keys -------------------------------------------------------------------------------

    def _pending_keys(self, req: Request, count: int | None, stale: bool = False) -> list[PageKey]:
        """The keys the request's list lacks to hold ``count`` keys (None: one per full key
        page), computed but not stored, so a failing hash function changes nothing. ``stale``:
        the kept list is not this object's, start afresh."""
        rec = None if stale else self.coordinator.records.get(req._request_id)
        keys = None if rec is None else rec.keys
        have = 0 if keys is None else len(keys)
        if count is None:
            count = len(req._tokens) // self._key_page_size
        if count <= have:
            return []
        return self.hasher.hash_request(  # (request, page_size, start, parent, stop)
            req, self._key_page_size, have, keys[-1] if keys else None, count)

    def _step_keys(self, req: Request, rec: RequestState | None, num_tokens: int, stale: bool) -> list[PageKey]:
        """`_caching_keys` for a step of the request whose record (if any) is ``rec``: when the
        one key due is that of the page after the kept keys and the request has no extra keys
        (no salt, LoRA or multimodal items), one `PageHasher._page_key` call on that page's bytes
        (`_one_page_keys`)."""
        kept = None if stale or rec is None else rec.keys
        size = self._key_page_size
        # caching needs one key per full key page (the key page size is that of a caching group:
        # `CacheCoordinator.keys_needed` is ``num_tokens // size`` whenever a group caches)
        if (kept and self._one_page_keys and self._caching_key_size and num_tokens // size == len(kept) + 1
                and _plain(req)):
            start = len(kept) * size
            return [self.hasher._page_key(kept[-1], req._tokens[start:start + size].tobytes(), None, b"")]
        return self._caching_keys(req, num_tokens, stale)

    def _store_keys(self, req: Request, new: list[PageKey]) -> tuple[RequestState, list[PageKey]]:
        """Append keys from `_pending_keys` to the request's list (the record and the list are
        created on first use); returns the record and its list."""
        rec = self.coordinator.record_for(req._request_id, req)
        return rec, self._store_in(rec, req, new)

    @staticmethod
    def _store_in(rec: RequestState, req: Request, new: list[PageKey]) -> list[PageKey]:
        """`_store_keys` for the request's record ``rec``: returns its list."""
        keys = rec.keys
        if keys is None:
            keys = rec.keys = []
            rec.request, rec.keys_version = req, req._identity_version
        keys += new
        return keys

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
        req = request if type(request) is Request else _request(request)
        if req._status > _PREEMPTED:
            raise InvalidArgumentError(f"request {req.request_id!r} is finished")
        if max_cache_hit_length is not None:
            max_cache_hit_length = _int(max_cache_hit_length, "max_cache_hit_length", 0)
        shard, dp = self._shard_of(req._request_id, dp_shard_hint, data_parallel_size)
        stale = self._stale_keys(req)
        looked_up = self.enable_caching and not req._prompt_logprobs
        new = self._pending_keys(req, None, stale) if looked_up and self._caching_key_size else []
        # every check and every key is done: now the state changes
        self._adopt_dp(dp)
        if stale:
            self._drop_keys(req._request_id)
        if not looked_up:
            return self.create_empty_page_list(), 0
        rec, keys = self._store_keys(req, new) if self._caching_key_size else (None, [])
        num_tokens = len(req._tokens)
        cap = num_tokens - 1 if max_cache_hit_length is None else min(num_tokens - 1, max_cache_hit_length)
        hits, length = self.coordinator.find_longest_cache_hit(keys, cap, shard, dp)
        self.prefix_cache_stats.record(num_tokens, length)
        result = CachePages._of(hits, self.page_pool)
        if rec is not None:  # (no record: no group caches, so there is never a hit to check)
            rec.lookup = (result, self.page_pool.key_version, length, shard, tuple(map(list, hits)))
        return result, length

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
        up to the computed tokens are then registered in the prefix cache.
        """
        if (new_computed_pages is None and dp_shard_hint is None and data_parallel_size is None
                and num_new_computed_tokens is _ZERO and num_lookahead_tokens is _ZERO
                and num_external_computed_tokens is _ZERO and delay_cache_pages is False
                and type(request) is Request and type(num_new_tokens) is int and num_new_tokens > 0):
            # A decode step: every argument in its plain form (separate tests: a chained `is` costs
            # more). The coordinator decides it when nothing is to cache; else the keys come first
            # (`_decode_step_and_cache`)
            new = self.coordinator.decode_step(request, num_new_tokens)
            if new is not None:
                return CachePages._of((new,), self.page_pool) if new else self._no_new_page
            result = self._decode_step_and_cache(request, num_new_tokens)
            if result is not None:
                return result
        return self._allocate_slots(request, num_new_tokens, num_new_computed_tokens, new_computed_pages,
                                    num_lookahead_tokens, delay_cache_pages, dp_shard_hint, data_parallel_size,
                                    num_external_computed_tokens)

    def _decode_step_and_cache(self, req: Request, num_new_tokens: int) -> CachePages | None:
        """A decode step (plain arguments) of an object that holds pages and fills a key page:
        the keys first (nothing changes if hashing fails), then the coordinator's step
        (`CacheCoordinator.extend_held`), then caching. None (nothing changed) when caching is
        not due or the step is not one the coordinator takes alone: the general path decides."""
        rec = self.coordinator.records.get(req._request_id, _NO_RECORD)
        if rec.request is not req or rec.pages is None or req._status > _PREEMPTED:
            return None
        num_tokens = req._num_computed_tokens + num_new_tokens
        cached = min(num_tokens, len(req._tokens))
        if cached < rec.cache_at:
            return None
        new_keys = self._step_keys(req, rec, cached, False)
        new = self.coordinator.extend_held(rec, num_tokens)
        if new is None:
            return None
        self._cache(rec, req, cached, new_keys)
        return CachePages._of((new,), self.page_pool) if new else self._no_new_page

    def _allocate_slots(
        self, request: object, num_new_tokens: object, num_new_computed_tokens: object, new_computed_pages: object,
        num_lookahead_tokens: object, delay_cache_pages: object, dp_shard_hint: object, data_parallel_size: object,
        num_external_computed_tokens: object = 0,
    ) -> CachePages | None:
        """`allocate_slots` in general: validate every argument, allocate, cache."""
        req = request if type(request) is Request else _request(request)
        external = _int(num_external_computed_tokens, "num_external_computed_tokens", 0)
        if external and self._mamba_align:
            raise InvalidArgumentError("external computed tokens are not supported with Mamba align groups")
        num_new_tokens = _int(num_new_tokens, "num_new_tokens", 0 if external else 1)
        num_new_computed_tokens = _int(num_new_computed_tokens, "num_new_computed_tokens", 0)
        num_lookahead_tokens = _int(num_lookahead_tokens, "num_lookahead_tokens", 0)
        if delay_cache_pages is not False and delay_cache_pages is not True:
            raise InvalidArgumentError(f"delay_cache_pages must be a bool, got {describe(delay_cache_pages)}")
        if req._status > _PREEMPTED:
            raise InvalidArgumentError(f"request {req._request_id!r} is finished")
        num_tokens = req._num_computed_tokens + num_new_computed_tokens + external + num_new_tokens
        held = self.coordinator.holding(req._request_id)
        num_slots = self._checked_slots(req, held, num_tokens, num_new_tokens, num_lookahead_tokens)
        stale = self._stale_keys(req)
        # Keys for the caching step are computed before anything changes (INV-ATOMIC).
        cached = min(num_tokens, len(req._tokens))
        cache_at = held.cache_at if held is not None else self.coordinator.initial_cache_at
        new_keys = (self._caching_keys(req, cached, stale)
                    if not delay_cache_pages and self.kv_cache_groups and cached >= cache_at else None)
        new = self._allocate(req, held, num_slots, num_new_computed_tokens, new_computed_pages,
                             dp_shard_hint, data_parallel_size, stale, num_tokens)
        if new is None:
            return None
        if new_keys is not None:
            self._cache(self.coordinator.records[req._request_id], req, cached, new_keys)
        return CachePages._of(new, self.page_pool)

    def _checked_slots(self, req: Request, held: RequestState | None, num_tokens: int, num_new_tokens: int,
                       num_lookahead_tokens: int) -> int:
        """The slots to cover: ``num_tokens`` (which must fit ``max_model_len``) plus the
        lookahead, capped at ``max_model_len``. A request holding nothing must have no
        computed tokens (its KV is gone)."""
        max_model_len = self.max_model_len
        request_id = req._request_id
        if num_tokens > max_model_len:
            raise InvalidArgumentError(
                f"request {request_id!r}: {describe(num_tokens - num_new_tokens)} computed (local and external) + "
                f"{describe(num_new_tokens)} new tokens exceed max_model_len {max_model_len}")
        if req._num_computed_tokens and self.kv_cache_groups and held is None:
            raise InvalidArgumentError(
                f"request {request_id!r} holds no pages but has num_computed_tokens="
                f"{req._num_computed_tokens}: its KV is gone (reset num_computed_tokens to 0 on preemption)")
        return min(num_tokens + num_lookahead_tokens, max_model_len)

    def _allocate(
        self, req: Request, held: RequestState | None, num_slots: int, num_new_computed_tokens: int,
        new_computed_pages: object, dp_shard_hint: object, data_parallel_size: object, stale: bool,
        num_tokens: int | None = None,
    ) -> PageIds | None:
        """The general allocation: resolve the shard, check the hits, let the coordinator plan
        and apply it; None (nothing changed) when it does not fit. ``stale``: the id's kept
        keys belong to another object (`_stale_keys`), dropped once the allocation is made.
        ``num_tokens``: the step's end without lookahead slots (where Mamba states go)."""
        request_id = req._request_id
        shard, dp = self._shard_of(request_id, dp_shard_hint, data_parallel_size)
        hits = None
        if new_computed_pages is not None or num_new_computed_tokens:
            if stale:
                raise InvalidArgumentError(f"these hits were not looked up for this request {request_id!r}")
            hits = self._checked_hits(req, new_computed_pages, num_new_computed_tokens, shard, dp)
        if self._mamba_align:  # Mamba states go to the step's end, lookahead slots excluded
            new = self.coordinator.allocate_slots(request_id, req._num_computed_tokens, num_slots, hits, shard, dp,
                                                  num_state_tokens=num_tokens)
        else:
            new = self.coordinator.allocate_slots(request_id, req._num_computed_tokens, num_slots, hits, shard, dp)
        if new is None:
            return None
        self._adopt_dp(dp)
        if stale:
            self._drop_keys(request_id)
        if held is None and self.kv_cache_groups:  # its first pages: the record now describes req
            rec = self.coordinator.records[request_id]
            rec.request = req
            req._holders += 1
        return new

    # ---- prefix hits given back to allocate_slots ---------------------------------------------

    def _checked_hits(
        self, req: Request, pages: object, num_new_computed_tokens: int, shard: int | None, dp: int | None
    ) -> PageIds | None:
        """The hit ids if they are a current lookup result for this request covering exactly
        ``num_new_computed_tokens`` tokens; None when there is no hit at all. The shape is
        always checked; the page-by-page key comparison is skipped only for the request's own
        last lookup result, unchanged, while no key has changed since (INV-HIT-SAFE)."""
        ids = self._hit_ids(pages)
        if num_new_computed_tokens == 0 and not any(ids):
            return None
        request_id = req._request_id
        if not self.enable_caching:
            raise InvalidArgumentError("prefix caching is off: there can be no computed pages")
        rec = self.coordinator.records.get(request_id)
        if rec is not None and rec.pages is not None:
            raise InvalidArgumentError(f"request {request_id!r} already holds pages; hits are only taken first")
        self._check_hit_lengths(ids, num_new_computed_tokens)
        self._check_hit_ids(ids)
        if rec is None or not self._is_last_lookup(rec, pages, num_new_computed_tokens, shard):
            self._check_hit_nulls(ids)  # (the last lookup's own ids hold them where its groups' rules put them)
            self._check_hit_keys(ids, () if rec is None or rec.keys is None else rec.keys)
        if shard is not None:
            self._check_hit_shard(ids, shard, dp)
        return ids

    def _is_last_lookup(self, rec: RequestState, pages: object, num_new_computed_tokens: int,
                        shard: int | None) -> bool:
        """``pages`` is the record's last lookup result, for the same length and shard, with
        the same ids, and no key of the pool has changed since."""
        last = rec.lookup
        return (last is not None and last[0] is pages and last[1] == self.page_pool.key_version
                and last[2] == num_new_computed_tokens and last[3] == shard
                and last[4] == pages.page_ids)  # type: ignore[attr-defined]  # (it is last[0])

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
        """Null placeholders only lead, in windowed groups (`_check_hit_placeholders`); the ids
        are exact ints (`_check_hit_ids`)."""
        for gid, group_ids in enumerate(ids):
            if NULL_PAGE in group_ids:
                self._check_hit_placeholders(gid, group_ids)

    def _check_hit_placeholders(self, gid: int, group_ids: Sequence[int]) -> None:
        """Null placeholders in a group's hit only lead, and only where the group's rule makes
        them: a windowed group, or a Mamba align group (placeholders, then one state page)."""
        first_real = next((j for j, p in enumerate(group_ids) if p != NULL_PAGE), len(group_ids))
        if first_real and not self._windowed_groups[gid]:
            raise InvalidArgumentError(f"group {gid}: null page at hit position 0")
        if NULL_PAGE in group_ids[first_real:]:
            j = group_ids.index(NULL_PAGE, first_real)
            raise InvalidArgumentError(f"group {gid}: null page at hit position {j}")
        if first_real != len(group_ids) - 1 and self._mamba_align \
                and self.coordinator.single_type_managers[gid].kind == "mamba_align":
            raise InvalidArgumentError(f"group {gid}: a Mamba hit is null placeholders then one state page")

    def _check_hit_keys(self, ids: PageIds, keys: Sequence[PageKey]) -> None:
        """Every real hit page holds this request's key at its position (INV-HIT-SAFE)."""
        for m, group_ids in zip(self.coordinator.single_type_managers, ids):
            j = m.hit_mismatch(group_ids, keys)
            if j is not None:
                raise InvalidArgumentError(
                    f"group {m.kv_cache_group_id}: page {group_ids[j]} at hit position {j} does not hold "
                    f"this request's content (stale or foreign hit)")

    def _check_hit_shard(self, ids: PageIds, shard: int, dp: int | None) -> None:
        """Every real hit page lies in the request's DP shard."""
        lo, hi = dp_shard_page_bounds(shard, self.num_pages // dp)  # type: ignore[operator]
        for group_ids in ids:
            for page in group_ids:
                if page != NULL_PAGE and not lo <= page < hi:
                    raise ForeignPageError(f"hit page {page} is outside DP shard {shard}")

    # ---- caching and freeing ------------------------------------------------------------------

    def _caching_keys(self, req: Request, num_tokens: int, stale: bool = False) -> list[PageKey]:
        """The keys caching up to ``num_tokens`` tokens still needs (computed, not stored): one
        per full key page when a group caches (`CacheCoordinator.keys_needed`: the key page
        size is that of a caching group), else none."""
        return self._pending_keys(req, num_tokens // self._key_page_size if self._caching_key_size else 0, stale)

    def _cache(self, rec: RequestState, req: Request, num_tokens: int, new_keys: list[PageKey]) -> None:
        """Cache the request's full pages up to ``num_tokens`` tokens (its held pages, caching
        on), storing the keys `_caching_keys` computed for it first.

        Then caching is next due at the end of the following key page (`RequestState.cache_at`):
        before that no group has a new full page (every page size is a multiple of the key page
        size), so allocations skip the call.
        """
        keys = self._store_in(rec, req, new_keys)
        if self._mamba_align:  # a state is keyed at the request's computed count: due at every call
            self.coordinator.cache_held(rec, keys, num_tokens, req._num_computed_tokens)
            return
        self.coordinator.cache_held(rec, keys, num_tokens)
        self._cached_up_to(rec, num_tokens)

    def _cached_up_to(self, rec: RequestState, num_tokens: int) -> None:
        """Caching is next due at the end of the key page after ``num_tokens`` tokens, or never
        (``max_model_len + 1``) when that page ends past ``max_model_len``."""
        due = (num_tokens // self._key_page_size + 1) * self._key_page_size
        if due > rec.cache_at:
            rec.cache_at = due if due <= self.max_model_len else self.max_model_len + 1

    def _cache_batch(self, records: list[RequestState], reqs: list[Request], num_tokens: list[int],
                     new_keys: list[list[PageKey]]) -> None:
        """`_cache` for each of distinct records in order, the pages registered together
        (`CacheCoordinator.cache_held_batch`). Only steps `CacheCoordinator.held_steps` took
        come here: one group that never drops pages, so never a Mamba align state."""
        store = self._store_in
        key_lists = [store(rec, req, keys) for rec, req, keys in zip(records, reqs, new_keys)]
        self.coordinator.cache_held_batch(records, key_lists, num_tokens)
        for rec, n in zip(records, num_tokens):
            self._cached_up_to(rec, n)

    def cache_pages(self, request: Request, num_computed_tokens: int) -> None:
        """Register the request's full pages up to ``num_computed_tokens`` tokens (e.g. after a
        delayed allocation). A lower count than already cached is a no-op; no-op without caching."""
        req = _request(request)
        rec = self.coordinator.holding(req.request_id)
        if rec is None:
            raise UnknownRequestError(f"request {req.request_id!r} holds no pages")
        self._stale_keys(req)  # raises if the pages belong to another object with this id
        n = _int(num_computed_tokens, "num_computed_tokens", 0)
        if n > req.num_tokens:
            raise InvalidArgumentError(
                f"num_computed_tokens {describe(n)} exceeds the request's {req.num_tokens} tokens")
        for gid, (ps, pages) in enumerate(zip(self._page_sizes, rec.pages)):  # type: ignore[arg-type]
            if n // ps > len(pages):
                raise InvalidArgumentError(
                    f"group {gid}: {n} tokens span {n // ps} pages, the request holds {len(pages)}")
        if self.enable_caching:
            self._cache(rec, req, n, self._caching_keys(req, n))

    def free(self, request: Request) -> None:
        """Release all the request's pages (each group last page first). Its keys are kept for
        a resumption (`free_page_hashes` drops them). No-op for a request without pages."""
        request_id = _request(request).request_id
        rec = self.coordinator.holding(request_id)
        if rec is not None:
            if rec.request is not None:
                rec.request._holders -= 1
            self.coordinator.free(request_id)

    def free_page_hashes(self, request: Request) -> None:
        """Forget the request's content keys (on finish). No-op if it has none."""
        self._drop_keys(_request(request).request_id)

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
            n = sum(1 for rec in self.coordinator.records.values() if rec.pages is not None)
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
        return [rid for rid, rec in self.coordinator.records.items() if rec.pages is not None]

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

    # ---- the batched decode step ----------------------------------------------------------------

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
        work = None
        if num_lookahead_tokens is _ZERO and delay_cache_pages is False and data_parallel_size is None:
            work = self._decode_work(requests, num_new_tokens)
            done = None if work is None else self._decode_steps(requests, num_new_tokens, work)  # type: ignore[arg-type]
            if done is not None:
                return done
        if work is None:  # not a plain decode step: check every element; each is work
            reqs, counts = self._checked_batch(requests, num_new_tokens, num_lookahead_tokens, delay_cache_pages,
                                               data_parallel_size)
            work = list(range(len(reqs)))
            lookahead = _int(num_lookahead_tokens, "num_lookahead_tokens", 0)
        else:  # (`_decode_work` checked the types and the ids; `_planned_calls` checks the work)
            reqs = requests  # type: ignore[assignment]
            counts = [num_new_tokens] * len(reqs) if type(num_new_tokens) is int else num_new_tokens  # type: ignore[assignment]
            lookahead = 0
        calls = self._planned_calls(reqs, counts, work, lookahead, delay_cache_pages is True, data_parallel_size)
        # every element is checked and every key computed: from here on the state changes
        results: list[CachePages | None] = [self._no_new_page] * len(reqs)
        log = self.page_pool.event_log
        # with KV events, each element is one recorded call, as the single call it stands for
        make = self._make_call if log is None else log.recording(self._make_call, self._describer)
        for i, call in zip(work, calls):
            results[i] = make(call[0], call, data_parallel_size)
        return results

    def _decode_work(self, requests: object, num_new_tokens: object) -> list[int] | None:
        """For a batch in its plain form (a list of `Request`, plain int counts >= 1, distinct
        ids), the positions whose single call may do something or raises (a finished request:
        `CacheCoordinator.decode_work`); every other call returns the shared "no new page"
        result and changes nothing. None when the batch is not in that form (the checked path
        then decides). Pure."""
        if type(requests) is not list or countOf(map(type, requests), Request) != len(requests):
            return None
        n = len(requests)
        counts = num_new_tokens
        if type(counts) is list:
            if len(counts) != n or countOf(map(type, counts), int) != n:
                return None
            if counts and counts.count(counts[0]) == n:  # one count for all: the coordinator's cheaper scan
                counts = counts[0]
        if type(counts) is int:
            if counts < 1:
                return None
        elif type(counts) is not list or (counts and min(counts) < 1):
            return None
        if len({req._request_id for req in requests}) != n:  # (a comprehension: faster than map)
            return None
        return self.coordinator.decode_work(requests, counts)

    def _planned_calls(self, reqs: list[Request], counts: list[int], work: list[int], num_lookahead_tokens: int,
                       delay_cache_pages: bool, data_parallel_size: int | None) -> list[_Call]:
        """What ``allocate_slots(reqs[i], counts[i], 0, None, num_lookahead_tokens,
        delay_cache_pages, data_parallel_size=...)`` will do for each ``i`` of ``work``, each
        checked (status, ids and types are already) and with the content keys its caching
        needs computed. Pure."""
        records, max_model_len, initial_cache_at = self.coordinator.records, self.max_model_len, \
            self.coordinator.initial_cache_at
        caching = not delay_cache_pages and bool(self.kv_cache_groups)
        calls: list[_Call] = []
        for i in work:
            req, n = reqs[i], counts[i]
            rec = records.get(req._request_id)
            num_tokens = req._num_computed_tokens + n
            if (rec is not None and rec.pages is not None and rec.request is req and num_tokens <= max_model_len
                    and req._status <= _PREEMPTED and data_parallel_size is None):  # running, within bounds
                held: RequestState | None = rec
                stale, cache_at = rec.keys is not None and rec.keys_version != req._identity_version, rec.cache_at
            else:
                self._check_extension(req, n, data_parallel_size)
                held = self.coordinator.holding(req._request_id)
                stale = self._stale_keys(req)
                cache_at = initial_cache_at if held is None else held.cache_at
            cached = min(num_tokens, len(req._tokens))
            keys = self._step_keys(req, held, cached, stale) if caching and cached >= cache_at else None
            calls.append((req, held, num_tokens, min(num_tokens + num_lookahead_tokens, max_model_len), cached,
                          keys, stale))
        return calls

    def _make_call(self, request: Request, call: _Call, data_parallel_size: int | None) -> CachePages | None:
        """Apply the planned call of ``request``: the coordinator's decode step when it decides it
        alone (as `allocate_slots` does), else the general allocation; then cache."""
        req, held, num_tokens, num_slots, cached, keys, stale = call
        new = (self.coordinator.extend_held(held, num_tokens)
               if held is not None and num_slots == num_tokens and data_parallel_size is None else None)
        if new is not None:
            result = CachePages._of((new,), self.page_pool) if new else self._no_new_page
        else:
            ids = self._allocate(req, held, num_slots, 0, None, None, data_parallel_size, stale)
            if ids is None:
                return None
            result = CachePages._of(ids, self.page_pool)
        if keys is not None:
            self._cache(self.coordinator.records[req._request_id], req, cached, keys)
        return result

    def _decode_steps(self, reqs: list[Request], counts: int | list[int], work: list[int]
                      ) -> list[CachePages | None] | None:
        """The results of a plain batch whose work positions (`_decode_work`) are all steps the
        coordinator takes alone (`CacheCoordinator.held_steps`): the keys of the pages they fill
        first, in order (a failing hash function raises with nothing changed, as the calls would),
        then their new pages in one pool call (`CacheCoordinator.decode_steps`), then the filled
        pages registered in order (`_cache_batch`). None (nothing changed) otherwise."""
        steps = self.coordinator.held_steps(reqs, counts, work)
        if steps is None:
            return None
        records, num_tokens, needs, due = steps
        due_reqs = [reqs[work[j]] for j in due]
        cached = [min(num_tokens[j], len(req._tokens)) for j, req in zip(due, due_reqs)]  # (caching's end)
        keys = [self._step_keys(req, records[j], n, False) for j, req, n in zip(due, due_reqs, cached)]
        # every key is computed: from here on the state changes
        results: list[CachePages | None] = [self._no_new_page] * len(reqs)
        pool = self.page_pool
        for i, new in zip(work, self.coordinator.decode_steps(records, needs)):
            if new:
                results[i] = CachePages._of((new,), pool)
        if due:
            self._cache_batch([records[j] for j in due], due_reqs, cached, keys)
        return results

    def _checked_batch(
        self, requests: object, num_new_tokens: object, num_lookahead_tokens: object, delay_cache_pages: object,
        data_parallel_size: object,
    ) -> tuple[list[Request], list[int]]:
        """The batch's requests and counts, every element checked as `allocate_slots` would
        check it (pure). Distinct ids make each check independent of the elements before it:
        an allocation changes only its own request's record."""
        if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
            raise InvalidArgumentError(f"requests must be a sequence of verikv.Request, got {describe(requests)}")
        reqs = [_request(r) for r in requests]
        if isinstance(num_new_tokens, Sequence) and not isinstance(num_new_tokens, (str, bytes)):
            counts = [_int(n, "num_new_tokens", 1) for n in num_new_tokens]
            if len(counts) != len(reqs):
                raise InvalidArgumentError(f"{len(reqs)} requests but {len(counts)} token counts")
        else:
            counts = [_int(num_new_tokens, "num_new_tokens", 1)] * len(reqs)
        _int(num_lookahead_tokens, "num_lookahead_tokens", 0)
        if delay_cache_pages is not False and delay_cache_pages is not True:
            raise InvalidArgumentError(f"delay_cache_pages must be a bool, got {describe(delay_cache_pages)}")
        if len({req._request_id for req in reqs}) != len(reqs):
            raise InvalidArgumentError("a request appears twice in the batch (one step schedules a request once)")
        for req, n in zip(reqs, counts):
            self._check_extension(req, n, data_parallel_size)
        return reqs, counts

    def _check_extension(self, req: Request, num_new_tokens: int, data_parallel_size: object) -> None:
        """Raise what ``allocate_slots(req, num_new_tokens, data_parallel_size=...)`` (no hits)
        would raise; pure."""
        if req._status > _PREEMPTED:
            raise InvalidArgumentError(f"request {req._request_id!r} is finished")
        self._checked_slots(req, self.coordinator.holding(req._request_id), req._num_computed_tokens + num_new_tokens,
                            num_new_tokens, 0)
        self._stale_keys(req)  # raises if another Request object holds pages under this id
        self._shard_of(req._request_id, None, data_parallel_size)  # checks the DP size


_Call = tuple[Request, "RequestState | None", int, int, int, "list[PageKey] | None", bool]
"""One planned element of a batch (`CacheManager._planned_calls`): the request, its record
while it holds pages, its token and slot counts, the tokens to cache up to, the keys that
caching needs (None: no caching due) and whether its kept keys are stale."""
