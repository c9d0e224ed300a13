"""Checks written for mutants of impl/events.py that the suite let through (mutation/triage.toml).

They pin what `PrefixCacheStats`' docstrings promise: counters reject bad fields with an error
naming the field, accept NumPy integers, and ``take`` restarts the interval. (The kill tests for
the event records were written against the per-page events that issue 17 replaced; the new
records are covered by tests/test_events.py and tests/test_kv_events*.py, and the module's
mutation score must be measured again: mutation/RESULTS.md.)
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from verikv.errors import InvalidArgumentError
from verikv.events import PrefixCacheStats


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
