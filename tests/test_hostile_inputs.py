"""The hostile-input suite: every public entry point of verikv, many hostile values each.

Each case (see `tests.hostile`) builds a fresh world, makes one call and asserts: a rejected
call raises a `VeriKVError` subclass, a bad value is never silently accepted (the cases a
correct library must or may accept are listed by each parameter's profile), the world's full
snapshot is unchanged after a rejection, the invariants hold afterwards, and the call answers
within `tests.hostile.HANG_SECONDS` (hang detection only).

This module's ``CASES`` cover the manager, the pool, the free queue, hashing, requests, cache
specs, page tables, statistics, DP helpers and sizing's values; the ``hostile_*_cases.py``
modules add their own surfaces, and `test_hostile_case` runs them all (`hostile.all_cases`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile import (
    HOSTILE,
    Case,
    HashFlipStr,
    P,
    W,
    WList,
    World,
    all_cases,
    known_open_still_fail,
    resolve,
    run_case,
    subject,
    substitution_cases,
)
from hostile_known_open import KNOWN_OPEN

import verikv
from verikv import (
    CacheGroupsConfig,
    CacheGroupSpec,
    CacheManager,
    CachePage,
    CachePages,
    ChunkedLocalAttentionSpec,
    FreeCachePageQueue,
    FullAttentionSpec,
    MambaSpec,
    MultiGroupPageTable,
    PageHasher,
    PagePool,
    PageRemoved,
    PageStored,
    PageTable,
    PrefixCacheStats,
    Request,
    RequestStatus,
    SlidingWindowSpec,
)
from verikv.events import EventLog
from verikv.kv_events import ZmqEventPublisher

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
FULL = CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))
SW = CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=8, **KW))


# --- worlds -----------------------------------------------------------------------------------

def _admit(m: CacheManager, req: Request, **dp: Any) -> Request:
    hits, n = m.get_computed_pages(req, **dp)
    if m.allocate_slots(req, req.num_tokens - n, n, hits, **dp) is None:
        raise RuntimeError("world setup: allocation failed")
    req.num_computed_tokens = req.num_tokens
    return req


def manager_world(groups: tuple[CacheGroupSpec, ...] = (FULL,), dp: int | None = None) -> World:
    """A manager with a running ``a``, a preempted ``b`` (keys kept), a finished ``f``, a new ``c``
    sharing ``b``'s prefix (looked up: ``hits``), and a fresh unrelated ``n``."""
    hint = {} if dp is None else dict(dp_shard_hint=1, data_parallel_size=dp)
    m = CacheManager(32, list(groups), 64, hash_seed=0, enable_kv_events=True, data_parallel_size=dp)
    a = _admit(m, Request("a", list(range(10))), **hint)
    a.status = RequestStatus.RUNNING
    b = _admit(m, Request("b", list(range(100, 109))), **hint)
    m.free(b)
    b.num_computed_tokens = 0
    b.status = RequestStatus.PREEMPTED
    f = _admit(m, Request("f", [7] * 5), **hint)
    m.free(f)
    m.free_page_hashes(f)
    f.status = RequestStatus.FINISHED_STOPPED
    c = Request("c", list(range(100, 109)) + [1, 2])
    hits, _ = m.get_computed_pages(c, **hint)
    return dict(m=m, a=a, b=b, f=f, c=c, hits=hits, n=Request("n", [3] * 6))


def hybrid_world() -> World:
    return manager_world((FULL, SW), dp=2)


def pool_world(dp: bool = False) -> World:
    """A pool of 16 pages: 1-3 held (2 cached under "k2"), 4 cached and free, the rest free;
    ``views`` holds the view of page 1, ``other`` is a second pool."""
    pool = PagePool(16, enable_kv_events=True)
    if dp:
        pool.get_num_free_pages(dp_shard_hint=0, data_parallel_size=2)
    held = pool.get_new_page_ids(4)
    pool.cache_page_id(held[1], "k2")
    pool.cache_page_id(held[3], "k4")
    pool.free_page_ids([held[3]])
    return dict(pool=pool, other=PagePool(4), views=[pool.page(1)])


def queue_world() -> World:
    pages = [CachePage(i) for i in (1, 2, 3, 5)]
    q = FreeCachePageQueue(pages)
    q.popleft()
    return dict(q=q, pages=pages, loose=CachePage(9))


def page_world() -> World:
    return dict(p=CachePage(3, ref_cnt=1), null=CachePage(0, is_null=True))


def table_world() -> World:
    t = PageTable(4, 4, 16)
    t.append_row([1, 2], 0)
    mt = MultiGroupPageTable(4, 16, 16, [4, 8])
    mt.append_row([[1, 2], [3]], 0)
    return dict(t=t, mt=mt)


def request_world() -> World:
    return dict(r=Request("r", list(range(9))))


def empty_world() -> World:
    return {}


def stats_world() -> World:
    return dict(s=PrefixCacheStats(requests=1, queries=4, hits=2), log=EventLog())


# --- entry points: (name, world builder, call, parameters) -----------------------------------

COUNT0, COUNT1 = "count0", "count1"
BIGS = frozenset({"2**31", "2**63", "10**100"})
SEED_REJECT = frozenset({"nan", "inf", "-inf", "1.5", "2.0", "np_float", "object", "callable", "bad_index",
                         "bad_int", "True", "False", "np_bool", "surrogate"})
SEED_EITHER = frozenset({"np_int", "np_neg", "hashflip_int", "hashflip_str"})  # hashed once, to bytes
NEG = frozenset({"neg1", "np_neg", "-10**100"})  # eSurge takes hint % dp: a negative hint is legal
NO_DP = dict(dp_shard_hint=P(None, "opt_count0", either=NEG), data_parallel_size=P(None, "opt_count1"))


def _manager_targets() -> list[Case]:
    cases: list[Case] = []
    ctor = dict(
        num_pages=P(32, COUNT1, reject={"2**31", "2**63", "10**100"}),
        kv_cache_groups=P([FULL], "object", accept={"empty_list"}),
        max_model_len=P(64, COUNT1, reject={"2**63", "10**100"}),
        enable_caching=P(True, "bool", reject={"np_bool"}),
        use_eagle=P(False, "bool", reject={"np_bool"}),
        hash_scheme=P("sha256", "object", either={"callable"}),
        hash_seed=P(0, "key", reject=SEED_REJECT, accept={"None"}, either=SEED_EITHER),
        free_order=P("esurge", "object"),
        enable_kv_events=P(False, "bool", reject={"np_bool"}),
        data_parallel_size=P(None, "opt_count1"),  # not dividing num_pages: DP off (eSurge's rule)
        mamba_cache_mode=P("none", "object"),
    )
    cases += substitution_cases("CacheManager", empty_world, lambda w, **k: CacheManager(**k), ctor)
    for world_name, build in (("", manager_world), ("hybrid.", hybrid_world)):
        dp = NO_DP if world_name == "" else dict(dp_shard_hint=P(1, "opt_count0", either=NEG | {"zero"}),
                                                 data_parallel_size=P(2, "opt_count1"))
        pre = f"CacheManager.{world_name}"
        cases += substitution_cases(pre + "get_computed_pages", build,
                                    lambda w, **k: w["m"].get_computed_pages(**resolve(w, k)),
                                    dict(request=P(W("c"), "object"), max_cache_hit_length=P(None, "opt_count0"), **dp))
        cases += substitution_cases(pre + "allocate_slots", build,
                                    lambda w, **k: w["m"].allocate_slots(**resolve(w, k)),
                                    dict(request=P(W("c"), "object"),
                                         num_new_tokens=P(2, COUNT1, reject=BIGS),
                                         num_new_computed_tokens=P(8, COUNT0, reject=BIGS | {"zero"}),
                                         new_computed_pages=P(W("hits"), "object"),
                                         num_lookahead_tokens=P(0, COUNT0, either={"np_int"}),
                                         delay_cache_pages=P(False, "bool", reject={"np_bool"}),
                                         num_external_computed_tokens=P(0, COUNT0, reject=BIGS), **dp))
        cases += substitution_cases(pre + "allocate_slots.decode", build,
                                    lambda w, **k: w["m"].allocate_slots(**resolve(w, k)),
                                    dict(request=P(W("a"), "object"), num_new_tokens=P(1, COUNT1, reject=BIGS)))
        cases += substitution_cases(pre + "allocate_slots_batch", build,
                                    lambda w, **k: w["m"].allocate_slots_batch(**resolve(w, k)),
                                    dict(requests=P(WList("a"), "object", accept={"empty_list"}),
                                         num_new_tokens=P(1, COUNT1, reject=BIGS),
                                         num_lookahead_tokens=P(0, COUNT0, either={"np_int"}),
                                         delay_cache_pages=P(False, "bool", reject={"np_bool"})))
        cases += substitution_cases(pre + "cache_pages", build,
                                    lambda w, **k: w["m"].cache_pages(**resolve(w, k)),
                                    dict(request=P(W("a"), "object"), num_computed_tokens=P(8, COUNT0, reject=BIGS)))
        for method in ("free", "free_page_hashes"):
            cases += substitution_cases(pre + method, build,
                                        lambda w, method=method, **k: getattr(w["m"], method)(**resolve(w, k)),
                                        dict(request=P(W("a"), "object")))
        cases += substitution_cases(pre + "get_num_common_prefix_pages", build,
                                    lambda w, **k: w["m"].get_num_common_prefix_pages(**resolve(w, k)),
                                    dict(request=P(W("a"), "object"), num_running_requests=P(1, "opt_count1")))
        for method in ("get_page_ids", "num_cached_pages", "request_shard"):
            cases += substitution_cases(pre + method, build,
                                        lambda w, method=method, **k: getattr(w["m"], method)(**k),
                                        dict(request_id=P("a", "rid")))
        cases += substitution_cases(pre + "page_hashes_of", build,
                                    lambda w, **k: w["m"].page_hashes_of(**k),
                                    dict(request_id=P("a", "rid", accept={"str", "empty_str", "surrogate",
                                                                          "hashflip_str"})))
    cases += substitution_cases("CacheManager.from_plan", empty_world,
                                lambda w, **k: CacheManager.from_plan(**k),
                                dict(plan=P(_plan, "object"), max_model_len=P(64, COUNT1, reject={"2**63", "10**100"})))
    cases += substitution_cases("CachePages", lambda: dict(pool=PagePool(8)),
                                lambda w, **k: CachePages(**resolve(w, k)).get_page_ids(),
                                dict(page_ids=P(lambda: [[1, 2]], "object", accept={"empty_list"},
                                                either={"np_array2d", "ragged"}),
                                     page_pool=P(W("pool"), "object", accept={"None"})))
    cases += substitution_cases("CachePages.get_page_ids", lambda: dict(pages=CachePages([[1, 2], [3]], PagePool(8))),
                                lambda w, **k: w["pages"].get_page_ids(**k),
                                dict(allow_none=P(False, "bool", reject={"np_bool"}),
                                     group_ids=P(lambda: [1, 0], "object", accept={"None", "empty_list"})))
    return cases




def _plan() -> Any:
    from verikv.sizing import get_preset, plan_kv_cache

    return plan_kv_cache(get_preset("llama-3-8b"), "h100", max_model_len=64, memory_bytes=2**31,
                         weights_bytes=0)


def _pool_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("PagePool", empty_world, lambda w, **k: PagePool(**k), dict(
        num_pages=P(16, COUNT1, reject=BIGS),
        enable_caching=P(True, "bool", reject={"np_bool"}),
        free_order=P("esurge", "object"),
        enable_kv_events=P(False, "bool", reject={"np_bool"}),
    ))
    for dp_name, build in (("", pool_world), ("dp.", lambda: pool_world(dp=True))):
        pre = f"PagePool.{dp_name}"
        dp = dict(dp_shard_hint=P(1, "opt_count0", either=NEG), data_parallel_size=P(2, "opt_count1"))

        def method(name: str) -> Any:
            return lambda w, **k: getattr(w["pool"], name)(**resolve(w, k))

        for name in ("page", "ref_count", "key_of"):
            cases += substitution_cases(pre + name, build, method(name),
                                        dict(page_id=P(2, "bounded")))
        for name in ("count_free_ids", "keys_of_ids", "check_cacheable"):
            cases += substitution_cases(pre + name, build, method(name), dict(page_ids=P([1, 5], "ids")))
        cases += substitution_cases(pre + "own_ids", build, method("own_ids"),
                                    dict(pages=P(W("views"), "ids", reject={"list", "np_array"})))
        cases += substitution_cases(pre + "lookup_all_ids", build, method("lookup_all_ids"),
                                    dict(keys=P(["k2", "k4"], "ids", accept={"list", "np_array"}), **dp))
        cases += substitution_cases(pre + "get_num_free_pages", build, method("get_num_free_pages"), dp)
        for name in ("get_new_page_ids", "get_new_pages"):
            cases += substitution_cases(pre + name, build, method(name),
                                        dict(num_pages=P(2, COUNT0, reject=BIGS), **dp))
        cases += substitution_cases(pre + "touch_ids", build, method("touch_ids"),
                                    dict(page_ids=P([2, 4], "ids")))
        cases += substitution_cases(pre + "free_page_ids", build, method("free_page_ids"),
                                    dict(page_ids=P([1], "ids")))
        cases += substitution_cases(pre + "cache_page_id", build, method("cache_page_id"),
                                    dict(page_id=P(3, "bounded", reject={"zero"}),
                                         key=P("k3", "key", reject={"None"})))
        cases += substitution_cases(pre + "cache_page_ids", build, method("cache_page_ids"),
                                    dict(page_ids=P([3], "ids", reject={"empty_list"}),
                                         keys=P(["k3"], "ids", reject={"empty_list"})))
        cases += substitution_cases(pre + "lookup_id", build, method("lookup_id"),
                                    dict(key=P("k2", "key", accept={"None"}), **dp))
        cases += substitution_cases(pre + "lookup_run_ids", build, method("lookup_run_ids"),
                                    dict(keys=P(["k2", "k4"], "ids", accept={"list", "np_array"}), **dp))
        cases += substitution_cases(pre + "touch", build,
                                    lambda w, **k: w["pool"].touch(**resolve(w, k)),
                                    dict(pages=P(W("views"), "ids", accept={"empty_list"},
                                                 reject={"list", "np_array"})))
        cases += substitution_cases(pre + "free_pages", build, method("free_pages"),
                                    dict(ordered_pages=P(W("views"), "ids", reject={"list", "np_array"})))
        cases += substitution_cases(pre + "get_cached_page", build, method("get_cached_page"),
                                    dict(page_hash=P("k2", "key", accept={"None"}),
                                         kv_cache_group_ids=P([0], "ids", either={"list", "np_array"}), **dp))
    cases += substitution_cases("PagePool.cache_full_pages", _caching_pool_world,
                                lambda w, **k: w["pool"].cache_full_pages(**resolve(w, k)), dict(
                                    request=P(W("r"), "object"),
                                    pages=P(W("pages"), "ids", reject={"list", "np_array", "empty_list"}),
                                    page_hashes=P(W("hashes"), "ids", reject={"list", "np_array"}),
                                    num_cached_pages=P(0, COUNT0, either=BIGS),  # >= num_full_pages: a no-op
                                    num_full_pages=P(2, COUNT0, reject=BIGS),
                                    page_size=P(4, COUNT1, reject=BIGS), kv_cache_group_id=P(0, COUNT0, either=BIGS),
                                    hasher=P(W("hasher"), "object", accept={"None"})))
    return cases


def _caching_pool_world() -> World:
    """A pool with two held pages for request ``r`` (9 tokens) and an empty key list."""
    pool = PagePool(8)
    return dict(pool=pool, r=Request("r", list(range(9))), pages=pool.get_new_pages(2), hashes=[],
                hasher=PageHasher("sha256", seed=0))


ANY_INT = frozenset({"zero", "neg1", "2**31", "2**63", "10**100", "-10**100", "np_int", "np_neg"})


def _queue_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("FreeCachePageQueue", empty_world, lambda w, **k: FreeCachePageQueue(**k),
                                dict(pages=P(lambda: [CachePage(1), CachePage(2)], "ids",
                                             reject={"list", "np_array"})))

    def method(name: str) -> Any:
        return lambda w, **k: getattr(w["q"], name)(**resolve(w, k))

    cases += substitution_cases("FreeCachePageQueue.popleft_ids", queue_world, method("popleft_ids"),
                                dict(n=P(1, COUNT0, reject=BIGS)))
    cases += substitution_cases("FreeCachePageQueue.popleft_n", queue_world, method("popleft_n"),
                                dict(n=P(1, COUNT0, reject=BIGS)))
    cases += substitution_cases("FreeCachePageQueue.remove_id", queue_world, method("remove_id"),
                                dict(page_id=P(2, "bounded", reject={"zero"})))
    for name in ("append_ids", "prepend_ids"):
        cases += substitution_cases("FreeCachePageQueue." + name, queue_world, method(name),
                                    dict(ids=P([1], "ids", reject={"list", "np_array"})))
    cases += substitution_cases("FreeCachePageQueue.is_linked", queue_world, method("is_linked"),
                                dict(page_id=P(2, "bounded", accept=ANY_INT)))
    cases += substitution_cases("FreeCachePageQueue.neighbour", queue_world, method("neighbour"),
                                dict(page_id=P(2, "bounded", accept=ANY_INT),
                                     forward=P(True, "bool")))
    for name, valid in (("remove", W("p2")), ("append", W("p1"))):
        cases += substitution_cases("FreeCachePageQueue." + name, _queue_views, method(name),
                                    dict(page=P(valid, "object")))
    cases += substitution_cases("FreeCachePageQueue.append_n", _queue_views, method("append_n"),
                                dict(pages=P(W("p1s"), "ids", reject={"list", "np_array"})))
    return cases


def _queue_views() -> World:
    w = queue_world()
    w["p1"] = w["pages"][0]
    w["p2"] = w["pages"][1]
    w["p1s"] = [w["pages"][0]]
    return w


def _page_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("CachePage", empty_world, lambda w, **k: CachePage(**k), dict(
        page_id=P(3, COUNT0), ref_cnt=P(0, COUNT0), page_hash=P(None, "key", accept={"None"}),
        is_null=P(False, "bool", reject={"np_bool"})))

    def setter(attr: str) -> Any:
        return lambda w, value: setattr(w["p"], attr, value)

    cases += substitution_cases("CachePage.ref_cnt=", page_world, setter("ref_cnt"), dict(value=P(2, COUNT0)))
    cases += substitution_cases("CachePage.page_hash=", page_world, setter("page_hash"),
                                dict(value=P("h", "key", accept={"None"})))
    return cases


PLAIN_EXTRA_KEYS = frozenset({"zero", "neg1", "2**31", "2**63", "10**100", "-10**100", "1.5", "2.0", "inf", "-inf",
                              "True", "False", "str", "empty_str", "bytes", "list", "empty_list", "ragged",
                              "np_int", "np_neg", "np_float", "np_bool", "hashflip_str", "hashflip_int"})
"""Extra keys made of builtin immutable values (or ones a library may normalise to them: verikv
turns a str or int subclass into the exact builtin, so the key's hash cannot change)."""


def _hashing_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("PageHasher", empty_world, lambda w, **k: PageHasher(**k), dict(
        scheme=P("sha256", "object", either={"callable"}),
        seed=P(0, "key", accept={"None"}, reject=SEED_REJECT, either=SEED_EITHER)))
    def hasher() -> World:
        return dict(h=PageHasher("sha256", seed=0), r=Request("r", list(range(9))))

    cases += substitution_cases("PageHasher.hash_page", hasher, lambda w, **k: w["h"].hash_page(**k), dict(
        parent=P(None, "opt_count0", either={"neg1", "np_neg", "-10**100"}),
        token_ids=P([1, 2, 3, 4], "ids", accept={"list"}, either={"np_array"}),
        extra_keys=P(None, "object", accept={"None"}, either=PLAIN_EXTRA_KEYS)))
    cases += substitution_cases("PageHasher.page_extra_keys", hasher,
                                lambda w, **k: w["h"].page_extra_keys(**resolve(w, k)), dict(
                                    request=P(W("r"), "object"), page_index=P(0, COUNT0, either={"2**31"}),
                                    page_size=P(4, COUNT1)))
    cases += substitution_cases("PageHasher.hash_request", hasher,
                                lambda w, **k: w["h"].hash_request(**resolve(w, k)), dict(
                                    request=P(W("r"), "object"), page_size=P(4, COUNT1),
                                    start=P(0, COUNT0), parent=P(None, "opt_count0", either={"neg1", "np_neg"}),
                                    stop=P(None, "opt_count0")))
    cases += substitution_cases("PageHasher.page_key", hasher,
                                lambda w, **k: w["h"].page_key(**resolve(w, k)), dict(
                                    request=P(W("r"), "object"), page_size=P(4, COUNT1), index=P(0, COUNT0),
                                    parent=P(None, "opt_count0", either={"neg1", "np_neg"})))
    cases += substitution_cases("PageHasher.extend", lambda: {**hasher(), "hashes": []},
                                lambda w, **k: w["h"].extend(**resolve(w, k)), dict(
                                    request=P(W("r"), "object"), page_size=P(4, COUNT1),
                                    hashes=P(W("hashes"), "ids", reject={"list", "np_array"})))
    cases += substitution_cases("PageHasher.page_hashes", hasher,
                                lambda w, **k: w["h"].page_hashes(**resolve(w, k)), dict(
                                    request=P(W("r"), "object"), page_size=P(4, COUNT1)))
    cases += substitution_cases("PageHasher.key_hash_value", hasher, lambda w, **k: w["h"].key_hash_value(**k),
                                dict(key=P(bytes(32), "object")))
    cases += substitution_cases("hash_page_tokens", empty_world,
                                lambda w, **k: verikv.hash_page_tokens(**k), dict(
                                    hash_function=P("sha256", "object", either={"callable"}),
                                    parent_page_hash=P(None, "opt_count0", either={"neg1", "np_neg"}),
                                    curr_page_token_ids=P([1, 2], "ids", accept={"list"}, either={"np_array"})))
    cases += substitution_cases("hash_request_tokens", hasher,
                                lambda w, **k: verikv.hash_request_tokens(**resolve(w, k)), dict(
                                    hash_function=P("sha256", "object", either={"callable"}),
                                    page_size=P(4, COUNT1), request=P(W("r"), "object")))
    cases += substitution_cases("default_hasher", empty_world, lambda w, **k: verikv.default_hasher(**k),
                                dict(scheme=P("sha256", "object")))
    return cases


def _request_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("Request", empty_world, lambda w, **k: Request(**k), dict(
        request_id=P("r", "object", accept={"str", "surrogate"}, either={"hashflip_str"}),
        prompt_token_ids=P([1, 2, 3], "ids", accept={"list", "np_array"}, reject={"empty_list"}),
        cache_salt=P(None, "object", accept={"None", "str", "bytes"}, either={"empty_str", "hashflip_str"},
                     reject=set()),
        lora_id=P(None, "opt_count0", either={"2**31"}),
        lora_name=P(None, "object", accept={"None", "str"}, either={"hashflip_str"}),
        lora_path=P(None, "object", accept={"None"}),  # a path without a name is refused
        mm_features=P((), "ids", reject={"list", "np_array"}),
        prompt_logprobs=P(False, "bool", reject={"np_bool"})))

    def setter(attr: str) -> Any:
        return lambda w, value: setattr(w["r"], attr, value)

    for attr, param in (
        ("num_computed_tokens", P(3, COUNT0, either=BIGS)),
        ("status", P(RequestStatus.RUNNING, "object")),
        ("request_id", P("q", "object", accept={"str", "surrogate"}, either={"hashflip_str"})),
        ("cache_salt", P("s", "object", accept={"None", "str", "bytes"}, either={"empty_str", "hashflip_str"})),
        ("lora_id", P(1, "opt_count0", either={"2**31"})),
        ("lora_name", P("n", "object", accept={"None", "str"}, either={"hashflip_str"})),
        ("lora_path", P(None, "object", accept={"None"})),  # the request has no name
        ("mm_features", P((), "ids", reject={"list", "np_array"})),
        ("prompt_logprobs", P(True, "bool", reject={"np_bool"})),
    ):
        cases += substitution_cases(f"Request.{attr}=", request_world, setter(attr), dict(value=param))
    cases += substitution_cases("Request.append_output_token_ids", request_world,
                                lambda w, **k: w["r"].append_output_token_ids(**k),
                                dict(token_ids=P([5], "ids", accept={"list", "zero", "np_int", "np_array",
                                                                     "hashflip_int", "2**31", "2**63"})))
    return cases


def _spec_targets() -> list[Case]:
    cases: list[Case] = []
    attn = dict(page_size=P(4, COUNT1, either=BIGS), num_kv_heads=P(1, COUNT1, either=BIGS),
                head_size=P(8, COUNT1, either=BIGS),
                dtype=P(np.float16, "object"),
                use_mla=P(False, "bool"))
    cases += substitution_cases("FullAttentionSpec", empty_world, lambda w, **k: FullAttentionSpec(**k),
                                dict(**attn, sliding_window=P(None, "opt_count1", either=BIGS)))
    cases += substitution_cases("SlidingWindowSpec", empty_world, lambda w, **k: SlidingWindowSpec(**k),
                                dict(**{**attn, "use_mla": P(False, "bool", reject={"True"})},  # MLA has no window
                                     sliding_window=P(8, COUNT1, either=BIGS)))
    cases += substitution_cases("ChunkedLocalAttentionSpec", empty_world,
                                lambda w, **k: ChunkedLocalAttentionSpec(**k),
                                dict(**attn, attention_chunk_size=P(8, COUNT1, either=BIGS)))
    cases += substitution_cases("MambaSpec", empty_world, lambda w, **k: MambaSpec(**k), dict(
        page_size=P(64, COUNT1, either=BIGS), shapes=P(((2, 3),), "object", either={"ragged"}),
        dtype=P(np.float32, "object"), page_size_padded=P(None, "opt_count1", either=BIGS)))
    cases += substitution_cases("FullAttentionSpec.max_memory_usage_bytes", lambda: dict(s=FULL.kv_cache_spec),
                                lambda w, **k: w["s"].max_memory_usage_bytes(**k), dict(
                                    max_model_len=P(64, COUNT1, either=BIGS),
                                    max_num_batched_tokens=P(None, "opt_count1", either=BIGS)))
    mamba = MambaSpec(page_size=64, shapes=((2, 3),), dtype=np.float32)
    cases += substitution_cases("MambaSpec.max_memory_usage_bytes", lambda: dict(s=mamba),
                                lambda w, **k: w["s"].max_memory_usage_bytes(**k), dict(
                                    max_model_len=P(64, "opt_count1", either=BIGS),
                                    max_num_batched_tokens=P(None, "opt_count1", either=BIGS)))
    cases += substitution_cases("MambaSpec.merge", empty_world, lambda w, **k: MambaSpec.merge(**k),
                                dict(specs=P(lambda: [mamba], "ids", reject={"list", "np_array", "empty_list"})))
    cases += substitution_cases("FullAttentionSpec.merge", empty_world,
                                lambda w, **k: FullAttentionSpec.merge(**k),
                                dict(specs=P(lambda: [FULL.kv_cache_spec], "ids",
                                             reject={"list", "np_array", "empty_list"})))
    cases += substitution_cases("CacheGroupSpec", empty_world, lambda w, **k: CacheGroupSpec(**k), dict(
        kv_cache_spec=P(FULL.kv_cache_spec, "object"),
        layer_names=P(None, "object", accept={"None", "empty_list"})))
    cases += substitution_cases("CacheGroupsConfig", empty_world, lambda w, **k: CacheGroupsConfig(**k), dict(
        num_pages=P(16, COUNT1, either=BIGS), kv_cache_groups=P(lambda: [FULL], "ids", reject={"list", "np_array"})))
    cases += substitution_cases("estimate_runtime_page_budget", empty_world,
                                lambda w, **k: verikv.estimate_runtime_page_budget(**k), dict(
                                    num_pages=P(64, COUNT1, either=BIGS),
                                    kv_cache_groups=P(lambda: [FULL], "ids", reject={"list", "np_array"}),
                                    max_model_len=P(64, COUNT1, reject=BIGS),
                                    max_num_batched_tokens=P(64, COUNT1, either=BIGS),
                                    data_parallel_size=P(1, COUNT1, either=BIGS)))
    cases += substitution_cases("split_cache_groups", empty_world, lambda w, **k: verikv.split_cache_groups(**k),
                                dict(kv_cache_groups=P(lambda: [FULL, SW], "ids", reject={"list", "np_array"})))
    cases += substitution_cases("dtype_size_bytes", empty_world, lambda w, **k: verikv.dtype_size_bytes(**k),
                                dict(dtype=P("float16", "object")))
    config = {"num_hidden_layers": 2, "sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"]}
    cases += substitution_cases("create_kv_cache_specs_from_config", empty_world,
                                lambda w, **k: verikv.create_kv_cache_specs_from_config(**k), dict(
                                    config=P(lambda: dict(config), "object",
                                             either={"object", "callable", "bad_index", "bad_int", "dict"}),
                                    page_size=P(4, COUNT1, either=BIGS), num_kv_heads=P(1, COUNT1, either=BIGS),
                                    head_size=P(8, COUNT1, either=BIGS), dtype=P("float16", "object"),
                                    use_mla=P(False, "bool")))
    for key in ("num_hidden_layers", "sliding_window", "layer_types"):
        cases += substitution_cases(f"create_kv_cache_specs_from_config[config.{key}]", empty_world,
                                    lambda w, key=key, **k: verikv.create_kv_cache_specs_from_config(
                                        {**config, key: k["value"]}, 4, 1, 8, "float16"),
                                    dict(value=P(config[key], "object",
                                                 either=BIGS | {"None", "np_int", "hashflip_int", "list"})))
    return cases


def _table_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("PageTable", empty_world, lambda w, **k: PageTable(**k), dict(
        max_num_reqs=P(4, COUNT1, reject=BIGS), max_num_pages_per_req=P(4, COUNT1, reject=BIGS),
        max_num_batched_tokens=P(16, COUNT1, either=BIGS)))

    def method(name: str) -> Any:
        return lambda w, **k: getattr(w["t"], name)(**k)

    for name in ("append_row", "add_row"):
        cases += substitution_cases("PageTable." + name, table_world, method(name), dict(
            page_ids=P([3], "ids", accept={"list", "np_array"}), row=P(1, "bounded")))
    cases += substitution_cases("PageTable.clear_row", table_world, method("clear_row"), dict(row=P(1, "bounded")))
    cases += substitution_cases("PageTable.get_row", table_world, method("get_row"), dict(row=P(1, "bounded")))
    for name in ("move_row", "swap_row"):
        cases += substitution_cases("PageTable." + name, table_world, method(name), dict(
            src=P(0, "bounded"), tgt=P(1, "bounded")))
    cases += substitution_cases("PageTable.compute_slot_mapping", table_world, method("compute_slot_mapping"), dict(
        page_size=P(4, COUNT1), row_indices=P([0], "ids", reject={"list", "np_array", "empty_list"}),
        num_computed_tokens=P([0], "ids", reject={"list", "np_array", "empty_list"}),
        num_scheduled_tokens=P([4], "ids", reject={"list", "np_array", "empty_list"})))
    cases += substitution_cases("MultiGroupPageTable", empty_world, lambda w, **k: MultiGroupPageTable(**k), dict(
        max_num_reqs=P(4, COUNT1, reject=BIGS), max_model_len=P(16, COUNT1, reject=BIGS),
        max_num_batched_tokens=P(16, COUNT1, either=BIGS), page_sizes=P([4, 8], "ids", reject={"empty_list"},
                                                                         accept={"list", "np_array"})))

    def mmethod(name: str) -> Any:
        return lambda w, **k: getattr(w["mt"], name)(**k)

    for name in ("append_row", "add_row"):
        cases += substitution_cases("MultiGroupPageTable." + name, table_world, mmethod(name), dict(
            page_ids=P([[5], [6]], "ids", reject={"empty_list", "list"}, accept={"np_array2d", "ragged"}),
            row=P(1, "bounded")))
    cases += substitution_cases("MultiGroupPageTable.append_rows_batch", table_world, mmethod("append_rows_batch"),
                                dict(page_ids_per_req=P([[[5], [6]]], "ids", reject={"empty_list", "list"}),
                                     req_indices=P([1], "ids", reject={"empty_list", "list", "np_array"})))
    for name in ("clear_row", "__getitem__"):
        cases += substitution_cases("MultiGroupPageTable." + name, table_world,
                                    lambda w, name=name, **k: getattr(w["mt"], name)(*k.values()),
                                    dict(row=P(1, "bounded")))
    for name in ("move_row", "swap_row"):
        cases += substitution_cases("MultiGroupPageTable." + name, table_world, mmethod(name), dict(
            src=P(0, "bounded"), tgt=P(1, "bounded")))
    cases += substitution_cases("MultiGroupPageTable.compute_slot_mappings", table_world,
                                mmethod("compute_slot_mappings"), dict(
                                    row_indices=P([0], "ids", reject={"list", "np_array", "empty_list"}),
                                    num_computed_tokens=P([0], "ids", reject={"list", "np_array", "empty_list"}),
                                    num_scheduled_tokens=P([4], "ids", reject={"list", "np_array", "empty_list"})))
    return cases


def _events_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("PrefixCacheStats", empty_world, lambda w, **k: PrefixCacheStats(**k), dict(
        requests=P(0, COUNT0, either=BIGS), queries=P(4, COUNT0, either=BIGS, reject={"zero"}), hits=P(2, COUNT0),
        reset=P(False, "bool")))
    cases += substitution_cases("PrefixCacheStats.record", stats_world, lambda w, **k: w["s"].record(**k), dict(
        queries=P(4, COUNT0, either=BIGS, reject={"zero"}), hits=P(2, COUNT0)))
    hashes = P((b"\x01" * 32, b"\x02" * 32), "object")
    text = dict(accept={"str", "empty_str"})
    cases += substitution_cases("PageStored", empty_world, lambda w, **k: PageStored(**k), dict(
        page_hashes=hashes, parent_page_hash=P(None, "object", accept={"None", "bytes"}),
        token_ids=P((1, 2), "ids", accept={"list", "np_array"}), page_size=P(1, "count1", either=BIGS | {"np_int"}),
        group_id=P(None, "opt_count0", either=BIGS), lora_id=P(None, "opt_count0", either=BIGS),
        lora_name=P(None, "object", accept={"None", "str", "empty_str"}),
        extra_keys=P(None, "object", accept={"None", "list", "ragged"}, either={"nested"}),
        medium=P("GPU", "object", **text), page_ids=P([1, 5], "ids", accept={"list", "np_array"}),
        spec_kind=P(None, "object", accept={"None", "str", "empty_str"}),
        sliding_window=P(None, "opt_count1", either=BIGS)))
    cases += substitution_cases("PageRemoved", empty_world, lambda w, **k: PageRemoved(**k), dict(
        page_hashes=hashes, group_id=P(None, "opt_count0", either=BIGS), medium=P("GPU", "object", **text),
        page_ids=P([1, 5], "ids", accept={"list", "np_array"})))
    return cases


def _dp_targets() -> list[Case]:
    cases: list[Case] = []
    cases += substitution_cases("usable_pages_count", empty_world, lambda w, **k: verikv.usable_pages_count(**k),
                                dict(num_pages=P(8, COUNT1, either=BIGS)))
    cases += substitution_cases("pages_per_dp_shard", empty_world, lambda w, **k: verikv.pages_per_dp_shard(**k),
                                dict(num_pages=P(8, COUNT1, either=BIGS),
                                     data_parallel_size=P(2, "opt_count1", either=BIGS)))
    cases += substitution_cases("dp_shard_for_page_id", empty_world,
                                lambda w, **k: verikv.dp_shard_for_page_id(**k), dict(
                                    page_id=P(5, COUNT0), pages_per_shard=P(4, COUNT1, either=BIGS),
                                    dp_size=P(2, COUNT1, either=BIGS)))
    cases += substitution_cases("dp_shard_page_bounds", empty_world,
                                lambda w, **k: verikv.dp_shard_page_bounds(**k), dict(
                                    shard_index=P(1, COUNT0), pages_per_shard=P(4, COUNT1, either=BIGS),
                                    dp_size=P(2, "opt_count1", either=BIGS)))
    return cases


def _coordinator_targets() -> list[Case]:
    return substitution_cases("get_kv_cache_coordinator", empty_world,
                              lambda w, **k: verikv.get_kv_cache_coordinator(**k), dict(
                                  num_pages=P(16, COUNT1, reject=BIGS),
                                  kv_cache_groups=P(lambda: [FULL], "ids", reject={"list", "np_array"},
                                                    accept={"empty_list"}),
                                  max_model_len=P(64, COUNT1, reject={"2**63", "10**100"}),
                                  use_eagle=P(False, "bool", reject={"np_bool"}),
                                  enable_caching=P(True, "bool", reject={"np_bool"})))


def _sizing_targets() -> list[Case]:
    from verikv.sizing import MambaLayer, get_preset

    cases: list[Case] = []
    def model() -> Any:
        return get_preset("llama-3-8b")

    cases += substitution_cases("plan_kv_cache", empty_world, lambda w, **k: verikv.plan_kv_cache(**k), dict(
        model=P(model, "object"), device=P("h100", "object"),
        tp=P(1, COUNT1, reject=BIGS), dp=P(1, COUNT1, reject=BIGS),
        max_model_len=P(1024, "opt_count1", reject=BIGS, either={"None"}),
        utilization=P(0.9, "object", reject={"str"}),
        memory_bytes=P(None, "opt_count1", either=BIGS | {"None"})))
    for value, expect in (("1/0", "reject"), ("1e999999999", "reject"), ("0.5", "accept"), ("nan", "reject"),
                          ("-0.5", "reject"), ("\ud800", "reject")):
        # (mypy cannot infer a lambda with default arguments, python/mypy#12557: hence the ignores)
        cases.append(Case(f"plan_kv_cache[utilization={value!r}]", empty_world,
                          lambda w, value=value: verikv.plan_kv_cache(model(), "h100", max_model_len=1024,  # type: ignore[misc]
                                                                      utilization=value),
                          expect, isolate=True))
    cases += substitution_cases("MambaLayer", empty_world, lambda w, **k: MambaLayer(**k), dict(
        version=P(2, "bounded", reject={"zero"}), intermediate_size=P(64, COUNT1, either=BIGS),
        d_state=P(16, COUNT1, either=BIGS), conv_kernel=P(4, COUNT1, either=BIGS),
        num_heads=P(4, COUNT1, either=BIGS), head_dim=P(16, COUNT1, either=BIGS)))
    cases += substitution_cases("get_preset", empty_world, lambda w, **k: get_preset(**k),
                                dict(name=P("llama-3-8b", "object")))
    return cases


def _size_cli(argv: list[str]) -> int:
    """``verikv size`` as a user runs it: a non-zero exit with a message is a typed rejection."""
    from verikv.errors import InvalidArgumentError
    from verikv.sizing.cli import main

    try:
        status = main(argv)
    except SystemExit as exc:  # argparse usage errors: exit 2 with a message, not a traceback
        status = exc.code if isinstance(exc.code, int) else 2
    if status != 0:
        raise InvalidArgumentError(f"verikv size exited {status}")
    return status


def _cli_cases(tmp: Path) -> list[Case]:
    cases: list[Case] = []
    base = ["--model", "llama-3-8b", "--device", "h100", "--max-model-len", "1024"]
    for flag, values in (("--utilization", ["1e999999999", "1/0", "nan", "-1", "\ud800", "0.5"]),
                         ("--dp", ["1073741824", "-1", "0"]), ("--tp", ["0", "99999999999999999999"]),
                         ("--max-model-len", ["0", str(2**63)])):
        for value in values:
            expect = "accept" if value == "0.5" else "reject"
            cases.append(Case(f"verikv size[{flag}={value!r}]", empty_world,
                              lambda w, flag=flag, value=value: _size_cli([*base, flag, value]), expect,  # type: ignore[misc]
                              isolate=True))
    for name, text in (("nested", "[" * 100000 + "]" * 100000),
                       ("huge_layers", json.dumps({"num_hidden_layers": 10**7, "num_attention_heads": 8,
                                                   "num_key_value_heads": 8, "hidden_size": 1024,
                                                   "head_dim": 128, "vocab_size": 1000})),
                       ("layers_2**63", json.dumps({"num_hidden_layers": 2**63, "num_attention_heads": 8,
                                                    "num_key_value_heads": 8, "hidden_size": 1024})),
                       ("not_object", "[1, 2]"), ("surrogate", '{"model_type": "\\ud800"}')):
        path = tmp / f"{name}.json"
        cases.append(Case(f"verikv size[config={name}]", empty_world,
                          lambda w, path=path, text=text: (path.write_text(text, errors="surrogatepass"),  # type: ignore[misc]
                                                           _size_cli(["--model", str(path), "--device", "h100"])),
                          "reject", isolate=True))
    return cases


# --- calls in the wrong order ----------------------------------------------------------------

def _stale_progress_world() -> World:
    """`manager_world` whose preempted ``b`` (no pages) still claims 4 computed tokens: a
    scheduler that forgot to reset it."""
    world = manager_world()
    world["b"].num_computed_tokens = 4
    return world


def _wrong_order_cases() -> list[Case]:
    def c(cid: str, build: Any, act: Any, expect: str = "reject") -> Case:
        return Case(f"order[{cid}]", build, act, expect)

    mw = manager_world
    # (a tuple runs a mutation, then the call; mypy objects to setattr's None inside it)
    return [
        c("free before allocate", mw, lambda w: w["m"].free(w["n"]), "accept"),  # documented no-op
        c("cache_pages without pages", mw, lambda w: w["m"].cache_pages(w["n"], 4)),
        c("allocate for a finished request", mw, lambda w: w["m"].allocate_slots(w["f"], 1)),
        c("lookup for a finished request", mw, lambda w: w["m"].get_computed_pages(w["f"])),
        c("reuse a held request id", mw, lambda w: w["m"].allocate_slots(Request("a", [1, 2, 3]), 3)),
        c("stale computed tokens without pages", _stale_progress_world, lambda w: w["m"].allocate_slots(w["b"], 5)),
        c("hits from another manager", mw, lambda w: w["m"].allocate_slots(
            w["c"], 2, 8, manager_world()["hits"])),
        c("hits of another request", mw, lambda w: w["m"].allocate_slots(w["n"], 2, 8, w["hits"])),
        c("request_id reassigned while held", mw, lambda w: setattr(w["a"], "request_id", "zz")),
        c("cache_salt set after construction to a surrogate", mw, lambda w: (
            setattr(w["n"], "cache_salt", "\ud800"), w["m"].allocate_slots(w["n"], 6))),  # type: ignore[func-returns-value]
        c("lora_id set after construction to a str", mw, lambda w: (
            setattr(w["n"], "lora_id", "x"), w["m"].allocate_slots(w["n"], 6))),  # type: ignore[func-returns-value]
        c("cache_salt surrogate at construction", mw, lambda w: w["m"].allocate_slots(
            Request("s", list(range(9)), cache_salt="\ud800"), 9)),
        c("hash-flipping salt then eviction", mw, _hash_flip_then_evict, "accept"),
        c("reset_prefix_cache while held", mw, lambda w: w["m"].reset_prefix_cache(), "accept"),
        c("double free of a request", mw, lambda w: (w["m"].free(w["a"]), w["m"].free(w["a"])), "accept"),
        c("pool double free", pool_world, lambda w: w["pool"].free_page_ids([4])),
        c("pool free of the null page", pool_world, lambda w: w["pool"].free_page_ids([0])),
        c("pool re-cache a cached page", pool_world, lambda w: w["pool"].cache_page_id(2, "k9")),
        c("pool reset while held", pool_world, lambda w: w["pool"].reset_prefix_cache(), "accept"),
        c("pool foreign view", pool_world, lambda w: w["pool"].free_pages([w["other"].page(1)])),
        c("pool-owned queue popleft", pool_world, lambda w: w["pool"].free_page_queue.popleft()),
        c("pool-owned queue append", pool_world, lambda w: w["pool"].free_page_queue.append_ids([1])),
        c("pool-owned page ref_cnt", pool_world, lambda w: setattr(w["pool"].page(1), "ref_cnt", 0)),
        c("queue append page 0 not in queue", queue_world, lambda w: w["q"].append_ids([0])),
        c("queue append page 4 not in queue", queue_world, lambda w: w["q"].append_ids([4])),
        c("queue remove a page of another queue", queue_world, lambda w: w["q"].remove(w["loose"])),
        c("dp size change after shards", lambda: pool_world(dp=True), lambda w: w["pool"].get_new_page_ids(
            1, dp_shard_hint=0, data_parallel_size=4)),
        c("pool allocation that fails with DP builds nothing", pool_world, lambda w: w["pool"].get_new_page_ids(
            99, dp_shard_hint=0, data_parallel_size=2)),
        c("pool lookup that fails with DP builds nothing", pool_world, lambda w: w["pool"].lookup_id(
            ["unhashable"], dp_shard_hint=0, data_parallel_size=2)),
        c("page table append to a full row", table_world, lambda w: w["t"].append_row([1, 2, 3], 0)),
        c("page table ragged rows", table_world, lambda w: w["t"].append_row([[1], [1, 2]], 1)),
        c("multi page table ragged groups", table_world, lambda w: w["mt"].append_row([[1], [[2]]], 1)),
    ]


def _no_argument_cases() -> list[Case]:
    """Every public method without arguments, once in a populated world (it must work), plus the
    ones that are wrong in a given state."""
    def c(cid: str, build: Any, act: Any, expect: str = "accept") -> Case:
        return Case(cid + "[]", build, act, expect)

    cases = [c(f"CacheManager.{name}", manager_world, lambda w, name=name: getattr(w["m"], name)())
             for name in ("create_empty_page_list", "group_layouts", "hashed_request_ids", "make_prefix_cache_stats",
                          "request_ids", "reset_prefix_cache", "take_events")]
    cases += [c(f"CachePages.{name}", manager_world, lambda w, name=name: getattr(w["hits"], name)())
              for name in ("get_page_ids", "get_unhashed_page_ids", "get_unhashed_page_ids_all_groups", "new_empty")]
    cases += [c(f"PagePool.{name}", pool_world, lambda w, name=name: getattr(w["pool"], name)())
              for name in ("cached_items", "free_list_ids", "get_usage", "make_prefix_cache_stats",
                           "reset_prefix_cache", "take_events")]
    cases += [c(f"FreeCachePageQueue.{name}", queue_world, lambda w, name=name: getattr(w["q"], name)())
              for name in ("get_all_free_pages", "ids", "popleft")]
    cases += [c(f"CachePage.{name}", page_world, lambda w, name=name: getattr(w["p"], name)())
              for name in ("decr_ref", "incr_ref", "reset_hash")]
    cases += [c("Request.is_finished", request_world, lambda w: w["r"].is_finished()),
              c("PrefixCacheStats.take", stats_world, lambda w: w["s"].take())]
    cases += [c(f"PageTable.{name}", table_world, lambda w, name=name: getattr(w["t"], name)())
              for name in ("clear", "get_cpu_tensor", "get_numpy_array")]
    cases += [c("MultiGroupPageTable.clear", table_world, lambda w: w["mt"].clear())]
    cases += [
        c("CachePage.decr_ref.at_zero", lambda: dict(p=CachePage(3)), lambda w: w["p"].decr_ref(), "reject"),
        c("CachePage.decr_ref.pool_owned", pool_world, lambda w: w["pool"].page(1).decr_ref(), "reject"),
        c("CachePage.incr_ref.pool_owned", pool_world, lambda w: w["pool"].page(1).incr_ref(), "reject"),
        c("CachePage.reset_hash.pool_owned", pool_world, lambda w: w["pool"].page(2).reset_hash(), "reject"),
        c("FreeCachePageQueue.popleft.empty", lambda: dict(q=FreeCachePageQueue([])), lambda w: w["q"].popleft(),
          "reject"),
        c("CachePages.get_unhashed_page_ids.two_groups", hybrid_world, lambda w: w["hits"].get_unhashed_page_ids(),
          "reject"),
    ]
    return cases


def _hash_flip_then_evict(w: World) -> None:
    """A salt whose hash changes after its pages were cached."""
    m = w["m"]
    salt = HashFlipStr("t")
    r = Request("hf", list(range(13)), cache_salt=salt)
    m.allocate_slots(r, 13)
    m.free(r)
    salt.flip = 1
    for i in range(m.num_pages):  # fill the pool, so the salted pages are evicted for reuse
        if m.allocate_slots(Request(f"filler{i}", [9 + i] * 16), 16) is None:
            break


# --- the table ----------------------------------------------------------------------------------

CLI_TMP = Path(tempfile.gettempdir()) / "verikv-hostile"


def _cases() -> list[Case]:
    CLI_TMP.mkdir(exist_ok=True)
    return (_manager_targets() + _pool_targets() + _queue_targets() + _page_targets() + _hashing_targets()
            + _request_targets() + _spec_targets() + _table_targets() + _events_targets() + _dp_targets()
            + _coordinator_targets() + _sizing_targets() + _cli_cases(CLI_TMP) + _wrong_order_cases()
            + _no_argument_cases())


CASES = _cases()
SUITE = all_cases()
"""This module's cases and those of every ``hostile_*_cases.py`` module (ids unique across all)."""


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in SUITE])
def test_hostile_case(case: Case) -> None:
    result = run_case(case)
    reason = KNOWN_OPEN.get(subject(case))
    if result.problems and reason is not None:
        pytest.xfail(f"known open: {reason}")
    assert not result.problems, f"{case.id} (expect {case.expect}, raised {result.raised}): {result.problems}"


def test_every_known_open_entry_point_still_fails() -> None:
    """A `KNOWN_OPEN` entry goes once no case of its entry point fails (and names a subject)."""
    listed = [case for case in SUITE if subject(case) in KNOWN_OPEN]
    assert {subject(case) for case in listed} == set(KNOWN_OPEN)
    assert not known_open_still_fail([case for case in listed if run_case(case).problems])


NAMESPACES = frozenset({"kv_events", "events", "testing", "harness", "sizing", "cli"})
"""Leading words of case ids that name where an entry point lives, not the entry point."""


def covered_names(cases: list[Case]) -> set[str]:
    """What the cases exercise: each id's subject (before ``[``) and its dotted prefixes, also
    without leading `NAMESPACES` words (``events.EventLog.take[]`` covers ``events.EventLog``,
    ``EventLog`` and ``EventLog.take``); ``.hybrid`` / ``.dp`` world variants are dropped."""
    covered: set[str] = set()
    for case in cases:
        parts = case.id.split("[")[0].replace(".hybrid", "").replace(".dp", "").split(".")
        while parts:
            covered.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
            parts = parts[1:] if parts[0] in NAMESPACES else []
    return covered


def public_entry_points() -> dict[str, object]:
    """Every public callable of verikv by qualified name: the top-level exports by their own
    names; then, as ``module.name``, the public callables of `verikv.events`,
    `verikv.kv_events`, `verikv.sizing` (its ``__all__``) and every `verikv.testing` module
    (``__all__``, else the public names defined there), and `verikv.cli.main`. A callable
    reached under two names is listed once, under its first. Exception classes are not entry
    points (the library raises them)."""
    import importlib
    import inspect
    import pkgutil

    import verikv.testing

    found: dict[str, object] = {name: getattr(verikv, name) for name in verikv._EXPORTS}
    harness = [info.name for info in pkgutil.iter_modules(verikv.testing.__path__) if not info.name.startswith("_")]
    modules = ["events", "kv_events", "sizing"] + [f"testing.{name}" for name in harness]
    for path in modules:
        module = importlib.import_module(f"verikv.{path}")
        names = getattr(module, "__all__", None) or [
            n for n in vars(module) if not n.startswith("_") and getattr(getattr(module, n), "__module__", None)
            == module.__name__]
        for name in names:
            found.setdefault(f"{path}.{name}", getattr(module, name))
    found["cli.main"] = verikv.cli.main
    seen: set[int] = set()
    entry_points: dict[str, object] = {}
    for name, value in found.items():
        if not (inspect.isclass(value) or inspect.isroutine(value)) or id(value) in seen \
                or (isinstance(value, type) and issubclass(value, BaseException)):
            continue  # (type aliases and constants are not called; exceptions are raised, not fed)
        seen.add(id(value))
        entry_points[name] = value
    return entry_points


EXEMPT = {
    # abstract bases, results, records and enums: not constructed by users with data
    "CacheSpec", "AttentionSpec", "RequestStatus", "KVCachePlan", "RuntimePageBudgetEstimate",
    "AttentionTypeGroups", "MMFeature", "PageHash", "PageHashWithGroupId", "AllPagesCleared",
    "kv_events.KVEventBatch", "kv_events.BlockStored", "kv_events.BlockRemoved", "kv_events.AllBlocksCleared",
    "sizing.LayerBuffer", "sizing.PageArray", "sizing.PlanGroup",  # parts of a KVCachePlan
    "sizing.Accelerator",  # a catalog entry: get_accelerator and describe_accelerator make one (covered)
    # managers and coordinators are built by get_kv_cache_coordinator / CacheManager (covered)
    "SingleTypeCacheManager", "FullAttentionManager", "SlidingWindowManager", "ChunkedLocalAttentionManager",
    "MambaManager", "CacheCoordinator", "CacheCoordinatorNoPrefixCache", "UnitaryCacheCoordinator",
    "HybridCacheCoordinator",
    # the harness: typing protocols an adapter implements, and the records and state machine it
    # builds itself (its entry points are check_conformance, machine_factory and their options)
    "testing.adapter.PageManagerAdapter", "testing.adapter.WhiteBoxAdapter",
    "testing.manager_machine.Observation", "testing.manager_machine.Tracked",
    "testing.manager_machine.ManagerMachine",
}


def test_every_public_callable_is_exercised() -> None:
    """Every public entry point (`public_entry_points`) is the subject of a case of the suite
    (or listed in `EXEMPT`); the exemptions name real entry points."""
    entry_points = public_entry_points()
    covered = covered_names(SUITE)
    missing = [name for name in entry_points
               if name not in EXEMPT and name not in covered and name.rsplit(".", 1)[-1] not in covered]
    assert not missing, f"public callables without hostile cases: {sorted(missing)}"
    assert EXEMPT <= set(entry_points), sorted(EXEMPT - set(entry_points))
    assert len(SUITE) > 3000, len(SUITE)
    assert {c.expect for c in SUITE} == {"accept", "reject", "either"}


def test_the_coverage_check_sees_a_missing_entry_point() -> None:
    """Not vacuous: an entry point with no case is reported, a namespaced case covers its name."""
    cases = [Case("events.EventLog.take[]", empty_world, lambda w: None, "accept")]
    assert {"EventLog", "EventLog.take", "events.EventLog"} <= covered_names(cases)
    assert "wire_hash" not in covered_names(cases) and "take" not in covered_names(cases)
    assert "cli.main" in public_entry_points() and "kv_events.decode_batch" in public_entry_points()


def test_the_suite_collects_every_cases_module() -> None:
    from hostile import case_modules

    modules = case_modules()
    assert modules[0] == "test_hostile_inputs" and {"hostile_events_cases", "hostile_cli_cases"} <= set(modules)
    prefixes = {c.id.split("[")[0] for c in SUITE}
    assert {"kv_events.decode_batch", "cli.main", "CacheManager.allocate_slots"} <= prefixes


METHOD_EXEMPT = {
    "CachePage.view": "takes a pool's internal PageRecords table; only a PagePool calls it",
    "FreeCachePageQueue.for_range": "takes a pool's internal PageRecords table; only a PagePool calls it",
}


@pytest.mark.parametrize("cls", [CacheManager, CachePages, PagePool, FreeCachePageQueue, CachePage, PageHasher, Request,
                                 PageTable, MultiGroupPageTable, PrefixCacheStats, FullAttentionSpec, MambaSpec,
                                 EventLog, ZmqEventPublisher])
def test_every_public_method_and_setter_is_exercised(cls: type) -> None:
    """Each public method (``Class.method``) and property setter (``Class.attr=``) has a case."""
    import inspect

    covered = covered_names(SUITE)  # ("Class.method.variant" covers the method)
    missing = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or f"{cls.__name__}.{name}" in METHOD_EXEMPT:
            continue
        if isinstance(member, property):
            if member.fset is not None and f"{cls.__name__}.{name}=" not in covered:
                missing.append(f"{name}=")
        elif callable(member) and f"{cls.__name__}.{name}" not in covered:
            missing.append(name)
    assert not missing, f"{cls.__name__}: public members without hostile cases: {missing}"


def test_harness_detects_each_outcome() -> None:
    """The classifier is not vacuous: each outcome is reported for a call built to produce it."""
    from verikv.errors import InvalidArgumentError

    def boom(w: World) -> None:
        raise KeyError("x")

    def mutate_then_raise(w: World) -> None:
        w["pool"].get_new_page_ids(1)
        raise InvalidArgumentError("after a change")

    def corrupt(w: World) -> None:
        w["pool"]._ref[5] = 3  # a free page with references: INV-FREE-IFF-ZERO

    kinds = {
        "untyped": Case("t1", empty_world, boom, "reject"),
        "silent acceptance": Case("t2", empty_world, lambda w: None, "reject"),
        "wrongly rejected": Case("t3", empty_world, lambda w: (_ for _ in ()).throw(InvalidArgumentError()), "accept"),
        "state changed": Case("t4", pool_world, mutate_then_raise, "reject"),
        "corruption": Case("t5", pool_world, corrupt, "accept"),
    }
    for kind, case in kinds.items():
        assert kind in {k for k, _ in run_case(case).problems}, kind
    assert not run_case(Case("t6", pool_world, lambda w: w["pool"].get_new_page_ids(1), "accept")).problems
    assert HOSTILE["nested"]() is not None


# --- regressions: the exact calls that once failed ------------------------------------------------

class _EqRaises:
    """A key whose ``__eq__`` raises (its hash is fine)."""

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ exploded")


def test_a_refused_cache_page_id_leaves_no_stale_entry() -> None:
    """The call raises a typed error and the cached map is as it was: after the page is freed
    and handed out again, a lookup of the key finds nothing."""
    from hostile import snapshot

    from verikv.errors import InvalidArgumentError

    pool = PagePool(8)
    pool.get_new_page_ids(4)
    key = _EqRaises()
    before = snapshot(pool)
    with pytest.raises(InvalidArgumentError):
        pool.cache_page_id(4, key)
    assert snapshot(pool) == before and pool.key_of(4) is None and pool.cached_items() == []
    pool.free_page_ids([4])
    assert pool.get_new_page_ids(4)[-1] == 4  # page 4 handed out again, keyless
    with pytest.raises(InvalidArgumentError):  # the same key cannot be looked up either: it cannot compare
        pool.cache_page_ids([4], [key])
    assert pool.cached_items() == [] and pool.key_of(4) is None


def test_a_key_that_cannot_compare_with_a_cached_one_is_refused_whole() -> None:
    """In a batch the key meets the cached keys before anything is registered: all or nothing."""
    from verikv.errors import InvalidArgumentError

    class Collides(_EqRaises):
        __hash__ = _EqRaises.__hash__  # (a class defining __eq__ alone would be unhashable)

        def __eq__(self, other: object) -> bool:
            if other is self:
                return True
            raise RuntimeError("__eq__ exploded")

    pool = PagePool(8)
    ids = pool.get_new_page_ids(3)
    pool.cache_page_id(ids[0], Collides())
    before = pool.cached_items()
    with pytest.raises(InvalidArgumentError):
        pool.cache_page_ids([ids[1], ids[2]], ["fine", Collides()])
    assert pool.cached_items() == before and pool.key_of(ids[1]) is None and pool.key_of(ids[2]) is None


def test_esurge_wrappers_refuse_a_key_that_cannot_compare_and_change_nothing() -> None:
    from verikv.errors import InvalidArgumentError

    pool = PagePool(8)
    with pytest.raises(InvalidArgumentError):
        pool.get_cached_page(_EqRaises(), [0])  # type: ignore[arg-type]
    request, pages, hashes = Request("r", list(range(9))), pool.get_new_pages(2), list[Any]()
    pool.cache_full_pages(request, pages, hashes, 0, 2, 4, 0, hasher=PageHasher("sha256", seed=0))
    assert len(hashes) == 2 and all(pool.key_of(p.page_id) is not None for p in pages)


def test_zero_dimensional_arrays_are_typed_errors() -> None:
    """``np.array(3)`` claims to be iterable; every id, count and token parameter refuses it."""
    from hostile import snapshot

    from verikv.errors import InvalidArgumentError

    zero_d = np.array(3)
    queue = FreeCachePageQueue([CachePage(1)])
    pool = PagePool(8)
    pages = pool.get_new_pages(2)
    table = MultiGroupPageTable(4, 16, 16, [4, 8])
    hasher = PageHasher("sha256", seed=0)
    calls = [
        lambda: FreeCachePageQueue(zero_d),  # type: ignore[arg-type]
        lambda: queue.append_n(zero_d),  # type: ignore[arg-type]
        lambda: pool.cache_full_pages(Request("r", list(range(9))), pages, [], 0, zero_d, 4, 0,  # type: ignore[arg-type]
                                      hasher=hasher),
        lambda: pool.cache_full_pages(Request("r", list(range(9))), zero_d, [], 0, 2, 4, 0,  # type: ignore[arg-type]
                                      hasher=hasher),
        lambda: pool.get_cached_page("k", zero_d),  # type: ignore[arg-type]
        lambda: table.append_rows_batch(zero_d, [1]),  # type: ignore[arg-type]
        lambda: table.append_rows_batch([[[5], [6]]], zero_d),  # type: ignore[arg-type]
    ]
    for call in calls:
        before = snapshot(dict(queue=queue, pool=pool, table=table))
        with pytest.raises(InvalidArgumentError):
            call()
        assert snapshot(dict(queue=queue, pool=pool, table=table)) == before
