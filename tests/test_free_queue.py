"""FreeCachePageQueue and CachePage: eSurge's behaviour, typed errors, no change on error."""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, strategies as st
from pool_helpers import apply_ops
from reexecuted import reexecuted

from verikv import free_queue
from verikv.errors import (
    CorruptedStateError,
    DoubleFreeError,
    ForeignPageError,
    InvalidArgumentError,
    NullPageError,
    OutOfPagesError,
    PageStateError,
)
from verikv.free_queue import UNLINKED, CachePage, FreeCachePageQueue, IdLinks, PageRecords


def ids(pages: list[CachePage]) -> list[int]:
    return [p.page_id for p in pages]


def make(n: int) -> tuple[list[CachePage], FreeCachePageQueue]:
    pages = [CachePage(i) for i in range(n)]
    return pages, FreeCachePageQueue(pages)


def test_built_from_pages_in_list_order() -> None:
    pages = [CachePage(i) for i in (3, 0, 2, 1)]
    queue = FreeCachePageQueue(pages)
    assert queue.num_free_pages == 4 == len(queue)
    assert ids(queue.get_all_free_pages()) == [3, 0, 2, 1]
    assert queue.get_all_free_pages()[0] is pages[0]


def test_popleft_and_popleft_n_take_from_the_head() -> None:
    pages, queue = make(6)
    assert queue.popleft() is pages[0]
    assert ids(queue.popleft_n(2)) == [1, 2]
    assert queue.popleft_n(0) == []
    assert ids(queue.get_all_free_pages()) == [3, 4, 5]
    assert queue.num_free_pages == 3


def test_remove_from_the_middle_and_append_at_the_tail() -> None:
    pages, queue = make(5)
    queue.remove(pages[2])
    assert ids(queue.get_all_free_pages()) == [0, 1, 3, 4]
    queue.append(pages[2])
    queue.remove(pages[0])
    queue.remove(pages[4])
    queue.append_n([pages[4], pages[0]])
    assert ids(queue.get_all_free_pages()) == [1, 3, 2, 4, 0]
    assert queue.num_free_pages == 5


def test_neighbour_links_as_page_attributes() -> None:
    pages, queue = make(3)
    assert pages[0].prev_free_page is None and pages[0].next_free_page is pages[1]
    assert pages[2].prev_free_page is pages[1] and pages[2].next_free_page is None
    queue.remove(pages[1])
    assert pages[1].prev_free_page is None and pages[1].next_free_page is None
    assert pages[0].next_free_page is pages[2]


def test_empty_queue_errors_are_value_errors() -> None:
    _, queue = make(0)
    with pytest.raises(OutOfPagesError) as info:
        queue.popleft()
    assert isinstance(info.value, ValueError)


def test_popleft_n_too_many_changes_nothing() -> None:
    _, queue = make(3)
    with pytest.raises(OutOfPagesError):
        queue.popleft_n(4)
    with pytest.raises(InvalidArgumentError):
        queue.popleft_n(-1)
    assert ids(queue.get_all_free_pages()) == [0, 1, 2]


def test_appending_a_linked_page_is_an_error() -> None:
    pages, queue = make(3)
    with pytest.raises(PageStateError):
        queue.append(pages[1])
    assert ids(queue.get_all_free_pages()) == [0, 1, 2]


def test_removing_an_unlinked_page_is_an_error() -> None:
    pages, queue = make(3)
    queue.remove(pages[1])
    with pytest.raises(PageStateError):
        queue.remove(pages[1])
    assert ids(queue.get_all_free_pages()) == [0, 2]


def test_append_n_checks_every_page_before_linking_any() -> None:
    pages, queue = make(4)
    queue.popleft_n(3)
    with pytest.raises(PageStateError):
        queue.append_n([pages[0], pages[1], pages[0]])
    with pytest.raises(PageStateError):
        queue.append_n([pages[0], pages[3]])
    assert ids(queue.get_all_free_pages()) == [3]
    assert queue.num_free_pages == 1


def test_null_page_is_never_appended() -> None:
    null = CachePage(0, is_null=True)
    other = CachePage(1)
    queue = FreeCachePageQueue([null, other])
    queue.popleft()
    with pytest.raises(NullPageError):
        queue.append(null)


def test_foreign_pages_are_rejected() -> None:
    _, queue = make(3)
    with pytest.raises(ForeignPageError):
        queue.append(CachePage(1))
    with pytest.raises(ForeignPageError):
        queue.append_ids([7])


def test_construction_rejects_duplicates_and_pages_already_queued() -> None:
    with pytest.raises(InvalidArgumentError):
        FreeCachePageQueue([CachePage(1), CachePage(1)])
    pages, _ = make(2)
    with pytest.raises(InvalidArgumentError):
        FreeCachePageQueue(pages)


def range_queue(n: int) -> FreeCachePageQueue:
    """A queue over ids 1..n-1 built with the range constructor, on a table no pool owns."""
    records = PageRecords.for_pool(n)
    return FreeCachePageQueue.for_range(records, 1, n, lambda i: CachePage.view(records, i))


def test_range_constructor_and_prepend() -> None:
    queue = range_queue(10)
    assert queue.ids() == list(range(1, 10))
    assert queue.popleft_ids(3) == [1, 2, 3]
    queue.prepend_ids([3, 1])
    assert queue.ids() == [3, 1, 4, 5, 6, 7, 8, 9]
    with pytest.raises(NullPageError):
        queue.append_ids([0])
    assert queue.num_free_pages == 8


def test_a_pool_owned_queue_is_changed_only_by_its_pool() -> None:
    records = PageRecords.for_pool(4, owned=True)
    queue = FreeCachePageQueue.for_range(records, 1, 4, lambda i: CachePage.view(records, i))
    for call in (queue.popleft, lambda: queue.popleft_n(1), lambda: queue.remove_id(2), lambda: queue.append_ids([])):
        with pytest.raises(PageStateError):
            call()
    assert queue.ids() == [1, 2, 3] and queue.num_free_pages == 3


def test_a_cycle_in_the_links_is_reported_not_walked_forever() -> None:
    queue = range_queue(4)
    queue.links.next[3] = 1
    with pytest.raises(CorruptedStateError):
        queue.ids()


def test_cache_page_record_behaviour() -> None:
    page = CachePage(5)
    page.incr_ref()
    page.decr_ref()
    with pytest.raises(DoubleFreeError) as info:
        page.decr_ref()
    assert isinstance(info.value, RuntimeError) and page.ref_cnt == 0
    page.page_hash = "k"
    with pytest.raises(PageStateError):
        page.page_hash = "other"
    page.reset_hash()
    assert page.page_hash is None
    with pytest.raises(NullPageError):
        CachePage(0, is_null=True).page_hash = "k"


def test_cache_pages_are_hashable_values() -> None:
    records = PageRecords.for_pool(3)
    assert CachePage.view(records, 1) == CachePage.view(records, 1)
    assert CachePage.view(records, 1) != CachePage.view(records, 2)
    assert len({CachePage.view(records, 1), CachePage.view(records, 1)}) == 1
    assert CachePage(1) != CachePage(1)  # two lone pages are two pages


def test_pool_owned_views_are_read_only() -> None:
    page = CachePage.view(PageRecords.for_pool(3, owned=True), 1)
    with pytest.raises(PageStateError):
        page.ref_cnt = 3
    with pytest.raises(PageStateError):
        page.incr_ref()


OPS = st.lists(st.tuples(st.sampled_from(["popleft", "remove", "append", "prepend"]), st.integers(0, 9)),
               max_size=60)


@given(OPS)
def test_queue_matches_a_list_model(ops: list[tuple[str, int]]) -> None:
    queue = range_queue(10)
    model = list(range(1, 10))
    for op, pid in ops:
        if op == "popleft":
            if model:
                assert queue.popleft_ids(1) == [model.pop(0)]
            else:
                with pytest.raises(OutOfPagesError):
                    queue.popleft_ids(1)
        elif op == "remove":
            if pid in model:
                queue.remove_id(pid)
                model.remove(pid)
            else:
                with pytest.raises(PageStateError):
                    queue.remove_id(pid)
        else:
            link = queue.append_ids if op == "append" else queue.prepend_ids
            if pid == 0:
                with pytest.raises(NullPageError):
                    link([pid])
            elif pid in model:
                with pytest.raises(PageStateError):
                    link([pid])
            else:
                link([pid])
                model.insert(len(model) if op == "append" else 0, pid)
        assert queue.ids() == model and queue.num_free_pages == len(model)


# --- hostile input on the queue (typed errors, nothing changed) -------------------------------

def _deep(depth: int = 5000) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


def _queue_state(q: FreeCachePageQueue) -> tuple:
    return q.ids(), list(q.links.prev), list(q.links.next), list(q.links.lengths)


def test_append_of_an_id_the_queue_does_not_hold_is_foreign() -> None:
    """Page 0 is in range but not one of the queue's pages."""
    q = FreeCachePageQueue([CachePage(1), CachePage(2), CachePage(5)])
    q.popleft()
    before = _queue_state(q)
    for ids in ([0], [3], [4]):
        with pytest.raises(ForeignPageError):
            q.append_ids(ids)
        with pytest.raises(ForeignPageError):
            q.prepend_ids(ids)
    assert _queue_state(q) == before
    q.append_ids([1])  # a page it holds is fine
    assert q.ids() == [2, 5, 1]


@pytest.mark.parametrize("bad", [5, None, "12", _deep()])
def test_id_lists_that_are_not_lists_of_ints_are_rejected(bad: object) -> None:
    q = FreeCachePageQueue([CachePage(1), CachePage(2)])
    q.popleft()
    before = _queue_state(q)
    with pytest.raises(InvalidArgumentError):
        q.append_ids(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        q.append_n(bad)  # type: ignore[arg-type]
    assert _queue_state(q) == before


def test_constructor_and_lookups_reject_non_pages() -> None:
    with pytest.raises(InvalidArgumentError):
        FreeCachePageQueue([1, 2])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        FreeCachePageQueue(None)  # type: ignore[arg-type]
    q = FreeCachePageQueue([CachePage(1)])
    with pytest.raises(InvalidArgumentError):
        q.is_linked("1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        q.neighbour(1, forward="yes")  # type: ignore[arg-type]
    assert q.is_linked(-1) is False and q.is_linked(10**100) is False


def test_lone_page_bounds_and_hashable_key() -> None:
    with pytest.raises(InvalidArgumentError):
        CachePage(2**29)  # ids are int32 (with room for the links' sentinels)
    with pytest.raises(InvalidArgumentError):
        CachePage(1, page_hash=[1, 2])
    with pytest.raises(InvalidArgumentError):
        CachePage(1, is_null=1)  # type: ignore[arg-type]
    page = CachePage(3)
    with pytest.raises(InvalidArgumentError):
        page.page_hash = {"a": 1}
    assert page.page_hash is None


# ---- long frees: the batched path of PagePool.free_page_ids equals the scalar one --------------

FreeOutcome = tuple[list[int], list[int], list[tuple[str, str] | None]]


def _pool_after(frees: Sequence[Sequence[object]], bulk: bool, monkeypatch: pytest.MonkeyPatch,
                link_from: int = 64) -> FreeOutcome:
    """Free each list in turn on a pool whose pages 1..199 are held (101..150 twice), long lists
    by the request-shaped path where it applies (lists of ``link_from`` pages or more linked by
    NumPy) or all by the general path, linked page by page; the final free list, ref counts and
    the error of each call."""
    import verikv.free_queue as free_queue
    import verikv.page_pool as page_pool

    monkeypatch.setattr(free_queue, "_BULK_LINK", link_from if bulk else 10**9)
    pool = page_pool.PagePool(200)
    if not bulk:
        monkeypatch.setattr(pool, "_free_shaped", lambda ids: False)
    held = pool.get_new_page_ids(199)
    pool.touch_ids(held[100:150])
    errors: list[tuple[str, str] | None] = []
    for ids in frees:
        try:
            pool.free_page_ids(ids)  # type: ignore[arg-type]
            errors.append(None)
        except Exception as exc:  # compared between the two paths, whatever it is
            errors.append((type(exc).__name__, str(exc)))
    return pool.free_list_ids(), [pool.ref_count(p) for p in range(200)], errors


LONG_FREES = [
    list(range(1, 80))[::-1],  # held once: all reach 0, in the given order
    list(range(101, 180)),  # 101..150 held twice: only 151..179 reach 0 (shared pages first: scalar)
    list(range(101, 151)) + [80] * 2 + list(range(181, 200)),  # a duplicate of a page held once
    list(range(81, 100)) + [0] + list(range(181, 200)) * 3,  # the null page
    list(range(181, 200)) * 4 + [200],  # out of range
    [*range(181, 240)][:19] + [True] + list(range(101, 151)),  # a bool
    list(range(101, 151)) + list(range(181, 200)),  # now valid: 101..150 reach 0
    list(range(181, 200)) * 4,  # duplicates of pages held once: double free
    list(range(1, 80)),  # all free already: double free
    [-1] + list(range(151, 220)),  # a negative id (no uint32 conversion)
    list(range(151, 200)) + [2**40],  # an id past uint32
]


@pytest.mark.parametrize("link_from", [2, 10**9])
def test_long_frees_take_the_batched_path_with_the_same_results(link_from: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    scalar = _pool_after(LONG_FREES, False, monkeypatch)
    assert _pool_after(LONG_FREES, True, monkeypatch, link_from) == scalar
    errors = scalar[2]
    assert errors[0] is None and errors[1] is None and errors[6] is None  # (the valid frees succeeded)
    assert all(e is not None for i, e in enumerate(errors) if i not in (0, 1, 6))  # (every bad one raised)


@pytest.mark.parametrize("link_from", [2, 10**9])
@pytest.mark.parametrize("ids", [
    list(range(1, 100)) + list(range(60, 100)),  # pages held once, the tail listed again
    list(range(1, 100)) + [50] + list(range(180, 190)),  # one listed again mid-list
    list(range(1, 100)) + [99],  # the last one listed twice in a row
    [*range(1, 50), *range(1, 50)],  # the whole list twice
])
def test_a_page_held_once_and_listed_twice_is_a_double_free_on_both_paths(
        ids: list[int], link_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    scalar = _pool_after([ids], False, monkeypatch)
    assert _pool_after([ids], True, monkeypatch, link_from) == scalar
    assert scalar[2][0] is not None and scalar[2][0][0] == "DoubleFreeError"


# ---- long pops, touches, frees and links: the vectorized paths equal the scalar ones ----------

PoolOp = tuple[str, list[int]]
TouchOutcome = tuple[list[int], list[int], list[int], list[int], list[object]]


def _pool_ops(ops: Sequence[PoolOp], bulk: bool, monkeypatch: pytest.MonkeyPatch) -> TouchOutcome:
    """Run ``ops`` ("get" n, "touch" ids, "free" ids) on a 40-page pool with the bulk thresholds
    of pops, touches and links at 2 (bulk) or never reached, and frees by the request-shaped path
    where it applies or all by the general one; the free list, ref counts, the raw links
    (both directions, so an unlinked page's links are compared too) and each call's result or
    error."""
    import verikv.free_queue as free_queue
    import verikv.page_pool as page_pool

    monkeypatch.setattr(page_pool, "_BULK_TOUCH", 2 if bulk else 10**9)
    monkeypatch.setattr(free_queue, "_BULK_POP", 2 if bulk else 10**9)
    monkeypatch.setattr(free_queue, "_BULK_LINK", 2 if bulk else 10**9)
    pool = page_pool.PagePool(40)
    if not bulk:
        monkeypatch.setattr(pool, "_free_shaped", lambda ids: False)
    results = apply_ops(pool, ops)
    links = pool.free_page_queue.links
    return (pool.free_list_ids(), [pool.ref_count(p) for p in range(40)], links.next.tolist(), links.prev.tolist(),
            results)


_page_ids = st.lists(st.integers(0, 39), max_size=12)
_pool_op = st.one_of(
    st.tuples(st.just("get"), st.lists(st.integers(0, 12), min_size=1, max_size=1)),
    st.tuples(st.just("touch"), _page_ids),
    st.tuples(st.just("touch"), st.builds(lambda a, n, rev: list(range(a, min(a + n, 40)))[::-1 if rev else 1],
                                          st.integers(1, 39), st.integers(2, 10), st.booleans())),
    st.tuples(st.just("free"), _page_ids),
)


@given(st.lists(_pool_op, max_size=25))
def test_long_pops_and_touches_take_the_vectorized_paths_with_the_same_results(ops: list[PoolOp]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        scalar = _pool_ops(ops, False, mp)
        assert _pool_ops(ops, True, mp) == scalar


def test_a_hit_in_runs_of_the_free_list_is_unlinked_in_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached prefix freed together (stored in reverse) and touched as a hit: the bulk path
    takes it, one run or several, and leaves the list as page-by-page unlinks would."""
    import verikv.free_queue as free_queue
    import verikv.page_pool as page_pool

    monkeypatch.setattr(page_pool, "_BULK_TOUCH", 2)
    pool = page_pool.PagePool(20)
    held = pool.get_new_page_ids(19)
    pool.free_page_ids(held[::-1])
    sets: list[list[int]] = []
    unlink_runs = free_queue.IdLinks.unlink_runs

    def recorded_unlink_runs(self: free_queue.IdLinks, li: int, ids: np.ndarray) -> None:
        sets.append(sorted(ids.tolist()))
        unlink_runs(self, li, ids)

    monkeypatch.setattr(free_queue.IdLinks, "unlink_runs", recorded_unlink_runs)
    pool.touch_ids([5, 6, 7, 8])  # in the free list as 8, 7, 6, 5: one run
    pool.touch_ids([1, 3])  # two runs
    pool.touch_ids([9])  # below the threshold: page by page
    assert sets == [[5, 6, 7, 8], [1, 3]]
    assert pool.free_list_ids() == [19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 4, 2]
    assert [pool.ref_count(p) for p in (1, 3, 5, 6, 7, 8, 9, 2)] == [1, 1, 1, 1, 1, 1, 1, 0]
    assert pool.get_num_free_pages() == 12


def _links_state(links: free_queue.IdLinks) -> tuple[object, ...]:
    return links.ids(0), links.next.tolist(), links.prev.tolist(), list(links.lengths)


@given(st.permutations(range(12)), st.lists(st.booleans(), min_size=12, max_size=12), st.randoms())
def test_unlink_runs_equals_unlinking_page_by_page(order: list[int], chosen: list[bool], rng: Any) -> None:
    """Any set of linked ids of a list (one run, several, single ids, the head or the tail),
    given in any order, leaves the links and lengths exactly as per-id unlinks do."""
    picked = [pid for pid, take in zip(order, chosen) if take]
    rng.shuffle(picked)
    bulk, scalar = free_queue.IdLinks(12), free_queue.IdLinks(12)
    for links in (bulk, scalar):
        links.link_back(0, order)
    for pid in picked:
        scalar.unlink(0, pid)
    if picked:
        bulk.unlink_runs(0, np.array(picked, dtype=np.uint32))
    assert _links_state(bulk) == _links_state(scalar)
    assert bulk._inside is None or not bulk._inside.any()  # the scratch marks are all False again


def test_unlink_runs_of_ids_whose_links_form_a_cycle_raises() -> None:
    links = free_queue.IdLinks(6)
    links.link_back(0, range(6))
    links.next[2], links.prev[1] = 1, 2  # 1 -> 2 -> 1: a corrupted list
    before = _links_state_raw(links)
    with pytest.raises(CorruptedStateError, match="form a cycle"):
        links.unlink_runs(0, np.array([1, 2]))
    assert _links_state_raw(links) == before  # nothing changed
    assert links._inside is not None and not links._inside.any()


def _links_state_raw(links: free_queue.IdLinks) -> tuple[object, ...]:
    return links.next.tolist(), links.prev.tolist(), list(links.lengths)


# ---- Checks written for mutants of impl/free_queue.py that the suite let through (tools/mutation/triage.toml)
#
# They pin behaviour the docstrings state and the suite never exercised: ids that were never
# linked are unlinked (not just ids that were popped), a queue over an empty range is empty,
# every list of a multi-list `IdLinks` has its own sentinels, bounds are exclusive where the
# docstrings say ``0..capacity-1``, and rejected arguments are named. Expected values come from
# the arguments, not from running the code.


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _range_queue(num_pages: int, first: int, stop: int) -> FreeCachePageQueue:
    """A pool-style queue over ids ``0..num_pages-1`` holding ``first..stop-1`` (not owned)."""
    records = PageRecords.for_pool(num_pages)
    return FreeCachePageQueue.for_range(records, first, stop, lambda pid: CachePage.view(records, pid))


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("page_id negative", lambda: CachePage(-1), "page_id"),
    ("ref_cnt negative", lambda: CachePage(1, -1), "ref_cnt"),
    ("queue pages not a list", lambda: FreeCachePageQueue("ab"), "pages"),  # type: ignore[arg-type]
    ("append_n pages not a list", lambda: _range_queue(4, 1, 2).append_n("ab"), "pages"),  # type: ignore[arg-type]
    ("append_ids ids not a list", lambda: _range_queue(4, 1, 2).append_ids(5), "ids"),  # type: ignore[arg-type]
    ("is_linked page_id", lambda: _range_queue(4, 1, 2).is_linked(1.5), "page_id"),  # type: ignore[arg-type]
    ("popleft_ids n", lambda: _range_queue(4, 1, 2).popleft_ids(-1), "n"),
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_what_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


def test_a_page_state_error_says_which_way_the_state_is_wrong() -> None:
    queue = _range_queue(4, 1, 3)  # holds 1, 2; page 3 is not linked
    with pytest.raises(PageStateError, match=_named("not linked in")):
        queue.remove_id(3)
    with pytest.raises(PageStateError, match=_named("already linked in")):
        queue.append_ids([1])


def test_ids_never_linked_are_unlinked_and_can_be_appended() -> None:
    queue = _range_queue(6, 3, 5)  # holds 3, 4; pages 1, 2, 5 were never linked
    assert [queue.is_linked(p) for p in range(6)] == [False, False, False, True, True, False]
    queue.append_ids([1, 5])
    assert queue.ids() == [3, 4, 1, 5]


def test_a_queue_over_an_empty_range_is_empty() -> None:
    queue = _range_queue(6, 3, 3)
    assert queue.ids() == []
    assert len(queue) == 0
    assert not any(queue.is_linked(p) for p in range(6))
    queue.append_ids([2, 3])
    assert queue.ids() == [2, 3]


def test_ids_outside_the_range_are_foreign_or_unlinked() -> None:
    queue = _range_queue(4, 1, 4)
    assert queue.is_linked(4) is False  # the capacity is not an id
    with pytest.raises(ForeignPageError):
        queue.append_ids([4])


def test_is_linked_accepts_numpy_ids() -> None:
    queue = _range_queue(4, 1, 3)
    assert queue.is_linked(np.int64(1)) is True  # type: ignore[arg-type]
    assert queue.is_linked(np.int64(3)) is False  # type: ignore[arg-type]


def test_popping_every_free_page_is_allowed() -> None:
    queue = _range_queue(4, 1, 4)
    assert queue.popleft_ids(3) == [1, 2, 3]
    assert len(queue) == 0


def test_a_range_queue_hands_out_page_views() -> None:
    queue = _range_queue(4, 1, 4)
    page = queue.popleft()
    assert isinstance(page, CachePage)
    assert page.page_id == 1


def test_a_queue_built_from_pages_keeps_their_hashes_and_allows_one_null_page() -> None:
    queue = FreeCachePageQueue([CachePage(1, page_hash="a"), CachePage(2, page_hash=("b", 2))])
    assert [p.page_hash for p in queue.get_all_free_pages()] == ["a", ("b", 2)]
    with pytest.raises(InvalidArgumentError):
        FreeCachePageQueue([CachePage(0, is_null=True), CachePage(1, is_null=True)])


def test_incr_ref_adds_one() -> None:
    page = CachePage(3, ref_cnt=2)
    page.incr_ref()
    assert page.ref_cnt == 3


def test_repr_shows_the_page_hash() -> None:
    assert "'key-7'" in repr(CachePage(3, 1, "key-7"))


# --- IdLinks: each list has its own sentinels --------------------------------------------------

def test_id_links_default_to_one_list() -> None:
    assert IdLinks(4).lengths == [0]


def test_each_list_of_id_links_is_separate() -> None:
    links = IdLinks(8, num_lists=2)
    links.fill_range(1, 2, 5)
    assert links.ids(1) == [2, 3, 4]
    assert links.ids(0) == []
    assert (links.first(0), links.first(1)) == (UNLINKED, 2)
    links.link_front(1, [6])
    links.link_front(0, [7])
    assert links.ids(1) == [6, 2, 3, 4]
    assert links.ids(0) == [7]
    assert (links.first(0), links.first(1)) == (7, 6)
    assert links.lengths == [1, 4]


def test_first_of_an_emptied_list_is_unlinked() -> None:
    links = IdLinks(4)
    links.fill_range(0, 1, 3)
    assert links.first(0) == 1
    links.pop_front(0, 2)
    assert links.first(0) == UNLINKED


@pytest.mark.parametrize("link_from", [1, 10**9])  # every list by NumPy scatters, or none
def test_link_back_appends_to_its_own_list(link_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(free_queue, "_BULK_LINK", link_from)
    links = IdLinks(8, num_lists=2)
    links.link_back(1, [5])
    links.link_back(1, [2, 7])
    links.link_back(0, [1])
    links.link_front(1, [3, 6])
    assert links.ids(1) == [3, 6, 5, 2, 7]
    assert links.ids(0) == [1]
    assert links.lengths == [1, 5]
    assert [links.prev[p] for p in (3, 6, 5, 2, 7)] == [10, 3, 6, 5, 2]  # (list 1's head sentinel: 8 + 2)
    assert links.prev[11] == 7 and links.next[7] == 11


@pytest.mark.parametrize("make", [list, tuple, lambda ids: (i for i in ids), lambda ids: array("I", ids)])
def test_link_back_links_any_iterable_of_ids_in_order(make: Callable[[list[int]], object]) -> None:
    """Lists and ``array`` copies long enough for the NumPy path take it; a tuple or an iterator
    (no length asked of it) is linked by the loop, in the same order."""
    ids = list(range(300, 0, -2))  # 150 ids, at least _BULK_LINK
    links = IdLinks(301)
    links.link_back(0, [299])
    links.link_back(0, make(ids))  # type: ignore[arg-type]
    assert links.ids(0) == [299, *ids]
    assert links.lengths == [151]


def test_link_back_array_appends_to_the_tail_of_its_own_list_by_default() -> None:
    links = IdLinks(8, num_lists=3)
    links.link_back(2, [6])
    links.link_back_array(2, np.array([2, 7], dtype=np.uint32))
    links.link_back_array(1, np.array([5], dtype=np.intc))
    assert (links.ids(0), links.ids(1), links.ids(2)) == ([], [5], [6, 2, 7])
    assert links.lengths == [0, 1, 3]


# --- import-time code (run on ecbc580) ----------------------------------------------------------
# `CachePage`'s ``ref_cnt`` and ``page_hash`` properties are built by `_record_field` when the
# module is imported; a second execution of the module's file builds them again, so what it
# builds is checked here (a mutation tool that activates a change after the import sees it too).


def test_a_lone_pages_record_fields_read_and_assign_through_their_checks() -> None:
    page = reexecuted(free_queue).CachePage(3, ref_cnt=1)
    assert (page.ref_cnt, page.page_hash) == (1, None)
    page.ref_cnt = 2
    page.page_hash = b"key"
    assert (page.ref_cnt, page.page_hash) == (2, b"key")
    with pytest.raises(InvalidArgumentError, match="ref_cnt"):
        page.ref_cnt = -1
    with pytest.raises(PageStateError):
        page.page_hash = b"other"  # it already has a hash
    assert (page.ref_cnt, page.page_hash) == (2, b"key")


# --- IdLinks.unlink_runs ----------------------------------------------------------------------


def test_unlink_runs_unlinks_ids_around_an_id_a_former_run_held() -> None:
    links = IdLinks(8)
    links.link_back(0, range(8))
    links.unlink_runs(0, np.array([3, 2]))  # one run
    assert links.ids(0) == [0, 1, 4, 5, 6, 7]
    links.link_back(0, [2, 3])  # linked again at the end: 0 1 4 5 6 7 2 3
    # 7 and 3 are two runs (2 lies between them): each is unlinked, 2 stays between 6 and the tail
    links.unlink_runs(0, np.array([7, 3]))
    assert links.ids(0) == [0, 1, 4, 5, 6, 2]
    assert (links.next[6], links.prev[2], links.next[2]) == (2, 6, links.capacity + 1)
    assert links.lengths[0] == 6
    assert not links.is_linked(7) and not links.is_linked(3)
