"""Checks written for mutants of impl/page_table.py that the suite let through (tools/mutation/triage.toml).

Each test states a documented behaviour of the page tables: errors name the argument they reject
and report the offending value, ``cpu_version`` counts mutating calls one by one, boundaries are
inclusive where the docstrings say "at most", and a multi-group table with one group behaves.
Expected values come from the arguments and the docstrings, never from running the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import verikv.page_table as page_table_module
from verikv.errors import ForeignPageError, InvalidArgumentError
from verikv.page_table import MultiGroupPageTable, PageTable

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _named(name: str) -> str:
    """A pattern for ``name`` as a whole word: a renamed or re-cased argument name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _table(rows: int = 2, pages: int = 2, tokens: int = 8) -> PageTable:
    return PageTable(rows, pages, tokens)


# --- every rejected argument is named in the error ---------------------------------------------

NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("max_num_reqs", lambda: PageTable(0, 2, 8), "max_num_reqs"),
    ("max_num_pages_per_req", lambda: PageTable(2, 0, 8), "max_num_pages_per_req"),
    ("max_num_batched_tokens", lambda: PageTable(2, 2, 0), "max_num_batched_tokens"),
    ("row", lambda: _table().append_row([1], 2), "row"),
    ("src of move_row", lambda: _table().move_row(2, 0), "src"),
    ("tgt of move_row", lambda: _table().move_row(0, 2), "tgt"),
    ("src of swap_row", lambda: _table().swap_row(2, 0), "src"),
    ("tgt of swap_row", lambda: _table().swap_row(0, 2), "tgt"),
    ("page_ids not 1-D", lambda: _table().append_row([[1, 2]], 0), "page_ids"),  # type: ignore[list-item]
    ("page_ids ragged", lambda: _table().append_row([[1], [1, 2]], 0), "page_ids"),  # type: ignore[list-item]
    ("page_ids beyond int64", lambda: _table().append_row(np.array([2**63], dtype=np.uint64), 0), "page_ids"),
    ("page_size", lambda: _table().compute_slot_mapping(0, [0], [0], [1]), "page_size"),
    ("row_indices", lambda: _table().compute_slot_mapping(2, [0.5], [0], [1]), "row_indices"),  # type: ignore[list-item]
    ("num_computed_tokens", lambda: _table().compute_slot_mapping(2, [0], [0.5], [1]), "num_computed_tokens"),  # type: ignore[list-item]
    ("num_scheduled_tokens", lambda: _table().compute_slot_mapping(2, [0], [0], [0.5]), "num_scheduled_tokens"),  # type: ignore[list-item]
    ("lengths differ", lambda: _table().compute_slot_mapping(2, [0, 1], [0], [1]), "differ in length"),
    ("repeated rows", lambda: _table().compute_slot_mapping(2, [0, 0], [0, 0], [1, 1]), "repeated"),
    ("negative computed", lambda: _table().compute_slot_mapping(2, [0], [-1], [1]), "num_computed_tokens"),
    ("zero scheduled", lambda: _table().compute_slot_mapping(2, [0], [0], [0]), "num_scheduled_tokens"),
    ("batch too large", lambda: _table().compute_slot_mapping(2, [0, 1], [0, 0], [5, 4]), "max_num_batched_tokens"),
    ("page_size beyond int32", lambda: _table().compute_slot_mapping(2**31, [0], [0], [1]), "int32"),
    ("computed beyond capacity", lambda: _table().compute_slot_mapping(2, [0], [5], [1]), "num_computed_tokens"),
    ("max_model_len", lambda: MultiGroupPageTable(2, 0, 8, [2]), "max_model_len"),
    ("page_sizes", lambda: MultiGroupPageTable(2, 8, 8, 5), "page_sizes"),  # type: ignore[arg-type]
    ("page size", lambda: MultiGroupPageTable(2, 8, 8, [2, 0]), "page size"),
    ("group", lambda: MultiGroupPageTable(2, 8, 8, [2])[1], "group"),
    ("page_ids per group", lambda: MultiGroupPageTable(2, 8, 8, [2]).append_row(7, 0), "page_ids"),  # type: ignore[arg-type]
    ("page_ids group count", lambda: MultiGroupPageTable(2, 8, 8, [2]).append_row([[1], [2]], 0), "page_ids"),
    ("page_ids_per_req", lambda: MultiGroupPageTable(2, 8, 8, [2]).append_rows_batch(7, [0]), "page_ids_per_req"),  # type: ignore[arg-type]
    ("req_indices", lambda: MultiGroupPageTable(2, 8, 8, [2]).append_rows_batch([], 7), "req_indices"),  # type: ignore[arg-type]
    ("batch lengths", lambda: MultiGroupPageTable(2, 8, 8, [2]).append_rows_batch([[[1]]], [0, 1]), "request rows"),
    ("multi move src", lambda: MultiGroupPageTable(2, 8, 8, [2, 4]).move_row(2, 0), "src"),
    ("multi move tgt", lambda: MultiGroupPageTable(2, 8, 8, [2, 4]).move_row(0, 2), "tgt"),
    ("multi swap src", lambda: MultiGroupPageTable(2, 8, 8, [2, 4]).swap_row(2, 0), "src"),
    ("multi swap tgt", lambda: MultiGroupPageTable(2, 8, 8, [2, 4]).swap_row(0, 2), "tgt"),
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_what_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


# --- the error reports the offending value ----------------------------------------------------

def test_a_non_integer_page_id_list_is_shown_in_the_error() -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape("[1.5]")):
        _table().append_row([1.5], 0)  # type: ignore[list-item]


def test_page_ids_out_of_range_report_the_first_bad_id() -> None:
    with pytest.raises(ForeignPageError, match=_named("-3")):
        _table().append_row([5, -3], 0)
    with pytest.raises(ForeignPageError, match=_named(str(2**31))):
        _table().append_row([1, 2**31], 0)
    with pytest.raises(ForeignPageError, match=_named(str(2**31))):
        _table().append_row([0, 2**31], 0)


def test_row_range_error_states_the_valid_rows() -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape("0..1")):
        _table(rows=2).compute_slot_mapping(2, [2], [0], [1])


def test_a_write_beyond_the_rows_pages_reports_its_last_position() -> None:
    table = _table(pages=2)
    table.append_row([3, 4], 0)
    # page size 2, 2 pages: positions 0..3 exist; computing 4 and writing 1 token reaches position 4
    with pytest.raises(InvalidArgumentError, match=_named("position 4")):
        table.compute_slot_mapping(2, [0], [4], [1])


def test_too_small_a_table_and_the_wrong_page_ids_type_are_described() -> None:
    with pytest.raises(InvalidArgumentError, match=r"\{7, 9\}"):
        MultiGroupPageTable(2, 8, 8, {7, 9})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=_named("7")):
        MultiGroupPageTable(2, 8, 8, [2]).append_row(7, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=_named("7")):
        MultiGroupPageTable(2, 8, 8, [2]).append_rows_batch(7, [0])  # type: ignore[arg-type]


def test_a_page_table_over_the_cell_limit_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_table_module, "_MAX_CELLS", 6)
    PageTable(2, 3, 1)  # exactly the limit: allowed
    with pytest.raises(InvalidArgumentError, match="exceeds"):
        PageTable(2, 4, 1)


# --- inclusive bounds ---------------------------------------------------------------------------

def test_the_smallest_sizes_are_accepted() -> None:
    table = PageTable(1, 1, 1)
    assert (table.max_num_reqs, table.max_num_pages_per_req, table.max_num_batched_tokens) == (1, 1, 1)
    multi = MultiGroupPageTable(1, 1, 1, [1])
    assert multi.max_model_len == 1
    assert multi.page_sizes == (1,)


def test_a_batch_of_exactly_max_num_batched_tokens_is_accepted() -> None:
    table = PageTable(2, 4, 4)
    table.append_row([1, 2], 0)
    table.append_row([3, 4], 1)
    # one request of all 4 tokens: page size 2 -> pages 1, 2
    assert table.compute_slot_mapping(2, [0], [0], [4]).tolist() == [2, 3, 4, 5]
    # two requests summing to 4 tokens
    assert table.compute_slot_mapping(2, [0, 1], [0, 0], [2, 2]).tolist() == [2, 3, 6, 7]


def test_the_largest_int32_page_size_is_accepted() -> None:
    table = PageTable(1, 1, 1)
    table.append_row([1], 0)
    # page 1, position 0: slot = 1 * page_size + 0, the largest int32
    assert table.compute_slot_mapping(INT32_MAX, [0], [0], [1]).tolist() == [INT32_MAX]


def test_unsigned_page_ids_are_accepted_up_to_their_range() -> None:
    table = _table()
    table.append_row(np.array([1, 2], dtype=np.uint8), 0)
    assert table.get_row(0).tolist() == [1, 2]
    # INT64_MAX fits int64: it is rejected as a page id (outside int32), not as a non-integer
    with pytest.raises(ForeignPageError):
        table.append_row(np.array([INT64_MAX], dtype=np.uint64), 1)


# --- cpu_version counts mutating calls one by one ----------------------------------------------

def test_cpu_version_counts_each_mutating_call_once() -> None:
    table = _table(rows=2, pages=4)
    steps = [
        lambda: table.append_row([1], 0),
        lambda: table.append_row([2], 0),
        lambda: table.add_row([3], 1),
        lambda: table.move_row(0, 1),
        lambda: table.swap_row(0, 1),
        lambda: table.clear_row(0),
        table.clear,
    ]
    for done, step in enumerate(steps, start=1):
        step()
        assert table.cpu_version == done


# --- slot mapping: a token on the null page -----------------------------------------------------

def test_a_single_token_on_the_null_page_is_rejected() -> None:
    table = _table(pages=2)
    table.append_row([0, 5], 0)  # the null page as a placeholder, then page 5
    with pytest.raises(InvalidArgumentError, match="null page"):
        table.compute_slot_mapping(2, [0], [1], [1])  # position 1: on page 0


# --- multi-group tables -----------------------------------------------------------------------

def test_negative_group_index_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("group")):
        MultiGroupPageTable(2, 8, 8, [2, 4])[-1]


def test_a_single_group_table_supports_every_row_operation() -> None:
    multi = MultiGroupPageTable(2, 8, 8, [4])  # 2 pages per row
    multi.append_row([[1]], 0)
    multi.add_row([[2, 3]], 1)
    multi.append_rows_batch([[[4]]], [0])
    assert multi[0].get_row(0).tolist() == [1, 4]
    multi.move_row(0, 1)
    assert multi[0].get_row(1).tolist() == [1, 4]
    multi.append_row([[]], 0)
    multi.swap_row(0, 1)
    multi.clear_row(0)
    assert multi[0].get_row(0).tolist() == []
    assert multi[0].get_row(1).tolist() == [1, 4]


def test_add_row_replaces_a_full_row() -> None:
    multi = MultiGroupPageTable(1, 4, 8, [2])  # 2 pages per row
    multi.append_row([[1, 2]], 0)
    multi.add_row([[3, 4]], 0)
    assert multi[0].get_row(0).tolist() == [3, 4]


def test_a_batch_fills_a_row_exactly_and_no_further() -> None:
    multi = MultiGroupPageTable(1, 4, 8, [2])  # 2 pages per row
    multi.append_rows_batch([[[1, 2]]], [0])
    assert multi[0].get_row(0).tolist() == [1, 2]

    multi = MultiGroupPageTable(1, 4, 8, [2])
    multi.append_rows_batch([[[1]], [[2]]], [0, 0])
    assert multi[0].get_row(0).tolist() == [1, 2]


@pytest.mark.parametrize("entries", [[[[1]], [[2, 3]]], [[[1]], [[2]], [[3]]]], ids=["two", "three"])
def test_a_batch_that_overfills_a_row_across_entries_changes_nothing(entries: list[list[list[int]]]) -> None:
    multi = MultiGroupPageTable(1, 4, 8, [2])  # 2 pages per row
    version = multi[0].cpu_version
    with pytest.raises(InvalidArgumentError):
        multi.append_rows_batch(entries, [0] * len(entries))
    assert multi[0].get_row(0).tolist() == []
    assert multi[0].cpu_version == version
