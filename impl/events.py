"""Prefix-cache statistics and KV-cache events.

`PrefixCacheStats` counts lookups (queries) and hits since it was last taken; taking a
snapshot resets it, as eSurge/vLLM's ``make_prefix_cache_stats`` does, so a metrics loop sees
per-interval numbers.

KV events tell an external index (a KV-cache-aware router) which content keys a pool holds:
`PageStored` (a run of pages of one request in one group got keys: their wire hashes, the
parent hash, the tokens they cover, the page size, LoRA identity, extra keys, medium, group),
`PageRemoved` (pages lost their keys) and `AllPagesCleared` (a reset). They carry the fields
of vLLM's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` under verikv's names;
`verikv.kv_events` puts them on vLLM's wire. An `EventLog` receives one record per page from
the pool and, inside a manager call (`begin_call` / `end_call`), merges consecutive records of
one kind, group and caching run into one event, so a call emits one event per run, not one
per page. A pool records events only when built with ``enable_kv_events=True``, so the hot
path pays nothing otherwise. docs/events.md describes the model.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeAlias, TypeGuard, TypeVar

import numpy as np

from verikv.cache_specs import ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec, SlidingWindowSpec
from verikv.dp_sharding import checked_int
from verikv.errors import InvalidArgumentError, VeriKVError, describe
from verikv.hashing import key_text, key_value


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


#: where the pages of a pool live, as vLLM names the medium of its GPU block pool
MEDIUM_GPU = "GPU"
#: a page hash as routers receive it (vLLM's ``ExternalBlockHash``): bytes, or an int when a
#: consumer asks for 64-bit integer hashes
WireHash: TypeAlias = bytes | int
#: bytes of an integer hash value on the wire: the width of a SHA-256 digest
_HASH_WIDTH = 32


def split_group(key: object) -> tuple[object, int | None]:
    """``(content key, group id)`` of a pool key: a ``bytes`` key is the content key of a page
    of group 0 (`verikv.hashing.group_pool_key`), a key paired with its cache group
    (`PageHashWithGroupId`, or any ``(key, int)`` pair) is split, any other key has no group."""
    if type(key) is bytes:
        return key, 0
    gid = getattr(key, "group_id", None)
    if type(gid) is int and gid >= 0 and hasattr(key, "page_hash"):
        return key.page_hash, gid
    if type(key) is tuple and len(key) == 2 and type(key[1]) is int and key[1] >= 0:
        return key[0], key[1]
    return key, None


def wire_hash(key: object) -> bytes:
    """The hash a router sees for a content key: a ``bytes`` key as it is; a `PageHash` (or
    any key with an int ``hash_value``) or a plain int as its value in 32 little-endian bytes,
    which for a SHA-256 key is the digest itself, as verikv reads a digest as a little-endian
    int (the shortest signed form for a value outside ``[0, 2**256)``, which only a user's
    hash callable makes). Any other hashable key is reported by its builtin ``hash``: such keys
    only come from direct `PagePool` use, and the value is then stable within the process only.
    Fails (`InvalidArgumentError`) only for a key whose hash fails, which no pool holds."""
    if type(key) is bytes:
        return key
    value = getattr(key, "hash_value", key)
    if type(value) is not int:
        value = _builtin_hash(key)
    if 0 <= value < 1 << (8 * _HASH_WIDTH):
        return value.to_bytes(_HASH_WIDTH, "little")
    return value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)


def _builtin_hash(key: object) -> int:
    try:
        return hash(key)
    except Exception as exc:  # unhashable, or a user __hash__ that raises
        raise InvalidArgumentError(f"a page key must be hashable, got {describe(key)}: {exc}") from None


def _is_sequence(value: object) -> TypeGuard[Sequence[Any] | np.ndarray]:
    """A sequence of items (a NumPy vector included), not a str or bytes."""
    return (isinstance(value, Sequence) and not isinstance(value, (str, bytes))) or \
        (isinstance(value, np.ndarray) and value.ndim == 1)


def _hash_tuple(values: object, what: str) -> tuple[bytes, ...]:
    if not isinstance(values, (tuple, list)) or not all(type(v) is bytes for v in values):
        raise InvalidArgumentError(f"{what} must be a sequence of bytes, got {describe(values)}")
    return tuple(values)


def _id_tuple(values: object, what: str, minimum: int) -> tuple[int, ...]:
    items = values.tolist() if isinstance(values, np.ndarray) else values
    if not isinstance(items, (tuple, list)):
        raise InvalidArgumentError(f"{what} must be a sequence of ints, got {type(items).__name__}")
    return tuple(checked_int(v, what, minimum=minimum) for v in items)


def _optional_count(value: object, what: str, minimum: int) -> int | None:
    return None if value is None else checked_int(value, what, minimum=minimum)


def _optional_text(value: object, what: str) -> str | None:
    """``None`` or an exact ``str`` that UTF-8 (hence msgpack) can encode."""
    if value is None:
        return None
    if type(value) is not str:
        raise InvalidArgumentError(f"{what} must be a str, got {describe(value)}")
    return key_text(value, what)


def _check_pages(event: PageStored | PageRemoved) -> None:
    """Validate and normalise the fields both page events share."""
    hashes = _hash_tuple(event.page_hashes, "page_hashes")
    if not hashes:
        raise InvalidArgumentError("a page event names at least one page")
    object.__setattr__(event, "page_hashes", hashes)
    ids = _id_tuple(event.page_ids, "page_ids", 1)  # page 0 is never hashed
    if ids and len(ids) != len(hashes):
        raise InvalidArgumentError(f"{len(ids)} page_ids for {len(hashes)} page_hashes")
    object.__setattr__(event, "page_ids", ids)
    object.__setattr__(event, "group_id", _optional_count(event.group_id, "group_id", 0))
    if event.medium is None:
        raise InvalidArgumentError("medium must be a str, got None")
    _optional_text(event.medium, "medium")


@dataclass(frozen=True)
class PageStored:
    """A run of pages of one request in one cache group got their content keys.

    ``page_hashes`` (wire hashes, `wire_hash`) in chain order; ``parent_page_hash`` the hash of
    the page before the first one in the request's chain (``None``: the run starts the chain,
    or the pages were cached through the bare `PagePool` API, which knows no chain);
    ``token_ids`` the tokens the run covers (``page_size`` per page, null placeholders of a
    windowed group included, as vLLM reports the covered range; empty when unknown);
    ``page_size`` tokens per page (``None`` when unknown: bare pool); ``lora_id`` /
    ``lora_name`` the request's adapter; ``extra_keys`` one entry per page (the tagged extra
    keys its hash covers, ``None`` for a page without any), or ``None`` when unknown;
    ``spec_kind`` / ``sliding_window`` the group's attention kind in vLLM's words
    (``"full_attention"``, ``"sliding_window"``, ...) and window, when the recorder knows them;
    ``page_ids`` the physical pages (verikv only: vLLM does not publish block ids).
    """

    page_hashes: tuple[bytes, ...]
    parent_page_hash: bytes | None = None
    token_ids: tuple[int, ...] = ()
    page_size: int | None = None
    group_id: int | None = None
    lora_id: int | None = None
    lora_name: str | None = None
    extra_keys: tuple[Any, ...] | None = None
    medium: str = MEDIUM_GPU
    page_ids: tuple[int, ...] = ()
    spec_kind: str | None = None
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        _check_pages(self)
        _optional_text(self.spec_kind, "spec_kind")
        _optional_text(self.lora_name, "lora_name")
        object.__setattr__(self, "sliding_window", _optional_count(self.sliding_window, "sliding_window", 1))
        if self.parent_page_hash is not None and type(self.parent_page_hash) is not bytes:
            raise InvalidArgumentError(f"parent_page_hash must be bytes or None, got {describe(self.parent_page_hash)}")
        tokens = _id_tuple(self.token_ids, "token_ids", 0)
        object.__setattr__(self, "token_ids", tokens)
        size = _optional_count(self.page_size, "page_size", 1)
        object.__setattr__(self, "page_size", size)
        if tokens and (size is None or len(tokens) % size or len(tokens) < size * len(self.page_hashes)):
            raise InvalidArgumentError(
                f"{len(tokens)} token_ids do not cover {len(self.page_hashes)} pages of {describe(size)} tokens")
        object.__setattr__(self, "lora_id", _optional_count(self.lora_id, "lora_id", 0))
        if self.extra_keys is not None:
            if not isinstance(self.extra_keys, (tuple, list)) or len(self.extra_keys) != len(self.page_hashes):
                raise InvalidArgumentError(f"extra_keys must hold one entry per page "
                                           f"({len(self.page_hashes)}), got {describe(self.extra_keys)}")
            object.__setattr__(self, "extra_keys", tuple(key_value(k) for k in self.extra_keys))


@dataclass(frozen=True)
class PageRemoved:
    """Pages of one cache group lost their content keys (evicted for reuse)."""

    page_hashes: tuple[bytes, ...]
    group_id: int | None = None
    medium: str = MEDIUM_GPU
    page_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_pages(self)


@dataclass(frozen=True)
class AllPagesCleared:
    """Every content key was dropped (``reset_prefix_cache`` succeeded)."""


KVEvent: TypeAlias = PageStored | PageRemoved | AllPagesCleared


@dataclass(frozen=True)
class StoreContext:
    """What a manager knows about a run of pages it cached for one request in one group,
    beyond the pool keys: the `PageStored` of that run is described with it.

    ``parent_key`` is the content key of the page before the run (``None`` at the chain's
    start); ``token_ids`` the tokens of the run's pages; ``extra_keys`` one entry per page, or
    ``None`` when no page has any.
    """

    page_size: int
    parent_key: Hashable | None
    token_ids: Sequence[int] | np.ndarray
    extra_keys: Sequence[Any] | None = None
    lora_id: int | None = None
    lora_name: str | None = None
    spec_kind: str | None = None
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        """Check the shapes here, so a bad context is refused when it is made, not when the
        `PageStored` it describes is built (each token and key is checked there)."""
        object.__setattr__(self, "page_size", checked_int(self.page_size, "page_size", minimum=1))
        if self.parent_key is not None:
            _builtin_hash(self.parent_key)
        if not _is_sequence(self.token_ids):
            raise InvalidArgumentError(f"token_ids must be a sequence, got {describe(self.token_ids)}")
        if self.extra_keys is not None and not _is_sequence(self.extra_keys):
            raise InvalidArgumentError(f"extra_keys must be a sequence or None, got {describe(self.extra_keys)}")
        object.__setattr__(self, "lora_id", _optional_count(self.lora_id, "lora_id", 0))
        object.__setattr__(self, "sliding_window", _optional_count(self.sliding_window, "sliding_window", 1))
        _optional_text(self.lora_name, "lora_name")
        _optional_text(self.spec_kind, "spec_kind")


#: ``describe(group_id, page_ids) -> StoreContext``: how a manager describes a run of pages it
#: cached (the pool's keys of those pages are already known to the log)
Describer: TypeAlias = Callable[[int | None, tuple[int, ...]], StoreContext]


def spec_metadata(spec: object) -> tuple[str, int | None]:
    """vLLM's ``(kv_cache_spec_kind, kv_cache_spec_sliding_window)`` of a cache spec."""
    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window", spec.sliding_window
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return "chunked_local_attention", None
    if isinstance(spec, MambaSpec):
        return "mamba", None
    if isinstance(spec, FullAttentionSpec):
        return ("mla_attention" if spec.use_mla else "full_attention"), None
    return "unknown", None


def describe_run(request: Any, spec: object, page_size: int, first: int, count: int, parent_key: Hashable | None,
                 extra_keys_of: Callable[[Any, int, int], Any] | None = None) -> StoreContext:
    """The `StoreContext` of pages ``first .. first+count-1`` of ``request`` in a group of
    ``spec``: their tokens, their extra keys from ``extra_keys_of(request, index, page_size)``,
    and the request's LoRA identity (its ``lora_id`` / ``lora_name``, when it has them)."""
    page_size = checked_int(page_size, "page_size", minimum=1)
    first = checked_int(first, "first", minimum=0)
    count = checked_int(count, "count", minimum=0)
    if extra_keys_of is not None and not callable(extra_keys_of):
        raise InvalidArgumentError(f"extra_keys_of must be callable or None, got {describe(extra_keys_of)}")
    all_tokens = getattr(request, "all_token_ids", None)
    if not _is_sequence(all_tokens):
        raise InvalidArgumentError(f"request {describe(request)} has no all_token_ids sequence")
    kind, window = spec_metadata(spec)
    tokens = all_tokens[first * page_size:(first + count) * page_size]
    pages = range(first, first + count)
    extra = None if extra_keys_of is None else [extra_keys_of(request, i, page_size) for i in pages]
    return StoreContext(page_size, parent_key, tokens, extra if extra is not None and any(extra) else None,
                        getattr(request, "lora_id", None), getattr(request, "lora_name", None), kind, window)


_STORED, _REMOVED, _CLEARED = 0, 1, 2
#: one page report: (kind, page id, pool key, the description of its run when stored)
_Report: TypeAlias = tuple[int, int, Any, Describer | None]
_R = TypeVar("_R")


class EventLog:
    """A buffer of KV events, drained with `take`.

    The pool reports one page at a time (`stored`, `removed`, `cleared`). Outside a call each
    report is an event of its own; between `begin_call` and the matching `end_call` reports are
    held and then merged in the order they happened: consecutive stores of one group and one
    caching run (`set_store_context`) become one `PageStored`; consecutive removals become one
    `PageRemoved` per group (removals of distinct pages commute). A consumer that replays the
    events therefore rebuilds the pool's cached map exactly.
    """

    __slots__ = ("_context", "_depth", "_events", "_pending", "medium")

    def __init__(self, medium: str = MEDIUM_GPU) -> None:
        if medium is None:
            raise InvalidArgumentError("medium must be a str, got None")
        self.medium: str = _optional_text(medium, "medium")  # type: ignore[assignment]  # not None here
        self._events: list[KVEvent] = []
        self._pending: list[_Report] = []
        self._depth = 0
        self._context: Describer | None = None

    # --- what the pool reports ------------------------------------------------------------

    def stored(self, page_id: int, key: Any) -> None:
        """Page ``page_id`` (>= 1) got the pool key ``key`` (hashable, not None)."""
        self._report(_STORED, page_id, key, self._context)

    def removed(self, page_id: int, key: Any) -> None:
        """Page ``page_id`` (>= 1) lost the pool key ``key``."""
        self._report(_REMOVED, page_id, key, None)

    def cleared(self) -> None:
        """Every key was dropped."""
        self._report(_CLEARED, 0, None, None)

    def _report(self, kind: int, page_id: int, key: Any, context: Describer | None) -> None:
        if kind != _CLEARED:
            page_id = _checked_report(page_id, key)
        report = (kind, page_id, key, context)
        if self._depth:
            self._pending.append(report)
        else:  # outside a call nothing is pending: the report is an event of its own
            self._events.extend(self._merged([report]))

    # --- what a manager brackets ----------------------------------------------------------

    def begin_call(self) -> None:
        """Hold the reports of one manager call (calls nest; the outermost one emits)."""
        self._depth += 1

    def end_call(self) -> None:
        """End a call: at the outermost level, merge the held reports into events.

        If a run's description fails (its describer raises), the error leaves with the log
        as it was: the reports still held, the call still open.
        """
        if self._depth <= 0:
            raise InvalidArgumentError("end_call without a matching begin_call")
        if self._depth == 1:
            self._events.extend(self._merged(self._pending))
            self._pending = []
            self._context = None
        self._depth -= 1

    def set_store_context(self, describe: Describer | None) -> None:
        """Describe the runs of pages stored from now on with ``describe`` (``None``: each page
        from its key alone). It is called when the call ends, once per run."""
        if describe is not None and not callable(describe):
            raise InvalidArgumentError(f"a store context is a callable or None, got {type(describe).__name__}")
        self._context = describe

    def recording(self, method: Callable[..., _R], describer_for: Callable[[Any], Describer]) -> Callable[..., _R]:
        """``method`` (a manager call whose first parameter is ``request``) as one call of this
        log: its reports become its events when it returns or raises, and the runs it stores
        are described by ``describer_for(request)``."""
        if not callable(method) or not callable(describer_for):
            raise InvalidArgumentError("recording needs a callable method and a callable describer_for")
        return _RecordedCall(self, method, describer_for)

    def take(self) -> list[KVEvent]:
        """Every event since the last take, oldest first; the buffer is emptied."""
        events, self._events = self._events, []
        return events

    def peek(self) -> list[KVEvent]:
        """Every event since the last take, oldest first, leaving them in the buffer."""
        return list(self._events)

    # --- merging --------------------------------------------------------------------------

    def _merged(self, pending: list[_Report]) -> list[KVEvent]:
        """The events of ``pending`` reports: one per run (and group). Reads the log only."""
        events: list[KVEvent] = []
        start = 0
        for i in range(1, len(pending) + 1):
            if i == len(pending) or not _same_run(pending[start], pending[i]):
                events.extend(map(self._event, _by_group(pending[start:i])))
                start = i
        return events

    def _event(self, run: list[_Report]) -> KVEvent:
        kind, _, first_key, context = run[0]
        if kind == _CLEARED:
            return AllPagesCleared()
        ids = tuple(r[1] for r in run)
        contents = [split_group(r[2])[0] for r in run]
        group_id = split_group(first_key)[1]
        hashes = tuple(map(wire_hash, contents))
        if kind == _REMOVED:
            return PageRemoved(hashes, group_id, self.medium, ids)
        if context is None:
            return _stored_from_keys(contents, hashes, group_id, self.medium, ids)
        try:
            description = context(group_id, ids)
        except VeriKVError:
            raise
        except Exception as exc:  # the describer is the caller's code: its failure is reported typed
            raise InvalidArgumentError(f"describing pages {ids} failed: {type(exc).__name__}: {exc}") from None
        if not isinstance(description, StoreContext):
            raise InvalidArgumentError(f"a describer returns a StoreContext, got {describe(description)}")
        return self._described(description, hashes, group_id, ids)

    def _described(self, context: StoreContext, hashes: tuple[bytes, ...], group_id: int | None,
                   ids: tuple[int, ...]) -> PageStored:
        parent = None if context.parent_key is None else wire_hash(split_group(context.parent_key)[0])
        extra = context.extra_keys
        return PageStored(hashes, parent, tuple(context.token_ids), context.page_size, group_id,
                          context.lora_id, context.lora_name, None if extra is None else tuple(extra),
                          self.medium, ids, context.spec_kind, context.sliding_window)


class _RecordedCall(Generic[_R]):
    """A manager method recorded as one call of an `EventLog` (`EventLog.recording`). An object
    rather than a closure so that ``copy.deepcopy`` of a manager copies it with the manager:
    the copy's bound method and log, not the original's (a closure would be shared)."""

    __slots__ = ("__wrapped__", "describer_for", "log")

    def __init__(self, log: EventLog, method: Callable[..., _R], describer_for: Callable[[Any], Describer]) -> None:
        self.log = log
        self.__wrapped__ = method
        self.describer_for = describer_for

    def __call__(self, *args: Any, **kwargs: Any) -> _R:
        log = self.log
        log.begin_call()
        try:
            log.set_store_context(self.describer_for(args[0] if args else kwargs.get("request")))
            return self.__wrapped__(*args, **kwargs)
        finally:
            log.end_call()


def _checked_report(page_id: object, key: object) -> int:
    """The page of a report (an int >= 1: page 0 is never hashed), whose key must be hashable."""
    if key is None:
        raise InvalidArgumentError("a page key cannot be None")
    if type(key) is not bytes:
        _builtin_hash(key)
    return page_id if type(page_id) is int and page_id >= 1 else checked_int(page_id, "page_id", minimum=1)


def _same_run(a: _Report, b: _Report) -> bool:
    """Whether report ``b`` joins the run that report ``a`` opened: removals join removals
    (of any group: removals of distinct pages commute, so `_by_group` may regroup them);
    stores join stores of the same group described by the same run."""
    if a[0] != b[0] or a[0] == _CLEARED:
        return False
    if a[0] == _REMOVED:
        return True
    if a[3] is None or a[3] is not b[3]:
        return False  # without a description nothing says two pages form one chain run
    return split_group(a[2])[1] == split_group(b[2])[1]


def _by_group(run: list[_Report]) -> list[list[_Report]]:
    """A run split by group, the groups in order of first appearance (a store run has one)."""
    groups: dict[int | None, list[_Report]] = {}
    for report in run:
        groups.setdefault(split_group(report[2])[1], []).append(report)
    return list(groups.values())


def _stored_from_keys(contents: list[object], hashes: tuple[bytes, ...], group_id: int | None, medium: str,
                      ids: tuple[int, ...]) -> PageStored:
    """A `PageStored` for one page cached without a manager's context: tokens and extra keys
    are read from a `PageHash` key (a key without them reports none)."""
    (key,) = contents
    tokens = getattr(key, "token_ids", ())
    if not (type(tokens) is tuple and tokens and all(type(t) is int and t >= 0 for t in tokens)):
        return PageStored(hashes, group_id=group_id, medium=medium, page_ids=ids)
    return PageStored(hashes, None, tokens, len(tokens), group_id, extra_keys=(getattr(key, "extra_keys", None),),
                      medium=medium, page_ids=ids)
