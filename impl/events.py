"""Prefix-cache statistics and KV-cache events.

`PrefixCacheStats` counts lookups (queries) and hits since it was last taken; taking a
snapshot resets it, as eSurge/vLLM's ``make_prefix_cache_stats`` does, so a metrics loop sees
per-interval numbers. KV events (`PageStored`, `PageRemoved`, `AllPagesCleared`) tell an
external index which content keys a pool holds; an `EventLog` buffers them until drained. A
pool records events only when built with ``enable_kv_events=True``, so the hot path pays
nothing otherwise.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

import numpy as np

from verikv.dp_sharding import checked_int
from verikv.errors import InvalidArgumentError


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

    def __post_init__(self) -> None:
        self.requests = checked_int(self.requests, "requests", minimum=0)
        self.queries = checked_int(self.queries, "queries", minimum=0)
        self.hits = checked_int(self.hits, "hits", minimum=0, maximum=self.queries)
        if not isinstance(self.reset, bool):
            raise InvalidArgumentError(f"reset must be a bool, got {type(self.reset).__name__}")

    @property
    def hit_rate(self) -> float:
        """hits / queries, 0.0 before any query."""
        return self.hits / self.queries if self.queries else 0.0

    def record(self, queries: int, hits: int) -> None:
        """Count one lookup of ``queries`` units of which ``hits`` were found (0 <= hits <= queries)."""
        if type(queries) is not int or type(hits) is not int or not 0 <= hits <= queries:
            queries = checked_int(queries, "queries", minimum=0)
            hits = checked_int(hits, "hits", minimum=0, maximum=queries)
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

    def __post_init__(self) -> None:
        _check_event_fields(self)
        tokens = self.token_ids.tolist() if isinstance(self.token_ids, np.ndarray) else self.token_ids
        if not isinstance(tokens, (tuple, list)):
            raise InvalidArgumentError(f"token_ids must be a sequence of ints, got {type(tokens).__name__}")
        object.__setattr__(self, "token_ids", tuple(checked_int(t, "token id", minimum=0) for t in tokens))


@dataclass(frozen=True)
class PageRemoved:
    """A page lost its content key (evicted for reuse)."""

    page_id: int
    page_hash: int
    group_id: int | None

    def __post_init__(self) -> None:
        _check_event_fields(self)


def _check_event_fields(event: PageStored | PageRemoved) -> None:
    """Validate and normalise the fields both page events share (page 0 is never hashed)."""
    object.__setattr__(event, "page_id", checked_int(event.page_id, "page_id", minimum=1))
    if isinstance(event.page_hash, bool) or not isinstance(event.page_hash, numbers.Integral):
        raise InvalidArgumentError(f"page_hash must be an int, got {type(event.page_hash).__name__}")
    object.__setattr__(event, "page_hash", int(event.page_hash))
    if event.group_id is not None:
        object.__setattr__(event, "group_id", checked_int(event.group_id, "group_id", minimum=0))


@dataclass(frozen=True)
class AllPagesCleared:
    """Every content key was dropped (``reset_prefix_cache`` succeeded)."""


KVEvent: TypeAlias = PageStored | PageRemoved | AllPagesCleared


def describe_key(key: Any) -> tuple[int, int | None, tuple[int, ...]]:
    """``(hash value, group id, token ids)`` of a content key, for events.

    Understands `PageHashWithGroupId` and `PageHash` by shape (duck typing); any other
    hashable key is reported by its ``hash`` with no group and no tokens (a plain int by itself).
    Fields of the wrong type make the key count as "any other": describing a key never fails,
    since events are recorded after the pool has changed.
    """
    group_id = None
    if hasattr(key, "get_hash_value") and hasattr(key, "page_hash"):
        gid = getattr(key, "group_id", None)
        if type(gid) is int and gid >= 0:
            group_id, key = gid, key.page_hash
    value, tokens = getattr(key, "hash_value", None), getattr(key, "token_ids", None)
    if type(value) is int and type(tokens) is tuple and all(type(t) is int and t >= 0 for t in tokens):
        return value, group_id, tokens
    return (key if type(key) is int else hash(key)), group_id, ()


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
