"""Checks written for mutants of impl/page_pool.py that the suite let through (tools/mutation/triage.toml).

They pin what `PagePool`'s docstrings promise: rejected arguments are named, zero pages is a
valid request on every path, eSurge's `get_new_pages` honours the shard hint like
`get_new_page_ids`, the pool's free queue hands out views of the pool's pages, and a refused
prefix-cache reset says how many pages are held. Expected values come from the arguments.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import numpy as np
import pytest
from pool_helpers import ShiftyKey

from verikv import page_pool
from verikv.errors import DoubleFreeError, ForeignPageError, InvalidArgumentError, NullPageError, PageStateError
from verikv.free_queue import CachePage
from verikv.page_pool import PagePool


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("num_pages of the pool", lambda: PagePool(0), "num_pages"),
    ("num_pages to allocate", lambda: PagePool(8).get_new_page_ids(-1), "num_pages"),
    ("page_ids to count", lambda: PagePool(8).count_free_ids("ab"), "page_ids"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_what_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


def test_zero_pages_is_a_valid_request() -> None:
    pool = PagePool(8)
    assert pool.get_new_page_ids(0) == []
    assert pool.get_new_page_ids(np.int64(0)) == []  # type: ignore[arg-type]
    assert pool.get_new_pages(0) == []


def test_count_free_ids_takes_any_sequence() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)  # pages 1 and 2
    assert pool.count_free_ids((1, 2, 3)) == 1
    assert pool.count_free_ids([3, 4]) == 2
    assert held == [1, 2]


def test_get_new_pages_honours_the_shard_hint() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    pages = pool.get_new_pages(2, dp_shard_hint=1, data_parallel_size=2)
    assert all(isinstance(p, CachePage) for p in pages)
    assert [p.page_id for p in pages] == [4, 5]


def test_the_free_queue_hands_out_the_pools_pages() -> None:
    pool = PagePool(4)
    free = pool.free_page_queue.get_all_free_pages()
    assert [p.page_id for p in free] == [1, 2, 3]
    assert all(isinstance(p, CachePage) for p in free)


def test_a_refused_reset_logs_how_many_pages_are_held(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(2)
    with caplog.at_level(logging.WARNING):
        assert pool.reset_prefix_cache() is False
    assert any(re.search(r"(?<!\w)2 pages are still held(?!\w)", record.getMessage()) for record in caplog.records)


# --- survivors of the run on 2cf7d95: keys_of_ids, touch_ids, lookup_run_ids ----------------


def test_keys_of_ids_reads_each_pages_key() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(3)  # pages 1, 2, 3
    pool.cache_page_id(held[0], "a")
    pool.cache_page_id(held[2], "c")
    expected = ["a", None, "c"]
    assert pool.keys_of_ids(held) == expected
    assert pool.keys_of_ids(tuple(held)) == expected  # any sequence, not only a list
    assert pool.keys_of_ids([]) == []


def test_keys_of_ids_rejects_foreign_ids_and_names_a_bad_argument() -> None:
    pool = PagePool(8)
    with pytest.raises(ForeignPageError):
        pool.keys_of_ids([8])
    with pytest.raises(InvalidArgumentError, match=_named("page_ids")):
        pool.keys_of_ids("ab")  # type: ignore[arg-type]


def test_touch_ids_names_a_bad_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("page_ids")):
        PagePool(8).touch_ids("ab")  # type: ignore[arg-type]


def test_touch_ids_skips_a_null_id_and_touches_the_rest() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)  # pages 1 and 2
    pool.touch_ids((0, held[0], 0, held[1]))  # any sequence; null ids are skipped, not a stop
    assert [pool.ref_count(p) for p in held] == [2, 2]


def test_touching_a_free_cached_page_in_a_sharded_pool_takes_it_off_both_lists() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    pid = pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2)[0]
    pool.cache_page_id(pid, "k")
    pool.free_page_ids([pid])
    before = pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2)
    pool.touch_ids([pid])
    assert pool.ref_count(pid) == 1
    assert pid not in pool.free_list_ids()
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == before - 1
    assert pid not in pool.get_new_page_ids(3, dp_shard_hint=1, data_parallel_size=2)


def test_lookup_run_ids_names_a_bad_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        PagePool(8).lookup_run_ids("ab")


def test_lookup_run_ids_statistics_accumulate_one_query_per_key_looked_up() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)
    pool.cache_page_id(held[0], "a")
    pool.cache_page_id(held[1], "b")
    stats = pool.prefix_cache_stats
    assert pool.lookup_run_ids(["a", "b"]) == held  # a full run: 2 keys looked up, 2 hits
    assert pool.lookup_run_ids(iter(["a", "x", "b"])) == held[:1]  # stops at the miss: 2 looked up, 1 hit
    assert (stats.requests, stats.queries, stats.hits) == (4, 4, 3)


def test_lookup_run_ids_inside_a_shard_stops_at_a_key_held_only_outside_it() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    low = pool.get_new_page_ids(1, dp_shard_hint=0, data_parallel_size=2)[0]
    high = pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2)[0]
    pool.cache_page_id(high, "a")
    pool.cache_page_id(low, "b")
    stats = pool.prefix_cache_stats
    assert pool.lookup_run_ids(["a", "b"], dp_shard_hint=1, data_parallel_size=2) == [high]
    assert (stats.queries, stats.hits) == (2, 1)  # "b" was looked up and missed in shard 1
    assert pool.lookup_run_ids(["a", "b"], dp_shard_hint=0, data_parallel_size=2) == []
    assert pool.lookup_run_ids(["a", "b"]) == [high, low]  # no hint: the whole pool


# --- long frees (64 ids or more take a vectorized path): the same documented contract ---------

LONG = 80  # more ids than the vectorized path's threshold


def test_a_long_free_drops_one_reference_per_page_and_frees_those_reaching_zero_in_order() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    twice = held[::2]
    pool.touch_ids(twice)  # every other page held twice
    pool.free_page_ids(held[::-1])
    assert [pool.ref_count(p) for p in held] == [1 if p in twice else 0 for p in held]
    assert pool.free_list_ids()[-(LONG // 2):] == [p for p in held[::-1] if p not in twice]  # at the tail, in order


@pytest.mark.parametrize(("bad", "error"), [
    (0, NullPageError), (LONG + 1, ForeignPageError), (-1, InvalidArgumentError),
])
def test_a_long_free_with_one_bad_id_raises_and_changes_nothing(bad: int, error: type[Exception]) -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    free_before = pool.free_list_ids()
    with pytest.raises(error):
        pool.free_page_ids([*held[1:], bad])
    assert [pool.ref_count(p) for p in held] == [1] * LONG
    assert pool.free_list_ids() == free_before


def test_a_long_double_free_raises_and_changes_nothing() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    pool.free_page_ids(held[:1])
    with pytest.raises(DoubleFreeError):
        pool.free_page_ids(held)  # page held[0] is no longer held
    assert [pool.ref_count(p) for p in held] == [0] + [1] * (LONG - 1)


def test_a_long_free_under_unhashed_first_puts_keyless_pages_before_the_head() -> None:
    pool = PagePool(LONG + 1, free_order="unhashed-first")
    held = pool.get_new_page_ids(LONG)
    pool.cache_page_id(held[0], "a")
    pool.free_page_ids(held)
    assert pool.free_list_ids() == [*held[1:], held[0]]


def test_a_long_free_in_a_sharded_pool_returns_pages_to_their_shard() -> None:
    pool = PagePool(2 * LONG)  # two shards of LONG pages
    held = pool.get_new_page_ids(LONG - 1, dp_shard_hint=1, data_parallel_size=2)
    pool.free_page_ids(held)
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == LONG
    assert sorted(pool.get_new_page_ids(LONG, dp_shard_hint=1, data_parallel_size=2)) == list(range(LONG, 2 * LONG))


# --- the shard hint's arguments (written after the run on 476be5a) ----------------------------


@pytest.mark.parametrize(("hint", "size", "name"), [
    ("1", 2, "dp_shard_hint"), (1.5, 2, "dp_shard_hint"), (1, 0, "data_parallel_size"), (1, "2", "data_parallel_size"),
])
def test_a_bad_shard_hint_argument_is_named_and_changes_nothing(hint: object, size: object, name: str) -> None:
    pool = PagePool(8)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        pool.get_new_page_ids(1, dp_shard_hint=hint, data_parallel_size=size)  # type: ignore[arg-type]
    assert pool.get_num_free_pages() == 7


def test_a_numpy_shard_hint_is_taken_as_its_int() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 1..3 and 4..7
    assert pool.get_new_page_ids(2, dp_shard_hint=np.int64(3), data_parallel_size=np.int64(2)) == [4, 5]  # type: ignore[arg-type]


# --- third session: argument names and shapes of every id-level call --------------------------


@pytest.mark.parametrize(("call", "name"), [
    (lambda p: p.cache_page_ids("ab", [b"k"]), "page_ids"),
    (lambda p: p.cache_page_ids([1], "ab"), "keys"),
    (lambda p: p.free_page_ids("ab"), "page_ids"),
    (lambda p: p.check_cacheable("ab"), "page_ids"),
    (lambda p: p.free_pages(5), "pages"),
    (lambda p: p.touch(5), "pages"),
    (lambda p: p.touch([[p.page(1)], 5]), "pages of a group"),
    (lambda p: p.lookup_all_ids("ab"), "keys"),
    (lambda p: p.get_new_page_ids(1, data_parallel_size="x"), "data_parallel_size"),
    (lambda p: p.get_new_page_ids(1, data_parallel_size=0), "data_parallel_size"),
    (lambda p: p.lookup_run_ids([b"k"], data_parallel_size=-1), "data_parallel_size"),
    (lambda p: p.lookup_run_ids([b"k"], dp_shard_hint="x"), "dp_shard_hint"),
    (lambda p: p.lookup_run_ids([b"k"], data_parallel_size="x"), "data_parallel_size"),
    (lambda p: p.lookup_run_ids([b"k"], dp_shard_hint="x", data_parallel_size=2), "dp_shard_hint"),
    (lambda p: p.get_new_page_ids("2"), "num_pages"),
], ids=["cache ids", "cache keys", "free", "check_cacheable", "free_pages", "touch", "touch group", "lookup_all",
        "allocate dp without hint", "allocate dp 0 without hint", "run dp -1 without hint",
        "run hint without dp", "run dp without hint", "run bad hint", "num_pages str"])
def test_every_rejected_argument_is_named_and_nothing_changes(call: Callable[[PagePool], object], name: str) -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call(pool)
    assert pool.get_num_free_pages() == 5 and pool.ref_count(held[0]) == 1


@pytest.mark.parametrize("call", [
    lambda p: p.lookup_run_ids(5), lambda p: p.free_page_ids(5), lambda p: p.cache_page_ids(5, [b"k"]),
    lambda p: p.cache_page_ids([1], 5),
], ids=["run keys", "free", "cache ids", "cache keys"])
def test_a_rejected_container_is_shown_by_its_type(call: Callable[[PagePool], object]) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("int")):
        call(PagePool(8))


def test_id_level_calls_take_any_iterable_of_ids() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(4)
    pool.cache_page_ids(iter([1, 2]), iter([b"a", b"b"]))  # type: ignore[arg-type]
    pool.cache_page_ids((3,), (b"c",))
    assert pool.keys_of_ids([1, 2, 3, 4]) == [b"a", b"b", b"c", None]
    pool.free_page_ids((4, 3))
    pool.free_page_ids(iter([2]))
    assert pool.free_list_ids() == [5, 6, 7, 4, 3, 2]
    pool.free_page_ids([])  # an empty free is a no-op
    assert pool.ref_count(1) == 1 and pool.get_num_free_pages() == 6


def test_the_page_count_bound_is_max_page_id_plus_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids run 0..MAX_PAGE_ID, so a pool has at most MAX_PAGE_ID + 1 pages (checked with a small
    bound: the real one is 2**29 pages)."""
    monkeypatch.setattr(page_pool, "MAX_PAGE_ID", 7)
    assert PagePool(8).num_pages == 8
    with pytest.raises(InvalidArgumentError, match=_named("num_pages")):
        PagePool(9)


def test_cache_page_id_refuses_a_non_int_id_and_the_id_past_the_last() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(7)
    with pytest.raises(InvalidArgumentError):
        pool.cache_page_id(np.int64(1), b"k")  # type: ignore[arg-type]
    with pytest.raises(ForeignPageError):
        pool.cache_page_id(8, b"k")
    assert pool.keys_of_ids(list(range(8))) == [None] * 8


def test_a_page_cached_twice_in_one_batch_is_refused_showing_its_first_key() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(2)
    with pytest.raises(PageStateError, match="first-key"):
        pool.cache_page_ids([1, 1], [b"first-key", b"second-key"])
    assert pool.cached_items() == []


def test_the_first_bad_page_of_a_free_is_the_one_reported() -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(2)  # 1, 2: each held once
    pool.free_page_ids([2])
    with pytest.raises(DoubleFreeError, match=r"page 2\b"):
        pool.free_page_ids([1, 2])  # page 1 is held; page 2 is not
    with pytest.raises(ForeignPageError, match=r"\b99\b"):
        pool.keys_of_ids([0, 99])  # 0 is an id of the pool; 99 is not
    assert pool.ref_count(held[0]) == 1


def test_a_long_free_of_pages_held_twice_drops_one_reference_each() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    pool.touch_ids(held)
    pool.free_page_ids(list(held))
    assert [pool.ref_count(p) for p in held] == [1] * LONG
    assert pool.get_num_free_pages() == 0


def test_a_long_free_with_a_non_int_id_is_refused() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    with pytest.raises(InvalidArgumentError):
        pool.free_page_ids([*held[:-1], "x"])  # type: ignore[list-item]
    assert pool.get_num_free_pages() == 0


# --- equal pages, evictions and keys whose hash changed -----------------------------------------


def _equal_keys(count: int) -> list[bytes]:
    """``count`` equal keys that are distinct objects."""
    return [b"".join([b"sa", b"me"]) for _ in range(count)]


def test_evicting_one_of_equal_pages_keeps_the_others(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(6)
    pool.get_new_page_ids(5)
    for pid, key in zip((1, 2, 3), _equal_keys(3)):
        pool.cache_page_id(pid, key)
    pool.free_page_ids([2, 1, 3, 4, 5])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [2]  # evicts page 2's key
    assert caplog.records == []  # an ordinary eviction: no key changed
    assert pool.cached_items() == [(b"same", (1, 3))]
    assert pool.get_new_page_ids(1) == [1]
    assert pool.cached_items() == [(b"same", (3,))]
    assert pool.lookup_id(b"same") == 3


def test_an_ordinary_eviction_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(4)
    pool.get_new_page_ids(3)
    pool.cache_page_id(1, b"one")
    pool.free_page_ids([1, 2, 3])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [1]
    assert caplog.records == []
    assert pool.key_of(1) is None and pool.cached_items() == []


def test_a_key_changed_to_equal_another_is_evicted_and_the_other_entry_kept(caplog: pytest.LogCaptureFixture) -> None:
    pool = PagePool(4)
    pool.get_new_page_ids(3)
    changed, other = ShiftyKey(1), ShiftyKey(2)
    pool.cache_page_id(1, changed)
    pool.cache_page_id(2, other)
    changed.value = 2  # now equal to `other`, and hashed like it
    pool.free_page_ids([1, 2, 3])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [1]
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "ShiftyKey(2)" in caplog.records[0].getMessage()
    assert pool.key_of(1) is None
    assert pool.cached_items() == [(ShiftyKey(2), (2,))]
    assert pool.cached_items()[0][0] is other  # the entry is kept under its own key object
    assert pool.get_new_page_ids(2) == [2, 3]
    assert pool.get_num_free_pages() == 0


def test_a_key_whose_hash_changed_is_evicted_beside_equal_pages(caplog: pytest.LogCaptureFixture) -> None:
    """The equal keys are tuples of ints, whose hash is the same in every process (that of
    bytes changes with PYTHONHASHSEED): a dict finds a key by identity when the probe of its new
    hash reaches its old slot, and then nothing shows that the key changed. With these hashes
    the probe misses it, in every process."""
    pool = PagePool(5)
    pool.get_new_page_ids(4)
    for pid in (2, 3):
        pool.cache_page_id(pid, tuple([7, 7]))  # equal keys, distinct objects
    changed = ShiftyKey(10)
    pool.cache_page_id(1, changed)
    changed.value = 11
    pool.free_page_ids([1, 2, 3, 4])
    with caplog.at_level(logging.WARNING, logger="verikv.page_pool"):
        assert pool.get_new_page_ids(1) == [1]
    assert pool.cached_items() == [((7, 7), (2, 3))]
    assert len(caplog.records) == 1
    assert "ShiftyKey(11)" in caplog.records[0].getMessage()  # the key, as it is now


# --- shards: lookups, front links, repeated allocations ------------------------------------------


def test_lookups_inside_a_shard_see_only_its_pages() -> None:
    pool = PagePool(8)  # two shards of 4 pages: ids 0..3 and 4..7
    pool.get_new_page_ids(7)
    for pid, key in zip((4, 5), _equal_keys(2)):  # equal pages, both in shard 1
        pool.cache_page_id(pid, key)
    pool.cache_page_id(6, b"six")
    for shard, expected in ((0, None), (1, 4)):
        assert pool.lookup_id(b"same", dp_shard_hint=shard, data_parallel_size=2) == expected
    assert pool.lookup_all_ids([b"six"], dp_shard_hint=0, data_parallel_size=2) is None
    assert pool.lookup_all_ids([b"six", b"same"], dp_shard_hint=1, data_parallel_size=2) == [6, 4]
    assert pool.lookup_all_ids([b"six"], dp_shard_hint=2, data_parallel_size=2) is None  # hint 2 is shard 0


def test_equal_pages_at_a_shards_upper_bound_are_outside_it() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(7)
    for pid, key in zip((4, 5), _equal_keys(2)):
        pool.cache_page_id(pid, key)
    assert pool.lookup_run_ids([b"same"], dp_shard_hint=0, data_parallel_size=2) == []


def test_each_lookup_counts_one_query_and_a_hit_only_when_it_hits() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(1)
    pool.cache_page_id(1, b"k")
    for call, hit in ((lambda: pool.lookup_id(b"k"), True), (lambda: pool.lookup_id(b"miss"), False),
                      (lambda: pool.lookup_all_ids([b"miss"]), False), (lambda: pool.lookup_all_ids([b"k"]), True),
                      (lambda: pool.lookup_all_ids([b"k", b"miss"]), False)):
        pool.make_prefix_cache_stats()
        call()
        stats = pool.make_prefix_cache_stats()
        assert (stats.queries, stats.hits) == (1, int(hit))


def test_every_registration_changes_the_key_version() -> None:
    pool = PagePool(8)
    pool.get_new_page_ids(6)
    seen = [pool.key_version]
    for batch in ([1, 2], [3, 4], [5], [6]):
        pool.cache_page_ids(batch, [bytes([p]) for p in batch])
        assert pool.key_version not in seen
        seen.append(pool.key_version)


def test_a_bad_key_is_reported_before_a_bad_page() -> None:
    with pytest.raises(InvalidArgumentError) as excinfo:
        PagePool(8).cache_page_id(0, [1])  # type: ignore[arg-type]  # the null page, an unhashable key
    assert excinfo.type is InvalidArgumentError


def test_unhashed_first_frees_put_keyless_pages_before_their_shards_head() -> None:
    pool = PagePool(8, free_order="unhashed-first")  # shards: 1..3 and 4..7
    held = pool.get_new_page_ids(3, dp_shard_hint=1, data_parallel_size=2)
    assert held == [4, 5, 6]
    pool.cache_page_id(4, b"four")
    pool.free_page_ids([4, 5, 6])  # 5 and 6 have no key: before the head; 4 to the tail
    assert pool.free_list_ids() == [5, 6, 1, 2, 3, 7, 4]
    assert pool.get_new_page_ids(4, dp_shard_hint=1, data_parallel_size=2) == [5, 6, 7, 4]
    assert pool.get_num_free_pages(dp_shard_hint=0, data_parallel_size=2) == 3


def test_repeated_shard_allocations_keep_the_shard_counts() -> None:
    pool = PagePool(8)
    assert pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2) == [4]
    assert pool.get_new_page_ids(1, dp_shard_hint=1, data_parallel_size=2) == [5]
    assert pool.get_num_free_pages(dp_shard_hint=1, data_parallel_size=2) == 2
    assert pool.get_new_page_ids(2, dp_shard_hint=1, data_parallel_size=2) == [6, 7]


# --- eSurge's touch of page views; the spec's view of a pool -----------------------------------


def test_touch_takes_a_flat_list_of_pages_or_one_list_per_group() -> None:
    pool = PagePool(8)
    pages = pool.get_new_pages(2)
    pool.touch(pages)
    pool.touch([pages[:1], pages[1:]])
    pool.touch([])
    assert [pool.ref_count(p.page_id) for p in pages] == [3, 3]


def test_abstract_pool_is_the_spec_state_of_this_pool() -> None:
    pool = PagePool(4)
    pool.get_new_page_ids(1)
    state = page_pool.abstract_pool(pool)
    assert (state.num_pages, state.ref, state.free) == (4, (0, 1, 0, 0), (2, 3))


def test_a_batch_of_new_keys_moves_the_key_version_once() -> None:
    """cache_page_ids' documented common case: every id a keyless page, every key new and
    distinct, ``key_version`` bumped once, as one cache_page_id call bumps it."""
    pool = PagePool(8)
    pool.get_new_page_ids(4)
    before = pool.key_version
    pool.cache_page_id(1, b"one")
    single = pool.key_version - before
    before = pool.key_version
    pool.cache_page_ids([2, 3, 4], [b"two", b"three", b"four"])
    assert single > 0 and pool.key_version - before == single
    assert pool.keys_of_ids([1, 2, 3, 4]) == [b"one", b"two", b"three", b"four"]


# --- found by the run on ecbc580 ------------------------------------------------------------------


def test_a_key_changed_to_equal_a_key_of_equal_pages_is_evicted_and_that_entry_kept() -> None:
    pool = PagePool(5)
    pool.get_new_page_ids(4)
    changed, first, second = ShiftyKey(1), ShiftyKey(2), ShiftyKey(2)
    pool.cache_page_id(1, changed)
    pool.cache_page_id(2, first)
    pool.cache_page_id(3, second)  # equal to `first`: pages 2 and 3 are equal pages
    changed.value = 2  # now equal to them
    pool.free_page_ids([1, 2, 3, 4])
    assert pool.get_new_page_ids(1) == [1]
    assert pool.key_of(1) is None
    assert pool.cached_items() == [(ShiftyKey(2), (2, 3))]
    assert pool.cached_items()[0][0] is first  # kept under its own key object


def test_a_long_free_of_pages_held_once_puts_them_at_the_tail_in_order() -> None:
    pool = PagePool(LONG + 2)
    held = pool.get_new_page_ids(LONG)  # one page stays free: the freed ones go after it
    before = pool.free_list_ids()
    pool.free_page_ids(held[::-1])
    assert pool.free_list_ids() == [*before, *held[::-1]]
    assert pool.get_num_free_pages() == LONG + 1
    assert pool.get_new_page_ids(LONG + 1) == [*before, *held[::-1]]


def test_a_long_free_listing_a_page_as_often_as_it_is_held_frees_it() -> None:
    pool = PagePool(LONG + 1)
    held = pool.get_new_page_ids(LONG)
    pool.touch_ids(held[:1])  # page held[0] is held twice, and listed twice below
    pool.free_page_ids([*held, held[0]])
    assert [pool.ref_count(p) for p in held] == [0] * LONG
    assert pool.free_list_ids() == [*held[1:], held[0]]  # each joins the tail when it reaches 0


# --- touch_ids of a long list (the bulk path of febc211) -------------------------------------------


def test_a_long_touch_skips_the_null_page() -> None:
    pool = PagePool(600)
    ids = pool.get_new_page_ids(299)  # all held: only the null page could leave the free list
    free = pool.get_num_free_pages()
    pool.touch_ids([0, *ids])  # null ids are skipped
    assert pool.ref_count(0) == 0
    assert pool.get_num_free_pages() == free
    assert [pool.ref_count(p) for p in ids] == [2] * len(ids)


def test_a_long_touch_takes_the_pages_out_of_their_dp_shard() -> None:
    pool = PagePool(1201)  # 2 shards of 600 pages
    dp = {"dp_shard_hint": 0, "data_parallel_size": 2}
    ids = pool.get_new_page_ids(300, **dp)
    pool.free_page_ids(ids)  # free again: one run of the free list
    free = pool.get_num_free_pages(**dp)
    pool.touch_ids(ids)  # each leaves the free list, and so its shard
    assert pool.get_num_free_pages(**dp) == free - 300
    assert pool.get_num_free_pages() == 1200 - 300


@pytest.mark.parametrize("bad", [-1, -2])
def test_a_negative_id_is_foreign_even_where_it_would_index_a_held_page(bad: int) -> None:
    pool = PagePool(8)
    held = pool.get_new_page_ids(7)  # pages 1..7, each held once: ref[-1] is page 7's count
    with pytest.raises(ForeignPageError, match=str(bad)):
        pool.free_page_ids([*held[:3], bad])
    assert [pool.ref_count(p) for p in range(8)] == [0] + [1] * 7
    assert pool.get_num_free_pages() == 0


@pytest.mark.parametrize("part", ["own", "shared"])
@pytest.mark.parametrize("at", [0, 7, 14])
def test_a_shaped_free_with_an_id_past_the_pool_inside_a_part_changes_nothing(part: str, at: int) -> None:
    """A free shaped as a request's (20 pages held once, then 15 held twice) with an id past the
    pool inside one part: each loop of the shaped free stops there and locates where it stopped,
    so exactly its own stores are undone; the general path then names the id."""
    pool = PagePool(64)
    held = pool.get_new_page_ids(35)
    pool.touch_ids(held[:15])
    own, shared = held[:14:-1], held[14::-1]
    ids = [*own[:at], 64, *own[at:], *shared] if part == "own" else [*own, *shared[:at], 64, *shared[at:]]
    before = (pool.free_list_ids(), [pool.ref_count(p) for p in range(64)])
    with pytest.raises(ForeignPageError, match=r"\b64\b"):
        pool.free_page_ids(ids)
    assert (pool.free_list_ids(), [pool.ref_count(p) for p in range(64)]) == before
