"""Prefix-cache statistics and KV events validate what they are given; the event log merges
the pool's per-page reports into one event per run of a call."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from verikv import ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec, Request, SlidingWindowSpec
from verikv.errors import InvalidArgumentError
from verikv.events import (
    AllPagesCleared,
    EventLog,
    PageRemoved,
    PageStored,
    PrefixCacheStats,
    StoreContext,
    describe_run,
    spec_metadata,
    split_group,
    wire_hash,
)
from verikv.hashing import PageHash, PageHasher, PageHashWithGroupId, group_pool_key


@pytest.mark.parametrize("fields", [dict(requests=-1), dict(queries="4"), dict(queries=1, hits=2),
                                    dict(reset=1), dict(hits=1.0)])
def test_stats_fields_are_checked(fields: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        PrefixCacheStats(**fields)


def test_record_checks_its_counts_and_changes_nothing_on_error() -> None:
    stats = PrefixCacheStats(requests=1, queries=4, hits=2)
    for queries, hits in (("4", 1), (1, 2), (-1, 0), (3, None)):
        with pytest.raises(InvalidArgumentError):
            stats.record(queries, hits)  # type: ignore[arg-type]
    assert (stats.requests, stats.queries, stats.hits) == (1, 4, 2)
    stats.record(np.int64(3), 1)  # type: ignore[arg-type]
    assert (stats.requests, stats.queries, stats.hits) == (2, 7, 3)


H1, H2, H3 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32


def test_events_check_and_normalise_their_fields() -> None:
    stored = PageStored([H1, H2], None, np.arange(8), np.int64(4), 0, page_ids=[3, 4])  # type: ignore[arg-type]
    assert stored == PageStored((H1, H2), None, tuple(range(8)), 4, 0, page_ids=(3, 4))
    good: dict = dict(page_hashes=(H1,), parent_page_hash=None, token_ids=(1, 2), page_size=2, group_id=None)
    for bad in (dict(page_hashes=()), dict(page_hashes=(5,)), dict(page_hashes="ab"), dict(parent_page_hash=5),
                dict(token_ids=(1, 2, 3)), dict(page_size=0), dict(token_ids=(1,), page_size=1, page_hashes=(H1, H2)),
                dict(group_id=-1), dict(lora_id=-1), dict(lora_name=3), dict(extra_keys=(None, None)),
                dict(page_ids=(0,)), dict(page_ids=(1, 2)), dict(medium=None), dict(spec_kind=1),
                dict(sliding_window=0), dict(token_ids="12")):
        with pytest.raises(InvalidArgumentError):
            PageStored(**{**good, **bad})
    removed_bad: list[dict[str, Any]] = [dict(page_hashes=()), dict(group_id=True), dict(page_ids=(1, 2))]
    for wrong in removed_bad:
        with pytest.raises(InvalidArgumentError):
            PageRemoved(**{"page_hashes": (H1,), **wrong})


def test_wire_hash_of_every_key_shape() -> None:
    page = PageHash(5, (1, 2), None)
    assert wire_hash(page) == (5).to_bytes(32, "little") == wire_hash(5)
    assert wire_hash(b"\xab\xcd") == b"\xab\xcd"  # bytes keys (the opaque PageKey) as they are
    assert wire_hash(-2) == (-2).to_bytes(1, "little", signed=True) and wire_hash(1 << 256) == (1 << 256).to_bytes(
        33, "little", signed=True)
    assert wire_hash("k") == wire_hash(hash("k"))
    assert split_group(PageHashWithGroupId(page, 3)) == (page, 3)
    assert split_group((b"k", 2)) == (b"k", 2) and split_group((b"k", -1)) == ((b"k", -1), None)
    assert split_group(page) == (page, None)
    # group 0's pool key is the content key itself (hashing.group_pool_key); other groups pair it
    assert split_group(group_pool_key(b"k", 0)) == (b"k", 0) and split_group(group_pool_key(b"k", 2)) == (b"k", 2)


def test_outside_a_call_each_report_is_its_own_event() -> None:
    log = EventLog()
    log.stored(1, PageHashWithGroupId(PageHash(7, (1, 2), ("x",)), 0))
    log.stored(2, 9)
    log.removed(1, PageHashWithGroupId(PageHash(7, (1, 2), ("x",)), 0))
    log.removed(2, 9)
    log.cleared()
    seven = (7).to_bytes(32, "little")
    assert log.take() == [
        PageStored((seven,), None, (1, 2), 2, 0, extra_keys=(("x",),), page_ids=(1,)),
        PageStored(((9).to_bytes(32, "little"),), page_ids=(2,)),  # a bare key: no tokens, no page size
        PageRemoved((seven,), 0, page_ids=(1,)),
        PageRemoved(((9).to_bytes(32, "little"),), None, page_ids=(2,)),
        AllPagesCleared(),
    ]
    assert log.take() == []


def test_a_call_merges_consecutive_reports_of_one_kind_group_and_run_in_order() -> None:
    log = EventLog(medium="CPU")
    asked: list[tuple[int | None, tuple[int, ...]]] = []

    def run0(group: int | None, ids: tuple[int, ...]) -> StoreContext:
        asked.append((group, ids))
        return StoreContext(page_size=2, parent_key=(b"p", 0), token_ids=(1, 2, 3, 4),
                            extra_keys=(None, (("salt", "t"),)), lora_id=3, lora_name="a", spec_kind="full_attention")

    def run1(group: int | None, ids: tuple[int, ...]) -> StoreContext:
        asked.append((group, ids))
        return StoreContext(page_size=2, parent_key=None, token_ids=(1, 2), spec_kind="sliding_window",
                            sliding_window=4)

    log.begin_call()
    log.removed(5, (H1, 0))
    log.removed(6, (H2, 0))
    log.removed(7, (H3, 1))
    log.set_store_context(run0)
    log.stored(5, (H2, 0))
    log.stored(6, (H3, 0))
    log.set_store_context(run1)
    log.stored(7, (H1, 1))
    log.begin_call()  # nested: the outermost call emits
    log.end_call()
    assert log.take() == []
    log.end_call()
    assert log.take() == [
        PageRemoved((H1, H2), 0, "CPU", (5, 6)),
        PageRemoved((H3,), 1, "CPU", (7,)),
        PageStored((H2, H3), wire_hash(b"p"), (1, 2, 3, 4), 2, 0, 3, "a", (None, (("salt", "t"),)), "CPU", (5, 6),
                   "full_attention"),
        PageStored((H1,), None, (1, 2), 2, 1, medium="CPU", page_ids=(7,), spec_kind="sliding_window",
                   sliding_window=4),
    ]
    assert asked == [(0, (5, 6)), (1, (7,))]  # one description per run, when the call ends
    with pytest.raises(InvalidArgumentError):
        log.end_call()


def test_consecutive_removals_become_one_event_per_group() -> None:
    log = EventLog()
    log.begin_call()
    for page, group in ((1, 0), (2, 1), (3, 0), (4, 1), (5, 2)):
        log.removed(page, (bytes([page]), group))
    log.end_call()
    assert log.take() == [PageRemoved((b"\x01", b"\x03"), 0, page_ids=(1, 3)),
                          PageRemoved((b"\x02", b"\x04"), 1, page_ids=(2, 4)),
                          PageRemoved((b"\x05",), 2, page_ids=(5,))]


def test_a_removal_between_two_runs_keeps_the_order() -> None:
    log = EventLog()
    log.begin_call()
    log.removed(1, (H1, 0))
    log.stored(2, (H1, 0))  # no context: one event per page
    log.stored(3, (H2, 0))
    log.removed(4, (H2, 0))
    log.cleared()
    log.cleared()
    log.end_call()
    kinds = [(type(e).__name__, getattr(e, "page_ids", ())) for e in log.take()]
    assert kinds == [("PageRemoved", (1,)), ("PageStored", (2,)), ("PageStored", (3,)), ("PageRemoved", (4,)),
                     ("AllPagesCleared", ()), ("AllPagesCleared", ())]


def test_spec_metadata_names_vllms_kinds() -> None:
    kw: dict = dict(page_size=4, num_kv_heads=1, head_size=8, dtype=np.float16)
    assert spec_metadata(FullAttentionSpec(use_mla=False, **kw)) == ("full_attention", None)
    assert spec_metadata(FullAttentionSpec(use_mla=True, **kw)) == ("mla_attention", None)
    assert spec_metadata(SlidingWindowSpec(use_mla=False, sliding_window=8, **kw)) == ("sliding_window", 8)
    assert spec_metadata(ChunkedLocalAttentionSpec(use_mla=False, attention_chunk_size=8, **kw)) == (
        "chunked_local_attention", None)
    assert spec_metadata(MambaSpec(page_size=16, shapes=((2,),), dtype=np.float16)) == ("mamba", None)
    assert spec_metadata(object()) == ("unknown", None)


def test_describe_run_reads_the_requests_tokens_extra_keys_and_lora() -> None:
    hasher = PageHasher(seed=0)
    req = Request("r", list(range(10)), cache_salt="t", lora_id=3)
    spec = FullAttentionSpec(page_size=4, num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
    run = describe_run(req, spec, 4, 0, 2, None, hasher.page_extra_keys)
    assert run == StoreContext(4, None, list(range(8)), [(("lora", 3), ("salt", "t")), (("lora", 3),)], 3, None,
                               "full_attention", None)
    plain = Request("p", list(range(10)))
    assert describe_run(plain, spec, 4, 1, 1, b"parent", hasher.page_extra_keys) == StoreContext(
        4, b"parent", [4, 5, 6, 7], None, None, None, "full_attention", None)


def test_a_manager_records_calls_only_when_events_are_on() -> None:
    from verikv import CacheGroupSpec, CacheManager

    group = CacheGroupSpec(FullAttentionSpec(page_size=4, num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False))
    off = CacheManager(8, [group], 32, hash_seed=0)
    assert off.page_pool.event_log is None
    assert "allocate_slots" not in vars(off) and "cache_pages" not in vars(off)  # the class's methods, unwrapped
    on = CacheManager(8, [group], 32, hash_seed=0, enable_kv_events=True)
    assert on.allocate_slots.__wrapped__ == CacheManager.allocate_slots.__get__(on)  # type: ignore[attr-defined]
    req = Request("a", list(range(9)))
    assert on.allocate_slots(request=req, num_new_tokens=9) is not None  # keyword arguments pass through
    (stored,) = on.take_events()
    assert isinstance(stored, PageStored) and stored.page_ids == (1, 2) and stored.token_ids == tuple(range(8))
    assert stored.spec_kind == "full_attention" and stored.parent_page_hash is None


def test_a_failing_description_leaves_the_log_as_it_was() -> None:
    def fail(group: int | None, ids: tuple[int, ...]) -> StoreContext:
        raise RuntimeError("describer exploded")

    log = EventLog()
    log.begin_call()
    log.set_store_context(fail)
    log.stored(3, b"k" * 32)
    with pytest.raises(InvalidArgumentError, match="describer exploded"):
        log.end_call()
    assert log.peek() == [] and len(log._pending) == 1 and log._depth == 1  # the call is still open
    log.set_store_context(None)
    with pytest.raises(InvalidArgumentError):  # the held report is still described by the failing describer
        log.end_call()


def test_reports_and_helpers_refuse_bad_values() -> None:
    log = EventLog()
    calls: list[Callable[[], object]] = [
        lambda: log.stored(0, b"k"), lambda: log.stored(1, None), lambda: log.removed(1, [1]),
        lambda: log.set_store_context(5), lambda: log.recording(5, 6),  # type: ignore[arg-type]
        lambda: wire_hash([1]), lambda: StoreContext(0, None, ()),
        lambda: StoreContext(4, [1], ()), lambda: StoreContext(4, None, "abcd"),  # type: ignore[arg-type]
        lambda: describe_run(object(), None, 4, 0, 1, None)]
    for call in calls:
        with pytest.raises(InvalidArgumentError):
            call()
    assert log.take() == [] and log.peek() == []
    log.stored(2, b"k" * 32)
    assert log.peek() == log.take() and log.peek() == []


# ---- Checks written for mutants of impl/events.py that the suite let through (tools/mutation/triage.toml)
#
# They pin what `PrefixCacheStats`' docstrings promise: counters reject bad fields with an error
# naming the field, accept NumPy integers, and ``take`` restarts the interval. (The kill tests for
# the event records were written against the per-page events that the run events replaced; the new
# records are covered by tests/test_events.py and tests/test_kv_events*.py, and the module's
# mutation score must be measured again: tools/mutation/RESULTS.md.)


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased field name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("stats requests", lambda: PrefixCacheStats(requests=-1), "requests"),
    ("stats queries", lambda: PrefixCacheStats(queries=-1), "queries"),
    ("stats hits negative", lambda: PrefixCacheStats(queries=2, hits=-1), "hits"),
    ("stats hits above queries", lambda: PrefixCacheStats(queries=2, hits=3), "hits"),
    ("stats reset", lambda: PrefixCacheStats(reset=1), "reset"),  # type: ignore[arg-type]
    ("record queries", lambda: PrefixCacheStats().record(-1, 0), "queries"),
    ("record hits", lambda: PrefixCacheStats().record(2, -1), "hits"),
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_the_field_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


def test_a_wrongly_typed_flag_is_reported_with_its_type() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("int")):
        PrefixCacheStats(reset=1)  # type: ignore[arg-type]


def test_record_accepts_numpy_counts_including_zero() -> None:
    stats = PrefixCacheStats()
    stats.record(np.int64(0), np.int64(0))  # type: ignore[arg-type]
    stats.record(np.int64(2), np.int64(0))  # type: ignore[arg-type]
    assert (stats.requests, stats.queries, stats.hits) == (2, 2, 0)


def test_take_restarts_the_interval_without_the_reset_flag() -> None:
    stats = PrefixCacheStats()
    stats.record(4, 1)
    stats.reset = True
    snapshot = stats.take()
    assert snapshot.reset is True
    assert stats.reset is False
    assert (stats.requests, stats.queries, stats.hits) == (0, 0, 0)


# --- the event records' fields, the log's runs (docs/events.md) -----------------

KEY1, KEY2 = bytes(range(32)), bytes(range(1, 33))


@pytest.mark.parametrize(("make", "name"), [
    (lambda: PageStored("x"), "page_hashes"),  # type: ignore[arg-type]
    (lambda: PageRemoved([1]), "page_hashes"),  # type: ignore[arg-type]
    (lambda: PageStored((KEY1,), page_ids=(0,)), "page_ids"),
    (lambda: PageRemoved((KEY1,), page_ids=("a",)), "page_ids"),  # type: ignore[arg-type]
    (lambda: PageStored((KEY1,), group_id=-1), "group_id"),
    (lambda: PageRemoved((KEY1,), medium=5), "medium"),  # type: ignore[arg-type]
    (lambda: PageStored((KEY1,), medium="\ud800"), "medium"),
    (lambda: PageStored((KEY1,), spec_kind=5), "spec_kind"),  # type: ignore[arg-type]
    (lambda: PageStored((KEY1,), lora_name=5), "lora_name"),  # type: ignore[arg-type]
    (lambda: PageStored((KEY1,), lora_name="\ud800"), "lora_name"),
    (lambda: PageStored((KEY1,), sliding_window=0), "sliding_window"),
    (lambda: PageStored((KEY1,), token_ids=(-1, 1), page_size=2), "token_ids"),
    (lambda: PageStored((KEY1,), token_ids=(1, 1), page_size=0), "page_size"),
    (lambda: PageStored((KEY1,), lora_id=-1), "lora_id"),
    (lambda: EventLog(medium=5), "medium"),  # type: ignore[arg-type]
    (lambda: EventLog(medium="\ud800"), "medium"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_every_rejected_event_field_is_named(make: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        make()


def test_event_fields_accept_their_edges_and_become_exact_builtins() -> None:
    loose: Any = PageStored  # called with the loose types the records normalise
    event = loose([KEY1, KEY2], None, np.array([0, 1, 2, 3]), np.int64(2), np.int64(1), np.int64(0), "a",
                  [["x"], None], "CPU", [np.int64(1), 2], "sliding_window", np.int64(1))
    assert event == PageStored((KEY1, KEY2), None, (0, 1, 2, 3), 2, 1, 0, "a", (("x",), None), "CPU", (1, 2),
                               "sliding_window", 1)
    for value in (event.page_size, event.group_id, event.lora_id, event.sliding_window, *event.token_ids):
        assert type(value) is int
    assert type(event.extra_keys) is tuple and type(event.page_hashes) is tuple
    assert PageStored((KEY1,), token_ids=(5,), page_size=1).page_size == 1
    loose = PageRemoved
    removed = loose([KEY1], np.int64(3), "CPU", [np.int64(4)])
    assert removed == PageRemoved((KEY1,), 3, "CPU", (4,)) and type(removed.group_id) is int


def test_wire_hashes_of_int_values() -> None:
    assert wire_hash(0) == bytes(32)  # a value in [0, 2**256): 32 little-endian bytes
    assert wire_hash(2**256 - 1) == b"\xff" * 32
    assert wire_hash(-100) == (-100).to_bytes(1, "little", signed=True)  # the shortest signed form
    assert wire_hash(-129) == (-129).to_bytes(2, "little", signed=True)
    assert wire_hash(KEY1) is KEY1


def test_only_a_key_with_a_group_id_is_split() -> None:
    key = SimpleNamespace(page_hash=b"x", group_id=None)
    assert split_group(key) == (key, None)
    assert split_group(PageHashWithGroupId(b"x", 2)) == (b"x", 2)
    assert split_group((b"x", 3)) == (b"x", 3)


def test_removals_in_one_call_are_one_event() -> None:
    log = EventLog("CPU")
    log.begin_call()
    log.removed(2, (KEY1, 0))
    log.removed(3, (KEY2, 0))
    log.end_call()
    assert log.take() == [PageRemoved((KEY1, KEY2), 0, "CPU", (2, 3))]


class _Key:
    """A pool key with eSurge's ``token_ids`` but no ``extra_keys`` (bare `PagePool` use)."""

    def __init__(self, tokens: tuple[object, ...]) -> None:
        self.token_ids = tokens
        self.hash_value = 7


def test_a_page_stored_outside_a_call_is_described_from_its_key() -> None:
    log = EventLog("CPU")
    log.begin_call()
    log.set_store_context(lambda group, ids: StoreContext(2, None, (1, 2)))
    log.end_call()  # the call's description ends with it
    log.stored(1, PageHashWithGroupId(PageHash(7, (0, 1), None), 3))
    log.stored(2, (_Key((1, 2)), 1))
    log.stored(3, (_Key((1.5,)), 4))  # tokens that are not token ids: the record names none
    log.stored(4, (b"k" * 32, 5))
    assert log.take() == [
        PageStored((wire_hash(7),), None, (0, 1), 2, 3, extra_keys=(None,), medium="CPU", page_ids=(1,)),
        PageStored((wire_hash(7),), None, (1, 2), 2, 1, extra_keys=(None,), medium="CPU", page_ids=(2,)),
        PageStored((wire_hash(7),), group_id=4, medium="CPU", page_ids=(3,)),
        PageStored((b"k" * 32,), group_id=5, medium="CPU", page_ids=(4,)),
    ]


def test_describe_run_reads_the_runs_pages_and_the_groups_window() -> None:
    request = SimpleNamespace(all_token_ids=list(range(12)))
    spec = SlidingWindowSpec(page_size=4, sliding_window=8, num_kv_heads=1, head_size=8, dtype=np.float16,
                             use_mla=False)
    context = describe_run(request, spec, 4, 1, 2, None, lambda r, i, ps: (("page", i),))
    assert context == StoreContext(4, None, list(range(4, 12)), [(("page", 1),), (("page", 2),)], None, None,
                                   "sliding_window", 8)
    plain = describe_run(request, spec, 4, 0, 1, b"p")
    assert (plain.extra_keys, plain.lora_id, plain.lora_name, plain.parent_key) == (None, None, None, b"p")
