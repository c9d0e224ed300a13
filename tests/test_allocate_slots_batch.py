"""The batched decode step refines single calls: `allocate_slots_batch` equals `allocate_slots`
called for each request in order, on the spec (a left fold) and on the implementation.

Implementation side: two managers built identically (same layout, pool and hash seed) are driven
through the same scheduler run; at each step one extends its running requests with one
`allocate_slots_batch` call, the other with single `allocate_slots` calls in the same order.
After every step the results (new page ids, or None), the abstract states
(`verikv.spec.abstraction.abstract_manager`: reference counts, free-list order, cached keys,
page lists) and the kept content keys must be equal. Pools are small, so requests fail and are
preempted, and pages are evicted. A batch with a bad element must raise a typed error and
change nothing, wherever the bad element is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import event, given, settings, strategies as st
from layouts import full, mamba

from verikv import CacheManager, HashingError, InvalidArgumentError, PageRemoved, PageStored, Request, RequestStatus
from verikv.spec import invariants as inv, manager as spec
from verikv.spec.abstraction import abstract_manager
from verikv.spec.pool import PreconditionError
from verikv.testing.adapter import ArmableHash, build_cache_manager

FULL4 = spec.GroupLayout("full", 4)
FULL16 = spec.GroupLayout("full", 16)


def config(*groups: spec.GroupLayout, num_pages: int = 12, max_model_len: int = 48, **kw: Any) -> spec.ManagerConfig:
    return spec.ManagerConfig(tuple(groups), num_pages, max_model_len, **kw)


#: layouts the refinement runs on; ``num_pages`` is drawn per example (a near-full pool)
LAYOUTS: dict[str, spec.ManagerConfig] = {
    "full(page 16)": config(FULL16, max_model_len=96),
    "full": config(FULL4),
    "dp2": config(FULL4, data_parallel_size=2),
    "full+sliding": config(FULL4, spec.GroupLayout("sliding", 4, 6)),
    "full+sliding+chunked": config(FULL4, spec.GroupLayout("sliding", 4, 6), spec.GroupLayout("chunked", 4, 8)),
    "full(page 8)+sliding(page 4)": config(spec.GroupLayout("full", 8), spec.GroupLayout("sliding", 4, 5)),
    "full+mamba": config(FULL4, spec.GroupLayout("mamba", 48)),
    "full+mamba(align)": config(FULL4, spec.GroupLayout("mamba_align", 4)),
    "full+sliding(eagle)": config(FULL4, spec.GroupLayout("sliding", 4, 6), use_eagle=True),
    "full+sliding(unhashed-first)": config(FULL4, spec.GroupLayout("sliding", 4, 5), free_order="unhashed-first"),
    "no-caching": config(FULL4, enable_caching=False),
    "no-groups": config(),
}


# --- the spec: the batch is the left fold of allocate_slots -----------------------------------

def fold(s: spec.ManagerState, reqs: list[spec.RequestView], counts: list[int], **kw: Any
         ) -> tuple[spec.ManagerState, spec.BatchResults]:
    """The batch written as `functools.reduce` over the single transition."""
    def step(acc: tuple[spec.ManagerState, spec.BatchResults], pair: tuple[spec.RequestView, int]
             ) -> tuple[spec.ManagerState, spec.BatchResults]:
        t, new = spec.allocate_slots(acc[0], pair[0], pair[1], 0, None, kw.get("lookahead", 0),
                                     kw.get("delay", False), None, kw.get("dp"))
        return t, (*acc[1], new)
    start: tuple[spec.ManagerState, spec.BatchResults] = (s, ())
    return functools.reduce(step, zip(reqs, counts), start)


@st.composite
def spec_runs(draw: st.DrawFn) -> tuple[spec.ManagerState, list[spec.RequestView], list[int], dict[str, Any]]:
    """A spec state with some requests holding pages, and a batch over them and new ones."""
    cfg = replace(LAYOUTS[draw(st.sampled_from(["full", "full+sliding", "dp2", "full+mamba"]))],
                  num_pages=draw(st.integers(4, 14)))
    s = spec.init(cfg)
    reqs = []
    for i in range(draw(st.integers(1, 6))):
        tokens = tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=14)))
        view = spec.RequestView(f"r{i}", tokens)
        if draw(st.booleans()):  # admitted: it holds pages for its prompt and decodes one more token
            s, new = spec.allocate_slots(s, view, len(tokens))
            if new is not None:
                view = spec.RequestView(f"r{i}", (*tokens, 7), len(tokens))
        reqs.append(view)
    order = draw(st.permutations(reqs))
    counts = [draw(st.integers(1, max(1, r.num_tokens - r.num_computed_tokens))) for r in order]
    kw = {"lookahead": draw(st.sampled_from([0, 0, 3])), "delay": draw(st.booleans()),
          "dp": draw(st.sampled_from([None, cfg.data_parallel_size]))}
    return s, list(order), counts, kw


@settings(max_examples=150)
@given(spec_runs())
def test_spec_batch_is_the_left_fold_of_allocate_slots(run: Any) -> None:
    s, reqs, counts, kw = run
    state, results = spec.allocate_slots_batch(s, reqs, counts, kw["lookahead"], kw["delay"], kw["dp"])
    folded_state, folded_results = fold(s, reqs, counts, **kw)
    assert results == folded_results
    assert state == folded_state
    assert (state.keys, state.content, state.computed, state.progress) == (
        folded_state.keys, folded_state.content, folded_state.computed, folded_state.progress)  # the ghost too
    assert inv.violated_manager_invariants(state, ghost=True) == []


def test_spec_a_failing_request_does_not_stop_a_smaller_one_after_it() -> None:
    s = spec.init(config(FULL4, num_pages=4))  # usable pages 1, 2, 3
    s, _ = spec.allocate_slots(s, spec.RequestView("c", tuple(range(20, 28))), 8)  # c holds 1 and 2
    a = spec.RequestView("a", tuple(range(8)))  # needs two pages: only page 3 is free
    b = spec.RequestView("b", tuple(range(10, 14)))  # needs one
    t, results = spec.allocate_slots_batch(s, [a, b], [8, 4])
    assert results == (None, ((3,),))
    assert t.entry("a") is None and t.pages(0, "b") == (3,)


@pytest.mark.parametrize("bad", ["duplicate", "count-mismatch", "last-element-too-long", "count-zero"])
def test_spec_a_bad_element_rejects_the_whole_batch(bad: str) -> None:
    s = spec.init(config(FULL4, num_pages=8, max_model_len=16))
    a, b = spec.RequestView("a", tuple(range(5))), spec.RequestView("b", tuple(range(3)))
    reqs, counts = [a, b], [5, 3]
    if bad == "duplicate":
        reqs, counts = [a, b, a], [5, 3, 1]
    elif bad == "count-mismatch":
        counts = [5]
    elif bad == "last-element-too-long":
        counts = [5, 17]
    else:
        counts = [5, 0]
    with pytest.raises(PreconditionError):
        spec.allocate_slots_batch(s, reqs, counts)


# --- the implementation: a batch on one manager, single calls on its twin ---------------------

@dataclass
class Twin:
    """One of two identically built managers and its requests (id -> Request)."""

    manager: CacheManager
    requests: dict[str, Request] = field(default_factory=dict)


#: layouts whose managers record KV events (the events each step emits are compared too)
WITH_EVENTS = {"full(page 16)", "full+sliding"}


def twins(cfg: spec.ManagerConfig, events: bool = False) -> tuple[Twin, Twin]:
    def build() -> CacheManager:
        manager: CacheManager = build_cache_manager(cfg, hash_seed=0, enable_kv_events=events)
        return manager
    return Twin(build()), Twin(build())


def ids_of(results: list[Any]) -> list[tuple[list[int], ...] | None]:
    return [None if r is None else r.get_page_ids() for r in results]


def snapshot(m: CacheManager) -> tuple[Any, ...]:
    """Everything observable about a manager's state: the abstract state (pool and page lists),
    the kept content keys, DP adoption, the lookup statistics and the KV events since the last
    snapshot (taken: a later snapshot sees only newer ones)."""
    keys = {rid: m.page_hashes_of(rid) for rid in m.hashed_request_ids()}
    stats = m.prefix_cache_stats
    return (abstract_manager(m), keys, m.data_parallel_size, m.page_pool.key_version,
            (stats.requests, stats.queries, stats.hits), m.take_events())


def assert_same(a: Twin, b: Twin) -> None:
    sa, sb = snapshot(a.manager), snapshot(b.manager)
    assert sa == sb
    assert inv.violated_manager_invariants(sa[0]) == []


@dataclass
class Step:
    """One scheduler step: the batch (ids, counts, in order) and its shared arguments."""

    order: list[str]
    counts: list[int]
    lookahead: int = 0
    delay: bool = False
    dp: int | None = None


def run_step(a: Twin, b: Twin, step: Step) -> tuple[list[Any], list[Any]]:
    """The step as one batch on ``a`` and as single calls in order on ``b``; equal results."""
    batch = a.manager.allocate_slots_batch([a.requests[rid] for rid in step.order], step.counts,
                                           step.lookahead, step.delay, data_parallel_size=step.dp)
    singles = [b.manager.allocate_slots(b.requests[rid], n, 0, None, step.lookahead, step.delay,
                                        data_parallel_size=step.dp)
               for rid, n in zip(step.order, step.counts)]
    assert len(batch) == len(step.order)
    assert ids_of(batch) == ids_of(singles)
    assert_same(a, b)
    return batch, singles


def note_refusals(results: list[Any]) -> None:
    """Hypothesis statistics: how often a step refuses a request, and a later one still fits."""
    if None in results:
        event("a request did not fit")
        if any(r is not None for r in results[results.index(None):]):
            event("a later request fit after one that did not")


def advance(twin: Twin, step: Step, results: list[Any], token: int) -> None:
    """The scheduler's bookkeeping after the step: progress and a sampled token for the ones
    that got their slots, preemption for the ones that did not."""
    for rid, n, result in zip(step.order, step.counts, results):
        req = twin.requests[rid]
        if result is None:
            twin.manager.free(req)
            req.num_computed_tokens, req.status = 0, RequestStatus.PREEMPTED
            continue
        req.num_computed_tokens += n
        if step.delay and twin.manager.enable_caching:
            twin.manager.cache_pages(req, req.num_computed_tokens)
        if req.num_computed_tokens == req.num_tokens:
            req.append_output_token_ids(token)


def admit(twin: Twin, rid: str, tokens: list[int], dp: int | None) -> None:
    """A new request: lookup, then a single allocation of the rest of its prompt (both twins
    do exactly this, so it is not what is compared)."""
    req = twin.requests[rid] = Request(rid, tokens)
    hint = None if dp is None else len(twin.requests)
    hits, num_hit = twin.manager.get_computed_pages(req, dp_shard_hint=hint, data_parallel_size=dp)
    if twin.manager.allocate_slots(req, req.num_tokens - num_hit, num_hit, hits,
                                   dp_shard_hint=hint, data_parallel_size=dp) is not None:
        req.num_computed_tokens = req.num_tokens
        req.append_output_token_ids(1)


def draw_step(draw: Callable[..., Any], twin: Twin, cfg: spec.ManagerConfig) -> Step | None:
    """A batch over every unfinished request (holding pages or preempted), in a drawn order:
    mostly one token each, sometimes a chunk; None when nothing can be scheduled."""
    live = [rid for rid, req in twin.requests.items()
            if req.num_computed_tokens + 1 <= cfg.max_model_len and not req.is_finished()]
    if not live:
        return None
    order = draw(st.permutations(live))
    counts = []
    for rid in order:
        req = twin.requests[rid]
        room = min(req.num_tokens - req.num_computed_tokens, cfg.max_model_len - req.num_computed_tokens)
        counts.append(draw(st.integers(1, max(1, room))) if room > 1 and draw(st.integers(0, 3)) == 0 else 1)
    dp = cfg.data_parallel_size if cfg.data_parallel_size > 1 else None
    return Step(order, counts, lookahead=draw(st.sampled_from([0, 0, 0, 2])),
                delay=draw(st.sampled_from([False, False, True])), dp=draw(st.sampled_from([None, dp])))


def finish_long_requests(twin: Twin, cfg: spec.ManagerConfig) -> None:
    """Requests that reached max_model_len finish (they would overflow the next step)."""
    for req in twin.requests.values():
        if not req.is_finished() and req.num_tokens >= cfg.max_model_len:
            twin.manager.free(req)
            twin.manager.free_page_hashes(req)
            req.status = RequestStatus.FINISHED_LENGTH_CAPPED


@pytest.mark.parametrize("layout", sorted(LAYOUTS) + [f"{name}, events" for name in sorted(WITH_EVENTS)])
@settings(max_examples=40)
@given(data=st.data())
def test_batch_equals_single_calls_in_order(layout: str, data: st.DataObject) -> None:
    cfg = LAYOUTS[layout.removesuffix(", events")]
    page = max((g.page_size for g in cfg.groups if g.kind != "mamba"), default=4)
    cfg = replace(cfg, num_pages=data.draw(st.integers(3, 16), label="num_pages") * cfg.data_parallel_size)
    a, b = twins(cfg, events=layout.endswith(", events"))
    dp = cfg.data_parallel_size if cfg.data_parallel_size > 1 else None
    shared = data.draw(st.lists(st.integers(0, 3), min_size=page, max_size=2 * page), label="shared prefix")
    for i in range(data.draw(st.integers(1, 8), label="requests")):
        tail = data.draw(st.lists(st.integers(0, 50), max_size=2 * page), label=f"r{i} tail")
        tokens = (shared[:data.draw(st.integers(0, len(shared)))] + tail) or [9]
        for twin in (a, b):
            admit(twin, f"r{i}", tokens, dp)
    assert_same(a, b)
    for t in range(data.draw(st.integers(1, 8), label="steps")):
        step = draw_step(data.draw, a, cfg)
        if step is None:
            break
        batch, singles = run_step(a, b, step)
        note_refusals(batch)
        for twin, results in zip((a, b), (batch, singles)):
            advance(twin, step, results, token=t % 5)
            finish_long_requests(twin, cfg)
        assert_same(a, b)


@pytest.mark.parametrize("events", [False, True])
def test_decode_steps_shaped_like_the_benchmark(events: bool) -> None:
    """64 running decodes on 16-token pages with prompts of 64-79 tokens (as
    `benchmarks.decode_batch`): each step one request in 16 crosses a page boundary and one
    fills a page that is then cached. The pool has room for only a few crossings, so later
    steps refuse requests, which are preempted and re-prefilled by the batch itself."""
    cfg = config(FULL16, num_pages=316 + 1 + 6, max_model_len=256)
    a, b = twins(cfg, events=events)
    for i in range(64):
        tokens = [(i * 131 + k * 7) % 1000 for k in range(64 + i % 16)]
        for twin in (a, b):
            admit(twin, f"d{i}", tokens, None)
    assert a.manager.page_pool.get_num_free_pages() == 6
    refused = 0
    for t in range(24):
        step = Step([f"d{i}" for i in range(64)],
                    [a.requests[f"d{i}"].num_tokens - a.requests[f"d{i}"].num_computed_tokens for i in range(64)])
        batch, singles = run_step(a, b, step)
        refused += batch.count(None)
        for twin, results in zip((a, b), (batch, singles)):
            advance(twin, step, results, token=t)
    assert refused > 0


@pytest.mark.parametrize("same_tokens", [False, True])
def test_many_pages_filled_in_one_step_are_registered_as_single_calls_leave_them(same_tokens: bool) -> None:
    """48 decodes fill a page in the same step (more pages than a long run of one request, which
    goes to the pool in one call); the pool ends as after the single calls, key version
    included. With ``same_tokens`` the 48 keys are equal and join one entry in request order."""
    cfg = config(FULL16, num_pages=48 * 5 + 1 + 8, max_model_len=256)
    a, b = twins(cfg)
    for i in range(48):
        tokens = [k if same_tokens else (i * 131 + k * 7) % 1000 for k in range(79)]
        for twin in (a, b):
            admit(twin, f"f{i}", tokens, None)  # 79 computed, one sampled: the next token fills page 5
    version = a.manager.page_pool.key_version
    batch, _ = run_step(a, b, Step([f"f{i}" for i in range(48)], [1] * 48))
    assert batch.count(None) == 0
    assert a.manager.page_pool.key_version == version + 48  # (48 pages registered, one by one)


def test_kv_events_come_in_the_order_of_single_calls() -> None:
    """A step that caches a page (b) before a step that takes a page evicting a cached one (a):
    single calls store, then remove; so must the batch."""
    cfg = config(FULL4, num_pages=6, max_model_len=32)  # pages 1..5
    a, b = twins(cfg, events=True)
    for twin in (a, b):
        admit(twin, "x", [9] * 8, None)  # pages 1 and 2, both cached ...
        twin.manager.free(twin.requests["x"])  # ... and free: the free list is 3, 4, 5, 2, 1
        admit(twin, "b", [1] * 7, None)  # pages 3 and 4; its 8th token fills page 4
        admit(twin, "a", [2] * 4, None)  # page 5; its 5th token needs a page: 2, evicting x's key
        twin.manager.take_events()
    batch = a.manager.allocate_slots_batch([a.requests["b"], a.requests["a"]], 1)
    singles = [b.manager.allocate_slots(b.requests[rid], 1) for rid in ("b", "a")]
    assert ids_of(batch) == ids_of(singles) == [([],), ([2],)]
    events = b.manager.take_events()
    assert [(type(e), e.page_ids) for e in events] == [(PageStored, (4,)), (PageRemoved, (2,))]  # type: ignore[union-attr]
    assert a.manager.take_events() == events
    assert_same(a, b)


BAD_ELEMENTS = ["not-a-request", "count-zero", "count-bool", "count-float", "finished", "too-long", "duplicate",
                "lost-kv", "id-held-by-another"]
BAD_ARGUMENTS = ["count-mismatch", "lookahead", "delay", "dp", "not-a-sequence"]


def with_bad_element(bad: str, reqs: list[Any], counts: list[Any], where: int, cfg: spec.ManagerConfig
                     ) -> tuple[list[Any], list[Any]]:
    """The batch with one bad element at ``where`` (a bad count replaces a good one)."""
    reqs, counts = list(reqs), list(counts)
    if bad.startswith("count-"):
        counts[min(where, len(reqs) - 1)] = {"count-zero": 0, "count-bool": True, "count-float": 1.0}[bad]
        return reqs, counts
    if bad == "not-a-request":
        extra, n = object(), 1
    elif bad == "finished":
        extra, n = Request("done", [1, 2, 3]), 3
        extra.status = RequestStatus.FINISHED_ABORTED
    elif bad == "too-long":
        extra = Request("long", [1] * 4)
        extra.append_output_token_ids([2] * cfg.max_model_len)
        n = cfg.max_model_len + 1
    elif bad == "duplicate":
        extra, n = reqs[0], 1
    elif bad == "lost-kv":
        extra, n = Request("lost", [1, 2, 3, 4, 5]), 1
        extra.num_computed_tokens = 4  # holds no pages: its KV is gone
    else:  # another object under the id of a request that holds pages
        holder = next(r for r in reqs if r.num_computed_tokens)
        extra, n = Request(holder.request_id, [1, 2]), 2
    reqs.insert(where, extra)
    counts.insert(where, n)
    return reqs, counts


@pytest.mark.parametrize("bad", BAD_ELEMENTS + BAD_ARGUMENTS)
@pytest.mark.parametrize("layout", ["full", "dp2", "full+sliding+chunked"])
@settings(max_examples=10)
@given(data=st.data())
def test_a_bad_element_rejects_the_whole_batch_and_changes_nothing(layout: str, bad: str,
                                                                   data: st.DataObject) -> None:
    cfg = replace(LAYOUTS[layout], num_pages=48)
    twin = Twin(build_cache_manager(cfg, hash_seed=0))
    m = twin.manager
    dp = cfg.data_parallel_size if cfg.data_parallel_size > 1 else None
    for i in range(3):
        admit(twin, f"r{i}", data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=12)), dp)
    fresh = twin.requests["new"] = Request("new", data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=8)))
    good = data.draw(st.permutations(list(twin.requests.values())))
    counts = [r.num_tokens - r.num_computed_tokens for r in good]
    assert all(counts) and fresh.num_computed_tokens == 0
    reqs: Any = good
    kw: dict[str, Any] = {"data_parallel_size": dp}
    bad_counts: Any = counts
    if bad in BAD_ELEMENTS:
        reqs, bad_counts = with_bad_element(bad, good, counts, data.draw(st.integers(0, len(good))), cfg)
    elif bad == "count-mismatch":
        bad_counts = counts[:-1]
    elif bad == "lookahead":
        kw["num_lookahead_tokens"] = -1
    elif bad == "delay":
        kw["delay_cache_pages"] = "yes"
    elif bad == "dp":
        kw["data_parallel_size"] = 0
    else:
        reqs = iter(good)
    before = snapshot(m)
    with pytest.raises(InvalidArgumentError):
        m.allocate_slots_batch(reqs, bad_counts, **kw)
    assert snapshot(m) == before
    assert fresh.num_computed_tokens == 0
    # without the bad element the same batch changes the state (the new request gets pages)
    assert m.allocate_slots_batch(good, counts, data_parallel_size=dp)[good.index(fresh)] is not None
    assert snapshot(m) != before


@pytest.mark.parametrize("failing", [1, 3, 5])
def test_a_key_computation_that_fails_rejects_the_whole_batch(failing: int) -> None:
    """Every content key the batch needs is computed before anything changes, as a single
    call's are: a hasher that raises on the batch's ``failing``-th key leaves the manager as
    it was, even when requests before the failing one get pages."""
    hasher = ArmableHash()
    cfg = config(FULL4, num_pages=16, max_model_len=32)
    twin = Twin(build_cache_manager(cfg, hash_scheme=hasher))
    for i in range(3):
        admit(twin, f"r{i}", [i, 1, 2, 3, 4, 5, 6], None)  # 8 tokens with the sampled one: fills page 2
    crossing = twin.requests["r3"] = Request("r3", [9] * 9)  # a new request: three pages, keys 1-2
    # then r0, r1, r2 each fill a page: keys 3, 4, 5 (a failure there comes after r3's pages)
    reqs = [crossing, *(twin.requests[f"r{i}"] for i in range(3))]
    counts = [9, 1, 1, 1]
    before = snapshot(twin.manager)
    hasher.arm(failing)
    with pytest.raises(HashingError):
        twin.manager.allocate_slots_batch(reqs, counts)
    hasher.disarm()
    assert snapshot(twin.manager) == before
    results = twin.manager.allocate_slots_batch(reqs, counts)
    assert [len(ids[0]) for ids in ids_of(results) if ids is not None] == [3, 0, 0, 0]
    assert snapshot(twin.manager) != before


def _mamba_align_after_a_prompt_of_three() -> tuple[CacheManager, Request]:
    """A full group and a Mamba align group of 4-token pages; request "r0" holds the pages of its
    3 computed tokens and has a fourth token to compute."""
    m = CacheManager(64, [full(4), mamba(4)], 64, mamba_cache_mode="align", hash_seed=1)
    req = Request("r0", [0, 1, 2])
    assert m.allocate_slots(req, 3) is not None
    req.num_computed_tokens = 3
    req.append_output_token_ids(3)
    return m, req


def test_a_mamba_align_step_with_lookahead_takes_the_same_pages_batched_or_single() -> None:
    """One token and 3 lookahead slots: the full group's second page, and no state page (the state
    after 4 tokens stays in the Mamba group's first page: lookahead slots hold no state). The batch
    once put a state page at the end of the lookahead slots."""
    single_m, single_r = _mamba_align_after_a_prompt_of_three()
    batch_m, batch_r = _mamba_align_after_a_prompt_of_three()
    single = single_m.allocate_slots(single_r, 1, 0, None, 3)
    (batch,) = batch_m.allocate_slots_batch([batch_r], 1, 3)
    assert single is not None and batch is not None
    assert single.get_page_ids() == batch.get_page_ids() == ([3], [])
    assert single_m.get_page_ids("r0") == batch_m.get_page_ids("r0") == ([1, 3], [2])
    assert abstract_manager(single_m) == abstract_manager(batch_m)
    assert single_m.page_pool.free_list_ids() == batch_m.page_pool.free_list_ids()
