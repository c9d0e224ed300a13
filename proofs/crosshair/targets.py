"""What CrossHair analyses besides the contracts in ``impl/``: state factories, drivers, mutants.

*Factories* (installed in every CrossHair run by `verikv.proofs.crosshair._plugin`, `configure_crosshair`)
let CrossHair build a `FreeCachePageQueue` or a `PagePool` in valid states it does not reach
through ``__init__``: every subset of free ids (queue ids < `MAX_QUEUE_CAPACITY`, pools of at
most `MAX_POOL_PAGES` pages), the free list in any rotation of ascending or descending id order
(not every permutation), reference counts up to `MAX_REF` (symbolic), keys from `KEYS`, both
free orders. These are the bounds the checks state.

*Drivers* are functions with one ``post: __return__`` condition: they map raw symbolic inputs
into a small domain by branching (`_pick`; CrossHair's search spends its budget on failed
``pre:`` conditions, and ``crosshair diffbehavior`` — which ignores preconditions — spent its
whole budget on out-of-domain inputs and missed the seeded hit-rule mutants), run the
implementation and the model, and raise `Mismatch` with the concrete values when they differ.
Hits are looked up in a stub pool that answers from a ``hit`` list, so the managers' lookup
arithmetic runs unchanged; hash chains use an injective "hash" (the hashed tuple itself), so
key identity is compared at the encoding level, not through hashlib (opaque to CrossHair).

*Mutants* are the implementation with one bug each. `activate` (called by the plugin with
``$VERIKV_CROSSHAIR_MUTANT``) installs one: the factories then build the mutant class, or the
drivers call the mutant, so the very same checks run against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verikv.cache_specs import ChunkedLocalAttentionSpec, FullAttentionSpec, SlidingWindowSpec
from verikv.errors import VeriKVError
from verikv.free_queue import UNLINKED, CachePage, FreeCachePageQueue, IdLinks, PageRecords
from verikv.hashing import PageHasher
from verikv.page_pool import PagePool
from verikv.proofs.crosshair.common import untraced
from verikv.proofs.mutants.pool import EvictionKeepsKey
from verikv.single_type_managers import (
    ChunkedLocalAttentionManager,
    FullAttentionManager,
    SlidingWindowManager,
)
from verikv.spec import hit_rules, manager as spec_manager, pool as spec_pool
from verikv.spec.abstraction import abstract_pool

MAX_QUEUE_CAPACITY = 5
MAX_POOL_PAGES = 3
MAX_REF = 2
KEYS = 2
MUTANT_ENV = "VERIKV_CROSSHAIR_MUTANT"


# --- factories: any valid small state ------------------------------------------------------------

def _distinct_in(values: list[int], lo: int, hi: int) -> bool:
    return all(lo <= v < hi for v in values) and len(set(values)) == len(values)


_READABLE: dict[type, type] = {}


def _readable(cls: type[Any]) -> type[Any]:
    """``cls`` with a repr showing its abstract state, so counterexamples print readable states."""
    if cls not in _READABLE:
        def readable_repr(self: Any) -> str:
            if isinstance(self, PagePool):
                return f"{cls.__name__}: {abstract_pool(self)}"
            return f"{cls.__name__}(capacity={self.links.capacity}, free={self.ids()})"
        _READABLE[cls] = type(cls.__name__, (cls,), {"__repr__": readable_repr})
    return _READABLE[cls]


def build_queue(capacity: int, order: list[int]) -> FreeCachePageQueue | None:
    """A queue over ids ``0..capacity-1`` (0 null) holding ``order`` head to tail; None if invalid or too big."""
    if not 1 <= capacity <= MAX_QUEUE_CAPACITY or not _distinct_in(order, 1, capacity):
        return None
    records = PageRecords.for_pool(capacity)
    views: dict[int, CachePage] = {}

    def page_of(pid: int) -> CachePage:
        return views.setdefault(pid, CachePage.view(records, pid))

    queue = _readable(_ACTIVE["queue"]).for_range(records, 1, 1, page_of)
    queue.links.link_back(0, order)
    _plain_links(queue.links)
    return queue


def _plain_links(links: IdLinks) -> None:
    """Swap the links' ``array('i')`` storage for lists: same values and API, but CrossHair can
    index a list with a symbolic id instead of realizing it (an array is opaque C storage)."""
    links.prev, links.next = list(links.prev), list(links.next)  # type: ignore[assignment]


def build_pool(num_pages: int, unhashed_first: bool, refs: list[int], order: list[int],
               keys: list[int]) -> PagePool:
    """The active pool class in the state with ``refs[p-1]`` references on page p, free list ``order``
    (the pages with ref 0, in some order) and key ``keys[p-1]`` on page p (-1: none; registered in
    page order)."""
    pool = _readable(_ACTIVE["pool"])(num_pages, free_order="unhashed-first" if unhashed_first else "esurge")
    pool.get_new_page_ids(num_pages - 1)
    for pid in range(1, num_pages):
        pool._ref[pid] = refs[pid - 1]
    pool._free.link_back(0, order)
    for pid in range(1, num_pages):
        if keys[pid - 1] >= 0:
            pool.cache_page_id(pid, keys[pid - 1])
    return pool


def _pick(value: Any, lo: int, hi: int) -> int:
    """A concrete int in ``[lo, hi]`` for the symbolic ``value``, chosen by branching (so the search
    tree splits over the values) rather than by realization (which sticks to one model): ``value``
    itself when it is in range, else ``hi``."""
    for candidate in range(lo, hi):
        if value == candidate:
            return candidate
    return hi


def queue_choice(capacity: Any, member: list[Any], rotate: Any, backwards: Any,
                 max_capacity: int = MAX_QUEUE_CAPACITY) -> tuple[int, list[int]]:
    """The queue (capacity, free ids head first) the symbolic choices pick by branching: a
    capacity in ``1..max_capacity``, which ids are free (``member[i - 1]`` for id i), and a
    rotation/reversal of their ascending order: every subset, with every member at the head, the
    tail and in between."""
    cap = _pick(capacity, 1, max_capacity)
    ids = [i for i in range(1, cap) if _pick(member[i - 1], 0, 1)]
    turn = _pick(rotate, 0, max(len(ids) - 1, 0))
    order = ids[turn:] + ids[:turn]
    return cap, order[::-1] if len(ids) > 1 and _pick(backwards, 0, 1) else order


def _queue_factory(p: Any) -> FreeCachePageQueue:
    """A queue of `queue_choice` over the factory's bound. The choices are made concrete by
    branching and the queue is built untraced (fast, concrete links); only the method arguments
    stay symbolic."""
    from crosshair.tracers import ResumedTracing
    from crosshair.util import IgnoreAttempt

    capacity, rotate, backwards = p(int, "_capacity"), p(int, "_rotate"), p(bool, "_backwards")
    member = [p(bool, f"_free{i}") for i in range(1, MAX_QUEUE_CAPACITY)]
    with ResumedTracing():
        cap, order = queue_choice(capacity, member, rotate, backwards)
    queue = build_queue(cap, order)
    if queue is None:
        raise IgnoreAttempt
    return queue


def _pool_factory(p: Any) -> PagePool:
    """Size, free order, keys and the order of the free pages are made concrete by branching; the
    reference counts stay symbolic (bounded by `MAX_REF`), stored as a list the pool's methods
    read, so the solver steers through their tests (free iff 0, double free, ...)."""
    from crosshair.tracers import ResumedTracing
    from crosshair.util import IgnoreAttempt

    size, policy, rotate, backwards = p(int, "_num_pages"), p(bool, "_unhashed_first"), p(int, "_rotate"), p(
        bool, "_backwards")
    refs = [p(int, f"_ref{i}") for i in range(1, MAX_POOL_PAGES)]
    keys = [p(int, f"_key{i}") for i in range(1, MAX_POOL_PAGES)]
    with ResumedTracing():
        n = _pick(size, 1, MAX_POOL_PAGES)
        if not all(0 <= r <= MAX_REF for r in refs[:n - 1]):
            raise IgnoreAttempt
        key = [_pick(keys[i], -1, KEYS - 1) for i in range(n - 1)]
        free = [pid for pid in range(1, n) if refs[pid - 1] == 0]
        turn = _pick(rotate, 0, max(len(free) - 1, 0))
        back, unhashed_first = bool(_pick(backwards, 0, 1)), bool(_pick(policy, 0, 1))
    order = free[turn:] + free[:turn]
    pool = build_pool(n, unhashed_first, [1] * (n - 1), order[::-1] if back else order, key)
    pool._ref = pool._records.ref = [0, *refs[:n - 1]]
    _plain_links(pool._free)
    return pool


def configure_crosshair(targets: set[str]) -> None:
    """Install the factories (queues and pools in any valid small state, of the active classes) and
    restrict which PEP 316 docstrings CrossHair reads to the analysed ``targets``' own modules:

    - ``verikv.spec`` docstrings are never contracts: their ``pre:`` lines are prose (the spec is
      total and raises `PreconditionError`), and CrossHair would try to enforce them;
    - implementation contracts (``verikv.*`` outside ``verikv.proofs``) count only on the functions
      being analysed. CrossHair enforces the contracts of *called* functions by dropping a path
      that violates them, which would hide a bug from a driver that checks the same behaviour
      through the model; each contract is checked where it is the target.
    """
    from crosshair import register_type
    from crosshair.condition_parser import Pep316Parser

    register_type(FreeCachePageQueue, _queue_factory)
    register_type(PagePool, _pool_factory)
    parse = Pep316Parser.get_fn_conditions

    def get_fn_conditions(self: Pep316Parser, ctxfn: Any) -> Any:
        found = ctxfn.get_callable()
        if found is not None:
            module = getattr(found[0], "__module__", None) or ""
            qualified = f"{module}.{getattr(found[0], '__qualname__', '')}"
            if module.startswith("verikv.spec") or (
                    module.startswith("verikv.") and not module.startswith("verikv.proofs")
                    and qualified not in targets):
                return None
        return parse(self, ctxfn)

    Pep316Parser.get_fn_conditions = get_fn_conditions  # type: ignore[method-assign]


# --- free queue and pool transitions, stated through the abstraction ------------------------------
#
# Each function drives one implementation method on a factory-built object and returns whether it
# behaved as specified (``post: __return__``): the abstract state after it and its result are the
# model's (the list model below for the queue, `verikv.spec.pool` for the pool), a typed error
# (REJECTED) happens exactly outside the precondition and changes nothing, and the links the
# abstraction does not show stay consistent. Arguments go through `_pick`, so they range over a
# small domain (valid ids, the null page, one id out of range) by branching.

REJECTED = "rejected"


class Mismatch(AssertionError):
    """The implementation disagrees with the model; the message is the readable counterexample."""


def agree(expected: Any, found: Any, context: Callable[[], str]) -> bool:
    """True when ``found == expected``; otherwise raise `Mismatch` describing both and ``context()``
    (CrossHair then reports the concrete values, not just the raw symbolic inputs). The context
    is built only on failure: formatting symbolic values would realize them."""
    if found != expected:
        raise Mismatch(f"{context()}: expected {expected!r}, implementation gave {found!r}")
    return True


def links_consistent(queue: FreeCachePageQueue) -> bool:
    """Backward links, length and link flags agree with the forward walk `ids()` (what a later
    unlink relies on, and what the abstract free list does not show)."""
    links, ids = queue.links, queue.ids()
    head = links.capacity
    return (len(queue) == len(ids) and [links.prev[p] for p in [*ids, head + 1]] == [head, *ids]
            and all(queue.is_linked(p) == (p in ids) == (links.prev[p] != UNLINKED) for p in range(head)))


def queue_model(free: list[int], capacity: int, method: str, *args: Any) -> tuple[list[int], Any]:
    """The free queue's specification on its abstraction (the id list, head first) for
    ``popleft_ids(n)``, ``remove_id(id)`` and ``append_ids(ids)``: (list after, result), or
    (``free``, REJECTED) outside the method's precondition."""
    if method == "popleft_ids":
        (n,) = args
        return (free[n:], free[:n]) if 0 <= n <= len(free) else (free, REJECTED)
    if method == "remove_id":
        (pid,) = args
        return ([p for p in free if p != pid], None) if pid in free else (free, REJECTED)
    (ids,) = args
    if len(set(ids)) != len(ids) or not all(1 <= p < capacity and p not in free for p in ids):
        return free, REJECTED
    return free + ids, None


def queue_refines(queue: FreeCachePageQueue, method: str, *args: Any) -> bool:
    """Run ``queue.method(*args)`` and compare with `queue_model`."""
    before = queue.ids()
    try:
        result = getattr(queue, method)(*args)
    except VeriKVError:
        result = REJECTED
    return agree(queue_model(before, queue.links.capacity, method, *args), (queue.ids(), result),
                 lambda: f"{method}{args} on free list {before} (capacity {queue.links.capacity})") and agree(
        True, links_consistent(queue), lambda: f"links consistent after {method}{args} on {before}")


def queue_popleft_ids(queue: FreeCachePageQueue, n: int) -> bool:
    """`FreeCachePageQueue.popleft_ids`: the first ``n`` ids leave the list, in order.

    post: __return__
    """
    return queue_refines(queue, "popleft_ids", _pick(n, -1, MAX_QUEUE_CAPACITY))


def queue_append_ids(capacity: int, free1: bool, free2: bool, rotate: int, backwards: bool, a: int, b: int,
                     count: int) -> bool:
    """`FreeCachePageQueue.append_ids` on ``[a, b][:count]``: unlinked ids join the tail in order.
    Over every queue with capacity <= `APPEND_CAPACITY` (`queue_choice`) and ids 0..capacity.

    post: __return__
    """
    cap, order = queue_choice(capacity, [free1, free2], rotate, backwards, APPEND_CAPACITY)
    ids = [_pick(a, 0, cap), _pick(b, 0, cap)][:_pick(count, 0, 2)]
    with untraced():
        return queue_refines(_small_queue(cap, order), "append_ids", ids)


def _small_queue(capacity: int, order: list[int]) -> FreeCachePageQueue:
    queue = build_queue(capacity, order)
    if queue is None:
        raise Mismatch(f"queue_choice picked an invalid queue: capacity {capacity}, ids {order}")
    return queue


SMALL_QUEUE_CAPACITY = 4
"""The bound of `queue_remove_id`: ids 1..3, so queues of up to three ids (small enough for
CrossHair to explore every path)."""
APPEND_CAPACITY = 3
"""The bound of `queue_append_ids`: ids 1..2 (two ids appended to every queue of up to two ids:
at capacity 4 the paths took 24 CPU s to exhaust, against 1-5 s for each other exhaustive check)."""


def queue_remove_id(capacity: int, free1: bool, free2: bool, free3: bool, rotate: int, backwards: bool,
                    pid: int) -> bool:
    """`FreeCachePageQueue.remove_id` (a cache hit revives a free page from anywhere in the list):
    the id leaves the list, the others keep their order, and every back link stays consistent
    (a stale ``prev`` would corrupt a later unlink). Over every queue with capacity <=
    `SMALL_QUEUE_CAPACITY` (`queue_choice`) and every id 0..capacity (the null page and one out of
    range included).

    post: __return__
    """
    cap, order = queue_choice(capacity, [free1, free2, free3], rotate, backwards, SMALL_QUEUE_CAPACITY)
    page = _pick(pid, 0, cap)
    with untraced():
        return queue_refines(_small_queue(cap, order), "remove_id", page)


def spec_step(state: spec_pool.PoolState, transition: str, *args: Any) -> tuple[spec_pool.PoolState, Any]:
    """The spec transition as (state after, result); (state, REJECTED) outside its precondition."""
    try:
        out = getattr(spec_pool, transition)(state, *args)
    except spec_pool.PreconditionError:
        return state, REJECTED
    if transition == "lookup":
        return state, out
    return (out[0], list(out[1]) if transition == "allocate" else out[1]) if isinstance(out, tuple) else (out, None)


def pool_step(pool: PagePool, method: str, *args: Any) -> tuple[spec_pool.PoolState, Any]:
    """``pool.method(*args)`` as (abstract state after, result); REJECTED for a typed error."""
    try:
        result = getattr(pool, method)(*args)
    except VeriKVError:
        result = REJECTED
    return abstract_pool(pool), result


def pool_refines(pool: PagePool, method: str, transition: str, *args: Any) -> bool:
    """Run the pool method: the abstract state after it and its result are the spec transition's
    from the abstract state before, and the pool's free links stay consistent."""
    before = abstract_pool(pool)
    return pool_step(pool, method, *args) == spec_step(before, transition, *args) and links_consistent(
        pool.free_page_queue)


def pool_get_new_page_ids(pool: PagePool, n: int) -> bool:
    """`PagePool.get_new_page_ids` refines `spec.pool.allocate` (no DP hint).

    post: __return__
    """
    return pool_refines(pool, "get_new_page_ids", "allocate", _pick(n, -1, MAX_POOL_PAGES))


def pool_free_page_ids(pool: PagePool, a: int, b: int, count: int) -> bool:
    """`PagePool.free_page_ids` on ``(a, b)[:count]`` refines `spec.pool.free` (both free orders).

    post: __return__
    """
    return pool_refines(pool, "free_page_ids", "free", (_pick(a, 0, pool.num_pages), _pick(b, 0, pool.num_pages))[
        :_pick(count, 0, 2)])


# --- hit rules: the spec's rule vs a manager's find_longest_cache_hit ------------------------------

class _HitPool:
    """Stub pool: the key with hash value ``i`` hits page ``j`` when ``i == (j+1)*stride - 1`` and
    ``hit[j]``; the page found is ``j + 1``. Any other key misses."""

    def __init__(self, hit: list[bool], stride: int) -> None:
        self.hit = hit
        self.stride = stride

    def lookup_id(self, key: Any, *, dp_shard_hint: int | None = None,
                  data_parallel_size: int | None = None) -> int | None:
        content = key if type(key) is bytes else key[0]  # group 0's pool key is the PageKey itself, else a pair
        j, rest = divmod(int.from_bytes(content, "little") + 1, self.stride)
        return j if rest == 0 and 1 <= j <= len(self.hit) and self.hit[j - 1] else None

    def lookup_run_ids(self, keys: Any, *, group_id: int | None = None, dp_shard_hint: int | None = None,
                       data_parallel_size: int | None = None) -> list[int]:
        """`PagePool.lookup_run_ids`: `lookup_id` over ``keys`` (paired with ``group_id`` if
        given) in order, up to the first miss."""
        out = []
        for key in keys:
            page = self.lookup_id(key if group_id is None else (key, group_id))
            if page is None:
                break
            out.append(page)
        return out


_SPECS: dict[str, tuple[type[Any], str | None]] = {
    "full": (FullAttentionSpec, None),
    "sliding": (SlidingWindowSpec, "sliding_window"),
    "chunked": (ChunkedLocalAttentionSpec, "attention_chunk_size"),
}


def spec_hit(kind: str, hit: list[bool], page_size: int, max_length: int, span: int) -> list[int]:
    """The spec's rule (`hit_rules.group_rule`) as a page list: nulls, then page ``j + 1`` for hit page ``j``."""
    first, end = hit_rules.group_rule(kind, span, hit, page_size, max_length)  # type: ignore[arg-type]
    return [0] * first + [j + 1 for j in range(first, end)]


def impl_hit(kind: str, hit: list[bool], page_size: int, max_length: int, span: int, stride: int,
             extra: int) -> list[int]:
    """The active ``kind`` manager's ``find_longest_cache_hit`` on the stub pool: keys at
    ``page_size // stride`` tokens, ``len(hit) * stride + extra`` of them."""
    spec_cls, span_field = _SPECS[kind]
    fields: dict[str, Any] = {"page_size": page_size, "num_kv_heads": 1, "head_size": 1, "dtype": "float16",
                              "use_mla": False}
    if span_field is not None:
        fields[span_field] = span
    manager = _ACTIVE[kind](spec_cls(**fields), _HitPool(hit, stride), 0, page_size // stride)
    keys = [i.to_bytes(8, "little") for i in range(len(hit) * stride + extra)]  # PageKey with value i
    return manager.find_longest_cache_hit(keys, max_length, (0,))[0]


def hit_agrees(kind: str, h0: bool, h1: bool, h2: bool, h3: bool, pages: int, page_size: int, max_length: int,
               span: int, stride: int, extra: int) -> bool:
    """The spec rule and the active ``kind`` manager return the same pages, on the domain the raw
    inputs are mapped to by `_pick`: <= 4 pages with hit flags ``h0..h3``, page size 1..3 (keys at
    page size / stride, stride 1 or 2, plus ``extra`` keys of a partial page), ``max_length``
    0..12, window or chunk 1..8."""
    ps = _pick(page_size, 1, 3)
    step = _pick(stride, 1, 2) if ps % 2 == 0 else 1
    hit = [h0, h1, h2, h3][:_pick(pages, 0, 4)]
    length, width = _pick(max_length, 0, 12), _pick(span, 1, 8)
    keys = _pick(extra, 0, step - 1)
    return agree(spec_hit(kind, hit, ps, length, width), impl_hit(kind, hit, ps, length, width, step, keys),
                 lambda: f"{kind} hit={hit} page_size={ps} max_length={length} span={width} stride={step} "
                         f"extra_keys={keys}")


def full_hit(h0: bool, h1: bool, h2: bool, h3: bool, pages: int, page_size: int, max_length: int, stride: int,
             extra: int) -> bool:
    """`hit_rules.full_rule` and `FullAttentionManager.find_longest_cache_hit` agree (see `hit_agrees`).

    post: __return__
    """
    return hit_agrees("full", h0, h1, h2, h3, pages, page_size, max_length, 1, stride, extra)


def sliding_hit(h0: bool, h1: bool, h2: bool, h3: bool, pages: int, page_size: int, max_length: int, window: int,
                stride: int, extra: int) -> bool:
    """`hit_rules.sliding_rule` and `SlidingWindowManager.find_longest_cache_hit` agree.

    post: __return__
    """
    return hit_agrees("sliding", h0, h1, h2, h3, pages, page_size, max_length, window, stride, extra)


def chunked_hit(h0: bool, h1: bool, h2: bool, h3: bool, pages: int, page_size: int, max_length: int, chunk: int,
                stride: int, extra: int) -> bool:
    """`hit_rules.chunked_rule` and `ChunkedLocalAttentionManager.find_longest_cache_hit` agree.

    post: __return__
    """
    return hit_agrees("chunked", h0, h1, h2, h3, pages, page_size, max_length, chunk, stride, extra)


# --- data-parallel shard selection ----------------------------------------------------------------

def shard_bounds_agree(pool: PagePool, dp: int, hint: int) -> bool:
    """The page range a lookup with these DP arguments searches is the spec's (`call_shard` +
    `shard_bounds`; None = the whole pool), or both reject the arguments. ``dp`` and ``hint`` are
    mapped by `_pick` to None or -1..5 and None or -2..5.

    post: __return__
    """
    size = None if dp == 6 else _pick(dp, -1, 5)
    hint_ = None if hint == 6 else _pick(hint, -2, 5)
    config = spec_manager.ManagerConfig(groups=(), num_pages=pool.num_pages, max_model_len=1,
                                        data_parallel_size=size if size is not None and size >= 1 else 1)
    state = spec_manager.ManagerState(config, spec_pool.init(pool.num_pages), frozenset())
    try:
        expected: tuple[int, int] | str | None = spec_manager.shard_bounds(
            state, spec_manager.call_shard(state, "lookup", hint_, size))
    except spec_pool.PreconditionError:
        expected = REJECTED
    try:
        found: tuple[int, int] | str | None = pool._shard_bounds(hint_, size)
    except VeriKVError:
        found = REJECTED
    return agree(expected, found, lambda: f"num_pages={pool.num_pages} dp={size} hint={hint_}")


# --- hash chains: equal spec keys <=> equal implementation keys ---------------------------------

_IDS: dict[Any, int] = {}
"""The ideal hash's table: each distinct hashed tuple gets the next number (emptied per
`impl_same_keys` call, so a number only means something within one comparison)."""


def _ideal_hash(item: Any) -> int:
    """An injective hash with an int result (hash functions must return ints): the number of
    the hashed tuple in `_IDS` (the ideal-hash assumption made literal). Numbers start at 1:
    the chains' root is ``hash(0) == 0`` (seed 0), so no page key equals the root."""
    return _IDS.setdefault(item, len(_IDS) + 1)


class _Req:
    """The request attributes hashing reads."""

    def __init__(self, tokens: list[int], salt: int, lora: int) -> None:
        self.all_token_ids = tokens
        self.cache_salt = None if salt < 0 else f"s{salt}"
        self.lora_id = None if lora < 0 else lora
        self.mm_features = ()


def impl_same_keys(a: _Req, b: _Req, page_size: int, split: int) -> list[bool]:
    """Per common full page: are the implementation's keys of ``a`` and ``b`` equal? ``a`` is
    hashed incrementally (pages before ``split``, then `PageHasher.extend`), ``b`` in one call."""
    _IDS.clear()
    hasher = _ACTIVE["hasher"](_ideal_hash, seed=0)
    keys_a = hasher.hash_request(a, page_size, stop=split)
    hasher.extend(a, page_size, keys_a)
    keys_b = hasher.hash_request(b, page_size)
    return [x == y for x, y in zip(keys_a, keys_b)]


def same_keys(tokens_a: list[int], salt_a: int, lora_a: int, tokens_b: list[int], salt_b: int, lora_b: int,
              page_size: int, split: int) -> bool:
    """For every common full page of two requests, their spec keys (exact contents) are equal
    exactly when the implementation's chained keys are (INV-HIT-SAFE's key identity, under the
    injective-hash assumption). Inputs are mapped by `_pick` into: up to 4 tokens in {0, 1}, salt
    none/"s0"/"s1", LoRA none/0, page size 1 or 2; request a is hashed incrementally up to ``split``.

    post: __return__
    """
    ps = _pick(page_size, 1, 2)
    reqs = [_Req([_pick(t, 0, 1) for t in tokens[:4]], _pick(salt, -1, 1), _pick(lora, -1, 0))
            for tokens, salt, lora in ((tokens_a, salt_a, lora_a), (tokens_b, salt_b, lora_b))]
    spec_keys = [spec_manager.request_keys(spec_manager.RequestView("r", tuple(r.all_token_ids),
                                                                    cache_salt=r.cache_salt, lora_id=r.lora_id), ps)
                 for r in reqs]
    spec_same = [x == y for x, y in zip(*spec_keys)]
    split_at = _pick(split, 0, len(reqs[0].all_token_ids) // ps)
    return agree(spec_same, impl_same_keys(reqs[0], reqs[1], ps, split_at),
                 lambda: f"page_size={ps} split={split_at} a={vars(reqs[0])} b={vars(reqs[1])}")


# --- mutants ----------------------------------------------------------------------------------------

class _LinksKeepStalePrev(IdLinks):
    """pop_front leaves the new head's ``prev`` pointing at the last popped page."""

    __slots__ = ()

    def pop_front(self, li: int, n: int) -> list[int]:
        out = super().pop_front(li, n)
        head = self.first(li)
        if out and head != UNLINKED:
            self.prev[head] = out[-1]
        return out


class QueueStalePrevOnPop(FreeCachePageQueue):
    """popleft does not unlink the popped page from its successor's ``prev``."""

    def _setup(self, records: PageRecords, links: IdLinks, page_of: Callable[[int], CachePage]) -> None:
        super()._setup(records, _LinksKeepStalePrev(links.capacity), page_of)


class _LinksStalePrevOnUnlink(IdLinks):
    """unlink does not repoint the next id's ``prev`` past the removed one."""

    __slots__ = ()

    def unlink(self, li: int, pid: int) -> None:
        after = self.next[pid]
        kept = self.prev[after]
        super().unlink(li, pid)
        self.prev[after] = kept


class QueueStalePrevOnUnlink(FreeCachePageQueue):
    """remove (a revived cache hit) leaves its successor's ``prev`` pointing at the removed page."""

    def _setup(self, records: PageRecords, links: IdLinks, page_of: Callable[[int], CachePage]) -> None:
        super()._setup(records, _LinksStalePrevOnUnlink(links.capacity), page_of)


class _LinksBatchReversed(IdLinks):
    """link_back links a batch of ids in reverse order."""

    __slots__ = ()

    def link_back(self, li: int, ids: Any, *, end: int | None = None) -> None:
        super().link_back(li, list(ids)[::-1] if end is None else ids, end=end)  # (link_front unchanged)


class QueueAppendReversed(FreeCachePageQueue):
    """append links a batch of pages in reverse order (wrong LRU order)."""

    def _setup(self, records: PageRecords, links: IdLinks, page_of: Callable[[int], CachePage]) -> None:
        super()._setup(records, _LinksBatchReversed(links.capacity), page_of)


class PoolFreeSkipsDecrement(PagePool):
    """free links a page whose last reference is dropped but leaves its count at 1 (missing decrement)."""

    def _link(self, front: Sequence[int], back: Sequence[int]) -> None:
        super()._link(front, back)
        for pid in (*front, *back):
            self._ref[pid] = 1


class FullHitOneTooLong(FullAttentionManager):
    """A full-attention hit capped at ``max_length // page_size + 1`` pages (off-by-one hit cap)."""

    __slots__ = ()

    def _max_hit_pages(self, keys: Any, max_length: int, group_ids: Any) -> int:
        return min(max_length // self.page_size + 1, len(keys) // self._stride)


class SlidingNeedsOneMore(SlidingWindowManager):
    """A sliding-window hit needs ``cdiv(sw, ps)`` consecutive pages instead of ``cdiv(sw - 1, ps)``."""

    __slots__ = ()

    def __init__(self, kv_cache_spec: Any, page_pool: Any, kv_cache_group_id: int,
                 key_page_size: int | None = None) -> None:
        super().__init__(kv_cache_spec, page_pool, kv_cache_group_id, key_page_size)
        self.sliding_window += 1


class HasherWithoutExtraKeys(PageHasher):
    """Page keys ignore the extra keys (salt, LoRA, multimodal): tenants share cached pages."""

    def _chain(self, parent: Any, pages: list[bytes], extras: Any, first: int, page_size: int) -> list[Any]:
        return super()._chain(parent, pages, None, first, page_size)


_ACTIVE: dict[str, Any] = {
    "queue": FreeCachePageQueue,
    "pool": PagePool,
    "full": FullAttentionManager,
    "sliding": SlidingWindowManager,
    "chunked": ChunkedLocalAttentionManager,
    "hasher": PageHasher,
}
"""The class each role uses; a mutant replaces one entry."""

MUTANTS: dict[str, tuple[str, type[Any], str]] = {
    "QueueStalePrevOnPop": ("queue", QueueStalePrevOnPop, "INV-FREE-DISTINCT"),
    "QueueStalePrevOnUnlink": ("queue", QueueStalePrevOnUnlink, "INV-FREE-DISTINCT"),
    "QueueAppendReversed": ("queue", QueueAppendReversed, "refines-spec"),
    "PoolFreeSkipsDecrement": ("pool", PoolFreeSkipsDecrement, "INV-FREE-IFF-ZERO"),
    "PoolEvictionKeepsKey": ("pool", EvictionKeepsKey, "INV-KEY-BIJ"),  # the pool mutant of that name
    "FullHitOneTooLong": ("full", FullHitOneTooLong, "INV-HIT-SHAPE"),
    "SlidingNeedsOneMore": ("sliding", SlidingNeedsOneMore, "INV-HIT-SHAPE"),
    "HasherWithoutExtraKeys": ("hasher", HasherWithoutExtraKeys, "INV-HIT-SAFE"),
}
"""Mutant name -> (role it replaces, class, invariant it breaks)."""


def activate(mutant: str | None) -> None:
    """Install ``mutant`` (a `MUTANTS` name) in its role; None or "" keeps the implementation."""
    if mutant:
        role, cls, _ = MUTANTS[mutant]
        _ACTIVE[role] = cls

