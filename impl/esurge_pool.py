"""eSurge's group- and request-aware pool methods, as thin adapters over the pool's key API.

`PagePool` knows pages and content keys only. eSurge's pool also answers by cache group
(`get_cached_page`) and registers a request's pages itself (`cache_full_pages`); those two
methods live here, written against the pool's public id-level API, and `PagePool` inherits
them so eSurge callers keep their call shapes. A group's key for a page is
`verikv.hashing.group_pool_key` ``(page_hash, group_id)`` (the key itself in group 0,
``PageHashWithGroupId(page_hash, group_id)`` in any other), the key the single-type managers store.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from operator import countOf
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from verikv.dp_sharding import checked_int
from verikv.errors import InvalidArgumentError, describe
from verikv.free_queue import NULL_PAGE_ID, CachePage, check_key, page_list
from verikv.hashing import PageHasher, PageKey, default_hasher, group_pool_key

if TYPE_CHECKING:
    from verikv.page_pool import PagePool


class ESurgePoolMethods:
    """eSurge's `get_cached_page` and `cache_full_pages` for `PagePool` (a mixin: ``self`` is
    always a `PagePool`, used only through its public methods)."""

    __slots__ = ()

    def get_cached_page(self, page_hash: PageKey, kv_cache_group_ids: Sequence[int], *,
                        dp_shard_hint: int | None = None,
                        data_parallel_size: int | None = None) -> list[CachePage] | None:
        """One cached page per group for ``page_hash``, or ``None`` if any group misses.

        Each is the oldest page under the group's pool key for ``page_hash`` (inside the hinted
        shard, if any).
        Counted in `prefix_cache_stats` as one query.
        """
        pool = cast("PagePool", self)
        check_key(page_hash)  # a key whose hash or equality fails is refused before any lookup
        group_ids = [checked_int(g, "kv_cache_group_id", minimum=0)
                     for g in page_list(kv_cache_group_ids, "kv_cache_group_ids")]
        keys: list[Hashable] = [group_pool_key(page_hash, gid) for gid in group_ids]
        found = pool.lookup_all_ids(keys, dp_shard_hint=dp_shard_hint, data_parallel_size=data_parallel_size)
        return None if found is None else [pool.page(pid) for pid in found]

    def cache_full_pages(self, request: Any, pages: Sequence[CachePage], page_hashes: list[PageKey],
                         num_cached_pages: int, num_full_pages: int, page_size: int,
                         kv_cache_group_id: int, *, hasher: PageHasher | None = None) -> None:
        """Register ``pages[num_cached_pages:num_full_pages]`` under the request's page keys.

        Missing keys are computed from ``request`` with ``hasher`` (default: the sha256
        default hasher), chained from ``page_hashes[-1]``, and appended to ``page_hashes``
        (the caller's per-request list). Null placeholders in the range are skipped: they hold
        no content, and the chain runs through the key list, not through the pages.
        """
        pool = cast("PagePool", self)
        first, last, size, group_id = _caching_range(num_cached_pages, num_full_pages, page_size, kv_cache_group_id)
        if hasher is not None and not isinstance(hasher, PageHasher):
            raise InvalidArgumentError(f"hasher must be a PageHasher or None, got {type(hasher).__name__}")
        if type(page_hashes) is not list:
            raise InvalidArgumentError(
                f"page_hashes must be the request's list of keys, got {type(page_hashes).__name__}")
        pages = page_list(pages, "pages")
        if first >= last:
            return
        _check_key_range(page_hashes, first, last, len(pages))
        ids = pool.own_ids(pages[first:last])
        pool.check_cacheable([pid for pid in ids if pid != NULL_PAGE_ID])
        new_hashes: list[PageKey] = []
        if len(page_hashes) < last:
            _check_token_source(request)
            new_hashes = (hasher or default_hasher()).hash_request(
                request, size, len(page_hashes), page_hashes[-1] if page_hashes else None, last)
        hashes = (page_hashes + new_hashes)[first:last]
        pairs = [(pid, group_pool_key(h, group_id)) for pid, h in zip(ids, hashes) if pid != NULL_PAGE_ID]
        if pairs:  # all or nothing: the caller's key list grows only once every page is registered
            pool.cache_page_ids([pid for pid, _ in pairs], [key for _, key in pairs])
        page_hashes.extend(new_hashes)


def _caching_range(num_cached_pages: object, num_full_pages: object, page_size: object,
                   kv_cache_group_id: object) -> tuple[int, int, int, int]:
    """`cache_full_pages`' counts, checked: (first, last, page size, group id)."""
    first = checked_int(num_cached_pages, "num_cached_pages", minimum=0)
    last = checked_int(num_full_pages, "num_full_pages", minimum=0)
    group_id = checked_int(kv_cache_group_id, "kv_cache_group_id", minimum=0)
    size = checked_int(page_size, "page_size", minimum=1)
    return first, last, size, group_id


def _check_key_range(page_hashes: list[PageKey], first: int, last: int, num_pages: int) -> None:
    """The caller's key list covers ``first`` pages and holds keys; ``last`` pages are given."""
    if len(page_hashes) < first:
        raise InvalidArgumentError(
            f"page_hashes has {len(page_hashes)} entries, fewer than num_cached_pages={first}")
    if last > num_pages:
        raise InvalidArgumentError(f"num_full_pages={last} exceeds the {num_pages} pages given")
    checked = page_hashes[first:last] + page_hashes[-1:]  # the keys used, and the chain's parent
    if countOf(map(type, checked), PageKey) != len(checked):
        raise InvalidArgumentError("page_hashes must hold PageKey keys")


def _check_token_source(request: Any) -> None:
    """`InvalidArgumentError` unless ``request`` has token ids to hash (``all_token_ids``)."""
    tokens = getattr(request, "all_token_ids", None)
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (Sequence, np.ndarray)):
        raise InvalidArgumentError(f"request {describe(request)} has no all_token_ids sequence to hash")
