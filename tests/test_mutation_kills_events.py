"""Checks written for mutants of impl/events.py that the suite let through (mutation/triage.toml).

They pin what the module's docstrings promise: counters and events reject bad fields with an
error naming the field, normalise NumPy integers to Python ints, keep a key's group and tokens,
describe any key without failing (duck typing by shape), and ``take`` restarts the interval.
Keys are small duck-typed stand-ins defined here, so the expected event fields are known.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from verikv.errors import InvalidArgumentError
from verikv.events import EventLog, PageRemoved, PageStored, PrefixCacheStats, describe_key


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased field name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


@dataclass(frozen=True, eq=False)  # hashed by identity, whatever its fields hold
class _Hash:
    """A content key shaped like `PageHash`: a hash value and the page's token ids."""

    hash_value: object
    token_ids: object


@dataclass(frozen=True)
class _GroupHash:
    """A key shaped like `PageHashWithGroupId`: a page hash and a group id."""

    page_hash: object
    group_id: object

    def get_hash_value(self) -> object:
        return getattr(self.page_hash, "hash_value", None)


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("stats requests", lambda: PrefixCacheStats(requests=-1), "requests"),
    ("stats queries", lambda: PrefixCacheStats(queries=-1), "queries"),
    ("stats hits negative", lambda: PrefixCacheStats(queries=2, hits=-1), "hits"),
    ("stats hits above queries", lambda: PrefixCacheStats(queries=2, hits=3), "hits"),
    ("stats reset", lambda: PrefixCacheStats(reset=1), "reset"),  # type: ignore[arg-type]
    ("record queries", lambda: PrefixCacheStats().record(-1, 0), "queries"),
    ("record hits", lambda: PrefixCacheStats().record(2, -1), "hits"),
    ("event page_id", lambda: PageRemoved(0, 7, None), "page_id"),
    ("event page_hash", lambda: PageRemoved(1, "x", None), "page_hash"),  # type: ignore[arg-type]
    ("event group_id", lambda: PageRemoved(1, 7, -1), "group_id"),
    ("stored token_ids", lambda: PageStored(1, 7, None, 5), "token_ids"),  # type: ignore[arg-type]
    ("stored token id", lambda: PageStored(1, 7, None, (1, -1)), "token id"),
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_the_field_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


@pytest.mark.parametrize(("call", "type_name"), [
    (lambda: PrefixCacheStats(reset=1), "int"),  # type: ignore[arg-type]
    (lambda: PageRemoved(1, "x", None), "str"),  # type: ignore[arg-type]
    (lambda: PageStored(1, 7, None, 5), "int"),  # type: ignore[arg-type]
], ids=["reset", "page_hash", "token_ids"])
def test_a_wrongly_typed_field_is_reported_with_its_type(call: Callable[[], object], type_name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(type_name)):
        call()


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


def test_event_fields_are_normalised_to_python_ints() -> None:
    removed = PageRemoved(np.int64(3), np.int64(7), np.int64(1))  # type: ignore[arg-type]
    assert (removed.page_id, removed.page_hash, removed.group_id) == (3, 7, 1)
    assert all(type(v) is int for v in (removed.page_id, removed.page_hash, removed.group_id))
    stored = PageStored(2, 9, None, np.array([4, 5]))  # type: ignore[arg-type]
    assert stored.token_ids == (4, 5)
    assert all(type(t) is int for t in stored.token_ids)


def test_describe_key_reads_a_page_hash_and_its_group() -> None:
    assert describe_key(_Hash(11, (0, 1))) == (11, None, (0, 1))
    assert describe_key(_GroupHash(_Hash(11, (1, 2)), 0)) == (11, 0, (1, 2))
    assert describe_key(_GroupHash(_Hash(11, (1, 2)), 3)) == (11, 3, (1, 2))


def test_describe_key_reports_any_other_key_by_its_hash() -> None:
    assert describe_key(2**64) == (2**64, None, ())  # a plain int is its own value, even beyond hash's range
    odd_tokens = _Hash(11, [1, 2])  # tokens not a tuple
    assert describe_key(odd_tokens) == (hash(odd_tokens), None, ())
    negative = _Hash(11, (1, -1))  # a negative token
    assert describe_key(negative) == (hash(negative), None, ())


def test_describe_key_never_fails_on_a_partial_shape() -> None:
    class NoGroup:
        page_hash = 5

        def get_hash_value(self) -> int:
            return 5

    class NoPageHash:
        group_id = 1

        def get_hash_value(self) -> int:
            return 5

    for key in (NoGroup(), NoPageHash()):
        assert describe_key(key) == (hash(key), None, ())


def test_the_log_records_each_keys_value_group_and_tokens() -> None:
    log = EventLog()
    key = _GroupHash(_Hash(2**40, (3, 4)), 2)
    log.stored(5, key)
    log.removed(5, key)
    assert log.take() == [PageStored(5, 2**40, 2, (3, 4)), PageRemoved(5, 2**40, 2)]
