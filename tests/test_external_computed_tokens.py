"""External computed tokens (vLLM's ``num_external_computed_tokens``: KV connectors, P/D
disaggregation): `allocate_slots` gives pages to tokens loaded from outside, after the local
prefix hits; they are not hits and need no compute; they are cached once loaded.

Expected page ids are worked out by hand (page size 4, pages handed out from 1 upward) and
checked against the spec (`verikv.spec.manager.allocate_slots`) on the same calls. vLLM's
behaviour mirrored: an asynchronous load allocates with no new token and delayed caching, and
`cache_pages` registers the loaded pages; a synchronous load caches them at allocation; the
external pages are fresh pages (no reference is taken on cached pages for them); prefix-cache
statistics count lookups only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, MambaSpec, Request, SlidingWindowSpec
from verikv.errors import InvalidArgumentError
from verikv.spec import invariants as inv, manager as m
from verikv.spec.pool import PreconditionError

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
FULL = CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))


def full_manager(num_pages: int = 12) -> CacheManager:
    return CacheManager(num_pages, [FULL], 32)


def test_async_load_allocates_for_external_tokens_and_caches_them_once_loaded() -> None:
    mgr = full_manager()
    a = Request("a", list(range(10)))
    mgr.allocate_slots(a, 10)  # pages 1, 2, 3; pages 1, 2 cached
    b = Request("b", list(range(10)) + list(range(50, 62)))  # 22 tokens: 8 local hits, 12 external
    hit, n = mgr.get_computed_pages(b)
    assert (hit.get_page_ids(), n) == (([1, 2],), 8)
    new = mgr.allocate_slots(b, 0, 8, hit, delay_cache_pages=True, num_external_computed_tokens=12)
    assert new is not None and new.get_page_ids() == ([4, 5, 6],)  # tokens 8..19: fresh pages
    assert mgr.get_page_ids("b") == ([1, 2, 4, 5, 6],)
    assert [mgr.page_pool.ref_count(p) for p in (1, 2, 4, 5, 6)] == [2, 2, 1, 1, 1]
    assert all(mgr.page_pool.key_of(p) is None for p in (4, 5, 6))  # not loaded yet: not cached
    c = Request("c", list(range(10)) + list(range(50, 62)))
    assert mgr.get_computed_pages(c)[1] == 8  # nobody hits the pages still loading
    b.num_computed_tokens = 20  # the connector finished loading
    mgr.cache_pages(b, 20)
    assert all(mgr.page_pool.key_of(p) is not None for p in (4, 5, 6))
    assert mgr.get_computed_pages(c)[1] == 20


def test_sync_load_caches_the_external_pages_at_allocation() -> None:
    mgr = full_manager()
    b = Request("b", list(range(13)))
    new = mgr.allocate_slots(b, 1, num_external_computed_tokens=12)  # 12 loaded, 1 computed
    assert new is not None and new.get_page_ids() == ([1, 2, 3, 4],)
    assert mgr.num_cached_pages("b") == [3]
    assert mgr.get_computed_pages(Request("c", list(range(13))))[1] == 12


def test_external_tokens_are_not_hits_in_the_statistics() -> None:
    mgr = full_manager()
    mgr.make_prefix_cache_stats()
    mgr.allocate_slots(Request("b", list(range(13))), 1, num_external_computed_tokens=12)
    stats = mgr.make_prefix_cache_stats()
    assert (stats.queries, stats.hits) == (0, 0)


def test_external_allocation_is_all_or_nothing() -> None:
    mgr = full_manager(num_pages=4)  # 3 usable pages
    b = Request("b", list(range(17)))
    before = mgr.page_pool.free_list_ids()
    assert mgr.allocate_slots(b, 1, num_external_computed_tokens=16) is None  # needs 5 pages
    assert mgr.page_pool.free_list_ids() == before and mgr.request_ids() == []


@pytest.mark.parametrize("num_new, external", [(0, 0), (1, -1), (0, 33), (1, True)])
def test_bad_external_counts_are_rejected(num_new: int, external: Any) -> None:
    mgr = full_manager()
    with pytest.raises(InvalidArgumentError):
        mgr.allocate_slots(Request("b", list(range(40))), num_new, num_external_computed_tokens=external)
    assert mgr.request_ids() == []


def test_external_tokens_with_a_mamba_align_group_are_rejected() -> None:
    mgr = CacheManager(12, [FULL, CacheGroupSpec(MambaSpec(page_size=4, shapes=((2,),), dtype=np.float32))], 32,
                       mamba_cache_mode="align")
    with pytest.raises(InvalidArgumentError):
        mgr.allocate_slots(Request("b", list(range(13))), 1, num_external_computed_tokens=8)


def test_spec_gives_the_same_pages_and_keys() -> None:
    config = m.ManagerConfig((m.GroupLayout("full", 4), m.GroupLayout("sliding", 4, 4)), 16, 32)
    s = m.init(config)
    a = m.RequestView("a", tuple(range(10)))
    s, _ = m.allocate_slots(s, a, 10)
    b = m.RequestView("b", tuple(range(10)) + tuple(range(50, 62)))
    hit = m.lookup(s, b)
    s, new = m.allocate_slots(s, b, 0, hit.num_tokens, hit.pages, delay_cache_pages=True,
                              num_external_computed_tokens=12)
    assert inv.violated_manager_invariants(s, ghost=True) == []
    s = m.cache_pages(s, m.RequestView(b.request_id, b.tokens, 20), 20)
    assert inv.violated_manager_invariants(s, ghost=True) == []

    mgr = CacheManager(16, [FULL, CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=4, **KW))], 32)
    ra, rb = Request("a", list(a.tokens)), Request("b", list(b.tokens))
    mgr.allocate_slots(ra, 10)
    got_hit, n = mgr.get_computed_pages(rb)
    assert (tuple(map(tuple, got_hit.get_page_ids())), n) == (hit.pages, hit.num_tokens)
    got = mgr.allocate_slots(rb, 0, n, got_hit, delay_cache_pages=True, num_external_computed_tokens=12)
    assert got is not None and tuple(map(tuple, got.get_page_ids())) == new
    rb.num_computed_tokens = 20
    mgr.cache_pages(rb, 20)
    assert [mgr.page_pool.key_of(p) is not None for p in range(16)] == [k is not None for k in s.pool.key_of]


def test_spec_rejects_what_the_implementation_rejects() -> None:
    s = m.init(m.ManagerConfig((m.GroupLayout("full", 4), m.GroupLayout("mamba_align", 4)), 16, 32))
    with pytest.raises(PreconditionError):
        m.allocate_slots(s, m.RequestView("b", tuple(range(13))), 1, num_external_computed_tokens=8)
    with pytest.raises(PreconditionError):
        m.allocate_slots(m.init(m.ManagerConfig((m.GroupLayout("full", 4),), 16, 32)),
                         m.RequestView("b", tuple(range(13))), 0)
