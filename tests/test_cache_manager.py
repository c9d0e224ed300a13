"""CacheManager and CachePages end to end: eSurge's observable behaviour and our departures."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from layouts import KW, full, sliding

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
    # eSurge §1.3: pool of 8, request holds [1,2,3,4], 5,6,7 free -> free list 5,6,7,4,3,2,1.
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
    # issue 18: a hit equal to the request's own last lookup skips only the per-page key
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
