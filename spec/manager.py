"""The cache manager as an abstract state machine, built on the pool spec.

A `ManagerState` is a `PoolState` plus, per request, one page list per cache group (null
placeholders allowed for windowed groups), how many leading pages of each list are cached
(``num_cached``), and the request's data-parallel shard. Every change to reference counts,
the free list or the keys goes through the pool transitions of `verikv.spec.pool`.

Keys and the ideal-hash assumption. The spec's key for a request's first ``m`` tokens is the
exact content they stand for (`content_of`: the salt and, per base page, its tokens, LoRA id
and multimodal items), and a page's pool key is ``(content, group)``. Using the content itself
as the key *is* the ideal hash: key equality is content equality. The implementation's
digests are related to these keys by the abstraction's key renaming, which must stay
injective both ways (a digest that stands for two contents is a collision the spec forbids).

Ghost state (takes no part in equality; empty in an abstraction of an implementation):
``keys`` (each request's full-page keys, at the base page size, kept until
`free_page_hashes`) and ``content[p]``: what page ``p`` holds, written from the request's tokens
by the allocation that computes them and erased when the page is handed out again. It is never
written from a key, so INV-HIT-SAFE (a keyed page holds the content its key stands for; a hit
holds the requester's content) is a fact about the caching step, not a restatement of it.

Base page size: keys are computed at the smallest page size among the caching groups (every
group but a ``"mamba"`` one); a group whose page size is ``k`` times that uses, for its page
``j``, the key with index ``(j + 1) * k - 1``. A ``"mamba"`` group (vLLM's
``mamba_cache_mode="none"``) holds one page with the request's running state; it never caches
and never hits.

Mamba in align mode (kind ``"mamba_align"``, vLLM's ``mamba_cache_mode="align"``). The group's
list has one entry per page of tokens, like attention, but only state pages are real: page
``j`` stands for the recurrent state after exactly ``(j + 1) * page_size`` tokens. The engine
contract: after the step of an allocation that ends at ``T = computed + num_new_tokens`` tokens,
the page at index ``cdiv(T, page_size) - 1`` (the only page that allocation adds, after null
placeholders) holds the state after ``T`` tokens, copied from the request's previous state page
and advanced. So a state page is cached only when it holds the state of an aligned prefix, and
only once that state is computed: `cache_pages` keys the page of the request's computed count
``c`` when ``c`` is a multiple of the page size (the state of the step that ended there). A hit
(`verikv.spec.hit_rules.mamba_align_rule`) is the right-most cached state, nulls before it;
`skipped_before` frees every page before the one holding the state the next step starts from.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

from verikv.spec import pool
from verikv.spec.hit_rules import (
    EAGLE_RULES,
    KINDS,
    EagleRule,
    Kind,
    LookupGroup,
    Span,
    common_hit_length,
    group_rule,
    sliding_run,
    vllm_eagle_hit,
)
from verikv.spec.pool import NULL_PAGE, Bounds, FreeOrder, PoolState, PreconditionError

RequestId = str
Content = tuple[Any, tuple[Any, ...]]
"""``(cache_salt, ((page tokens, LoRA identity, multimodal items), ...))`` for each base page
(the identity: `lora_identity`)."""
PoolKey = tuple[Content, int]
"""``(content, group id)``: the spec's pool key of a cached page."""


@dataclass(frozen=True)
class GroupLayout:
    """One cache group as plain data: attention type, page size, window or chunk size."""

    kind: Kind
    page_size: int
    span: int = 0
    """Sliding window (``"sliding"``) or attention chunk (``"chunked"``) in tokens; else 0."""


@dataclass(frozen=True)
class ManagerConfig:
    """What a manager is constructed with (never changes)."""

    groups: tuple[GroupLayout, ...]
    num_pages: int
    max_model_len: int
    enable_caching: bool = True
    use_eagle: bool = False
    data_parallel_size: int = 1
    free_order: FreeOrder = "esurge"
    skip_unreachable_sliding_pages: bool = False
    """Leave uncached the sliding-window pages that can never serve a hit (`sliding_page_can_hit`)."""
    eagle_rule: EagleRule = "drop-once"
    """How a lookup with EAGLE drops the last page (`verikv.spec.hit_rules.EAGLE_RULES`): the
    drop-once fixed point, or vLLM 0.33's rule (`vllm_eagle_hit`). Without EAGLE: no effect."""

    @property
    def vllm_eagle(self) -> bool:
        """Whether lookups follow vLLM 0.33's EAGLE rule (EAGLE on, ``eagle_rule="vllm"``)."""
        return self.use_eagle and self.eagle_rule == "vllm"

    @property
    def caching_groups(self) -> tuple[int, ...]:
        """Ids of the groups that cache pages (all but ``"mamba"``); none when caching is off."""
        if not self.enable_caching:
            return ()
        return tuple(g for g, layout in enumerate(self.groups) if layout.kind != "mamba")

    @property
    def base_page_size(self) -> int:
        """The page size keys are computed at (smallest caching page size; 1 if none)."""
        return min((self.groups[g].page_size for g in self.caching_groups), default=1)


@dataclass(frozen=True)
class RequestView:
    """What the manager reads from a request (the implementation's ``Request``, as data)."""

    request_id: RequestId
    tokens: tuple[int, ...]
    num_computed_tokens: int = 0
    cache_salt: Hashable = None
    lora_id: int | None = None
    mm_features: tuple[tuple[str, int, int], ...] = ()
    """Multimodal items as ``(identifier, offset, length)`` in token positions."""
    prompt_logprobs: bool = False
    finished: bool = False
    lora_name: str | None = None
    lora_path: str | None = None
    """A LoRA adapter named as vLLM's ``LoRARequest`` names it (a path only with a name)."""

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


def lora_identity(req: RequestView) -> Hashable:
    """The LoRA identity every page key of ``req`` covers: ``(name, path)`` for an adapter known
    by name (the weights it names: re-pointing the name at other weights is another identity,
    and the int id, which only numbers the adapter in one instance, is left out), else the
    ``lora_id`` (None: no adapter). Two requests with equal tokens and salt have equal keys
    exactly when their identities are equal."""
    return (req.lora_name, req.lora_path) if req.lora_name is not None else req.lora_id


@dataclass(frozen=True)
class Entry:
    """A request's pages: one list per group, the cached prefix length per group, its shard."""

    pages: tuple[tuple[int, ...], ...]
    num_cached: tuple[int, ...]
    shard: int | None = None


@dataclass(frozen=True, init=False)
class ManagerState:
    """Pool + request entries (observable) + ghost keys and page contents (spec only)."""

    config: ManagerConfig
    pool: PoolState
    entries: frozenset[tuple[RequestId, Entry]]
    keys: frozenset[tuple[RequestId, tuple[Content, ...]]] = field(default=frozenset(), compare=False)
    content: tuple[PoolKey | None, ...] = field(default=(), compare=False)
    """Per page, the content its KV holds: written by `allocate_slots` from the request's tokens
    once the step computes all of the page's tokens, erased when the page is handed out again;
    independent of the keys, which `cache_pages` writes (a reset forgets keys, not content)."""
    progress: frozenset[tuple[RequestId, int]] = field(default=frozenset(), compare=False)
    """Per request holding pages, the position of the first token its last successful
    allocation computes (its computed tokens and hits before the call): every page that
    token's window reaches must stay held (INV-WINDOW-LIVE)."""

    def __init__(self, config: ManagerConfig, pool: PoolState, entries: frozenset[tuple[RequestId, Entry]],
                 keys: frozenset[tuple[RequestId, tuple[Content, ...]]] = frozenset(),
                 content: tuple[PoolKey | None, ...] = (), computed: tuple[PoolKey | None, ...] | None = None,
                 progress: frozenset[tuple[RequestId, int]] = frozenset()) -> None:
        """The fields in order; ``computed`` is the deprecated name of the ghost now called
        ``content`` (given, it is the content: the ghost the allocation writes)."""
        if computed is not None:
            warnings.warn("ManagerState(computed=...) is deprecated; pass content=...", DeprecationWarning,
                          stacklevel=2)
            content = computed
        for name, value in (("config", config), ("pool", pool), ("entries", entries), ("keys", keys),
                            ("content", content), ("progress", progress)):
            object.__setattr__(self, name, value)

    @property
    def computed(self) -> tuple[PoolKey | None, ...]:
        """Deprecated name of `content` (the ghost written when a page's tokens are computed)."""
        warnings.warn("ManagerState.computed is deprecated; use ManagerState.content", DeprecationWarning,
                      stacklevel=2)
        return self.content

    def entry(self, rid: RequestId) -> Entry | None:
        """The request's entry, or None when it holds no pages."""
        return next((e for r, e in self.entries if r == rid), None)

    def pages(self, g: int, rid: RequestId) -> tuple[int, ...]:
        """``pages[g][r]`` (empty when the request has no entry)."""
        e = self.entry(rid)
        return e.pages[g] if e is not None else ()

    def num_cached(self, g: int, rid: RequestId) -> int:
        """``num_cached[g][r]`` (0 when the request has no entry)."""
        e = self.entry(rid)
        return e.num_cached[g] if e is not None else 0


class Hit(NamedTuple):
    """A lookup result: the hit pages per group (0 = null placeholder) and the hit tokens."""

    pages: tuple[tuple[int, ...], ...]
    num_tokens: int


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _fail(transition: str, detail: str, reason: str = "argument") -> PreconditionError:
    return PreconditionError(f"manager.{transition}", reason, detail)


def _with_entry(s: ManagerState, rid: RequestId, e: Entry | None) -> frozenset[tuple[RequestId, Entry]]:
    rest = frozenset(item for item in s.entries if item[0] != rid)
    return rest | {(rid, e)} if e is not None else rest


def _with_keys(s: ManagerState, rid: RequestId, keys: tuple[Content, ...] | None) -> frozenset[Any]:
    rest = frozenset(item for item in s.keys if item[0] != rid)
    return rest | {(rid, keys)} if keys is not None else rest


# --- configuration and contents ------------------------------------------------------------

def init(config: ManagerConfig) -> ManagerState:
    """A fresh manager: a fresh pool, no requests. Zero groups force caching off.

    pre: valid group layouts; EAGLE is not combined with chunked-local attention; caching page
    sizes are multiples of the smallest one; a ``"mamba"`` page holds ``max_model_len`` tokens
    (a ``"mamba_align"`` group caches: its page size follows the caching rule).
    """
    if not _is_int(config.max_model_len) or config.max_model_len < 1:
        raise _fail("init", f"max_model_len must be an int >= 1, got {config.max_model_len!r}")
    if not _is_int(config.data_parallel_size) or config.data_parallel_size < 1:
        raise _fail("init", f"data_parallel_size must be an int >= 1, got {config.data_parallel_size!r}")
    if type(config.eagle_rule) is not str or config.eagle_rule not in EAGLE_RULES:
        raise _fail("init", f"eagle_rule must be one of {EAGLE_RULES}, got {config.eagle_rule!r}")
    if not config.groups:
        config = replace(config, enable_caching=False)
    for g, layout in enumerate(config.groups):
        if layout.kind not in KINDS or not _is_int(layout.page_size) or layout.page_size < 1:
            raise _fail("init", f"group {g}: bad layout {layout!r}")
        if (layout.kind in ("sliding", "chunked")) != (_is_int(layout.span) and layout.span >= 1):
            raise _fail("init", f"group {g}: window/chunk must be >= 1 exactly for sliding/chunked")
        if layout.kind == "chunked" and config.use_eagle:
            raise _fail("init", "EAGLE cannot be combined with chunked-local attention")
        if layout.kind == "mamba" and layout.page_size < config.max_model_len:
            raise _fail("init", f"group {g}: a Mamba page must hold max_model_len tokens")
    if any(config.groups[g].page_size % config.base_page_size for g in config.caching_groups):
        raise _fail("init", "caching page sizes must be multiples of the smallest")
    p = pool.init(config.num_pages, config.free_order)
    return ManagerState(config, p, frozenset(), frozenset(), (None,) * config.num_pages)


def content_of(req: RequestView, num_tokens: int, base_page_size: int) -> Content:
    """The exact content the first ``num_tokens`` tokens stand for, base page by base page.

    Each base page contributes its tokens, the LoRA identity (`lora_identity`) and the
    multimodal items overlapping it (identifier, offset relative to the page); the salt is the
    request's tenant.
    """
    return (req.cache_salt, _base_pages(req, base_page_size)[:num_tokens // base_page_size])


@functools.lru_cache(maxsize=256)
def _base_pages(req: RequestView, base_page_size: int) -> tuple[Any, ...]:
    """What each full base page of ``req`` contributes to a content (`content_of`). Memoized
    (a request view is immutable): a long request's contents are thousands of prefixes of one
    list, and sharing its page entries keeps comparing two of them cheap."""
    pages = []
    for i in range(req.num_tokens // base_page_size):
        lo, hi = i * base_page_size, (i + 1) * base_page_size
        mm = tuple((ident, off - lo) for ident, off, length in req.mm_features if off < hi and off + length > lo)
        pages.append((req.tokens[lo:hi], lora_identity(req), mm))
    return tuple(pages)


def forget_memoized_contents() -> None:
    """Drop the memo of `_base_pages`: a check that replaces one of the functions a content is
    made of (`lora_identity`) must not read contents made by the other."""
    _base_pages.cache_clear()


def request_keys(req: RequestView, base_page_size: int) -> tuple[Content, ...]:
    """The request's key list: one key per full base page of its current tokens."""
    return tuple(content_of(req, (i + 1) * base_page_size, base_page_size)
                 for i in range(req.num_tokens // base_page_size))


def page_key(s: ManagerState, req: RequestView, g: int, j: int) -> PoolKey:
    """The pool key of page ``j`` of group ``g`` for ``req`` (the content up to its end)."""
    base = s.config.base_page_size
    return (content_of(req, (j + 1) * s.config.groups[g].page_size, base), g)


# --- data-parallel shards ------------------------------------------------------------------

def call_shard(s: ManagerState, transition: str, dp_shard_hint: int | None,
               data_parallel_size: int | None) -> int | None:
    """The shard a call asks for, or None (whole pool) when its DP arguments are inactive.

    DP is active when ``data_parallel_size > 1`` divides ``num_pages``; it must then equal the
    manager's construction value (else "argument"). The shard is ``hint % dp`` when a hint is
    given.
    """
    if dp_shard_hint is not None and not _is_int(dp_shard_hint):
        raise _fail(transition, f"dp_shard_hint must be an int or None, got {dp_shard_hint!r}")
    if data_parallel_size is None:
        return None
    if not _is_int(data_parallel_size) or data_parallel_size < 1:
        raise _fail(transition, f"data_parallel_size must be an int >= 1, got {data_parallel_size!r}")
    if data_parallel_size == 1 or s.config.num_pages % data_parallel_size:
        return None
    if data_parallel_size != s.config.data_parallel_size:
        raise _fail(transition, "data_parallel_size differs from the manager's")
    return None if dp_shard_hint is None else dp_shard_hint % data_parallel_size


def shard_bounds(s: ManagerState, shard: int | None) -> Bounds | None:
    """Page-id range of a shard (the null page excluded from shard 0); None = whole pool."""
    if shard is None:
        return None
    per = s.config.num_pages // s.config.data_parallel_size
    return (max(1, shard * per), (shard + 1) * per)


# --- lookup ---------------------------------------------------------------------------------

def lookup(s: ManagerState, req: RequestView, dp_shard_hint: int | None = None,
           data_parallel_size: int | None = None, max_cache_hit_length: int | None = None) -> Hit:
    """The longest prefix-cache hit for ``req`` (pure: no reference is taken).

    No hit when caching is off or the request wants prompt logprobs. Otherwise each group's
    pages are looked up by key in the request's shard (its entry's, else the call's) and the
    groups' rules are combined by `common_hit_length` with ``max_length = num_tokens - 1``,
    lowered to ``max_cache_hit_length`` when given (vLLM's cap, e.g. a KV connector's);
    each group returns its own rule's pages at that length. With vLLM's EAGLE rule
    (`ManagerConfig.vllm_eagle`) `vllm_eagle_hit` gives the length and each group's pages; a
    group may then read pages up to the request's last full key page.
    pre: the request has at least one token and is not finished; valid DP arguments;
    ``max_cache_hit_length`` is None or an int >= 0.
    """
    if req.num_tokens < 1 or req.finished:
        raise _fail("lookup", "a request needs at least one token and must not be finished")
    if max_cache_hit_length is not None and (not _is_int(max_cache_hit_length) or max_cache_hit_length < 0):
        raise _fail("lookup", f"max_cache_hit_length must be None or an int >= 0, got {max_cache_hit_length!r}")
    shard = call_shard(s, "lookup", dp_shard_hint, data_parallel_size)
    cfg = s.config
    empty = Hit(tuple(() for _ in cfg.groups), 0)
    if not cfg.enable_caching or req.prompt_logprobs:
        return empty
    e = s.entry(req.request_id)
    bounds = shard_bounds(s, e.shard if e is not None else shard)
    cap = req.num_tokens - 1 if max_cache_hit_length is None else min(req.num_tokens - 1, max_cache_hit_length)
    # vLLM's EAGLE rule reads up to the request's last full base page, past the cap
    peek = req.num_tokens // cfg.base_page_size * cfg.base_page_size if cfg.vllm_eagle else 0
    cached = [tuple(pool.lookup(s.pool, page_key(s, req, g, j), bounds)
                    for j in range(max(cap, peek) // layout.page_size))
              for g, layout in enumerate(cfg.groups)]

    def found(g: int, max_length: int) -> tuple[int | None, ...]:
        """Per page of group ``g`` within ``max_length`` tokens, the page cached for it, or None."""
        return cached[g][:max_length // cfg.groups[g].page_size]

    def span(g: int, max_length: int) -> Span:
        layout = cfg.groups[g]
        hit = tuple(p is not None for p in found(g, max_length))
        return group_rule(layout.kind, layout.span, hit, layout.page_size, max_length)

    if cfg.vllm_eagle:
        groups = [LookupGroup(layout.kind, layout.page_size, layout.span, tuple(p is not None for p in found(g, peek)))
                  for g, layout in enumerate(cfg.groups)]
        length, spans = vllm_eagle_hit(groups, cap, peek)
    else:
        rules = [lambda n, g=g: span(g, n).end * cfg.groups[g].page_size for g in range(len(cfg.groups))]
        length = common_hit_length(rules, [layout.page_size for layout in cfg.groups], cap, cfg.use_eagle)
        spans = tuple(span(g, length) for g in range(len(cfg.groups)))
    pages = []
    for g, (first, end) in enumerate(spans):
        ids = found(g, length)
        # `Span`: pages [first, end) are cache hits, so their lookups found a page (not None)
        pages.append(tuple(NULL_PAGE if j < first else cast(int, ids[j]) for j in range(end)))
    return Hit(tuple(pages), length)


# --- remove_skipped ------------------------------------------------------------------------

def skipped_before(layout: GroupLayout, num_computed_tokens: int) -> int:
    """Pages with a smaller index are never attended again after ``num_computed_tokens``."""
    n = num_computed_tokens
    if layout.kind == "sliding":
        return max(0, (n - layout.span + 1) // layout.page_size)
    if layout.kind == "chunked":
        return (n // layout.span) * layout.span // layout.page_size
    if layout.kind == "mamba_align":
        return mamba_state_index(layout, n)
    return 0


# --- Mamba, align mode ----------------------------------------------------------------------

def mamba_state_index(layout: GroupLayout, num_tokens: int) -> int:
    """Index of the page that holds the state after ``num_tokens`` tokens (0 for none)."""
    return max(0, -(-num_tokens // layout.page_size) - 1)


def mamba_growth(layout: GroupLayout, pages: tuple[int, ...], state_end: int) -> tuple[int, int]:
    """``(placeholders, new pages)`` a Mamba align list grows by to hold the state after
    ``state_end`` tokens: null placeholders up to the state's page, then one new page for it,
    when the state moves past the list's last page; else nothing (the state stays in place)."""
    target = -(-state_end // layout.page_size)
    return (target - len(pages) - 1, 1) if target > len(pages) else (0, 0)


def mamba_cacheable_page(layout: GroupLayout, req: RequestView, num_tokens: int) -> int | None:
    """The index of the one Mamba page `cache_pages` may key: the page holding the state after
    the request's computed tokens ``c``, when ``c`` is page-aligned and within ``num_tokens``
    (that state is complete: the step that ended at ``c`` is over). None otherwise."""
    c = req.num_computed_tokens
    if c < layout.page_size or c % layout.page_size or c > num_tokens:
        return None
    return c // layout.page_size - 1


# --- sliding window: pages that can never serve a hit --------------------------------------------

def sliding_page_can_hit(cfg: ManagerConfig, g: int, j: int) -> bool:
    """Whether `cache_pages` keys page ``j`` of group ``g``: always, unless the group is a
    sliding window and ``cfg.skip_unreachable_sliding_pages`` is set (vLLM 0.33's policy).

    Then: a hit ends on a multiple of the hit unit ``U`` (the lcm of every group's page size:
    `common_hit_length` only returns lengths every group accepts) and the sliding group's part
    of it is the ``need = max(1, cdiv(window - 1, page_size))`` pages before that end (a shorter
    run from page 0 is never a whole unit when ``need < U / page_size``). So only the last
    ``need`` pages of each unit can ever be part of a hit; the others are left unkeyed, and no
    lookup changes.

    With vLLM's EAGLE rule (`ManagerConfig.vllm_eagle`) a sliding lookup matches ``need + 1``
    pages ending one page past a unit's end, then drops the last (`sliding_run`), and asked
    again without the drop it matches the ``need`` pages before the end: page ``j`` is kept
    when ``j - 1`` is among the last ``need + 1`` pages of its unit (vLLM 0.33's EAGLE mask,
    which keeps every page the other lookup reads too).
    """
    layout = cfg.groups[g]
    if not cfg.skip_unreachable_sliding_pages or layout.kind != "sliding":
        return True
    per = math.lcm(*(other.page_size for other in cfg.groups)) // layout.page_size
    peek = 1 if cfg.vllm_eagle else 0
    need = sliding_run(layout.span, layout.page_size, drop=cfg.vllm_eagle)
    return need >= per or (j >= peek and (j - peek) % per >= per - need)


def mamba_hit_shape_ok(pages: tuple[int, ...]) -> bool:
    """A Mamba align hit is empty or null placeholders then exactly one state page (its last)."""
    return not pages or (pages[-1] != NULL_PAGE and all(q == NULL_PAGE for q in pages[:-1]))


def remove_skipped(s: ManagerState, rid: RequestId, num_computed_tokens: int) -> ManagerState:
    """Replace the request's out-of-window pages by null placeholders and free them.

    Per group in group order, the non-null pages before `skipped_before` are freed in
    descending index order (they keep their keys and stay hit-able until reused).
    pre: ``num_computed_tokens`` is an int >= 0; a request with no entry is unchanged.
    """
    if not _is_int(num_computed_tokens) or num_computed_tokens < 0:
        raise _fail("remove_skipped", f"num_computed_tokens must be an int >= 0, got {num_computed_tokens!r}")
    e = s.entry(rid)
    if e is None:
        return s
    p, lists = s.pool, []
    for layout, pages in zip(s.config.groups, e.pages):
        cut = min(skipped_before(layout, num_computed_tokens), len(pages))
        p = pool.free(p, tuple(q for q in reversed(pages[:cut]) if q != NULL_PAGE))
        lists.append((NULL_PAGE,) * cut + pages[cut:])
    at = max(dict(s.progress).get(rid, 0), num_computed_tokens)  # the caller has computed that many
    return replace(s, pool=p, entries=_with_entry(s, rid, replace(e, pages=tuple(lists))),
                   progress=_with_progress(s, rid, at))


# --- cache_pages ---------------------------------------------------------------------------

def cache_pages(s: ManagerState, req: RequestView, num_tokens: int) -> ManagerState:
    """Register the request's full pages up to ``num_tokens`` under their keys.

    Per caching group: pages ``[num_cached, num_tokens // page_size)`` get their key from the
    request's key list, except null placeholders (never hashed) and pages that already have a
    key (never re-keyed); ``num_cached`` never decreases (a lower count is a no-op). A Mamba
    align group keys at most its `mamba_cacheable_page` and counts pages up to the computed
    tokens; a sliding group keys only the pages `sliding_page_can_hit` allows. The ghost
    ``content`` is not written here: it is what the allocation that computed the pages wrote.
    No-op when caching is off.
    pre: the request has an entry; ``0 <= num_tokens <= req.num_tokens``; every group holds
    the pages to cache. Engine contract (not checked: neither the spec nor the implementation
    knows which slots a step filled): ``num_tokens`` covers only tokens the request's
    allocations computed; INV-HIT-SAFE and INV-KEYED-COMPUTED are kept under it.
    """
    e = s.entry(req.request_id)
    if e is None:
        raise _fail("cache_pages", f"request {req.request_id!r} holds no pages", "unknown-request")
    if not _is_int(num_tokens) or not 0 <= num_tokens <= req.num_tokens:
        raise _fail("cache_pages", f"num_tokens must be an int in [0, {req.num_tokens}], got {num_tokens!r}")
    cfg = s.config
    if any(num_tokens // layout.page_size > len(pages) for layout, pages in zip(cfg.groups, e.pages)):
        raise _fail("cache_pages", f"{num_tokens} tokens exceed the pages allocated")
    if not cfg.caching_groups:
        return s
    keys = request_keys(req, cfg.base_page_size)
    p, num_cached = s.pool, list(e.num_cached)
    for g in cfg.caching_groups:
        k = cfg.groups[g].page_size // cfg.base_page_size
        full = num_tokens // cfg.groups[g].page_size
        if cfg.groups[g].kind == "mamba_align":
            j = mamba_cacheable_page(cfg.groups[g], req, num_tokens)
            if j is not None and j >= num_cached[g] and e.pages[g][j] != NULL_PAGE \
                    and p.key_of[e.pages[g][j]] is None:
                p = pool.cache(p, e.pages[g][j], (keys[(j + 1) * k - 1], g))
            num_cached[g] = max(num_cached[g], min(full, req.num_computed_tokens // cfg.groups[g].page_size))
            continue
        for j in range(num_cached[g], full):
            page = e.pages[g][j]
            if page == NULL_PAGE or p.key_of[page] is not None or not sliding_page_can_hit(cfg, g, j):
                continue
            p = pool.cache(p, page, (keys[(j + 1) * k - 1], g))
        num_cached[g] = max(num_cached[g], full)
    return replace(s, pool=p, keys=_with_keys(s, req.request_id, keys),
                   entries=_with_entry(s, req.request_id, replace(e, num_cached=tuple(num_cached))))


# --- allocate_slots ------------------------------------------------------------------------

def _check_hits(s: ManagerState, req: RequestView, hits: tuple[tuple[int, ...], ...],
                num_new_computed_tokens: int) -> None:
    """Hits must be what a lookup for this request returns now (shape, keys), for a new request."""
    cfg = s.config
    if len(hits) != len(cfg.groups):
        raise _fail("allocate_slots", f"expected {len(cfg.groups)} hit lists, got {len(hits)}")
    if not any(hits) and num_new_computed_tokens == 0:
        return
    if s.entry(req.request_id) is not None:
        raise _fail("allocate_slots", "hit pages are only accepted for a request holding no pages")
    for g, (layout, pages) in enumerate(zip(cfg.groups, hits)):
        if num_new_computed_tokens % layout.page_size or len(pages) != num_new_computed_tokens // layout.page_size:
            raise _fail("allocate_slots", f"group {g}: hits do not cover {num_new_computed_tokens} tokens")
        for page in pages:
            if not _is_int(page) or not 0 <= page < cfg.num_pages:
                raise _fail("allocate_slots", f"group {g}: hit {page!r} is not a page of this pool")
            if page == NULL_PAGE and layout.kind == "full":
                raise _fail("allocate_slots", f"group {g}: a full-attention hit has no null page")
        if layout.kind == "mamba_align" and not mamba_hit_shape_ok(pages):
            raise _fail("allocate_slots", f"group {g}: a Mamba hit is null placeholders then one state page")
        for j, page in enumerate(pages):
            if page != NULL_PAGE and s.pool.key_of[page] != page_key(s, req, g, j):
                raise _fail("allocate_slots", f"group {g}: page {page} is not cached for position {j}")


def allocate_slots(s: ManagerState, req: RequestView, num_new_tokens: int, num_new_computed_tokens: int = 0,
                   new_computed_pages: Sequence[Sequence[int]] | None = None, num_lookahead_tokens: int = 0,
                   delay_cache_pages: bool = False, dp_shard_hint: int | None = None,
                   data_parallel_size: int | None = None, num_external_computed_tokens: int = 0
                   ) -> tuple[ManagerState, tuple[tuple[int, ...], ...] | None]:
    """Give the request pages for its new tokens, all or nothing (INV-ATOMIC).

    ``computed = num_computed_tokens + num_new_computed_tokens`` (the local hits) and the step
    ends at ``end = computed + num_external_computed_tokens + num_new_tokens``: external
    tokens (loaded by a KV connector) follow the local hits and get pages like new tokens,
    but no compute. Plan: free the out-of-window pages, take the hits, and count per group
    ``max(0, cdiv(slots, page_size) - held - hits)`` new pages with
    ``slots = min(end + num_lookahead_tokens, max_model_len)`` (a Mamba align group:
    `mamba_growth` to ``end``, lookahead slots hold no state). If the
    sum does not fit in the request's shard of the planned pool, return ``(s, None)``: the
    same state. Otherwise apply in eSurge's order (skip-free, touch hits, save hits, allocate
    per group in group order, then cache full pages up to ``min(end, num_tokens)`` unless
    caching is off or ``delay_cache_pages``) and return the new pages.
    With no cache group the call succeeds with no pages and the request gets no entry.
    pre: not finished; ``num_new_tokens >= 1``, or ``>= 0`` with external tokens; counts
    ``>= 0``; ``end <= max_model_len``; hits as a lookup returns them, for a request holding no
    pages; no external tokens with a Mamba align group (vLLM does not support them either).
    """
    cfg = s.config
    counts = (num_new_tokens, num_new_computed_tokens, num_lookahead_tokens, num_external_computed_tokens)
    if req.finished:
        raise _fail("allocate_slots", f"request {req.request_id!r} is finished")
    if not all(_is_int(n) for n in counts) or min(counts) < 0 or num_new_tokens + num_external_computed_tokens < 1:
        raise _fail("allocate_slots", f"bad token counts {counts!r}")
    if not isinstance(delay_cache_pages, bool):
        raise _fail("allocate_slots", f"delay_cache_pages must be a bool, got {delay_cache_pages!r}")
    if num_external_computed_tokens and any(layout.kind == "mamba_align" for layout in cfg.groups):
        raise _fail("allocate_slots", "external computed tokens are not supported with a Mamba align group")
    computed = req.num_computed_tokens + num_new_computed_tokens
    end = computed + num_external_computed_tokens + num_new_tokens
    if end > cfg.max_model_len:
        raise _fail("allocate_slots", f"{end} tokens exceed max_model_len")
    hits = tuple(() for _ in cfg.groups) if new_computed_pages is None else tuple(map(tuple, new_computed_pages))
    _check_hits(s, req, hits, num_new_computed_tokens)
    requested = call_shard(s, "allocate_slots", dp_shard_hint, data_parallel_size)
    if not cfg.groups:
        return s, ()  # no cache group: nothing to hold, and the request gets no entry

    planned = remove_skipped(s, req.request_id, req.num_computed_tokens)
    old = planned.entry(req.request_id)
    entry = old or Entry(hits, tuple(map(len, hits)), requested)
    _check_mamba_state_moves_forward(planned, entry, end)
    bounds = shard_bounds(s, entry.shard)
    p = pool.touch(planned.pool, tuple(q for group in hits for q in group))
    slots = min(end + num_lookahead_tokens, cfg.max_model_len)
    growth = [mamba_growth(layout, pages, end) if layout.kind == "mamba_align"
              else (0, max(0, -(-slots // layout.page_size) - len(pages)))
              for layout, pages in zip(cfg.groups, entry.pages)]
    if not pool.pre_allocate(p, sum(need for _, need in growth), bounds):
        return s, None
    new_pages, lists = [], []
    content = list(planned.content) or [None] * cfg.num_pages  # (a state built without the ghost)
    for (placeholders, need), pages in zip(growth, entry.pages):
        p, got = pool.allocate(p, need, bounds)
        for q in got:
            content[q] = None
        new_pages.append(got)
        lists.append(pages + (NULL_PAGE,) * placeholders + got)
    _mark_computed(s, req, lists, computed, min(end, req.num_tokens), content)
    _mark_mamba_states(s, req, lists, end, content)
    t = replace(planned, pool=p, content=tuple(content),
                progress=_with_progress(planned, req.request_id, computed),
                entries=_with_entry(planned, req.request_id, replace(entry, pages=tuple(lists))))
    if cfg.enable_caching and not delay_cache_pages:
        t = cache_pages(t, req, min(end, req.num_tokens))
    return t, tuple(new_pages)


KEY_COMPUTATION_TRANSITIONS = ("lookup", "allocate_slots", "cache_pages")
"""The calls that compute a request's page keys (the only ones a failing key computation
can interrupt)."""


def fail_key_computation(s: ManagerState, req: RequestView, transition: str,
                         cause: str) -> tuple[ManagerState, PreconditionError]:
    """A call during which the request's page keys cannot be computed (the hash function
    raised, or the request carries a value no key can be made from).

    The call is rejected with a typed error (reason ``"key-computation"``) and every field of
    the state, ghost included, is unchanged (INV-ATOMIC): the manager computes every key a call
    needs before it changes anything, so a failure can only happen before the first change.
    pre: ``transition`` is one of `KEY_COMPUTATION_TRANSITIONS`.
    """
    if transition not in KEY_COMPUTATION_TRANSITIONS:
        raise _fail("fail_key_computation", f"{transition!r} computes no key")
    return s, _fail(transition, f"request {req.request_id!r}: {cause}", "key-computation")


def _mark_computed(s: ManagerState, req: RequestView, lists: Sequence[tuple[int, ...]], start: int,
                   num_tokens: int, content: list[PoolKey | None]) -> None:
    """Ghost: the step computes tokens ``[start, num_tokens)``, so every real page it completes
    (one whose last token it computes) now holds the request's content up to its end, written
    from the request's tokens. Pages completed before ``start`` (hits, earlier steps) keep what
    they hold. Mamba pages hold a state, not tokens: see `_mark_mamba_states`."""
    for g, (layout, pages) in enumerate(zip(s.config.groups, lists)):
        if layout.kind in ("mamba", "mamba_align"):
            continue
        for j in range(start // layout.page_size, min(num_tokens // layout.page_size, len(pages))):
            if pages[j] != NULL_PAGE:
                content[pages[j]] = page_key(s, req, g, j)


def _check_mamba_state_moves_forward(s: ManagerState, entry: Entry, state_end: int) -> None:
    """The state after ``state_end`` tokens goes to a new page, or stays in the list's last page
    when that page is a held, uncached state (a cached state is never overwritten). A state
    that would move back (a computed count below the last allocation's) is an error."""
    for g, (layout, pages) in enumerate(zip(s.config.groups, entry.pages)):
        if layout.kind != "mamba_align":
            continue
        target = -(-state_end // layout.page_size)
        in_place = target == len(pages) and pages[-1] != NULL_PAGE and s.pool.key_of[pages[-1]] is None
        if target < len(pages) or (target == len(pages) and not in_place):
            raise _fail("allocate_slots", f"group {g}: the Mamba state after {state_end} tokens would overwrite "
                                          f"an earlier or cached state (its list holds {len(pages)} pages)")


def _mark_mamba_states(s: ManagerState, req: RequestView, lists: Sequence[tuple[int, ...]], state_end: int,
                       content: list[PoolKey | None]) -> None:
    """Ghost: the state page of each Mamba align group will hold the state after ``state_end``
    tokens (the engine contract); that is the state of the page's own prefix only when
    ``state_end`` ends the page and lies within the request's tokens, else no prefix's."""
    for g, (layout, pages) in enumerate(zip(s.config.groups, lists)):
        if layout.kind != "mamba_align" or not pages:
            continue
        j = mamba_state_index(layout, state_end)
        aligned = state_end % layout.page_size == 0 and state_end <= req.num_tokens
        content[pages[j]] = page_key(s, req, g, j) if aligned else None


def _with_progress(s: ManagerState, rid: RequestId, num_tokens: int | None) -> frozenset[tuple[RequestId, int]]:
    rest = frozenset(item for item in s.progress if item[0] != rid)
    return rest | {(rid, num_tokens)} if num_tokens is not None else rest


# --- allocate_slots_batch: the batched decode step ---------------------------------------------

BatchResults = tuple[tuple[tuple[int, ...], ...] | None, ...]
"""One `allocate_slots` result per request of a batch: its new pages per group, or None."""


def allocate_slots_batch(s: ManagerState, reqs: Sequence[RequestView], num_new_tokens: Sequence[int],
                         num_lookahead_tokens: int = 0, delay_cache_pages: bool = False,
                         data_parallel_size: int | None = None) -> tuple[ManagerState, BatchResults]:
    """Extend each request by its new tokens: the left fold of `allocate_slots` over the batch.

    Element ``i`` is ``allocate_slots(s_i, reqs[i], num_new_tokens[i], 0, None,
    num_lookahead_tokens, delay_cache_pages, None, data_parallel_size)`` in the state ``s_i``
    the elements before it left (``s_0 = s``), and its result is element ``i`` of the results.
    So each request is all or nothing (INV-ATOMIC): a None leaves the state as that element
    found it, and the fold goes on, so a later request that needs fewer pages may still fit.
    A batch with an element outside its precondition (in its ``s_i``) is rejected as a whole:
    the error is raised and no state is returned. No element takes hits or a DP hint (a
    request holding no pages gets them from the whole pool, as a single call without a hint).
    Every invariant `allocate_slots` preserves, the batch preserves (by induction on the fold).
    pre: one count per request; distinct request ids (a step schedules a request once); each
    element within the precondition of `allocate_slots` in its ``s_i``.
    """
    if len(reqs) != len(num_new_tokens):
        raise _fail("allocate_slots_batch", f"{len(reqs)} requests but {len(num_new_tokens)} token counts")
    ids = [req.request_id for req in reqs]
    if len(set(ids)) != len(ids):
        raise _fail("allocate_slots_batch", f"a request id appears twice in {ids!r}")
    t = s
    results: list[tuple[tuple[int, ...], ...] | None] = []
    for req, n in zip(reqs, num_new_tokens):
        t, new = allocate_slots(t, req, n, 0, None, num_lookahead_tokens, delay_cache_pages,
                                None, data_parallel_size)
        results.append(new)
    return t, tuple(results)


# --- free, free_page_hashes, reset_prefix_cache ---------------------------------------------

def free_request(s: ManagerState, rid: RequestId) -> ManagerState:
    """Release the request's pages: per group, its non-null pages in reverse order.

    Reverse order puts the chain tail nearest the free-list head, so it is evicted first. The
    entry (pages, ``num_cached``, shard) is forgotten; the key list is kept (a preempted request
    resumes with it). A request with no entry is unchanged.
    """
    e = s.entry(rid)
    if e is None:
        return s
    p = s.pool
    for pages in e.pages:
        p = pool.free(p, tuple(q for q in reversed(pages) if q != NULL_PAGE))
    return replace(s, pool=p, entries=_with_entry(s, rid, None), progress=_with_progress(s, rid, None))


def free_page_hashes(s: ManagerState, rid: RequestId) -> ManagerState:
    """Forget the request's key list (on finish); only ghost state changes."""
    return replace(s, keys=_with_keys(s, rid, None))


def reset_prefix_cache(s: ManagerState) -> tuple[ManagerState, bool]:
    """Forget every page key when no page is held; otherwise change nothing and return False.

    Request key lists are kept (they stand for token content, not for pages), and so is the
    ghost ``content``: a reset forgets keys, the pages still hold what was computed into them.
    """
    p, done = pool.reset_prefix_cache(s.pool)
    if not done:
        return s, False
    return replace(s, pool=p), True


def page_ids(s: ManagerState, rid: RequestId) -> tuple[tuple[int, ...], ...]:
    """The request's page ids per group (0 = null placeholder).

    pre: the request has an entry ("unknown-request" otherwise).
    """
    e = s.entry(rid)
    if e is None:
        raise _fail("page_ids", f"request {rid!r} holds no pages", "unknown-request")
    return e.pages


def num_common_prefix_pages(s: ManagerState, rid: RequestId, num_running_requests: int) -> tuple[int, ...]:
    """Per group, how many leading pages of the request are held by at least
    ``num_running_requests`` requests (the prefix cascade attention can share); 0 for every
    group other than full attention.

    pre: the request has an entry ("unknown-request"); ``num_running_requests`` is an int >= 1.
    """
    e = s.entry(rid)
    if e is None:
        raise _fail("num_common_prefix_pages", f"request {rid!r} holds no pages", "unknown-request")
    if not _is_int(num_running_requests) or num_running_requests < 1:
        raise _fail("num_common_prefix_pages",
                    f"num_running_requests must be an int >= 1, got {num_running_requests!r}")
    counts = []
    for layout, pages in zip(s.config.groups, e.pages):
        shared = 0
        while layout.kind == "full" and shared < len(pages) and s.pool.ref[pages[shared]] >= num_running_requests:
            shared += 1
        counts.append(shared)
    return tuple(counts)


def usage(s: ManagerState) -> float:
    """Fraction of usable pages held: ``1 - free / (N - 1)``; 0.0 when idle."""
    return pool.usage(s.pool)


# --- invariants (by their INV-* names) -------------------------------------------------

def inv_ref_count(s: ManagerState) -> bool:
    """INV-REF-COUNT: ref[p] = number of (group, request) page lists holding p, for p >= 1."""
    held = [q for _, e in s.entries for pages in e.pages for q in pages if q != NULL_PAGE]
    return all(s.pool.ref[p] == held.count(p) for p in range(1, s.config.num_pages))


def inv_hit_safe_state(s: ManagerState) -> bool:
    """INV-HIT-SAFE (state form): every keyed page holds exactly the content its key stands for,
    judged by the ghost ``content`` (written from the request's tokens by the allocation that
    computed the page, never from the key).

    A lookup only returns pages registered under the requested key, so this makes every hit
    safe; it is the inductive form of the lookup predicate `inv_hit_safe`.
    """
    return len(s.content) == s.config.num_pages and all(
        s.pool.key_of[p] is None or s.content[p] == s.pool.key_of[p] for p in range(s.config.num_pages))


def inv_keyed_computed(s: ManagerState) -> bool:
    """INV-KEYED-COMPUTED: a page is keyed only once its tokens are computed (the ghost
    ``content`` was written by an allocation that computed them, and not erased since)."""
    return len(s.content) == s.config.num_pages and all(
        s.pool.key_of[p] is None or s.content[p] is not None for p in range(s.config.num_pages))


def inv_window_live(s: ManagerState, progress: Mapping[RequestId, int] | None = None) -> bool:
    """INV-WINDOW-LIVE: every page of a sliding-window or chunked-local group that the first
    token of a request's last allocation attends (index >= `skipped_before` that position) is
    held, not a null placeholder; in a Mamba align group, the page holding the state that
    allocation starts from (`mamba_state_index`) is held. ``progress`` gives those positions (default: the ghost of
    ``s``; a checker of an implementation passes the positions it drove the calls with)."""
    counts = dict(s.progress) if progress is None else progress
    for rid, e in s.entries:
        n = counts.get(rid)
        if n is None:
            continue
        for layout, pages in zip(s.config.groups, e.pages):
            if layout.kind in ("sliding", "chunked") and NULL_PAGE in pages[skipped_before(layout, n):]:
                return False
            at = mamba_state_index(layout, n)
            if layout.kind == "mamba_align" and n > 0 and pages[at:at + 1] == (NULL_PAGE,):
                return False
    return True


def inv_hit_safe(s: ManagerState, req: RequestView, hit: Hit) -> bool:
    """INV-HIT-SAFE: each page of a hit at position j of group g holds req's content to its end.

    Judged by the ghost ``content`` of ``s`` (the state the lookup was made in).
    """
    return all(page == NULL_PAGE or (0 < page < len(s.content) and s.content[page] == page_key(s, req, g, j))
               for g, pages in enumerate(hit.pages) for j, page in enumerate(pages))


def inv_hit_shape(s: ManagerState, req: RequestView, hit: Hit) -> bool:
    """INV-HIT-SHAPE: page-aligned, at most num_tokens - 1 tokens, a prefix for full attention.

    Every group's list covers exactly ``hit.num_tokens`` tokens; full-attention lists have no
    null placeholder (a miss at j means misses after j); sliding and chunked lists have their
    placeholders first; a Mamba align list is placeholders then one state page, the state of
    the whole hit (`mamba_hit_shape_ok`); no hit when caching is off or prompt logprobs are
    requested.
    """
    cfg = s.config
    if len(hit.pages) != len(cfg.groups) or not 0 <= hit.num_tokens <= req.num_tokens - 1:
        return False
    if hit.num_tokens and (not cfg.enable_caching or req.prompt_logprobs):
        return False
    for layout, pages in zip(cfg.groups, hit.pages):
        real = [q for q in pages if q != NULL_PAGE]
        if len(pages) * layout.page_size != hit.num_tokens or len(set(real)) != len(real):
            return False
        if pages[len(pages) - len(real):] != tuple(real) or (layout.kind == "full" and len(real) != len(pages)):
            return False
        if layout.kind == "mamba_align" and not mamba_hit_shape_ok(pages):
            return False
    return True


def inv_atomic(pre: ManagerState, post: ManagerState, result: object) -> bool:
    """INV-ATOMIC: an allocation that returned None left the state exactly as it was."""
    return result is not None or post == pre


def well_formed(s: ManagerState) -> bool:
    """Shape every invariant presupposes: one list and count per group, cached prefix in range."""
    groups = len(s.config.groups)
    return pool.well_formed(s.pool) and s.pool.num_pages == s.config.num_pages and all(
        len(e.pages) == groups and len(e.num_cached) == groups
        and all(0 <= c <= len(pages) for c, pages in zip(e.num_cached, e.pages))
        for _, e in s.entries)
