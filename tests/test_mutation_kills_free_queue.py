"""Checks written for mutants of impl/free_queue.py that the suite let through (tools/mutation/triage.toml).

They pin behaviour the docstrings state and the suite never exercised: ids that were never
linked are unlinked (not just ids that were popped), a queue over an empty range is empty,
every list of a multi-list `IdLinks` has its own sentinels, bounds are exclusive where the
docstrings say ``0..capacity-1``, and rejected arguments are named. Expected values come from
the arguments, not from running the code.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable

import numpy as np
import pytest
from reexecuted import reexecuted

from verikv import free_queue
from verikv.errors import ForeignPageError, InvalidArgumentError, PageStateError
from verikv.free_queue import UNLINKED, CachePage, FreeCachePageQueue, IdLinks, PageRecords


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


# --- IdLinks.unlink_runs (febc211; several runs since the seventh session) --------------------------


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
