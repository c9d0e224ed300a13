"""Page tables: row operations, null padding, overflow leaves everything unchanged, slot mapping."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import verikv.page_table as page_table_module
from verikv.errors import ForeignPageError, InvalidArgumentError
from verikv.page_table import PAGE_TABLE_PADDING_VAL, MultiGroupPageTable, PageTable

T = TypeVar("T")


def snapshot(table: PageTable) -> tuple[bytes, bytes, int]:
    return table.get_numpy_array().tobytes(), table.num_pages_per_row.tobytes(), table.cpu_version


def multi_snapshot(tables: MultiGroupPageTable) -> list[tuple[bytes, bytes, int]]:
    return [snapshot(tables[g]) for g in range(len(tables))]


def assert_rejected(subject: T, snap: Callable[[T], object], call: Callable[[T], object],
                    error: type[Exception], match: str | None = None) -> None:
    """``call(subject)`` raises ``error`` (matching ``match``) and leaves ``snap(subject)`` unchanged."""
    before = snap(subject)
    with pytest.raises(error, match=match):
        call(subject)
    assert snap(subject) == before


def test_new_table_is_null_padded_int32() -> None:
    table = PageTable(4, 8, 64)
    array = table.get_cpu_tensor()
    assert array.dtype == np.int32 and array.shape == (4, 8)
    assert (array == PAGE_TABLE_PADDING_VAL).all() and PAGE_TABLE_PADDING_VAL == 0
    assert table.num_pages_per_row.tolist() == [0, 0, 0, 0]
    assert table.cpu_version == 0


def test_append_add_clear_rows() -> None:
    table = PageTable(3, 5, 64)
    table.append_row([4, 7], 1)
    table.append_row(np.array([9], dtype=np.int64), 1)
    assert table.get_row(1).tolist() == [4, 7, 9]
    assert table.get_numpy_array()[1].tolist() == [4, 7, 9, 0, 0]
    version = table.cpu_version
    table.append_row([], 1)
    assert table.cpu_version == version  # an empty append changes nothing
    table.add_row((2, 3), 1)
    assert table.get_numpy_array()[1].tolist() == [2, 3, 0, 0, 0]
    table.clear_row(1)
    assert table.num_pages_per_row.tolist() == [0, 0, 0]
    assert (table.get_numpy_array() == 0).all()
    assert table.cpu_version == version + 2


def test_move_and_swap_rows() -> None:
    table = PageTable(3, 4, 64)
    table.append_row([1, 2, 3], 0)
    table.append_row([8], 2)
    table.move_row(0, 2)
    assert table.get_numpy_array()[2].tolist() == [1, 2, 3, 0]
    assert table.get_row(0).tolist() == [1, 2, 3]  # the source is kept
    table.clear_row(0)
    table.append_row([5], 0)
    table.swap_row(0, 2)
    assert table.get_row(0).tolist() == [1, 2, 3] and table.get_row(2).tolist() == [5]
    assert table.get_numpy_array()[2].tolist() == [5, 0, 0, 0]
    table.clear()
    assert (table.get_numpy_array() == 0).all() and table.num_pages_per_row.sum() == 0


def test_every_mutation_bumps_the_version() -> None:
    table = PageTable(2, 4, 8)
    versions = [table.cpu_version]
    for op in (
        lambda: table.append_row([1], 0),
        lambda: table.add_row([2], 1),
        lambda: table.move_row(0, 1),
        lambda: table.swap_row(0, 1),
        lambda: table.clear_row(0),
        table.clear,
    ):
        op()
        versions.append(table.cpu_version)
    assert versions == sorted(set(versions))


def test_views_are_read_only() -> None:
    table = PageTable(2, 4, 8)
    with pytest.raises(ValueError):
        table.get_numpy_array()[0, 0] = 5
    with pytest.raises(ValueError):
        table.num_pages_per_row[0] = 3


def test_overflow_raises_and_changes_nothing() -> None:
    """eSurge bumped the row count before writing, leaving it wrong after the overflow (Q24)."""
    table = PageTable(2, 4, 8)
    table.append_row([1, 2, 3], 0)
    assert_rejected(table, snapshot, lambda t: t.append_row([4, 5], 0), InvalidArgumentError,
                    match="exceed max_num_pages_per_req=4")
    assert_rejected(table, snapshot, lambda t: t.add_row([1, 2, 3, 4, 5], 0), InvalidArgumentError)
    table.add_row([6, 7, 8, 9], 0)
    assert table.get_row(0).tolist() == [6, 7, 8, 9]


# --- multi-group -------------------------------------------------------------------------------


def test_multi_group_widths_follow_page_sizes() -> None:
    tables = MultiGroupPageTable(max_num_reqs=4, max_model_len=100, max_num_batched_tokens=32, page_sizes=[16, 32])
    assert len(tables) == 2
    assert [tables[g].max_num_pages_per_req for g in range(2)] == [7, 4]
    tables.append_row(([1, 2], [3]), 2)
    tables.add_row(([4], [5, 6]), 1)
    tables.move_row(2, 0)
    tables.swap_row(0, 1)
    assert tables[0].get_row(0).tolist() == [4] and tables[1].get_row(0).tolist() == [5, 6]
    assert tables[0].get_row(1).tolist() == [1, 2] and tables[1].get_row(1).tolist() == [3]
    tables.clear_row(1)
    assert tables[0].num_pages_per_row.tolist() == [1, 0, 2, 0]
    tables.clear()
    assert all(tables[g].num_pages_per_row.sum() == 0 for g in range(2))


def test_append_rows_batch_counts_repeated_rows_and_is_atomic() -> None:
    tables = MultiGroupPageTable(4, 64, 32, [16, 16])
    tables.append_rows_batch([([1], [2]), ([3], [4]), ([5], [6])], [0, 1, 0])
    assert tables[0].get_row(0).tolist() == [1, 5] and tables[1].get_row(1).tolist() == [4]
    # row 0 would reach 5 pages in group 1 only through the repeated entry: rejected as a whole
    assert_rejected(tables, multi_snapshot, lambda m: m.append_rows_batch([([7], [7]), ([], [8, 9, 10])], [0, 0]),
                    InvalidArgumentError)


def test_multi_group_overflow_in_one_group_changes_no_group() -> None:
    tables = MultiGroupPageTable(2, 32, 16, [16, 8])
    assert_rejected(tables, multi_snapshot, lambda m: m.append_row(([1, 2], [3, 4, 5, 6, 7]), 0), InvalidArgumentError)


# --- slot mapping ----------------------------------------------------------------------------------


def reference_slots(rows: list[list[int]], page_size: int, batch: list[tuple[int, int, int]]) -> list[int]:
    slots = []
    for row, computed, scheduled in batch:
        for position in range(computed, computed + scheduled):
            slots.append(rows[row][position // page_size] * page_size + position % page_size)
    return slots


def test_slot_mapping_small_example() -> None:
    table = PageTable(3, 4, 16)
    table.append_row([5, 9], 0)
    table.append_row([2, 7, 3], 2)
    before = snapshot(table)
    slots = table.compute_slot_mapping(4, [2, 0], [6, 3], [3, 2])
    assert snapshot(table) == before  # computing slots reads the table only
    assert slots.dtype == np.int32
    assert slots.tolist() == [7 * 4 + 2, 7 * 4 + 3, 3 * 4 + 0, 5 * 4 + 3, 9 * 4 + 0]
    assert table.compute_slot_mapping(4, [], [], []).tolist() == []


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, list[list[int]], list[tuple[int, int, int]]]:
    page_size = draw(st.integers(1, 8))
    max_pages = draw(st.integers(1, 6))
    num_rows = draw(st.integers(1, 5))
    rows = [
        draw(st.lists(st.integers(1, 10_000), min_size=0, max_size=max_pages)) for _ in range(num_rows)
    ]
    candidates = [r for r in range(num_rows) if rows[r]]
    chosen = draw(st.permutations(candidates)) if candidates else []
    chosen = chosen[: draw(st.integers(0, len(chosen)))]
    batch = []
    for r in chosen:
        capacity = len(rows[r]) * page_size
        computed = draw(st.integers(0, capacity - 1))
        scheduled = draw(st.integers(1, capacity - computed))
        batch.append((r, computed, scheduled))
    return page_size, max_pages, rows, batch


@settings(max_examples=300)
@given(batches())
def test_slot_mapping_matches_plain_python(case: tuple[int, int, list[list[int]], list[tuple[int, int, int]]]) -> None:
    page_size, max_pages, rows, batch = case
    table = PageTable(len(rows), max_pages, 10_000)
    for index, ids in enumerate(rows):
        table.append_row(ids, index)
    got = table.compute_slot_mapping(
        page_size, [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]
    )
    assert got.dtype == np.int32
    assert got.tolist() == reference_slots(rows, page_size, batch)


def test_multi_group_slot_mappings_use_each_page_size() -> None:
    tables = MultiGroupPageTable(2, 64, 32, [4, 8])
    tables.append_row(([3, 4], [6]), 1)
    small, large = tables.compute_slot_mappings([1], [2], [4])
    assert small.tolist() == [14, 15, 16, 17]
    assert large.tolist() == [50, 51, 52, 53]


def test_slot_mapping_rejects_tokens_beyond_the_rows_pages() -> None:
    """eSurge clipped out-of-range gathers, writing into a wrong page (Q25)."""
    table = PageTable(2, 4, 64)
    table.append_row([3, 4], 0)
    with pytest.raises(InvalidArgumentError, match="needs 3 pages; the row holds 2"):
        table.compute_slot_mapping(4, [0], [6], [3])


def test_slot_mapping_rejects_the_null_page_and_int32_overflow() -> None:
    table = PageTable(2, 4, 64)
    table.append_row([0, 4], 0)
    with pytest.raises(InvalidArgumentError, match="null page"):
        table.compute_slot_mapping(4, [0], [2], [4])
    table.add_row([2**31 - 1], 1)
    with pytest.raises(InvalidArgumentError, match="does not fit int32"):
        table.compute_slot_mapping(2, [1], [0], [1])
    assert table.compute_slot_mapping(1, [1], [0], [1]).tolist() == [2**31 - 1]


# --- bad input ---------------------------------------------------------------------------------------


def loaded_table() -> PageTable:
    table = PageTable(3, 4, 8)
    table.append_row([1, 2], 0)
    table.append_row([3, 4, 5], 1)
    return table


BAD_TABLE_CALLS = [
    ("append_row_out_of_range", lambda t: t.append_row([1], 3), InvalidArgumentError),
    ("append_negative_row", lambda t: t.append_row([1], -1), InvalidArgumentError),
    ("append_bool_row", lambda t: t.append_row([1], True), InvalidArgumentError),
    ("append_float_row", lambda t: t.append_row([1], 1.0), InvalidArgumentError),
    ("append_negative_page_id", lambda t: t.append_row([-1], 2), ForeignPageError),
    ("append_page_id_beyond_int32", lambda t: t.append_row([2**31], 2), ForeignPageError),
    ("append_float_page_ids", lambda t: t.append_row([1.0, 2.0], 2), InvalidArgumentError),
    ("append_bool_page_ids", lambda t: t.append_row([True], 2), InvalidArgumentError),
    ("append_nested_page_ids", lambda t: t.append_row([[1, 2]], 2), InvalidArgumentError),
    ("append_string_page_ids", lambda t: t.append_row("12", 2), InvalidArgumentError),
    ("append_overflow", lambda t: t.append_row([6, 7, 8], 0), InvalidArgumentError),
    ("add_row_overflow", lambda t: t.add_row([1, 2, 3, 4, 5], 1), InvalidArgumentError),
    ("clear_row_out_of_range", lambda t: t.clear_row(7), InvalidArgumentError),
    ("move_row_bad_src", lambda t: t.move_row(-1, 0), InvalidArgumentError),
    ("move_row_bad_tgt", lambda t: t.move_row(0, 3), InvalidArgumentError),
    ("swap_row_bad_tgt", lambda t: t.swap_row(0, 5), InvalidArgumentError),
    ("get_row_out_of_range", lambda t: t.get_row(3), InvalidArgumentError),
    ("slots_zero_page_size", lambda t: t.compute_slot_mapping(0, [0], [0], [1]), InvalidArgumentError),
    ("slots_length_mismatch", lambda t: t.compute_slot_mapping(4, [0, 1], [0], [1, 1]), InvalidArgumentError),
    ("slots_row_out_of_range", lambda t: t.compute_slot_mapping(4, [3], [0], [1]), InvalidArgumentError),
    ("slots_repeated_row", lambda t: t.compute_slot_mapping(4, [0, 0], [0, 1], [1, 1]), InvalidArgumentError),
    ("slots_negative_computed", lambda t: t.compute_slot_mapping(4, [0], [-1], [1]), InvalidArgumentError),
    ("slots_zero_scheduled", lambda t: t.compute_slot_mapping(4, [0], [0], [0]), InvalidArgumentError),
    ("slots_float_counts", lambda t: t.compute_slot_mapping(4, [0], [0.0], [1.0]), InvalidArgumentError),
    ("slots_over_batch_limit", lambda t: t.compute_slot_mapping(4, [0, 1], [0, 0], [5, 4]), InvalidArgumentError),
    ("slots_huge_scheduled", lambda t: t.compute_slot_mapping(4, [0, 1], [0, 0], [2**62, 2**62]),
     InvalidArgumentError),
    ("slots_huge_computed", lambda t: t.compute_slot_mapping(4, [0], [2**62], [1]), InvalidArgumentError),
    ("slots_uint64_beyond_int64", lambda t: t.compute_slot_mapping(4, [0], np.array([2**63], np.uint64), [1]),
     InvalidArgumentError),
    ("slots_beyond_row_pages", lambda t: t.compute_slot_mapping(4, [0], [7], [2]), InvalidArgumentError),
]


@pytest.mark.parametrize("call, error", [c[1:] for c in BAD_TABLE_CALLS], ids=[c[0] for c in BAD_TABLE_CALLS])
def test_bad_input_page_table(call, error: type[Exception]) -> None:
    assert_rejected(loaded_table(), snapshot, call, error)


def loaded_multi() -> MultiGroupPageTable:
    tables = MultiGroupPageTable(2, 32, 16, [8, 16])
    tables.append_row(([1, 2], [3]), 0)
    return tables


BAD_MULTI_CALLS = [
    ("multi_wrong_group_count", lambda m: m.append_row(([1],), 1), InvalidArgumentError),
    ("multi_not_per_group", lambda m: m.append_row(5, 1), InvalidArgumentError),
    ("multi_bad_id_in_second_group", lambda m: m.append_row(([4], [-2]), 1), ForeignPageError),
    ("multi_add_row_overflow", lambda m: m.add_row(([1], [1, 2, 3]), 0), InvalidArgumentError),
    ("multi_row_out_of_range", lambda m: m.clear_row(2), InvalidArgumentError),
    ("multi_move_bad_row", lambda m: m.move_row(0, 2), InvalidArgumentError),
    ("multi_swap_bad_row", lambda m: m.swap_row(-1, 0), InvalidArgumentError),
    ("multi_batch_length_mismatch", lambda m: m.append_rows_batch([([1], [2])], [0, 1]), InvalidArgumentError),
    ("multi_batch_bad_row", lambda m: m.append_rows_batch([([1], [2]), ([3], [4])], [1, 2]), InvalidArgumentError),
    ("multi_batch_not_sequence", lambda m: m.append_rows_batch(None, [0]), InvalidArgumentError),
    ("multi_group_index", lambda m: m[2], InvalidArgumentError),
    ("multi_slots_beyond_pages", lambda m: m.compute_slot_mappings([0], [0], [17]), InvalidArgumentError),
]


@pytest.mark.parametrize("call, error", [c[1:] for c in BAD_MULTI_CALLS], ids=[c[0] for c in BAD_MULTI_CALLS])
def test_bad_input_multi_group_page_table(call, error: type[Exception]) -> None:
    assert_rejected(loaded_multi(), multi_snapshot, call, error)


# (ill-typed arguments are the point here: their lines carry `type: ignore[arg-type]`)
BAD_CONSTRUCTORS = [
    ("table_zero_rows", lambda: PageTable(0, 4, 8)),
    ("table_bool_pages", lambda: PageTable(2, True, 8)),
    ("table_negative_batch", lambda: PageTable(2, 4, -8)),
    ("multi_empty_page_sizes", lambda: MultiGroupPageTable(2, 32, 8, [])),
    ("multi_zero_page_size", lambda: MultiGroupPageTable(2, 32, 8, [16, 0])),
    ("multi_zero_model_len", lambda: MultiGroupPageTable(2, 0, 8, [16])),
    ("multi_string_page_sizes", lambda: MultiGroupPageTable(2, 32, 8, "16")),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("call", [c[1] for c in BAD_CONSTRUCTORS], ids=[c[0] for c in BAD_CONSTRUCTORS])
def test_bad_input_page_table_constructors(call) -> None:
    with pytest.raises(InvalidArgumentError):
        call()


# --- model-based: the table against a list of lists ----------------------------------------------

ROWS, WIDTH = 3, 4
row_ids = st.integers(0, ROWS - 1)
id_lists = st.lists(st.integers(0, 50), max_size=WIDTH + 1)


class PageTableMachine(RuleBasedStateMachine):
    """Random row operations, overflowing ones included, against a plain-Python model."""

    def __init__(self) -> None:
        super().__init__()
        self.table = PageTable(ROWS, WIDTH, 8)
        self.model: list[list[int]] = [[] for _ in range(ROWS)]

    def _apply(self, mutate, new_model: list[list[int]]) -> None:
        if any(len(r) > WIDTH for r in new_model):
            assert_rejected(self.table, snapshot, lambda _: mutate(), InvalidArgumentError)
        else:
            mutate()
            self.model = new_model

    @rule(row=row_ids, ids=id_lists)
    def append(self, row: int, ids: list[int]) -> None:
        new = [list(r) for r in self.model]
        new[row] += ids
        self._apply(lambda: self.table.append_row(ids, row), new)

    @rule(row=row_ids, ids=id_lists)
    def add(self, row: int, ids: list[int]) -> None:
        new = [list(r) for r in self.model]
        new[row] = list(ids)
        self._apply(lambda: self.table.add_row(ids, row), new)

    @rule(row=row_ids)
    def clear_row(self, row: int) -> None:
        self.table.clear_row(row)
        self.model[row] = []

    @rule(src=row_ids, tgt=row_ids)
    def move(self, src: int, tgt: int) -> None:
        self.table.move_row(src, tgt)
        self.model[tgt] = list(self.model[src])

    @rule(src=row_ids, tgt=row_ids)
    def swap(self, src: int, tgt: int) -> None:
        self.table.swap_row(src, tgt)
        self.model[src], self.model[tgt] = self.model[tgt], self.model[src]

    @rule()
    def clear(self) -> None:
        self.table.clear()
        self.model = [[] for _ in range(ROWS)]

    @invariant()
    def matches_model(self) -> None:
        expected = [r + [PAGE_TABLE_PADDING_VAL] * (WIDTH - len(r)) for r in self.model]
        assert self.table.get_numpy_array().tolist() == expected
        assert self.table.num_pages_per_row.tolist() == [len(r) for r in self.model]


TestPageTableMachine = PageTableMachine.TestCase
TestPageTableMachine.settings = settings(max_examples=100, stateful_step_count=30)


# --- hostile rows (typed errors, table unchanged) ------------------------------------------------

def _deep(depth: int = 5000) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", [[[1], [1, 2]], _deep(), [1.5], ["1"], [10**100], None])
def test_rows_numpy_cannot_read_as_ints_are_rejected(bad: object) -> None:
    table = PageTable(4, 4, 16)
    table.append_row([1, 2], 0)
    before = (table.get_numpy_array().copy(), table.num_pages_per_row.copy(), table.cpu_version)
    for call in (table.append_row, table.add_row):
        with pytest.raises(InvalidArgumentError):
            call(bad, 1)  # type: ignore[arg-type]
    after = (table.get_numpy_array(), table.num_pages_per_row, table.cpu_version)
    assert (before[0] == after[0]).all() and (before[1] == after[1]).all() and before[2] == after[2]


def test_table_size_is_bounded_by_int32_indexing() -> None:
    with pytest.raises(InvalidArgumentError):
        PageTable(2**31, 4, 16)
    with pytest.raises(InvalidArgumentError):
        MultiGroupPageTable(4, 2**33, 16, [4])


def test_multi_group_table_takes_numpy_arrays() -> None:
    table = MultiGroupPageTable(4, 16, 16, np.array([4, 8]))  # type: ignore[arg-type]  # numpy arrays are accepted at run time
    assert table.page_sizes == (4, 8)
    table.append_row(np.array([[1, 2], [3, 4]]), 0)  # type: ignore[arg-type]  # numpy arrays are accepted at run time
    assert table[0].get_row(0).tolist() == [1, 2] and table[1].get_row(0).tolist() == [3, 4]


# ---- Checks written for mutants of impl/page_table.py that the suite let through (tools/mutation/triage.toml)
#
# Each test states a documented behaviour of the page tables: errors name the argument they reject
# and report the offending value, ``cpu_version`` counts mutating calls one by one, boundaries are
# inclusive where the docstrings say "at most", and a multi-group table with one group behaves.
# Expected values come from the arguments and the docstrings, never from running the code.


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
