"""`PagePool`: reference counts, the LRU free list and the prefix-cache map of one page pool.

This is the implementation of the pool transitions of `verikv.spec.pool` (same names:
allocate = `get_new_page_ids`, touch = `touch_ids`, free = `free_page_ids`, cache =
`cache_page_id`, lookup = `lookup_id`, `reset_prefix_cache`), plus eSurge's object-level API
as thin wrappers. Every method validates its whole input before changing anything, so a
raised error (from `verikv.errors`) means the pool is unchanged.

Representation (docs/architecture.md): per-page ``ref`` and ``key`` lists
indexed by id, the free list as flat links, and the cached map ``key -> id`` (promoted to an
insertion-ordered ``dict`` of ids when several pages hold equal content). Data-parallel
shards get their own free sub-lists, built by the first allocation from a shard and kept in the
global list's relative order, so allocating from a shard is O(1) per page.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, MutableMapping, MutableSequence, Sequence
from functools import partial
from itertools import chain, islice, takewhile
from operator import countOf, is_not, length_hint, ne
from typing import Any

import numpy as np

from verikv.dp_sharding import checked_int, dp_shard_page_bounds, pages_per_dp_shard
from verikv.errors import (
    CorruptedStateError,
    DoubleFreeError,
    ForeignPageError,
    InvalidArgumentError,
    NullPageError,
    OutOfPagesError,
    PageStateError,
    describe,
)
from verikv.esurge_pool import ESurgePoolMethods
from verikv.events import EventLog, KVEvent, PrefixCacheStats
from verikv.free_queue import (
    MAX_PAGE_ID,
    NULL_PAGE_ID,
    CachePage,
    FreeCachePageQueue,
    IdLinks,
    PageRecords,
    check_key,
    is_view_of,
    page_list,
)

FREE_ORDERS: tuple[str, ...] = ("esurge", "unhashed-first")
#: a touch that revives at least this many free pages (a long prefix hit) unlinks them with NumPy
#: when they are one run of the free list (`PagePool._unlink_revived`)
_BULK_TOUCH = 128
_log = logging.getLogger(__name__)
_log.addHandler(logging.NullHandler())  # a library logs only where the application asks it to
_is_entry = partial(is_not, None)  # a cached-map get that hit (C-level predicate for takewhile)
#: appended to a run's lookups: seen at its end, the run ended with the keys, not at a miss
_RUN_END: tuple[object] = (object(),)


def _zero_held_once(ref: MutableSequence[int] | MutableMapping[int, int], ids: list[int]) -> int:
    """Set to 0 the count of each leading page of ``ids`` held once; returns how many there were
    (the loop stops at a page not held once, or past the pool). The loop keeps no counter: where
    it stopped is read from the list iterator's count of what is left (a counter would be a
    third of the loop's cost)."""
    pages = iter(ids)
    try:
        for pid in pages:
            if ref[pid] != 1:
                return len(ids) - 1 - length_hint(pages)
            ref[pid] = 0
    except IndexError:
        return len(ids) - 1 - length_hint(pages)
    return len(ids)


def _drop_shared(ref: MutableSequence[int] | MutableMapping[int, int], ids: list[int]) -> int:
    """Drop one from the count of each leading page of ``ids`` held at least twice; returns how
    many there were (as `_zero_held_once`)."""
    pages = iter(ids)
    try:
        for pid in pages:
            held = ref[pid]
            if held < 2:
                return len(ids) - 1 - length_hint(pages)
            ref[pid] = held - 1
    except IndexError:
        return len(ids) - 1 - length_hint(pages)
    return len(ids)


class PagePool(ESurgePoolMethods):
    """A pool of ``num_pages`` pages; page 0 is the null page and is never handed out.

    ``free_order``: ``"esurge"`` puts every freed page at the tail of the free list;
    ``"unhashed-first"`` puts freed pages without a content key at the head (they can never
    be a cache hit, so they are reused first). ``enable_kv_events`` turns on event recording
    (drain with `take_events`).
    """

    def __init__(self, num_pages: int, enable_caching: bool = True, *, free_order: str = "esurge",
                 enable_kv_events: bool = False) -> None:
        n = checked_int(num_pages, "num_pages", minimum=1, maximum=MAX_PAGE_ID + 1)
        if not isinstance(enable_caching, bool) or not isinstance(enable_kv_events, bool):
            raise InvalidArgumentError("enable_caching and enable_kv_events must be bools")
        if not isinstance(free_order, str) or free_order not in FREE_ORDERS:
            raise InvalidArgumentError(f"free_order must be one of {FREE_ORDERS}, got {describe(free_order)}")
        self.num_pages: int = n
        self.enable_caching: bool = enable_caching
        self.free_order: str = free_order
        self._records: PageRecords = PageRecords.for_pool(n, owned=True)
        self._ref: MutableSequence[int] | MutableMapping[int, int] = self._records.ref
        self._key: MutableSequence[Any] | MutableMapping[int, Any] = self._records.key
        self._views: dict[int, CachePage] = {}
        self.free_page_queue: FreeCachePageQueue = FreeCachePageQueue.for_range(self._records, 1, n, self._view)
        self._free: IdLinks = self.free_page_queue.links
        self._cached: dict[Hashable, int | dict[int, None]] = {}
        #: how many entries of ``_cached`` are dicts (several pages of equal content): while none
        #: is, every entry a lookup reads is the page itself, and no entry needs resolving
        self._num_shared: int = 0
        self.null_page: CachePage = self._view(NULL_PAGE_ID)
        self._dp: int | None = None
        self._pps: int = 0
        self._shards: IdLinks | None = None
        self.prefix_cache_stats: PrefixCacheStats = PrefixCacheStats()
        #: bumped whenever the cached map changes (a key registered or evicted, a reset), so a
        #: lookup result computed at one value is still the result while the value is unchanged
        self.key_version: int = 0
        self._events: EventLog | None = EventLog() if enable_kv_events else None

    # --- introspection (read-only; the abstraction protocol of verikv.spec.abstraction) ----

    def page(self, page_id: int) -> CachePage:
        """The `CachePage` view of ``page_id`` (one object per id)."""
        return self._view(self._checked_id(page_id))

    def ref_count(self, page_id: int) -> int:
        """Reference count of ``page_id`` (0 for the null page, which is never held)."""
        return self._ref[self._checked_id(page_id)]

    def key_of(self, page_id: int) -> Hashable | None:
        """The content key ``page_id`` is registered under, or ``None``."""
        key: Hashable | None = self._key[self._checked_id(page_id)]  # only hashable keys are stored
        return key

    def free_list_ids(self) -> list[int]:
        """The free page ids, head (next handed out) to tail. O(free pages)."""
        return self._free.ids(0)

    def cached_items(self) -> list[tuple[Hashable, tuple[int, ...]]]:
        """Every ``(key, page ids)`` entry of the cached map, ids oldest first. O(cached pages)."""
        return [(key, _ids_of(entry)) for key, entry in self._cached.items()]

    def count_free_ids(self, page_ids: Sequence[int]) -> int:
        """How many of ``page_ids`` are free (ref 0); the null page never counts."""
        ids = page_ids if type(page_ids) is list else page_list(page_ids, "page_ids")
        try:  # (the reads check that no id is past the pool: IndexError)
            free = countOf(map(self._ref.__getitem__, ids), 0) if self._all_ints_from(ids, 0) else -1
        except IndexError:
            free = -1
        if free < 0:  # a non-int, negative or too large id
            self._check_in_range(ids)  # raises the precise error
        return free - countOf(ids, NULL_PAGE_ID)

    def get_num_free_pages(self, *, dp_shard_hint: int | None = None,
                           data_parallel_size: int | None = None) -> int:
        """How many pages are free; with an active DP hint, in that shard only. O(1), except for a
        shard before the first allocation from one (a count over the free list: counting builds
        no shard lists, so a refused call leaves the DP size open)."""
        if dp_shard_hint is None and data_parallel_size is None:  # (the common call: nothing to check)
            return self._free.lengths[0]
        active = self._active_shard(dp_shard_hint, data_parallel_size)
        if active is None:  # no DP: the whole pool
            return self._free.lengths[0]
        shard, _, pps = active
        if self._shards is None:  # a count builds nothing: the first allocation from a shard fixes the DP size
            low, high = dp_shard_page_bounds(shard, pps)
            return sum(1 for pid in self._free.ids(0) if low <= pid < high)
        return self._shards.lengths[shard]

    def get_usage(self) -> float:
        """Fraction of usable pages (the null page excluded) that are not free; idle pool: 0.0."""
        usable = self.num_pages - 1
        return 0.0 if usable == 0 else 1.0 - self._free.lengths[0] / usable

    # --- id-level transitions ----------------------------------------------------------------

    def get_new_page_ids(self, num_pages: int, *, dp_shard_hint: int | None = None,
                         data_parallel_size: int | None = None) -> list[int]:
        """Allocate ``num_pages`` pages from the head of the free list (or of the hinted shard).

        Each page loses its content key if it had one (lazy eviction) and gets ref 1.
        `OutOfPagesError` (nothing changed) when the pool, or the shard, has too few.

        raises: OutOfPagesError, InvalidArgumentError
        post: dp_shard_hint is not None or (abstract_pool(self), tuple(__return__)) == spec_pool().allocate(abstract_pool(__old__.self), num_pages)
        """  # noqa: E501 -- a CrossHair contract is one line
        count = (num_pages if type(num_pages) is int and num_pages >= 0
                 else checked_int(num_pages, "num_pages", minimum=0))
        active = (None if data_parallel_size is None and dp_shard_hint is None
                  else self._active_shard(dp_shard_hint, data_parallel_size))
        free, shards = self._free, self._shards
        if count > free.lengths[0]:
            raise OutOfPagesError(f"Cannot get {count} free pages from the pool ({free.lengths[0]} free)")
        if active is None:
            ids = free.pop_front(0, count)
            if shards is not None:
                pps = self._pps
                for pid in ids:
                    shards.unlink(pid // pps, pid)
        else:
            shard, size, pps = active
            shard_lists = shards if shards is not None else self._new_shards(size, pps)
            if count > shard_lists.lengths[shard]:
                raise OutOfPagesError(
                    f"Insufficient free pages in DP shard {shard}: requested {count}, "
                    f"available {shard_lists.lengths[shard]}")
            if shards is None:  # built for this call: kept only now that it succeeds
                self._dp, self._pps, self._shards = size, pps, shard_lists
            ids = shard_lists.pop_front(shard, count)
            for pid in ids:
                free.unlink(0, pid)
        self._claim(ids)
        return ids

    def _claim(self, ids: list[int]) -> None:
        """Give each page just popped from the free list ref 1, evicting its key first if it has
        one (lazy eviction), in order.

        Each key's cached-map entry is popped with one probe. With events off, an entry that is
        exactly the page's own id (no equal pages, an unchanged key: the common case) is done
        with inline, without a call per page, and ``key_version`` is bumped by the count at the
        end, as one `_evict` per page would bump it; any other entry goes to `_evict`, which puts
        back what is not the page's. With events on every eviction takes `_evict`, so the
        ``removed`` events stay in page order.
        """
        ref, key, cached = self._ref, self._key, self._cached
        inline = self._events is None
        evicted = 0
        try:
            for pid in ids:
                k = key[pid]
                if k is not None:
                    entry = cached.pop(k, None)
                    if inline and entry == pid:  # (a dict entry never equals an int)
                        key[pid] = None
                        evicted += 1
                    else:
                        self._evict(pid, entry)
                ref[pid] = 1
        finally:  # (also when `_evict` raises: the count so far, as the calls would have bumped it)
            self.key_version += evicted

    def touch_ids(self, page_ids: Sequence[int]) -> None:
        """Take one more reference on each page (a cache hit); null ids are skipped.

        A page with ref 0 first leaves the free list, keeping its key.

        raises: ForeignPageError, InvalidArgumentError
        post: abstract_pool(self) == spec_pool().touch(abstract_pool(__old__.self), tuple(page_ids))
        """
        ids = page_ids if type(page_ids) is list else page_list(page_ids, "page_ids")
        if not self._all_in_range(ids):
            self._check_in_range(ids)  # raises the precise error
        ref = self._ref
        revived = []
        for pid in filter(None, ids):  # (the null page, 0, is skipped)
            held = ref[pid]
            if not held:
                revived.append(pid)  # (once: a page listed again is held by then)
            ref[pid] = held + 1
        if revived:
            self._unlink_revived(revived)

    def _unlink_revived(self, revived: list[int]) -> None:
        """Unlink the distinct pages a touch took from the free list (their order does not
        matter: unlinking a set of nodes leaves one list). From `_BULK_TOUCH` pages they are
        unlinked with NumPy gathers and scatters, whether they are one run of the free list (a
        cached prefix freed together) or several (`IdLinks.unlink_runs`); otherwise, or with
        shard lists to keep, page by page."""
        free, shards, pps = self._free, self._shards, self._pps
        if len(revived) >= _BULK_TOUCH and shards is None:
            free.unlink_runs(0, np.frombuffer(array("I", revived), dtype=np.uint32))
            return
        for pid in revived:
            free.unlink(0, pid)
            if shards is not None:
                shards.unlink(pid // pps, pid)

    def free_page_ids(self, page_ids: Iterable[int]) -> None:
        """Drop one reference per occurrence; pages reaching 0 rejoin the free list in order.

        Under ``"esurge"`` they join the tail; under ``"unhashed-first"`` those without a key
        go before the head (keeping their order) and the others to the tail. Keys are kept.
        `NullPageError` for page 0, `ForeignPageError` out of range, `DoubleFreeError` for a
        page freed more often than it is held; nothing changes then.

        raises: NullPageError, ForeignPageError, DoubleFreeError, InvalidArgumentError
        post: abstract_pool(self) == spec_pool().free(abstract_pool(__old__.self), tuple(__old__.page_ids))
        """
        ids = page_ids if type(page_ids) is list else page_list(page_ids, "page_ids")
        if self._free_shaped(ids):  # the common case (a request's free), whatever its length
            return
        self._link(*self._by_free_order(self._release(ids)))

    def _by_free_order(self, zeroed: list[int]) -> tuple[list[int], list[int]]:
        """The freed pages ``zeroed`` (in order) split as `_link` takes them, by ``free_order``:
        ``(pages to link before the head, pages to link at the tail)``."""
        if self.free_order == "unhashed-first":
            key = self._key
            return [p for p in zeroed if key[p] is None], [p for p in zeroed if key[p] is not None]
        return [], zeroed

    def _release(self, ids: list[int]) -> list[int]:
        """Check a free (raising the precise error, in the documented order, before any change)
        and drop one reference per occurrence; the pages that reached 0, in order."""
        ref = self._ref
        if not (self._all_in_range(ids) and NULL_PAGE_ID not in ids and min(map(ref.__getitem__, ids), default=1) > 0):
            self._check_free_ids(ids)  # raises the precise error, in the documented order
        if len(set(ids)) != len(ids):
            for pid, times in Counter(ids).items():
                if times > ref[pid]:
                    raise DoubleFreeError(f"page {pid} freed {times} times but held {ref[pid]} times")
        zeroed = []
        for pid in ids:
            r = ref[pid] - 1
            ref[pid] = r
            if r == 0:
                zeroed.append(pid)
        return zeroed

    def _free_shaped(self, ids: list[int]) -> bool:
        """`free_page_ids` of a list shaped as a request's free: pages held once (its own, which
        reach 0), then pages held more often (its prefix hit, which eviction order lists last,
        and which stay held). Returns False, having changed nothing, when the list needs the
        general path (`_release`): a bad id or page (that path raises the precise error), a page
        held once listed twice, counts of another shape, DP shard lists or the
        ``"unhashed-first"`` order. Faster than the general path at every length (no set, no
        separate pass over the counts), so every free tries it first.

        Two C-level passes check the ids (exact ints; a copy as ``array('I')``, which rejects a
        negative id that ``ref[pid]`` would read from the end), then `_drop_shaped` checks the
        counts while it drops them, and the pages held once are linked by `_link`, the one place
        freed pages are linked (from that copy: a long list is linked with NumPy without a
        second conversion).
        """
        if self._shards is not None or self.free_order != "esurge" or countOf(map(type, ids), int) != len(ids):
            return False
        try:
            pages = array("I", ids)
        except OverflowError:  # a negative id (or one past uint32)
            return False
        own = self._drop_shaped(ids)
        if own < 0:
            return False
        self._link([], pages[:own])  # (distinct: a page listed again would have stopped the first loop)
        return True

    def _drop_shaped(self, ids: list[int]) -> int:
        """Drop one reference per id of a request-shaped free, with a plain loop per part: the
        first run of pages held once go to 0, each later page held at least twice loses one.
        Returns how many ids the first run holds, or -1, having undone every store, when the
        list has another shape. The first loop stops at the first page not held once (a page
        held once and listed again is at 0 by then), the second at a page held less than twice,
        which could reach 0 or is not held; an id past the pool stops either."""
        ref = self._ref
        own = _zero_held_once(ref, ids)
        shared = _drop_shared(ref, ids[own:]) if own < len(ids) else 0
        if own + shared == len(ids):
            return own
        for pid in islice(ids, own, own + shared):
            ref[pid] += 1
        for pid in islice(ids, own):
            ref[pid] = 1
        return -1

    def cache_page_id(self, page_id: int, key: Hashable) -> None:
        """Register ``page_id`` as holding the content ``key`` (appended after equal pages).

        `NullPageError` for page 0, `PageStateError` if the page already has a key,
        `InvalidArgumentError` for a ``None``/unhashable key or when caching is disabled.

        raises: NullPageError, ForeignPageError, PageStateError, InvalidArgumentError
        post: abstract_pool(self) == spec_pool().cache(abstract_pool(__old__.self), page_id, key)
        """
        if key is None:
            raise InvalidArgumentError("a cache key cannot be None")
        if not (type(page_id) is int and 0 < page_id < self.num_pages and self.enable_caching
                and self._key[page_id] is None):
            check_key(key)  # a bad key is reported before a bad page, as the spec orders them
            self.check_cacheable([page_id])  # raises the precise error
        # A user key's hash and equality run before the map changes (a key not equal to itself, a
        # NaN, could never be found again), and a dict call whose comparison fails leaves the dict
        # as it was. (Inline, not a helper: this runs once per page a step fills.)
        try:
            if key != key:
                raise InvalidArgumentError(f"cache key {describe(key)} is not equal to itself")
            entry = self._cached.setdefault(key, page_id)  # hashes the key once
            if entry is not page_id:  # equal pages already cached: this one joins them, last
                if isinstance(entry, int):  # stored entries are exact ints or dicts
                    self._cached[key] = {entry: None, page_id: None}
                    self._num_shared += 1
                else:
                    entry[page_id] = None
        except InvalidArgumentError:
            raise
        except TypeError:
            raise InvalidArgumentError(f"unhashable cache key {describe(key)}") from None
        except Exception as exc:  # the key's own __hash__ / __eq__ (or an equal key's) failed
            raise InvalidArgumentError(
                f"cache key {describe(key)} cannot be hashed or compared: {type(exc).__name__}: {exc}") from None
        self._key[page_id] = key
        self.key_version += 1
        if self._events is not None:
            self._events.stored(page_id, key)

    def cache_page_ids(self, page_ids: Sequence[int], keys: Sequence[Hashable]) -> None:
        """`cache_page_id` for each ``(page_ids[i], keys[i])`` in order, as one step: on an error
        (the one the first failing call would raise) nothing is registered. Every key is hashed
        and compared with the cached keys and the batch's before the first one is registered,
        so a key whose ``__hash__`` or ``__eq__`` raises (each time it is asked) is refused
        with nothing changed.

        The common case (caching on, no events, every id a distinct keyless page, every key new
        and distinct) is checked and applied at C speed: one `dict.update`, ``key_version``
        bumped once. Any other batch is checked pair by pair, then registered page by page.

        raises: NullPageError, ForeignPageError, PageStateError, InvalidArgumentError
        """
        ids = page_ids if type(page_ids) is list else page_list(page_ids, "page_ids")
        keys = keys if type(keys) is list else page_list(keys, "keys")
        if len(ids) != len(keys):
            raise InvalidArgumentError(f"{len(ids)} page ids but {len(keys)} keys")
        if not ids:
            return  # nothing registered: the cached map (and key_version) stay as they are
        new = self._new_entries(ids, keys)
        if new is None:  # the general case: exactly the calls it stands for
            self._check_cache_pairs(ids, keys)
            for pid, key in zip(ids, keys):
                self.cache_page_id(pid, key)
            return
        self._cached.update(new)
        table = self._key
        for pid, key in zip(ids, keys):
            table[pid] = key
        self.key_version += 1

    def _new_entries(self, ids: list[int], keys: list[Hashable]) -> dict[Hashable, int] | None:
        """``{key: id}`` when the batch is the common case of `cache_page_ids`, else None. Pure."""
        n = len(ids)
        if self._events is not None or not self.enable_caching or not self._all_ints_from(ids, NULL_PAGE_ID + 1):
            return None
        try:  # (the key reads check that no id is past the pool: IndexError)
            if countOf(map(self._key.__getitem__, ids), None) != n or len(set(ids)) != n:
                return None
            new = dict(zip(keys, ids))
            if len(new) != n or None in new or not self._cached.keys().isdisjoint(new) or any(map(ne, keys, keys)):
                return None  # equal keys (in the batch or cached already), a None key, or one not equal to itself
        except Exception:  # an id past the pool, a key that cannot be hashed or compared: the
            return None  # pair-by-pair check reports it with its typed error
        return new

    def _check_cache_pairs(self, ids: list[int], keys: list[Hashable]) -> None:
        """Raise the error the first failing `cache_page_id` of the batch would raise. Read-only."""
        seen: dict[int, Hashable] = {}  # pages the earlier calls would have registered
        batch: dict[Hashable, None] = {}  # their keys: each key meets the ones registered before it
        for pid, key in zip(ids, keys):
            if key is None:
                raise InvalidArgumentError("a cache key cannot be None")
            check_key(key)
            self.check_cacheable([pid])
            if pid in seen:
                raise PageStateError(f"page {pid} already has a key ({describe(seen[pid])})")
            try:  # the comparisons registering it will make
                self._cached.get(key)
                batch.setdefault(key)
            except Exception as exc:
                raise InvalidArgumentError(
                    f"cache key {describe(key)} cannot be compared: {type(exc).__name__}: {exc}") from None
            seen[pid] = key

    def lookup_id(self, key: Hashable, *, dp_shard_hint: int | None = None,
                  data_parallel_size: int | None = None) -> int | None:
        """The oldest page holding ``key`` (inside the hinted shard, if any), or ``None``.

        Counted in `prefix_cache_stats` as one query.
        """
        found = self._lookup(key, self._shard_bounds(dp_shard_hint, data_parallel_size))
        self.prefix_cache_stats.record(1, 0 if found is None else 1)
        return found

    def lookup_run_ids(self, keys: Iterable[Hashable], *, dp_shard_hint: int | None = None,
                       data_parallel_size: int | None = None) -> list[int]:
        """`lookup_id` over ``keys`` in order, stopping at the first miss: the pages of the
        longest run of leading hits (one call per prefix lookup instead of one per page).
        ``keys`` may be any iterable (a lazy one is consumed up to the miss, never copied).
        Statistics count one query per key looked up, as per-key `lookup_id` calls would.
        """
        bounds = (None if data_parallel_size is None and dp_shard_hint is None
                  else self._shard_bounds(dp_shard_hint, data_parallel_size))
        if type(keys) is not list and (isinstance(keys, (str, bytes, Mapping)) or not isinstance(keys, Iterable)):
            page_list(keys, "keys")  # raises the precise error
        try:  # C speed, up to the first miss; _RUN_END marks a run that ended with the keys
            found: list[Any] = list(takewhile(_is_entry, chain(map(self._cached.get, keys), _RUN_END)))
        except Exception as exc:  # a key's own __hash__ / __eq__ (or the iterable) raised
            raise InvalidArgumentError(f"a cache key among {describe(keys)} cannot be looked up: "
                                       f"{type(exc).__name__}") from exc
        if found and found[-1] is _RUN_END[0]:
            found.pop()
            queries = len(found)
        else:
            queries = len(found) + 1  # the miss that ended the run counts
        if bounds is not None or (self._num_shared and dict in map(type, found)):  # a shard, or equal pages
            for i, entry in enumerate(found):
                pid = self._resolve(entry, bounds)
                if pid is None:
                    del found[i:]
                    queries = i + 1
                    break
                found[i] = pid
        stats = self.prefix_cache_stats
        stats.requests += queries
        stats.queries += queries
        stats.hits += len(found)
        return found

    def lookup_all_ids(self, keys: Sequence[Hashable], *, dp_shard_hint: int | None = None,
                       data_parallel_size: int | None = None) -> list[int] | None:
        """The oldest page holding each of ``keys`` (inside the hinted shard, if any), or
        ``None`` if any misses. Counted in `prefix_cache_stats` as one query."""
        bounds = self._shard_bounds(dp_shard_hint, data_parallel_size)
        found: list[int] = []
        for key in page_list(keys, "keys"):
            pid = self._lookup(key, bounds)
            if pid is None:
                self.prefix_cache_stats.record(1, 0)
                return None
            found.append(pid)
        self.prefix_cache_stats.record(1, 1)
        return found

    def keys_of_ids(self, page_ids: Sequence[int]) -> list[Hashable | None]:
        """The content key of each of ``page_ids`` (``None``: no key), read at C speed."""
        ids = page_ids if type(page_ids) is list else page_list(page_ids, "page_ids")
        if not self._all_in_range(ids):
            self._check_in_range(ids)  # raises the precise error
        return list(map(self._key.__getitem__, ids))

    def reset_prefix_cache(self) -> bool:
        """Drop every content key if no page is held; otherwise change nothing, return False.

        post: (abstract_pool(self), __return__) == spec_pool().reset_prefix_cache(abstract_pool(__old__.self))
        """
        held = self.num_pages - 1 - self._free.lengths[0]
        if held > 0:
            _log.warning("Failed to reset the prefix cache: %d pages are still held", held)
            return False
        key = self._key
        for entry in self._cached.values():
            for pid in _ids_of(entry):
                key[pid] = None
        self._cached.clear()
        self._num_shared = 0
        self.key_version += 1
        self.prefix_cache_stats.reset = True
        if self._events is not None:
            self._events.cleared()
        return True

    # --- eSurge object-level API ----------------------------------------------------------

    def get_new_pages(self, num_pages: int, *, dp_shard_hint: int | None = None,
                      data_parallel_size: int | None = None) -> list[CachePage]:
        """eSurge's allocation: `get_new_page_ids` returning `CachePage` views."""
        view = self._view
        return [view(pid) for pid in self.get_new_page_ids(
            num_pages, dp_shard_hint=dp_shard_hint, data_parallel_size=data_parallel_size)]

    def touch(self, pages: Sequence[Sequence[CachePage]] | Sequence[CachePage]) -> None:
        """eSurge's touch: ``pages`` is one list of pages per cache group (or one flat list)."""
        groups = page_list(pages, "pages")
        flat = ([p for group in groups for p in page_list(group, "pages of a group")]
                if groups and not isinstance(groups[0], CachePage) else groups)
        self.touch_ids(self.own_ids(flat))

    def free_pages(self, ordered_pages: Iterable[CachePage]) -> None:
        """eSurge's free: `free_page_ids` on page views, in the given (eviction) order."""
        self.free_page_ids(self.own_ids(ordered_pages))

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        """The lookup statistics since the last call (the counters restart)."""
        return self.prefix_cache_stats.take()

    @property
    def event_log(self) -> EventLog | None:
        """The log KV events are recorded in, or None when events are off."""
        return self._events

    def take_events(self) -> list[KVEvent]:
        """KV events since the last call, oldest first (always empty when events are off)."""
        return [] if self._events is None else self._events.take()

    # --- internals --------------------------------------------------------------------------

    def _view(self, page_id: int) -> CachePage:
        page = self._views.get(page_id)
        if page is None:
            page = self._views[page_id] = CachePage.view(self._records, page_id)
        return page

    def _checked_id(self, page_id: int) -> int:
        if type(page_id) is not int or not 0 <= page_id < self.num_pages:
            raise ForeignPageError(f"page id {describe(page_id)} is not a page of this pool (0..{self.num_pages - 1})")
        return page_id

    @staticmethod
    def _check_ints(ids: Iterable[int]) -> None:
        for pid in ids:
            if type(pid) is not int:
                raise InvalidArgumentError(f"page ids must be ints, got {type(pid).__name__} {describe(pid)}")

    def _check_free_ids(self, ids: list[int]) -> None:
        """Raise the error for the first problem of a free: a non-int, the null page, an id out
        of range, a page not held (in that order of precedence)."""
        self._check_ints(ids)
        if NULL_PAGE_ID in ids:
            raise NullPageError("the null page is never freed")
        n, ref = self.num_pages, self._ref
        for pid in ids:
            if not 0 < pid < n:
                raise ForeignPageError(f"page id {pid} is not a page of this pool (1..{n - 1})")
        for pid in ids:
            if ref[pid] < 1:
                raise DoubleFreeError(f"page {pid} is not held (ref 0): double free")

    def _all_in_range(self, ids: list[int]) -> bool:
        """True if every id is a plain int page id of this pool (C-speed passes; the common case)."""
        return self._all_ints_from(ids, 0) and (not ids or max(ids) < self.num_pages)

    @staticmethod
    def _all_ints_from(ids: list[int], first: int) -> bool:
        """True if every id is a plain int, none below ``first`` (two C-speed passes). The upper
        bound is left to a caller that reads ``ref`` or ``key`` at every id anyway: that read
        raises IndexError for an id past the pool, which saves a ``max`` pass over the ids."""
        return countOf(map(type, ids), int) == len(ids) and (not ids or min(ids) >= first)

    def _check_in_range(self, ids: Iterable[int]) -> None:
        self._check_ints(ids)
        n = self.num_pages
        for pid in ids:
            if not 0 <= pid < n:
                raise ForeignPageError(f"page id {pid} is not a page of this pool (0..{n - 1})")

    def own_ids(self, pages: Iterable[CachePage]) -> list[int]:
        """The ids of ``pages``, which must be `CachePage` views of this pool (else `ForeignPageError`)."""
        records = self._records
        ids: list[int] = []
        for page in page_list(pages, "pages"):
            if not is_view_of(page, records):
                raise ForeignPageError(f"{describe(page)} is not a page of this pool")
            ids.append(page.page_id)
        return ids

    def check_cacheable(self, page_ids: Sequence[int]) -> None:
        """Raise unless caching is on and every id is a non-null page of this pool without a key
        (distinct). Read-only."""
        ids = page_list(page_ids, "page_ids")
        if not self.enable_caching:
            raise InvalidArgumentError("prefix caching is disabled for this pool")
        self._check_ints(ids)
        if NULL_PAGE_ID in ids:
            raise NullPageError("the null page is never hashed")
        self._check_in_range(ids)
        for pid in ids:
            if self._key[pid] is not None:
                raise PageStateError(f"page {pid} already has a key ({describe(self._key[pid])})")
        if len(set(ids)) != len(ids):
            raise PageStateError("a page occurs twice in one caching call")

    def _evict(self, pid: int, entry: int | dict[int, None] | None) -> None:
        """Remove ``pid`` from the cached map and forget its key; ``entry`` is what the caller
        popped from the map under that key (``None``: nothing was stored under it)."""
        key = self._key[pid]
        self.key_version += 1
        if entry is None or not (entry == pid if isinstance(entry, int) else pid in entry):
            if entry is not None:  # the key now equals another key: that entry is not ours, so it
                # goes back under that key's own object (stored under ``key`` it would be dropped
                # with ``key``'s stale slot below)
                self._cached[self._key[_first_id(entry)]] = entry
            entry = self._pop_changed_key(key)
        if not isinstance(entry, int):  # equal pages: put the others back
            del entry[pid]
            if len(entry) == 1:
                self._cached[key] = next(iter(entry))
                self._num_shared -= 1
            else:
                self._cached[key] = entry
        self._key[pid] = None
        if self._events is not None:
            self._events.removed(pid, key)

    def _pop_changed_key(self, key: Hashable) -> int | dict[int, None]:
        """Remove and return the entry stored under ``key`` itself, found by identity.

        Only reached when a key's hash or equality changed after it was inserted (a key holding
        a mutable user object; the manager normalizes its keys so that this cannot happen). The
        map is rebuilt without that key (O(cached pages), on this path only), so the page is
        still evicted and no page is lost (INV-CONSERVE) whatever the key does.
        """
        found = [entry for k, entry in self._cached.items() if k is key]
        if not found:
            raise CorruptedStateError(f"key {describe(key)} of a cached page is missing from the cached map")
        _log.warning("a cache key changed its hash or equality after insertion: %s", describe(key))
        kept = [(k, entry) for k, entry in self._cached.items() if k is not key]
        self._cached.clear()  # in place: re-inserting rehashes every key under its current hash
        self._cached.update(kept)
        return found[0]

    def _lookup(self, key: Hashable, bounds: tuple[int, int] | None) -> int | None:
        try:
            entry = self._cached.get(key)
        except Exception as exc:  # unhashable, or the key's own __hash__ / __eq__ raised
            raise InvalidArgumentError(f"cache key {describe(key)} cannot be looked up: {type(exc).__name__}") from exc
        return None if entry is None else self._resolve(entry, bounds)

    def _resolve(self, entry: int | dict[int, None], bounds: tuple[int, int] | None) -> int | None:
        """The page a lookup returns from a cached-map entry: the oldest (inside ``bounds``)."""
        if isinstance(entry, int):
            return entry if bounds is None or bounds[0] <= entry < bounds[1] else None
        if bounds is None:
            return next(iter(entry))
        lo, hi = bounds
        return next((pid for pid in entry if lo <= pid < hi), None)

    def _link(self, front: Sequence[int], back: Sequence[int]) -> None:
        """Link freed pages: ``front`` before the head, ``back`` at the tail (shards mirrored)."""
        free, shards = self._free, self._shards
        if front:
            free.link_front(0, front)
        if back:
            free.link_back(0, back)
        if shards is None:
            return
        pps = self._pps
        if front:
            groups: dict[int, list[int]] = {}
            for pid in front:
                groups.setdefault(pid // pps, []).append(pid)
            for shard, members in groups.items():
                shards.link_front(shard, members)
        for pid in back:
            shards.link_back(pid // pps, (pid,))

    def _active_shard(self, hint: object, dp: object) -> tuple[int, int, int] | None:
        """``(shard, dp, pages per shard)`` for an active hint (eSurge's rule), or ``None``.

        Both arguments are validated whenever given, and nothing is built (a call that fails
        later must not leave shard lists behind). Active only when both are given, dp > 1 and
        num_pages % dp == 0; shard = hint % dp. A dp different from the one the shard lists
        were built for is an `InvalidArgumentError`.
        """
        if hint is not None and type(hint) is not int:
            hint = checked_int(hint, "dp_shard_hint")
        if dp is None:
            return None
        size = checked_int(dp, "data_parallel_size", minimum=1)
        if hint is None:
            return None
        pps = pages_per_dp_shard(self.num_pages, size)
        if pps is None:
            return None
        if self._shards is not None and self._dp != size:
            raise InvalidArgumentError(
                f"data_parallel_size {size} differs from {self._dp}, which this pool's shards use")
        return hint % size, size, pps

    def _shard_bounds(self, hint: object, dp: object) -> tuple[int, int] | None:
        active = self._active_shard(hint, dp)
        return None if active is None else dp_shard_page_bounds(active[0], active[2])

    def _new_shards(self, dp: int, pps: int) -> IdLinks:
        """Shard sub-lists mirroring the current free list (not installed: the caller keeps them)."""
        shards = IdLinks(self.num_pages, dp)
        groups: list[list[int]] = [[] for _ in range(dp)]
        for pid in self._free.ids(0):
            groups[pid // pps].append(pid)
        for shard, members in enumerate(groups):
            shards.link_back(shard, members)
        return shards


def abstract_pool(pool: PagePool) -> Any:
    """The spec's view of ``pool`` (named by the PEP 316 contracts above; `verikv.spec` is
    imported here, on first use, so the runtime path never imports it)."""
    from verikv.spec.abstraction import abstract_pool as abstraction

    return abstraction(pool)


def spec_pool() -> Any:
    """The spec's pool transitions, `verikv.spec.pool` (for the contracts above; lazy)."""
    from verikv.spec import pool

    return pool


def _first_id(entry: int | dict[int, None]) -> int:
    """The oldest page of a cached-map entry."""
    return entry if isinstance(entry, int) else next(iter(entry))


def _ids_of(entry: int | dict[int, None]) -> tuple[int, ...]:
    return (entry,) if isinstance(entry, int) else tuple(entry)
