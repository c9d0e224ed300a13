"""Bounded-exhaustive refinement of the real `verikv.CacheManager` against the spec.

Explicit-state model checking of the code users import: for each layout, every operation
sequence up to a stated depth over a small, fixed pool of requests is run on a real
`CacheManager` and on `verikv.spec.manager` side by side, and after every step the checker of
`verikv.testing.manager_machine.ManagerMachine` (white-box mode, every check enforced) compares
the implementation's abstraction with the spec state (key digests renamed to contents) and
evaluates every invariant. A failure names the invariant it breaks (``INV-...``) or
``REFINEMENT``, with the operation sequence that led there.

Operations (per node, all of them are tried): admit a new request from a tiny prompt set
(lookup, then allocate the prefill with the hit, or a first chunk without it), resume a
waiting request the same two ways, step a running request (next prefill chunk, or decode: append
a token and allocate its slot, with the layout's lookahead / delayed caching / DP variants),
a scheduler step of every running request as one ``allocate_slots_batch`` (with lookahead
slots; compared with the same single calls in order on a copy), preempt, finish (free +
free_page_hashes), cache_pages, reset_prefix_cache, and bad calls (zero
tokens, past ``max_model_len``, caching past the request's tokens) and, in one layout, an
admission while the hash backend fails (the spec's transitions are pure, so a key computation
that raises leaves its state unchanged: the implementation must do the same, INV-ATOMIC).
Prompts share page-sized
blocks, so prefix hits, evictions and full-pool failures all occur within the depth.

Reductions (sound for the properties checked, under the stated assumptions):

- *state hashing*: breadth-first, so each state is expanded once, at its smallest depth; a
  state is the spec state (pool, entries, ghost key lists and ``content``), the machine's own
  ghost (the content each page holds as the machine recorded it, which judges INV-HIT-SAFE on
  what lookups return) plus, per live request, its tokens, computed count, queue and the
  implementation's key-list length (`_state`). After a step that passed the check, the
  implementation's abstraction equals the spec state, so this also fixes the implementation's
  abstraction. Assumption: what the implementation keeps outside its abstraction (its last
  lookup result, caching schedule, decode-path capacity) is determined by that state; two
  histories reaching one state are explored once. Left out as dead: the ghosts of a free page
  without a key (nothing reads them before an allocation erases them). Sets are spelled sorted, so the run does
  not depend on the interpreter's string-hash seed. States are stored as 128-bit digests (hash
  compaction);
- *symmetry*: request ids are dropped from the state (requests are an unordered multiset of
  their descriptions), since nothing the manager does depends on an id's spelling; and page
  ids are renamed canonically within each DP shard (`_page_renaming`), so states one renaming
  apart (two requests admitted in either order) are one. Assumption: the implementation treats
  page ids as names (its behaviour commutes with a renaming that keeps each page in its shard);
  the free list's order is part of the state, so LRU order is not lost.

No partial-order reduction: two operations on one pool never commute in general (each moves
pages through the shared free list), and where they commute up to a page renaming the symmetry
above already merges the end states, so commuting pairs cost transitions, not states.

Each frontier node keeps its implementation (the adapter, the manager and the engine requests)
pickled, and each child unpickles a fresh copy (about four times faster than ``copy.deepcopy``
and a few kB per state); an implementation that cannot be pickled (a planted mutant's one-off
classes) is deep-copied instead. Bounds and CPU budgets per check: docs/ci.md.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from verikv.proofs.runner.registry import Check, Outcome
from verikv.spec import manager as spec
from verikv.spec.hit_rules import EagleRule
from verikv.spec.pool import NULL_PAGE, FreeOrder

PAGE = 2
"""Page size of every attention group here (Mamba groups: one page holds the whole state)."""
_B0, _B1 = (0, 1), (1, 0)
PROMPTS: tuple[tuple[int, ...], ...] = (_B0 + _B1, _B0 + _B1 + (0,), _B1 + _B0 + (0,))
"""Three prompts built from two page-sized blocks: the first two share two full pages (prefix
hits), the third holds the same pages at other depths (same tokens, different keys); the last
two end inside a page, so one decode token fills it."""
TOKENS = (0, 1)
"""Decode tokens: drawn from the blocks, so a decoded page can equal a prompt's page."""
CHUNK = PAGE + 1
"""Prefill chunk in tokens: not page-aligned, so a chunk can end inside a page whose key is
already known (from the lookup) but whose tokens are not all computed."""
MAX_LIVE = 2
MAX_MODEL_LEN = 7
"""Odd, so a request's last page is partly beyond ``max_model_len`` (capacity caps matter)."""


@dataclass(frozen=True)
class Case:
    """One layout of the exhaustive run, with the call variants it exercises."""

    name: str
    groups: tuple[spec.GroupLayout, ...]
    num_pages: int
    depth: int
    use_eagle: bool = False
    data_parallel_size: int = 1
    free_order: FreeOrder = "esurge"
    hash_scheme: str = "sha256"
    lookahead: int = 0
    delay: bool = False
    enable_caching: bool = True
    key_failures: bool = False
    """Also admit requests while the hash backend fails (INV-ATOMIC under key failure)."""
    rename_pages: bool = True
    """Merge states one page renaming (within DP shards) apart."""
    skip_unreachable_sliding_pages: bool = False
    eagle_rule: EagleRule = "drop-once"
    _config: spec.ManagerConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_config", spec.ManagerConfig(
            self.groups, self.num_pages, MAX_MODEL_LEN, enable_caching=self.enable_caching,
            use_eagle=self.use_eagle, data_parallel_size=self.data_parallel_size, free_order=self.free_order,
            skip_unreachable_sliding_pages=self.skip_unreachable_sliding_pages, eagle_rule=self.eagle_rule))

    @property
    def config(self) -> spec.ManagerConfig:
        return self._config

    @property
    def dp(self) -> int | None:
        return self.data_parallel_size if self.data_parallel_size > 1 else None

    @property
    def bound(self) -> str:
        return (f"N={self.num_pages},depth<={self.depth},requests<={MAX_LIVE},prompts={len(PROMPTS)},"
                f"page={PAGE},max_model_len={MAX_MODEL_LEN}")

    @property
    def check_name(self) -> str:
        return f"refine:{self.name}:N<={self.num_pages},depth<={self.depth} exhaustive"


FULL = spec.GroupLayout("full", PAGE)
SLIDING = spec.GroupLayout("sliding", PAGE, 3)
"""Window 3 > page 2: the window spans two pages."""
SLIDING_SMALL = spec.GroupLayout("sliding", PAGE, 2)
"""Window 2 <= page: a hit needs only the last page (eSurge's Q1 lives here)."""
CHUNKED = spec.GroupLayout("chunked", PAGE, 4)
MAMBA = spec.GroupLayout("mamba", MAX_MODEL_LEN)
MAMBA_ALIGN = spec.GroupLayout("mamba_align", PAGE)
"""Mamba in align mode: a state page per step, cached at page-aligned computed counts."""

CASES: tuple[Case, ...] = (
    Case("full", (FULL,), 6, 7),
    Case("sliding", (SLIDING,), 6, 6),
    Case("chunked", (CHUNKED,), 6, 6),
    Case("mamba", (MAMBA,), 4, 8),
    Case("full+mamba(align)", (FULL, MAMBA_ALIGN), 8, 6),
    Case("full+sliding", (FULL, SLIDING), 8, 6),
    Case("sliding-first(window<=page)+full", (SLIDING_SMALL, FULL), 7, 6),
    Case("full+sliding+chunked", (FULL, SLIDING, CHUNKED), 8, 8),
    Case("dp2", (FULL,), 8, 4, data_parallel_size=2),
    Case("eagle(full)", (FULL,), 6, 6, use_eagle=True),
    Case("eagle(full+sliding)", (FULL, SLIDING), 7, 6, use_eagle=True),
    Case("eagle-vllm(full+sliding)", (FULL, SLIDING), 7, 6, use_eagle=True, eagle_rule="vllm"),
    Case("lookahead", (FULL,), 6, 6, lookahead=2),
    Case("delayed-caching", (FULL,), 6, 6, delay=True),
    Case("unhashed-first(full+sliding)", (FULL, SLIDING), 7, 6, free_order="unhashed-first"),
    Case("builtin-hash", (FULL,), 7, 5, hash_scheme="builtin"),
    Case("xxh3-hash", (FULL,), 7, 5, hash_scheme="xxh3_128"),
    Case("key-failure(full+sliding)", (FULL, SLIDING), 8, 5, key_failures=True),
)
"""Every layout the manager supports (full, sliding, chunked, Mamba, hybrids, DP, EAGLE, lookahead,
delayed caching, both free orders, each hash scheme), with the depth that fits the budget."""
CASES_BY_NAME = {case.name: case for case in CASES}

Op = tuple[Any, ...]
MakeManager = Callable[[spec.ManagerConfig], Any]


def build_manager(case: Case) -> MakeManager:
    """The real manager for a case (its hash scheme; the machine's layer geometry)."""
    from verikv.hashing import PageHasher
    from verikv.testing.adapter import build_cache_manager

    def make(config: spec.ManagerConfig) -> Any:
        manager = build_cache_manager(config)
        if case.hash_scheme != "sha256":
            manager.hasher = PageHasher(case.hash_scheme)
        return manager
    return make


# ---- one node: a verikv.testing.manager_machine.ManagerMachine, copied per node --------------
# A node's ``impl`` is the machine's `CacheManagerAdapter`; its ``manager`` is the real
# `CacheManager`. Calls whose exact shape matters (the plain ``allocate_slots(request, n)``
# without DP arguments, which may take the implementation's decode fast path) go to the manager.

def _root(case: Case, make_manager: MakeManager, machine_class: type | None = None) -> Any:
    from verikv.testing.adapter import CacheManagerAdapter
    from verikv.testing.manager_machine import Layout, ManagerMachine

    machine = (machine_class or ManagerMachine)(Layout(case.name, case.config),
                                                lambda config: CacheManagerAdapter(config, make_manager))
    machine.check()
    return machine


def _manager(node: Any) -> Any:
    """The real `CacheManager` behind the node's adapter."""
    return node.impl.manager


@dataclass
class _Parked:
    """A frontier node at rest: the machine without its mutable implementation part, which is
    held pickled (unpickling is about four times faster than ``copy.deepcopy`` of the same
    objects, and a few kB of bytes weigh far less than the live objects), or live when it
    cannot be pickled (a planted mutant's one-off classes): then each child deep-copies it."""

    shell: Any
    parts: bytes | tuple[Any, Any]
    views: dict[str, spec.RequestView]
    """The live requests as the scheduler sees them (what `_operations` reads)."""


def _park(node: Any) -> _Parked:
    """``node`` at rest (``node`` itself is left as it is)."""
    parts = (node.impl, node.requests)
    shell = object.__new__(type(node))
    shell.__dict__.update(node.__dict__)
    shell.impl = shell.requests = None
    views = {rid: t.view for rid, t in node.requests.items()}
    try:
        return _Parked(shell, pickle.dumps(parts, pickle.HIGHEST_PROTOCOL), views)
    except (pickle.PicklingError, AttributeError, TypeError):
        return _Parked(shell, parts, views)


def _child(node: Any) -> Any:
    """A copy of ``node`` to apply one operation to."""
    return _unpark(_park(node))


def _unpark(parked: _Parked) -> Any:
    """A fresh machine for one child of ``parked`` (the spec state and request views are
    immutable and shared; the adapter, its manager and the engine requests it references are
    new objects)."""
    node, parts = parked.shell, parked.parts
    child = object.__new__(type(node))
    child.__dict__.update(node.__dict__)
    if isinstance(parts, bytes):
        child.impl, child.requests = pickle.loads(parts)
    else:
        manager = parts[0].manager
        shared = (manager.hasher, *manager.kv_cache_groups)  # immutable: no need to copy
        child.impl, child.requests = copy.deepcopy(parts, {id(x): x for x in shared})
    child.waiting, child.running = list(node.waiting), list(node.running)
    child.forward, child.backward, child.failures = dict(node.forward), dict(node.backward), []
    child.computed = dict(node.computed)
    return child


def _state(node: Any, rename_pages: bool) -> str:
    """The node's state in a canonical spelling: request ids dropped (symmetry), sets sorted
    (their ``repr`` follows the interpreter's string-hash seed), ghost fields included, and with
    ``rename_pages`` the page ids renamed canonically (`_page_renaming`)."""
    s, manager = node.spec, _manager(node)
    keys, progress = dict(s.keys), dict(s.progress)
    requests = []
    for rid, t in node.requests.items():
        entry = s.entry(rid)
        unlabelled = repr((t.view.tokens, t.view.num_computed_tokens, rid in node.running, keys.get(rid),
                           progress.get(rid), len(manager.page_hashes_of(rid)),
                           None if entry is None else (entry.num_cached, entry.shard)))
        requests.append((unlabelled, () if entry is None else entry.pages))
    requests.sort()
    pool = s.pool
    label = _page_renaming(s, [pages for _, pages in requests]) if rename_pages else {
        p: p for p in range(pool.num_pages)}

    def relabel(pages: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(label[p] for p in pages)

    by_label = sorted(label, key=label.__getitem__)
    per_page = tuple((pool.ref[p], pool.key_of[p]) if _dead(pool, p) else
                     (pool.ref[p], pool.key_of[p], s.content[p], node.computed.get(p)) for p in by_label)
    cached = sorted((repr(key), relabel(ids)) for key, ids in pool.cached)
    held = [(unlabelled, tuple(relabel(g) for g in pages)) for unlabelled, pages in requests]
    finished_keys = sorted(repr(k) for rid, k in s.keys if rid not in node.requests)
    return repr((per_page, relabel(pool.free), cached, held, finished_keys))


def _dead(pool: Any, p: int) -> bool:
    """Whether page ``p``'s ghosts are dead: a free page without a key is in no table and no
    lookup can return it, and the allocation that hands it out again erases both ghosts (the
    spec's ``content``, the machine's) before anything reads them."""
    return pool.ref[p] == 0 and pool.key_of[p] is None


def _page_renaming(s: spec.ManagerState, tables: list[tuple[tuple[int, ...], ...]]) -> dict[int, int]:
    """A canonical renaming of page ids (old -> new) that keeps every page in its DP shard: the
    pages of the requests (in the order of their page-free descriptions, group by group), then
    the free list from its head, then any other page, each take the next unused id of their
    shard. Two states one such renaming apart (say, two requests admitted in either order) then
    spell the same."""
    shards = [range(1, s.config.num_pages)] if s.config.data_parallel_size == 1 else [
        range(*bounds) for bounds in (spec.shard_bounds(s, shard) for shard in range(s.config.data_parallel_size))
        if bounds is not None]
    unused = [iter(ids) for ids in shards]
    label = {NULL_PAGE: NULL_PAGE}
    candidates = [p for table in tables for pages in table for p in pages]
    for p in (*candidates, *s.pool.free, *range(s.config.num_pages)):
        if p not in label:
            label[p] = next(next(ids) for ids, shard in zip(unused, shards) if p in shard)
    return label


def _digest(case: Case, node: Any) -> bytes:
    """`_state` compacted to a 128-bit digest (hash compaction: a collision would merge two
    states, with probability below 1e-25 for the few million states here)."""
    return hashlib.blake2b(_state(node, case.rename_pages).encode(), digest_size=16).digest()


# ---- operations ------------------------------------------------------------------------------

def _operations(case: Case, node: _Parked) -> Iterator[Op]:
    hints: tuple[int | None, ...] = (0, 1) if case.dp else (None,)
    if len(node.views) < MAX_LIVE:
        for prompt in range(len(PROMPTS)):
            for hint in hints:
                yield ("new", prompt, "hit", hint)
                yield ("new", prompt, "chunk", hint)
            if case.key_failures:
                yield ("new-key-failure", prompt)
    for rid in sorted(node.views):
        request = node.views[rid]
        if rid in node.shell.waiting:
            for hint in hints:
                yield ("resume", rid, "hit", hint)
                yield ("resume", rid, "chunk", hint)
        else:
            if request.num_computed_tokens < request.num_tokens:
                yield ("step", rid, None, "plain")
            elif request.num_tokens < MAX_MODEL_LEN:
                for token in TOKENS:
                    yield ("step", rid, token, "plain")
                    if case.dp:
                        yield ("step", rid, token, "other-shard")
            yield ("preempt", rid)
            if case.delay:  # else every allocation already cached up to the computed tokens
                yield ("cache", rid, 0)
                yield ("cache", rid, PAGE)
            yield ("bad-too-long", rid)
            yield ("bad-cache-too-far", rid)
        yield ("finish", rid)
    if len(_batchable(node.views, node.shell.waiting)) >= 2:
        yield ("batch",)
    yield ("reset",)
    if node.views:
        yield ("bad-zero", min(node.views))


def _batchable(views: dict[str, spec.RequestView], waiting: list[str]) -> list[str]:
    """The running requests a scheduler step can grow: a prefill chunk left, or room to decode."""
    return [rid for rid, view in sorted(views.items()) if rid not in waiting
            and (view.num_computed_tokens < view.num_tokens or view.num_tokens < MAX_MODEL_LEN)]


def _new_request(node: Any, prompt: int) -> str:
    from verikv.testing.manager_machine import Tracked

    rid = f"r{node.next_id}"
    node.next_id += 1
    node.requests[rid] = Tracked(spec.RequestView(rid, PROMPTS[prompt]))
    node.waiting.append(rid)
    return rid


def _start_running(node: Any, rid: str, computed: int) -> None:
    node.set_computed(rid, computed)
    node.waiting.remove(rid)
    node.running.append(rid)


def _admit(case: Case, node: Any, rid: str, mode: str, hint: int | None) -> None:
    """Lookup, then allocate the rest of the prompt with the hit (``hit``) or a first chunk of
    `CHUNK` tokens without it (``chunk``), with the layout's lookahead; on success the request
    runs."""
    request = node.view(rid)
    pages, hit = node.lookup(rid, hint)
    if node.failures:
        return
    if mode == "hit":
        done = node.allocate(rid, request.num_tokens - hit.num_tokens, hit.num_tokens, pages, hit.pages,
                             case.lookahead, hint=hint)
        computed = request.num_tokens
    else:
        num_new = min(CHUNK, request.num_tokens)
        done = node.allocate(rid, num_new, lookahead=case.lookahead, hint=hint)
        computed = num_new
    if done:
        _start_running(node, rid, computed)


def _step(case: Case, node: Any, rid: str, token: int | None, variant: str) -> None:
    """The next prefill chunk, or one decode token; a failed allocation leaves the request as it
    is (the scheduler retries or preempts it: both are other operations)."""
    tracked = node.requests[rid]
    if token is not None:
        tracked.view = replace(tracked.view, tokens=tracked.view.tokens + (token,))
    request = tracked.view
    num_new = min(CHUNK, request.num_tokens - request.num_computed_tokens)
    if variant == "plain" and case.dp:
        done = _allocate_plain(node, rid, num_new)
    else:
        held = node.spec.entry(rid)
        hint = None if held is None or held.shard is None else 1 - held.shard
        done = node.allocate(rid, num_new, lookahead=case.lookahead, delay=case.delay, hint=hint)
    if done:
        node.set_computed(rid, request.num_computed_tokens + num_new)


def _batch(case: Case, node: Any) -> None:
    """One ``allocate_slots_batch`` over every running request that can grow (its next prefill
    chunk, or one decoded token ``TOKENS[0]``), compared with the same single calls in order on a
    copy and with the spec's batch (`ManagerMachine.allocate_batch`). It always takes lookahead
    slots (the layout's, else one), where a batch and its single calls can differ most."""
    rids, counts = [], []
    for rid in _batchable({rid: tracked.view for rid, tracked in node.requests.items()}, node.waiting):
        tracked = node.requests[rid]
        if tracked.view.num_computed_tokens == tracked.view.num_tokens:
            tracked.view = replace(tracked.view, tokens=tracked.view.tokens + (TOKENS[0],))
        rids.append(rid)
        counts.append(min(CHUNK, tracked.view.num_tokens - tracked.view.num_computed_tokens))
    node.allocate_batch(rids, counts, case.lookahead or 1, case.delay)


def _allocate_plain(node: Any, rid: str, num_new: int) -> bool:
    """A DP request's decode step without DP arguments (the shard is the one it holds), as a
    scheduler that remembers nothing calls it: the implementation's decode fast path."""
    request, view = node.native(rid), node.view(rid)
    return allocate_directly(node, rid, lambda: _manager(node).allocate_slots(request, num_new),
                             lambda: spec.allocate_slots(node.spec, view, num_new),
                             f"allocate_slots({num_new}) without DP arguments")


def allocate_directly(node: Any, rid: str, impl_call: Callable[[], Any],
                      spec_call: Callable[[], tuple[spec.ManagerState, Any]], call: str) -> bool:
    """An allocation made on the real manager (a call shape the machine's adapter does not
    have), checked as the machine checks its own: both sides reject a call outside the spec's
    precondition, changing nothing; otherwise the new pages equal the spec's, a None changes
    nothing (INV-ATOMIC), and the spec moves to its next state. Returns whether it succeeded."""
    from verikv.spec.pool import PreconditionError

    try:
        want_state, want = spec_call()
    except PreconditionError as exc:
        node.expect_rejected(f"{rid}: {call} outside the spec's precondition ({exc})", impl_call, spec_call)
        return False
    before = node.snapshot()
    _settle_allocation(node, rid, impl_call(), want_state, want, call)
    if want is None and node.snapshot() != before:
        node.fail("INV-ATOMIC", f"{rid}: {call} returned None and changed the state")
    return want is not None


def _settle_allocation(node: Any, rid: str, result: Any, want_state: Any, want: Any, call: str) -> None:
    """Compare an allocation's new pages with the spec's, then move the spec to its next state."""
    from verikv.testing.manager_machine import page_ids_or_none

    got = page_ids_or_none(result)
    if got is not None:
        node.check_new_pages(rid, got)
    if got != want:
        node.fail("REFINEMENT", f"{rid}: {call} returned {got}, spec {want}")
    node.spec = want_state


class KeyComputationFailed(RuntimeError):
    """The injected failure of the hash backend."""


class _FailingHasher:
    """Stands in for the manager's hasher: computing any key raises `KeyComputationFailed`."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        if name in ("hash_request", "extend", "hash_page"):
            def fail(*args: Any, **kwargs: Any) -> Any:
                raise KeyComputationFailed(f"hash backend down ({name})")
            return fail
        return getattr(self.real, name)


def _admit_with_failing_keys(node: Any, rid: str) -> None:
    """A first prefill chunk (no lookup) while every key computation fails. Either the call
    needs no key and behaves as the spec's allocation, or it raises and changes nothing
    (INV-ATOMIC: keys are computed before anything changes)."""
    request, view, manager = node.native(rid), node.view(rid), _manager(node)
    num_new = min(CHUNK, view.num_tokens)
    before = node.snapshot()
    want_state, want = spec.allocate_slots(node.spec, view, num_new)
    real = manager.hasher
    manager.hasher = _FailingHasher(real)
    try:
        result = manager.allocate_slots(request, num_new)
    except KeyComputationFailed as exc:
        if node.snapshot() != before:
            node.fail("INV-ATOMIC", f"{rid}: allocate_slots raised on a failing key computation and kept "
                                    "its changes")
        node.spec, _ = spec.fail_key_computation(node.spec, view, "allocate_slots", str(exc))
        return
    finally:
        manager.hasher = real
    _settle_allocation(node, rid, result, want_state, want, "allocate_slots with failing keys")
    if want is not None:
        _start_running(node, rid, num_new)


def _cache(node: Any, rid: str, back: int) -> None:
    request = node.native(rid)
    n = max(0, node.view(rid).num_computed_tokens - back)
    if node.spec.entry(rid) is None:
        node.expect_rejected(f"cache_pages({rid}) without pages", lambda: node.impl.cache(request, n),
                             lambda: spec.cache_pages(node.spec, node.view(rid), n))
        return
    node.impl.cache(request, n)
    node.spec = spec.cache_pages(node.spec, node.view(rid), n)




def bad_call(node: Any, kind: str, rid: str) -> None:
    """One invalid call, given without DP arguments (the plain call shape, which may take the
    implementation's fast path); both sides reject it and nothing changes (INV-ATOMIC)."""
    request, view, s, manager = node.native(rid), node.view(rid), node.spec, _manager(node)
    if kind == "bad-zero":
        node.expect_rejected(f"allocate_slots({rid}, 0)", lambda: manager.allocate_slots(request, 0),
                             lambda: spec.allocate_slots(s, view, 0))
    elif kind == "bad-too-long":
        n = node.config.max_model_len + 1 - view.num_computed_tokens
        node.expect_rejected(f"allocate_slots({rid}, {n}) past max_model_len",
                             lambda: manager.allocate_slots(request, n), lambda: spec.allocate_slots(s, view, n))
    else:
        n = view.num_tokens + 1
        node.expect_rejected(f"cache_pages({rid}, {n}) past its tokens", lambda: manager.cache_pages(request, n),
                             lambda: spec.cache_pages(s, view, n))


def apply(case: Case, node: Any, op: Op) -> None:
    """Apply one operation to ``node`` in place and check it (raises `ConformanceFailure`)."""
    kind = op[0]
    if kind == "new":
        _admit(case, node, _new_request(node, op[1]), op[2], op[3])
    elif kind == "new-key-failure":
        _admit_with_failing_keys(node, _new_request(node, op[1]))
    elif kind == "resume":
        _admit(case, node, op[1], op[2], op[3])
    elif kind == "step":
        _step(case, node, op[1], op[2], op[3])
    elif kind == "preempt":
        node.preempt_request(op[1])
    elif kind == "finish":
        node.finish_request(op[1], aborted=False)
    elif kind == "cache":
        _cache(node, op[1], op[2])
    elif kind == "batch":
        _batch(case, node)
    elif kind == "reset":
        node.apply_reset()
    else:
        bad_call(node, kind, op[1])
    check_node(node)


def check_node(node: Any) -> None:
    """The machine's check (refinement and every invariant), then INV-WINDOW-LIVE and
    INV-KEYED-COMPUTED in their ghost-free form (`_ghost_free_failures`). Once refinement holds,
    the implementation's abstraction has the spec state's entries and keyed pages, so the
    ghost-free form is evaluated on the spec state (no second abstraction of the
    implementation); when refinement fails, on the implementation's abstraction, so that the
    failure names the invariant the implementation breaks, not only REFINEMENT."""
    from verikv.testing.manager_machine import ConformanceFailure

    try:
        node.check()
    except ConformanceFailure as failure:
        extra = _ghost_free_failures(node, node.snapshot())
        failure.names = sorted({*failure.names, *(name for name, _ in extra)})
        failure.args = ("\n".join([str(failure), *(f"{name}: {detail}" for name, detail in extra)]),)
        raise
    extra = _ghost_free_failures(node, node.spec)
    if extra:
        raise ConformanceFailure(extra)


def _ghost_free_failures(node: Any, got: spec.ManagerState) -> list[tuple[str, str]]:
    """INV-WINDOW-LIVE and INV-KEYED-COMPUTED on ``got`` (an abstraction, which has no ghost):
    what the driver knows stands in for the ghost. Windows: the position each request's last
    allocation started computing at (the spec's record of the same calls). Keys: a page a
    request holds at index ``j`` may be keyed only if its tokens are computed, ``(j + 1) *
    page_size <= `` the request's computed tokens."""
    computed = {rid: node.view(rid).num_computed_tokens for rid in node.running}
    failures = []
    if not spec.inv_window_live(got, dict(node.spec.progress)):
        failures.append(("INV-WINDOW-LIVE", f"a page inside a window was dropped: {sorted(got.entries)}"))
    for rid, e in got.entries:
        for layout, pages in zip(got.config.groups, e.pages):
            early = [q for j, q in enumerate(pages) if q != NULL_PAGE and got.pool.key_of[q] is not None
                     and (j + 1) * layout.page_size > computed.get(rid, 0)]
            if early:
                detail = f"{rid}: pages {early} keyed before their tokens are computed ({computed.get(rid, 0)})"
                failures.append(("INV-KEYED-COMPUTED", detail))
    return failures


# ---- the search ------------------------------------------------------------------------------

@dataclass
class Result:
    """What one exhaustive run covered, and the first failure (names, trace, detail) if any."""

    states: int = 0
    transitions: int = 0
    failure: tuple[list[str], tuple[Op, ...], str] | None = None


def _crash_names(before: Any, after: Any, exc: Exception) -> list[str]:
    """An exception escaping the implementation: ``crash:<type>``, and INV-ATOMIC when the
    call changed the implementation's state on its way out."""
    from verikv.spec.abstraction import abstract_manager

    names = [f"crash:{type(exc).__name__}"]
    try:
        changed = abstract_manager(after.impl.abstraction()) != abstract_manager(before.impl.abstraction())
    except Exception:
        changed = True
    return names + ["INV-ATOMIC"] if changed else names


def explore(case: Case, make_manager: MakeManager | None = None, machine_class: type | None = None) -> Result:
    """Breadth-first over every operation sequence of ``case`` up to its depth; stops at the
    first failure (the shortest trace, since the search is breadth-first). ``machine_class``:
    a `ManagerMachine` subclass whose ``check`` judges more (default: `ManagerMachine`)."""
    make = make_manager or build_manager(case)
    result = Result()
    logger = logging.getLogger("verikv")
    level = logger.level
    logger.setLevel(logging.ERROR)  # refused resets are expected here, thousands of times
    try:
        _search(case, make, result, machine_class)
    finally:
        logger.setLevel(level)
    return result


def _search(case: Case, make: MakeManager, result: Result, machine_class: type | None = None) -> None:
    """Fill ``result``: one breadth-first level per depth, each new state expanded once."""
    from verikv.testing.manager_machine import ConformanceFailure

    try:
        root = _root(case, make, machine_class)
    except ConformanceFailure as failure:
        result.failure = (failure.names, (), str(failure))
        return
    seen = {_digest(case, root)}
    frontier: list[tuple[_Parked, tuple[Op, ...]]] = [(_park(root), ())]
    result.states = 1
    for _ in range(case.depth):
        following: list[tuple[_Parked, tuple[Op, ...]]] = []
        for parked, trace in frontier:
            for op in _operations(case, parked):
                child = _unpark(parked)
                result.transitions += 1
                try:
                    apply(case, child, op)
                except ConformanceFailure as failure:
                    result.failure = (failure.names, trace + (op,), str(failure))
                    return
                except Exception as exc:
                    result.failure = (_crash_names(_unpark(parked), child, exc), trace + (op,), repr(exc))
                    return
                digest = _digest(case, child)
                if digest not in seen:
                    seen.add(digest)
                    following.append((_park(child), trace + (op,)))
        result.states += len(following)
        frontier = following


def _describe(trace: tuple[Op, ...]) -> str:
    return " ; ".join(" ".join(str(x) for x in op if x is not None) for op in trace)


def run_case(case: Case, make_manager: MakeManager | None = None, machine_class: type | None = None) -> Outcome:
    start = time.perf_counter()
    result = explore(case, make_manager, machine_class)
    if result.failure is not None:
        names, trace, detail = result.failure
        return Outcome("failed", f"{', '.join(names)} after [{_describe(trace)}]: {detail}")
    return Outcome("passed", f"exhaustive: {result.states} distinct states, {result.transitions} transitions "
                             f"({time.perf_counter() - start:.1f} s)")


def failed_checks(case: Case, make_manager: MakeManager, machine_class: type | None = None) -> list[str]:
    """Names of the checks an implementation fails on ``case`` (empty: it passes)."""
    result = explore(case, make_manager, machine_class)
    return [] if result.failure is None else result.failure[0]


def checks() -> list[Check]:
    """One exhaustive refinement check per layout."""
    return [Check(name=case.check_name, kind="refinement", invariant="REFINEMENT+all",
                  transition="manager.*", bound=case.bound, run=lambda case=case: run_case(case))  # type: ignore[misc]
            for case in CASES]
