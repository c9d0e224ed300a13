"""One manager per attention type: which pages a request holds in one cache group, on page ids.

A `SingleTypeCacheManager` owns, for its cache group, each request's ordered page ids
(``req_to_pages``; the null page 0 stands for a page a window no longer needs) and how many
leading pages are registered in the prefix cache (``num_cached_page``). The subclasses differ
in three rules: the prefix-cache hit they accept (`find_longest_cache_hit`), the pages a
request can drop as its context moves on (`skipped_range`), and whether pages are cached.

Keys: a request's content keys are computed at the smallest page size of the manager
(``key_page_size``); a group whose page size is ``k`` times that uses key ``(j + 1) * k - 1``
for its page ``j`` (the key of the last small page it covers), combined with its group id.

Every method works on ints and costs O(pages it touches); none scans the free list or a
request's whole page list. Queries never create entries; only the mutators called by a
coordinator after its plan fits (`save_new_computed_pages`, `allocate_new_pages`) do.

Arguments are checked (typed errors, before any change) for their types, ranges and the
request's presence; what only the caller can know is trusted: that hit pages were touched
in the pool before `save_new_computed_pages`, and that keys are this request's (the
`CacheManager` checks both).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import countOf
from typing import TYPE_CHECKING, cast

from verikv.cache_specs import (
    CacheSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from verikv.dp_sharding import checked_int
from verikv.errors import (
    CacheSpecError,
    InvalidArgumentError,
    OutOfPagesError,
    UnknownRequestError,
    describe,
)
from verikv.hashing import PageHash, PageHashWithGroupId, PageKey

if TYPE_CHECKING:
    from verikv.page_pool import PagePool

NULL_PAGE = 0


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative ``a`` and positive ``b``."""
    return -(-a // b)


def _count(value: object, name: str) -> int:
    """A token count: a plain int >= 0 passes at no cost, anything else through `checked_int`."""
    if type(value) is int and value >= 0:
        return value
    return checked_int(value, name, minimum=0)


def _key_list(keys: object) -> Sequence[PageHash]:
    """``keys`` if it is a sequence of `PageHash` (checked at C speed), else InvalidArgumentError."""
    if ((type(keys) is not list and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence)))
            or countOf(map(type, keys), PageKey) != len(keys)):
        raise InvalidArgumentError(f"keys must be a sequence of PageHash, got {type(keys).__name__}")
    return keys


class SingleTypeCacheManager:
    """Page bookkeeping of one cache group; subclasses add the attention type's rules."""

    #: the spec class this manager handles (exact type, as eSurge's dispatch table)
    # (abstract on purpose: no spec is exactly a CacheSpec, so the base class manages nothing)
    spec_type: type[CacheSpec] = CacheSpec  # type: ignore[type-abstract]
    #: whether `skipped_range` can ever return a non-empty range
    frees_skipped_pages: bool = False
    #: the attention kind's name in the spec (`verikv.spec.manager.GroupLayout`)
    kind: str = ""
    #: a hit of length r found under any max_length is exactly the hit found under max_length r
    #: (true of the prefix, rightmost-window and no-hit rules; not of chunked-local attention,
    #: whose null prefix depends on where max_length falls)
    hit_is_stable: bool = True

    __slots__ = (
        "_stride",
        "key_page_size",
        "kv_cache_group_id",
        "kv_cache_spec",
        "num_cached_page",
        "page_pool",
        "page_size",
        "req_to_pages",
    )

    def __init__(
        self,
        kv_cache_spec: CacheSpec,
        page_pool: PagePool,
        kv_cache_group_id: int,
        key_page_size: int | None = None,
    ) -> None:
        if type(kv_cache_spec) is not self.spec_type:
            raise CacheSpecError(
                f"{type(self).__name__} manages {self.spec_type.__name__}, got {type(kv_cache_spec).__name__}"
            )
        ps = kv_cache_spec.page_size
        key_ps = ps if key_page_size is None else key_page_size
        if ps % key_ps != 0:
            raise CacheSpecError(f"page size {ps} is not a multiple of the key page size {key_ps}")
        self.kv_cache_spec: CacheSpec = kv_cache_spec
        self.page_size: int = ps
        self.kv_cache_group_id: int = kv_cache_group_id
        self.page_pool: PagePool = page_pool
        self.req_to_pages: dict[str, list[int]] = {}
        self.num_cached_page: dict[str, int] = {}
        self.key_page_size: int = key_ps
        self._stride: int = ps // key_ps

    @property
    def layout(self) -> tuple[str, int, int]:
        """``(kind, page_size, span)`` as the spec's group layout (span: window or chunk, else 0)."""
        return (self.kind, self.page_size, 0)

    def _pages_of(self, request_id: object) -> list[int]:
        """The request's page list (`UnknownRequestError` when it has none in this group)."""
        pages = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        if pages is None:
            raise UnknownRequestError(
                f"request {describe(request_id)} holds no pages in group {self.kv_cache_group_id}")
        return pages

    # ---- queries (no state change) -------------------------------------------------------

    def find_longest_cache_hit(
        self,
        keys: Sequence[PageHash],
        max_length: int,
        group_ids: Sequence[int],
        shard: int | None = None,
        dp: int | None = None,
    ) -> tuple[list[int], ...]:
        """Longest hit this attention type accepts within ``max_length`` tokens, one page list
        per group of ``group_ids`` (groups of the same type, looked up together: a position
        hits only if it hits in every group). Pure: no reference count changes.

        The base rule, kept by Mamba (a recurrent state is not a prefix): never a hit."""
        return tuple([] for _ in group_ids)

    def _joint_hit(
        self, key: PageHash, group_ids: Sequence[int], shard: int | None, dp: int | None
    ) -> list[int] | None:
        """The page of ``key`` in each group (inside the DP shard, if any), or None if one misses."""
        lookup = self.page_pool.lookup_id
        out = []
        for gid in group_ids:
            page = lookup(PageHashWithGroupId(key, gid), dp_shard_hint=shard, data_parallel_size=dp)
            if page is None:
                return None
            out.append(page)
        return out

    def _max_hit_pages(self, keys: Sequence[PageHash], max_length: int, group_ids: Sequence[int]) -> int:
        """Pages a hit may span: ``max_length`` tokens, and no more pages than have keys
        (the arguments of a lookup are checked here, before it reads anything)."""
        if type(group_ids) is not tuple or not all(type(g) is int for g in group_ids):
            if isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, Sequence):
                raise InvalidArgumentError(f"group_ids must be a sequence of ints, got {describe(group_ids)}")
            for g in group_ids:
                checked_int(g, "group id", minimum=0)
        return min(_count(max_length, "max_length") // self.page_size, len(_key_list(keys)) // self._stride)

    def skipped_range(self, request_id: str, num_computed_tokens: int) -> tuple[int, int]:
        """Index range ``[start, stop)`` of held pages the request no longer needs once
        ``num_computed_tokens`` tokens are computed (all non-null); empty by default."""
        return (0, 0)

    def get_num_pages_to_allocate(self, request_id: str, num_tokens: int, new_computed_pages: Sequence[int]) -> int:
        """Free-list pages this group consumes to cover ``num_tokens`` slots: the new pages,
        plus the hit pages that are currently free (touching them takes them off the list)."""
        if (isinstance(new_computed_pages, (str, bytes)) or not isinstance(new_computed_pages, Sequence)
                or countOf(map(type, new_computed_pages), int) != len(new_computed_pages)):
            raise InvalidArgumentError(
                f"new_computed_pages must be a sequence of page ids, got {describe(new_computed_pages)}")
        return self._pages_needed(request_id, _count(num_tokens, "num_tokens"), new_computed_pages)

    def _pages_needed(self, request_id: str, num_tokens: int, new_computed_pages: Sequence[int]) -> int:
        """`get_num_pages_to_allocate` for arguments the coordinator has checked."""
        held = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        need = cdiv(num_tokens, self.page_size) - len(new_computed_pages) - (len(held) if held else 0)
        revived = self.page_pool.count_free_ids(new_computed_pages) if new_computed_pages else 0
        return (need if need > 0 else 0) + revived

    def get_num_common_prefix_pages(self, request_id: str, num_running_requests: int) -> int:
        """Leading pages shared by all running requests (cascade attention); 0 unless full attention."""
        return 0

    # ---- mutators (called only once the coordinator's plan fits) --------------------------

    def remove_skipped_pages(self, request_id: str, start: int, stop: int) -> None:
        """Replace pages ``[start, stop)`` (from `skipped_range`) by the null page and free
        them in descending index order, so the oldest page ends nearest the free tail."""
        first, last = _count(start, "start"), _count(stop, "stop")
        if first >= last:
            return
        pages = self._pages_of(request_id)
        if last > len(pages) or NULL_PAGE in pages[first:last]:
            raise InvalidArgumentError(
                f"pages [{first}, {describe(last)}) are not held pages of request {request_id!r} "
                f"(it holds {len(pages)})")
        freed = pages[first:last]
        freed.reverse()
        self.page_pool.free_page_ids(freed)  # (checks the ids before changing anything)
        pages[first:last] = [NULL_PAGE] * (last - first)

    def save_new_computed_pages(self, request_id: str, new_computed_pages: Sequence[int]) -> None:
        """Start the request's page list with its prefix hits (already touched in the pool by
        the caller); they count as cached."""
        if not isinstance(request_id, str) or request_id in self.req_to_pages:
            raise InvalidArgumentError(f"request {describe(request_id)} must be a str id with no pages in this group")
        if isinstance(new_computed_pages, (str, bytes)) or not isinstance(new_computed_pages, Sequence):
            raise InvalidArgumentError(
                f"new_computed_pages must be a sequence of page ids, got {describe(new_computed_pages)}")
        hits = list(new_computed_pages)
        n = self.page_pool.num_pages
        if hits and (countOf(map(type, hits), int) != len(hits) or min(hits) < 0 or max(hits) >= n):
            raise InvalidArgumentError(f"hits {describe(hits)} are not page ids of this pool (0..{n - 1})")
        self._save_hits(request_id, hits)

    def _save_hits(self, request_id: str, hits: Sequence[int]) -> None:
        """`save_new_computed_pages` for arguments the coordinator has checked."""
        self.req_to_pages[request_id] = list(hits)
        self.num_cached_page[request_id] = len(hits)

    def allocate_new_pages(
        self, request_id: str, num_tokens: int, shard: int | None = None, dp: int | None = None
    ) -> list[int]:
        """Take pages from the pool (or the DP shard) until ``num_tokens`` slots are covered;
        returns the new ids (possibly none)."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        pages = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        if pages is None and not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        need = -(-num_tokens // self.page_size) - (0 if pages is None else len(pages))  # cdiv, inlined
        if need > self.page_pool.num_pages:
            raise OutOfPagesError(f"{describe(num_tokens)} tokens need more pages than the pool has")
        # the pool raises before changing anything; the entry is created only after it answered
        new = self.page_pool.get_new_page_ids(need, dp_shard_hint=shard, data_parallel_size=dp) if need > 0 else []
        if pages is None:
            self.req_to_pages[request_id] = new if need > 0 else []
            self.num_cached_page[request_id] = 0
            return list(new)
        pages.extend(new)
        return new

    def cache_pages(self, request_id: str, keys: Sequence[PageHash], num_tokens: int) -> None:
        """Register the request's full pages up to ``num_tokens`` tokens in the prefix cache.

        ``num_cached_page`` never decreases (a lower count is a no-op); null placeholders are
        skipped and never hashed. Pages past ``num_cached_page`` were allocated fresh (their old
        key was evicted when they were popped), so each gets its first key here. ``keys`` must
        cover the last full page (the caller extends the request's key list first).
        """
        if type(num_tokens) is not int or num_tokens < 0:  # (inline checks: this runs once per filled page)
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        num_full = num_tokens // self.page_size
        cached = self.num_cached_page.get(request_id) if isinstance(request_id, str) else None
        if cached is None:
            self._pages_of(request_id)  # raises UnknownRequestError
        # both maps have the same keys, so _pages_of raised above unless there is a count
        cached = cast(int, cached)
        if num_full <= cached:
            return
        pages = self.req_to_pages[request_id]
        if type(keys) is not list and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence)):
            raise InvalidArgumentError(f"keys must be a sequence of PageHash, got {type(keys).__name__}")
        if num_full > len(pages) or len(keys) < num_full * self._stride:
            raise InvalidArgumentError(
                f"caching {describe(num_full)} pages needs as many held pages and {describe(num_full * self._stride)} "
                f"keys; request {request_id!r} has {len(pages)} pages and {len(keys)} keys")
        stride = self._stride
        if countOf(map(type, keys[cached * stride:num_full * stride]), PageKey) != (num_full - cached) * stride:
            _key_list(keys[cached * stride:num_full * stride])  # only the keys read here: raises
        cache = self.page_pool.cache_page_id
        gid = self.kv_cache_group_id
        new_key = tuple.__new__  # PageHashWithGroupId(...) without the NamedTuple's Python __new__
        for j in range(cached, num_full):
            page = pages[j]
            if page != NULL_PAGE:
                cache(page, new_key(PageHashWithGroupId, (keys[(j + 1) * stride - 1], gid)))
        self.num_cached_page[request_id] = num_full

    def keys_needed(self, num_tokens: int) -> int:
        """How many request keys `cache_pages` reads to cache up to ``num_tokens`` tokens."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        return (num_tokens // self.page_size) * self._stride

    def free(self, request_id: str) -> None:
        """Release the request's pages, last page first (chain tails are evicted first), and
        forget the request. No-op for a request without pages."""
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        pages = self.req_to_pages.pop(request_id, None)
        self.num_cached_page.pop(request_id, None)
        if pages:
            if NULL_PAGE in pages:  # window placeholders: only windowed groups have them
                pages = [p for p in pages if p != NULL_PAGE]
            pages.reverse()  # the popped list is ours: reverse in place, no copy
            if pages:
                self.page_pool.free_page_ids(pages)


class FullAttentionManager(SingleTypeCacheManager):
    """Full attention: a request holds a page for every ``page_size`` tokens; hits are prefixes."""

    spec_type: type[CacheSpec] = FullAttentionSpec
    kind = "full"
    __slots__ = ()

    def find_longest_cache_hit(
        self,
        keys: Sequence[PageHash],
        max_length: int,
        group_ids: Sequence[int],
        shard: int | None = None,
        dp: int | None = None,
    ) -> tuple[list[int], ...]:
        """Longest run of consecutive hits from page 0 (the first-inserted page per key)."""
        n = self._max_hit_pages(keys, max_length, group_ids)
        stride = self._stride
        if len(group_ids) == 1:  # the pool pairs each key with the group id, up to the first miss
            return (self.page_pool.lookup_run_ids(keys[stride - 1:n * stride:stride], group_id=group_ids[0],
                                                  dp_shard_hint=shard, data_parallel_size=dp),)
        result: tuple[list[int], ...] = tuple([] for _ in group_ids)
        for j in range(n):
            found = self._joint_hit(keys[(j + 1) * stride - 1], group_ids, shard, dp)
            if found is None:
                break
            for lst, page in zip(result, found):
                lst.append(page)
        return result

    def get_num_common_prefix_pages(self, request_id: str, num_running_requests: int) -> int:
        """Leading pages held by at least ``num_running_requests`` requests (eSurge's ``>=``)."""
        checked_int(num_running_requests, "num_running_requests", minimum=1)
        ref_count = self.page_pool.ref_count
        count = 0
        for page in self._pages_of(request_id):
            if ref_count(page) < num_running_requests:
                break
            count += 1
        return count


class SlidingWindowManager(SingleTypeCacheManager):
    """Sliding window ``sw``: only the last ``sw`` tokens are attended, older pages are dropped."""

    spec_type: type[CacheSpec] = SlidingWindowSpec
    frees_skipped_pages = True
    kind = "sliding"
    __slots__ = ("sliding_window",)

    def __init__(
        self, kv_cache_spec: CacheSpec, page_pool: PagePool, kv_cache_group_id: int, key_page_size: int | None = None
    ) -> None:
        super().__init__(kv_cache_spec, page_pool, kv_cache_group_id, key_page_size)
        self.sliding_window: int = kv_cache_spec.sliding_window  # type: ignore[attr-defined]

    @property
    def layout(self) -> tuple[str, int, int]:
        """``("sliding", page_size, window)``."""
        return (self.kind, self.page_size, self.sliding_window)

    def find_longest_cache_hit(
        self,
        keys: Sequence[PageHash],
        max_length: int,
        group_ids: Sequence[int],
        shard: int | None = None,
        dp: int | None = None,
    ) -> tuple[list[int], ...]:
        """Rightmost run of ``cdiv(sw - 1, ps)`` consecutive hits (earlier pages become null
        placeholders); if no such run exists, the run of hits starting at page 0."""
        need = cdiv(self.sliding_window - 1, self.page_size)
        n = self._max_hit_pages(keys, max_length, group_ids)
        stride = self._stride
        result = tuple([NULL_PAGE] * n for _ in group_ids)
        run = 0
        for i in range(n - 1, -1, -1):
            found = self._joint_hit(keys[(i + 1) * stride - 1], group_ids, shard, dp)
            if found is None:
                run = 0
                continue
            for lst, page in zip(result, found):
                lst[i] = page
            run += 1
            if run >= need:
                for lst in result:
                    del lst[i + run :]
                return result
        for lst in result:
            del lst[run:]
        return result

    def skipped_range(self, request_id: str, num_computed_tokens: int) -> tuple[int, int]:
        """Pages entirely before the window of the next token: index < (n - sw + 1) // ps."""
        pages = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        first_kept = (_count(num_computed_tokens, "num_computed_tokens") - self.sliding_window + 1) // self.page_size
        if not pages or first_kept <= 0:
            return (0, 0)
        stop = min(first_kept, len(pages))
        start = stop
        while start > 0 and pages[start - 1] != NULL_PAGE:
            start -= 1
        return (start, stop)


class ChunkedLocalAttentionManager(SingleTypeCacheManager):
    """Chunked local attention: tokens attend only within their chunk of ``C`` tokens."""

    spec_type: type[CacheSpec] = ChunkedLocalAttentionSpec
    frees_skipped_pages = True
    kind = "chunked"
    hit_is_stable = False
    __slots__ = ("attention_chunk_size",)

    def __init__(
        self, kv_cache_spec: CacheSpec, page_pool: PagePool, kv_cache_group_id: int, key_page_size: int | None = None
    ) -> None:
        super().__init__(kv_cache_spec, page_pool, kv_cache_group_id, key_page_size)
        self.attention_chunk_size: int = kv_cache_spec.attention_chunk_size  # type: ignore[attr-defined]

    @property
    def layout(self) -> tuple[str, int, int]:
        """``("chunked", page_size, chunk)``."""
        return (self.kind, self.page_size, self.attention_chunk_size)

    def find_longest_cache_hit(
        self,
        keys: Sequence[PageHash],
        max_length: int,
        group_ids: Sequence[int],
        shard: int | None = None,
        dp: int | None = None,
    ) -> tuple[list[int], ...]:
        """Null placeholders for the pages before the current chunk, then consecutive hits."""
        n = self._max_hit_pages(keys, max_length, group_ids)
        chunk = self.attention_chunk_size
        start_page = ((max_length // chunk) * chunk) // self.page_size if max_length > 0 else 0
        stride = self._stride
        result = tuple([NULL_PAGE] * start_page for _ in group_ids)
        for j in range(start_page, n):
            found = self._joint_hit(keys[(j + 1) * stride - 1], group_ids, shard, dp)
            if found is None:
                break
            for lst, page in zip(result, found):
                lst.append(page)
        return result

    def skipped_range(self, request_id: str, num_computed_tokens: int) -> tuple[int, int]:
        """Pages before the current chunk: index < ((n // C) * C) // ps."""
        pages = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        chunk = self.attention_chunk_size
        first_kept = ((_count(num_computed_tokens, "num_computed_tokens") // chunk) * chunk) // self.page_size
        if not pages or first_kept <= 0:
            return (0, 0)
        stop = min(first_kept, len(pages))
        start = stop
        while start > 0 and pages[start - 1] != NULL_PAGE:
            start -= 1
        return (start, stop)


class MambaManager(SingleTypeCacheManager):
    """Mamba (recurrent state): one page per request holding the state; never prefix-cached."""

    spec_type: type[CacheSpec] = MambaSpec
    kind = "mamba"
    __slots__ = ()

    def cache_pages(self, request_id: str, keys: Sequence[PageHash], num_tokens: int) -> None:
        """A recurrent state is not a token prefix: nothing is cached."""

    def keys_needed(self, num_tokens: int) -> int:
        """Mamba pages are never cached, so they need no keys."""
        return 0


class MambaAlignManager(MambaManager):
    """Mamba in align mode (vLLM's ``mamba_cache_mode="align"``): states at page-aligned
    positions are cached and hit (`verikv.spec.manager`, "Mamba in align mode").

    A request's list has one entry per page of tokens; only state pages are real, page ``j``
    standing for the state after ``(j + 1) * page_size`` tokens. An allocation that ends at
    ``T`` tokens puts the state in page ``cdiv(T, page_size) - 1``: a new page after null
    placeholders, or the list's last page when the state stays in it. The page holding the
    state a step starts from is kept for that step (the engine copies from it); older state
    pages are freed, keeping their keys. A state page is keyed only when the request's computed
    count ends exactly at its end (`cache_states`). ``_real`` lists, per request, the indices of
    its real pages (few: the state pages), so no call scans the placeholders.
    """

    kind = "mamba_align"
    frees_skipped_pages = True
    __slots__ = ("_real",)

    def __init__(
        self, kv_cache_spec: CacheSpec, page_pool: PagePool, kv_cache_group_id: int, key_page_size: int | None = None
    ) -> None:
        super().__init__(kv_cache_spec, page_pool, kv_cache_group_id, key_page_size)
        self._real: dict[str, list[int]] = {}

    def find_longest_cache_hit(
        self,
        keys: Sequence[PageHash],
        max_length: int,
        group_ids: Sequence[int],
        shard: int | None = None,
        dp: int | None = None,
    ) -> tuple[list[int], ...]:
        """The right-most cached state within ``max_length`` tokens, null placeholders before it
        (it restores the whole prefix); no cached state: no hit."""
        n = self._max_hit_pages(keys, max_length, group_ids)
        stride = self._stride
        for j in range(n - 1, -1, -1):
            found = self._joint_hit(keys[(j + 1) * stride - 1], group_ids, shard, dp)
            if found is not None:
                return tuple([NULL_PAGE] * j + [page] for page in found)
        return tuple([] for _ in group_ids)

    def keys_needed(self, num_tokens: int) -> int:
        """State pages are keyed like attention pages: key ``(j + 1) * stride - 1`` for page ``j``."""
        return SingleTypeCacheManager.keys_needed(self, num_tokens)

    def skipped_range(self, request_id: str, num_computed_tokens: int) -> tuple[int, int]:
        """The real pages before the one holding the state after ``num_computed_tokens`` tokens
        (the state the next step starts from), as the index range they span."""
        cut = cdiv(_count(num_computed_tokens, "num_computed_tokens"), self.page_size) - 1
        real = self._real.get(request_id) if isinstance(request_id, str) else None
        if not real or real[0] >= cut:
            return (0, 0)
        return (real[0], max(j for j in real if j < cut) + 1)

    def remove_skipped_pages(self, request_id: str, start: int, stop: int) -> None:
        """Free the real pages in ``[start, stop)`` (placeholders between them are skipped),
        last first, and replace them by the null page."""
        first, last = _count(start, "start"), _count(stop, "stop")
        if first >= last:
            return
        pages = self._pages_of(request_id)
        if last > len(pages):
            raise InvalidArgumentError(
                f"pages [{first}, {last}) are not pages of request {request_id!r} (it holds {len(pages)})")
        real = self._real[request_id]
        gone = [j for j in real if first <= j < last]
        self.page_pool.free_page_ids([pages[j] for j in reversed(gone)])  # (checks the ids first)
        for j in gone:
            pages[j] = NULL_PAGE
        self._real[request_id] = [j for j in real if not first <= j < last]

    def _pages_needed(self, request_id: str, num_tokens: int, new_computed_pages: Sequence[int]) -> int:
        """One page when the state after ``num_tokens`` tokens moves past the list's last page,
        plus the hit pages that are currently free."""
        held = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        length = len(held) if held is not None else len(new_computed_pages)
        revived = self.page_pool.count_free_ids(new_computed_pages) if new_computed_pages else 0
        return (1 if cdiv(num_tokens, self.page_size) > length else 0) + revived

    def check_state_moves_forward(self, request_id: str, num_computed_tokens: int, state_end: int) -> None:
        """`InvalidArgumentError` unless the state after ``state_end`` tokens goes to a new page,
        or stays in the list's last page, held and uncached, once the pages before the state
        ``num_computed_tokens`` leaves are freed (a cached state is never overwritten)."""
        pages = self.req_to_pages.get(request_id) if isinstance(request_id, str) else None
        if not pages:
            return
        target = cdiv(state_end, self.page_size)
        kept = cdiv(num_computed_tokens, self.page_size) - 1 <= len(pages) - 1
        in_place = (target == len(pages) and kept and pages[-1] != NULL_PAGE
                    and self.page_pool.key_of(pages[-1]) is None)
        if target < len(pages) or (target == len(pages) and not in_place):
            raise InvalidArgumentError(
                f"request {request_id!r}: the Mamba state after {state_end} tokens would overwrite an earlier or "
                f"cached state (group {self.kv_cache_group_id} holds {len(pages)} pages; computed tokens went back?)")

    def _save_hits(self, request_id: str, hits: Sequence[int]) -> None:
        super()._save_hits(request_id, hits)
        self._real[request_id] = [len(hits) - 1] if hits else []

    def allocate_new_pages(
        self, request_id: str, num_tokens: int, shard: int | None = None, dp: int | None = None
    ) -> list[int]:
        """The state after ``num_tokens`` tokens: a new page after null placeholders when it moves
        past the list's last page; else none (the state stays in place)."""
        num_tokens = _count(num_tokens, "num_tokens")
        if not isinstance(request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(request_id).__name__}")
        pages = self.req_to_pages.get(request_id)
        target = cdiv(num_tokens, self.page_size)
        held = 0 if pages is None else len(pages)
        new = self.page_pool.get_new_page_ids(1, dp_shard_hint=shard, data_parallel_size=dp) if target > held else []
        if pages is None:
            pages = self.req_to_pages[request_id] = []
            self.num_cached_page[request_id] = 0
            self._real[request_id] = []
        if new:
            pages.extend([NULL_PAGE] * (target - held - 1))
            pages.append(new[0])
            self._real[request_id].append(target - 1)
        return new

    def cache_states(
        self, request_id: str, keys: Sequence[PageHash], num_tokens: int, num_computed_tokens: int
    ) -> None:
        """Key the state page of the request's computed count ``c`` when ``c`` ends a page and
        is within ``num_tokens`` (that step is over: the state is complete); pages up to ``c``
        count as cached. Null placeholders and keyed pages are never (re-)keyed."""
        n, c = _count(num_tokens, "num_tokens"), _count(num_computed_tokens, "num_computed_tokens")
        pages = self._pages_of(request_id)
        cached = self.num_cached_page[request_id]
        full = n // self.page_size
        if full > len(pages) or len(keys) < full * self._stride:
            raise InvalidArgumentError(
                f"caching {n} tokens needs {full} held pages and {full * self._stride} keys; request "
                f"{request_id!r} has {len(pages)} pages and {len(keys)} keys")
        j = c // self.page_size - 1
        if c % self.page_size == 0 and 0 <= j and cached <= j and c <= n:
            page = pages[j]
            if page != NULL_PAGE and self.page_pool.key_of(page) is None:
                key = keys[(j + 1) * self._stride - 1]
                if type(key) is not PageKey:
                    _key_list([key])  # raises
                self.page_pool.cache_page_id(page, PageHashWithGroupId(key, self.kv_cache_group_id))
        self.num_cached_page[request_id] = max(cached, min(full, c // self.page_size))

    def free(self, request_id: str) -> None:
        super().free(request_id)
        if isinstance(request_id, str):
            self._real.pop(request_id, None)


#: attention spec type -> manager class (exact types, as eSurge's ``spec_manager_map``)
spec_manager_map: dict[type[CacheSpec], type[SingleTypeCacheManager]] = {
    FullAttentionSpec: FullAttentionManager,
    SlidingWindowSpec: SlidingWindowManager,
    ChunkedLocalAttentionSpec: ChunkedLocalAttentionManager,
    MambaSpec: MambaManager,
}


def get_manager_for_kv_cache_spec(
    kv_cache_spec: CacheSpec, page_pool: PagePool, kv_cache_group_id: int, key_page_size: int | None = None,
    mamba_cache_mode: str = "none",
) -> SingleTypeCacheManager:
    """The manager for ``kv_cache_spec``'s exact type (`CacheSpecError` for an unknown type);
    a Mamba group gets `MambaAlignManager` when ``mamba_cache_mode == "align"``."""
    cls = spec_manager_map.get(type(kv_cache_spec))
    if cls is None:
        raise CacheSpecError(f"no cache manager handles {type(kv_cache_spec).__name__}")
    if cls is MambaManager and mamba_cache_mode == "align":
        cls = MambaAlignManager
    return cls(kv_cache_spec, page_pool, kv_cache_group_id, key_page_size)
