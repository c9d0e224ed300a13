"""One manager per attention type: the rules of one cache group, applied to a request's page list.

A `SingleTypeCacheManager` holds no per-request state: the coordinator's `RequestState` record
owns each request's page list per group (ordered ids; the null page 0 stands for a page a
window no longer needs) and how many leading pages are registered in the prefix cache, and
passes the group's list (and count) in. The subclasses differ in three rules: the prefix-cache
hit they accept (`_longest_hit`, behind `find_longest_cache_hit`), the pages a request can
drop as its context moves on (`skipped_range`), and whether pages are cached.

Keys: a request's content keys are computed at the smallest page size of the manager
(``key_page_size``); a group whose page size is ``k`` times that uses key ``(j + 1) * k - 1``
for its page ``j`` (the key of the last small page it covers), composed with its group id
(`group_key`, `verikv.hashing.group_pool_key`: group 0 stores the key itself) into the key the
pool stores. The pool never sees a group id.

Every method works on ints and costs O(pages it touches); none scans the free list or a
request's whole page list. Queries change nothing; the mutators (`remove_skipped_pages`,
`allocate_new_pages`, `cache_pages`, `free`) are called by a coordinator once its plan fits.

Arguments are checked (typed errors, before any change) for their types and ranges; what only
the caller can know is trusted: that the page list is the request's, and that keys are the
request's (the coordinator and `CacheManager` check both).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import countOf
from typing import TYPE_CHECKING

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
    describe,
)
from verikv.free_queue import NULL_PAGE_ID as NULL_PAGE
from verikv.hashing import PageHashWithGroupId, PageKey, PoolKey, group_pool_key

if TYPE_CHECKING:
    from verikv.page_pool import PagePool

#: runs of at least this many new full pages are registered with one `PagePool.cache_page_ids`
_BATCH_FROM = 32


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative ``a`` and positive ``b``."""
    return -(-a // b)


def _count(value: object, name: str) -> int:
    """A token count: a plain int >= 0 passes at no cost, anything else through `checked_int`."""
    if type(value) is int and value >= 0:
        return value
    return checked_int(value, name, minimum=0)


def _round_down(pages: int, per: int) -> int:
    """``pages`` cut down to a multiple of ``per`` (pages per hit unit)."""
    return pages // per * per


def _key_list(keys: object) -> Sequence[PageKey]:
    """``keys`` if it is a sequence of `PageKey` (checked at C speed), else InvalidArgumentError."""
    if ((type(keys) is not list and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence)))
            or countOf(map(type, keys), PageKey) != len(keys)):
        raise InvalidArgumentError(f"keys must be a sequence of PageKey, got {type(keys).__name__}")
    return keys


def _page_list(pages: object) -> list[int]:
    """``pages`` if it is a request's page list (a list), else InvalidArgumentError."""
    if type(pages) is not list:
        raise InvalidArgumentError(f"pages must be a request's page list, got {type(pages).__name__}")
    return pages


class SingleTypeCacheManager:
    """The rules of one cache group; subclasses add the attention type's rules."""

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
    #: the spec field holding the attention type's span (window or chunk), copied to the
    #: manager's attribute of the same name; None when the type has no span
    span_field: str | None = None

    __slots__ = (
        "_stride",
        "key_page_size",
        "kv_cache_group_id",
        "kv_cache_spec",
        "page_pool",
        "page_size",
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
        self.key_page_size: int = key_ps
        self._stride: int = ps // key_ps
        if self.span_field is not None:
            setattr(self, self.span_field, getattr(kv_cache_spec, self.span_field))

    @property
    def layout(self) -> tuple[str, int, int]:
        """``(kind, page_size, span)`` as the spec's group layout (span: window or chunk, else 0)."""
        return (self.kind, self.page_size, 0 if self.span_field is None else getattr(self, self.span_field))

    def group_key(self, key: PageKey) -> PoolKey:
        """The pool key of a page of this group holding the content ``key``."""
        return group_pool_key(key, self.kv_cache_group_id)

    def group_keys(self, keys: Sequence[PageKey]) -> list[PoolKey]:
        """`group_key` of each of ``keys``, in order (C-level: no per-key Python frame)."""
        gid = self.kv_cache_group_id
        if gid == 0:
            return list(keys)
        return list(map(tuple.__new__, repeat(PageHashWithGroupId), zip(keys, repeat(gid))))

    def key_index(self, page_index: int) -> int:
        """Index in the request's key list of the key of this group's page ``page_index``."""
        return (page_index + 1) * self._stride - 1

    # ---- queries (no state change) -------------------------------------------------------

    def find_longest_cache_hit(
        self,
        keys: Sequence[PageKey],
        max_length: int,
        group_ids: Sequence[int],
        shard: int | None = None,
        dp: int | None = None,
    ) -> tuple[list[int], ...]:
        """Longest hit this attention type accepts within ``max_length`` tokens, one page list
        per group of ``group_ids`` (groups of the same type, looked up together: a position
        hits only if it hits in every group). Pure: no reference count changes.

        The arguments are checked here; the type's rule (`_longest_hit`) then reads only the
        ``n`` pages a hit may span."""
        return self._longest_hit(keys, self._max_hit_pages(keys, max_length, group_ids), max_length, group_ids,
                                 shard, dp)

    def _longest_hit(self, keys: Sequence[PageKey], n: int, max_length: int, group_ids: Sequence[int],
                     shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """The hit rule over the first ``n`` pages. The base rule, kept by Mamba (a recurrent
        state is not a prefix): never a hit."""
        return tuple([] for _ in group_ids)

    def _hit_run(self, hits: tuple[list[int], ...], keys: Sequence[PageKey], start: int, stop: int,
                 group_ids: Sequence[int], shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """``hits`` (one list per group) with the joint hits of pages ``start, start + 1, ...``
        appended, up to the first miss or page ``stop``."""
        stride = self._stride
        for j in range(start, stop):
            found = self._joint_hit(keys[(j + 1) * stride - 1], group_ids, shard, dp)
            if found is None:
                break
            for lst, page in zip(hits, found):
                lst.append(page)
        return hits

    def _joint_hit(
        self, key: PageKey, group_ids: Sequence[int], shard: int | None, dp: int | None
    ) -> list[int] | None:
        """The page of ``key`` in each group (inside the DP shard, if any), or None if one misses."""
        lookup = self.page_pool.lookup_id
        out = []
        for gid in group_ids:
            page = lookup(group_pool_key(key, gid), dp_shard_hint=shard, data_parallel_size=dp)
            if page is None:
                return None
            out.append(page)
        return out

    def _max_hit_pages(self, keys: Sequence[PageKey], max_length: int, group_ids: Sequence[int]) -> int:
        """Pages a hit may span: ``max_length`` tokens, and no more pages than have keys
        (the arguments of a lookup are checked here, before it reads anything)."""
        if type(group_ids) is not tuple or not all(type(g) is int and g >= 0 for g in group_ids):
            if isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, Sequence):
                raise InvalidArgumentError(f"group_ids must be a sequence of ints, got {describe(group_ids)}")
            for g in group_ids:
                checked_int(g, "group id", minimum=0)
        return min(_count(max_length, "max_length") // self.page_size, len(_key_list(keys)) // self._stride)

    def find_vllm_eagle_hit(self, keys: Sequence[PageKey], max_length: int, group_ids: Sequence[int], unit: int,
                            drop: bool, shard: int | None = None, dp: int | None = None) -> tuple[list[int], ...]:
        """vLLM 0.33's lookup in this group (`verikv.vllm_eagle`): a hit within ``max_length``
        tokens that ends on a multiple of ``unit`` tokens (a multiple of the page size) and,
        when ``drop``, has its last matched page dropped. Full attention's rule here (and
        Mamba's without caching, which never hits): the run of hits from page 0, one page fewer
        when ``drop``, cut down to a multiple of ``unit``. Not for chunked-local attention
        (never combined with EAGLE). Pure."""
        hits = self.find_longest_cache_hit(keys, max_length, group_ids, shard, dp)
        found = len(hits[0])
        keep = _round_down(found - 1 if drop and found else found, unit // self.page_size)
        for lst in hits:
            del lst[keep:]
        return hits

    def hit_mismatch(self, hits: Sequence[int], keys: Sequence[PageKey]) -> int | None:
        """The first position of ``hits`` (page ids: the pool checks their range) whose page does
        not hold the request key of that position in this group, or None when every one does.
        Null placeholders are skipped. Pure."""
        stored = self.page_pool.keys_of_ids(hits)
        stride, num_keys = self._stride, len(keys)
        m = len(hits)
        if stride == 1 and m <= num_keys and stored == self.group_keys(keys[:m]):
            return None  # every page holds this request's key at its position (C speed)
        for j, page in enumerate(hits):
            k = (j + 1) * stride - 1
            if page != NULL_PAGE and (k >= num_keys or stored[j] != self.group_key(keys[k])):
                return j
        return None

    def skipped_range(self, pages: Sequence[int], num_computed_tokens: int) -> tuple[int, int]:
        """Index range ``[start, stop)`` of ``pages`` (a request's list) the request no longer
        needs once ``num_computed_tokens`` tokens are computed (all non-null); empty by default."""
        return (0, 0)

    def get_num_pages_to_allocate(self, pages: Sequence[int], num_tokens: int,
                                  new_computed_pages: Sequence[int]) -> int:
        """Free-list pages this group consumes to cover ``num_tokens`` slots for a request
        holding ``pages``: the new pages, plus the hit pages that are currently free
        (touching them takes them off the list)."""
        if (isinstance(new_computed_pages, (str, bytes)) or not isinstance(new_computed_pages, Sequence)
                or countOf(map(type, new_computed_pages), int) != len(new_computed_pages)):
            raise InvalidArgumentError(
                f"new_computed_pages must be a sequence of page ids, got {describe(new_computed_pages)}")
        return self.pages_needed(pages, _count(num_tokens, "num_tokens"), new_computed_pages)

    def pages_needed(self, pages: Sequence[int], num_tokens: int, new_computed_pages: Sequence[int]) -> int:
        """`get_num_pages_to_allocate` for arguments the coordinator has checked."""
        revived = self.page_pool.count_free_ids(new_computed_pages) if new_computed_pages else 0
        return self.new_pages(len(pages), num_tokens, len(new_computed_pages)) + revived

    def new_pages(self, num_held: int, num_tokens: int, num_hits: int) -> int:
        """Pages a request holding ``num_held`` pages takes from the free list to cover
        ``num_tokens`` slots after ``num_hits`` hit pages, the hits themselves not counted (the
        free ones among them leave the free list too: `pages_needed`)."""
        need = -(-num_tokens // self.page_size) - num_held - num_hits  # (cdiv, inlined: once per group and step)
        return need if need > 0 else 0

    def get_num_common_prefix_pages(self, pages: Sequence[int], num_running_requests: int) -> int:
        """Leading pages shared by all running requests (cascade attention); 0 unless full attention."""
        return 0

    # ---- mutators (called only once the coordinator's plan fits) --------------------------

    def remove_skipped_pages(self, pages: list[int], start: int, stop: int) -> None:
        """Replace ``pages[start:stop]`` (from `skipped_range`) by the null page and free them
        in descending index order, so the oldest page ends nearest the free tail."""
        first, last = _count(start, "start"), _count(stop, "stop")
        if first >= last:
            return
        if last > len(_page_list(pages)) or NULL_PAGE in pages[first:last]:
            raise InvalidArgumentError(
                f"pages [{first}, {describe(last)}) are not held pages (the request holds {len(pages)})")
        freed = pages[first:last]
        freed.reverse()
        self.page_pool.free_page_ids(freed)  # (checks the ids before changing anything)
        pages[first:last] = [NULL_PAGE] * (last - first)

    def allocate_new_pages(
        self, pages: list[int], num_tokens: int, shard: int | None = None, dp: int | None = None
    ) -> list[int]:
        """Take pages from the pool (or the DP shard) until ``pages`` covers ``num_tokens``
        slots; appends them to ``pages`` and returns them (possibly none)."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        need = -(-num_tokens // self.page_size) - len(_page_list(pages))  # cdiv, inlined
        if need > self.page_pool.num_pages:
            raise OutOfPagesError(f"{describe(num_tokens)} tokens need more pages than the pool has")
        return self.take_new_pages(pages, need, shard, dp) if need > 0 else []

    def take_new_pages(self, pages: list[int], count: int, shard: int | None = None, dp: int | None = None
                       ) -> list[int]:
        """Take ``count`` pages (``new_pages`` planned them) from the pool, or the DP shard, and
        append them to ``pages``; returns them."""
        pool = self.page_pool
        new = pool.get_new_page_ids(count) if shard is None else pool.get_new_page_ids(
            count, dp_shard_hint=shard, data_parallel_size=dp)
        pages += new
        return new

    def cache_pages(self, pages: list[int], num_cached: int, keys: Sequence[PageKey], num_tokens: int) -> int:
        """Register the full pages of ``pages`` up to ``num_tokens`` tokens in the prefix cache,
        the first ``num_cached`` being registered already; returns the new cached count.

        The count never decreases (a lower count is a no-op); null placeholders are skipped and
        never hashed. Pages past ``num_cached`` were allocated fresh (their old key was evicted
        when they were popped), so each gets its first key here. ``keys`` must cover the last
        full page (the caller extends the request's key list first).
        """
        num_full = self._full_to_cache(pages, num_cached, keys, num_tokens)
        if num_full == num_cached + 1 and pages[num_cached] != NULL_PAGE:  # one page (a decode step's): no run
            self.page_pool.cache_page_id(pages[num_cached],  # (as `_register`)
                                         group_pool_key(keys[num_full * self._stride - 1], self.kv_cache_group_id))
        elif num_full > num_cached:
            self._register(pages, keys, num_cached, num_full)
        return num_full

    def cache_pages_batch(self, page_lists: list[list[int]], num_cached: list[int], keys: list[list[PageKey]],
                          num_tokens: list[int]) -> list[int]:
        """`cache_pages` for several requests (``page_lists[i]`` with ``num_cached[i]``,
        ``keys[i]``, ``num_tokens[i]``; distinct lists of held pages), every argument checked
        before the first page is registered; then each request's new pages are registered as
        its own call registers them (the same pool calls in the same order, so the pool ends as
        after the calls in order, its key version included). Returns the new cached counts.
        """
        counts = list(map(self._full_to_cache, page_lists, num_cached, keys, num_tokens))
        cache, gid, stride = self.page_pool.cache_page_id, self.kv_cache_group_id, self._stride
        for pages, first, request_keys, stop in zip(page_lists, num_cached, keys, counts):
            if stop == first + 1 and pages[first] != NULL_PAGE:  # the page a decode step filled
                cache(pages[first], group_pool_key(request_keys[stop * stride - 1], gid))  # (as `_register`)
            elif stop > first:
                self._register(pages, request_keys, first, stop)
        return counts

    def _full_to_cache(self, pages: list[int], num_cached: int, keys: Sequence[PageKey], num_tokens: int) -> int:
        """The cached count after `cache_pages` (pure): ``num_cached``, or the full pages of
        ``num_tokens`` tokens when more, their pages held and their keys checked."""
        if type(num_tokens) is not int or num_tokens < 0:  # (inline checks: this runs once per filled page)
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        num_full = num_tokens // self.page_size
        if num_full <= num_cached:
            return num_cached
        if type(keys) is not list and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence)):
            raise InvalidArgumentError(f"keys must be a sequence of PageKey, got {type(keys).__name__}")
        stride = self._stride
        if type(pages) is not list:
            _page_list(pages)  # raises
        if num_full > len(pages) or len(keys) < num_full * stride:
            raise InvalidArgumentError(
                f"caching {describe(num_full)} pages needs as many held pages and {describe(num_full * stride)} "
                f"keys; the request has {len(pages)} pages and {len(keys)} keys")
        if countOf(map(type, keys[num_cached * stride:num_full * stride]), PageKey) != (num_full - num_cached) * stride:
            _key_list(keys[num_cached * stride:num_full * stride])  # only the keys read here: raises
        return num_full

    def _register(self, pages: list[int], keys: Sequence[PageKey], first: int, stop: int) -> None:
        """Register ``pages[first:stop]`` (null placeholders skipped) under their group keys.

        A long run goes to the pool as one batch (all or nothing); a short one, such as the one
        page a decode step fills, as per-page calls: below `_BATCH_FROM` pages the batch's fixed
        cost is more than it saves per page (measured: docs/performance.md).
        """
        stride = self._stride
        if stop - first < _BATCH_FROM:
            cache, gid = self.page_pool.cache_page_id, self.kv_cache_group_id
            for j in range(first, stop):
                if pages[j] != NULL_PAGE:
                    cache(pages[j], group_pool_key(keys[(j + 1) * stride - 1], gid))
            return
        ids = pages[first:stop]
        group_keys = self.group_keys(keys[(first + 1) * stride - 1:stop * stride:stride])
        if NULL_PAGE in ids:  # window placeholders are never hashed
            group_keys = list(compress(group_keys, ids))  # (a real page id is truthy)
            ids = [page for page in ids if page != NULL_PAGE]
        self.page_pool.cache_page_ids(ids, group_keys)

    def keys_needed(self, num_tokens: int) -> int:
        """How many request keys `cache_pages` reads to cache up to ``num_tokens`` tokens."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = checked_int(num_tokens, "num_tokens", minimum=0)
        return (num_tokens // self.page_size) * self._stride

    def free(self, pages: list[int]) -> None:
        """Release ``pages`` (a request's list, which the caller gives up), last page first, so
        chain tails are evicted first; null placeholders (windowed groups) are skipped. Another
        group's list holds no null page, so it is not searched for one (a pass over a long
        list): the pool refuses the null page (`NullPageError`) if one is there by mistake."""
        pages = _page_list(pages)
        if self.frees_skipped_pages and NULL_PAGE in pages:  # window placeholders
            pages = [p for p in pages if p != NULL_PAGE]
        pages.reverse()  # the list is the caller's to give up: reverse in place, no copy
        if pages:
            self.page_pool.free_page_ids(pages)


class FullAttentionManager(SingleTypeCacheManager):
    """Full attention: a request holds a page for every ``page_size`` tokens; hits are prefixes."""

    spec_type: type[CacheSpec] = FullAttentionSpec
    kind = "full"
    __slots__ = ()

    def _longest_hit(self, keys: Sequence[PageKey], n: int, max_length: int, group_ids: Sequence[int],
                     shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """Longest run of consecutive hits from page 0 (the first-inserted page per key)."""
        stride = self._stride
        if len(group_ids) == 1:  # one call: the pool looks the keys up to the first miss
            own = keys[stride - 1:n * stride:stride]
            gid = group_ids[0]  # group 0's pool keys are the keys themselves; others' are built lazily
            return (self.page_pool.lookup_run_ids(own if gid == 0 else zip(own, repeat(gid)),
                                                  dp_shard_hint=shard, data_parallel_size=dp),)
        return self._hit_run(tuple([] for _ in group_ids), keys, 0, n, group_ids, shard, dp)

    def get_num_common_prefix_pages(self, pages: Sequence[int], num_running_requests: int) -> int:
        """Leading pages of ``pages`` held by at least ``num_running_requests`` requests (eSurge's ``>=``)."""
        checked_int(num_running_requests, "num_running_requests", minimum=1)
        ref_count = self.page_pool.ref_count
        count = 0
        for page in pages:
            if ref_count(page) < num_running_requests:
                break
            count += 1
        return count


class SlidingWindowManager(SingleTypeCacheManager):
    """Sliding window ``sw``: only the last ``sw`` tokens are attended, older pages are dropped."""

    spec_type: type[CacheSpec] = SlidingWindowSpec
    frees_skipped_pages = True
    kind = "sliding"
    span_field = "sliding_window"
    sliding_window: int
    __slots__ = ("sliding_window",)

    def _longest_hit(self, keys: Sequence[PageKey], n: int, max_length: int, group_ids: Sequence[int],
                     shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """Rightmost run of `pages_for_hit` consecutive hits (earlier pages become null
        placeholders); if no such run exists, the run of hits starting at page 0."""
        return self._rightmost_run(keys, n, group_ids, self.pages_for_hit, 1, False, shard, dp)

    def find_vllm_eagle_hit(self, keys: Sequence[PageKey], max_length: int, group_ids: Sequence[int], unit: int,
                            drop: bool, shard: int | None = None, dp: int | None = None) -> tuple[list[int], ...]:
        """vLLM 0.33's sliding-window lookup: the rightmost run of the pages covering the window
        (plus the page dropped, when ``drop``) whose end, after the drop, is a multiple of
        ``unit`` tokens (`verikv.spec.hit_rules.vllm_group_rule`)."""
        return self._rightmost_run(keys, self._max_hit_pages(keys, max_length, group_ids), group_ids,
                                   self.pages_for_hit + drop, unit // self.page_size, drop, shard, dp)

    def _rightmost_run(self, keys: Sequence[PageKey], n: int, group_ids: Sequence[int], need: int, per: int,
                       drop: bool, shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """Scanning the first ``n`` pages from the right, the first run of ``need`` hits whose end
        less the dropped page (one when ``drop``) is a multiple of ``per`` pages, that page
        dropped; earlier pages become null placeholders. With no such run, the run from page 0
        the scan counted, cut to a multiple of ``per``, one page fewer when ``drop`` and cut
        again."""
        stride = self._stride
        result = tuple([NULL_PAGE] * n for _ in group_ids)
        run = 0
        for i in range(n - 1, -1, -1):
            found = self._joint_hit(keys[(i + 1) * stride - 1], group_ids, shard, dp)
            if found is None:
                run = 0
                continue
            if run == 0 and (i + 1 - drop) % per:
                continue  # a run starts only where the hit, after the drop, is whole units
            for lst, page in zip(result, found):
                lst[i] = page
            run += 1
            if run >= need:
                for lst in result:
                    del lst[i + run - drop:]
                return result
        keep = _round_down(run, per)
        if drop and keep:
            keep = _round_down(keep - 1, per)
        for lst in result:
            del lst[keep:]
        return result

    @property
    def pages_for_hit(self) -> int:
        """Consecutive pages a hit needs: those covering the window of the next token (at least one)."""
        return max(1, cdiv(self.sliding_window - 1, self.page_size))

    def skipped_range(self, pages: Sequence[int], num_computed_tokens: int) -> tuple[int, int]:
        """Pages entirely before the window of the next token: index < (n - sw + 1) // ps."""
        first_kept = (_count(num_computed_tokens, "num_computed_tokens") - self.sliding_window + 1) // self.page_size
        return _dropped_run(pages, first_kept)


class ChunkedLocalAttentionManager(SingleTypeCacheManager):
    """Chunked local attention: tokens attend only within their chunk of ``C`` tokens."""

    spec_type: type[CacheSpec] = ChunkedLocalAttentionSpec
    frees_skipped_pages = True
    kind = "chunked"
    hit_is_stable = False
    span_field = "attention_chunk_size"
    attention_chunk_size: int
    __slots__ = ("attention_chunk_size",)

    def _longest_hit(self, keys: Sequence[PageKey], n: int, max_length: int, group_ids: Sequence[int],
                     shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """Null placeholders for the pages before the current chunk, then consecutive hits."""
        chunk = self.attention_chunk_size
        start_page = ((max_length // chunk) * chunk) // self.page_size if max_length > 0 else 0
        return self._hit_run(tuple([NULL_PAGE] * start_page for _ in group_ids), keys, start_page, n, group_ids,
                             shard, dp)

    def skipped_range(self, pages: Sequence[int], num_computed_tokens: int) -> tuple[int, int]:
        """Pages before the current chunk: index < ((n // C) * C) // ps."""
        chunk = self.attention_chunk_size
        first_kept = ((_count(num_computed_tokens, "num_computed_tokens") // chunk) * chunk) // self.page_size
        return _dropped_run(pages, first_kept)


class MambaManager(SingleTypeCacheManager):
    """Mamba (recurrent state): one page per request holding the state; never prefix-cached."""

    spec_type: type[CacheSpec] = MambaSpec
    kind = "mamba"
    __slots__ = ()

    def _max_hit_pages(self, keys: Sequence[PageKey], max_length: int, group_ids: Sequence[int]) -> int:
        """A recurrent state is not a token prefix: no page is ever a hit, so a lookup reads
        (and checks) nothing (the keys are the attention groups')."""
        return 0

    def cache_pages(self, pages: list[int], num_cached: int, keys: Sequence[PageKey], num_tokens: int) -> int:
        """A recurrent state is not a token prefix: nothing is cached."""
        return num_cached

    def cache_pages_batch(self, page_lists: list[list[int]], num_cached: list[int], keys: list[list[PageKey]],
                          num_tokens: list[int]) -> list[int]:
        """Nothing is cached (as `cache_pages`)."""
        return list(num_cached)

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
    count ends exactly at its end (`cache_states`). ``states`` arguments are the indices of a
    request's real pages in this group, ascending (kept in the coordinator's record, so no call
    scans the placeholders).
    """

    kind = "mamba_align"
    frees_skipped_pages = True
    __slots__ = ()
    #: states are looked up like attention pages
    _max_hit_pages = SingleTypeCacheManager._max_hit_pages

    def _longest_hit(self, keys: Sequence[PageKey], n: int, max_length: int, group_ids: Sequence[int],
                     shard: int | None, dp: int | None) -> tuple[list[int], ...]:
        """The right-most cached state within ``max_length`` tokens, null placeholders before it
        (it restores the whole prefix); no cached state: no hit."""
        stride = self._stride
        for j in range(n - 1, -1, -1):
            found = self._joint_hit(keys[(j + 1) * stride - 1], group_ids, shard, dp)
            if found is not None:
                return tuple([NULL_PAGE] * j + [page] for page in found)
        return tuple([] for _ in group_ids)

    def find_vllm_eagle_hit(self, keys: Sequence[PageKey], max_length: int, group_ids: Sequence[int], unit: int,
                            drop: bool, shard: int | None = None, dp: int | None = None) -> tuple[list[int], ...]:
        """vLLM 0.33's lookup of a Mamba align group: the right-most cached state within
        ``max_length`` tokens that ends on a multiple of ``unit`` tokens, null placeholders
        before it. A recurrent state is never dropped (``drop`` is ignored)."""
        per = unit // self.page_size
        stride = self._stride
        for j in range(self._max_hit_pages(keys, max_length, group_ids) - 1, -1, -1):
            found = None if (j + 1) % per else self._joint_hit(keys[(j + 1) * stride - 1], group_ids, shard, dp)
            if found is not None:
                return tuple([NULL_PAGE] * j + [page] for page in found)
        return tuple([] for _ in group_ids)

    def keys_needed(self, num_tokens: int) -> int:
        """State pages are keyed like attention pages: key ``(j + 1) * stride - 1`` for page ``j``."""
        return SingleTypeCacheManager.keys_needed(self, num_tokens)

    def cache_pages(self, pages: list[int], num_cached: int, keys: Sequence[PageKey], num_tokens: int) -> int:
        """Without the request's computed count no state is known complete: nothing is keyed
        (the coordinator calls `cache_states`)."""
        return num_cached

    def skipped_states(self, states: Sequence[int], num_computed_tokens: int) -> list[int]:
        """The real pages (indices) before the one holding the state after
        ``num_computed_tokens`` tokens, the state the next step starts from."""
        cut = cdiv(_count(num_computed_tokens, "num_computed_tokens"), self.page_size) - 1
        return [j for j in states if j < cut]

    def free_states(self, pages: list[int], states: list[int], gone: Sequence[int]) -> None:
        """Free the real pages at indices ``gone`` (from `skipped_states`), last first, and
        replace them by the null page."""
        if not gone:
            return
        self.page_pool.free_page_ids([pages[j] for j in reversed(gone)])  # (checks the ids first)
        for j in gone:
            pages[j] = NULL_PAGE
        states[:] = [j for j in states if j not in gone]

    def new_pages(self, num_held: int, num_tokens: int, num_hits: int) -> int:
        """One page when the state after ``num_tokens`` tokens moves past the list's last page
        (the hits start the list of a new request), else none."""
        return 1 if cdiv(num_tokens, self.page_size) > (num_held or num_hits) else 0

    def check_state_moves_forward(self, pages: Sequence[int], num_computed_tokens: int, state_end: int) -> None:
        """`InvalidArgumentError` unless the state after ``state_end`` tokens goes to a new page,
        or stays in the list's last page, held and uncached, once the pages before the state
        ``num_computed_tokens`` leaves are freed (a cached state is never overwritten)."""
        if not pages:
            return
        target = cdiv(state_end, self.page_size)
        kept = cdiv(num_computed_tokens, self.page_size) - 1 <= len(pages) - 1
        in_place = (target == len(pages) and kept and pages[-1] != NULL_PAGE
                    and self.page_pool.key_of(pages[-1]) is None)
        if target < len(pages) or (target == len(pages) and not in_place):
            raise InvalidArgumentError(
                f"the Mamba state after {state_end} tokens would overwrite an earlier or cached state (group "
                f"{self.kv_cache_group_id} holds {len(pages)} pages; computed tokens went back?)")

    def first_states(self, hits: Sequence[int]) -> list[int]:
        """The state indices of a list that starts with the prefix hits ``hits``."""
        return [len(hits) - 1] if hits else []

    def allocate_state(
        self, pages: list[int], states: list[int], num_tokens: int, shard: int | None = None, dp: int | None = None
    ) -> list[int]:
        """The state after ``num_tokens`` tokens: a new page after null placeholders when it moves
        past the list's last page; else none (the state stays in place)."""
        target = cdiv(_count(num_tokens, "num_tokens"), self.page_size)
        held = len(_page_list(pages))
        if target <= held:
            return []
        new = self.page_pool.get_new_page_ids(1, dp_shard_hint=shard, data_parallel_size=dp)
        pages.extend([NULL_PAGE] * (target - held - 1))
        pages.append(new[0])
        states.append(target - 1)
        return new

    def cache_states(self, pages: list[int], num_cached: int, keys: Sequence[PageKey], num_tokens: int,
                     num_computed_tokens: int) -> int:
        """Key the state page of the request's computed count ``c`` when ``c`` ends a page and
        is within ``num_tokens`` (that step is over: the state is complete); returns the new
        cached count, ``max(num_cached, min(num_tokens, c) // page_size)``. Null placeholders
        and keyed pages are never (re-)keyed."""
        n, c = _count(num_tokens, "num_tokens"), _count(num_computed_tokens, "num_computed_tokens")
        full = n // self.page_size
        if full > len(_page_list(pages)) or len(keys) < full * self._stride:
            raise InvalidArgumentError(
                f"caching {n} tokens needs {full} held pages and {full * self._stride} keys; the request has "
                f"{len(pages)} pages and {len(keys)} keys")
        j = c // self.page_size - 1
        if c % self.page_size == 0 and 0 <= j and num_cached <= j and c <= n:
            page = pages[j]
            if page != NULL_PAGE and self.page_pool.key_of(page) is None:
                key = keys[self.key_index(j)]
                if type(key) is not PageKey:
                    _key_list([key])  # raises
                self.page_pool.cache_page_id(page, self.group_key(key))
        return max(num_cached, min(full, c // self.page_size))


def _dropped_run(pages: Sequence[int], first_kept: int) -> tuple[int, int]:
    """The pages before index ``first_kept`` not yet replaced by the null page: the run of
    real pages ending there (earlier ones were dropped by an earlier step)."""
    if not pages or first_kept <= 0:
        return (0, 0)
    stop = min(first_kept, len(pages))
    start = stop
    while start > 0 and pages[start - 1] != NULL_PAGE:
        start -= 1
    return (start, stop)


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
