"""Checks written for mutants of impl/events.py that the suite let through (tools/mutation/triage.toml).

They pin what `PrefixCacheStats`' docstrings promise: counters reject bad fields with an error
naming the field, accept NumPy integers, and ``take`` restarts the interval. (The kill tests for
the event records were written against the per-page events that issue 17 replaced; the new
records are covered by tests/test_events.py and tests/test_kv_events*.py, and the module's
mutation score must be measured again: tools/mutation/RESULTS.md.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from verikv import SlidingWindowSpec
from verikv.errors import InvalidArgumentError
from verikv.events import (
    EventLog,
    PageRemoved,
    PageStored,
    PrefixCacheStats,
    StoreContext,
    describe_run,
    split_group,
    wire_hash,
)
from verikv.hashing import PageHash, PageHashWithGroupId


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


# --- third session: the event records' fields, the log's runs (docs/events.md) -----------------

H1, H2 = bytes(range(32)), bytes(range(1, 33))


@pytest.mark.parametrize(("make", "name"), [
    (lambda: PageStored("x"), "page_hashes"),  # type: ignore[arg-type]
    (lambda: PageRemoved([1]), "page_hashes"),  # type: ignore[arg-type]
    (lambda: PageStored((H1,), page_ids=(0,)), "page_ids"),
    (lambda: PageRemoved((H1,), page_ids=("a",)), "page_ids"),  # type: ignore[arg-type]
    (lambda: PageStored((H1,), group_id=-1), "group_id"),
    (lambda: PageRemoved((H1,), medium=5), "medium"),  # type: ignore[arg-type]
    (lambda: PageStored((H1,), medium="\ud800"), "medium"),
    (lambda: PageStored((H1,), spec_kind=5), "spec_kind"),  # type: ignore[arg-type]
    (lambda: PageStored((H1,), lora_name=5), "lora_name"),  # type: ignore[arg-type]
    (lambda: PageStored((H1,), lora_name="\ud800"), "lora_name"),
    (lambda: PageStored((H1,), sliding_window=0), "sliding_window"),
    (lambda: PageStored((H1,), token_ids=(-1, 1), page_size=2), "token_ids"),
    (lambda: PageStored((H1,), token_ids=(1, 1), page_size=0), "page_size"),
    (lambda: PageStored((H1,), lora_id=-1), "lora_id"),
    (lambda: EventLog(medium=5), "medium"),  # type: ignore[arg-type]
    (lambda: EventLog(medium="\ud800"), "medium"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_every_rejected_event_field_is_named(make: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        make()


def test_event_fields_accept_their_edges_and_become_exact_builtins() -> None:
    loose: Any = PageStored  # called with the loose types the records normalise
    event = loose([H1, H2], None, np.array([0, 1, 2, 3]), np.int64(2), np.int64(1), np.int64(0), "a",
                  [["x"], None], "CPU", [np.int64(1), 2], "sliding_window", np.int64(1))
    assert event == PageStored((H1, H2), None, (0, 1, 2, 3), 2, 1, 0, "a", (("x",), None), "CPU", (1, 2),
                               "sliding_window", 1)
    for value in (event.page_size, event.group_id, event.lora_id, event.sliding_window, *event.token_ids):
        assert type(value) is int
    assert type(event.extra_keys) is tuple and type(event.page_hashes) is tuple
    assert PageStored((H1,), token_ids=(5,), page_size=1).page_size == 1
    loose = PageRemoved
    removed = loose([H1], np.int64(3), "CPU", [np.int64(4)])
    assert removed == PageRemoved((H1,), 3, "CPU", (4,)) and type(removed.group_id) is int


def test_wire_hashes_of_int_values() -> None:
    assert wire_hash(0) == bytes(32)  # a value in [0, 2**256): 32 little-endian bytes
    assert wire_hash(2**256 - 1) == b"\xff" * 32
    assert wire_hash(-100) == (-100).to_bytes(1, "little", signed=True)  # the shortest signed form
    assert wire_hash(-129) == (-129).to_bytes(2, "little", signed=True)
    assert wire_hash(H1) is H1


def test_only_a_key_with_a_group_id_is_split() -> None:
    key = SimpleNamespace(page_hash=b"x", group_id=None)
    assert split_group(key) == (key, None)
    assert split_group(PageHashWithGroupId(b"x", 2)) == (b"x", 2)
    assert split_group((b"x", 3)) == (b"x", 3)


def test_removals_in_one_call_are_one_event() -> None:
    log = EventLog("CPU")
    log.begin_call()
    log.removed(2, (H1, 0))
    log.removed(3, (H2, 0))
    log.end_call()
    assert log.take() == [PageRemoved((H1, H2), 0, "CPU", (2, 3))]


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
