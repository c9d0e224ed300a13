"""Seeded random walks of the real `verikv.CacheManager` against the spec, in a large world.

`verikv.proofs.refinement.exhaustive` runs *every* operation sequence of a tiny world (page size 2, pools
of at most 8 pages, two requests, tokens {0, 1}). Much of what a serving engine does is out of
that world's reach: the NumPy bulk paths of the free list, the pool and the hasher (from 8,
32, 128 and 256 pages in one call), token ids wider than 16 or 32 bits, pages held by three
or more requests, lookups answered long before their allocation, batched steps, tokens loaded
by a KV connector, hit caps, salts, LoRA adapters and images, the cascade-attention query and
the prefix-cache statistics. This module drives all of them through the public API on seeded
random walks: per layout, `WALKS` walks of `STEPS` steps, each step one scheduler operation
drawn by a `random.Random` seeded with ``(SEED, layout, walk)``. A run is reproducible and a
failure names the walk, the step and the operations that led there. It is **not**
exhaustive: the check names say ``random``, and a walk that finds nothing reports
"no-counterexample" (a bounded search, not a proof).

The world (`World`): page size 16; token ids from `VOCABULARY`, where every small id has
aliases above 2^16, 2^31, 2^32 and 2^63 (the same low bits), so a key computed from narrowed
ids gives an alias page the key of the original; prompts made of 16-token blocks (`BLOCKS`,
some of them aliases of others), up to about 300 pages, each sharing a prefix of a random
number of blocks with one of two long documents (so three or four live requests share hundreds
of pages); decoded tokens copy a block, so decoded pages equal prompt pages; pools of 1 200 to
2 400 pages, so long prompts, long hits and long frees go through the bulk paths, and the
pool still runs short (allocations fail, requests are preempted).

Operations: a request arrives (salt, LoRA identity, image, prompt logprobs drawn), is looked
up (the answer is kept and used by its admission later, after other calls: the manager must
accept it exactly when it is still valid), admitted (with the kept lookup or a fresh one,
capped by ``max_cache_hit_length`` or not, tokens loaded by a KV connector or not, all or a
chunk of the prompt), stepped (prefill chunk or decode, lookahead, delayed caching, DP hints),
stepped in a batch (`allocate_slots_batch`, compared with the same single calls in order on a
copy of the manager: `verikv.testing.manager_machine.ManagerMachine.allocate_batch`),
preempted, finished or aborted; the scheduler caches, resets, asks for the common prefix and
takes the statistics; bad calls are rejected.

After every step: `verikv.proofs.refinement.exhaustive.check_node` (the machine's refinement check and
every invariant; INV-HIT-SAFE judged by the machine's own record of what each page's tokens
computed) and, for every live request, its whole key list: the implementation's keys
(`CacheManager.page_hashes_of`) must stand, one by one, for the contents of the request's
full pages (`verikv.spec.manager.content_of`), through a renaming of digests to contents kept
for the whole walk that must stay one-to-one both ways (a digest for two contents breaks
INV-HIT-SAFE; two digests for one content is a REFINEMENT failure). The cascade-attention
counts are compared with `verikv.spec.manager.num_common_prefix_pages` and the prefix-cache
statistics with `verikv.spec.stats` whenever the walk asks for them, and at the end of every
walk. A walk must also reach its coverage floor (`Floor`): otherwise the check fails, as it
would not have exercised what it claims to.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from verikv.proofs.refinement.exhaustive import allocate_directly, bad_call, check_node
from verikv.proofs.runner.registry import Check, Outcome
from verikv.spec import manager as spec, stats
from verikv.spec.pool import resettable

PAGE = 16
SEED = 20_261_129
WALKS = 3
STEPS = 30
SMALL = (0, 1, 2, 3, 5, 8, 13, 21)
VOCABULARY: tuple[int, ...] = (*SMALL, *(t + (1 << 16) for t in SMALL[1:4]), (1 << 31) + 1, (1 << 32) + 2,
                               (1 << 63) + 3, (1 << 64) - 1)
"""Token ids: small ids, and aliases of 1, 2 and 3 whose low 16 or 32 bits equal them (the
largest id is 2^64 - 1, the last one `verikv.Request` accepts)."""


def _alias(token: int) -> int:
    """The vocabulary's alias of ``token`` above 2^16 (or the token itself)."""
    return token + (1 << 16) if token in SMALL[1:4] else token


def _blocks() -> tuple[tuple[int, ...], ...]:
    """Twelve 16-token blocks from a fixed seed; the odd ones are aliases of the one before."""
    rng = random.Random(SEED)
    out: list[tuple[int, ...]] = []
    for _ in range(6):
        block = tuple(rng.choice(SMALL) for _ in range(PAGE))
        out += [block, tuple(_alias(t) for t in block)]
    return tuple(out)


BLOCKS = _blocks()
DOCUMENT_BLOCKS = 300


def _documents() -> tuple[tuple[int, ...], ...]:
    """Two long texts of `DOCUMENT_BLOCKS` blocks that prompts quote from the start."""
    rng = random.Random(SEED + 1)
    return tuple(tuple(rng.randrange(len(BLOCKS)) for _ in range(DOCUMENT_BLOCKS)) for _ in range(2))


DOCUMENTS = _documents()
OPENING_BLOCKS = 260
"""Blocks of the first document the opening scenario's requests share (over 256 pages)."""
SALTS = (None,) * 9 + ("tenant-b",)
LORAS: tuple[int | tuple[str, str] | None, ...] = (None,) * 12 + (7, ("sql", "/adapters/sql-v1"),
                                                                  ("sql", "/adapters/sql-v2"))
MAX_LIVE = 4
MAX_MODEL_LEN = (DOCUMENT_BLOCKS + 30) * PAGE


@dataclass(frozen=True)
class Floor:
    """What every walk of a layout together must reach, or the check fails (it would not have
    exercised what its name claims): the largest allocation (new pages in one call), the
    largest hit taken by an admission (pages), the most requests holding one page, and how
    many batched steps, kept lookups and lookups with a cap or connector tokens it made."""

    allocation: int = 256
    hit: int = 128
    sharers: int = 3
    batches: int = 1
    kept_lookups: int = 1


@dataclass(frozen=True)
class World:
    """One layout of the walks: its groups, pool size and call variants."""

    name: str
    groups: tuple[spec.GroupLayout, ...]
    num_pages: int
    use_eagle: bool = False
    data_parallel_size: int = 1
    lookahead: bool = True
    external: bool = True
    """Admissions may load tokens through a KV connector (not with a Mamba align group)."""
    floor: Floor = Floor()

    @property
    def config(self) -> spec.ManagerConfig:
        return spec.ManagerConfig(self.groups, self.num_pages, MAX_MODEL_LEN, use_eagle=self.use_eagle,
                                  data_parallel_size=self.data_parallel_size)

    @property
    def dp(self) -> int | None:
        return self.data_parallel_size if self.data_parallel_size > 1 else None

    @property
    def bound(self) -> str:
        return (f"random walks: {WALKS} walks x {STEPS} steps, seed {SEED}; N={self.num_pages}, page={PAGE}, "
                f"max_model_len={MAX_MODEL_LEN}, <= {MAX_LIVE} live requests, tokens up to 2^64-1")

    @property
    def check_name(self) -> str:
        return f"walk:{self.name}:{WALKS}x{STEPS},seed={SEED} random"


FULL = spec.GroupLayout("full", PAGE)
SLIDING = spec.GroupLayout("sliding", PAGE, 3 * PAGE)
WORLDS: tuple[World, ...] = (
    World("full", (FULL,), 1200),
    World("sliding", (SLIDING,), 1200, floor=Floor(hit=32, sharers=2)),
    World("full+sliding", (FULL, SLIDING), 2400),
    World("full+mamba(align)", (FULL, spec.GroupLayout("mamba_align", PAGE)), 1400, external=False),
    World("dp2", (FULL,), 2400, data_parallel_size=2, floor=Floor(hit=64)),
    World("eagle(full+sliding)", (FULL, SLIDING), 2400, use_eagle=True),
)
"""The layouts walked. A sliding-window hit holds only the window's pages (the rest are null
placeholders) and a page leaves the window soon, so that world asks for less; DP shards keep
their own free lists, so revived hits there go page by page (the bulk unlink needs one list)."""
WORLDS_BY_NAME = {world.name: world for world in WORLDS}


# ---- the twin: the same calls on a second manager ----------------------------------------------

class TwinAdapter:
    """verikv's `CacheManagerAdapter` with a twin: a second manager, built the same way, that
    receives every call the real one receives (on its own requests, kept in step with the real
    ones), except that a batched step reaches it as the single calls it stands for
    (`WalkMachine.singles_on_a_copy`). A copy by replay: deep-copying a manager is not used
    here, so the comparison does not rest on the manager's objects copying faithfully."""

    def __init__(self, config: spec.ManagerConfig, make: Callable[[spec.ManagerConfig], Any]) -> None:
        from verikv.testing.adapter import CacheManagerAdapter

        self.real = CacheManagerAdapter(config, make)
        self.manager: Any = self.real.manager
        self.twin: Any = make(config)
        self.twin.hasher = self.manager.hasher  # (seeded per instance: the twin must key alike)
        self.twin_requests: dict[str, Any] = {}
        self.twin_hits: dict[str, tuple[Any, Any]] = {}
        """Per request, its latest lookup result and the twin's (to hand the twin its own)."""

    def twin_request(self, request: Any) -> Any:
        """The twin's request for ``request``, brought to the same tokens, count and status."""
        twin = self.twin_requests[request.request_id]
        missing = request.num_tokens - twin.num_tokens
        if missing > 0:
            twin.append_output_token_ids(list(request.output_token_ids)[-missing:])
        twin.num_computed_tokens = request.num_computed_tokens
        if twin.status is not request.status:
            twin.status = request.status
        return twin

    def _mirror(self, value: Any) -> Any:
        from verikv import Request

        if isinstance(value, Request):
            return self.twin_request(value)
        return next((twin for real, twin in self.twin_hits.values() if value is real), value)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``manager.method(*args, **kwargs)`` on the real manager, and the same on the twin."""
        result = getattr(self.manager, method)(*args, **kwargs)
        mirrored = getattr(self.twin, method)(*map(self._mirror, args),
                                               **{k: self._mirror(v) for k, v in kwargs.items()})
        if method == "get_computed_pages":
            self.twin_hits[args[0].request_id] = (result[0], mirrored[0])
        return result

    def new_request(self, view: spec.RequestView) -> Any:
        self.twin_requests[view.request_id] = self.real.new_request(view)
        return self.real.new_request(view)

    def lookup(self, request: Any, dp_shard_hint: int | None = None, data_parallel_size: int | None = None) -> Any:
        return self.call("get_computed_pages", request, dp_shard_hint=dp_shard_hint,
                         data_parallel_size=data_parallel_size)

    def allocate(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int, hit: Any,
                 num_lookahead_tokens: int, delay_cache: bool, dp_shard_hint: int | None = None,
                 data_parallel_size: int | None = None) -> Any:
        return self.call("allocate_slots", request, num_new_tokens, num_new_computed_tokens, hit,
                         num_lookahead_tokens, delay_cache, dp_shard_hint=dp_shard_hint,
                         data_parallel_size=data_parallel_size)

    def free(self, request: Any) -> None:
        self.call("free", request)

    def finish(self, request: Any) -> None:
        self.call("free_page_hashes", request)
        self.twin_hits.pop(request.request_id, None)

    def cache(self, request: Any, num_tokens: int) -> None:
        self.call("cache_pages", request, num_tokens)

    def reset(self) -> bool:
        return bool(self.call("reset_prefix_cache"))

    def usage(self) -> float:
        return self.real.usage()

    def num_free_pages(self) -> int:
        return self.real.num_free_pages()

    def page_ids(self, request_id: str) -> Any:
        return self.real.page_ids(request_id)

    def abstraction(self) -> Any:
        return self.real.abstraction()


def _walk_machine() -> type:
    """`ManagerMachine` whose batched steps are compared with the single calls on the twin."""
    from verikv.testing.manager_machine import ManagerMachine

    class WalkMachine(ManagerMachine):
        def singles_on_a_copy(self, natives: list[Any], counts: list[int], lookahead: int, delay: bool
                              ) -> tuple[tuple[tuple[tuple[int, ...], ...] | None, ...], Any]:
            tee = self.impl
            twin_natives = [tee.twin_request(native) for native in natives]
            return self.single_calls(tee.twin, twin_natives, counts, lookahead, delay), tee.twin

    return WalkMachine


# ---- one walk ------------------------------------------------------------------------------

@dataclass
class Kept:
    """A lookup's answer kept for a later admission."""

    pages: Any
    hit: spec.Hit
    hint: int | None


@dataclass
class Walk:
    """The state of one walk besides the machine: the renaming of request-key digests to
    contents, the statistics the spec expects, kept lookups, what decoding copies, coverage."""

    world: World
    rng: random.Random
    node: Any
    trace: list[str] = field(default_factory=list)
    forward: dict[Hashable, spec.Content] = field(default_factory=dict)
    backward: dict[spec.Content, Hashable] = field(default_factory=dict)
    verified: dict[str, tuple[Hashable, ...]] = field(default_factory=dict)
    """Per live request, the key list already checked against its contents."""
    stats: stats.PrefixCacheStats = field(default_factory=stats.PrefixCacheStats)
    kept: dict[str, Kept] = field(default_factory=dict)
    copying: dict[str, int] = field(default_factory=dict)
    """Per decoding request, the block its current page copies."""
    reached: Counter[str] = field(default_factory=Counter)

    @property
    def manager(self) -> Any:
        """The real manager (for queries that change nothing)."""
        return self.node.impl.manager

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A manager call that may change something: made on the real manager and its twin."""
        return self.node.impl.call(method, *args, **kwargs)

    def reach(self, what: str, value: int) -> None:
        self.reached[what] = max(self.reached[what], value)


# ---- operations ------------------------------------------------------------------------------

def _prompt(rng: random.Random, shared: int | None = None, own: bool = True) -> tuple[int, ...]:
    """``shared`` blocks quoted from the start of a document (mostly the first, so requests
    share their prefixes; drawn when None: a few, a hundred or so, or nearly all of it), then
    (``own``) a few blocks of its own and part of a page."""
    document = DOCUMENTS[0 if shared is not None or rng.random() < 0.8 else 1]
    if shared is None:
        shared = rng.choice((3, 40, 140, 140, 260, 280))
    quoted = [t for b in document[:shared] for t in BLOCKS[b]]
    if not own:
        return tuple(quoted)
    tail = [t for _ in range(rng.randrange(1, 12)) for t in BLOCKS[rng.randrange(len(BLOCKS))]]
    return tuple(quoted + tail + [rng.choice(VOCABULARY) for _ in range(rng.randrange(PAGE))])


def arrive(w: Walk, shared: int | None = None, own: bool = True) -> str:
    """A new request waits; its salt, LoRA identity, image and prompt logprobs are drawn (none
    of them when its ``shared`` prefix is given: the walk's opening scenario)."""
    from verikv.testing.manager_machine import Tracked

    rng, node = w.rng, w.node
    tokens = _prompt(rng, shared, own)
    view = spec.RequestView(f"r{node.next_id}", tokens)
    if shared is None:
        lora = rng.choice(LORAS)
        name, path = lora if isinstance(lora, tuple) else (None, None)
        at = rng.randrange(len(tokens))
        image = (("img-a" if rng.random() < 0.5 else "img-b", at, min(PAGE, len(tokens) - at)),)
        view = replace(view, cache_salt=rng.choice(SALTS), lora_id=lora if isinstance(lora, int) else None,
                       lora_name=name, lora_path=path, mm_features=image if rng.random() < 0.1 else (),
                       prompt_logprobs=rng.random() < 0.05)
    rid = view.request_id
    node.next_id += 1
    node.requests[rid] = Tracked(view)
    node.waiting.append(rid)
    w.trace.append(f"arrive {rid} ({len(tokens)} tokens)")
    return rid


def arrive_quoting(w: Walk, source: str | None = None, narrowed: bool | None = None) -> str:
    """A prompt quoting a live request's text (prompt and decoded output) up to a page boundary
    (mostly its last full page), the ids of that page sometimes taken modulo 2^16 (``narrowed``;
    drawn when None), then part of a page: a user pasting an answer into a new chat. Its lookup
    may hit every quoted page, the narrowed one only if it has no id of 2^16 or more."""
    from verikv.testing.manager_machine import Tracked

    rng, node = w.rng, w.node
    texts = [t.view.tokens for t in node.requests.values() if t.view.num_tokens >= 2 * PAGE]
    if source is None and not texts:
        return arrive(w)
    text = rng.choice(texts) if source is None else node.view(source).tokens
    pages = len(text) // PAGE if source is not None or rng.random() < 0.6 else rng.randrange(1, len(text) // PAGE + 1)
    quoted = text[:pages * PAGE]
    if narrowed if narrowed is not None else rng.random() < 0.5:
        quoted = quoted[:-PAGE] + tuple(t & 0xFFFF for t in quoted[-PAGE:])
    rid = f"r{node.next_id}"
    node.next_id += 1
    node.requests[rid] = Tracked(spec.RequestView(rid, quoted + tuple(rng.choice(VOCABULARY)
                                                                         for _ in range(rng.randrange(1, PAGE)))))
    node.waiting.append(rid)
    w.trace.append(f"arrive {rid} quoting {pages} pages")
    return rid


def lookup(w: Walk, rid: str, cap: int | None, hint: int | None) -> Kept:
    """The manager's prefix lookup (``max_cache_hit_length`` = ``cap``), checked for shape,
    safety and against the spec, and counted in the statistics the spec expects."""
    from verikv.testing.adapter import page_ids_of

    node = w.node
    view = node.view(rid)
    pages, num_tokens = w.call("get_computed_pages", node.native(rid), dp_shard_hint=hint,
                               data_parallel_size=node.dp, max_cache_hit_length=cap)
    got = spec.Hit(page_ids_of(pages), num_tokens)
    want = spec.lookup(node.spec, view, hint, node.dp, cap)
    node.check_hit(rid, view, got)
    if got != want:
        node.fail("REFINEMENT", f"{rid}: lookup(max_cache_hit_length={cap}) {got} != spec {want}")
    w.stats = stats.record_lookup(w.stats, node.spec, view, want)
    return Kept(pages, want, hint)


def _cap(w: Walk, rid: str) -> int | None:
    """No cap, mostly; sometimes a cap inside the prompt (not page-aligned) or zero."""
    roll = w.rng.random()
    if roll < 0.7:
        return None
    return 0 if roll < 0.75 else w.rng.randrange(w.node.view(rid).num_tokens)


def _hint(w: Walk) -> int | None:
    return None if w.world.dp is None else w.rng.randrange(2)


def look_up_early(w: Walk, rid: str) -> None:
    """A waiting request is looked up now; its admission comes later, after other calls."""
    w.kept[rid] = lookup(w, rid, _cap(w, rid), _hint(w))
    w.trace.append(f"lookup {rid} -> {w.kept[rid].hit.num_tokens} tokens")


def admit(w: Walk, rid: str, whole: bool = False) -> None:
    """Allocate a waiting request's prompt (all of it, or a chunk) after its hit: the kept
    lookup if it has one, else a fresh one; some admissions load tokens through a connector.
    ``whole``: the whole prompt after an uncapped lookup in shard 0, nothing loaded."""
    node, rng = w.node, w.rng
    kept = w.kept.pop(rid, None)
    if kept is None:
        kept = lookup(w, rid, None, 0 if w.world.dp else None) if whole else lookup(w, rid, _cap(w, rid), _hint(w))
    else:
        w.reached["kept lookups"] += 1
    if node.failures:
        return
    view, hit = node.view(rid), kept.hit
    rest = view.num_tokens - hit.num_tokens
    external = 0 if whole or not w.world.external else rng.choice((0, 0, 0, PAGE + 3, 5 * PAGE))
    external = min(external, rest - 1)
    num_new = rest - external if whole or rng.random() < 0.7 else min(rest - external, rng.randrange(1, 20 * PAGE))
    if external > 0:
        w.reached["connector tokens"] += 1
        done = allocate_directly(
            node, rid, lambda: w.call(
                "allocate_slots", node.native(rid), num_new, hit.num_tokens, kept.pages, 0, False,
                dp_shard_hint=kept.hint, data_parallel_size=node.dp, num_external_computed_tokens=external),
            lambda: spec.allocate_slots(node.spec, view, num_new, hit.num_tokens, hit.pages, 0, False, kept.hint,
                                        node.dp, external), f"allocate_slots with {external} connector tokens")
    else:
        done = node.allocate(rid, num_new, hit.num_tokens, kept.pages, hit.pages, hint=kept.hint)
    w.trace.append(f"admit {rid} (hit {hit.num_tokens}, connector {external}, new {num_new}) -> {done}")
    if done:
        w.reach("hit pages", len(hit.pages[0]))
        node.set_computed(rid, hit.num_tokens + external + num_new)
        node.waiting.remove(rid)
        node.running.append(rid)
        _count_allocation(w, rid, (0,) * len(w.world.groups))


def _held(w: Walk, rid: str) -> tuple[int, ...]:
    """How many pages (null placeholders included) ``rid`` holds per group."""
    entry = w.node.spec.entry(rid)
    return (0,) * len(w.world.groups) if entry is None else tuple(map(len, entry.pages))


def _count_allocation(w: Walk, rid: str, before: tuple[int, ...]) -> None:
    """Coverage: the most pages one call added to a group's list (hits included), and the most
    holders of one page."""
    w.reach("pages in one allocation", max(b - a for a, b in zip(before, _held(w, rid))))
    w.reach("holders of one page", max(w.node.spec.pool.ref))


def _grow(w: Walk, rid: str, to_page_end: bool = False) -> int:
    """Prepare one step of a running request: its next prefill chunk, or (all computed) a decode
    step: one token, or several accepted at once (speculative decoding; ``to_page_end``: as
    many as fill its last page), each copying the block its page copies. Returns the new tokens
    to allocate (0: it is at ``max_model_len``)."""
    tracked = w.node.requests[rid]
    view = tracked.view
    if view.num_computed_tokens < view.num_tokens:
        return min(view.num_tokens - view.num_computed_tokens, w.rng.choice((PAGE, 7 * PAGE, 40 * PAGE)))
    accepted = PAGE - view.num_tokens % PAGE if to_page_end else w.rng.choice((1, 1, 5, 9))
    accepted = min(accepted, MAX_MODEL_LEN - view.num_tokens)
    tokens = list(view.tokens)
    for _ in range(accepted):
        position = len(tokens) % PAGE
        if position == 0 or rid not in w.copying:
            w.copying[rid] = w.rng.randrange(len(BLOCKS))
        tokens.append(BLOCKS[w.copying[rid]][position])
    tracked.view = replace(view, tokens=tuple(tokens))
    return accepted


def step(w: Walk, rid: str, to_page_end: bool = False) -> None:
    """One step of a running request, with lookahead slots and delayed caching sometimes; a
    request the pool cannot serve is preempted."""
    node, rng = w.node, w.rng
    num_new = _grow(w, rid, to_page_end)
    if num_new == 0:
        finish(w, rid)
        return
    lookahead = rng.choice((0, 0, 0, 3)) if w.world.lookahead else 0
    delay = rng.random() < 0.15
    before = _held(w, rid)
    hint = None if w.world.dp is None or rng.random() < 0.5 else rng.randrange(2)
    done = node.allocate(rid, num_new, lookahead=lookahead, delay=delay, hint=hint)
    w.trace.append(f"step {rid} (+{num_new}, lookahead {lookahead}, delay {delay}) -> {done}")
    if done:
        node.set_computed(rid, node.view(rid).num_computed_tokens + num_new)
        _count_allocation(w, rid, before)
    elif not node.failures:
        preempt(w, rid)


def batch(w: Walk) -> None:
    """One ``allocate_slots_batch`` over some running requests (decode or prefill each),
    compared with the same single calls in order on a copy, and with the spec's batch."""
    node, rng = w.node, w.rng
    rids = [rid for rid in node.running if rng.random() < 0.8]
    counts = [_grow(w, rid) for rid in rids]
    rids, counts = [r for r, n in zip(rids, counts) if n], [n for n in counts if n]
    if not rids:
        return
    lookahead = rng.choice((0, 0, 3)) if w.world.lookahead else 0
    delay = rng.random() < 0.15
    before = {rid: _held(w, rid) for rid in rids}
    node.allocate_batch(rids, counts, lookahead, delay)
    w.reached["batches"] += 1
    w.trace.append(f"batch {list(zip(rids, counts))} (lookahead {lookahead}, delay {delay})")
    for rid in rids:
        _count_allocation(w, rid, before[rid])


def preempt(w: Walk, rid: str) -> None:
    w.node.preempt_request(rid)
    w.copying.pop(rid, None)
    w.trace.append(f"preempt {rid}")


def finish(w: Walk, rid: str) -> None:
    """The request is done (stopped, or aborted while waiting): its pages and keys go."""
    entry = w.node.spec.entry(rid)
    if entry is not None:
        w.reach("pages freed by one request", max(len(p) for p in entry.pages))
    w.node.finish_request(rid, aborted=rid in w.node.waiting)
    w.kept.pop(rid, None)
    w.copying.pop(rid, None)
    w.verified.pop(rid, None)
    w.trace.append(f"finish {rid}")


def cache(w: Walk, rid: str) -> None:
    """The scheduler registers a running request's computed pages (after delayed caching)."""
    node = w.node
    if node.spec.entry(rid) is None:
        return
    n = max(0, node.view(rid).num_computed_tokens - w.rng.choice((0, 0, 3)))
    node.impl.cache(node.native(rid), n)
    node.spec = spec.cache_pages(node.spec, node.view(rid), n)
    w.trace.append(f"cache {rid} {n}")


def reset(w: Walk) -> None:
    done = resettable(w.node.spec.pool)
    w.node.apply_reset()
    w.stats = stats.record_reset(w.stats, done)
    w.trace.append(f"reset -> {done}")


def common_prefix(w: Walk, rid: str) -> None:
    """Cascade attention's query in both shapes: eSurge's (a RUNNING request and a count) and
    vLLM's (a request id: pages every holder shares)."""
    from verikv import RequestStatus

    node = w.node
    if node.spec.entry(rid) is None:
        return
    holders = len(node.spec.entries)
    count = w.rng.randrange(1, MAX_LIVE + 1)
    native = node.native(rid)
    native.status = RequestStatus.RUNNING
    for got, want, call in (
            (w.manager.get_num_common_prefix_pages(native, count),
             spec.num_common_prefix_pages(node.spec, rid, count), f"({rid}, {count})"),
            (w.manager.get_num_common_prefix_pages(rid),
             spec.num_common_prefix_pages(node.spec, rid, holders), f"({rid!r})")):
        if tuple(got) != want:
            node.fail("REFINEMENT", f"get_num_common_prefix_pages{call} = {list(got)}, spec {list(want)}")
    w.trace.append(f"common prefix {rid}")


def take_stats(w: Walk) -> None:
    """The statistics since the last time, against the spec's count of the same lookups."""
    got = w.call("make_prefix_cache_stats")
    want, w.stats = stats.take(w.stats)
    seen = stats.PrefixCacheStats(got.requests, got.queries, got.hits, got.reset)
    if seen != want:
        w.node.fail("REFINEMENT", f"prefix-cache statistics {seen} != spec {want}")
    w.trace.append("take statistics")


def misuse(w: Walk, rid: str) -> None:
    """A bad call about a running request: zero new tokens, or past ``max_model_len``."""
    kind = w.rng.choice(("bad-zero", "bad-too-long"))
    bad_call(w.node, kind, rid)
    w.trace.append(f"{kind} {rid}")


# ---- the key lists -----------------------------------------------------------------------------

def check_key_lists(w: Walk) -> None:
    """Each live request's keys stand, one by one, for the contents of its full pages, through
    a renaming of digests to contents that stays one-to-one for the whole walk."""
    node = w.node
    base = node.config.base_page_size
    for rid, tracked in node.requests.items():
        keys = tuple(w.manager.page_hashes_of(rid))
        view = tracked.view
        if len(keys) > view.num_tokens // base:
            node.fail("REFINEMENT", f"{rid}: {len(keys)} keys for {view.num_tokens // base} full pages")
            continue
        old = w.verified.get(rid, ())
        start = len(old) if keys[:len(old)] == old else 0
        for i in range(start, len(keys)):
            _learn(w, rid, i, keys[i], spec.content_of(view, (i + 1) * base, base))
        w.verified[rid] = keys


def _learn(w: Walk, rid: str, i: int, digest: Hashable, content: spec.Content) -> None:
    if w.forward.setdefault(digest, content) != content:
        w.node.fail("INV-HIT-SAFE", f"{rid}: key {i} is the digest of another content (two contents, one key)")
    if w.backward.setdefault(content, digest) != digest:
        w.node.fail("REFINEMENT", f"{rid}: key {i} differs from the key of the same content elsewhere")


# ---- the walk ------------------------------------------------------------------------------------

def _operation(w: Walk) -> Callable[[], Any]:
    """The next operation, drawn among those that apply."""
    node, rng = w.node, w.rng
    choices: list[tuple[float, Callable[[], Any]]] = []
    if len(node.requests) < MAX_LIVE:
        choices += [(3, partial(arrive, w)), (2, partial(arrive_quoting, w))]
    for rid in node.waiting:
        choices += [(1, partial(look_up_early, w, rid)), (3, partial(admit, w, rid))]
    for rid in node.running:
        choices += [(1.5, partial(step, w, rid)), (0.3, partial(preempt, w, rid)),
                    (0.4, partial(finish, w, rid)), (0.4, partial(cache, w, rid)),
                    (0.4, partial(common_prefix, w, rid)), (0.2, partial(misuse, w, rid))]
    if node.running:
        choices.append((2, partial(batch, w)))
    for rid in node.waiting:
        choices.append((0.2, partial(finish, w, rid)))
    choices += [(0.3, partial(reset, w)), (0.5, partial(take_stats, w))]
    return rng.choices([op for _, op in choices], weights=[weight for weight, _ in choices])[0]


class WalkFailed(Exception):
    """A walk departed from the spec: the names of what failed, and where."""

    def __init__(self, names: list[str], detail: str) -> None:
        super().__init__(detail)
        self.names = names


def opening(w: Walk) -> None:
    """The scenario every walk opens with, so that each reaches what its floor asks: a long
    page-aligned prompt computed and finished (its hundreds of pages free, still cached, with
    the state at its end in a Mamba align group), three requests quoting it and going on (the
    first revives those pages from the free list in one hit, the three then share them; the
    third is looked up before the second is admitted), a batched step, then a request that
    decodes to the end of a page and a prompt quoting it with that page's ids modulo 2^16 (its
    hit must stop before that page when the page holds a wider id)."""
    first = arrive(w, shared=OPENING_BLOCKS, own=False)
    admit(w, first, whole=True)
    step(w, first)  # (a Mamba align group caches the state of a step at the next one)
    finish(w, first)
    second, third = arrive(w, shared=OPENING_BLOCKS), arrive(w, shared=OPENING_BLOCKS)
    admit(w, second, whole=True)
    w.kept[third] = lookup(w, third, None, 0 if w.world.dp else None)
    admit(w, arrive(w, shared=OPENING_BLOCKS), whole=True)
    admit(w, third, whole=True)
    batch(w)
    step(w, second, to_page_end=True)
    admit(w, arrive_quoting(w, second, narrowed=True), whole=True)


def _run_walk(world: World, walk: int, make: Callable[[spec.ManagerConfig], Any] | None,
              steps: int = STEPS) -> Walk:
    """One walk of ``steps`` steps (the opening scenario first); raises `WalkFailed` at the
    first departure."""
    from verikv.testing.adapter import build_cache_manager
    from verikv.testing.manager_machine import ConformanceFailure, Layout

    machine = _walk_machine()(Layout(world.name, world.config),
                              lambda config: TwinAdapter(config, make or build_cache_manager))
    w = Walk(world, random.Random(f"{SEED}:{world.name}:{walk}"), machine)
    try:
        machine.check()
        for number in range(steps):
            (_operation(w) if number else lambda: opening(w))()
            check_node(machine)
            check_key_lists(w)
            if machine.failures:
                raise ConformanceFailure(machine.failures)
        take_stats(w)
        check_node(machine)
    except ConformanceFailure as failure:
        raise WalkFailed(failure.names, _where(world, walk, w, str(failure))) from None
    except Exception as exc:  # an exception escaping the implementation is a finding too
        raise WalkFailed([f"crash:{type(exc).__name__}"], _where(world, walk, w, repr(exc))) from exc
    return w


def _where(world: World, walk: int, w: Walk, detail: str) -> str:
    return (f"walk {walk} of {world.check_name}, step {len(w.trace)}: {detail}\n  operations: "
            + " ; ".join(w.trace[-12:]))


def _floor_missed(world: World, reached: Counter[str]) -> list[str]:
    floor = world.floor
    wanted = {"pages in one allocation": floor.allocation, "hit pages": floor.hit,
              "holders of one page": floor.sharers, "batches": floor.batches, "kept lookups": floor.kept_lookups}
    return [f"{what} {reached[what]} < {least}" for what, least in wanted.items() if reached[what] < least]


def run_world(world: World, make: Callable[[spec.ManagerConfig], Any] | None = None, walks: int = WALKS,
              steps: int = STEPS) -> Outcome:
    """``walks`` walks of ``world``; "no-counterexample" (a bounded search) when all pass and the
    coverage floor is reached."""
    start = time.process_time()
    logger = logging.getLogger("verikv")
    level = logger.level
    logger.setLevel(logging.ERROR)  # refused resets are expected
    reached: Counter[str] = Counter()
    try:
        for walk in range(walks):
            done = _run_walk(world, walk, make, steps)
            for what, value in done.reached.items():
                reached[what] = max(reached[what], value) if what not in ("batches", "kept lookups") \
                    else reached[what] + value
    except WalkFailed as failure:
        return Outcome("failed", f"{', '.join(failure.names)} in {failure}")
    finally:
        logger.setLevel(level)
    summary = ", ".join(f"{what} {value}" for what, value in sorted(reached.items()))
    missed = _floor_missed(world, reached)
    if missed:
        return Outcome("failed", f"coverage floor not reached ({'; '.join(missed)}): {summary}")
    return Outcome("no-counterexample", f"random walks ({walks} x {steps} steps, seed {SEED}): no departure; "
                                        f"reached: {summary} ({time.process_time() - start:.1f} CPU s)")


def failed_checks(world: World, make: Callable[[spec.ManagerConfig], Any]) -> list[str]:
    """Names of what an implementation fails in ``world``'s walks (empty: it passes)."""
    try:
        for walk in range(WALKS):
            _run_walk(world, walk, make)
    except WalkFailed as failure:
        return failure.names
    return []


def checks() -> list[Check]:
    """One random-walk refinement check per world."""
    return [Check(name=world.check_name, kind="refinement-walk", invariant="REFINEMENT+all", transition="manager.*",
                  bound=world.bound, run=lambda world=world: run_world(world))  # type: ignore[misc]
            for world in WORLDS]
