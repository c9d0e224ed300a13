"""Prefix-cache statistics and KV-cache events.

`PrefixCacheStats` counts lookups (queries) and hits since it was last taken; taking a
snapshot resets it, as eSurge/vLLM's ``make_prefix_cache_stats`` does, so a metrics loop sees
per-interval numbers. KV events (`PageStored`, `PageRemoved`, `AllPagesCleared`) tell an
external index which content keys a pool holds; an `EventLog` buffers them until drained. A
pool records events only when built with ``enable_kv_events=True``, so the hot path pays
nothing otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Union


@dataclass
class PrefixCacheStats:
    """Lookup counters for one interval.

    ``requests``: lookups performed (one per request or per page, as the recorder decides);
    ``queries``: units looked up (tokens or pages); ``hits``: units found; ``reset``: the
    prefix cache was reset during the interval.
    """

    requests: int = 0
    queries: int = 0
    hits: int = 0
    reset: bool = False

    @property
    def hit_rate(self) -> float:
        """hits / queries, 0.0 before any query."""
        return self.hits / self.queries if self.queries else 0.0

    def record(self, queries: int, hits: int) -> None:
        """Count one lookup of ``queries`` units of which ``hits`` were found."""
        self.requests += 1
        self.queries += queries
        self.hits += hits

    def take(self) -> PrefixCacheStats:
        """A snapshot of the counters; the counters restart from zero."""
        snapshot = replace(self)
        self.requests = self.queries = self.hits = 0
        self.reset = False
        return snapshot


@dataclass(frozen=True)
class PageStored:
    """A page was registered under a content key."""

    page_id: int
    page_hash: int
    group_id: int | None
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class PageRemoved:
    """A page lost its content key (evicted for reuse)."""

    page_id: int
    page_hash: int
    group_id: int | None


@dataclass(frozen=True)
class AllPagesCleared:
    """Every content key was dropped (``reset_prefix_cache`` succeeded)."""


KVEvent = Union[PageStored, PageRemoved, AllPagesCleared]


def describe_key(key: Any) -> tuple[int, int | None, tuple[int, ...]]:
    """``(hash value, group id, token ids)`` of a content key, for events.

    Understands `PageHashWithGroupId` and `PageHash` by shape (duck typing); any other
    hashable key is reported by its ``hash`` with no group and no tokens.
    """
    group_id = None
    if hasattr(key, "get_hash_value") and hasattr(key, "page_hash"):
        group_id = key.group_id
        key = key.page_hash
    if hasattr(key, "hash_value") and hasattr(key, "token_ids"):
        return key.hash_value, group_id, tuple(key.token_ids)
    return (key if isinstance(key, int) else hash(key)), group_id, ()


class EventLog:
    """A buffer of KV events, drained with `take`."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[KVEvent] = []

    def stored(self, page_id: int, key: Any) -> None:
        value, group_id, tokens = describe_key(key)
        self._events.append(PageStored(page_id, value, group_id, tokens))

    def removed(self, page_id: int, key: Any) -> None:
        value, group_id, _ = describe_key(key)
        self._events.append(PageRemoved(page_id, value, group_id))

    def cleared(self) -> None:
        self._events.append(AllPagesCleared())

    def take(self) -> list[KVEvent]:
        """Every event since the last take, oldest first; the buffer is emptied."""
        events, self._events = self._events, []
        return events
