"""The manager of `verikv.spec.manager` as a bounded Z3 transition system, and its theorems.

Bound (every theorem; stated in its ``bound``): N = 3..5 pages, one full-attention group of
page size 2, ``max_model_len`` 6, two requests (``r0`` acts, ``r1`` is any other holder; the
roles are symmetric), prompts of 1..6 tokens over the alphabet {0, 1}, no salt, LoRA or
multimodal items, caching on, no EAGLE, no data parallelism, free order "esurge", no
lookahead tokens. Token contents, reference counts, the free list, keys, ghost contents and
both requests' page lists are symbolic within the bound. Engine contract (the spec states it
at `cache_pages`): a request's tokens only grow, and it caches only tokens its allocations
computed.

Encoding. With N fixed, every per-page table is a Python list of Z3 terms (an update at a
symbolic page is an ``If`` per cell), so queries have no arrays and no quantifiers; the
state between a transition's internal steps is named by fresh constants (`freeze`), which
keeps terms small (allocate_slots/INV-HIT-SAFE: 8.6 s without, 0.9 s with). The free
list is its position map ``pos`` (NONE = not free) and length ``flen``; a key's cached page
list is ordered by ``stamp`` (insertion clock). The pool invariants are z3_pool's own
(`verikv.proofs.z3.pool.invariants`, read through `Table` views), and every query goes through z3_common's
prover (vacuity check first, one query per conjunct, unknown = failure). z3_pool's
array/sequence relations are not reused for the manager's multi-page loops: unrolled over
three elements they take 17-30 s per bounded query.

Ideal hash: a key *is* its content, so the key of a request's first ``j + 1`` pages is the
injective code ``4^(j+1) + sum(tokens[i] * 2^i)`` of those tokens (a leading 1 marks the
length). The ghost ``content[p]`` (what page ``p`` holds) uses the same code, and is written as
the spec writes it: by the allocation that completes the page, from the request's tokens; the
caching step writes keys only. So INV-HIT-SAFE (key = content) is a theorem about which page
gets which key, not an identity. Its induction needs two more ghost facts, proved as conjuncts
of the same theorem: each request's tokens so far (``toks``) and how many of them its
allocations computed (``ndone``); a held page those computed tokens fill holds their content
(``held-…``), and a page past them is its holder's alone and unkeyed (``private-…``).

Registered pairs (anything else is n/a):

* ``manager.lookup``: INV-HIT-SAFE (every returned page's content equals the request's prefix
  to that page's end) and INV-HIT-SHAPE (page-aligned, at most ``num_tokens - 1`` tokens, no
  null page, distinct pages). Lookup is pure, so state invariants are trivially kept.
* ``manager.allocate_slots``, ``manager.cache_pages``, ``manager.free_request``,
  ``manager.remove_skipped``, ``manager.reset_prefix_cache``: INV-REF-COUNT, INV-HIT-SAFE
  (state form: every keyed page holds its key's content, with the ghost facts above),
  INV-CONSERVE, INV-FREE-IFF-ZERO.
  remove_skipped is the identity for a full-attention group (nothing leaves the window).
* ``manager.allocate_slots``: INV-ATOMIC (the failing branch leaves every field unchanged).
* ``manager.fail_key_computation``: INV-ATOMIC (an allocate_slots call whose keys cannot be
  computed is rejected with every field unchanged, even when it would have allocated).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import z3

from verikv.proofs.runner.registry import Check, Mutant
from verikv.proofs.z3 import pool as z3_pool
from verikv.proofs.z3.common import (
    NONE,
    TRUE,
    Conjuncts,
    Mode,
    Obligation,
    Theorem,
    as_int,
    count,
    failed_theorems,
    show,
)

PAGE_SIZE = 2
MAX_TOKENS = 6            # max_model_len and the longest prompt
MAX_PAGES = MAX_TOKENS // PAGE_SIZE
MAX_HITS = (MAX_TOKENS - 1) // PAGE_SIZE
REQUESTS = 2
SCOPE = ("1 full group, page size 2, max_model_len 6, 2 requests, tokens {0,1}, prompts <= 6, "
         "esurge, no DP; tokens only grow, only computed tokens are cached")
IDEAL_HASH = "ideal hash: key = content (injective code of the token prefix)"
POOL_GOALS = ("INV-CONSERVE", "INV-FREE-IFF-ZERO")


NO_PAGE = z3.IntVal(NONE)  # a Table's default cell


class Table:
    """A fixed-size list of Z3 terms indexable by ints, Z3 numerals or symbolic ints (an If chain)."""

    def __init__(self, cells: list[z3.ExprRef], default: z3.ExprRef = NO_PAGE) -> None:
        self.cells, self.default = cells, default

    def __getitem__(self, i: object) -> z3.ExprRef:
        if isinstance(i, z3.IntNumRef):
            i = i.as_long()
        if isinstance(i, int):
            return self.cells[i] if 0 <= i < len(self.cells) else self.default
        out = self.default
        for p in reversed(range(len(self.cells))):
            out = z3.If(i == p, self.cells[p], out)
        return out


def pick(cells: list[z3.ExprRef], i: z3.ArithRef) -> z3.ExprRef:
    """``cells[i]`` for a symbolic index (NONE outside the list)."""
    return Table(cells)[i]


@dataclass(frozen=True)
class ManagerSym:
    """A symbolic `ManagerState` within the bound (see the module docstring)."""

    n: int
    ref: list[z3.ExprRef]
    key: list[z3.ExprRef]
    pos: list[z3.ExprRef]
    stamp: list[z3.ExprRef]
    content: list[z3.ExprRef]
    flen: z3.ExprRef
    clock: z3.ExprRef
    has: list[z3.ExprRef]
    npages: list[z3.ExprRef]
    pages: list[list[z3.ExprRef]]
    ncached: list[z3.ExprRef]
    toks: list[list[z3.ExprRef]]
    """Ghost, per request: its tokens as its last allocation saw them."""
    ndone: list[z3.ExprRef]
    """Ghost, per request: how many of its tokens its allocations computed."""

    def fields(self) -> list[z3.ExprRef]:
        """Every term of the state, in a fixed order (for equality of states)."""
        return (self.ref + self.key + self.pos + self.stamp + self.content + [self.flen, self.clock]
                + self.has + self.npages + [q for pages in self.pages for q in pages] + self.ncached
                + [x for toks in self.toks for x in toks] + self.ndone)


def manager_vars(tag: str, n: int) -> ManagerSym:
    """Fresh constants for a whole manager state of ``n`` pages."""
    ints = lambda name, k: [z3.Int(f"{tag}.{name}{i}") for i in range(k)]
    return ManagerSym(n, ints("ref", n), ints("key", n), ints("pos", n), ints("stamp", n), ints("content", n),
                      z3.Int(f"{tag}.flen"), z3.Int(f"{tag}.clock"),
                      [z3.Bool(f"{tag}.has{r}") for r in range(REQUESTS)], ints("npages", REQUESTS),
                      [ints(f"page{r}_", MAX_PAGES) for r in range(REQUESTS)], ints("ncached", REQUESTS),
                      [ints(f"tok{r}_", MAX_TOKENS) for r in range(REQUESTS)], ints("ndone", REQUESTS))


def freeze(s: ManagerSym, tag: str, defs: list[z3.BoolRef]) -> ManagerSym:
    """Fresh constants equal to ``s`` (the definitions go to ``defs``): keeps terms small between steps."""
    fresh = manager_vars(tag, s.n)
    defs.extend(x == y for x, y in zip(fresh.fields(), s.fields()))
    return fresh


def states_equal(a: ManagerSym, b: ManagerSym) -> z3.BoolRef:
    """Every field of ``a`` equals that of ``b``."""
    return z3.And([x == y for x, y in zip(a.fields(), b.fields())])


@dataclass(frozen=True)
class ReqArgs:
    """Symbolic arguments: request r0's tokens and length, and each transition's counts and hits."""

    tokens: list[z3.ExprRef]
    length: z3.ExprRef
    computed: z3.ExprRef          # req.num_computed_tokens (remove_skipped: its argument)
    num_new: z3.ExprRef           # allocate_slots num_new_tokens; cache_pages num_tokens
    num_hits: z3.ExprRef          # hit pages given to allocate_slots (num_new_computed = 2 * num_hits)
    hits: list[z3.ExprRef]
    delay: z3.BoolRef


def req_args(tag: str) -> ReqArgs:
    """Fresh symbolic arguments."""
    return ReqArgs([z3.Int(f"{tag}.tok{i}") for i in range(MAX_TOKENS)], z3.Int(f"{tag}.len"),
                   z3.Int(f"{tag}.computed"), z3.Int(f"{tag}.num_new"), z3.Int(f"{tag}.num_hits"),
                   [z3.Int(f"{tag}.hit{j}") for j in range(MAX_HITS)], z3.Bool(f"{tag}.delay"))


def args_domain(a: ReqArgs) -> z3.BoolRef:
    """The bound on requests: 1..6 tokens over {0, 1}."""
    return z3.And(1 <= a.length, a.length <= MAX_TOKENS, *[z3.Or(t == 0, t == 1) for t in a.tokens])


def code(a: ReqArgs, j: int) -> z3.ArithRef:
    """The ideal key (= content) of the request's first ``j + 1`` pages."""
    return code_of(a.tokens, j)


def code_of(tokens: list[z3.ExprRef], j: int) -> z3.ArithRef:
    """The ideal key (= content) of the first ``j + 1`` pages of ``tokens``."""
    width = (j + 1) * PAGE_SIZE
    return z3.IntVal(1 << width) + z3.Sum([tokens[i] * (1 << i) for i in range(width)])


def grows_from(s: ManagerSym, a: ReqArgs) -> z3.BoolRef:
    """Engine contract: r0's tokens extend the ones its allocations computed."""
    return z3.Implies(s.has[0], z3.And(a.length >= s.ndone[0], *[z3.Implies(i < s.ndone[0], a.tokens[i] == x)
                                                                 for i, x in enumerate(s.toks[0])]))


def computed_by_allocations(s: ManagerSym, a: ReqArgs) -> z3.BoolRef:
    """Engine contract: r0's computed count is what its allocations computed (none without pages)."""
    return z3.If(s.has[0], a.computed <= s.ndone[0], a.computed == 0)


# --- the pool as the manager uses it -----------------------------------------------------

def pool_view(s: ManagerSym) -> z3_pool.PoolSym:
    """``s``'s pool as a z3_pool state (views derived from ``pos`` and ``key``), for its invariants."""
    seq = Table([page_at(s, i) for i in range(s.n + 1)])
    return z3_pool.PoolSym(z3.IntVal(s.n), Table(s.ref), Table(s.key), seq, Table(s.pos), s.flen, KeyMembers(s),
                           Table(s.stamp), s.clock, z3.BoolVal(False))


class KeyMembers:
    """z3_pool's ``inc[key][page]`` derived from ``key_of`` (one list per key: INV-KEY-BIJ by construction)."""

    def __init__(self, s: ManagerSym) -> None:
        self.s = s

    def __getitem__(self, k: z3.ArithRef) -> Table:
        return Table([self.s.key[p] == k for p in range(self.s.n)], z3.BoolVal(False))


def page_at(s: ManagerSym, i: int) -> z3.ArithRef:
    """The page at free-list position ``i`` (NONE when none is)."""
    out: z3.ArithRef = z3.IntVal(NONE)
    for p in reversed(range(s.n)):
        out = z3.If(s.pos[p] == i, p, out)
    return out


def pool_invariants(s: ManagerSym) -> dict[str, Conjuncts]:
    """z3_pool's pool invariants of ``s`` (bounded mode, N = s.n)."""
    return z3_pool.invariants(pool_view(s), Mode(s.n))


def set_page(cells: list[z3.ExprRef], page: z3.ArithRef, value: z3.ExprRef, when: z3.BoolRef) -> list[z3.ExprRef]:
    """``cells`` with ``cells[page] = value`` when ``when`` holds."""
    return [z3.If(z3.And(when, page == p), value, c) for p, c in enumerate(cells)]


def touch(s: ManagerSym, page: z3.ArithRef, when: z3.BoolRef) -> ManagerSym:
    """`spec.pool.touch((page,))`: leave the free list if ref was 0 (later ones shift left), ref += 1."""
    revive = z3.And(when, pick(s.ref, page) == 0)
    at = pick(s.pos, page)
    pos = [z3.If(revive, z3.If(page == p, NONE, z3.If(x > at, x - 1, x)), x) for p, x in enumerate(s.pos)]
    return replace(s, ref=set_page(s.ref, page, pick(s.ref, page) + 1, when), pos=pos,
                   flen=z3.If(revive, s.flen - 1, s.flen))


def free_page(s: ManagerSym, page: z3.ArithRef, when: z3.BoolRef) -> ManagerSym:
    """`spec.pool.free((page,))`, "esurge": ref -= 1; reaching 0 appends the page to the free tail."""
    zeroed = z3.And(when, pick(s.ref, page) == 1)
    return replace(s, ref=set_page(s.ref, page, pick(s.ref, page) - 1, when),
                   pos=set_page(s.pos, page, s.flen, zeroed), flen=z3.If(zeroed, s.flen + 1, s.flen))


def allocate(s: ManagerSym, need: z3.ArithRef) -> tuple[ManagerSym, list[z3.ExprRef]]:
    """`spec.pool.allocate(need)`: the pages at free positions < need, in order; evicted, ref 1.

    Returns the state and, per position i < MAX_PAGES, the page handed out i-th (NONE past need).
    """
    taken = [z3.And(x != NONE, x < need) for x in s.pos]
    got = [z3.If(i < need, page_at(s, i), NONE) for i in range(MAX_PAGES)]
    return replace(s, ref=[z3.If(t, 1, r) for t, r in zip(taken, s.ref)],
                   key=[z3.If(t, NONE, k) for t, k in zip(taken, s.key)],
                   content=[z3.If(t, NONE, c) for t, c in zip(taken, s.content)],
                   pos=[z3.If(t, NONE, z3.If(x == NONE, x, x - need)) for t, x in zip(taken, s.pos)],
                   flen=s.flen - need), got


# --- manager transitions -----------------------------------------------------------------

@dataclass(frozen=True)
class MStep:
    """One manager transition: precondition (the spec's), successor, result terms (a flag or
    pages), the definitions of its fresh constants, and the engine contract the theorems assume
    besides the precondition (the spec cannot check it: see `grows_from`)."""

    pre: z3.BoolRef
    post: ManagerSym
    result: tuple[z3.ExprRef, ...] = ()
    defs: z3.BoolRef = TRUE
    contract: z3.BoolRef = TRUE


StepFn = Callable[[ManagerSym, ReqArgs, str], MStep]


def lookup_pages(s: ManagerSym, a: ReqArgs, tag: str,
                 max_pages: z3.ArithRef) -> tuple[z3.BoolRef, list[z3.BoolRef], list[z3.ArithRef]]:
    """Full-attention lookup: per page j, the oldest page keyed by code(j) (witness ``f_j``).

    Returns the witness definitions, whether page j is part of the hit, and the pages.
    """
    defs, hit, found, run = [], [], [], z3.BoolVal(True)
    for j in range(MAX_HITS):
        f, k = z3.Int(f"{tag}.found{j}"), code(a, j)
        keyed = [s.key[p] == k for p in range(s.n)]
        oldest = z3.And([z3.Implies(keyed[p], pick(s.stamp, f) <= s.stamp[p]) for p in range(s.n)])
        defs.append(z3.If(z3.Or(keyed), z3.And(0 <= f, f < s.n, pick(s.key, f) == k, oldest), f == NONE))
        run = z3.And(run, j < max_pages, f != NONE)
        hit.append(run)
        found.append(f)
    return z3.And(defs), hit, found


def lookup(s: ManagerSym, a: ReqArgs, tag: str, max_tokens: Callable[[ReqArgs], z3.ArithRef] | None = None) -> MStep:
    """`spec.manager.lookup(req)`: the longest prefix run of cached pages, capped at num_tokens - 1.

    ``max_tokens`` replaces that cap (for mutants only).
    """
    cap = a.length - 1 if max_tokens is None else max_tokens(a)
    defs, hit, found = lookup_pages(s, a, tag, cap / PAGE_SIZE)
    pages = tuple(z3.If(h, f, NONE) for h, f in zip(hit, found))
    return MStep(args_domain(a), s, (PAGE_SIZE * count(hit),) + pages, defs)


@dataclass(frozen=True)
class Faults:
    """One-line breakages of the encoding, for its mutants only (none by default):
    ``keyed_pages``: `cache_pages` keys only that many leading pages (a cut encoding);
    ``key_shift``: it keys the page that many places after the right one (the neighbour);
    ``content_shift``: the allocation writes each completed page's content to the page that
    many places after it."""

    keyed_pages: int = MAX_PAGES
    key_shift: int = 0
    content_shift: int = 0


NO_FAULTS = Faults()


def _neighbour(pages: list[z3.ExprRef], j: int, shift: int) -> z3.ExprRef:
    """``pages[j + shift]``, or the null page past the list."""
    return pages[j + shift] if j + shift < len(pages) else z3.IntVal(0)


def cache_pages_step(s: ManagerSym, a: ReqArgs, num_tokens: z3.ArithRef, when: z3.BoolRef, tag: str,
                     defs: list[z3.BoolRef], faults: Faults = NO_FAULTS) -> ManagerSym:
    """`spec.manager.cache_pages(req, num_tokens)` for r0 when ``when`` (no precondition check):
    keys only, the ghost ``content`` is the allocation's."""
    full = num_tokens / PAGE_SIZE
    cur = s
    for j in range(min(MAX_PAGES, faults.keyed_pages)):
        cur = freeze(cur, f"{tag}.c{j}", defs)
        page = _neighbour(s.pages[0], j, faults.key_shift)
        do = z3.And(when, s.ncached[0] <= j, j < full, page != 0, pick(cur.key, page) == NONE)
        cur = replace(cur, key=set_page(cur.key, page, code(a, j), do),
                      stamp=set_page(cur.stamp, page, cur.clock, do), clock=z3.If(do, cur.clock + 1, cur.clock))
    ncached = z3.If(z3.And(when, full > s.ncached[0]), full, s.ncached[0])
    return replace(cur, ncached=[ncached] + cur.ncached[1:])


def cache_pages(s: ManagerSym, a: ReqArgs, tag: str, faults: Faults = NO_FAULTS) -> MStep:
    """`spec.manager.cache_pages(req, num_tokens=num_new)`; pre: an entry, num_tokens fits, and
    (engine contract) only tokens r0's allocations computed."""
    nt = a.num_new
    pre = z3.And(args_domain(a), s.has[0], 0 <= nt, nt <= a.length, nt / PAGE_SIZE <= s.npages[0])
    defs: list[z3.BoolRef] = []
    post = cache_pages_step(s, a, nt, z3.BoolVal(True), tag, defs, faults)
    return MStep(pre, post, (), z3.And(defs), z3.And(nt <= s.ndone[0], grows_from(s, a)))


def free_request(s: ManagerSym, a: ReqArgs, tag: str, release: bool = True) -> MStep:
    """`spec.manager.free_request(r0)`: free its pages in reverse order, forget the entry.

    ``release=False`` forgets the entry without freeing its pages (for mutants only).
    """
    cur = s
    for j in reversed(range(MAX_PAGES)):
        page = s.pages[0][j]
        cur = free_page(cur, page, z3.And(release, s.has[0], j < s.npages[0], page != 0))
    zero = z3.IntVal(0)
    gone = replace(cur, has=[z3.BoolVal(False)] + cur.has[1:], npages=[zero] + cur.npages[1:],
                   pages=[[zero] * MAX_PAGES] + cur.pages[1:], ncached=[zero] + cur.ncached[1:],
                   toks=[[zero] * MAX_TOKENS] + cur.toks[1:], ndone=[zero] + cur.ndone[1:])
    return MStep(args_domain(a), ite(s.has[0], gone, s))


def remove_skipped(s: ManagerSym, a: ReqArgs, tag: str) -> MStep:
    """`spec.manager.remove_skipped(r0, computed)`: the identity for a full-attention group."""
    return MStep(z3.And(args_domain(a), a.computed >= 0), s)


def reset_prefix_cache(s: ManagerSym, a: ReqArgs, tag: str) -> MStep:
    """`spec.manager.reset_prefix_cache()`: when every usable page is free, forget every key (the
    pages keep what they hold: ``content`` is unchanged)."""
    done = s.flen == s.n - 1
    none = [z3.IntVal(NONE)] * s.n
    return MStep(args_domain(a), ite(done, replace(s, key=none), s), (done,))


def allocate_slots(s: ManagerSym, a: ReqArgs, tag: str, atomic: bool = True, faults: Faults = NO_FAULTS) -> MStep:
    """`spec.manager.allocate_slots(req, num_new, 2 * num_hits, hits, delay_cache_pages=delay)`.

    Result: (succeeded, new page per position or NONE). Failure returns ``s`` itself
    (``atomic=False``, for mutants only: the hits stay touched). The pages the step completes
    (indices from ``computed / 2`` below ``min(end, length) / 2``) get their content from
    r0's tokens, as `spec.manager._mark_computed` writes it.
    """
    nh, computed = a.num_hits, a.computed + PAGE_SIZE * a.num_hits
    hits_ok = [z3.Implies(j < nh, z3.And(1 <= a.hits[j], a.hits[j] < s.n, PAGE_SIZE * (j + 1) <= a.length,
                                         pick(s.key, a.hits[j]) == code(a, j))) for j in range(MAX_HITS)]
    pre = z3.And(args_domain(a), a.num_new >= 1, a.computed >= 0, 0 <= nh, nh <= MAX_HITS,
                 computed + a.num_new <= MAX_TOKENS, z3.Implies(nh > 0, z3.Not(s.has[0])), *hits_ok)
    cur = s
    defs: list[z3.BoolRef] = []
    for j in range(MAX_HITS):
        cur = touch(cur, a.hits[j], j < nh)
    cur = freeze(cur, f"{tag}.touched", defs)
    held = z3.If(s.has[0], s.npages[0], nh)
    slots = computed + a.num_new
    need = z3.If((slots + PAGE_SIZE - 1) / PAGE_SIZE > held, (slots + PAGE_SIZE - 1) / PAGE_SIZE - held, 0)
    ok = need <= cur.flen
    touched = cur
    cur, got = allocate(cur, need)
    cur = freeze(cur, f"{tag}.allocated", defs)
    base = [z3.If(s.has[0], s.pages[0][j], a.hits[j] if j < MAX_HITS else z3.IntVal(0)) for j in range(MAX_PAGES)]
    base = [z3.If(j < held, b, 0) for j, b in enumerate(base)]
    pages = [base[j] for j in range(MAX_PAGES)]
    for i in range(MAX_PAGES):
        for j in range(MAX_PAGES):
            pages[j] = z3.If(z3.And(i < need, held + i == j), got[i], pages[j])
    filled = z3.If(slots < a.length, slots, a.length)
    content = cur.content
    for j in range(MAX_PAGES):
        completes = z3.And(j >= computed / PAGE_SIZE, j < filled / PAGE_SIZE)
        content = set_page(content, _neighbour(pages, j, faults.content_shift), code(a, j), completes)
    ndone = z3.If(z3.And(s.has[0], s.ndone[0] > filled), s.ndone[0], filled)
    entry = replace(cur, has=[z3.BoolVal(True)] + cur.has[1:], npages=[held + need] + cur.npages[1:],
                    pages=[pages] + cur.pages[1:], content=content,
                    ncached=[z3.If(s.has[0], s.ncached[0], nh)] + cur.ncached[1:],
                    toks=[list(a.tokens)] + cur.toks[1:], ndone=[ndone] + cur.ndone[1:])
    entry = freeze(entry, f"{tag}.filled", defs)
    done = cache_pages_step(entry, a, filled, z3.Not(a.delay), tag, defs, faults)
    new_pages = tuple(z3.If(ok, g, NONE) for g in got)
    return MStep(pre, ite(ok, done, s if atomic else touched), (ok,) + new_pages, z3.And(defs),
                 z3.And(grows_from(s, a), computed_by_allocations(s, a)))


def fail_key_computation(s: ManagerSym, a: ReqArgs, tag: str, keys_first: bool = True) -> MStep:
    """`spec.manager.fail_key_computation(req, "allocate_slots")`: an otherwise valid
    allocate_slots call whose keys cannot be computed is rejected, every field unchanged.

    Result: (succeeded = False, whether the call would have handed out a page). ``keys_first=False``
    (for mutants only) is eSurge's order: the keys are computed by the caching step, after the
    allocation, so the call raises with its pages (and touched hits) kept.
    """
    uncached = allocate_slots(s, replace(a, delay=z3.BoolVal(True)), tag)
    would_allocate = z3.And(uncached.result[0], uncached.result[1] != NONE)
    post = s if keys_first else uncached.post
    return MStep(uncached.pre, post, (z3.BoolVal(False), would_allocate), uncached.defs, uncached.contract)


def ite(cond: z3.BoolRef, a: ManagerSym, b: ManagerSym) -> ManagerSym:
    """Field-wise ``If(cond, a, b)``."""
    def choose(x: Any, y: Any) -> Any:
        if isinstance(x, list):
            return [choose(u, v) for u, v in zip(x, y)]
        return x if x is y else z3.If(cond, x, y)
    return ManagerSym(a.n, *(choose(getattr(a, f), getattr(b, f)) for f in
                             ("ref", "key", "pos", "stamp", "content", "flen", "clock", "has", "npages", "pages",
                              "ncached", "toks", "ndone")))


TRANSITIONS: dict[str, StepFn] = {
    "manager.lookup": lookup, "manager.allocate_slots": allocate_slots, "manager.free_request": free_request,
    "manager.remove_skipped": remove_skipped, "manager.cache_pages": cache_pages,
    "manager.reset_prefix_cache": reset_prefix_cache, "manager.fail_key_computation": fail_key_computation,
}


# --- invariants ----------------------------------------------------------------------------

def universe(s: ManagerSym) -> z3.BoolRef:
    """The encoding's well-formedness: page lists in range and zero-padded, counts in range, stamps."""
    facts = []
    for r in range(REQUESTS):
        facts += [0 <= s.npages[r], s.npages[r] <= MAX_PAGES, 0 <= s.ncached[r], s.ncached[r] <= s.npages[r],
                  z3.Implies(z3.Not(s.has[r]), z3.And(s.npages[r] == 0, s.ncached[r] == 0))]
        facts += [z3.If(j < s.npages[r], z3.And(1 <= q, q < s.n), q == 0) for j, q in enumerate(s.pages[r])]
        facts += [0 <= s.ndone[r], z3.Implies(z3.Not(s.has[r]), s.ndone[r] == 0)]
    for p in range(s.n):
        facts.append(z3.Implies(s.key[p] != NONE, z3.And(0 <= s.stamp[p], s.stamp[p] < s.clock)))
        facts += [z3.Implies(z3.And(s.key[p] != NONE, s.key[p] == s.key[q]), s.stamp[p] != s.stamp[q])
                  for q in range(p)]
    return z3.And(facts)


def manager_invariants(s: ManagerSym) -> dict[str, Conjuncts]:
    """INV-REF-COUNT and INV-HIT-SAFE (state form) over ``s``, as named conjuncts. INV-HIT-SAFE:
    every keyed page holds its key's content (``keyed-p``), with the ghost facts its induction
    needs: a request's computed tokens fit its pages (``done-fits-r``), each page they fill holds
    their content (``held-r-j``), and a page past them is unkeyed and its holder's alone
    (``private-r-j``: no other request can have been handed it)."""
    holders = [z3.And(j < s.npages[r], q == p) for p in range(s.n) for r in range(REQUESTS)
               for j, q in enumerate(s.pages[r])]
    per = len(holders) // s.n
    safe = [(f"keyed-{p}", z3.Implies(s.key[p] != NONE, s.content[p] == s.key[p])) for p in range(s.n)]
    for r in range(REQUESTS):
        safe.append((f"done-fits-{r}", s.ndone[r] <= PAGE_SIZE * s.npages[r]))
        for j, q in enumerate(s.pages[r]):
            filled = z3.And(s.has[r], PAGE_SIZE * (j + 1) <= s.ndone[r])
            past = z3.And(s.has[r], j < s.npages[r], PAGE_SIZE * (j + 1) > s.ndone[r])
            safe += [(f"held-{r}-{j}", z3.Implies(filled, pick(s.content, q) == code_of(s.toks[r], j))),
                     (f"private-{r}-{j}", z3.Implies(past, z3.And(pick(s.key, q) == NONE, pick(s.ref, q) == 1)))]
    return {
        "INV-REF-COUNT": [(f"ref-{p}", s.ref[p] == count(holders[p * per:(p + 1) * per])) for p in range(1, s.n)],
        "INV-HIT-SAFE": safe,
    }


def all_invariants(s: ManagerSym) -> z3.BoolRef:
    """Every invariant of ``s`` (manager and pool) and the universe: the induction hypothesis."""
    conj = [c for inv in (manager_invariants(s), pool_invariants(s)) for cs in inv.values() for _, c in cs]
    return z3.And(universe(s), *conj)


def lookup_goals(invariant: str, s: ManagerSym, a: ReqArgs, step: MStep) -> Conjuncts:
    """INV-HIT-SAFE / INV-HIT-SHAPE of a lookup's result."""
    tokens, pages = step.result[0], step.result[1:]
    if invariant == "INV-HIT-SAFE":
        return [(f"page-{j}-content", z3.Implies(q != NONE, pick(s.content, q) == code(a, j)))
                for j, q in enumerate(pages)]
    goals = [("at-most-num-tokens-minus-1", z3.And(0 <= tokens, tokens <= a.length - 1)),
             ("page-aligned", tokens == PAGE_SIZE * count(q != NONE for q in pages)),
             ("prefix", z3.And([z3.Implies(pages[j] != NONE, pages[j - 1] != NONE) for j in range(1, len(pages))]))]
    goals += [(f"page-{j}-real", z3.Implies(q != NONE, z3.And(1 <= q, q < s.n))) for j, q in enumerate(pages)]
    goals += [(f"distinct-{i}-{j}", z3.Implies(pages[i] != NONE, pages[i] != pages[j]))
              for j in range(len(pages)) for i in range(j)]
    return goals


def goals(transition: str, invariant: str, s: ManagerSym, a: ReqArgs, step: MStep) -> Conjuncts:
    """The conjuncts of ``invariant`` after the transition."""
    if transition == "manager.lookup":
        return lookup_goals(invariant, s, a, step)
    if invariant == "INV-ATOMIC":
        return [("failure-leaves-state", z3.Implies(z3.Not(step.result[0]), states_equal(step.post, s)))]
    table = {**manager_invariants(step.post), **pool_invariants(step.post)}
    return [(f"{invariant}[{name}]", c) for name, c in table[invariant]]


PAIRS: dict[str, tuple[str, ...]] = {
    "manager.lookup": ("INV-HIT-SAFE", "INV-HIT-SHAPE"),
    "manager.allocate_slots": ("INV-REF-COUNT", "INV-HIT-SAFE", "INV-ATOMIC") + POOL_GOALS,
    "manager.fail_key_computation": ("INV-ATOMIC",),
    **{t: ("INV-REF-COUNT", "INV-HIT-SAFE") + POOL_GOALS for t in
       ("manager.free_request", "manager.remove_skipped", "manager.cache_pages", "manager.reset_prefix_cache")},
}


def obligation(transition: str, invariant: str, fn: StepFn, mode: Mode) -> Obligation:
    """Inv(s) ∧ Pre ∧ Trans ⇒ invariant(s′) (or of the lookup result) for N = mode.size."""
    s, a = manager_vars("s", mode.size or 0), req_args("a")
    step = fn(s, a, "t")
    return Obligation(z3.And(all_invariants(s), step.pre, step.contract, step.defs),
                      goals(transition, invariant, s, a, step), lambda model: explain(model, transition, s, a, step))


def render(model: z3.ModelRef, s: ManagerSym) -> str:
    """A symbolic manager state as the values a model gives it."""
    vals = lambda xs: "[" + ", ".join(show(model, x) for x in xs) + "]"
    reqs = "; ".join(f"r{r}: has={model.eval(s.has[r], model_completion=True)} pages={vals(s.pages[r])} "
                     f"npages={show(model, s.npages[r])} num_cached={show(model, s.ncached[r])}"
                     for r in range(REQUESTS))
    return (f"ref={vals(s.ref)} free_pos={vals(s.pos)} flen={show(model, s.flen)}\n"
            f"    key={vals(s.key)} content={vals(s.content)}\n    {reqs}")


def explain(model: z3.ModelRef, transition: str, s: ManagerSym, a: ReqArgs, step: MStep) -> str:
    """Pre-state, arguments, post-state and result of a counterexample, readably."""
    args = (f"tokens={[as_int(model, x) for x in a.tokens][:max(0, as_int(model, a.length))]} "
            f"computed={show(model, a.computed)} num_new/num_tokens={show(model, a.num_new)} "
            f"hits={[show(model, h) for h in a.hits][:max(0, min(MAX_HITS, as_int(model, a.num_hits)))]} "
            f"delay={model.eval(a.delay, model_completion=True)}")
    result = ", ".join(show(model, r) for r in step.result)
    return (f"  {transition} counterexample (N={s.n})\n  pre : {render(model, s)}\n  args: {args}\n"
            f"  post: {render(model, step.post)}\n  result: ({result})")


def theorems(transitions: dict[str, StepFn] | None = None) -> list[Theorem]:
    """Every registered (transition, invariant) pair, bounded at N = 3..5."""
    table = {**TRANSITIONS, **(transitions or {})}
    out = []
    for name, invs in PAIRS.items():
        for inv in invs:
            build = lambda mode, name=name, inv=inv, fn=table[name]: obligation(name, inv, fn, mode)
            out.append(Theorem(name, inv, True, build, IDEAL_HASH if inv == "INV-HIT-SAFE" else "", SCOPE))
    return out


def checks() -> list[Check]:
    """Registry provider: the manager theorems."""
    return [t.check() for t in theorems()]


# --- spec mutants ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ManagerMutant:
    """A broken manager relation for one transition and the invariant it is meant to break."""

    name: str
    transition: str
    invariant: str
    step: StepFn
    description: str

    def detect(self) -> list[str]:
        """Names of this transition's theorems that fail against the mutant relation."""
        return failed_theorems([t for t in theorems({self.transition: self.step})
                                if t.transition == self.transition])

    def mutant(self) -> Mutant:
        return Mutant(f"spec:{self.name}", "spec", self.invariant, self.description, self.detect)


CATALOGUE = (
    ManagerMutant("manager-lookup-cap-off-by-one", "manager.lookup", "INV-HIT-SHAPE",
                  lambda s, a, tag: lookup(s, a, tag, max_tokens=lambda r: r.length),
                  "lookup caps the hit at num_tokens instead of num_tokens - 1"),
    ManagerMutant("manager-allocate-keeps-hits-on-failure", "manager.allocate_slots", "INV-ATOMIC",
                  lambda s, a, tag: allocate_slots(s, a, tag, atomic=False),
                  "a failed allocate_slots keeps the references it took on the hit pages"),
    ManagerMutant("manager-free-request-without-decrement", "manager.free_request", "INV-REF-COUNT",
                  lambda s, a, tag: free_request(s, a, tag, release=False),
                  "free_request forgets the entry without freeing its pages"),
    ManagerMutant("manager-cache-keys-neighbour-page", "manager.cache_pages", "INV-HIT-SAFE",
                  lambda s, a, tag: cache_pages(s, a, tag, Faults(key_shift=1)),
                  "cache_pages gives page j's key to the page after it"),
    ManagerMutant("manager-allocate-writes-neighbour-content", "manager.allocate_slots", "INV-HIT-SAFE",
                  lambda s, a, tag: allocate_slots(s, a, tag, faults=Faults(content_shift=1)),
                  "the allocation writes each completed page's content (from the tokens) into the page after it"),
    ManagerMutant("manager-keys-computed-after-allocation", "manager.fail_key_computation", "INV-ATOMIC",
                  lambda s, a, tag: fail_key_computation(s, a, tag, keys_first=False),
                  "keys are computed while caching, after the allocation: a failing key computation "
                  "raises with the new pages kept"),
)


def mutants() -> list[Mutant]:
    """Registry provider: the manager spec mutants."""
    return [m.mutant() for m in CATALOGUE]
