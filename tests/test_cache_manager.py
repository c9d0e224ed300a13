"""CacheManager and CachePages end to end: eSurge's observable behaviour and our departures."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from layouts import KW, full, ids, mamba, named, running, sliding

from verikv import (
    AllPagesCleared,
    CacheGroupSpec,
    CacheManager,
    CachePages,
    ChunkedLocalAttentionSpec,
    ForeignPageError,
    InvalidArgumentError,
    PageRemoved,
    PageStored,
    Request,
    RequestStatus,
    VeriKVError,
)
from verikv.coordinators import LastLookup
from verikv.free_queue import CachePage
from verikv.hashing import PageHasher
from verikv.sizing import get_preset, plan_kv_cache


def manager(num_pages: int = 16, groups=None, max_model_len: int = 64, **kw) -> CacheManager:
    return CacheManager(num_pages, groups or [full()], max_model_len, hash_seed=0, **kw)


def admit(m: CacheManager, req: Request, **kw) -> CachePages | None:
    """Lookup + allocate the rest of the prompt, as a scheduler admits a request."""
    hits, n = m.get_computed_pages(req, **kw)
    new = m.allocate_slots(req, req.num_tokens - n, n, hits, **kw)
    if new is not None:
        req.num_computed_tokens = req.num_tokens
    return new


def test_lru_order_of_a_freed_request_esurge_example():
    # eSurge's free order: pool of 8, request holds [1,2,3,4], 5,6,7 free -> free list 5,6,7,4,3,2,1.
    m = manager(8)
    r = Request("a", list(range(16)))
    assert admit(m, r).get_page_ids() == ([1, 2, 3, 4],)
    m.free(r)
    assert m.page_pool.free_list_ids() == [5, 6, 7, 4, 3, 2, 1]


def test_prefix_hit_is_capped_and_pure_then_taken_by_allocate():
    m = manager()
    a = Request("a", list(range(12)))
    admit(m, a)
    b = Request("b", list(range(12)))  # identical prompt: at most num_tokens - 1 tokens hit
    before = [m.page_pool.ref_count(p) for p in range(16)], m.page_pool.free_list_ids()
    hits, n = m.get_computed_pages(b)
    assert n == 8 and hits.get_page_ids() == ([1, 2],)
    assert ([m.page_pool.ref_count(p) for p in range(16)], m.page_pool.free_list_ids()) == before
    new = m.allocate_slots(b, 4, n, hits)
    assert new.get_page_ids() == ([4],) and m.get_page_ids("b") == ([1, 2, 4],)
    assert m.page_pool.ref_count(1) == 2 and m.num_cached_pages("b") == [3]
    stats = m.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (2, 24, 8)
    assert m.make_prefix_cache_stats().queries == 0  # counters restart


def test_free_keeps_keys_for_resumption_until_free_page_hashes():
    m = manager()
    r = Request("a", list(range(10)))
    admit(m, r)
    keys = m.page_hashes_of("a")
    assert len(keys) == 2 and m.hashed_request_ids() == ["a"]
    m.free(r)  # preemption: pages released (still cached), keys kept
    assert m.request_ids() == [] and m.page_hashes_of("a") == keys
    r.num_computed_tokens = 0
    _, n = m.get_computed_pages(r)
    assert n == 8 and m.page_hashes_of("a") == keys
    m.free_page_hashes(r)
    assert m.page_hashes_of("a") == () and m.hashed_request_ids() == []
    m.free(r)  # a request without pages: no-op
    m.free_page_hashes(r)


def test_prompt_logprobs_requests_skip_lookup_but_are_cached():
    m = manager()
    admit(m, Request("a", list(range(12))))
    p = Request("p", list(range(12)), prompt_logprobs=True)
    assert m.get_computed_pages(p)[1] == 0 and m.make_prefix_cache_stats().requests == 1
    admit(m, p)
    assert all(m.page_pool.key_of(pid) is not None for pid in m.get_page_ids("p")[0][:3])


def test_caching_off():
    m = manager(enable_caching=False)
    r = Request("a", list(range(12)))
    admit(m, r)
    assert m.page_pool.cached_items() == [] and m.get_computed_pages(Request("b", list(range(12))))[1] == 0
    m.cache_pages(r, 12)  # no-op without caching
    assert m.page_pool.cached_items() == [] and m.page_size is None


def test_zero_groups_force_caching_off():
    m = CacheManager(4, [], 16)
    r = Request("a", [1, 2, 3])
    assert not m.enable_caching and m.allocate_slots(r, 3) == m.create_empty_page_list()
    assert m.request_ids() == []


def test_lookahead_slots_are_capped_and_never_cached():
    m = manager(max_model_len=16)
    r = Request("a", list(range(10)))
    new = m.allocate_slots(r, 10, num_lookahead_tokens=20)
    assert new.get_page_ids() == ([1, 2, 3, 4],)  # 16 slots: the cap, not 30
    assert m.num_cached_pages("a") == [2]  # only full pages of real tokens
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots(Request("b", list(range(17))), 17)  # real tokens beyond the cap raise


def test_delay_cache_pages_then_cache_pages():
    m = manager()
    r = Request("a", list(range(9)))
    m.allocate_slots(r, 9, delay_cache_pages=True)
    assert m.page_pool.cached_items() == [] and m.num_cached_pages("a") == [0]
    m.cache_pages(r, 8)
    assert m.num_cached_pages("a") == [2]
    m.cache_pages(r, 4)  # lower: no-op (eSurge Q4 lowered the count)
    assert m.num_cached_pages("a") == [2]
    with pytest.raises(InvalidArgumentError):
        m.cache_pages(r, 10)  # more tokens than the request has


def test_reset_prefix_cache_only_when_nothing_is_held_and_events():
    m = manager(enable_kv_events=True)
    r = Request("a", list(range(8)))
    admit(m, r)
    assert m.reset_prefix_cache() is False and len(m.page_pool.cached_items()) == 2
    m.free(r)
    assert m.usage == 0.0  # cached-but-free pages count as free; the null page is excluded
    assert m.reset_prefix_cache() is True and m.page_pool.cached_items() == []
    assert m.make_prefix_cache_stats().reset is True
    events = m.take_events()
    assert [type(e) for e in events] == [PageStored, AllPagesCleared]  # one event for the call's two pages
    assert len(events[0].page_hashes) == 2 and events[0].token_ids == tuple(range(8))
    assert m.page_hashes_of("a")  # key lists survive a reset
    admit(m, Request("b", list(range(100, 104))))  # pops page 3, which has no key any more
    assert not any(isinstance(e, PageRemoved) for e in m.take_events())


def test_eviction_emits_page_removed():
    m = manager(4, enable_kv_events=True)
    a = Request("a", list(range(12)))
    admit(m, a)
    m.free(a)
    m.take_events()
    admit(m, Request("b", list(range(100, 104))))  # reuses the chain tail page 3
    assert [(type(e), e.page_ids) for e in m.take_events()] == [(PageRemoved, (3,)), (PageStored, (3,))]


def test_usage():
    m = manager(5)
    assert m.usage == 0.0
    m.allocate_slots(Request("a", [1, 2, 3, 4, 5]), 5)
    assert m.usage == 0.5


def test_cache_pages_views_and_arithmetic():
    m = manager(8)
    new = m.allocate_slots(Request("a", list(range(8))), 8)
    assert [p.page_id for p in new.pages[0]] == [1, 2] and isinstance(new.pages[0][0], CachePage)
    assert new.pages[0][0] is m.page_pool.page(1)
    ids = new.get_page_ids()
    ids[0].append(99)
    assert new.get_page_ids() == ([1, 2],)  # copies
    assert (new + new.new_empty()).get_page_ids() == ([1, 2],) and len(new) == 1
    assert new.get_unhashed_page_ids() == []
    with pytest.raises(InvalidArgumentError):
        new + CachePages([[], []])
    with pytest.raises(ForeignPageError):
        new + manager(8).create_empty_page_list()
    with pytest.raises(InvalidArgumentError):
        _ = CachePages([[1]]).pages
    assert CachePages([[1, 2]]) == CachePages(([1, 2],))


def test_get_num_common_prefix_pages():
    m = manager()
    a, b = Request("a", list(range(13))), Request("b", list(range(13)))
    admit(m, a)
    admit(m, b)
    a.status = RequestStatus.RUNNING
    assert m.get_num_common_prefix_pages(a, 2) == [3] and m.get_num_common_prefix_pages(a, 1) == [4]
    b.status = RequestStatus.WAITING
    with pytest.raises(InvalidArgumentError):
        m.get_num_common_prefix_pages(b, 2)


def test_hybrid_sliding_manager_end_to_end():
    m = manager(40, [full(4), sliding(4, 8)])
    a = Request("a", list(range(25)))
    admit(m, a)
    b = Request("b", list(range(26)))
    hits, n = m.get_computed_pages(b)
    assert n == 24 and hits.get_page_ids()[1][:4] == [0, 0, 0, 0]
    m.allocate_slots(b, 2, n, hits)
    assert m.get_page_ids("b")[1][:4] == [0, 0, 0, 0] and len(m.get_page_ids("b")[0]) == 7
    assert m.group_layouts() == [("full", 4, 0), ("sliding", 4, 8)]


def test_data_parallel_shards():
    m = manager(16, data_parallel_size=2)  # shards: ids 1..7 and 8..15
    r = Request("a", list(range(12)))
    new = admit(m, r, dp_shard_hint=3, data_parallel_size=2)
    assert all(8 <= p < 16 for p in new.get_page_ids()[0]) and m.request_shard("a") == 1
    r.num_computed_tokens = 12
    r.append_output_token_ids([1] * 4)
    # a later call hints shard 0 (or nothing): the request's pages stay in its shard
    more = m.allocate_slots(r, 4, dp_shard_hint=0, data_parallel_size=2)
    assert all(8 <= p < 16 for p in more.get_page_ids()[0])
    other = Request("b", list(range(12)))
    _, n = m.get_computed_pages(other, dp_shard_hint=0, data_parallel_size=2)
    assert n == 0  # the cached pages live in shard 1
    _, n = m.get_computed_pages(other, dp_shard_hint=1, data_parallel_size=2)
    assert n == 8
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots(other, 12, dp_shard_hint=0, data_parallel_size=4)  # not the manager's DP
    # num_pages % dp != 0: the hint is ignored, as in eSurge
    odd = manager(15, data_parallel_size=2)
    assert admit(odd, Request("c", [1, 2, 3]), dp_shard_hint=1, data_parallel_size=2).get_page_ids() == ([1],)
    assert odd.request_shard("c") is None


def test_dp_shard_exhaustion_returns_none_without_change():
    m = manager(8, data_parallel_size=2)  # shard 0: ids 1..3, shard 1: ids 4..7
    pool = m.page_pool
    before = pool.free_list_ids()
    assert m.allocate_slots(Request("a", list(range(16))), 16, dp_shard_hint=0, data_parallel_size=2) is None
    assert pool.free_list_ids() == before and m.request_ids() == []


def test_from_plan():
    plan = plan_kv_cache(get_preset("llama-3-8b"), "tpu-v6e", page_size=128, max_model_len=8192, dp=2, num_devices=2)
    m = CacheManager.from_plan(plan, 8192)
    assert m.num_pages == plan.num_pages and m.data_parallel_size == 2
    gemma = plan_kv_cache(get_preset("gemma-3-1b"), "tpu-v6e", page_size=128, max_model_len=8192)
    g = CacheManager.from_plan(gemma, 8192, enable_caching=False)
    assert {kind for kind, _, _ in g.group_layouts()} == {"full", "sliding"}
    with pytest.raises(InvalidArgumentError):
        CacheManager.from_plan(object(), 8192)


def test_hash_schemes_and_seeds_are_per_instance():
    a = CacheManager(8, [full()], 32, hash_scheme="xxh3_128", hash_seed=1)
    b = CacheManager(8, [full()], 32, hash_scheme="xxh3_128", hash_seed=2)
    ra, rb = Request("r", list(range(8))), Request("r", list(range(8)))
    admit(a, ra)
    admit(b, rb)
    assert a.page_hashes_of("r") != b.page_hashes_of("r")
    builtin = CacheManager(8, [full()], 32, hash_scheme="builtin", hash_seed=0)
    admit(builtin, Request("r", list(range(8))))
    assert builtin.page_pool.key_of(1) == builtin.page_hashes_of("r")[0]  # group 0: the content key itself


def test_chunked_local_manager_drops_pages_before_the_chunk():
    spec = ChunkedLocalAttentionSpec(page_size=4, attention_chunk_size=8, **KW)
    m = manager(16, [CacheGroupSpec(spec)])
    r = Request("a", list(range(17)))
    m.allocate_slots(r, 17)
    r.num_computed_tokens = 17
    r.append_output_token_ids([5])
    m.allocate_slots(r, 1)  # 17 computed: chunk starts at 16, pages 0..3 are dropped
    assert m.get_page_ids("a") == ([0, 0, 0, 0, 5],)


ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"


@pytest.mark.skipif(not (ANCHORS / "adapters.py").exists(), reason="shared anchors harness not present")
def test_anchor_adapter_drives_the_manager_unchanged():
    def load(name: str):  # by path: the harness's trace.py would clash with the stdlib's
        spec = importlib.util.spec_from_file_location(f"anchors_{name}", ANCHORS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
        return module

    adapters, trace = load("adapters"), load("trace")
    reqs = trace.make_trace(40, seed=1, prompt_range=(20, 200), output_range=(5, 40))
    ad = adapters.make("verikv", num_pages=256, page_size=16)
    stats = trace.run_trace(ad, reqs, max_running=8, num_pages=256)
    assert stats["hit_tokens"] > 0 and ad.num_free_pages() == 255 and ad.usage() == 0.0


def test_a_reused_request_id_never_reuses_stale_keys():
    # eSurge keys hash lists by request id: an aborted request (freed, keys kept) whose id is
    # reused for another prompt would be looked up with the old prompt's keys.
    m = manager()
    old = Request("x", list(range(12)))
    admit(m, old)
    m.free(old)  # aborted: pages freed, keys kept
    new = Request("x", [7] * 12)
    _, n = m.get_computed_pages(new)
    assert n == 0 and m.page_hashes_of("x") == tuple(PageHasher("sha256", seed=0).hash_request(new, 4))
    admit(m, new)
    twin = Request("x", [7] * 12)  # a second live request with the same id
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots(twin, 1)
    with pytest.raises(InvalidArgumentError):
        m.cache_pages(twin, 4)
    with pytest.raises(InvalidArgumentError):
        m.get_computed_pages(twin)
    other = Request("y", list(range(12)))
    assert m.get_computed_pages(other)[1] == 8  # old's pages are still cached under old's (correct) keys


def test_a_lookup_result_is_rechecked_once_it_may_be_stale():
    # allocate_slots trusts a request's own lookup result only while no key changed since the
    # lookup and the caller did not edit it; otherwise every hit page is checked again.
    m = manager(8)
    first = Request("a", list(range(12)))
    admit(m, first)
    m.free(first)  # pages 1-3 free, still cached
    r = Request("b", list(range(12)))
    hits, n = m.get_computed_pages(r)
    assert n == 8 and hits.get_page_ids() == ([1, 2],)
    edited = CachePages([[2, 1]], m.page_pool)
    with pytest.raises(InvalidArgumentError):  # right pages, wrong positions
        m.allocate_slots(r, 4, n, edited)
    hits.page_ids[0].reverse()  # an in-place edit of the lookup result itself
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots(r, 4, n, hits)
    hits.page_ids[0].reverse()
    with pytest.raises(InvalidArgumentError):  # another request's lookup result
        m.allocate_slots(Request("c", list(range(12))), 4, n, hits)
    hog = Request("hog", list(range(100, 128)))  # takes every free page: the cached keys are evicted
    assert m.allocate_slots(hog, 28) is not None
    m.free(hog)
    before = m.page_pool.free_list_ids()
    with pytest.raises(InvalidArgumentError):  # pages 1 and 2 no longer hold r's content
        m.allocate_slots(r, 4, n, hits)
    assert m.page_pool.free_list_ids() == before and m.request_ids() == []
    hits, n = m.get_computed_pages(r)
    assert n == 0


def test_the_shared_no_new_page_result_cannot_be_changed():
    m = manager()
    r = Request("a", list(range(6)))
    admit(m, r)
    r.append_output_token_ids([6])
    first = m.allocate_slots(r, 1)  # page 2 still has room: no new page
    assert first.get_page_ids() == ([],) and first == CachePages([[]], m.page_pool)
    with pytest.raises(AttributeError):
        first.page_ids[0].append(5)  # type: ignore[attr-defined]
    first.get_page_ids()[0].append(5)  # a copy
    r.num_computed_tokens += 1
    r.append_output_token_ids([7])
    assert m.allocate_slots(r, 1).get_page_ids() == ([],)
    assert first + CachePages([[3]]) == CachePages([[3]]) and repr(first) == "CachePages(([],))"


def test_one_id_names_one_live_request_even_without_keys():
    # While one object holds pages, any call with another object of the same id raises, with
    # or without content keys (caching off, or keys dropped by free_page_hashes while held).
    for m in (manager(enable_caching=False), manager()):
        holder = Request("x", list(range(6)))
        admit(m, holder)
        m.free_page_hashes(holder)
        twin = Request("x", list(range(6)))
        before = m.get_page_ids("x"), m.page_pool.free_list_ids()
        for call in (lambda m=m, twin=twin: m.allocate_slots(twin, 1),
                     lambda m=m, twin=twin: m.get_computed_pages(twin)):
            with pytest.raises(InvalidArgumentError):
                call()
        assert (m.get_page_ids("x"), m.page_pool.free_list_ids()) == before
    # the holder decodes on; its new full pages are cached under its own keys
    holder.append_output_token_ids([6, 7])
    assert m.allocate_slots(holder, 2) is not None
    holder.num_computed_tokens += 2
    assert m.page_hashes_of("x") == tuple(PageHasher("sha256", seed=0).hash_request(holder, 4))
    assert m.num_cached_pages("x") == [2]


@pytest.mark.parametrize("caching", [True, False])
def test_decode_fast_path_plans_what_the_general_path_plans(caching: bool):
    # Two managers see the same decode steps; one takes the fast path, the other is forced
    # through the pipeline (a NumPy count is not the plain int the fast path's guard wants).
    # They must agree on every result and on the abstract state after every step: steps with no
    # new page, with one, on an exhausted pool (None), past max_model_len and after finishing.
    from verikv.spec.abstraction import abstract_manager

    def general_path(m: CacheManager, r: Request, n: int) -> CachePages | None:
        return m.allocate_slots(r, np.int64(n))  # type: ignore[arg-type]  # (an int the API accepts)

    seen = set()
    for num_pages in (7, 16):  # a tight pool runs out of pages, a roomy one reaches max_model_len
        pair = [manager(num_pages, max_model_len=22, enable_caching=caching) for _ in range(2)]
        reqs = [[Request(f"r{i}", list(range(10 * i, 10 * i + 5))) for i in range(2)] for _ in pair]
        for m, rs in zip(pair, reqs):
            for r in rs:
                admit(m, r)
        for step in range(40):
            outcomes: list[Any] = []  # an error message, None, or page ids
            paths: tuple[Callable[..., Any], ...] = (CacheManager.allocate_slots, general_path)
            for m, rs, call in zip(pair, reqs, paths):
                r = rs[step % 2]
                if step == 37:
                    r.status = RequestStatus.FINISHED_STOPPED
                try:
                    new = call(m, r, 1)
                except InvalidArgumentError as exc:
                    outcomes.append(str(exc))
                    continue
                outcomes.append(None if new is None else new.get_page_ids())
                if new is not None:
                    r.num_computed_tokens += 1
                    r.append_output_token_ids([step])
            assert outcomes[0] == outcomes[1], step
            assert abstract_manager(pair[0]) == abstract_manager(pair[1]), step
            assert [pair[0].page_hashes_of(f"r{i}") for i in range(2)] == [
                pair[1].page_hashes_of(f"r{i}") for i in range(2)]
            out = outcomes[0]
            seen.add("error" if isinstance(out, str) else "none" if out is None else "page" if out[0] else "no-page")
    assert seen == {"error", "none", "page", "no-page"}


def _looked_up_after_a_cached_twin() -> tuple[CacheManager, Request, CachePages, int]:
    """A manager of 16 pages whose request "b" has looked up a two-page hit (8 tokens) left
    cached by an identical request."""
    m = manager(16)
    first = Request("a", list(range(9)))
    admit(m, first)
    m.free(first)
    r = Request("b", list(range(9)))
    hits, n = m.get_computed_pages(r)
    assert n == 8 and len(hits.page_ids[0]) == 2
    return m, r, hits, n


def _forge_last_lookup(m: CacheManager, pages: CachePages, n: int) -> None:
    """Make ``pages`` request "b"'s last lookup result, as a wrong lookup would leave it."""
    m.coordinator.records["b"].last_lookup = LastLookup(m.page_pool.key_version, n, None,
                                                        tuple(map(list, pages.page_ids)))


def _pool_state(m: CacheManager) -> tuple[Any, ...]:
    return m.page_pool.free_list_ids(), m.request_ids(), m.page_pool.cached_items()


def test_the_last_lookup_shortcut_never_skips_the_hit_shape():
    # a hit equal to the request's own last lookup skips only the per-page key
    # comparison; its length and ids are checked every time (here the record's last lookup is
    # forged to be a malformed hit).
    m, r, hits, n = _looked_up_after_a_cached_twin()
    short = CachePages(([hits.page_ids[0][0]],), m.page_pool)  # one page for 8 tokens
    _forge_last_lookup(m, short, n)
    before = _pool_state(m)
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots(r, 1, n, short)
    assert _pool_state(m) == before
    assert m.allocate_slots(r, 1, n, hits) is not None  # the real lookup result is taken


@pytest.mark.parametrize("bad", [-1, -15, 16, 99])
def test_a_hit_of_another_origin_is_range_checked_before_its_keys_are_read(bad: int) -> None:
    """A hit that is not the request's last lookup result has its keys compared page by page,
    which reads the pool's key table by id: an id outside the pool (set after construction, which
    checks ids itself) is a `ForeignPageError` first, with nothing changed; a negative id must
    not read the table from the end."""
    m, r, hits, n = _looked_up_after_a_cached_twin()
    other = CachePages((list(hits.page_ids[0]),), m.page_pool)  # equal ids, but not the lookup's object
    other.page_ids[0][1] = bad
    before = _pool_state(m)
    with pytest.raises(ForeignPageError, match="not a page of this pool"):
        m.allocate_slots(r, 1, n, other)
    assert _pool_state(m) == before


@pytest.mark.parametrize("bad", [-1, -15, 16, 99])
def test_a_hit_equal_to_the_last_lookup_is_still_range_checked(bad: int) -> None:
    """A hit equal to the request's last lookup has no key read by id; its ids are range-checked
    by the pool when the coordinator's plan counts its free pages, before anything changes
    (here the last lookup is forged to hold a page id outside the pool of 16; a negative id must
    not index the pool's tables from the end)."""
    m, r, hits, n = _looked_up_after_a_cached_twin()
    forged = CachePages((list(hits.page_ids[0]),), m.page_pool)
    forged.page_ids[0][1] = bad  # (after construction, which rejects a negative id itself)
    _forge_last_lookup(m, forged, n)
    before = _pool_state(m)
    with pytest.raises(ForeignPageError):
        m.allocate_slots(r, 1, n, forged)
    assert _pool_state(m) == before
    assert m.allocate_slots(r, 1, n, hits) is not None  # the real lookup result is taken


@pytest.mark.parametrize("batch", [False, True])
def test_a_decode_step_past_max_model_len_raises_even_inside_the_last_page(batch: bool) -> None:
    """max_model_len 10 with pages of 4: the request's 3 pages cover 12 slots, caching is next due
    at no reachable count (the page after 8 cached tokens ends at 12), and the step to 11 tokens
    still raises, single or batched, with nothing changed."""
    m = manager(max_model_len=10, groups=[full(4)])
    req = Request("r", list(range(9)))
    assert admit(m, req) is not None  # 9 computed tokens on pages 1, 2, 3; tokens 1-8 cached
    req.append_output_token_ids(9)
    step = (lambda: m.allocate_slots_batch([req], [1])) if batch else (lambda: m.allocate_slots(req, 1))
    assert step() is not None  # 10 tokens: inside page 3
    req.num_computed_tokens += 1
    req.append_output_token_ids(10)
    before = (m.get_page_ids("r"), m.num_cached_pages("r"), m.page_hashes_of("r"))
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        step()
    assert (m.get_page_ids("r"), m.num_cached_pages("r"), m.page_hashes_of("r")) == before
    assert before[:2] == (([1, 2, 3],), [2]) and len(before[2]) == 2


def test_a_refused_dp_allocation_changes_nothing_and_leaves_the_dp_size_open() -> None:
    """A manager built without a DP size: a first DP call that does not fit (40 tokens need 10
    pages, shard 0 of 2 has 3) returns None with every part of the manager as it was, the pool's
    shard lists included; a later call may still choose another DP size, as on a fresh manager."""
    from hostile import snapshot

    m = CacheManager(8, [full(4)], 64)
    before = snapshot(m)
    assert m.allocate_slots(Request("big", list(range(40))), 40, dp_shard_hint=0, data_parallel_size=2) is None
    assert snapshot(m) == before
    assert m.data_parallel_size == 1
    assert m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=1, data_parallel_size=4) is not None
    assert m.data_parallel_size == 4 and m.request_shard("a") == 1 and m.get_page_ids("a") == ([2],)


@pytest.mark.parametrize("groups", [[full(4)], [full(4), sliding(4, 8)], [full(4), full(8)]],
                         ids=["full", "full+sliding", "full+full(page 8)"])
def test_every_cached_page_shows_its_key_and_group_as_esurge_does(groups: list[CacheGroupSpec]) -> None:
    """`CachePage.page_hash` of a cached page is a `PageHashWithGroupId` in every group, group 0
    included: ``.page_hash`` is the request's key of the page's last small page, ``.group_id``
    its group (whatever key the pool stores); pages without a key show None."""
    from verikv import PageHashWithGroupId

    m = CacheManager(32, groups, 64, hash_seed=1)
    req = Request("a", list(range(17)))
    new = m.allocate_slots(req, 17)
    assert new is not None
    keys = m.page_hashes_of("a")
    seen = 0
    for gid, (group_pages, views) in enumerate(zip(m.get_page_ids("a"), new.pages)):
        stride = m.kv_cache_groups[gid].kv_cache_spec.page_size // 4
        for j, (page_id, view) in enumerate(zip(group_pages, views)):
            assert view is m.page_pool.page(page_id)
            if (j + 1) * stride > len(keys):  # the partial last page has no key
                assert view.page_hash is None
                continue
            shown = view.page_hash
            assert type(shown) is PageHashWithGroupId
            assert shown.group_id == gid and shown.page_hash == keys[(j + 1) * stride - 1]
            seen += 1
    assert seen == sum(17 // g.kv_cache_spec.page_size for g in groups)


# ---- Checks written for mutants of impl/cache_manager.py that the suite let through
# (docs/mutation.md; the equivalent ones are in tools/mutation/triage.toml).
# They state the manager's documented behaviour, with expected values derived from the arguments,
# never from what the code returned:
# - every rejected argument is named in its typed error (the request id too), integral values of
#   any type are taken as exact ints, and documented bounds accept their edges (page id 0 is the
#   null placeholder; ``num_new_tokens`` may be 0 only with external computed tokens);
# - the constructor's options reach the manager (Mamba mode, EAGLE, eSurge's ``page_size``, no KV
#   events by default) and a DP size is adopted from the first call that uses one;
# - prefix hits given back are checked (range, placeholders, DP shard) and the offending page is
#   named; a reused request id drops the keys of the object it named before;
# - content keys are computed as caching needs them, a preempted request may allocate again, and
#   a `Request` held by two managers stays frozen until both free it;
# - `CachePages`: ids of any integral type, ``.pages`` views of the shared "no new page" result.


def exact(kind: Any, value: int) -> Any:
    """``value`` as a NumPy integer of ``kind`` (typed Any: the API is annotated with int)."""
    return kind(value)


def page4_manager(num_pages: int = 16, groups: list[CacheGroupSpec] | None = None, **kw: Any) -> CacheManager:
    return CacheManager(num_pages, groups or [full(4)], 64, hash_seed=1, **kw)


def state(m: CacheManager) -> tuple[Any, ...]:
    return (m.page_pool.free_list_ids(), {rid: m.get_page_ids(rid) for rid in m.request_ids()},
            sorted(map(repr, m.page_pool.cached_items())))


# --- arguments: names, integral types, edges ------------------------------------------------------

@pytest.mark.parametrize("arg", ["num_new_tokens", "num_new_computed_tokens", "num_lookahead_tokens",
                                 "num_external_computed_tokens"])
@pytest.mark.parametrize("value", [-1, np.int64(-1), "2", 2.0])
def test_a_bad_count_of_allocate_slots_is_rejected_by_name(arg: str, value: Any) -> None:
    m = page4_manager()
    before = state(m)
    with pytest.raises(InvalidArgumentError, match=named(arg)):
        m.allocate_slots(Request("a", list(range(8))), **{"num_new_tokens": 4, arg: value})
    assert state(m) == before


@pytest.mark.parametrize("arg", ["num_new_tokens", "num_lookahead_tokens"])
@pytest.mark.parametrize("value", [-1, np.int64(-1), "2"])
def test_a_bad_count_of_a_batch_is_rejected_by_name(arg: str, value: Any) -> None:
    m = page4_manager()
    with pytest.raises(InvalidArgumentError, match=named(arg)):
        m.allocate_slots_batch([Request("a", list(range(8)))], **{"num_new_tokens": 4, arg: value})
    with pytest.raises(InvalidArgumentError, match=named(arg)):
        m.allocate_slots_batch([Request("a", list(range(8)))], **{"num_new_tokens": [4], arg: value})


def test_counts_of_any_integral_type_are_exact_ints() -> None:
    m = page4_manager()
    req = Request("a", list(range(12)))
    assert ids(m.allocate_slots(req, exact(np.int64, 8), num_lookahead_tokens=exact(np.int32, 1))) == ([1, 2, 3],)
    assert m.num_cached_pages("a") == [2]
    m.cache_pages(req, exact(np.int64, 12))
    assert m.num_cached_pages("a") == [3]
    req.num_computed_tokens = 8
    assert ids(m.allocate_slots(req, exact(np.int16, 4))) == ([],)
    assert m.get_num_common_prefix_pages(req.request_id, exact(np.int64, 1)) == [3]
    assert m.get_computed_pages(Request("b", list(range(13))), max_cache_hit_length=exact(np.int64, 8))[1] == 8


def test_zero_new_tokens_only_with_external_computed_tokens() -> None:
    m = page4_manager()
    with pytest.raises(InvalidArgumentError, match=named("num_new_tokens")):
        m.allocate_slots(Request("a", list(range(8))), 0)
    assert ids(m.allocate_slots(Request("b", list(range(8))), 0, num_external_computed_tokens=8,
                                delay_cache_pages=True)) == ([1, 2],)


def test_external_computed_tokens_count_towards_the_slots() -> None:
    m = CacheManager(16, [full(4)], 12, hash_seed=1)
    assert ids(m.allocate_slots(Request("a", list(range(12))), 4, num_external_computed_tokens=4)) == ([1, 2],)
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots(Request("b", list(range(12))), 5, num_external_computed_tokens=8)


def test_external_computed_tokens_are_refused_only_with_a_mamba_align_group() -> None:
    align = CacheManager(16, [full(4), mamba(8)], 64, hash_seed=1, mamba_cache_mode="align")
    with pytest.raises(InvalidArgumentError, match="external"):
        align.allocate_slots(Request("a", list(range(8))), 4, num_external_computed_tokens=4)
    assert align.request_ids() == []
    assert ids(align.allocate_slots(Request("a", list(range(8))), 8)) == ([1, 2], [3])  # without: fine
    plain = CacheManager(16, [full(4), mamba(64)], 64, hash_seed=1)
    assert ids(plain.allocate_slots(Request("a", list(range(8))), 4, num_external_computed_tokens=4)) == (
        [1, 2], [3])


def test_an_error_about_a_request_names_it() -> None:
    m = CacheManager(16, [full(4)], 8, hash_seed=1)
    with pytest.raises(InvalidArgumentError, match="'req-7'"):
        m.allocate_slots(Request("req-7", list(range(9))), 9)
    lost = Request("req-8", list(range(4)))
    lost.num_computed_tokens = 4
    with pytest.raises(InvalidArgumentError, match="'req-8'"):
        m.allocate_slots(lost, 1)


@pytest.mark.parametrize("value", [0, -1, "2", np.int64(0)])
def test_a_bad_data_parallel_size_is_rejected_by_name(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=named("data_parallel_size")):
        CacheManager(16, [full(4)], 64, data_parallel_size=value)
    m = page4_manager()
    with pytest.raises(InvalidArgumentError, match=named("data_parallel_size")):
        m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=0, data_parallel_size=value)


@pytest.mark.parametrize("value", ["0", 1.0, None])
def test_a_bad_dp_shard_hint_is_rejected_by_name(value: Any) -> None:
    m = page4_manager(data_parallel_size=2)
    if value is None:
        pages = m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=None, data_parallel_size=2)
        assert pages is not None
        return
    with pytest.raises(InvalidArgumentError, match=named("dp_shard_hint")):
        m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=value, data_parallel_size=2)


@pytest.mark.parametrize("flags", [{"enable_caching": 1}, {"use_eagle": 0}, {"enable_caching": "yes"}])
def test_the_flags_must_be_bools(flags: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        CacheManager(16, [full(4)], 64, **flags)


# --- construction: options reach the manager ------------------------------------------------------

def test_the_constructor_options_are_kept() -> None:
    m = CacheManager(16, [full(8), full(16)], 64, True, True, mamba_cache_mode="align", free_order="unhashed-first")
    assert (m.use_eagle, m.enable_caching, m.page_size, m.mamba_cache_mode) == (True, True, 8, "align")
    assert m.page_pool.free_order == "unhashed-first"
    off = CacheManager(16, [full(8)], 64, False)
    assert (off.use_eagle, off.enable_caching, off.page_size, off.mamba_cache_mode) == (False, False, None, "none")
    assert off.page_pool.event_log is None and off.take_events() == []


def test_mamba_align_mode_reaches_the_groups() -> None:
    m = CacheManager(16, [full(4), mamba(8)], 64, mamba_cache_mode="align")
    assert m.group_layouts() == [("full", 4, 0), ("mamba_align", 8, 0)]


def test_the_shared_no_new_page_result_has_pool_views() -> None:
    m = page4_manager()
    req = running(m, "a", list(range(5)))
    req.append_output_token_ids(1)
    out = m.allocate_slots(req, 1)
    assert out is not None and out.pages == ([],) and out.get_page_ids() == ([],)
    assert out.get_page_ids(True) is None and out.get_unhashed_page_ids_all_groups() == [[]]


def test_a_dp_size_is_adopted_from_the_first_call_that_uses_one() -> None:
    m = page4_manager(8)
    pages = m.allocate_slots(Request("x", [1, 2]), 2)  # no DP: nothing adopted
    assert pages is not None
    assert m.data_parallel_size == 1
    assert ids(m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=1, data_parallel_size=2)) == ([4],)
    assert m.data_parallel_size == 2 and m.request_shard("a") == 1
    with pytest.raises(InvalidArgumentError, match="differs"):
        m.allocate_slots(Request("b", [1, 2]), 2, dp_shard_hint=1, data_parallel_size=4)


def test_a_dp_size_that_does_not_divide_the_pool_leaves_dp_off() -> None:
    m = page4_manager(9)
    assert ids(m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=1, data_parallel_size=2)) == ([1],)
    assert m.request_shard("a") is None and m.data_parallel_size == 1


# --- hits given back --------------------------------------------------------------------------------

def cached(m: CacheManager, tokens: list[int], rid: str = "seed") -> None:
    """Cache ``tokens`` under ``rid`` and free it."""
    req = Request(rid, tokens)
    pages = m.allocate_slots(req, len(tokens))
    assert pages is not None
    m.free(req)


def test_a_hit_page_outside_the_pool_is_named() -> None:
    m = page4_manager(16)
    cached(m, list(range(9)))
    req = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(req)
    assert n == 8
    for bad in ([hit.get_page_ids()[0][0], 16], [16, 17], [1, 99]):
        with pytest.raises(ForeignPageError, match=rf"\b{bad[-1] if bad[0] != 16 else 16}\b"):
            m.allocate_slots(req, 1, 8, CachePages([bad]))
    assert m.request_ids() == []


@pytest.mark.parametrize("bad", [2.5, "x7", True])
def test_a_hit_page_id_that_is_not_an_int_is_named(bad: Any) -> None:
    """The construction of `CachePages` checks ids; one replaced afterwards is found by the
    manager's exact-int check, which names it (and not the valid id before it)."""
    m = page4_manager(16)
    cached(m, list(range(9)))
    req = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(req)
    forged = CachePages([hit.get_page_ids()[0]])
    forged.page_ids[0][1] = bad
    with pytest.raises(ForeignPageError, match=rf"page id {bad!r} is not"):
        m.allocate_slots(req, 1, n, forged)
    assert m.request_ids() == []


def test_a_hit_page_outside_a_windowed_group_range_is_named_not_its_placeholder() -> None:
    m = page4_manager(16, [full(4), sliding(4, 4)])
    cached(m, list(range(9)))
    req = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(req)
    assert n == 8
    with pytest.raises(ForeignPageError, match=r"\b16\b"):
        m.allocate_slots(req, 1, 8, CachePages([hit.get_page_ids()[0], [0, 16]]))


def test_null_placeholders_only_lead_and_only_in_windowed_groups() -> None:
    m = page4_manager(16, [full(4), sliding(4, 4)])
    cached(m, list(range(9)))
    req = Request("a", list(range(9)))
    hit, _ = m.get_computed_pages(req)
    full_hit, window_hit = hit.get_page_ids()
    assert window_hit[0] == 0
    with pytest.raises(InvalidArgumentError, match="null page at hit position 0"):
        m.allocate_slots(req, 1, 8, CachePages([[0, full_hit[1]], window_hit]))
    with pytest.raises(InvalidArgumentError, match="null page at hit position 1"):
        m.allocate_slots(req, 1, 8, CachePages([full_hit, [window_hit[1], 0]]))
    assert m.request_ids() == []
    pages = m.allocate_slots(req, 1, 8, hit)
    assert pages is not None


def test_a_mamba_hit_is_placeholders_then_one_state_page() -> None:
    m = CacheManager(16, [full(4), mamba(4)], 64, hash_seed=1, mamba_cache_mode="align")
    a = Request("a", list(range(9)))
    m.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    m.allocate_slots(a, 1)  # keys the state after 8 tokens
    m.free(a)
    req = Request("b", list(range(9)))
    hit, n = m.get_computed_pages(req)
    full_hit, state_hit = hit.get_page_ids()
    assert n == 8 and state_hit[0] == 0 and state_hit[1] != 0
    with pytest.raises(InvalidArgumentError, match="Mamba hit"):
        m.allocate_slots(req, 1, 8, CachePages([full_hit, [0, 0]]))
    assert m.request_ids() == []
    pages = m.allocate_slots(req, 1, 8, hit)
    assert pages is not None


def test_a_hit_must_cover_whole_pages_of_every_group() -> None:
    m = page4_manager(16, [full(4), full(8)])
    cached(m, list(range(17)))
    req = Request("a", list(range(17)))
    hit, n = m.get_computed_pages(req)
    assert n == 16
    with pytest.raises(InvalidArgumentError, match="num_new_computed_tokens=12"):
        m.allocate_slots(req, 1, 12, CachePages([hit.get_page_ids()[0][:3], hit.get_page_ids()[1][:1]]))
    assert m.request_ids() == []


def test_a_hit_from_another_dp_shard_is_refused() -> None:
    """8 pages, DP 2: shard 0 = pages 1..3, shard 1 = pages 4..7. A hit cached in shard 1 on
    page 4 (the first page past shard 0) is refused for a request of shard 0."""
    m = page4_manager(8, data_parallel_size=2)
    seed = Request("seed", list(range(5)))
    assert ids(m.allocate_slots(seed, 5, dp_shard_hint=1, data_parallel_size=2)) == ([4, 5],)
    m.free(seed)
    req = Request("a", list(range(5)))
    hit, n = m.get_computed_pages(req, dp_shard_hint=1, data_parallel_size=2)
    assert (hit.get_page_ids(), n) == (([4],), 4)
    before = state(m)
    with pytest.raises(ForeignPageError, match="shard 0"):
        m.allocate_slots(req, 1, 4, hit, dp_shard_hint=0, data_parallel_size=2)
    assert state(m) == before
    assert ids(m.allocate_slots(req, 1, 4, hit, dp_shard_hint=1, data_parallel_size=2)) == ([6],)


def test_a_null_placeholder_after_a_real_hit_page_is_named_by_its_position() -> None:
    m = page4_manager(16, [full(4), sliding(4, 4)])
    cached(m, list(range(13)))
    req = Request("a", list(range(13)))
    hit, n = m.get_computed_pages(req)
    full_hit, window_hit = hit.get_page_ids()
    assert n == 12 and window_hit[:2] == [0, 0] and window_hit[2] != 0
    with pytest.raises(InvalidArgumentError, match="null page at hit position 2"):
        m.allocate_slots(req, 1, 12, CachePages([full_hit, [0, window_hit[2], 0]]))
    assert m.request_ids() == []


def test_stored_events_name_the_parent_of_each_run_in_every_group() -> None:
    """full (page 4) + full (page 8): 8 tokens cached, then 16. The second call's run of each
    group starts after the pages of the first: its parent is the hash of the group's last
    page stored before."""
    m = page4_manager(32, [full(4), full(8)], enable_kv_events=True)
    req = Request("a", list(range(17)))
    m.allocate_slots(req, 8)
    first = {e.group_id: e for e in m.take_events() if isinstance(e, PageStored)}
    assert {g: (len(e.page_hashes), e.parent_page_hash) for g, e in first.items()} == {0: (2, None), 1: (1, None)}
    req.num_computed_tokens = 8
    m.allocate_slots(req, 8)
    second = {e.group_id: e for e in m.take_events() if isinstance(e, PageStored)}
    assert len(second[0].page_hashes) == 2 and len(second[1].page_hashes) == 1
    assert second[0].parent_page_hash == first[0].page_hashes[-1]
    assert second[1].parent_page_hash == first[1].page_hashes[-1]


# --- keys and identity ----------------------------------------------------------------------------

def test_keys_are_computed_as_caching_needs_them() -> None:
    m = page4_manager()
    req = Request("a", list(range(13)))
    m.allocate_slots(req, 4)  # one full page computed so far: caching reads one key
    assert len(m.page_hashes_of("a")) == 1
    req.num_computed_tokens = 4
    m.allocate_slots(req, 8)
    assert len(m.page_hashes_of("a")) == 3


def test_a_reused_request_id_drops_the_keys_of_the_object_it_named() -> None:
    m = page4_manager()
    first = Request("a", list(range(8)))
    m.get_computed_pages(first)
    m.allocate_slots(first, 8)
    m.free(first)
    kept = m.page_hashes_of("a")
    assert len(kept) == 2
    second = Request("a", list(range(100, 108)))
    pages = m.allocate_slots(second, 8, delay_cache_pages=True)
    assert pages is not None
    assert m.page_hashes_of("a") == ()  # first's keys are gone, second's not computed yet
    m.cache_pages(second, 8)
    assert len(m.page_hashes_of("a")) == 2 and set(m.page_hashes_of("a")).isdisjoint(kept)


def test_a_preempted_request_allocates_again() -> None:
    m = page4_manager()
    req = Request("a", list(range(8)))
    m.allocate_slots(req, 8)
    m.free(req)
    req.status = RequestStatus.PREEMPTED
    req.num_computed_tokens = 0
    hit, n = m.get_computed_pages(req)
    assert n == 4
    assert ids(m.allocate_slots(req, 4, n, hit)) == ([3],)  # the free list's head: 3..15, then 2, 1


def test_a_request_held_by_two_managers_stays_frozen_until_both_free_it() -> None:
    a, b = page4_manager(), page4_manager()
    req = Request("r", list(range(8)))
    a.allocate_slots(req, 8)
    b.allocate_slots(req, 8)
    a.free(req)
    with pytest.raises(VeriKVError):
        req.cache_salt = "tenant"
    b.free(req)
    req.cache_salt = "tenant"
    assert req.cache_salt == "tenant"


def test_a_request_subclass_is_a_request() -> None:
    class Traced(Request):
        __slots__ = ()

    m = page4_manager()
    req = Traced("a", list(range(8)))
    assert ids(m.allocate_slots(req, 8)) == ([1, 2],)
    m.free(req)
    assert m.request_ids() == []


# --- CachePages ------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", [0, 3, np.int64(0), np.int64(3), np.uint8(5)])
def test_cache_pages_take_ids_of_any_integral_type(page: Any) -> None:
    pages = CachePages([[page]])
    assert pages.get_page_ids() == ([int(page)],) and type(pages.get_page_ids()[0][0]) is int


@pytest.mark.parametrize("page", [-1, np.int64(-1)])
def test_a_negative_page_id_is_a_foreign_page_named_as_a_page_id(page: Any) -> None:
    with pytest.raises(ForeignPageError, match=named("page id")):
        CachePages([[page]])


@pytest.mark.parametrize("page", [True, 1.0, "1", None])
def test_a_page_id_that_is_not_an_integer_is_a_foreign_page(page: Any) -> None:
    with pytest.raises(ForeignPageError, match="integer"):
        CachePages([[page]])


# --- more arguments -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cap", [-1, exact(np.int64, -1), "8", 8.0])
def test_a_bad_hit_cap_is_rejected_by_name(cap: Any) -> None:
    m = page4_manager()
    cached(m, list(range(9)))
    with pytest.raises(InvalidArgumentError, match=named("max_cache_hit_length")):
        m.get_computed_pages(Request("a", list(range(9))), max_cache_hit_length=cap)


@pytest.mark.parametrize("cap, expected", [(None, 8), (0, 0), (3, 0), (4, 4), (8, 8), (9, 8), (100, 8)])
def test_the_hit_is_capped_by_the_cap_and_one_token_short_of_the_request(cap: Any, expected: int) -> None:
    m = page4_manager()
    cached(m, list(range(12)))  # 3 pages cached
    hit, n = m.get_computed_pages(Request("a", list(range(9))), max_cache_hit_length=cap)
    assert n == expected and len(hit.get_page_ids()[0]) == expected // 4


def test_common_prefix_counts_are_checked_by_name() -> None:
    m = page4_manager()
    req = Request("a", list(range(8)))
    m.allocate_slots(req, 8)
    req.status = RequestStatus.RUNNING
    with pytest.raises(InvalidArgumentError, match=named("num_running_requests")):
        m.get_num_common_prefix_pages(req, 0)
    assert m.get_num_common_prefix_pages(req, 1) == [2]
    assert m.get_num_common_prefix_pages("a") == [2]  # vLLM's shape: every holder shares them


def test_common_prefix_pages_in_vllm_shape_count_only_requests_holding_pages() -> None:
    m = page4_manager()
    a, b = Request("a", list(range(8))), Request("b", list(range(8)))
    m.allocate_slots(a, 8)
    m.get_computed_pages(Request("idle", list(range(20))))  # a record with keys, no pages
    hit, n = m.get_computed_pages(b)
    m.allocate_slots(b, 1, n, hit)  # shares a's first page
    assert m.get_num_common_prefix_pages("a") == [1]
    m.free(b)
    assert m.get_num_common_prefix_pages("a") == [2]


@pytest.mark.parametrize("value", [-1, "4", exact(np.int64, -1)])
def test_a_bad_caching_count_is_rejected_by_name(value: Any) -> None:
    m = page4_manager()
    req = Request("a", list(range(8)))
    m.allocate_slots(req, 8, delay_cache_pages=True)
    with pytest.raises(InvalidArgumentError, match=named("num_computed_tokens")):
        m.cache_pages(req, value)
    assert m.num_cached_pages("a") == [0]


def test_caching_counts_whole_pages_of_the_held_ones() -> None:
    m = page4_manager()
    req = Request("a", list(range(9)))
    m.allocate_slots(req, 8, delay_cache_pages=True)  # 2 pages
    m.cache_pages(req, 0)
    assert m.num_cached_pages("a") == [0]
    m.cache_pages(req, 9)  # 9 tokens span 2 whole pages: both held
    assert m.num_cached_pages("a") == [2]


def test_zero_new_tokens_of_a_running_request_are_rejected() -> None:
    m = page4_manager()
    req = running(m, "a", list(range(5)))
    with pytest.raises(InvalidArgumentError, match=named("num_new_tokens")):
        m.allocate_slots(req, 0)


# --- lookups ----------------------------------------------------------------------------------------

def test_a_lookup_of_a_request_holding_pages_uses_its_own_shard() -> None:
    m = page4_manager(8, data_parallel_size=2)  # shard 1 = pages 4..7
    req = Request("a", list(range(9)))
    assert ids(m.allocate_slots(req, 9, dp_shard_hint=1, data_parallel_size=2)) == ([4, 5, 6],)
    hit, n = m.get_computed_pages(req, dp_shard_hint=0, data_parallel_size=2)
    assert (hit.get_page_ids(), n) == (([4, 5],), 8)


def test_a_model_whose_groups_never_cache_keeps_no_keys() -> None:
    m = CacheManager(8, [mamba(64)], 64, hash_seed=1)  # Mamba "none" mode: nothing is ever keyed
    req = Request("a", list(range(20)))
    hit, n = m.get_computed_pages(req)
    assert (hit.get_page_ids(), n) == (([],), 0)
    assert m.page_hashes_of("a") == () and m.hashed_request_ids() == []
    assert ids(m.allocate_slots(req, 20)) == ([1],)


def test_a_request_that_wants_prompt_logprobs_computes_no_key() -> None:
    def failing(_: Any) -> int:
        raise RuntimeError("no key")

    scheme: Any = failing  # a user hash function (verikv.hashing.PageHasher takes one)
    m = CacheManager(16, [full(4)], 64, hash_scheme=scheme)
    req = Request("a", list(range(9)), prompt_logprobs=True)
    hit, n = m.get_computed_pages(req)
    assert (hit.get_page_ids(), n) == (([],), 0)
    with pytest.raises(VeriKVError):
        m.get_computed_pages(Request("b", list(range(9))))  # (the function is used otherwise)


def test_a_hit_given_after_the_request_freed_its_pages_is_checked_by_its_keys() -> None:
    m = page4_manager()
    cached(m, list(range(9)))
    a = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(a)
    assert ids(m.allocate_slots(a, 1, n, hit)) == ([4],)  # free list: 4..15, then 3, 2, 1
    m.free(a)  # a keeps its keys; its last lookup was taken. Free list: 5..15, 3, 4, 2, 1
    again, n = m.get_computed_pages(Request("other", list(range(9))))
    assert n == 8
    assert ids(m.allocate_slots(a, 1, 8, again)) == ([5],)


# --- CachePages ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [5, "ab", b"ab", [5], ["ab"], [{1}]])
def test_cache_pages_need_one_sequence_of_ids_per_group(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        CachePages(bad)


def test_cache_pages_keep_their_pool() -> None:
    m = page4_manager()
    pages = CachePages([[1, 2]], m.page_pool)
    assert [p.page_id for p in pages.pages[0]] == [1, 2]
    assert pages.new_empty().page_pool is m.page_pool and pages.new_empty().get_page_ids() == ([],)
    bare = CachePages([[3]])
    assert (bare + pages).page_pool is m.page_pool and (pages + bare).page_pool is m.page_pool
    assert (bare + pages).get_page_ids() == ([3, 1, 2],)
    assert (bare + CachePages([[4]])).page_pool is None


@pytest.mark.parametrize("allow_none", [1, 0, "yes", None])
def test_allow_none_must_be_a_bool(allow_none: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=named("allow_none")):
        CachePages([[1]]).get_page_ids(allow_none)


def test_allow_none_gives_none_only_when_every_group_is_empty() -> None:
    assert CachePages([[], []]).get_page_ids(True) is None
    assert CachePages([[], [2]]).get_page_ids(True) == ([], [2])
    assert CachePages([[1]]).get_page_ids(True) == ([1],)
    assert CachePages([[], []]).get_page_ids(False) == ([], [])


def test_the_no_new_page_result_is_shared_and_immutable() -> None:
    m = page4_manager()
    reqs = [Request(rid, list(range(5))) for rid in "ab"]
    for req in reqs:
        m.allocate_slots(req, 5)
        req.num_computed_tokens = 5
        req.status = RequestStatus.RUNNING
        req.append_output_token_ids(1)
    first, second = (m.allocate_slots(req, 1) for req in reqs)
    assert first is second and first is not None and first.page_ids == ((),)
    assert first.get_page_ids(True) is None and first.get_page_ids(group_ids=[0]) == ([],)
    with pytest.raises(InvalidArgumentError, match=named("allow_none")):
        first.get_page_ids(1)  # type: ignore[call-overload]


def test_a_decode_step_that_takes_a_page_has_pool_views() -> None:
    m = page4_manager()
    req = running(m, "a", list(range(8)))
    req.append_output_token_ids(1)
    out = m.allocate_slots(req, 1)  # 9 tokens: a new page, and page 2 is cached
    assert out is not None and [p.page_id for p in out.pages[0]] == [3]


# --- from_plan ----------------------------------------------------------------------------------------

class _Plan:
    def __init__(self, dp: int | None = None) -> None:
        if dp is not None:
            self.data_parallel_size = dp

    def to_cache_groups_config(self) -> Any:
        from verikv.cache_specs import CacheGroupsConfig

        return CacheGroupsConfig(16, (full(4),))


def test_from_plan_takes_the_plans_dp_size_unless_given() -> None:
    assert CacheManager.from_plan(_Plan(2), 64).data_parallel_size == 2
    assert CacheManager.from_plan(_Plan(2), 64, data_parallel_size=4).data_parallel_size == 4
    given_none = CacheManager.from_plan(_Plan(2), 64, data_parallel_size=None)
    assert given_none.data_parallel_size == 1
    assert CacheManager.from_plan(_Plan(), 64).data_parallel_size == 1


# --- the batched step ---------------------------------------------------------------------------------

def grown(reqs: list[Request], n: int = 1) -> list[Request]:
    for r in reqs:
        r.append_output_token_ids([1] * n)
    return reqs


@pytest.mark.parametrize("shape", [list, tuple])
def test_a_batch_with_lookahead_slots_covers_them(shape: Any) -> None:
    m = page4_manager(32)
    reqs = grown([running(m, rid, list(range(k, k + 4))) for k, rid in enumerate("abc")])  # pages 1, 2, 3
    out = m.allocate_slots_batch(shape(reqs), 1, num_lookahead_tokens=4)  # 9 slots: 3 pages each
    assert [ids(o) for o in out] == [([4, 5],), ([6, 7],), ([8, 9],)]


def test_a_batch_with_delayed_caching_caches_nothing() -> None:
    m = page4_manager(32)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 7))) for k, rid in enumerate("ab")], 2)
    assert [m.num_cached_pages(r.request_id) for r in reqs] == [[1], [1]]
    m.allocate_slots_batch(reqs, 2, delay_cache_pages=True)  # 9 tokens: page 2 full, not cached
    assert [m.num_cached_pages(r.request_id) for r in reqs] == [[1], [1]]
    m.allocate_slots_batch([Request("c", list(range(9)))], 9)
    assert m.num_cached_pages("c") == [2]


def test_a_batch_caches_the_pages_its_steps_fill() -> None:
    m = page4_manager(32)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 7))) for k, rid in enumerate("ab")], 2)
    out = m.allocate_slots_batch(reqs, 2)  # 9 tokens each: a new page, and page 2 cached
    assert [ids(o) for o in out] == [([5],), ([6],)]
    assert [m.num_cached_pages(r.request_id) for r in reqs] == [[2], [2]]
    hit, n = m.get_computed_pages(Request("x", list(range(10, 17)) + [1, 1, 5]))
    assert (hit.get_page_ids(), n) == (([3, 4],), 8)


def test_a_batch_admits_requests_holding_nothing_from_the_whole_pool() -> None:
    m = page4_manager(16, data_parallel_size=2)
    a = running(m, "a", list(range(4)), dp_shard_hint=1, data_parallel_size=2)  # page 8
    grown([a])
    new = Request("n", list(range(50, 55)))
    out = m.allocate_slots_batch([a, new], [1, 5], data_parallel_size=2)
    assert [ids(o) for o in out] == [([9],), ([1, 2],)]
    assert m.request_shard("a") == 1 and m.request_shard("n") is None


def test_a_batch_takes_numpy_counts_and_a_preempted_request() -> None:
    m = page4_manager(32)
    a = grown([running(m, "a", list(range(4)))])[0]
    p = Request("p", list(range(20, 28)))
    p.status = RequestStatus.PREEMPTED
    out = m.allocate_slots_batch([a, p], [exact(np.int64, 1), exact(np.int32, 8)])
    assert [ids(o) for o in out] == [([2],), ([3, 4],)]


@pytest.mark.parametrize("bad", ["finished", "count-zero", "duplicate", "not-a-request", "lost-kv"])
def test_a_bad_element_of_a_plain_batch_rejects_the_batch(bad: str) -> None:
    m = page4_manager(32)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 4))) for k, rid in enumerate("abc")])
    counts: Any = [1, 1, 1]
    batch: list[Any] = list(reqs)
    if bad == "finished":
        reqs[2].status = RequestStatus.FINISHED_STOPPED
    elif bad == "count-zero":
        counts = [1, 0, 1]
    elif bad == "duplicate":
        batch[2] = reqs[0]
    elif bad == "not-a-request":
        batch[1] = "b"
    else:
        lost = Request("lost", [1, 2])
        lost.num_computed_tokens = 2
        batch[1] = lost
    before = state(m)
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots_batch(batch, counts)
    assert state(m) == before


def test_a_plain_batch_of_steps_beyond_max_model_len_is_rejected() -> None:
    m = CacheManager(16, [full(4)], 8, hash_seed=1)
    a = grown([running(m, "a", list(range(8)))])[0]
    b = grown([running(m, "b", list(range(3)))])[0]
    before = state(m)
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots_batch([b, a], 1)
    assert state(m) == before


def test_a_batch_with_a_reused_id_drops_the_old_objects_keys() -> None:
    m = page4_manager(32)
    old = Request("a", list(range(8)))
    m.get_computed_pages(old)
    m.allocate_slots(old, 8)
    m.free(old)
    kept = m.page_hashes_of("a")
    new = Request("a", list(range(100, 108)))
    out = m.allocate_slots_batch([new], 8)
    assert out[0] is not None and len(m.page_hashes_of("a")) == 2
    assert set(m.page_hashes_of("a")).isdisjoint(kept)


def test_a_batch_with_events_records_one_call_per_element() -> None:
    m = page4_manager(32, enable_kv_events=True)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 7))) for k, rid in enumerate("ab")], 2)
    m.take_events()
    out = m.allocate_slots_batch(reqs, 2)
    assert [ids(o) for o in out] == [([5],), ([6],)]
    stored = [e for e in m.take_events() if isinstance(e, PageStored)]
    assert [e.page_ids for e in stored] == [(2,), (4,)]


def test_a_hit_whose_page_lost_its_key_since_the_lookup_is_refused() -> None:
    """A lookup's hit (page 1, 4 tokens) goes stale: page 1 is evicted and reused, then the
    prefix cache is reset. Giving the old result back is refused (INV-HIT-SAFE). The pool's key
    version is then 4, the hit's length: the shortcut for an unchanged last lookup must compare
    versions, not lengths."""
    m = page4_manager(3)  # pages 1, 2
    seed = Request("seed", [1, 2, 3, 4, 5])
    m.allocate_slots(seed, 5)
    m.free(seed)  # page 1 cached (key version 1), free list 2, 1
    req = Request("r", [1, 2, 3, 4, 9])
    hit, n = m.get_computed_pages(req)
    assert (hit.get_page_ids(), n) == (([1],), 4)
    other = Request("o", [7, 7, 7, 7, 7])
    assert ids(m.allocate_slots(other, 5)) == ([2, 1],)  # evicts page 1's key, caches page 2's
    m.free(other)
    assert m.reset_prefix_cache()
    assert m.page_pool.key_version == 4  # (the coincidence this test is about)
    with pytest.raises(InvalidArgumentError, match="does not hold this request's content"):
        m.allocate_slots(req, 1, 4, hit)
    assert m.request_ids() == []


@pytest.mark.parametrize("bad", [True, 1.0, exact(np.int64, 1)])
def test_a_hit_id_that_is_not_an_int_is_a_foreign_page(bad: Any) -> None:
    m = page4_manager()
    cached(m, list(range(9)))
    req = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(req)
    forged = CachePages([[1, 2]], m.page_pool)
    forged.page_ids = ([bad, hit.get_page_ids()[0][1]],)  # (the constructor would have refused it)
    with pytest.raises(ForeignPageError):
        m.allocate_slots(req, 1, n, forged)
    assert m.request_ids() == []


def test_a_plain_batch_step_past_max_model_len_is_rejected_even_with_room_in_its_pages() -> None:
    """max_model_len 6, pages of 4: a request of 6 tokens holds 2 pages (room for 8); one more
    token would be its 7th."""
    m = CacheManager(16, [full(4)], 6, hash_seed=1)
    a = grown([running(m, "a", list(range(6)))])[0]
    before = state(m)
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots_batch([a], 1)
    assert state(m) == before
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        m.allocate_slots(a, 1)


@pytest.mark.parametrize("group", [2, -1, "0", exact(np.int64, 2)])
def test_a_bad_group_selection_is_named(group: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=named("group id")):
        CachePages([[1], [2]]).get_page_ids(group_ids=[0, group])


def test_a_decode_step_that_caches_without_a_new_page_gives_the_shared_result() -> None:
    m = page4_manager()
    req = running(m, "a", list(range(7)))  # pages 1, 2; page 1 cached, caching due at 8 tokens
    grown([req])
    out = m.allocate_slots(req, 1)  # 8 tokens: page 2 is full and gets cached, no new page
    assert out is not None and out.page_ids == ((),) and out.get_page_ids() == ([],)
    assert m.num_cached_pages("a") == [2]


def test_a_decode_step_that_caches_and_takes_a_page_has_pool_views() -> None:
    m = page4_manager()
    req = running(m, "a", list(range(11)))  # pages 1..3; 2 cached, caching due at 12 tokens
    grown([req], 2)
    out = m.allocate_slots(req, 2)  # 13 tokens: page 3 cached, page 4 taken
    assert out is not None and [p.page_id for p in out.pages[0]] == [4]
    assert m.num_cached_pages("a") == [3]


def test_a_plain_batch_with_one_count_for_all_uses_that_count() -> None:
    m = page4_manager(32)
    a = grown([running(m, "a", list(range(6)))], 3)[0]  # pages 1, 2: room for 8 tokens
    out = m.allocate_slots_batch([a], 3)  # 9 tokens: a third page
    assert [ids(o) for o in out] == [([3],)]


@pytest.mark.parametrize("counts", [[1, 1, "x"], [1, 1, 1.5], [1, 1, 1], [1]])
def test_a_batch_needs_exactly_one_int_count_per_request(counts: list[Any]) -> None:
    m = page4_manager(32)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 4))) for k, rid in enumerate("ab")])
    before = state(m)
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots_batch(reqs, counts)
    assert state(m) == before


def test_an_empty_batch_does_nothing() -> None:
    m = page4_manager()
    before = state(m)
    assert m.allocate_slots_batch([], []) == [] and m.allocate_slots_batch([], 1) == []
    assert state(m) == before


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5, exact(np.int64, 0)])
def test_a_bad_count_in_a_batchs_list_is_rejected_by_name(bad: Any) -> None:
    m = page4_manager(32)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 4))) for k, rid in enumerate("ab")])
    before = state(m)
    with pytest.raises(InvalidArgumentError, match=named("num_new_tokens")):
        m.allocate_slots_batch(reqs, [1, bad])
    assert state(m) == before


# --- a batch taken element by element, and its caching keys (full run on ecbc580) ------------------
# When one element of a decode batch needs two new pages, the pages are not taken at once: each
# element is the single `allocate_slots` call it stands for (the method's docstring).


def _mixed_batch(m: CacheManager) -> tuple[list[Request], list[CachePages | None]]:
    """Page size 4. "a" holds 7 computed tokens and decodes its 8th: its page fills up and gets
    cached, no new page. "b" holds 8 and decodes its 9th: one new page. "c" holds 4 and takes 8
    more in one step: two new pages, and two more pages to cache."""
    a, b = running(m, "a", list(range(100, 107))), running(m, "b", list(range(200, 208)))
    a.append_output_token_ids([107])
    b.append_output_token_ids([208])
    c = Request("c", list(range(300, 304)))
    first = m.allocate_slots(c, 4)
    assert first is not None
    c.num_computed_tokens, c.status = 4, RequestStatus.RUNNING
    c.append_output_token_ids(list(range(304, 312)))
    return [a, b, c], m.allocate_slots_batch([a, b, c], [1, 1, 8])


def _hit_length(m: CacheManager, tokens: list[int], **request_options: Any) -> int:
    """Tokens a new request starting with ``tokens`` (and one more) finds cached."""
    return m.get_computed_pages(Request("probe", [*tokens, 999], **request_options))[1]


def test_an_element_that_needs_no_page_gets_the_shared_no_new_page_result() -> None:
    m = page4_manager(32)
    _, (first, _, _) = _mixed_batch(m)
    d = grown([running(m, "d", list(range(400, 407)))], 1)[0]
    assert first is m.allocate_slots(d, 1)  # the manager's one shared result
    assert first is not None and first.get_page_ids() == ([],)
    assert len(first.page_ids) == 1 and isinstance(first.page_ids[0], tuple)  # its group: an empty tuple


def test_an_element_that_takes_one_page_gets_pool_views() -> None:
    m = page4_manager(32)
    _, (_, second, _) = _mixed_batch(m)
    assert second is not None and len(second.get_page_ids()[0]) == 1
    assert [p.page_id for p in second.pages[0]] == second.get_page_ids()[0]


def test_a_request_stepped_twice_a_page_in_a_batch_is_counted_once_as_holder() -> None:
    m = page4_manager(32)
    (_, _, c), out = _mixed_batch(m)
    assert out[2] is not None and len(out[2].get_page_ids()[0]) == 2
    assert [p.page_id for p in out[2].pages[0]] == out[2].get_page_ids()[0]  # views of the pool
    m.free(c)
    c.cache_salt = "tenant"  # freed: its identity may change again
    assert c.cache_salt == "tenant"


def test_a_batch_step_caches_every_page_it_completes() -> None:
    m = page4_manager(32)
    _mixed_batch(m)
    assert _hit_length(m, list(range(100, 108))) == 8
    assert _hit_length(m, list(range(300, 312))) == 12  # two key pages completed in one step


@pytest.mark.parametrize("step", [4, 8])  # one key page, two
def test_a_batch_step_keys_a_lora_requests_pages_with_its_adapter(step: int) -> None:
    m = page4_manager(32)
    lora: dict[str, Any] = {"lora_name": "adapter", "lora_path": "/weights"}
    req = Request("c", list(range(300, 304)), **lora)
    first = m.allocate_slots(req, 4)
    assert first is not None
    req.num_computed_tokens, req.status = 4, RequestStatus.RUNNING
    req.append_output_token_ids(list(range(304, 304 + step)))
    out = m.allocate_slots_batch([req], step)
    assert out[0] is not None
    assert _hit_length(m, list(range(300, 304 + step)), **lora) == 4 + step
    assert _hit_length(m, list(range(300, 304 + step))) == 0  # the same tokens without the adapter


def test_the_keys_of_a_batch_step_do_not_depend_on_the_hosts_byte_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a big-endian host the manager has no one-page key shortcut; the keys are the same."""
    monkeypatch.setattr(sys, "byteorder", "big")
    m = page4_manager(32)
    _mixed_batch(m)
    assert _hit_length(m, list(range(100, 108))) == 8
    assert _hit_length(m, list(range(300, 312))) == 12


def test_a_batch_raises_what_its_first_failing_call_raises() -> None:
    """`allocate_slots_batch` is `allocate_slots` for each request in order: with a DP size the
    manager refuses, the first call already raises for it, before a later request's own error."""
    m = page4_manager(16, data_parallel_size=2)
    ok = Request("ok", [1, 2])
    done = Request("done", [3, 4])
    done.status = RequestStatus.FINISHED_STOPPED
    before = state(m)
    with pytest.raises(InvalidArgumentError, match=named("data_parallel_size")):
        m.allocate_slots_batch([ok, done], 2, data_parallel_size=4)
    assert state(m) == before


# --- batches with DP arguments (allocate_slots for each request, with the call's DP size) ----------


@pytest.mark.parametrize("value", [0, -1, "2", 4])  # 4: this manager's DP size is 2
def test_a_bad_dp_size_of_a_batch_is_rejected_by_name_and_changes_nothing(value: Any) -> None:
    m = page4_manager(16, data_parallel_size=2)
    reqs = grown([running(m, rid, list(range(k * 10, k * 10 + 4))) for k, rid in enumerate("ab")], 4)
    before = state(m)
    with pytest.raises(InvalidArgumentError, match=named("data_parallel_size")):
        m.allocate_slots_batch(reqs, 4, data_parallel_size=value)
    assert state(m) == before


@pytest.mark.parametrize("dp", [2, None])
def test_a_batch_step_of_a_sharded_request_takes_its_pages_in_its_shard(dp: int | None) -> None:
    m = page4_manager(16, data_parallel_size=2)  # shard 1: pages 8 .. 15
    a = running(m, "a", list(range(4)), dp_shard_hint=1, data_parallel_size=2)
    b = running(m, "b", list(range(20, 28)), dp_shard_hint=1, data_parallel_size=2)
    grown([a, b], 4)
    out = m.allocate_slots_batch([a, b], 4, data_parallel_size=dp)  # one new page each
    assert all(o is not None and len(o.get_page_ids()[0]) == 1 for o in out)
    assert all(8 <= p < 16 for rid in "ab" for p in m.get_page_ids(rid)[0])
    assert m.request_shard("a") == 1 and m.request_shard("b") == 1
    m.free(a)
    a.cache_salt = "tenant"  # freed: its identity may change again (one holder, counted once)


def test_a_dp_batch_caches_the_pages_its_steps_fill() -> None:
    m = page4_manager(16, data_parallel_size=2)
    a = running(m, "a", list(range(4)), dp_shard_hint=0, data_parallel_size=2)
    a.append_output_token_ids([4, 5, 6, 7])
    out = m.allocate_slots_batch([a], 4, data_parallel_size=2)
    assert out[0] is not None
    probe = Request("probe", [*range(8), 99])
    assert m.get_computed_pages(probe, dp_shard_hint=0, data_parallel_size=2)[1] == 8


def test_a_batch_of_plain_decode_steps_gives_the_shared_result_and_pool_views() -> None:
    """Every step takes at most one page: the pages are taken at once, and each result is what
    its single call returns."""
    m = page4_manager(32)
    a, b = running(m, "a", list(range(100, 107))), running(m, "b", list(range(200, 208)))
    a.append_output_token_ids([107])  # 8 tokens: page 2 fills up and is cached, no new page
    b.append_output_token_ids([208])  # 9 tokens: one new page
    first, second = m.allocate_slots_batch([a, b], 1)
    d = grown([running(m, "d", list(range(400, 407)))], 1)[0]
    assert first is m.allocate_slots(d, 1)  # the manager's one shared result
    assert second is not None and len(second.get_page_ids()[0]) == 1
    assert [p.page_id for p in second.pages[0]] == second.get_page_ids()[0]
    assert _hit_length(m, list(range(100, 108))) == 8


@pytest.mark.parametrize("hint", [0, 3])
def test_a_dp_size_of_one_is_accepted_and_uses_the_whole_pool(hint: int) -> None:
    m = page4_manager(8)
    pages = m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=hint, data_parallel_size=1)
    assert pages is not None
    assert m.request_shard("a") is None and m.data_parallel_size == 1


@pytest.mark.parametrize("value", ["0", 1.0])
def test_a_bad_dp_shard_hint_is_rejected_by_name_without_a_dp_size_too(value: Any) -> None:
    m = page4_manager()
    with pytest.raises(InvalidArgumentError, match=named("dp_shard_hint")):
        m.allocate_slots(Request("a", [1, 2]), 2, dp_shard_hint=value)
    assert m.request_ids() == []


def test_a_dp_call_without_a_shard_hint_does_not_fix_an_open_dp_size() -> None:
    """docs/semantics.md: the first successful call whose DP is active *and that names a shard*
    fixes an open DP size."""
    m = page4_manager(8)
    pages = m.allocate_slots(Request("a", [1, 2]), 2, data_parallel_size=2)
    assert pages is not None and m.data_parallel_size == 1
    pages = m.allocate_slots(Request("b", [1, 2]), 2, dp_shard_hint=1, data_parallel_size=4)
    assert pages is not None and m.data_parallel_size == 4 and m.request_shard("b") == 1


def test_a_lookup_of_a_request_subclass_works() -> None:
    class Traced(Request):
        __slots__ = ()

    m = page4_manager()
    cached(m, list(range(8)))
    assert m.get_computed_pages(Traced("a", list(range(9))))[1] == 8


@pytest.mark.parametrize("cap", [8, 9, 100])
def test_a_hit_cap_beyond_the_prompt_still_leaves_its_last_token_to_compute(cap: int) -> None:
    m = page4_manager()
    cached(m, list(range(8)))
    assert m.get_computed_pages(Request("a", list(range(8))), max_cache_hit_length=cap)[1] == 4


@pytest.mark.parametrize("call", ["single", "batch", "batch of counts"])
def test_another_request_object_under_a_held_id_is_refused_and_changes_nothing(call: str) -> None:
    m = page4_manager(32)
    grown([running(m, "a", list(range(8)))], 1)
    imposter = Request("a", list(range(9)))  # the same id, another object
    imposter.num_computed_tokens, imposter.status = 8, RequestStatus.RUNNING
    before = state(m)
    with pytest.raises(InvalidArgumentError, match="another Request object"):
        if call == "single":
            m.allocate_slots(imposter, 1)
        else:
            m.allocate_slots_batch([imposter], 1 if call == "batch" else [1])
    assert state(m) == before


def test_a_step_planned_in_general_counts_its_request_once_as_holder() -> None:
    m = page4_manager(32)
    req = running(m, "a", list(range(4)))
    req.append_output_token_ids(list(range(4, 12)))
    out = m.allocate_slots(req, 8)  # two new pages: not a decode step
    assert out is not None and len(out.get_page_ids()[0]) == 2
    m.free(req)
    req.cache_salt = "tenant"  # freed: its identity may change again
    assert req.cache_salt == "tenant"


@pytest.mark.parametrize("skip", [None, False, True])  # None: the default (off)
def test_skip_unreachable_sliding_pages_leaves_only_those_pages_unkeyed(skip: bool | None) -> None:
    """Full attention (page 8) + sliding window 2 (page 2): the hit unit spans 4 sliding pages,
    and a hit needs only the last of them (docs/differences.md); 17 tokens fill 8 pages."""
    options: dict[str, Any] = {} if skip is None else {"skip_unreachable_sliding_pages": skip}
    m = CacheManager(64, [full(8), sliding(2, 2)], 64, hash_seed=1, **options)
    out = m.allocate_slots(Request("r", list(range(17))), 17)
    assert out is not None
    sliding_pages = out.get_page_ids()[1]  # 9 pages, the last one partial
    unkeyed = out.get_unhashed_page_ids_all_groups()[1]
    if skip:
        assert unkeyed == [p for j, p in enumerate(sliding_pages) if j % 4 != 3]  # the partial one among them
    else:
        assert unkeyed == sliding_pages[-1:]  # only the partial page


# --- caching's next due point (HeldState.cache_at) ----------------------------------------------------


def test_caching_is_next_due_at_the_end_of_the_key_page_after_the_cached_tokens() -> None:
    # HeldState: cache_at is the end of the first key page not yet covered by a caching
    # call, at most max_model_len + 1 ("never": that page ends past max_model_len)
    m = CacheManager(32, [full(4)], 16, hash_seed=1)
    req = Request("a", list(range(16)))
    expected = {6: 8, 12: 16, 16: 17}  # tokens cached -> next due: 1 key page, 3 (ends at 16), 4
    computed = 0
    for num_tokens, due in expected.items():
        req.num_computed_tokens = computed
        assert m.allocate_slots(req, num_tokens - computed) is not None
        held = m.coordinator.holding("a")
        assert held is not None and held.cache_at == due
        computed = num_tokens
        req.status = RequestStatus.RUNNING


def test_cache_pages_after_cached_steps_extends_the_request_keys() -> None:
    # the keys already computed for the request are kept and only the missing ones are added:
    # one key per full page, each page then found under its own key by another request
    m = page4_manager()
    tokens = list(range(13))
    req = Request("a", tokens)
    m.allocate_slots(req, 8)  # pages 1-2 cached at once, with their keys
    assert len(m.page_hashes_of("a")) == 2
    req.num_computed_tokens = 8
    m.allocate_slots(req, 4, delay_cache_pages=True)
    m.cache_pages(req, 12)
    keys = m.page_hashes_of("a")
    assert len(keys) == 3 and len(set(keys)) == 3
    assert m.num_cached_pages("a") == [3]
    _, hit = m.get_computed_pages(Request("b", tokens))
    assert hit == 12


def test_the_last_lookup_result_changed_in_place_to_hold_a_null_page_is_refused() -> None:
    """Null placeholders are not checked again for the request's own last lookup, unchanged (its
    groups' rules placed them): the same result object with a null page written into its full
    group's ids is no longer that lookup, and is refused with nothing changed."""
    m = page4_manager(16, [full(4), sliding(4, 4)])
    cached(m, list(range(9)))
    req = Request("a", list(range(9)))
    hit, n = m.get_computed_pages(req)
    assert n == 8 and hit.page_ids[0][0] != 0
    hit.page_ids[0][0] = 0
    before = state(m)
    with pytest.raises(InvalidArgumentError, match="null page at hit position 0"):
        m.allocate_slots(req, 1, 8, hit)
    assert state(m) == before


def test_a_failed_admission_with_the_last_lookups_hit_changes_nothing() -> None:
    """A prompt whose new pages alone do not fit (the plan stops before counting the free hits)
    is refused with nothing changed, and admitted once its pages are there."""
    m = page4_manager(8)
    cached(m, list(range(9)))  # pages 1, 2 cached and free
    hog = Request("hog", list(range(100, 120)))
    assert m.allocate_slots(hog, 20) is not None  # 5 of the 7 usable pages
    req = Request("a", list(range(9)) + list(range(50, 62)))  # 21 tokens: 2 hit pages + 4 new
    hit, n = m.get_computed_pages(req)
    assert n == 8
    before = state(m)
    assert m.allocate_slots(req, 13, 8, hit) is None
    assert state(m) == before
    m.free(hog)
    hit, n = m.get_computed_pages(req)
    assert m.allocate_slots(req, 13, n, hit) is not None


def test_a_manager_whose_groups_do_not_cache_keeps_no_content_key() -> None:
    """A Mamba group in "none" mode caches nothing, so no group has a key page size: allocating
    and caching a request's tokens compute no key (caching needs one key per full key page only
    when a group caches)."""
    m = CacheManager(8, [mamba(64)], 64, hash_seed=1)
    req = Request("a", list(range(40)))
    assert m.allocate_slots(req, 40) is not None
    req.num_computed_tokens = 40
    m.cache_pages(req, 40)
    assert m.page_hashes_of("a") == ()
