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

None of these may change the implementation's state.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Protocol

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
