"""The pool's batched paths equal its per-page ones: frees with shared pages around the
`_BULK_FREE_SHARED` threshold, and the inline eviction of `get_new_page_ids` (events off)
against `_evict` per page (events on), including its fallback cases."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import pytest
from hypothesis import given, strategies as st

import verikv.page_pool as page_pool
from verikv.errors import CorruptedStateError, ForeignPageError, InvalidArgumentError
from verikv.events import EventLog
from verikv.page_pool import PagePool

PoolState = tuple[object, ...]
Op = tuple[str, list[int]]
NEVER = 10**9


def _state(pool: PagePool) -> PoolState:
    """Everything a pool holds, compared whole: lists, counts, keys, the cached map (entries and
    their order), ``key_version``, the count of shared entries and the raw links."""
    links = pool.free_page_queue.links
    pages = range(pool.num_pages)
    return (pool.free_list_ids(), [pool.ref_count(p) for p in pages], [pool.key_of(p) for p in pages],
            pool.cached_items(), pool.key_version, pool._num_shared, links.next.tolist(), links.prev.tolist())


def _run(ops: Sequence[Op], *, events: bool) -> tuple[PoolState, list[object]]:
    """Run ``ops`` ("get" [n], "touch" ids, "free" ids, "cache" [id, key]) on a 24-page pool;
    its state and each call's result or error (type and message)."""
    pool = PagePool(24, enable_kv_events=events)
    results: list[object] = []
    for op, arg in ops:
        try:
            if op == "get":
                results.append(pool.get_new_page_ids(arg[0]))
            elif op == "touch":
                pool.touch_ids(arg)
                results.append("touched")
            elif op == "free":
                pool.free_page_ids(arg)
                results.append("freed")
            else:
                pool.cache_page_id(arg[0], arg[1])
                results.append("cached")
        except Exception as exc:  # compared between the two pools, whatever it is
            results.append((type(exc).__name__, str(exc)))
    return _state(pool), results


_ids = st.lists(st.integers(0, 23), max_size=12)
_few_ids = st.lists(st.integers(1, 6), min_size=2, max_size=8)  # repeats and shared pages, often
_op = st.one_of(
    st.tuples(st.just("get"), st.lists(st.integers(0, 10), min_size=1, max_size=1)),
    st.tuples(st.just("touch"), _ids),
    st.tuples(st.just("touch"), _few_ids),
    st.tuples(st.just("free"), _ids),
    st.tuples(st.just("free"), _few_ids),
    # keys 0..3 only: pages of equal content share an entry (a dict), which eviction must handle
    st.tuples(st.just("cache"), st.tuples(st.integers(0, 23), st.integers(0, 3)).map(list)),
)


@given(st.lists(_op, max_size=30), st.sampled_from([2, 5, NEVER]))
def test_batched_frees_and_inline_evictions_equal_the_per_page_paths(ops: list[Op], shared_from: int) -> None:
    """The pool under test takes every free of 2+ ids to the NumPy path (shared pages from
    ``shared_from`` ids, or by the last-page guess below it), events off (inline eviction); the
    reference frees per page and evicts with `_evict` per page (events on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(page_pool, "_BULK_FREE", NEVER)
        reference = _run(ops, events=True)
        mp.setattr(page_pool, "_BULK_FREE", 2)
        mp.setattr(page_pool, "_BULK_FREE_SHARED", shared_from)
        assert _run(ops, events=False) == reference


# --- the shared-free threshold ----------------------------------------------------------------------


def _free_bulk_results(pool: PagePool, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record what each `_free_bulk` call of ``pool`` returns (True: the NumPy path freed)."""
    seen: list[bool] = []
    free_bulk = pool._free_bulk

    def recorded(ids: list[int]) -> bool:
        seen.append(free_bulk(ids))
        return seen[-1]

    monkeypatch.setattr(pool, "_free_bulk", recorded)
    return seen


def _held_pool(length: int, num_shared: int) -> tuple[PagePool, list[int]]:
    """A pool holding ``length`` pages, the first ``num_shared`` of them twice (a prefix hit
    shared with another request), and their ids."""
    pool = PagePool(300)
    held = pool.get_new_page_ids(length)
    pool.touch_ids(held[:num_shared])
    return pool, held


@pytest.mark.parametrize(("length", "shared_last", "numpy_path"), [
    (100, True, False),  # shorter than the threshold, the last page shared: the scalar path
    (149, True, False),
    (150, True, True),  # (the threshold itself)
    (100, False, True),  # the last page held once: the NumPy path (its shared branch)
    (200, True, True),  # from the threshold on, shared pages take the NumPy path
])
def test_a_free_with_shared_pages_takes_the_numpy_path_only_from_the_threshold(
        length: int, shared_last: bool, numpy_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_pool, "_BULK_FREE_SHARED", 150)
    pool, held = _held_pool(length, 20)
    scalar, _ = _held_pool(length, 20)
    order = held[::-1] if shared_last else held  # a request's free lists its last page first
    seen = _free_bulk_results(pool, monkeypatch)
    pool.free_page_ids(order)
    assert seen == [numpy_path]
    monkeypatch.setattr(page_pool, "_BULK_FREE", NEVER)
    scalar.free_page_ids(order)
    assert _state(pool) == _state(scalar)
    assert [pool.ref_count(p) for p in held] == [1] * 20 + [0] * (length - 20)


def test_a_short_free_of_pages_held_once_takes_the_numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    pool, held = _held_pool(80, 0)
    seen = _free_bulk_results(pool, monkeypatch)
    pool.free_page_ids(held[::-1])
    assert seen == [True]
    assert pool.free_list_ids()[-80:] == held[::-1]


@pytest.mark.parametrize(("last", "error"), [
    ("a string", InvalidArgumentError), (10**6, ForeignPageError), (-10**30, ForeignPageError)])
def test_a_short_free_ending_with_a_bad_id_takes_the_scalar_path_and_its_error(
        last: object, error: type[Exception], monkeypatch: pytest.MonkeyPatch) -> None:
    pool, held = _held_pool(80, 10)
    before = _state(pool)
    seen = _free_bulk_results(pool, monkeypatch)
    with pytest.raises(error):
        pool.free_page_ids([*held, last])  # type: ignore[list-item]
    assert seen == [False]
    assert _state(pool) == before


# --- inline eviction: the fallback cases ------------------------------------------------------------


class _Shifty:
    """A user key whose hash and equality follow a mutable field."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Shifty) and other.value == self.value

    def __repr__(self) -> str:
        return f"_Shifty({self.value})"


def _evicting_pool(events: bool, case: str) -> tuple[PagePool, list[Hashable]]:
    """A pool whose free list holds, in order, pages 1..4 cached and page 5 without a key.
    Pages 1 and 3 have ordinary keys (their entry is their own id); pages 2 and 4 make the
    fallback ``case``: "equal" (both under one key: a dict entry), "hash changed" (page 2's
    key no longer hashes as when stored), "equals another" (page 2's key now equals page 4's,
    whose entry is page 4)."""
    pool = PagePool(6, enable_kv_events=events)
    pool.get_new_page_ids(5)
    second, fourth = (("same", "same") if case == "equal" else (_Shifty(20), _Shifty(40)))
    keys: list[Hashable] = ["one", second, "three", fourth]
    for pid, key in zip(range(1, 5), keys):
        pool.cache_page_id(pid, key)
    pool.free_page_ids([1, 2, 3, 4, 5])
    if isinstance(second, _Shifty):
        second.value = 21 if case == "hash changed" else 40
    return pool, keys


@pytest.mark.parametrize(("case", "fallbacks"), [
    ("equal", [2]), ("hash changed", [2]), ("equals another", [2])])  # (then page 4's entry is its own id)
def test_inline_eviction_equals_per_page_eviction_in_every_fallback_case(
        case: str, fallbacks: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    quiet, _ = _evicting_pool(False, case)
    loud, keys = _evicting_pool(True, case)
    calls: list[int] = []
    evict = PagePool._evict

    def counted(self: PagePool, pid: int) -> None:
        calls.append(pid)
        evict(self, pid)

    monkeypatch.setattr(PagePool, "_evict", counted)
    removed: list[tuple[int, object]] = []
    monkeypatch.setattr(EventLog, "removed", lambda _log, pid, key: removed.append((pid, key)))
    version = quiet.key_version
    assert quiet.get_new_page_ids(5) == [1, 2, 3, 4, 5]
    assert calls == fallbacks  # events off: only the pages whose entry is not their own id
    assert loud.get_new_page_ids(5) == [1, 2, 3, 4, 5]
    assert calls[len(fallbacks):] == [1, 2, 3, 4]  # events on: every page, in order
    assert removed == list(zip(range(1, 5), keys))
    assert _state(quiet) == _state(loud)
    assert quiet.key_version == version + 4  # one bump per evicted page
    assert quiet.cached_items() == []
    assert [quiet.ref_count(p) for p in range(1, 6)] == [1] * 5


def test_inline_eviction_of_one_of_equal_pages_keeps_the_others() -> None:
    pool = PagePool(6)
    pool.get_new_page_ids(3)
    for pid in (1, 2, 3):
        pool.cache_page_id(pid, "same")
    pool.free_page_ids([1, 2, 3])  # the free list: 4, 5, 1, 2, 3
    assert pool.get_new_page_ids(3) == [4, 5, 1]
    assert pool.cached_items() == [("same", (2, 3))]
    assert pool.get_new_page_ids(1) == [2]
    assert pool.cached_items() == [("same", (3,))]
    assert pool.lookup_id("same") == 3


def test_a_missing_entry_raises_after_the_evictions_before_it_as_per_page_eviction_does() -> None:
    pools = [PagePool(6, enable_kv_events=events) for events in (False, True)]
    outcomes = []
    for pool in pools:
        pool.get_new_page_ids(5)
        for pid in range(1, 6):
            pool.cache_page_id(pid, f"k{pid}")
        pool.free_page_ids([1, 2, 3, 4, 5])
        del pool._cached["k3"]  # corrupted: page 3's key is not in the cached map
        with pytest.raises(CorruptedStateError):
            pool.get_new_page_ids(5)
        outcomes.append((pool.key_version, [pool.key_of(p) for p in range(6)], [pool.ref_count(p) for p in range(6)]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == [None, None, None, "k3", "k4", "k5"]
