"""The free-page LRU list: `CachePage` views and `FreeCachePageQueue`, over flat int arrays.

Pages are int ids. Per-page data (reference count, content key) lives in a `PageRecords`
table of flat sequences indexed by id; free-list links live in `IdLinks`, two ``array('i')``
of predecessor/successor ids with two sentinel slots per list. No operation allocates a
per-page node, and every operation costs O(1) per page it touches, whatever the pool size.

`CachePage` is eSurge's page record as a *view*: ``(records, page_id)``. A pool hands out one
cached view per id; a page built directly (``CachePage(3)``) gets a private one-page record,
as eSurge's plain dataclass did. `FreeCachePageQueue` keeps eSurge's API (``popleft``,
``popleft_n``, ``remove``, ``append``, ``append_n``, ``get_all_free_pages``,
``num_free_pages``) and adds id-level methods for the pool's hot path. Misuse raises a typed
error from `verikv.errors` and changes nothing (eSurge asserted or silently corrupted links).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, MutableMapping, MutableSequence
from itertools import islice, repeat
from operator import getitem
from typing import Any

import numpy as np

from verikv import errors
from verikv.dp_sharding import checked_int
from verikv.errors import describe
from verikv.hashing import PageHashWithGroupId
from verikv.typed_property import Field

UNLINKED = -1
#: `IdLinks.pop_front` of at least this many ids walks and unlinks them with C-level passes
_BULK_POP = 256
#: `IdLinks.link_back` (and `link_front`) of a list of at least this many ids links it with NumPy
#: scatters (`IdLinks.link_back_array`)
_BULK_LINK = 128
#: the null page: never free, never hashed, never handed out (a pool's page 0)
NULL_PAGE_ID = 0
MAX_PAGE_ID = 2**29 - 1
"""Largest page id: ids and the free-list links (ids plus two sentinels per list, one list per
data-parallel shard, so up to three times the pool size) are stored as int32."""


class PageRecords:
    """Per-page reference counts and content keys, indexed by page id.

    ``ref`` and ``key`` are flat sequences (two lists for a pool, dicts for a lone page).
    ``null_id`` is the null page's id (or ``None``); ``queue`` is the free queue the pages
    are linked in, if any. ``owned`` marks a pool's table: its views are
    read-only, because the pool keeps its cached map and free lists consistent with them.
    """

    __slots__ = ("key", "null_id", "owned", "queue", "ref")

    def __init__(self, ref: MutableSequence[int] | MutableMapping[int, int],
                 key: MutableSequence[Any] | MutableMapping[int, Any],
                 null_id: int | None, owned: bool) -> None:
        self.ref: MutableSequence[int] | MutableMapping[int, int] = ref
        self.key: MutableSequence[Any] | MutableMapping[int, Any] = key
        self.null_id: int | None = null_id
        self.queue: FreeCachePageQueue | None = None
        self.owned: bool = owned

    @classmethod
    def for_pool(cls, num_pages: int, *, owned: bool = False) -> PageRecords:
        """A table for ``num_pages`` pages, all with ref 0 and no key; page 0 is null.

        ``ref`` is a list: the pool reads and writes single counts on every path, and a list
        item costs no int boxing, as an ``array`` item does. ``owned=True`` is for a
        `PagePool`'s own table (read-only views and queue).
        """
        return cls([0] * num_pages, [None] * num_pages, NULL_PAGE_ID, owned=owned)


def check_key(key: Any) -> None:
    """`InvalidArgumentError` unless ``key`` is ``None`` or a usable content key: hashable and
    equal to itself (a NaN could never be found again), its ``__hash__`` and ``__eq__`` not
    raising. Read-only: a key is checked before any table changes."""
    if key is None:
        return
    try:
        hash(key)
        equal = not key != key  # (`not` reads the answer, so a failing __bool__ is caught here too)
    except TypeError:
        raise errors.InvalidArgumentError(f"unhashable cache key {describe(key)}") from None
    except Exception as exc:  # a user key's own __hash__ / __eq__ failing is a bad argument
        raise errors.InvalidArgumentError(
            f"cache key {describe(key)} cannot be hashed or compared: {type(exc).__name__}: {exc}") from None
    if not equal:
        raise errors.InvalidArgumentError(f"cache key {describe(key)} is not equal to itself")


def page_list(pages: object, what: str) -> list[Any]:
    """``pages`` (any iterable but a str/bytes/mapping or a 0-d NumPy array, which claims to be
    iterable and is not) as a new list; `InvalidArgumentError` otherwise, also when iterating
    fails, so a wrong container is reported instead of failing halfway."""
    if isinstance(pages, (str, bytes, Mapping)) or not isinstance(pages, Iterable) \
            or (isinstance(pages, np.ndarray) and pages.ndim == 0):
        raise errors.InvalidArgumentError(f"{what} must be a list, got {type(pages).__name__} {describe(pages)}")
    try:
        return list(pages)
    except Exception as exc:  # a user iterable that fails is a bad argument, reported as one
        raise errors.InvalidArgumentError(f"{what} could not be iterated: {type(exc).__name__}: {exc}") from None


def int_array(values: np.ndarray) -> array[int]:
    """``values`` as an ``array('i')`` (a bulk copy: milliseconds for millions of ids)."""
    out = array("i")
    out.frombytes(values.astype(np.intc, copy=False).tobytes())
    return out


def _record_field(table: str, checked: Callable[[Any, Any], object],
                  shown: Callable[[CachePage, Any], Any] | None = None) -> Any:
    """A `CachePage` property over its records' per-page ``table`` (``"ref"`` or ``"key"``): a
    read gives the stored value (or what ``shown(page, value)`` makes of it); an assignment
    checks that the page may change (a lone page, not a pool's), then stores what
    ``checked(page, value)`` returns (it raises for a bad value)."""
    def read(page: CachePage) -> Any:
        value = getattr(page._records, table)[page.page_id]
        return value if shown is None else shown(page, value)

    def write(page: CachePage, value: object) -> None:
        page._check_mutable()
        getattr(page._records, table)[page.page_id] = checked(page, value)

    return property(read, write)


class CachePage:
    """View of one page: its id, reference count, content key (``page_hash``) and free links.

    Equality and hashing are by (table, id), so one page is one value and views are usable
    as dict keys (eSurge's dataclass compared every field and was unhashable).
    """

    __slots__ = ("_records", "page_id")

    def __init__(self, page_id: int, ref_cnt: int = 0, page_hash: Any = None, *,
                 is_null: bool = False) -> None:
        pid = checked_int(page_id, "page_id", minimum=0, maximum=MAX_PAGE_ID)
        ref = checked_int(ref_cnt, "ref_cnt", minimum=0)
        if not isinstance(is_null, bool):
            raise errors.InvalidArgumentError(f"is_null must be a bool, got {type(is_null).__name__}")
        check_key(page_hash)
        self.page_id: int = pid
        self._records: PageRecords = PageRecords({pid: ref}, {pid: page_hash}, pid if is_null else None, owned=False)

    @classmethod
    def view(cls, records: PageRecords, page_id: int) -> CachePage:
        """The view of ``page_id`` in ``records`` (no validation: callers pass valid ids)."""
        page = cls.__new__(cls)
        page.page_id = page_id
        page._records = records
        return page

    def _checked_hash(self, value: Any) -> Any:
        """``value`` if this page may take it as its first content key."""
        check_key(value)
        if self.is_null:
            raise errors.NullPageError("the null page is never hashed")
        if self._records.key[self.page_id] is not None:
            raise errors.PageStateError(f"page {self.page_id} already has a hash; reset it first")
        return value

    def _shown_hash(self, key: Any) -> Any:
        """The key as eSurge shows a pool page's: a `PageHashWithGroupId` in every group. A pool
        stores the key of a page of group 0 as the bare content key (a ``bytes`` key is group 0's:
        `verikv.hashing.group_pool_key`), so that one is paired with its group here. A lone page
        shows the value it was given."""
        if type(key) is bytes and self._records.owned:
            return PageHashWithGroupId(key, 0)
        return key

    ref_cnt: Field[int, int] = _record_field("ref", lambda page, value: checked_int(value, "ref_cnt", minimum=0))
    page_hash: Field[Any, Any] = _record_field("key", _checked_hash, _shown_hash)

    @property
    def is_null(self) -> bool:
        return self.page_id == self._records.null_id

    @property
    def prev_free_page(self) -> CachePage | None:
        """The page before this one in its free queue (``None`` at the head or when not free)."""
        queue = self._records.queue
        return None if queue is None else queue.neighbour(self.page_id, forward=False)

    @property
    def next_free_page(self) -> CachePage | None:
        """The page after this one in its free queue (``None`` at the tail or when not free)."""
        queue = self._records.queue
        return None if queue is None else queue.neighbour(self.page_id, forward=True)

    def incr_ref(self) -> None:
        """ref_cnt += 1."""
        self._check_mutable()
        self._records.ref[self.page_id] += 1

    def decr_ref(self) -> None:
        """ref_cnt -= 1; `DoubleFreeError` (a RuntimeError, as in eSurge) below zero."""
        self._check_mutable()
        if self._records.ref[self.page_id] <= 0:
            raise errors.DoubleFreeError(f"ref_cnt underflow on page {self.page_id}")
        self._records.ref[self.page_id] -= 1

    def reset_hash(self) -> None:
        """Forget the content key (the page was evicted)."""
        self._check_mutable()
        self._records.key[self.page_id] = None

    def _check_mutable(self) -> None:
        if self._records.owned:
            raise errors.PageStateError(
                f"page {self.page_id} belongs to a PagePool; change it through the pool's methods")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CachePage) and other.page_id == self.page_id
                and other._records is self._records)

    def __hash__(self) -> int:
        return hash((id(self._records), self.page_id))

    def __repr__(self) -> str:
        return (f"CachePage(page_id={self.page_id}, ref_cnt={self.ref_cnt}, "
                f"page_hash={describe(self.page_hash)}, is_null={self.is_null})")


def is_view_of(page: object, records: PageRecords) -> bool:
    """Whether ``page`` is a `CachePage` that reads ``records`` (a page of that pool or queue)."""
    return isinstance(page, CachePage) and page._records is records


class IdLinks:
    """``num_lists`` disjoint doubly linked lists over ids ``0..capacity-1``, plus lengths.

    List ``i`` has head sentinel ``capacity + 2i`` and tail sentinel ``capacity + 2i + 1``;
    an unlinked id has both links ``UNLINKED``. The methods trust their caller (validation is
    the owner's job, done before any mutation) and cost O(1) per id.
    """

    __slots__ = ("_inside", "capacity", "lengths", "next", "next_np", "prev", "prev_np")

    def __init__(self, capacity: int, num_lists: int = 1) -> None:
        size = capacity + 2 * num_lists
        self.capacity: int = capacity
        self.prev: array[int] = int_array(np.full(size, UNLINKED, dtype=np.intc))
        self.next: array[int] = int_array(np.full(size, UNLINKED, dtype=np.intc))
        #: NumPy views of the link arrays (no copy; the arrays are never resized, and cannot be
        #: while viewed), kept so that a bulk link is its scatters only
        self.prev_np: np.ndarray = np.frombuffer(self.prev, dtype=np.intc)
        self.next_np: np.ndarray = np.frombuffer(self.next, dtype=np.intc)
        self.lengths: list[int] = [0] * num_lists
        #: scratch marks of `unlink_runs` (all False between calls), built on its first use
        self._inside: np.ndarray | None = None
        for li in range(num_lists):
            head, tail = capacity + 2 * li, capacity + 2 * li + 1
            self.next[head] = tail
            self.prev[tail] = head

    def fill_range(self, li: int, first: int, stop: int) -> None:
        """Make list ``li`` (empty) hold ``first, first+1, ..., stop-1`` in that order."""
        if stop <= first:
            return
        head, tail = self.capacity + 2 * li, self.capacity + 2 * li + 1
        ids = np.arange(first, stop, dtype=np.intc)
        prev, nxt = self.prev_np, self.next_np
        prev[first + 1:stop] = ids[:-1]
        nxt[first:stop - 1] = ids[1:]
        prev[first], nxt[stop - 1] = head, tail
        nxt[head], prev[tail] = first, stop - 1
        self.lengths[li] = stop - first

    def is_linked(self, pid: int) -> bool:
        return self.next[pid] != UNLINKED

    def first(self, li: int) -> int:
        """The head id of list ``li``, or ``UNLINKED`` when it is empty."""
        pid = self.next[self.capacity + 2 * li]
        return UNLINKED if pid >= self.capacity else pid

    def pop_front(self, li: int, n: int) -> list[int]:
        """Unlink and return the first ``n`` ids of list ``li`` (caller checked the length)."""
        nxt, prev = self.next, self.prev
        head = self.capacity + 2 * li
        if n < _BULK_POP:
            out = [0] * n
            pid = nxt[head]
            for i in range(n):
                out[i] = pid
                following = nxt[pid]
                nxt[pid] = UNLINKED
                prev[pid] = UNLINKED
                pid = following
            following = pid
        else:
            out = [nxt[head]]
            # The walk at C speed: the map reads the successor of each id as the list iterator
            # reaches it, and extend appends it behind the iterator, which reads it next.
            # (`getitem` is a C function, cheaper per id than the array's ``__getitem__`` slot
            # wrapper, which packs its argument in a tuple.)
            out.extend(islice(map(getitem, repeat(nxt), out), n - 1))
            following = nxt[out[-1]]
            popped = np.fromiter(out, np.intp, n)  # (NumPy's index type: no conversion per scatter)
            self.next_np[popped] = UNLINKED  # one scatter each, not an item store per id
            self.prev_np[popped] = UNLINKED
        nxt[head] = following
        prev[following] = head
        self.lengths[li] -= n
        return out

    def unlink(self, li: int, pid: int) -> None:
        """Remove the linked id ``pid`` from list ``li``."""
        nxt, prev = self.next, self.prev
        before, after = prev[pid], nxt[pid]
        nxt[before] = after
        prev[after] = before
        nxt[pid] = UNLINKED
        prev[pid] = UNLINKED
        self.lengths[li] -= 1

    def unlink_runs(self, li: int, ids: np.ndarray) -> None:
        """Unlink the distinct linked ids of list ``li`` in the NumPy int array ``ids``, in any
        order, with gathers and scatters: the node before each run of consecutive ids of the set
        is linked to the node after it. A run starts at an id whose predecessor is outside the
        set (a list has no cycle, so walking back from any id of the set reaches one). One run
        (a cached prefix freed together, stored in reverse) ends at the one id whose successor
        is outside; several are paired with their ends by `_run_ends`. The ids are converted
        once to NumPy's index type, which each gather and scatter would otherwise convert them
        to."""
        ids = ids.astype(np.intp, copy=False)
        inside = self._inside
        if inside is None:
            inside = self._inside = np.zeros(len(self.next_np), dtype=bool)
        nxt, prev = self.next_np, self.prev_np
        inside[ids] = True
        first = ids[~inside[prev[ids]]]
        try:
            after = nxt[ids[~inside[nxt[ids]]]] if len(first) == 1 else _run_ends(nxt, inside, ids)[first]
        finally:  # (the marks are all False between calls, also after a CorruptedStateError)
            inside[ids] = False
        before = prev[first]
        nxt[before] = after
        prev[after] = before
        nxt[ids] = UNLINKED
        prev[ids] = UNLINKED
        self.lengths[li] -= len(ids)

    def link_back(self, li: int, ids: Iterable[int], *, end: int | None = None) -> None:
        """Link unlinked, distinct ids, in order, into list ``li`` just before node ``end``: by
        default its tail sentinel (an append; `link_front` passes the list's first node). A list
        of at least `_BULK_LINK` ids (a ``list``, or an ``array`` such as the pool's checked copy
        of a free's ids) goes to `link_back_array`."""
        if end is None:
            end = self.capacity + 2 * li + 1
        kind = type(ids)
        if (kind is list or kind is array) and len(ids) >= _BULK_LINK:  # type: ignore[arg-type]
            packed: array[int] = ids if kind is array else array("i", ids)  # type: ignore[assignment]
            self.link_back_array(li, np.frombuffer(packed, dtype=packed.typecode), end=end)
            return
        nxt, prev = self.next, self.prev
        last = prev[end]
        count = 0
        for pid in ids:
            nxt[last] = pid
            prev[pid] = last
            last = pid
            count += 1
        nxt[last] = end
        prev[end] = last
        self.lengths[li] += count

    def link_back_array(self, li: int, ids: np.ndarray, *, end: int | None = None) -> None:
        """`link_back` of a non-empty NumPy array of unlinked, distinct ids (int32 or uint32):
        the inner links are two scatters (a scattered store costs a fraction of an ``array``
        item store from Python)."""
        nxt, prev = self.next, self.prev
        if end is None:
            end = self.capacity + 2 * li + 1
        last, first, final = prev[end], int(ids[0]), int(ids[-1])
        self.next_np[ids[:-1]] = ids[1:]
        self.prev_np[ids[1:]] = ids[:-1]
        nxt[last], prev[first] = first, last
        nxt[final], prev[end] = end, final
        self.lengths[li] += len(ids)

    def link_front(self, li: int, ids: Iterable[int]) -> None:
        """Insert unlinked ids before the head of list ``li``, keeping their order."""
        self.link_back(li, ids, end=self.next[self.capacity + 2 * li])

    def ids(self, li: int) -> list[int]:
        """The ids of list ``li``, head to tail (O(length)).

        A walk longer than ``capacity`` means the links form a cycle: `CorruptedStateError`
        instead of looping forever.
        """
        nxt, cap = self.next, self.capacity
        out: list[int] = []
        pid = nxt[cap + 2 * li]
        while 0 <= pid < cap:
            if len(out) >= cap:
                raise errors.CorruptedStateError(f"free list {li} has a cycle")
            out.append(pid)
            pid = nxt[pid]
        return out


def _run_ends(nxt: np.ndarray, inside: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """For each id of ``ids`` (marked in ``inside``), the first node after it that is outside
    the set, in an array indexed by node (other entries unset), by pointer jumping: each id's hop
    starts at its successor and, while it lands on an id of the set, is replaced by that id's
    hop, which doubles the distance covered per round (1 + log2 of the longest run rounds, each
    of gathers over the ids still inside). More rounds than that mean the links of the set form
    a cycle: `CorruptedStateError` instead of looping forever."""
    hop = np.empty(len(nxt), dtype=np.intp)
    hop[ids] = nxt[ids]
    pending = ids[inside[hop[ids]]]
    for _ in range(len(ids).bit_length() + 1):
        if not len(pending):
            return hop
        hop[pending] = hop[hop[pending]]
        pending = pending[inside[hop[pending]]]
    raise errors.CorruptedStateError(f"the links of {len(ids)} ids being unlinked form a cycle")


class FreeCachePageQueue:
    """The free pages as an LRU list: head = next page handed out, tail = most recently freed.

    Build it from a list of `CachePage` (eSurge's constructor; the pages are linked in list
    order) or with `for_range` (a pool's whole id range, in milliseconds). The eSurge methods
    take and return `CachePage` views; the ``*_ids`` methods are the same operations on ids.
    ``links`` is the raw `IdLinks` (list 0); an owning pool that has already validated the
    page states may drive it directly, everyone else uses the checked methods.

    Contracts (PEP 316, checked by CrossHair; the abstraction is `ids`, the spec's free list):
    the backward links and the length agree with `ids`, and only listed ids are linked.

    inv: [self.links.prev[p] for p in [*self.ids(), self.links.capacity + 1]] == [self.links.capacity, *self.ids()]
    inv: len(self) == len(self.ids()) and all(self.is_linked(p) == (p in self.ids()) for p in range(self.links.capacity))
    """  # noqa: E501 -- a CrossHair contract is one line; splitting it would renumber its checks

    def __init__(self, pages: list[CachePage]) -> None:
        pages, null_id = self._checked_new_pages(pages)
        ids = [p.page_id for p in pages]
        records = PageRecords({p.page_id: p.ref_cnt for p in pages},
                              {p.page_id: p._records.key[p.page_id] for p in pages}, null_id, owned=False)
        by_id = {p.page_id: p for p in pages}
        for page in pages:
            page._records = records
        self._setup(records, IdLinks(max(ids, default=-1) + 1), by_id.__getitem__)
        self.links.link_back(0, ids)

    @staticmethod
    def _checked_new_pages(pages: object) -> tuple[list[CachePage], int | None]:
        """``pages`` as a list, and the id of its null page (or None), if they can make a queue:
        lone `CachePage` objects (of no pool or queue), distinct ids, at most one null page.
        Read-only."""
        pages = page_list(pages, "pages")
        for page in pages:
            if not isinstance(page, CachePage):
                raise errors.InvalidArgumentError(
                    f"FreeCachePageQueue holds CachePage objects, got {type(page).__name__}")
        ids = [p.page_id for p in pages]
        if len(set(ids)) != len(ids):
            raise errors.InvalidArgumentError("FreeCachePageQueue: a page id occurs twice")
        if any(p._records.owned or p._records.queue is not None for p in pages):
            raise errors.InvalidArgumentError("FreeCachePageQueue: a page already belongs to a pool or a queue")
        nulls = [p.page_id for p in pages if p.is_null]
        if len(nulls) > 1:
            raise errors.InvalidArgumentError("FreeCachePageQueue: more than one null page")
        return pages, nulls[0] if nulls else None

    @classmethod
    def for_range(cls, records: PageRecords, first: int, stop: int,
                  page_of: Callable[[int], CachePage]) -> FreeCachePageQueue:
        """A queue over ids ``0..len(records.ref)-1`` holding ``first..stop-1`` in order.

        ``page_of`` turns an id into its `CachePage` view for the eSurge-style methods.
        """
        queue = cls.__new__(cls)
        queue._setup(records, IdLinks(len(records.ref)), page_of)
        queue.links.fill_range(0, first, stop)
        return queue

    def _setup(self, records: PageRecords, links: IdLinks, page_of: Callable[[int], CachePage]) -> None:
        self._records: PageRecords = records
        self.links: IdLinks = links
        self._page_of: Callable[[int], CachePage] = page_of
        self._null: int = UNLINKED if records.null_id is None else records.null_id
        records.queue = self

    @property
    def num_free_pages(self) -> int:
        """How many pages are linked."""
        return self.links.lengths[0]

    def __len__(self) -> int:
        return self.links.lengths[0]

    # --- id level ------------------------------------------------------------------------

    def is_linked(self, page_id: int) -> bool:
        """Whether ``page_id`` is currently in the queue."""
        if type(page_id) is not int:
            page_id = checked_int(page_id, "page_id")
        return 0 <= page_id < self.links.capacity and self.links.is_linked(page_id)

    def popleft_ids(self, n: int) -> list[int]:
        """Unlink and return the first ``n`` ids (`OutOfPagesError` if fewer are linked).

        raises: errors.OutOfPagesError, errors.InvalidArgumentError, errors.PageStateError
        post: __return__ == __old__.self.ids()[:n] and self.ids() == __old__.self.ids()[n:]
        """
        self._check_unowned()
        count = checked_int(n, "n", minimum=0)
        if count > self.links.lengths[0]:
            raise errors.OutOfPagesError(f"cannot pop {count} pages: only {self.links.lengths[0]} are free")
        return self.links.pop_front(0, count)

    def remove_id(self, page_id: int) -> None:
        """Unlink ``page_id`` from anywhere in the queue (`PageStateError` if not linked).

        raises: errors.ForeignPageError, errors.NullPageError, errors.PageStateError
        post: self.ids() == [p for p in __old__.self.ids() if p != page_id]
        """
        self._check_unowned()
        self._checked_ids([page_id], want_linked=True)
        self.links.unlink(0, page_id)

    def append_ids(self, ids: list[int]) -> None:
        """Link unlinked, distinct, non-null ids at the tail in the given order.

        raises: errors.ForeignPageError, errors.NullPageError, errors.PageStateError
        post: self.ids() == __old__.self.ids() + ids
        """
        self._check_unowned()
        ids = self._checked_ids(ids, want_linked=False)
        self.links.link_back(0, ids)

    def prepend_ids(self, ids: list[int]) -> None:
        """Link unlinked, distinct, non-null ids before the head, keeping their order.

        raises: errors.ForeignPageError, errors.NullPageError, errors.PageStateError
        post: self.ids() == ids + __old__.self.ids()
        """
        self._check_unowned()
        ids = self._checked_ids(ids, want_linked=False)
        self.links.link_front(0, ids)

    def ids(self) -> list[int]:
        """The linked ids, head to tail."""
        return self.links.ids(0)

    def neighbour(self, page_id: int, *, forward: bool) -> CachePage | None:
        """The page after (``forward``) or before ``page_id``; ``None`` at an end or if unlinked."""
        if not isinstance(forward, bool):
            raise errors.InvalidArgumentError(f"forward must be a bool, got {type(forward).__name__}")
        if not self.is_linked(page_id):
            return None
        other = (self.links.next if forward else self.links.prev)[page_id]
        return None if other >= self.links.capacity else self._page_of(other)

    def _check_unowned(self) -> None:
        """A pool's queue changes only through the pool, which keeps counts and shards in step."""
        if self._records.owned:
            raise errors.PageStateError("this free queue belongs to a PagePool; change it through the pool's methods")

    def _checked_ids(self, ids: Iterable[int], *, want_linked: bool) -> list[int]:
        """``ids`` as a list; raise before any change if an id is foreign (out of range, or not
        one of the pages a queue built from a page list holds), null, duplicated, or in the
        wrong state."""
        ids = page_list(ids, "ids")
        cap, nxt, ref = self.links.capacity, self.links.next, self._records.ref
        sparse = isinstance(ref, Mapping)  # a queue built from pages holds only those ids
        seen: set[int] = set()
        for pid in ids:
            if (type(pid) is not int or not 0 <= pid < cap) or (sparse and pid not in ref):
                raise errors.ForeignPageError(f"page id {describe(pid)} is not a page of this queue")
            if pid == self._null:
                raise errors.NullPageError("the null page is never linked in the free queue")
            if (nxt[pid] != UNLINKED) != want_linked:
                state = "not linked in" if want_linked else "already linked in"
                raise errors.PageStateError(f"page {pid} is {state} the free queue")
            if pid in seen:
                raise errors.PageStateError(f"page {pid} occurs twice in one call")
            seen.add(pid)
        return ids

    # --- eSurge API ----------------------------------------------------------------------

    def popleft(self) -> CachePage:
        """Unlink and return the head page (`OutOfPagesError`, a ValueError, when empty).

        raises: errors.OutOfPagesError, errors.PageStateError
        post: [__return__.page_id, *self.ids()] == __old__.self.ids()
        """
        self._check_unowned()
        if self.links.lengths[0] == 0:
            raise errors.OutOfPagesError("No free pages available")
        return self._page_of(self.links.pop_front(0, 1)[0])

    def popleft_n(self, n: int) -> list[CachePage]:
        """Unlink and return the first ``n`` pages in order."""
        page_of = self._page_of
        return [page_of(pid) for pid in self.popleft_ids(n)]

    def remove(self, page: CachePage) -> None:
        """Unlink ``page`` from the middle of the queue in O(1)."""
        self.remove_id(self._own_id(page))

    def append(self, page: CachePage) -> None:
        """Link ``page`` at the tail."""
        self.append_ids([self._own_id(page)])

    def append_n(self, pages: list[CachePage]) -> None:
        """Link ``pages`` at the tail in the given order."""
        self.append_ids([self._own_id(p) for p in page_list(pages, "pages")])

    def get_all_free_pages(self) -> list[CachePage]:
        """Every free page, head to tail (O(free pages); for tests and introspection)."""
        page_of = self._page_of
        return [page_of(pid) for pid in self.links.ids(0)]

    def _own_id(self, page: CachePage) -> int:
        if not is_view_of(page, self._records):
            raise errors.ForeignPageError(f"{describe(page)} is not a page of this queue")
        return page.page_id

