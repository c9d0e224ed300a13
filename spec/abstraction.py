"""Abstraction functions: from a live implementation to the spec's immutable state.

The spec never imports the implementation. It reads it through small read-only protocols
(duck typing), so any engine's pool or manager can be checked against the spec by
providing the same handful of members.

Pool protocol (what `abstract_pool` reads; `verikv.PagePool` implements it):

- ``num_pages: int`` — total pages, including the null page 0;
- ``free_order: str`` — ``"esurge"`` or ``"unhashed-first"`` (see `verikv.spec.pool.free`);
- ``ref_count(page_id) -> int`` — reference count of a page (0 for the null page);
- ``key_of(page_id) -> Hashable | None`` — the content key a page is registered under;
- ``free_list_ids() -> list[int]`` — free page ids, head (next handed out) to tail;
- ``cached_items() -> Iterable[tuple[Hashable, Sequence[int]]]`` — the cached map, each
  key with its page ids oldest first.

Manager protocol (what `abstract_manager` reads; `verikv.CacheManager` implements it):

- ``page_pool`` — the shared pool, read through the pool protocol above;
- ``max_model_len: int``, ``enable_caching: bool``, ``use_eagle: bool``,
  ``data_parallel_size: int`` — construction values (caching is off with zero groups);
- ``group_layouts() -> Sequence[tuple[str, int, int]]`` — per cache group ``(kind,
  page_size, span)`` with kind ``"full"``, ``"sliding"``, ``"chunked"``, ``"mamba"`` or
  ``"mamba_align"`` (a Mamba group whose states are cached at page-aligned positions) and span
  the window / chunk size (0 otherwise), as `verikv.spec.manager.GroupLayout`;
- ``request_ids() -> Iterable[str]`` — the requests that hold an entry (pages in every group);
- ``get_page_ids(request_id) -> Sequence[Sequence[int]]`` — per group, the request's page ids
  (0 for null placeholders);
- ``num_cached_pages(request_id) -> Sequence[int]`` — per group, the leading pages cached;
- ``request_shard(request_id) -> int | None`` — the DP shard the request's pages come from.

The manager's own content digests differ from the spec's keys (the contents themselves):
`abstract_manager` takes a ``rename`` function from implementation pool keys to spec pool
keys (the Hypothesis machine learns it as pages get cached and checks it stays injective).
Ghost state (request key lists, page contents) is spec-only and left empty.

None of these may change the implementation's state.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol

from verikv.spec.manager import Entry, GroupLayout, ManagerConfig, ManagerState
from verikv.spec.pool import PoolState


class PoolLike(Protocol):
    """The read-only members `abstract_pool` needs (see the module docstring)."""

    num_pages: int
    free_order: str

    def ref_count(self, page_id: int) -> int: ...

    def key_of(self, page_id: int) -> Hashable | None: ...

    def free_list_ids(self) -> list[int]: ...

    def cached_items(self) -> Iterable[tuple[Hashable, Sequence[int]]]: ...


def abstract_pool(pool: PoolLike) -> PoolState:
    """The `PoolState` a pool implementation stands for (reads all pages: O(num_pages))."""
    n = pool.num_pages
    return PoolState(
        num_pages=n,
        ref=tuple(pool.ref_count(p) for p in range(n)),
        free=tuple(pool.free_list_ids()),
        key_of=tuple(pool.key_of(p) for p in range(n)),
        cached=frozenset((key, tuple(ids)) for key, ids in pool.cached_items()),
        free_order=pool.free_order,  # type: ignore[arg-type]
    )


class ManagerLike(Protocol):
    """The read-only members `abstract_manager` needs (see the module docstring)."""

    @property
    def page_pool(self) -> PoolLike:  # read-only, so a manager's concrete pool type stands in
        ...

    max_model_len: int
    enable_caching: bool
    use_eagle: bool
    data_parallel_size: int

    def group_layouts(self) -> Sequence[tuple[str, int, int]]: ...

    def request_ids(self) -> Iterable[str]: ...

    def get_page_ids(self, request_id: str) -> Sequence[Sequence[int]]: ...

    def num_cached_pages(self, request_id: str) -> Sequence[int]: ...

    def request_shard(self, request_id: str) -> int | None: ...


def abstract_manager(manager: ManagerLike,
                     rename: Callable[[Hashable], Hashable] | None = None) -> ManagerState:
    """The `ManagerState` a manager implementation stands for, its pool keys renamed.

    ``rename`` maps each implementation pool key to the spec key it stands for (identity when
    omitted). The ghost fields stay empty: they exist only on the spec side.
    """
    pool = abstract_pool(manager.page_pool)
    if rename is not None:
        pool = PoolState(
            num_pages=pool.num_pages,
            ref=pool.ref,
            free=pool.free,
            key_of=tuple(None if k is None else rename(k) for k in pool.key_of),
            cached=frozenset((rename(k), ids) for k, ids in pool.cached),
            free_order=pool.free_order,
        )
    config = ManagerConfig(
        groups=tuple(GroupLayout(kind, page_size, span)  # type: ignore[arg-type]
                     for kind, page_size, span in manager.group_layouts()),
        num_pages=pool.num_pages,
        max_model_len=manager.max_model_len,
        enable_caching=manager.enable_caching,
        use_eagle=manager.use_eagle,
        data_parallel_size=manager.data_parallel_size,
        free_order=pool.free_order,
        # (an option of verikv's manager; a manager without it caches every sliding page)
        skip_unreachable_sliding_pages=getattr(manager, "skip_unreachable_sliding_pages", False),
        # (likewise: a manager without it follows the drop-once EAGLE rule)
        eagle_rule=getattr(manager, "eagle_rule", "drop-once"),
    )
    entries = frozenset(
        (rid, Entry(tuple(tuple(ids) for ids in manager.get_page_ids(rid)),
                    tuple(manager.num_cached_pages(rid)), manager.request_shard(rid)))
        for rid in manager.request_ids()
    )
    return ManagerState(config, pool, entries)
