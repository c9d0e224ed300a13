"""Page tables: for every request row, the ids of its pages in order, as an int32 NumPy array.

verikv has no device: the host array of a ``PageTable`` is exactly what an engine copies to its
accelerator (``get_numpy_array()`` gives a read-only view of it, zero-copy). Unused entries
hold the null page id 0, eSurge's padding value. Every mutating call bumps ``cpu_version`` so an
engine can skip the copy when nothing changed (an empty append is not a mutation).

Departures from eSurge, deliberate: every argument is validated first and a bad call raises a
typed error (``InvalidArgumentError`` or its ``ForeignPageError`` subclass) with the table
unchanged; in particular a row overflow no longer leaves a wrong page count behind (eSurge Q24).
Multi-group calls are all-or-nothing across groups. The slot mapping rejects tokens beyond a
row's pages, tokens on the null page, and slots outside int32 instead of clipping (eSurge Q25).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verikv.dp_sharding import checked_int
from verikv.errors import ForeignPageError, InvalidArgumentError, describe

PAGE_TABLE_PADDING_VAL = 0
"""Value of unused page-table entries: the null page."""

_INT32_MAX = int(np.iinfo(np.int32).max)
_INT64_MAX = int(np.iinfo(np.int64).max)
_MAX_CELLS = _INT32_MAX
"""Most entries a table may have: every entry is addressable with an int32 index."""


def _int_vector(values: object, name: str) -> np.ndarray:
    """A 1-D int64 array from a sequence of integers or an integer NumPy array (no bools, floats).

    Anything NumPy cannot turn into one array (ragged or deeply nested lists, objects whose
    conversion raises) is an `InvalidArgumentError` too.
    """
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise InvalidArgumentError(f"{name} must be a 1-D sequence of integers: {exc}") from None
    if array.size == 0 and array.ndim == 1:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{name} must be a 1-D sequence of integers, got {describe(values)}")
    if array.dtype.kind == "u" and array.size and int(array.max()) > _INT64_MAX:
        raise InvalidArgumentError(f"{name} has values beyond int64")
    return array.astype(np.int64, copy=False)


def _page_id_vector(page_ids: object) -> np.ndarray:
    """Page ids as int32, each in ``0 .. 2**31 - 1`` (the null page 0 is a legal placeholder)."""
    ids = _int_vector(page_ids, "page_ids")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) > _INT32_MAX):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ForeignPageError(f"page id {bad} is outside 0..{_INT32_MAX}")
    return ids.astype(np.int32)


class PageTable:
    """Page ids of up to ``max_num_reqs`` request rows, ``max_num_pages_per_req`` per row."""

    def __init__(self, max_num_reqs: int, max_num_pages_per_req: int, max_num_batched_tokens: int) -> None:
        self.max_num_reqs: int = checked_int(max_num_reqs, "max_num_reqs", minimum=1)
        self.max_num_pages_per_req: int = checked_int(max_num_pages_per_req, "max_num_pages_per_req", minimum=1)
        self.max_num_batched_tokens: int = checked_int(max_num_batched_tokens, "max_num_batched_tokens", minimum=1)
        if self.max_num_reqs * self.max_num_pages_per_req > _MAX_CELLS:
            raise InvalidArgumentError(
                f"a {self.max_num_reqs} x {self.max_num_pages_per_req} page table exceeds {_MAX_CELLS} entries "
                f"(int32 indexing)")
        self._table: np.ndarray = np.full(
            (self.max_num_reqs, self.max_num_pages_per_req), PAGE_TABLE_PADDING_VAL, np.int32)
        self._num_pages: np.ndarray = np.zeros(self.max_num_reqs, dtype=np.int32)
        self._version: int = 0

    @property
    def cpu_version(self) -> int:
        """Number of mutating calls so far."""
        return self._version

    @property
    def num_pages_per_row(self) -> np.ndarray:
        """Pages held by each row (read-only view)."""
        view = self._num_pages.view()
        view.flags.writeable = False
        return view

    def get_numpy_array(self) -> np.ndarray:
        """The whole ``[max_num_reqs, max_num_pages_per_req]`` int32 table (read-only view)."""
        view = self._table.view()
        view.flags.writeable = False
        return view

    def get_cpu_tensor(self) -> np.ndarray:
        """eSurge's name for ``get_numpy_array``."""
        return self.get_numpy_array()

    def get_row(self, row: int) -> np.ndarray:
        """The page ids a row holds, in order (read-only view)."""
        index = self._check_row(row)
        return self.get_numpy_array()[index, : self._num_pages[index]]

    def _check_row(self, row: object, name: str = "row") -> int:
        return checked_int(row, name, minimum=0, maximum=self.max_num_reqs - 1)

    def _prepare_append(self, page_ids: object, row: int, pending: int = 0) -> np.ndarray:
        """Validated ids to append to ``row`` after ``pending`` ids already planned for it."""
        ids = _page_id_vector(page_ids)
        held = int(self._num_pages[row]) + pending
        if held + ids.size > self.max_num_pages_per_req:
            raise InvalidArgumentError(
                f"row {row} holds {held} pages; appending {ids.size} would exceed "
                f"max_num_pages_per_req={self.max_num_pages_per_req}"
            )
        return ids

    def _write_append(self, row: int, ids: np.ndarray) -> None:
        """Store validated ids after the row's pages and count one mutation (none if empty)."""
        if ids.size == 0:
            return
        start = int(self._num_pages[row])
        self._table[row, start : start + ids.size] = ids
        self._num_pages[row] = start + ids.size
        self._version += 1

    def _write_row(self, row: int, ids: np.ndarray) -> None:
        """Replace the row by validated ids and count one mutation."""
        self._table[row, : self._num_pages[row]] = PAGE_TABLE_PADDING_VAL
        self._table[row, : ids.size] = ids
        self._num_pages[row] = ids.size
        self._version += 1

    def append_row(self, page_ids: Sequence[int] | np.ndarray, row: int) -> None:
        """Append page ids after the row's current pages."""
        index = self._check_row(row)
        self._write_append(index, self._prepare_append(page_ids, index))

    def add_row(self, page_ids: Sequence[int] | np.ndarray, row: int) -> None:
        """Replace the row's pages with ``page_ids``."""
        index = self._check_row(row)
        self._write_row(index, self._prepare_append(page_ids, index, pending=-int(self._num_pages[index])))

    def clear_row(self, row: int) -> None:
        """Drop every page of the row (entries back to the null page)."""
        self._write_row(self._check_row(row), np.zeros(0, dtype=np.int32))

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src`` over row ``tgt`` (the source row is kept)."""
        source, target = self._check_row(src, "src"), self._check_row(tgt, "tgt")
        self._table[target] = self._table[source]
        self._num_pages[target] = self._num_pages[source]
        self._version += 1

    def swap_row(self, src: int, tgt: int) -> None:
        """Exchange two rows."""
        first, second = self._check_row(src, "src"), self._check_row(tgt, "tgt")
        self._table[[first, second]] = self._table[[second, first]]
        self._num_pages[[first, second]] = self._num_pages[[second, first]]
        self._version += 1

    def clear(self) -> None:
        """Empty every row."""
        self._table.fill(PAGE_TABLE_PADDING_VAL)
        self._num_pages.fill(0)
        self._version += 1

    def compute_slot_mapping(
        self,
        page_size: int,
        row_indices: Sequence[int] | np.ndarray,
        num_computed_tokens: Sequence[int] | np.ndarray,
        num_scheduled_tokens: Sequence[int] | np.ndarray,
    ) -> np.ndarray:
        """KV slot of every scheduled token of a batch, in batch order, as int32.

        Request ``k`` (row ``row_indices[k]``) writes its tokens at positions
        ``num_computed_tokens[k] .. num_computed_tokens[k] + num_scheduled_tokens[k] - 1``; the
        slot of position ``i`` is ``page_id * page_size + i % page_size`` with ``page_id`` the
        row's page ``i // page_size``. Rows must be distinct, counts non-negative (scheduled at
        least 1), the batch at most ``max_num_batched_tokens`` tokens; a token beyond the row's
        pages, on the null page, or with a slot outside int32 raises ``InvalidArgumentError``.
        """
        size = checked_int(page_size, "page_size", minimum=1)
        rows = _int_vector(row_indices, "row_indices")
        computed = _int_vector(num_computed_tokens, "num_computed_tokens")
        scheduled = _int_vector(num_scheduled_tokens, "num_scheduled_tokens")
        if not rows.size == computed.size == scheduled.size:
            raise InvalidArgumentError(
                f"row_indices, num_computed_tokens and num_scheduled_tokens differ in length "
                f"({rows.size}, {computed.size}, {scheduled.size})"
            )
        if rows.size == 0:
            return np.zeros(0, dtype=np.int32)
        if int(rows.min()) < 0 or int(rows.max()) >= self.max_num_reqs:
            raise InvalidArgumentError(f"row_indices must lie in 0..{self.max_num_reqs - 1}, got {rows.tolist()}")
        if np.unique(rows).size != rows.size:
            raise InvalidArgumentError(f"row_indices has repeated rows: {rows.tolist()}")
        if int(computed.min()) < 0:
            raise InvalidArgumentError(f"num_computed_tokens must be >= 0, got {computed.tolist()}")
        if int(scheduled.min()) < 1:
            raise InvalidArgumentError(f"num_scheduled_tokens must be >= 1, got {scheduled.tolist()}")
        if int(scheduled.max()) > self.max_num_batched_tokens or int(scheduled.sum()) > self.max_num_batched_tokens:
            raise InvalidArgumentError(
                f"the batch schedules {int(scheduled.sum())} tokens, more than "
                f"max_num_batched_tokens={self.max_num_batched_tokens}"
            )
        if size > _INT32_MAX:
            raise InvalidArgumentError(f"page_size {size} makes every slot exceed int32")
        capacity = self.max_num_pages_per_req * size
        if int(computed.max()) > capacity:
            raise InvalidArgumentError(f"num_computed_tokens {int(computed.max())} exceeds a row's {capacity} slots")
        pages_needed = (computed + scheduled - 1) // size + 1
        short = np.nonzero(pages_needed > self._num_pages[rows])[0]
        if short.size:
            k = int(short[0])
            raise InvalidArgumentError(
                f"request {k} (row {int(rows[k])}) writes up to position "
                f"{int(computed[k] + scheduled[k] - 1)}, which needs {int(pages_needed[k])} pages; "
                f"the row holds {int(self._num_pages[rows[k]])}"
            )
        owner = np.repeat(np.arange(rows.size), scheduled)
        first_token = np.cumsum(scheduled) - scheduled
        positions = computed[owner] + (np.arange(owner.size) - first_token[owner])
        page_ids = self._table[rows[owner], positions // size].astype(np.int64)
        on_null = np.nonzero(page_ids == PAGE_TABLE_PADDING_VAL)[0]
        if on_null.size:
            token = int(on_null[0])
            raise InvalidArgumentError(
                f"position {int(positions[token])} of request {int(owner[token])} falls on the null page"
            )
        slots: np.ndarray = page_ids * size + positions % size
        if int(slots.max()) > _INT32_MAX:
            raise InvalidArgumentError(f"slot {int(slots.max())} does not fit int32")
        return slots.astype(np.int32)


class MultiGroupPageTable:
    """One ``PageTable`` per cache group, rows ``cdiv(max_model_len, page_size)`` pages wide.

    Row operations fan out to every group and are all-or-nothing: a call that fails for one
    group changes no group.
    """

    def __init__(
        self,
        max_num_reqs: int,
        max_model_len: int,
        max_num_batched_tokens: int,
        page_sizes: Sequence[int],
    ) -> None:
        model_len = checked_int(max_model_len, "max_model_len", minimum=1)
        if isinstance(page_sizes, np.ndarray):
            page_sizes = page_sizes.tolist()
        if isinstance(page_sizes, (str, bytes)) or not isinstance(page_sizes, Sequence) or not page_sizes:
            raise InvalidArgumentError(
                f"page_sizes must be a non-empty sequence of integers, got {describe(page_sizes)}")
        self.max_model_len: int = model_len
        self.page_sizes: tuple[int, ...] = tuple(checked_int(ps, "page size", minimum=1) for ps in page_sizes)
        self.page_tables: tuple[PageTable, ...] = tuple(
            PageTable(max_num_reqs, -(-model_len // ps), max_num_batched_tokens) for ps in self.page_sizes
        )

    def __getitem__(self, group: int) -> PageTable:
        return self.page_tables[checked_int(group, "group", minimum=0, maximum=len(self.page_tables) - 1)]

    def __len__(self) -> int:
        return len(self.page_tables)

    def _per_group(self, page_ids: object) -> Sequence[object]:
        if isinstance(page_ids, np.ndarray) and page_ids.ndim == 2:  # one row of ids per group
            return list(page_ids)
        if isinstance(page_ids, (str, bytes)) or not isinstance(page_ids, Sequence):
            raise InvalidArgumentError(f"page_ids must hold one id list per group, got {describe(page_ids)}")
        if len(page_ids) != len(self.page_tables):
            raise InvalidArgumentError(f"page_ids has {len(page_ids)} lists for {len(self.page_tables)} groups")
        return page_ids

    def append_row(self, page_ids: Sequence[Sequence[int]], row: int) -> None:
        """Append each group's ids (``page_ids[g]``) to the row of group ``g``."""
        index = self.page_tables[0]._check_row(row)
        prepared = [t._prepare_append(ids, index) for t, ids in zip(self.page_tables, self._per_group(page_ids))]
        for table, ids in zip(self.page_tables, prepared):
            table._write_append(index, ids)

    def add_row(self, page_ids: Sequence[Sequence[int]], row: int) -> None:
        """Replace the row's pages in every group."""
        index = self.page_tables[0]._check_row(row)
        prepared = [
            t._prepare_append(ids, index, pending=-int(t._num_pages[index]))
            for t, ids in zip(self.page_tables, self._per_group(page_ids))
        ]
        for table, ids in zip(self.page_tables, prepared):
            table._write_row(index, ids)

    def append_rows_batch(
        self, page_ids_per_req: Sequence[Sequence[Sequence[int]]], req_indices: Sequence[int]
    ) -> None:
        """``append_row(page_ids_per_req[k], req_indices[k])`` for every k, validated as a whole."""
        for name, value in (("page_ids_per_req", page_ids_per_req), ("req_indices", req_indices)):
            if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)) \
                    or (isinstance(value, np.ndarray) and value.ndim == 0):  # a 0-d array has no length
                raise InvalidArgumentError(f"{name} must be a sequence, got {describe(value)}")
        if len(page_ids_per_req) != len(req_indices):
            raise InvalidArgumentError(
                f"{len(page_ids_per_req)} page-id entries for {len(req_indices)} request rows"
            )
        pending: list[dict[int, int]] = [{} for _ in self.page_tables]
        plan = []
        for page_ids, row in zip(page_ids_per_req, req_indices):
            index = self.page_tables[0]._check_row(row)
            for g, (table, ids) in enumerate(zip(self.page_tables, self._per_group(page_ids))):
                prepared = table._prepare_append(ids, index, pending[g].get(index, 0))
                pending[g][index] = pending[g].get(index, 0) + prepared.size
                plan.append((table, index, prepared))
        for table, index, ids in plan:
            table._write_append(index, ids)

    def clear_row(self, row: int) -> None:
        """Empty the row in every group."""
        self.page_tables[0]._check_row(row)
        for table in self.page_tables:
            table.clear_row(row)

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src`` over row ``tgt`` in every group."""
        self.page_tables[0]._check_row(src, "src")
        self.page_tables[0]._check_row(tgt, "tgt")
        for table in self.page_tables:
            table.move_row(src, tgt)

    def swap_row(self, src: int, tgt: int) -> None:
        """Exchange two rows in every group."""
        self.page_tables[0]._check_row(src, "src")
        self.page_tables[0]._check_row(tgt, "tgt")
        for table in self.page_tables:
            table.swap_row(src, tgt)

    def clear(self) -> None:
        """Empty every row of every group."""
        for table in self.page_tables:
            table.clear()

    def compute_slot_mappings(
        self,
        row_indices: Sequence[int] | np.ndarray,
        num_computed_tokens: Sequence[int] | np.ndarray,
        num_scheduled_tokens: Sequence[int] | np.ndarray,
    ) -> tuple[np.ndarray, ...]:
        """``PageTable.compute_slot_mapping`` for every group with its own page size."""
        return tuple(
            table.compute_slot_mapping(ps, row_indices, num_computed_tokens, num_scheduled_tokens)
            for table, ps in zip(self.page_tables, self.page_sizes)
        )
