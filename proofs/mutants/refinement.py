"""Implementation bugs engines have shipped, planted in a real `CacheManager`, and shown to make
the exhaustive refinement checks of `verikv.proofs.refinement.exhaustive` fail.

Each bug is one or two lines' worth of plausible change (the kinds engines have shipped),
planted at method level so it survives small edits of the code around it: an object of the
manager gets a one-off subclass with one method replaced (`_override`), or, for the free
list's link array (an internal object of the pool), the method is replaced on its class for the
duration of the run (`_patched_class`). ``detect`` runs the refinement check of the layout where
the bug lives and returns the names of what failed (empty: the bug survived, a defect of the
checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from verikv.free_queue import IdLinks
from verikv.page_pool import PagePool
from verikv.proofs.mutants.manager import _base, _override
from verikv.proofs.refinement.exhaustive import (
    CASES_BY_NAME,
    MakeManager,
    build_manager,
    failed_checks,
)
from verikv.proofs.refinement.walks import WORLDS_BY_NAME, failed_checks as walk_failures
from verikv.proofs.runner.registry import Mutant
from verikv.spec import manager as spec
from verikv.testing.adapter import build_cache_manager

_POP_FRONT = IdLinks.pop_front
_RESET = PagePool.reset_prefix_cache
"""The originals that `_bulk_pop_swapped` and `_reset_entry_ends_only` wrap while they replace them."""


def _windowed(manager: Any, kind: str) -> Iterator[Any]:
    return (m for m in manager.coordinator.single_type_managers if m.layout[0] == kind)


def sliding_window_one_token_short(manager: Any) -> None:
    """The sliding window keeps one token too few: a page is freed while the next token still
    attends to its last slot."""
    for stm in _windowed(manager, "sliding"):
        def skipped_range(self: Any, pages: Any, num_computed_tokens: int) -> tuple[int, int]:
            return _base(self).skipped_range(self, pages, num_computed_tokens + 1)
        _override(stm, skipped_range=skipped_range)


def chunk_boundary_one_early(manager: Any) -> None:
    """Chunked local attention drops the previous chunk one token before the boundary."""
    for stm in _windowed(manager, "chunked"):
        def skipped_range(self: Any, pages: Any, num_computed_tokens: int) -> tuple[int, int]:
            return _base(self).skipped_range(self, pages, num_computed_tokens + 1)
        _override(stm, skipped_range=skipped_range)


def hybrid_lookup_one_pass(manager: Any) -> None:
    """The hybrid lookup applies each group's rule once, in group order (no fixed point): an
    earlier group's hit is not re-checked at the length a later group cut it to."""
    def find_longest_cache_hit(self: Any, keys: Any, max_length: int, shard: Any = None, dp: Any = None) -> Any:
        managers = self.single_type_managers
        length = max_length // self._lcm_page_size * self._lcm_page_size
        results = []
        for gid, m in enumerate(managers):
            hits = m.find_longest_cache_hit(keys, length, (gid,), shard, dp)[0]
            results.append(hits)
            length = len(hits) * m.page_size
        return tuple(results), length
    _override(manager.coordinator, find_longest_cache_hit=find_longest_cache_hit)


def eagle_ignored_single_group(manager: Any) -> None:
    """With one cache group the EAGLE drop of the last hit page is skipped."""
    def find_longest_cache_hit(self: Any, *args: Any) -> Any:
        if len(self.single_type_managers) != 1:
            return _base(self).find_longest_cache_hit(self, *args)
        eagle, self.use_eagle = self.use_eagle, False
        try:
            return _base(self).find_longest_cache_hit(self, *args)
        finally:
            self.use_eagle = eagle
    _override(manager.coordinator, find_longest_cache_hit=find_longest_cache_hit)


def window_reclaim_counts_shared(manager: Any) -> None:
    """The plan counts every out-of-window page as reclaimed, also those another request still
    holds (ref > 1), so a plan that does not fit is started."""
    def allocate(self: Any, step: Any) -> Any:
        pool = self.page_pool
        shared = 0
        rec = self.holding(step.request_id)
        for m, pages in zip(self.single_type_managers, () if rec is None else rec.pages):
            start, stop = m.skipped_range(pages, step.num_computed_tokens)
            shared += sum(1 for j in range(start, stop) if pool.ref_count(pages[j]) > 1)
        if not shared:
            return _base(self).allocate(self, step)
        real = type(pool)
        _override(pool, get_num_free_pages=lambda p, **kw: real.get_num_free_pages(p, **kw) + shared)
        try:
            return _base(self).allocate(self, step)
        finally:
            pool.__class__ = real
    _override(manager.coordinator, allocate=allocate)


def partial_page_cached(manager: Any) -> None:
    """Caching rounds the computed tokens up to a whole page: a page whose tokens are not all
    computed is registered (under the key of its full content, already known from the lookup)."""
    for stm in manager.coordinator.single_type_managers:
        def cache_pages(self: Any, pages: Any, num_cached: int, keys: Any, num_tokens: int) -> int:
            up = -(-num_tokens // self.page_size) * self.page_size
            fits = up // self.page_size <= len(pages) and len(keys) >= self.keys_needed(up)
            return _base(self).cache_pages(self, pages, num_cached, keys, up if fits else num_tokens)
        _override(stm, cache_pages=cache_pages)


def lookahead_slots_cached(manager: Any) -> None:
    """Caching after an allocation counts the lookahead slots as computed tokens."""
    def allocate_slots(self: Any, request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_pages: Any = None, num_lookahead_tokens: int = 0,
                       delay_cache_pages: bool = False, **kw: Any) -> Any:
        computed = request.num_computed_tokens + num_new_computed_tokens + num_new_tokens
        result = _base(self).allocate_slots(self, request, num_new_tokens, num_new_computed_tokens,
                                            new_computed_pages, num_lookahead_tokens, delay_cache_pages, **kw)
        if result is not None and num_lookahead_tokens and not delay_cache_pages and self.enable_caching:
            self.cache_pages(request, min(computed + num_lookahead_tokens, request.num_tokens))
        return result
    _override(manager, allocate_slots=allocate_slots)


def window_freed_ascending(manager: Any) -> None:
    """Out-of-window pages are freed first page first (the oldest ends nearest the free head)."""
    for stm in manager.coordinator.single_type_managers:
        if not stm.frees_skipped_pages:
            continue

        def remove_skipped_pages(self: Any, pages: Any, start: int, stop: int) -> None:
            if start >= stop:
                return
            freed = pages[start:stop]
            pages[start:stop] = [0] * (stop - start)
            self.page_pool.free_page_ids(freed)
        _override(stm, remove_skipped_pages=remove_skipped_pages)


def _stale_prev_unlink(self: Any, li: int, pid: int) -> None:
    """IdLinks.unlink without ``prev[after] = before``: the next id keeps a stale back link."""
    from verikv.free_queue import UNLINKED

    nxt, prev = self.next, self.prev
    before, after = prev[pid], nxt[pid]
    nxt[before] = after
    nxt[pid] = UNLINKED
    prev[pid] = UNLINKED
    self.lengths[li] -= 1


def dp_hint_overrides_held_shard(manager: Any) -> None:
    """A call's DP hint wins over the shard the request already holds pages in."""
    def _shard_of(self: Any, request_id: str, dp_shard_hint: Any, data_parallel_size: Any) -> Any:
        shard, dp = _base(self)._shard_of(self, request_id, dp_shard_hint, data_parallel_size)
        if dp_shard_hint is not None and data_parallel_size is not None and shard is not None:
            return dp_shard_hint % data_parallel_size, dp
        return shard, dp
    _override(manager, _shard_of=_shard_of)


def fast_path_ignores_dp_shard(manager: Any) -> None:
    """The decode step called without DP arguments takes its page from the whole pool, not from
    the shard the request holds pages in."""
    def allocate_slots(self: Any, request: Any, *args: Any, **kw: Any) -> Any:
        if args[1:] or kw.get("dp_shard_hint") is not None or kw.get("data_parallel_size") is not None:
            return _base(self).allocate_slots(self, request, *args, **kw)
        coordinator = self.coordinator
        real = type(coordinator)
        _override(coordinator, allocate=lambda c, step: real.allocate(c, step._replace(shard=None, dp=None)))
        try:
            return _base(self).allocate_slots(self, request, *args, **kw)
        finally:
            coordinator.__class__ = real
    _override(manager, allocate_slots=allocate_slots)


def fast_path_capacity_uncapped(manager: Any) -> None:
    """The decode fast path's capacity is pages * page_size, not capped at max_model_len, so a
    step past max_model_len that fits the last page is accepted."""
    def allocate_slots(self: Any, request: Any, num_new_tokens: Any = 1, *args: Any, **kw: Any) -> Any:
        pages = self.get_page_ids(request.request_id) if request.request_id in self.request_ids() else None
        if pages is not None and not args and not kw and len(pages) == 1 and type(num_new_tokens) is int:
            capacity = len(pages[0]) * self.kv_cache_groups[0].kv_cache_spec.page_size
            if self.max_model_len < request.num_computed_tokens + num_new_tokens <= capacity:
                return self.create_empty_page_list()
        return _base(self).allocate_slots(self, request, num_new_tokens, *args, **kw)
    _override(manager, allocate_slots=allocate_slots)


def free_count_counts_null(manager: Any) -> None:
    """Counting the free pages among prefix hits counts the null placeholder (ref 0) as free, so a
    windowed hit looks dearer than it is and a plan that fits is refused."""
    pool = manager.page_pool

    def count_free_ids(self: Any, page_ids: Any) -> int:
        ids = list(page_ids)
        return _base(self).count_free_ids(self, ids) + ids.count(0)
    _override(pool, count_free_ids=count_free_ids)


def groups_freed_in_reverse(manager: Any) -> None:
    """A request's groups are freed last group first (the free list's order changes)."""
    def free(self: Any, request_id: str) -> None:
        rec = self.holding(request_id)
        if rec is None:
            return
        managers = self.single_type_managers
        self.single_type_managers, rec.pages = managers[::-1], rec.pages[::-1]
        try:
            _base(self).free(self, request_id)
        finally:
            self.single_type_managers = managers
    _override(manager.coordinator, free=free)


def _with_hasher(manager: Any, hash_request: Callable[..., list[Any]], page_key: Callable[..., Any]) -> None:
    """Give the manager a hasher whose ``hash_request`` and one-page key (`PageHasher._page_key`,
    which a decode step that fills one page uses instead) are replaced."""
    from verikv.hashing import PageHasher

    old = manager.hasher
    hasher_class = type("MutatedPageHasher", (PageHasher,), {"hash_request": hash_request, "_page_key": page_key})
    manager.hasher = hasher_class(old.scheme, old.seed)


def resumed_chain_from_root(manager: Any) -> None:
    """Hashing that resumes at page ``start > 0`` chains page ``start`` to the root, not to its
    parent: a decoded page gets the key of a first page with the same tokens."""
    from verikv.hashing import PageHasher

    def hash_request(self: Any, request: Any, page_size: int, start: int = 0, parent: Any = None,
                     stop: int | None = None) -> list[Any]:
        return PageHasher.hash_request(self, request, page_size, start, self.root if start else parent, stop)

    def page_key(self: Any, parent: Any, tokens: bytes, extra: Any, suffix: bytes) -> Any:
        return PageHasher._page_key(self, self.root_key, tokens, extra, suffix)  # (a decoded page: start > 0)
    _with_hasher(manager, hash_request, page_key)


def builtin_one_page_drops_parent(manager: Any) -> None:
    """The builtin scheme's one-page path hashes the page's tokens without its parent's key."""
    from verikv.hashing import PageHasher

    def hash_request(self: Any, request: Any, page_size: int, start: int = 0, parent: Any = None,
                     stop: int | None = None) -> list[Any]:
        keys = PageHasher.hash_request(self, request, page_size, start, parent, stop)
        if self.scheme == "builtin" and len(keys) == 1 and self.page_extra_keys(request, start, page_size) is None:
            return PageHasher.hash_request(self, request, page_size, start, 0, stop)  # parent value 0, not the parent's
        return keys

    def page_key(self: Any, parent: Any, tokens: bytes, extra: Any, suffix: bytes) -> Any:
        if self.scheme == "builtin" and extra is None:  # parent value 0, not the parent's
            return PageHasher._page_key(self, self._parent_key(0), tokens, extra, suffix)
        return PageHasher._page_key(self, parent, tokens, extra, suffix)
    _with_hasher(manager, hash_request, page_key)


def decode_key_narrowed_to_16_bits(manager: Any) -> None:
    """The one-page key of a decode step reads token ids as 16-bit values ("ids fit"): a decoded
    page holding 65 537 gets the key of the same page holding 1."""
    from array import array

    from verikv.hashing import PageHasher

    def page_key(self: Any, parent: Any, tokens: bytes, extra: Any, suffix: bytes) -> Any:
        ids = array("Q")
        ids.frombytes(tokens)
        return PageHasher._page_key(self, parent, array("Q", (t & 0xFFFF for t in ids)).tobytes(), extra, suffix)
    _with_hasher(manager, PageHasher.hash_request, page_key)


def _drop_shared_to_one(ref: Any, ids: list[int]) -> int:
    """Freeing pages held at least twice sets their count to 1 instead of one less: with three
    holders, the page rejoins the free list while one request still holds it."""
    count = 0
    for pid in ids:
        try:
            if ref[pid] < 2:
                break
        except IndexError:
            break
        ref[pid] = 1
        count += 1
    return count


def _reset_entry_ends_only(self: Any) -> bool:
    """reset_prefix_cache forgets the keys of the first and last page of each cached entry only:
    a middle page of three with equal content keeps its key."""
    kept = [(key, pid) for key, ids in self.cached_items() for pid in ids[1:-1]]
    done: bool = _RESET(self)
    if done:
        for key, pid in kept:
            self._key[pid] = key
    return done


def _bulk_pop_swapped(self: Any, li: int, n: int) -> list[int]:
    """The free list's bulk pop (256 ids or more in one call) returns its first two ids swapped:
    a long allocation takes its first pages out of LRU order."""
    out: list[int] = _POP_FRONT(self, li, n)
    if n >= 256:
        out[0], out[1] = out[1], out[0]
    return out


@contextmanager
def _patched_class(owner: Any, name: str, method: Callable[..., Any]) -> Iterator[None]:
    """Replace ``owner.name`` (a class's method, or a module's function) for the duration of a
    detection run (for objects the manager creates internally, or helpers it calls); restored
    afterwards whatever happens."""
    original = vars(owner)[name]
    setattr(owner, name, method)
    try:
        yield
    finally:
        setattr(owner, name, original)


@dataclass(frozen=True)
class _Bug:
    name: str
    invariant: str
    cases: tuple[str, ...]
    plant: Callable[[Any], None] | None = None
    class_patch: tuple[str, str, Callable[..., Any]] | None = None
    """(``module:Class`` or ``module``, attribute name, replacement) for `_patched_class`."""
    description: str = ""
    walks: bool = False
    """``cases`` name worlds of the random walks (`verikv.proofs.refinement.walks`), not
    layouts of the exhaustive run: bugs that only show in a large world."""


def _doc(f: Callable[..., Any]) -> str:
    return " ".join((f.__doc__ or "").split())


_CATALOGUE: tuple[_Bug, ...] = (
    _Bug("sliding_window_one_token_short", "INV-WINDOW-LIVE", ("sliding",), sliding_window_one_token_short),
    _Bug("chunk_boundary_one_early", "INV-WINDOW-LIVE", ("chunked",), chunk_boundary_one_early),
    _Bug("hybrid_lookup_one_pass", "REFINEMENT", ("sliding-first(window<=page)+full", "full+sliding+chunked"),
         hybrid_lookup_one_pass),
    _Bug("eagle_ignored_single_group", "REFINEMENT", ("eagle(full)",), eagle_ignored_single_group),
    _Bug("window_reclaim_counts_shared", "INV-ATOMIC", ("full+sliding",), window_reclaim_counts_shared),
    _Bug("partial_page_cached", "INV-KEYED-COMPUTED", ("full",), partial_page_cached),
    _Bug("lookahead_slots_cached", "INV-KEYED-COMPUTED", ("lookahead",), lookahead_slots_cached),
    _Bug("window_freed_ascending", "REFINEMENT", ("chunked",), window_freed_ascending),
    _Bug("unlink_leaves_stale_prev", "INV-FREE-IFF-ZERO", ("full+sliding",),
         class_patch=("verikv.free_queue:IdLinks", "unlink", _stale_prev_unlink), description=_doc(_stale_prev_unlink)),
    _Bug("dp_hint_overrides_held_shard", "REFINEMENT", ("dp2",), dp_hint_overrides_held_shard),
    _Bug("fast_path_ignores_dp_shard", "REFINEMENT", ("dp2",), fast_path_ignores_dp_shard),
    _Bug("fast_path_capacity_uncapped", "REFINEMENT", ("full",), fast_path_capacity_uncapped),
    _Bug("free_count_counts_null", "REFINEMENT", ("sliding", "full+sliding"), free_count_counts_null),
    _Bug("groups_freed_in_reverse", "REFINEMENT", ("full+sliding",), groups_freed_in_reverse),
    _Bug("resumed_chain_from_root", "INV-HIT-SAFE", ("full",), resumed_chain_from_root),
    _Bug("builtin_one_page_drops_parent", "INV-HIT-SAFE", ("builtin-hash",), builtin_one_page_drops_parent),
    _Bug("decode_key_narrowed_to_16_bits", "INV-HIT-SAFE", ("full",), decode_key_narrowed_to_16_bits, walks=True),
    _Bug("shared_page_count_dropped_to_one", "INV-REF-COUNT", ("full",), walks=True,
         class_patch=("verikv.page_pool", "_drop_shared", _drop_shared_to_one), description=_doc(_drop_shared_to_one)),
    _Bug("reset_clears_entry_ends_only", "INV-KEY-BIJ", ("full",),
         class_patch=("verikv.page_pool:PagePool", "reset_prefix_cache", _reset_entry_ends_only),
         description=_doc(_reset_entry_ends_only)),
    _Bug("bulk_pop_swaps_first_two", "REFINEMENT", ("full",), walks=True,
         class_patch=("verikv.free_queue:IdLinks", "pop_front", _bulk_pop_swapped),
         description=_doc(_bulk_pop_swapped)),
)


def _detector(bug: _Bug) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        for case_name in bug.cases:
            make: MakeManager
            if bug.walks:
                world = WORLDS_BY_NAME[case_name]
                check_name, run = world.check_name, lambda make, world=world: walk_failures(world, make)
                make = build_cache_manager
            else:
                case = CASES_BY_NAME[case_name]
                check_name, run = case.check_name, lambda make, case=case: failed_checks(case, make)
                make = build_manager(case)

            def make_mutant(config: spec.ManagerConfig, make: MakeManager = make) -> Any:
                manager = make(config)
                if bug.plant is not None:
                    bug.plant(manager)
                return manager

            if bug.class_patch is None:
                failed = run(make_mutant)
            else:
                import importlib

                where, name, method = bug.class_patch
                module, _, cls = where.partition(":")
                owner = importlib.import_module(module)
                with _patched_class(getattr(owner, cls) if cls else owner, name, method):
                    failed = run(make_mutant)
            if failed:
                return [f"{check_name}: {name}" for name in failed]
        return []
    return detect


# --- spec mutants for the ghost invariants: the spec itself breaks them ---------------------

def _spec_caches_partial_page(original: Callable[..., Any]) -> Callable[..., Any]:
    """spec cache_pages rounds the token count up to the base page: a page whose tokens are not
    all computed gets its key."""
    def cache_pages(s: Any, req: Any, num_tokens: int) -> Any:
        base = s.config.base_page_size
        return original(s, req, min(req.num_tokens, -(-num_tokens // base) * base))
    return cache_pages


def _spec_frees_window_early(original: Callable[..., Any]) -> Callable[..., Any]:
    """spec remove_skipped drops pages one token early (a page the next token attends)."""
    def remove_skipped(s: Any, rid: str, num_computed_tokens: int) -> Any:
        return original(s, rid, num_computed_tokens + 1)
    return remove_skipped


def _spec_writes_neighbour_content(original: Callable[..., Any]) -> Callable[..., Any]:
    """spec allocate_slots writes the content of each page it completes into the page after it
    (the ghost INV-HIT-SAFE is judged by, written from the neighbouring tokens)."""
    def mark_computed(s: Any, req: Any, lists: Any, start: int, num_tokens: int, content: Any) -> None:
        original(s, req, [pages[1:] for pages in lists], start, num_tokens, content)
    return mark_computed


_SPEC_BUGS: tuple[tuple[str, str, str, Callable[[Callable[..., Any]], Callable[..., Any]], str], ...] = (
    ("keys-uncomputed-page", "INV-KEYED-COMPUTED", "cache_pages", _spec_caches_partial_page, "full"),
    ("content-written-to-neighbour", "INV-HIT-SAFE", "_mark_computed", _spec_writes_neighbour_content, "full"),
    ("window-freed-one-token-early", "INV-WINDOW-LIVE", "remove_skipped", _spec_frees_window_early, "sliding"),
)


def _spec_detector(function: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
                   case_name: str) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        case = CASES_BY_NAME[case_name]
        original = getattr(spec, function)
        setattr(spec, function, wrap(original))
        try:
            return [f"{case.check_name}: {name}" for name in failed_checks(case, build_manager(case))]
        finally:
            setattr(spec, function, original)
    return detect


def mutants() -> list[Mutant]:
    """The planted implementation bugs, named ``impl:<bug>``, caught by ``refine:*``; and
    spec transitions that break the ghost invariants (``spec:<bug>``), caught there too."""
    # (a bug without a description always has a plant: its docstring describes it)
    impl = [Mutant(name=f"impl:{bug.name}", kind="impl", invariant=bug.invariant,
                   description=f"{bug.description or _doc(cast(Callable[..., Any], bug.plant))} "
                               f"[refine: {', '.join(bug.cases)}]",
                   detect=_detector(bug))
            for bug in _CATALOGUE]
    return impl + [Mutant(name=f"spec:{name}", kind="spec", invariant=invariant,
                          description=f"{_doc(wrap)} [refine: {case}]", detect=_spec_detector(function, wrap, case))
                   for name, invariant, function, wrap, case in _SPEC_BUGS]
