"""Bad input on every public entry point of the manager layer: a typed error, and no state change.

Each case runs against the same populated manager (two groups, DP = 2, a running request, a
preempted one with cached pages and kept keys, a finished one). The state compared before and
after is the spec's abstraction (`abstract_manager`: pool, page lists, num_cached, shards)
plus what it leaves out: request key lists, prefix-cache statistics and the requests' own
fields. (KV events are emitted only by pool changes, which the abstraction covers.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple
from typing import Any

import numpy as np
import pytest

from verikv import (
    CacheGroupSpec,
    CacheManager,
    CachePages,
    CacheSpecError,
    ChunkedLocalAttentionSpec,
    ForeignPageError,
    FullAttentionSpec,
    InvalidArgumentError,
    MambaSpec,
    Request,
    RequestStatus,
    SlidingWindowSpec,
    UnknownRequestError,
    VeriKVError,
)
from verikv.spec.abstraction import abstract_manager

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
FULL = CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))
SW = CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=8, **KW))
DP: dict[str, Any] = dict(dp_shard_hint=1, data_parallel_size=2)


class World:
    """A manager with a running request ``a``, a preempted ``b``, a finished ``f`` and a waiting
    ``g`` that holds pages (admitted, status not yet set to RUNNING)."""

    def __init__(self) -> None:
        self.m = CacheManager(64, [FULL, SW], 64, hash_seed=0, data_parallel_size=2)
        self.a = self.admit(Request("a", list(range(14))))
        self.a.status = RequestStatus.RUNNING
        self.b = self.admit(Request("b", list(range(100, 113))))
        self.m.free(self.b)
        self.b.num_computed_tokens = 0
        self.b.status = RequestStatus.PREEMPTED
        self.f = self.admit(Request("f", [7, 7, 7, 7, 7]))
        self.m.free(self.f)
        self.m.free_page_hashes(self.f)
        self.f.status = RequestStatus.FINISHED_STOPPED
        self.g = self.admit(Request("g", [5, 6]))
        self.c = Request("c", list(range(100, 113)) + [1, 2, 3])  # new, shares b's prefix
        self.hits, self.n = self.m.get_computed_pages(self.c, **DP)
        assert self.n == 12

    def admit(self, req: Request) -> Request:
        hits, n = self.m.get_computed_pages(req, **DP)
        assert self.m.allocate_slots(req, req.num_tokens - n, n, hits, **DP) is not None
        req.num_computed_tokens = req.num_tokens
        return req

    def snapshot(self) -> tuple:
        m = self.m
        return (
            abstract_manager(m),
            {rid: m.page_hashes_of(rid) for rid in m.hashed_request_ids()},
            astuple(m.prefix_cache_stats),
            [(r.num_tokens, r.num_computed_tokens, r.status) for r in (self.a, self.b, self.c, self.f, self.g)],
        )


def other_pool_hits(w: World) -> CachePages:
    other = CacheManager(64, [FULL, SW], 64, hash_seed=0)
    r = Request("x", list(range(100, 113)))
    other.allocate_slots(r, 13)
    hits, _ = other.get_computed_pages(Request("y", list(range(100, 113)) + [1]))
    return hits


def swapped_hits(w: World) -> CachePages:
    full, sliding = w.hits.get_page_ids()
    return CachePages([full[::-1], sliding], w.m.page_pool)


# name -> (call taking the world, expected error)
# (ill-typed arguments are the point here: their lines carry `type: ignore[arg-type]`)
CASES: dict[str, tuple[Callable[[World], object], type[VeriKVError]]] = {
    # allocate_slots
    "alloc: request is a str": (lambda w: w.m.allocate_slots("a", 1), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: request is None": (lambda w: w.m.allocate_slots(None, 1), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: zero new tokens": (lambda w: w.m.allocate_slots(w.a, 0), InvalidArgumentError),
    "alloc: negative new tokens": (lambda w: w.m.allocate_slots(w.a, -1), InvalidArgumentError),
    "alloc: float new tokens": (lambda w: w.m.allocate_slots(w.a, 1.0), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: bool new tokens": (lambda w: w.m.allocate_slots(w.a, True), InvalidArgumentError),
    "alloc: str new tokens": (lambda w: w.m.allocate_slots(w.a, "1"), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: negative computed": (lambda w: w.m.allocate_slots(w.c, 4, -4), InvalidArgumentError),
    "alloc: negative lookahead": (lambda w: w.m.allocate_slots(w.a, 1, 0, None, -1), InvalidArgumentError),
    "alloc: delay not a bool": (lambda w: w.m.allocate_slots(w.a, 1, delay_cache_pages="yes"), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: beyond max_model_len": (lambda w: w.m.allocate_slots(w.a, 51), InvalidArgumentError),
    "alloc: hit tokens beyond max_model_len": (
        lambda w: w.m.allocate_slots(w.c, 53, w.n, w.hits, **DP), InvalidArgumentError),
    "alloc: finished request": (lambda w: w.m.allocate_slots(w.f, 1), InvalidArgumentError),
    "alloc: hits not CachePages": (
        lambda w: w.m.allocate_slots(w.c, 4, 12, w.hits.get_page_ids()), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: hits of another pool": (
        lambda w: w.m.allocate_slots(w.c, 4, 12, other_pool_hits(w), **DP), ForeignPageError),
    "alloc: hits with one group": (
        lambda w: w.m.allocate_slots(w.c, 4, 12, CachePages([[1, 2, 3]]), **DP), InvalidArgumentError),
    "alloc: hit id out of range": (
        lambda w: w.m.allocate_slots(w.c, 4, 12, CachePages([[99, 2, 3], [0, 1, 2]]), **DP), ForeignPageError),
    "alloc: hits shorter than computed": (lambda w: w.m.allocate_slots(w.c, 4, 16, w.hits, **DP), InvalidArgumentError),
    "alloc: computed not page aligned": (lambda w: w.m.allocate_slots(w.c, 4, 11, w.hits, **DP), InvalidArgumentError),
    "alloc: computed without hit pages": (lambda w: w.m.allocate_slots(w.c, 4, 12, None, **DP), InvalidArgumentError),
    "alloc: hits for a request holding pages": (
        lambda w: w.m.allocate_slots(w.a, 4, 12, w.hits, **DP), InvalidArgumentError),
    "alloc: stale or misplaced hit": (
        lambda w: w.m.allocate_slots(w.c, 4, 12, swapped_hits(w), **DP), InvalidArgumentError),
    "alloc: null page in a full-attention hit": (
        lambda w: w.m.allocate_slots(w.c, 4, 12, CachePages([[0] + w.hits.get_page_ids()[0][1:],
                                                             w.hits.get_page_ids()[1]]), **DP), InvalidArgumentError),
    "alloc: bad shard hint type": (
        lambda w: w.m.allocate_slots(w.a, 1, dp_shard_hint="1", data_parallel_size=2), InvalidArgumentError),  # type: ignore[arg-type]
    "alloc: zero DP size": (
        lambda w: w.m.allocate_slots(w.a, 1, dp_shard_hint=0, data_parallel_size=0), InvalidArgumentError),
    "alloc: DP size differs from the manager's": (
        lambda w: w.m.allocate_slots(w.c, 16, dp_shard_hint=0, data_parallel_size=4), InvalidArgumentError),
    # get_computed_pages
    "lookup: not a Request": (lambda w: w.m.get_computed_pages("c"), InvalidArgumentError),  # type: ignore[arg-type]
    "lookup: finished request": (lambda w: w.m.get_computed_pages(w.f), InvalidArgumentError),
    "lookup: bad shard hint": (
        lambda w: w.m.get_computed_pages(w.c, dp_shard_hint=1.5, data_parallel_size=2), InvalidArgumentError),  # type: ignore[arg-type]
    "lookup: DP size differs": (
        lambda w: w.m.get_computed_pages(w.c, dp_shard_hint=1, data_parallel_size=8), InvalidArgumentError),
    "lookup: negative DP size": (lambda w: w.m.get_computed_pages(w.c, data_parallel_size=-2), InvalidArgumentError),
    # cache_pages
    "cache: unknown request": (lambda w: w.m.cache_pages(w.c, 4), UnknownRequestError),
    "cache: freed request": (lambda w: w.m.cache_pages(w.b, 4), UnknownRequestError),
    "cache: negative count": (lambda w: w.m.cache_pages(w.a, -1), InvalidArgumentError),
    "cache: more than the request's tokens": (lambda w: w.m.cache_pages(w.a, 15), InvalidArgumentError),
    "cache: not a Request": (lambda w: w.m.cache_pages("a", 4), InvalidArgumentError),  # type: ignore[arg-type]
    "cache: float count": (lambda w: w.m.cache_pages(w.a, 4.0), InvalidArgumentError),  # type: ignore[arg-type]
    # free / free_page_hashes
    "free: request id instead of request": (lambda w: w.m.free("a"), InvalidArgumentError),  # type: ignore[arg-type]
    "free: None": (lambda w: w.m.free(None), InvalidArgumentError),  # type: ignore[arg-type]
    "free_page_hashes: not a Request": (lambda w: w.m.free_page_hashes("b"), InvalidArgumentError),  # type: ignore[arg-type]
    # common prefix
    "common prefix: unknown request": (lambda w: w.m.get_num_common_prefix_pages(w.c, 1), UnknownRequestError),
    "common prefix: zero running": (lambda w: w.m.get_num_common_prefix_pages(w.a, 0), InvalidArgumentError),
    "common prefix: not running": (lambda w: w.m.get_num_common_prefix_pages(w.g, 1), InvalidArgumentError),
    # introspection
    "get_page_ids: unknown id": (lambda w: w.m.get_page_ids("nope"), UnknownRequestError),
    "get_page_ids: finished id": (lambda w: w.m.get_page_ids("f"), UnknownRequestError),
    "get_page_ids: not a str": (lambda w: w.m.get_page_ids(w.a), UnknownRequestError),  # type: ignore[arg-type]
    "num_cached_pages: unknown id": (lambda w: w.m.num_cached_pages("b"), UnknownRequestError),
    "request_shard: unknown id": (lambda w: w.m.request_shard(3), UnknownRequestError),  # type: ignore[arg-type]
    # CachePages
    "CachePages: a string": (lambda w: CachePages("ab"), InvalidArgumentError),  # type: ignore[arg-type]
    "CachePages: negative id": (lambda w: CachePages([[-1]]), ForeignPageError),
    "CachePages: float id": (lambda w: CachePages([[1.0]]), ForeignPageError),  # type: ignore[list-item]
    "CachePages: groups of different counts added": (lambda w: w.hits + CachePages([[1]]), InvalidArgumentError),
    "CachePages: unhashed ids of two groups": (lambda w: w.hits.get_unhashed_page_ids(), InvalidArgumentError),
    "from_plan: not a plan": (lambda w: CacheManager.from_plan({"num_pages": 8}, 64), InvalidArgumentError),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_raises_typed_error_and_changes_nothing(name: str) -> None:
    w = World()
    call, error = CASES[name]
    before = w.snapshot()
    with pytest.raises(error):
        call(w)
    assert w.snapshot() == before


CONSTRUCTOR_CASES: dict[str, tuple[dict, type[VeriKVError]]] = {
    "num_pages zero": (dict(num_pages=0), InvalidArgumentError),
    "num_pages a str": (dict(num_pages="8"), InvalidArgumentError),
    "max_model_len zero": (dict(max_model_len=0), InvalidArgumentError),
    "groups not CacheGroupSpec": (dict(kv_cache_groups=[FULL.kv_cache_spec]), CacheSpecError),
    "groups a str": (dict(kv_cache_groups="full"), CacheSpecError),
    "page sizes not multiples": (
        dict(kv_cache_groups=[FULL, CacheGroupSpec(FullAttentionSpec(page_size=6, **KW))]), CacheSpecError),
    "EAGLE with chunked local": (
        dict(kv_cache_groups=[FULL,
                              CacheGroupSpec(ChunkedLocalAttentionSpec(page_size=4, attention_chunk_size=8, **KW))],
             use_eagle=True), CacheSpecError),
    "Mamba page below max_model_len": (
        dict(kv_cache_groups=[FULL, CacheGroupSpec(MambaSpec(page_size=16, shapes=((2,),), dtype=np.float16))]),
        CacheSpecError),
    "unknown hash scheme": (dict(hash_scheme="md5"), InvalidArgumentError),
    "bad hash seed": (dict(hash_seed=1.5), InvalidArgumentError),
    "unknown free order": (dict(free_order="lifo"), InvalidArgumentError),
    "enable_caching not a bool": (dict(enable_caching="yes"), InvalidArgumentError),
    "use_eagle not a bool": (dict(use_eagle=1), InvalidArgumentError),
    "enable_kv_events not a bool": (dict(enable_kv_events=None), InvalidArgumentError),
    "DP size zero": (dict(data_parallel_size=0), InvalidArgumentError),
}


@pytest.mark.parametrize("name", list(CONSTRUCTOR_CASES))
def test_bad_construction_raises_typed_error(name: str) -> None:
    kwargs: dict[str, Any] = dict(num_pages=16, kv_cache_groups=[FULL], max_model_len=64)
    override, error = CONSTRUCTOR_CASES[name]
    kwargs.update(override)
    with pytest.raises(error):
        CacheManager(**kwargs)


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) + len(CONSTRUCTOR_CASES) >= 40 and len(CASES) >= 40
