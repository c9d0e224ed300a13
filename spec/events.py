"""KV events as a function of the abstract state change, and INV-EVENTS-REPLAY.

A KV-cache-aware router indexes what a pool holds from the pool's events alone, so the events
must say exactly how the cached-key multiset changed. The spec states them over abstract
states: one manager call (`verikv.spec.manager.allocate_slots`, ``cache_pages`` or
``reset_prefix_cache``) taking state ``pre`` to ``post`` emits, at its end and as one batch,
`call_events` ``(pre, post, new_pages, reset)``:

- ``Removed``: the keys the allocation evicted, that is the ``pre`` keys of the pages it
  handed out, one event per group of the evicted key (groups in order of first eviction, keys
  in allocation order);
- then ``Stored``: per group in group order and per request holding them, the run of pages
  that got a key in the call (unkeyed in ``pre``, or handed out by it, and keyed in
  ``post``), in chain order, with the content of the page before the run in the request's
  chain (its *parent*; None when the run starts the chain), the page size, the tokens the
  run covers and the LoRA identity, all read off the keys' contents;
- ``Cleared`` alone for a reset that happened.

Every other call (lookup, free, a rejected call, a refused reset, an allocation that does
not fit) emits nothing. Replaying the events from the empty multiset (+1 per stored key, -1
per removed key, empty on ``Cleared``) then gives the cached-key multiset of the pool after
every call: INV-EVENTS-REPLAY (`inv_events_replay`). The pool's map is a multiset, not a set:
equal content may be cached in two pages.

Pure and implementation-free: a checker translates an implementation's events (wire hashes)
into these terms through the same digest-to-content renaming as the state abstraction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from verikv.spec.manager import Content, ManagerState, PoolKey
from verikv.spec.pool import NULL_PAGE, PoolState

CachedKeys: TypeAlias = Counter[PoolKey]
"""How many pages hold each ``(content, group)`` key: what a router's index counts."""


@dataclass(frozen=True)
class Stored:
    """A run of pages of one request in one group got keys (vLLM's ``BlockStored``)."""

    group: int
    keys: tuple[Content, ...]
    parent: Content | None
    page_size: int
    tokens: tuple[int, ...]
    lora: Any


@dataclass(frozen=True)
class Removed:
    """Pages of one group lost their keys to an allocation (vLLM's ``BlockRemoved``)."""

    group: int
    keys: tuple[Content, ...]


@dataclass(frozen=True)
class Cleared:
    """Every key was dropped by a reset (vLLM's ``AllBlocksCleared``)."""


Event: TypeAlias = Stored | Removed | Cleared


def cached_keys(p: PoolState) -> CachedKeys:
    """The pool's cached-key multiset: each page's key, counted once per page holding it."""
    return Counter(cast(PoolKey, k) for k in p.key_of if k is not None)


def replay(cached: CachedKeys, events: Iterable[Event]) -> CachedKeys | None:
    """``cached`` after ``events``; None when a removal names a key no page holds (a
    consumer's count would go negative)."""
    out = Counter(cached)
    for event in events:
        if isinstance(event, Cleared):
            out = Counter()
        elif isinstance(event, Stored):
            out.update((k, event.group) for k in event.keys)
        else:
            for k in event.keys:
                if out[(k, event.group)] < 1:
                    return None
                out[(k, event.group)] -= 1
    return +out


def inv_events_replay(s: ManagerState, replayed: CachedKeys | None) -> bool:
    """INV-EVENTS-REPLAY: replaying every event since the manager was built (``replayed``)
    gives exactly the cached-key multiset of ``s``'s pool."""
    return replayed is not None and replayed == cached_keys(s.pool)


def inv_events_replay_step(pre: ManagerState, post: ManagerState, batch: object) -> bool:
    """INV-EVENTS-REPLAY, one call at a time (the inductive form): replaying the call's event
    ``batch`` on ``pre``'s cached-key multiset gives ``post``'s."""
    if not isinstance(batch, (tuple, list)) or not all(isinstance(e, (Stored, Removed, Cleared)) for e in batch):
        return False
    return replay(cached_keys(pre.pool), batch) == cached_keys(post.pool)


def parent_of(content: Content, first_base_page: int) -> Content | None:
    """The content of the request's chain before base page ``first_base_page`` (None at the
    chain's start): the same salt, the leading base pages."""
    salt, pages = content
    return None if first_base_page == 0 else (salt, pages[:first_base_page])


def stored_run(s: ManagerState, group: int, keys: Sequence[Content], first: int) -> Stored:
    """The `Stored` of pages ``first .. first + len(keys) - 1`` of a request in ``group`` with
    those contents (each key's content is the request's prefix to the end of its page)."""
    size = s.config.groups[group].page_size
    ratio = size // s.config.base_page_size
    last = keys[-1][1]
    covered = last[first * ratio:]
    tokens = tuple(t for page in covered for t in page[0])
    return Stored(group, tuple(keys), parent_of(keys[0], first * ratio), size, tokens,
                  covered[0][1] if covered else None)


def _removed(pre: ManagerState, new_pages: Sequence[int]) -> list[Event]:
    by_group: dict[int, list[Content]] = {}
    for page in new_pages:
        key = cast("PoolKey | None", pre.pool.key_of[page])
        if key is not None:
            by_group.setdefault(key[1], []).append(key[0])
    return [Removed(g, tuple(keys)) for g, keys in by_group.items()]


def _stored(pre: ManagerState, post: ManagerState, new_pages: Sequence[int]) -> list[Event]:
    fresh = set(new_pages)
    events: list[Event] = []
    for g in range(len(post.config.groups)):
        for _, entry in sorted(post.entries, key=lambda item: item[0]):
            run: list[tuple[int, Content]] = [
                (j, key[0]) for j, page in enumerate(entry.pages[g])
                if page != NULL_PAGE and (key := cast("PoolKey | None", post.pool.key_of[page])) is not None
                and (pre.pool.key_of[page] is None or page in fresh)]
            if run:
                events.append(stored_run(post, g, [k for _, k in run], run[0][0]))
    return events


def call_events(pre: ManagerState, post: ManagerState, new_pages: Sequence[int] = (),
                reset: bool = False) -> tuple[Event, ...]:
    """The batch one call emits: see the module docstring. ``new_pages``: the pages an
    allocation handed out, in allocation order; ``reset``: the call was a reset that happened.
    pre: one call separates ``pre`` and ``post``; a reset call changes nothing else."""
    if reset:
        return (Cleared(),)
    return (*_removed(pre, new_pages), *_stored(pre, post, new_pages))
