"""The page pool of `verikv.spec.pool` as a Z3 transition system, and its theorems.

Symbolic state (one `PoolSym`): ``ref`` and ``key`` arrays over page ids (``NONE`` = no key),
the free list as a ghost sequence ``seq[0..flen)`` with its position map ``pos`` (``NONE`` for
pages not in the list), the cached map as a membership relation ``inc[key, page]`` plus an
insertion ``stamp`` per page and a ``clock`` (a key's page list is its members in stamp
order), and the free-order policy as a Bool (both policies are covered by every theorem).

Each transition is a function ``(state, args, mode, tag) -> Step``: its precondition, the
constraints defining its successor (fresh constants per internal step, so every quantifier
trigger is an uninterpreted term), the successor and its result. Transitions whose argument
is a list of page ids (or a count) take a symbolic length ``m <= L`` and unroll the spec's
loop over L elements, one fresh intermediate state per element, in the spec's order.

Theorems are stated per loop element (L = 1, ``m`` in 0..1, and for "unhashed-first" frees
any head slot): the spec processes its list one element at a time, so an invariant kept by
every element is kept by the whole call, by induction over the list. The encoding-equivalence
tests run the unrolled relation on whole calls against the Python spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, TypeAlias

import z3

from verikv.proofs.runner.registry import Check
from verikv.proofs.z3.common import NONE, Conjuncts, Mode, Obligation, Theorem, as_int, count, show

THEOREM_ELEMENTS = 1  # loop elements per theorem (see the module docstring)
LIST_TRANSITIONS = frozenset({"pool.allocate", "pool.touch", "pool.free"})


# An array over page ids or, while a transition is being built, a *view* (a Python function of an
# index; see `PoolSym`). z3 ships no type information, so to mypy z3.ArrayRef is Any anyway; a union
# with the view's Callable would make every `s.ref[p]` on a state known to hold arrays an error.
Array: TypeAlias = Any


@dataclass(frozen=True)
class PoolSym:
    """A symbolic `PoolState` (see the module docstring for the encoding of each field).

    While a transition is being built, ``seq``, ``pos``, ``ref``, ``key`` and ``stamp`` may be
    *views* (Python functions of an index) instead of arrays; `Frames.advance` turns them into
    fresh array constants defined pointwise, so no λ-term or ``Store`` ever sits under a trigger.
    ``inc`` is a nested array ``inc[key][page]``.
    """

    n: z3.ArithRef
    ref: Array
    key: Array
    seq: Array
    pos: Array
    flen: z3.ArithRef
    inc: z3.ArrayRef
    stamp: Array
    clock: z3.ArithRef
    unhashed_first: z3.BoolRef


_VIEWABLE = ("ref", "key", "seq", "pos", "stamp")


def at(array: Array, index: z3.ArithRef) -> z3.ExprRef:
    """``array[index]`` for an array or a view."""
    return array(index) if callable(array) else array[index]


def pool_vars(tag: str, mode: Mode) -> PoolSym:
    """Fresh constants for a whole pool state; ``tag`` keeps names apart."""
    ii = (z3.IntSort(), z3.IntSort())
    inc_sort = z3.ArraySort(z3.IntSort(), z3.ArraySort(z3.IntSort(), z3.BoolSort()))
    return PoolSym(mode.num_pages(f"{tag}.N"), z3.Array(f"{tag}.ref", *ii), z3.Array(f"{tag}.key", *ii),
                   z3.Array(f"{tag}.seq", *ii), z3.Array(f"{tag}.pos", *ii), z3.Int(f"{tag}.flen"),
                   z3.Const(f"{tag}.inc", inc_sort), z3.Array(f"{tag}.stamp", *ii), z3.Int(f"{tag}.clock"),
                   z3.Bool(f"{tag}.unhashed_first"))


def ite(cond: z3.BoolRef, a: PoolSym, b: PoolSym) -> PoolSym:
    """Field-wise ``If(cond, a, b)`` (views are combined index-wise)."""
    def pick(x: object, y: object) -> object:
        if x is y:
            return x
        if callable(x) or callable(y):
            return lambda i: z3.If(cond, at(x, i), at(y, i))
        return z3.If(cond, x, y)
    return PoolSym(*(pick(getattr(a, f.name), getattr(b, f.name)) for f in fields(PoolSym)))


@dataclass(frozen=True)
class Step:
    """One transition applied symbolically: ``pre`` (the spec's precondition), ``defs`` (what
    defines the successor and any witnesses), the successor ``post`` (fresh constants) and the
    ``result`` terms."""

    pre: z3.BoolRef
    defs: z3.BoolRef
    post: PoolSym
    result: tuple[z3.ExprRef, ...] = ()


class Frames:
    """Chains fresh intermediate states: each `advance` names the next state by fresh constants."""

    def __init__(self, tag: str, mode: Mode) -> None:
        self.defs: list[z3.BoolRef] = []
        self.tag, self.mode, self.count = tag, mode, 0

    def advance(self, new: PoolSym) -> PoolSym:
        """Fresh constants equal to ``new`` (views are defined pointwise by `Mode.define`)."""
        self.count += 1
        fresh = replace(pool_vars(f"{self.tag}.{self.count}", self.mode), n=new.n,
                        unhashed_first=new.unhashed_first)
        for f in fields(PoolSym):
            mine, theirs = getattr(fresh, f.name), getattr(new, f.name)
            if f.name in ("n", "unhashed_first"):
                continue
            self.defs.append(self.mode.define(mine, theirs) if callable(theirs) else mine == theirs)
        return fresh

    def step(self, pre: list[z3.BoolRef], new: PoolSym, result: tuple[z3.ExprRef, ...] = ()) -> Step:
        """The finished transition: the last state becomes its post-state."""
        post = self.advance(new)
        return Step(z3.And(pre), z3.And(self.defs), post, result)


# --- list surgery on the ghost sequence --------------------------------------------------

def remove_free(s: PoolSym, page: z3.ArithRef) -> PoolSym:
    """``page`` (which is free, at ``pos[page]``) leaves the free sequence; later ones shift left."""
    i = at(s.pos, page)
    return replace(s, seq=lambda x: z3.If(x < i, at(s.seq, x), at(s.seq, x + 1)),
                   pos=lambda q: z3.If(q == page, NONE, z3.If(at(s.pos, q) > i, at(s.pos, q) - 1, at(s.pos, q))),
                   flen=s.flen - 1)


def append_free(s: PoolSym, page: z3.ArithRef) -> PoolSym:
    """``page`` joins the tail of the free sequence."""
    return replace(s, seq=z3.Store(s.seq, s.flen, page), pos=z3.Store(s.pos, page, s.flen), flen=s.flen + 1)


def insert_free(s: PoolSym, at_index: z3.ArithRef, page: z3.ArithRef) -> PoolSym:
    """``page`` enters the free sequence at index ``at_index``; later ones shift right."""
    h = at_index
    return replace(s, seq=lambda x: z3.If(x < h, at(s.seq, x), z3.If(x == h, page, at(s.seq, x - 1))),
                   pos=lambda q: z3.If(q == page, h, z3.If(at(s.pos, q) >= h, at(s.pos, q) + 1, at(s.pos, q))),
                   flen=s.flen + 1)


def in_bounds(has: z3.BoolRef, lo: z3.ArithRef, hi: z3.ArithRef, page: z3.ArithRef) -> z3.BoolRef:
    """The page lies in the shard ``[lo, hi)``, or there is no shard."""
    return z3.Or(z3.Not(has), z3.And(lo <= page, page < hi))


def valid_bounds(s: PoolSym, has: z3.BoolRef, lo: z3.ArithRef, hi: z3.ArithRef) -> z3.BoolRef:
    """`spec.pool` accepts no shard, or a half-open range inside the pool."""
    return z3.Or(z3.Not(has), z3.And(0 <= lo, lo <= hi, hi <= s.n))


# --- transitions ------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolArgs:
    """Symbolic arguments of every pool transition (each transition reads what it needs).

    ``pages`` has a fixed length L (the unrolled loop); ``m <= L`` is the list's actual length
    (and the ``n`` of allocate). ``head_slot`` is where free's next unhashed zeroed page goes
    under "unhashed-first": 0 for a real call; a theorem about one loop element lets it be
    any index of the free list, which covers every element of every longer call.
    """

    pages: tuple[z3.ArithRef, ...]
    m: z3.ArithRef
    key: z3.ArithRef
    has_bounds: z3.BoolRef
    lo: z3.ArithRef
    hi: z3.ArithRef
    head_slot: z3.ArithRef


def pool_args(tag: str, length: int) -> PoolArgs:
    """Fresh symbolic arguments with a page list of ``length`` entries."""
    return PoolArgs(tuple(z3.Int(f"{tag}.a{j}") for j in range(length)), z3.Int(f"{tag}.m"),
                    z3.Int(f"{tag}.k"), z3.Bool(f"{tag}.has_bounds"), z3.Int(f"{tag}.lo"), z3.Int(f"{tag}.hi"),
                    z3.Int(f"{tag}.head_slot"))


def list_length_ok(a: PoolArgs) -> z3.BoolRef:
    """The list's length lies in 0..L."""
    return z3.And(0 <= a.m, a.m <= len(a.pages))


def evict(s: PoolSym, page: z3.ArithRef) -> PoolSym:
    """The page loses its key and leaves that key's cached entry (if it had one)."""
    k = at(s.key, page)
    return replace(s, key=z3.Store(s.key, page, NONE),
                   inc=z3.If(k == NONE, s.inc, z3.Store(s.inc, k, z3.Store(s.inc[k], page, False))))


def allocate(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.allocate(n=m, bounds)`: take the first in-bounds free page, m times.

    Witness ``i_j`` is the index of the first in-bounds page of the current free sequence.
    """
    frames = Frames(tag, mode)
    pre = [list_length_ok(a), valid_bounds(s, a.has_bounds, a.lo, a.hi)]
    cur, chosen = s, []
    for j in range(len(a.pages)):
        active = j < a.m
        c = cur

        def inb(p: z3.ArithRef) -> z3.BoolRef:
            return in_bounds(a.has_bounds, a.lo, a.hi, p)
        # (mode.exists/forall call these at once; c is bound per element all the same, and mypy
        # cannot infer a lambda with default arguments, python/mypy#12557: hence the ignores)
        pre.append(z3.Implies(active, mode.exists(f"{tag}.e{j}", 0, c.flen, lambda x, c=c: inb(c.seq[x]))))  # type: ignore[misc]
        i = z3.Int(f"{tag}.i{j}")
        frames.defs.append(z3.Implies(active, z3.And(
            0 <= i, i < c.flen, inb(c.seq[i]),
            mode.forall(f"{tag}.t{j}", 0, i, lambda t, c=c: z3.Not(inb(c.seq[t])), lambda t, c=c: c.seq[t]))))  # type: ignore[misc]
        page = c.seq[i]
        taken = replace(evict(remove_free(c, page), page), ref=z3.Store(c.ref, page, 1))
        cur = frames.advance(ite(active, taken, c)) if j < len(a.pages) - 1 else ite(active, taken, c)
        chosen.append(z3.If(active, page, NONE))
    return frames.step(pre, cur, tuple(chosen))


def touch(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.touch(pages)`: for each non-null page, leave the free list if ref was 0, ref += 1."""
    frames = Frames(tag, mode)
    pre = [list_length_ok(a)]
    cur = s
    for j, p in enumerate(a.pages):
        active = j < a.m
        pre.append(z3.Implies(active, z3.And(0 <= p, p < s.n)))
        revived = ite(cur.ref[p] == 0, remove_free(cur, p), cur)
        bumped = replace(revived, ref=z3.Store(cur.ref, p, cur.ref[p] + 1))
        nxt = ite(z3.And(active, p != 0), bumped, cur)
        cur = frames.advance(nxt) if j < len(a.pages) - 1 else nxt
    return frames.step(pre, cur)


def free(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.free(pages)`: ref -= 1 per occurrence; pages reaching 0 rejoin the free list.

    ``"esurge"``: every zeroed page joins the tail in order. ``"unhashed-first"``: zeroed pages
    without a key are inserted, in order, before the old head (``h`` is the next such slot).
    """
    frames = Frames(tag, mode)
    pre = [list_length_ok(a), 0 <= a.head_slot, a.head_slot <= s.flen]
    cur, h = s, a.head_slot
    for j, p in enumerate(a.pages):
        active = j < a.m
        pre.append(z3.Implies(active, z3.And(1 <= p, p < s.n, cur.ref[p] >= 1)))
        dec = replace(cur, ref=z3.Store(cur.ref, p, cur.ref[p] - 1))
        zeroed = cur.ref[p] == 1
        to_head = z3.And(zeroed, s.unhashed_first, s.key[p] == NONE)
        joined = ite(to_head, insert_free(dec, h, p), ite(zeroed, append_free(dec, p), dec))
        nxt = ite(active, joined, cur)
        cur = frames.advance(nxt) if j < len(a.pages) - 1 else nxt
        h = z3.If(z3.And(active, to_head), h + 1, h)
    return frames.step(pre, cur)


def cache(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.cache(page, key)`: the page (first of ``pages``) is registered under ``key``, newest."""
    page, k = a.pages[0], a.key
    pre = [1 <= page, page < s.n, s.key[page] == NONE, mode.key_domain(k)]
    post = replace(s, key=z3.Store(s.key, page, k), inc=z3.Store(s.inc, k, z3.Store(s.inc[k], page, True)),
                   stamp=z3.Store(s.stamp, page, s.clock), clock=s.clock + 1)
    return Frames(tag, mode).step(pre, post)


EMPTY_CACHE = z3.K(z3.IntSort(), z3.K(z3.IntSort(), z3.BoolVal(False)))


def reset_prefix_cache(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.reset_prefix_cache()`: when nothing is held (flen = N-1), forget every key."""
    done = s.flen == s.n - 1
    cleared = replace(s, key=z3.K(z3.IntSort(), z3.IntVal(NONE)), inc=EMPTY_CACHE)
    return Frames(tag, mode).step([], ite(done, cleared, s), (done,))


def lookup(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.lookup(key, bounds)`: the oldest (least stamp) in-bounds page under ``key``, or NONE."""
    k, r = a.key, z3.Int(f"{tag}.r")

    def hit(p: z3.ArithRef) -> z3.BoolRef:
        return z3.And(s.inc[k][p], in_bounds(a.has_bounds, a.lo, a.hi, p))
    found = z3.And(0 <= r, r < s.n, hit(r),
                   mode.forall(f"{tag}.q", 0, s.n, lambda p: z3.Implies(hit(p), s.stamp[r] <= s.stamp[p]),
                               lambda p: s.inc[k][p]))
    missed = z3.And(r == NONE, mode.forall(f"{tag}.q", 0, s.n, lambda p: z3.Not(hit(p)), lambda p: s.inc[k][p]))
    frames = Frames(tag, mode)
    frames.defs.append(z3.Or(found, missed))
    return frames.step([valid_bounds(s, a.has_bounds, a.lo, a.hi), mode.key_domain(k)], s, (r,))


def init(s: PoolSym, a: PoolArgs, mode: Mode, tag: str) -> Step:
    """`spec.pool.init(N)`: nothing held, no keys, free list 1, 2, ..., N-1 (``s`` only gives N and policy)."""
    post = replace(s, ref=z3.K(z3.IntSort(), z3.IntVal(0)), key=z3.K(z3.IntSort(), z3.IntVal(NONE)),
                   seq=lambda x: x + 1, pos=lambda p: z3.If(z3.And(1 <= p, p < s.n), p - 1, NONE),
                   flen=s.n - 1, inc=EMPTY_CACHE, stamp=z3.K(z3.IntSort(), z3.IntVal(0)), clock=z3.IntVal(0))
    return Frames(tag, mode).step([], post)


StepFn = Callable[[PoolSym, PoolArgs, Mode, str], Step]

TRANSITIONS: dict[str, StepFn] = {
    "pool.init": init, "pool.allocate": allocate, "pool.touch": touch, "pool.free": free,
    "pool.cache": cache, "pool.reset_prefix_cache": reset_prefix_cache, "pool.lookup": lookup,
}


# --- invariants -------------------------------------------------------------------------

def well_formed(s: PoolSym, mode: Mode) -> z3.BoolRef:
    """Not an invariant but the encoding's universe: N >= 1, and bounded keys lie in the key domain."""
    if not mode.bounded:
        return s.n >= 1
    return z3.And(s.n >= 1, mode.forall("wf.p", 0, s.n, lambda p: z3.Or(s.key[p] == NONE, mode.key_domain(s.key[p])),
                                        lambda p: s.key[p]))


def held(s: PoolSym, mode: Mode) -> z3.ArithRef:
    """Bounded mode only: how many non-null pages have ref > 0."""
    return count(z3.And(1 <= p, p < s.n, s.ref[p] > 0) for p in range(mode.size or 0))


def invariants(s: PoolSym, mode: Mode) -> dict[str, Conjuncts]:
    """The pool invariants over ``s``, each as named conjuncts (bounded-only ones when bounded)."""
    n, f = s.n, mode.forall
    free_at = lambda i: z3.And(0 <= i, i < s.flen)
    inv: dict[str, Conjuncts] = {
        "INV-NULL": [
            ("null-ref-zero", s.ref[0] == 0),
            ("null-no-key", s.key[0] == NONE),
            ("null-not-free", f("i", 0, s.flen, lambda i: s.seq[i] != 0, lambda i: s.seq[i])),
            ("null-uncached", mode.forall_keys("k", lambda k: z3.Not(s.inc[k][0]), lambda k: s.inc[k][0])),
        ],
        "INV-FREE-IFF-ZERO": [
            ("free-iff-zero", f("p", 1, n, lambda p: (s.pos[p] != NONE) == (s.ref[p] == 0), lambda p: s.ref[p])),
        ],
        "INV-FREE-DISTINCT": [
            ("length-nonneg", s.flen >= 0),
            ("entries-in-range", f("i", 0, s.flen, lambda i: z3.And(0 <= s.seq[i], s.seq[i] < n),
                                   lambda i: s.seq[i])),
            ("entries-distinct", f("i", 0, s.flen, lambda i: s.pos[s.seq[i]] == i, lambda i: s.seq[i])),
            ("position-map", f("p", 0, n, lambda p: z3.Or(s.pos[p] == NONE, z3.And(free_at(s.pos[p]),
                                                                                   s.seq[s.pos[p]] == p)),
                               lambda p: s.pos[p])),
        ],
        "INV-REF-NONNEG": [
            ("ref-nonneg", f("p", 0, n, lambda p: s.ref[p] >= 0, lambda p: s.ref[p])),
        ],
        "INV-KEY-BIJ": [
            ("keyed-is-cached", f("p", 0, n, lambda p: z3.Implies(s.key[p] != NONE, s.inc[s.key[p]][p]),
                                  lambda p: s.key[p])),
            ("cached-is-keyed", _cached_is_keyed(s, mode)),
        ],
    }
    if mode.bounded:
        inv["INV-FREE-DISTINCT"].append(("length-at-most-N", s.flen <= n))
        usable, used = n - 1, held(s, mode)
        usage = z3.If(usable <= 0, z3.RealVal(0), 1 - z3.ToReal(s.flen) / z3.ToReal(usable))
        inv["INV-CONSERVE"] = [("free-plus-held", s.flen + used == usable)]
        inv["INV-USAGE"] = [
            ("usage-is-held-fraction", usage == z3.If(usable <= 0, z3.RealVal(0), z3.ToReal(used) / z3.ToReal(usable))),
            ("idle-is-zero", z3.Implies(used == 0, usage == 0)),
        ]
    return inv


def _cached_is_keyed(s: PoolSym, mode: Mode) -> z3.BoolRef:
    """Every member of a cached entry is a page of the pool whose key is that entry's key."""
    if mode.size is not None:  # bounded
        return z3.And([z3.Implies(s.inc[k][p], s.key[p] == k) for k in range(mode.size) for p in range(mode.size)])
    k, p = z3.Ints("ck cp")
    return z3.ForAll([k, p], z3.Implies(s.inc[k][p], z3.And(0 <= p, p < s.n, s.key[p] == k, k != NONE)),
                     patterns=[s.inc[k][p]])


POOL_INVARIANTS = ("INV-NULL", "INV-FREE-IFF-ZERO", "INV-FREE-DISTINCT", "INV-REF-NONNEG", "INV-KEY-BIJ",
                   "INV-CONSERVE", "INV-USAGE")
COUNTING = frozenset({"INV-CONSERVE", "INV-USAGE"})  # counting facts: bounded mode only


def holds(s: PoolSym, mode: Mode) -> z3.BoolRef:
    """Every invariant of ``s`` in this mode, as one formula."""
    return z3.And([c for conj in invariants(s, mode).values() for _, c in conj])


def result_goals(transition: str, invariant: str, step: Step, a: PoolArgs, s: PoolSym) -> Conjuncts:
    """Facts about a transition's result that belong to an invariant (what it hands out)."""
    if transition == "pool.allocate" and invariant == "INV-NULL":
        return [(f"allocated-{j}-not-null", step.result[j] != 0) for j in range(len(a.pages))]
    if transition == "pool.lookup" and invariant == "INV-NULL":
        return [("hit-not-null", step.result[0] != 0)]
    if transition == "pool.lookup" and invariant == "INV-KEY-BIJ":
        r = step.result[0]
        return [("hit-has-key", z3.Implies(r != NONE, s.key[r] == a.key))]
    return []


# --- theorems ---------------------------------------------------------------------------

def obligation(transition: str, invariant: str, step_fn: StepFn, mode: Mode) -> Obligation:
    """Inv(s) ∧ Pre ∧ Trans ⇒ invariant(s′) (for ``pool.init``: Pre ∧ Init ⇒ invariant)."""
    s, a = pool_vars("s", mode), pool_args("a", THEOREM_ELEMENTS)
    step = step_fn(s, a, mode, "t")
    base = well_formed(s, mode) if transition == "pool.init" else z3.And(well_formed(s, mode), holds(s, mode))
    goals = [(f"{invariant}[{name}]", c) for name, c in invariants(step.post, mode)[invariant]]
    goals += result_goals(transition, invariant, step, a, s)
    return Obligation(z3.And(base, step.pre, step.defs), goals,
                      lambda model: explain(model, transition, s, a, step, mode), witness_hint=is_witness(s))


def is_witness(s: PoolSym, held_refs: int = 1) -> z3.BoolRef:
    """``s`` is a small concrete pool in which every pool transition's precondition can hold.

    N = 4; page 1 held (ref ``held_refs``), pages 2 and 3 free in that order, page 2 keyed by key 0
    (stamp 0). Used to find a model for the vacuity check without quantifier search.
    """
    def table(default: int, cells: dict[int, int]) -> z3.ArrayRef:
        arr = z3.K(z3.IntSort(), z3.IntVal(default))
        for i, v in cells.items():
            arr = z3.Store(arr, i, v)
        return arr
    return z3.And(s.n == 4, s.ref == table(0, {1: held_refs}), s.key == table(NONE, {2: 0}),
                  s.seq == table(0, {0: 2, 1: 3}), s.pos == table(NONE, {2: 0, 3: 1}), s.flen == 2,
                  s.stamp == table(0, {}), s.clock == 1,
                  s.inc == z3.Store(EMPTY_CACHE, 0, z3.Store(EMPTY_CACHE[0], 2, True)))


def theorems(transitions: dict[str, StepFn] | None = None) -> list[Theorem]:
    """Every (transition, invariant) theorem of the pool, unbounded and bounded."""
    table = TRANSITIONS if transitions is None else transitions
    out = []
    for name, fn in table.items():
        for inv in POOL_INVARIANTS:
            build = lambda mode, name=name, inv=inv, fn=fn: obligation(name, inv, fn, mode)
            scope = "per element" if name in LIST_TRANSITIONS else ""
            if inv not in COUNTING:
                out.append(Theorem(name, inv, False, build, scope=scope))
            out.append(Theorem(name, inv, True, build, scope=scope))
    return out


def checks() -> list[Check]:
    """Registry provider: the pool theorems."""
    return [t.check() for t in theorems()]


# --- counterexamples --------------------------------------------------------------------

def render(model: z3.ModelRef, s: PoolSym, keys: list[int], limit: int = 12) -> str:
    """A symbolic pool state as the concrete `PoolState` a model gives it (first ``limit`` pages)."""
    n = min(as_int(model, s.n), limit)
    flen = max(0, min(as_int(model, s.flen), limit))
    cached = {}
    for k in keys:
        members = [p for p in range(n) if z3.is_true(model.eval(s.inc[k][p], model_completion=True))]
        if members:
            cached[f"k{k}"] = sorted(members, key=lambda p: as_int(model, s.stamp[p]))
    policy = "unhashed-first" if z3.is_true(model.eval(s.unhashed_first, model_completion=True)) else "esurge"
    return (f"num_pages={as_int(model, s.n)} free_order={policy}\n"
            f"    free   = [{', '.join(show(model, s.seq[i]) for i in range(flen))}]\n"
            f"    ref    = [{', '.join(show(model, s.ref[p]) for p in range(n))}]\n"
            f"    key_of = [{', '.join(('k' + show(model, s.key[p])).replace('k-', '-') for p in range(n))}]\n"
            f"    cached = {cached}")


def explain(model: z3.ModelRef, transition: str, s: PoolSym, a: PoolArgs, step: Step, mode: Mode) -> str:
    """Pre-state, arguments, post-state and result of a counterexample, readably."""
    n = min(as_int(model, s.n), 12)
    keys = sorted({as_int(model, s.key[p]) for p in range(n)} | {as_int(model, step.post.key[p]) for p in range(n)}
                  | {as_int(model, a.key)} - {NONE})
    m = max(0, min(as_int(model, a.m), len(a.pages)))
    shard = z3.is_true(model.eval(a.has_bounds, model_completion=True))
    bounds = f"[{show(model, a.lo)}, {show(model, a.hi)})" if shard else "None"
    args = (f"pages/n: m={m} pages=[{', '.join(show(model, p) for p in a.pages[:m])}] key=k{show(model, a.key)} "
            f"bounds={bounds} head_slot={show(model, a.head_slot)}")
    result = ", ".join(show(model, r) for r in step.result)
    return (f"  {transition} counterexample ({mode.label})\n  pre : {render(model, s, keys)}\n  args: {args}\n"
            f"  post: {render(model, step.post, keys)}\n  result: ({result})")
