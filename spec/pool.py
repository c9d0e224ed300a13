"""The page pool as an abstract state machine: state, `init`, transitions, invariants.

This module is the normative description of the pool.
Everything is immutable and plain: ints, tuples, frozensets and one frozen dataclass, so
Z3 encodings, CrossHair and Hypothesis can all read it. Each transition is a pure function
with a precondition predicate ``pre_<name>``; calling a transition outside its
precondition raises `PreconditionError` (never an ``assert``), so the spec is total and
defensive under ``python -O`` too.

Conventions: page 0 is the null page; ``free`` is ordered head -> tail and the head is the
next page handed out (least recently used); a *key* is any hashable content identity
(a ``PageHashWithGroupId`` in the implementation, a small int in proofs). A *bounds*
argument is a half-open page-id range ``(lo, hi)`` (a data-parallel shard); ``None``
means the whole pool.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

Key = Hashable
FreeOrder = Literal["esurge", "unhashed-first"]
Bounds = tuple[int, int]
FREE_ORDERS: frozenset[str] = frozenset({"esurge", "unhashed-first"})
NULL_PAGE = 0


class PreconditionError(ValueError):
    """A spec transition was called outside its precondition; ``reason`` names the rule.

    Reasons: "argument" (malformed arguments), "null-page", "out-of-range", "out-of-pages",
    "double-free", "already-keyed", "unknown-request", "key-computation" (a manager call whose
    page keys could not be computed: `verikv.spec.manager.fail_key_computation`).
    """

    def __init__(self, transition: str, reason: str, detail: str) -> None:
        super().__init__(f"{transition}: {reason}: {detail}")
        self.transition = transition
        self.reason = reason


@dataclass(frozen=True)
class PoolState:
    """One pool: ``ref[p]`` and ``key_of[p]`` per page id, the free sequence, the cached map.

    ``cached`` is the set of pairs ``(key, ids)`` where ``ids`` lists, in insertion order,
    every page registered under ``key`` (the first one is what a lookup returns); a set of
    pairs so that equality does not depend on the order keys were created in.
    """

    num_pages: int
    ref: tuple[int, ...]
    free: tuple[int, ...]
    key_of: tuple[Key | None, ...]
    cached: frozenset[tuple[Key, tuple[int, ...]]]
    free_order: FreeOrder = "esurge"

    def cached_ids(self, key: Key) -> tuple[int, ...]:
        """The pages registered under ``key``, oldest first (empty when the key is unknown)."""
        for k, ids in self.cached:
            if k == key:
                return ids
        return ()

    @functools.cached_property
    def by_key(self) -> dict[Key, tuple[int, ...]]:
        """``cached`` as a mapping, built on first use: a lookup asks one state for hundreds of
        keys, while a state that only gets cached into is read once (`cached_ids`)."""
        return dict(self.cached)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _in_bounds(p: int, bounds: Bounds | None) -> bool:
    return bounds is None or bounds[0] <= p < bounds[1]


def _valid_bounds(s: PoolState, bounds: Bounds | None) -> bool:
    return bounds is None or (
        isinstance(bounds, tuple) and len(bounds) == 2 and all(_is_int(b) for b in bounds)
        and 0 <= bounds[0] <= bounds[1] <= s.num_pages
    )


def _replace_key(cached: frozenset[tuple[Key, tuple[int, ...]]], key: Key,
                 ids: tuple[int, ...]) -> frozenset[tuple[Key, tuple[int, ...]]]:
    """``cached`` with the entry for ``key`` set to ``ids`` (dropped when ``ids`` is empty)."""
    rest = frozenset(entry for entry in cached if entry[0] != key)
    return rest | {(key, ids)} if ids else rest


def init(num_pages: int, free_order: FreeOrder = "esurge") -> PoolState:
    """A fresh pool: nothing held, no keys, free list ``1, 2, ..., N-1`` (page 0 is null).

    pre: ``num_pages`` is an int >= 1 and ``free_order`` is a known policy.
    """
    if not _is_int(num_pages) or num_pages < 1:
        raise PreconditionError("init", "argument", f"num_pages must be an int >= 1, got {num_pages!r}")
    if free_order not in FREE_ORDERS:
        raise PreconditionError("init", "argument", f"unknown free_order {free_order!r}")
    return PoolState(num_pages, (0,) * num_pages, tuple(range(1, num_pages)),
                     (None,) * num_pages, frozenset(), free_order)


# --- allocate ---------------------------------------------------------------------------

def pre_allocate(s: PoolState, n: int, bounds: Bounds | None = None) -> bool:
    """At least ``n >= 0`` free pages lie inside ``bounds``."""
    return (_is_int(n) and n >= 0 and _valid_bounds(s, bounds)
            and sum(1 for p in s.free if _in_bounds(p, bounds)) >= n)


def allocate(s: PoolState, n: int, bounds: Bounds | None = None) -> tuple[PoolState, tuple[int, ...]]:
    """Hand out the first ``n`` free pages (in list order) that lie inside ``bounds``.

    Each chosen page leaves the free list, loses its key if it had one (lazy eviction: a
    cached page stays hit-able until it is reused), and gets ``ref = 1``. Returns the new
    state and the pages in the order chosen.
    pre: `pre_allocate`; otherwise `PreconditionError` ("out-of-pages", or "argument" for a
    malformed ``n`` or ``bounds``).
    """
    if not pre_allocate(s, n, bounds):
        reason = "out-of-pages" if _is_int(n) and n >= 0 and _valid_bounds(s, bounds) else "argument"
        raise PreconditionError("allocate", reason, f"n={n!r} bounds={bounds!r}")
    chosen = tuple(p for p in s.free if _in_bounds(p, bounds))[:n]
    ref = list(s.ref)
    key_of = list(s.key_of)
    cached = s.cached
    for p in chosen:
        key = key_of[p]
        if key is not None:
            current = next((ids for k, ids in cached if k == key), ())  # not s: earlier evictions count
            cached = _replace_key(cached, key, tuple(q for q in current if q != p))
            key_of[p] = None
        ref[p] = 1
    taken = frozenset(chosen)
    free = tuple(p for p in s.free if p not in taken)
    return PoolState(s.num_pages, tuple(ref), free, tuple(key_of), cached, s.free_order), chosen


# --- touch ------------------------------------------------------------------------------

def pre_touch(s: PoolState, pages: tuple[int, ...]) -> bool:
    """Every id is a page of this pool (the null page is allowed as a placeholder)."""
    return isinstance(pages, tuple) and all(_is_int(p) and 0 <= p < s.num_pages for p in pages)


def touch(s: PoolState, pages: tuple[int, ...]) -> PoolState:
    """Take one more reference on each page, in order (how a prefix-cache hit is claimed).

    A page with ``ref == 0`` first leaves the free list (it is revived, keeping its key);
    then ``ref += 1``. The null page is a placeholder and is skipped.
    pre: `pre_touch`; otherwise "out-of-range"/"argument".
    """
    if not pre_touch(s, pages):
        raise PreconditionError("touch", "out-of-range" if isinstance(pages, tuple) else "argument",
                                f"pages={pages!r}")
    ref = list(s.ref)
    for p in pages:
        if p != NULL_PAGE:
            ref[p] += 1
    revived = frozenset(p for p in pages if p != NULL_PAGE and s.ref[p] == 0)
    free = tuple(p for p in s.free if p not in revived)
    return PoolState(s.num_pages, tuple(ref), free, s.key_of, s.cached, s.free_order)


# --- free -------------------------------------------------------------------------------

def pre_free(s: PoolState, pages: tuple[int, ...]) -> bool:
    """No null page, every id in range, and no page freed more often than it is held."""
    return (isinstance(pages, tuple)
            and all(_is_int(p) and 1 <= p < s.num_pages for p in pages)
            and all(pages.count(p) <= s.ref[p] for p in set(pages)))


def free(s: PoolState, pages: tuple[int, ...]) -> PoolState:
    """Drop one reference per occurrence; pages that reach zero rejoin the free list.

    Pages are processed in the given order and listed in the order they reach zero
    (callers pass a request's pages reversed, so its chain tail is evicted first). Under
    ``"esurge"`` all of them join the tail in that order; under ``"unhashed-first"`` those
    without a key are placed, in that order, before the current head (they can never be a
    cache hit, so they are reused first) and the keyed ones join the tail. Keys are kept:
    a freed full page stays hit-able until it is reused.
    pre: `pre_free`; otherwise "null-page", "out-of-range", "double-free" or "argument".
    """
    if not pre_free(s, pages):
        raise PreconditionError("free", _free_violation(s, pages), f"pages={pages!r}")
    ref = list(s.ref)
    zeroed: list[int] = []
    for p in pages:
        ref[p] -= 1
        if ref[p] == 0:
            zeroed.append(p)
    if s.free_order == "unhashed-first":
        head = tuple(p for p in zeroed if s.key_of[p] is None)
        tail = tuple(p for p in zeroed if s.key_of[p] is not None)
        new_free = head + s.free + tail
    else:
        new_free = s.free + tuple(zeroed)
    return PoolState(s.num_pages, tuple(ref), new_free, s.key_of, s.cached, s.free_order)


def _free_violation(s: PoolState, pages: object) -> str:
    """Which rule of `pre_free` fails first (null page before range before double free)."""
    if not isinstance(pages, tuple) or not all(_is_int(p) for p in pages):
        return "argument"
    if NULL_PAGE in pages:
        return "null-page"
    if not all(1 <= p < s.num_pages for p in pages):
        return "out-of-range"
    return "double-free"


# --- cache ------------------------------------------------------------------------------

def pre_cache(s: PoolState, page: int, key: Key) -> bool:
    """A non-null page of this pool that has no key yet, and a non-None hashable key."""
    return (_is_int(page) and 1 <= page < s.num_pages and s.key_of[page] is None
            and key is not None and isinstance(key, Hashable))


def cache(s: PoolState, page: int, key: Key) -> PoolState:
    """Register ``page`` as holding the content identified by ``key``.

    ``key_of[page] = key`` and the page is appended to ``cached[key]`` (several pages may
    hold equal content; lookups return the oldest). Reference counts and the free list are
    unchanged.
    pre: `pre_cache`; otherwise "null-page", "out-of-range", "already-keyed" or "argument".
    """
    if not pre_cache(s, page, key):
        if not _is_int(page) or key is None or not isinstance(key, Hashable):
            reason = "argument"
        elif page == NULL_PAGE:
            reason = "null-page"
        elif not 1 <= page < s.num_pages:
            reason = "out-of-range"
        else:
            reason = "already-keyed"
        raise PreconditionError("cache", reason, f"page={page!r} key={key!r}")
    key_of = s.key_of[:page] + (key,) + s.key_of[page + 1:]
    cached = _replace_key(s.cached, key, s.cached_ids(key) + (page,))
    return PoolState(s.num_pages, s.ref, s.free, key_of, cached, s.free_order)


# --- reset_prefix_cache -----------------------------------------------------------------

def pre_reset_prefix_cache(s: PoolState) -> bool:
    """Always true: the transition is total and reports whether it did anything."""
    return True


def resettable(s: PoolState) -> bool:
    """Nothing is held: every non-null page is free."""
    return len(s.free) == s.num_pages - 1


def reset_prefix_cache(s: PoolState) -> tuple[PoolState, bool]:
    """Forget every key if nothing is held; otherwise change nothing.

    Returns the new state and whether the reset happened (eSurge returns ``False`` and
    keeps the cache while any page is held). The free-list order is not changed.
    """
    if not resettable(s):
        return s, False
    return PoolState(s.num_pages, s.ref, s.free, (None,) * s.num_pages, frozenset(), s.free_order), True


# --- observations (no state change) -----------------------------------------------------

def lookup(s: PoolState, key: Key, bounds: Bounds | None = None) -> int | None:
    """The oldest page registered under ``key`` whose id lies in ``bounds``, else ``None``.

    pre: ``bounds`` is ``None`` or a range inside the pool ("argument" otherwise).
    """
    if not _valid_bounds(s, bounds):
        raise PreconditionError("lookup", "argument", f"bounds={bounds!r}")
    return next((p for p in s.by_key.get(key, ()) if _in_bounds(p, bounds)), None)


def held(s: PoolState) -> int:
    """How many non-null pages have at least one reference."""
    return sum(1 for p in range(1, s.num_pages) if s.ref[p] > 0)


def usage(s: PoolState) -> float:
    """Fraction of usable (non-null) pages not free; 0.0 for an idle pool or a 1-page pool."""
    usable = s.num_pages - 1
    return 0.0 if usable <= 0 else 1.0 - len(s.free) / usable


# --- invariants (by their INV-* names) -------------------------------------------------

def inv_null(s: PoolState) -> bool:
    """INV-NULL: page 0 is not free, has no key, is in no cached entry and is never held."""
    return (NULL_PAGE not in s.free and s.key_of[NULL_PAGE] is None and s.ref[NULL_PAGE] == 0
            and all(NULL_PAGE not in ids for _, ids in s.cached))


def inv_free_iff_zero(s: PoolState) -> bool:
    """INV-FREE-IFF-ZERO: for p >= 1, p is in the free list exactly when ref[p] == 0."""
    in_free = frozenset(s.free)
    return all((p in in_free) == (s.ref[p] == 0) for p in range(1, s.num_pages))


def inv_free_distinct(s: PoolState) -> bool:
    """INV-FREE-DISTINCT: the free list has no duplicates and only ids of this pool."""
    return len(set(s.free)) == len(s.free) and all(0 <= p < s.num_pages for p in s.free)


def inv_ref_nonneg(s: PoolState) -> bool:
    """INV-REF-NONNEG: every reference count is >= 0."""
    return all(r >= 0 for r in s.ref)


def inv_conserve(s: PoolState) -> bool:
    """INV-CONSERVE: free pages plus held pages account for every usable page, N - 1."""
    return len(s.free) + held(s) == s.num_pages - 1


def inv_key_bij(s: PoolState) -> bool:
    """INV-KEY-BIJ: key_of[p] == k exactly when p is in cached[k]; no empty or duplicate entries."""
    listed = [(k, p) for k, ids in s.cached for p in ids]
    keys = [k for k, _ in s.cached]
    return (len(keys) == len(set(keys)) and all(ids for _, ids in s.cached)
            and len(listed) == len(set(p for _, p in listed))
            and all(0 <= p < s.num_pages and s.key_of[p] == k for k, p in listed)
            and sum(1 for k in s.key_of if k is not None) == len(listed))


def inv_usage(s: PoolState) -> bool:
    """INV-USAGE: usage = held / (N - 1) (the null page excluded); an idle pool reports 0.0."""
    usable = s.num_pages - 1
    expected = 0.0 if usable <= 0 else held(s) / usable
    return abs(usage(s) - expected) <= 1e-12 and (held(s) > 0 or usage(s) == 0.0)


def well_formed(s: PoolState) -> bool:
    """Shape checks every invariant presupposes: sizes agree, policy known."""
    return (_is_int(s.num_pages) and s.num_pages >= 1 and len(s.ref) == s.num_pages
            and len(s.key_of) == s.num_pages and s.free_order in FREE_ORDERS)
