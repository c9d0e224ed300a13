"""Encoding-equals-spec checks in `verikv prove`: the Z3 pool encoding is the Python spec.

A theorem about the encoding says nothing about the spec unless the encoding *is* the spec.
For every reachable spec state of a small pool (breadth-first from `init` over the spec's own
transitions, both free orders) and a fixed set of arguments, valid and invalid, each pool
transition's relation is instantiated on the concrete state and checked: the encoded
precondition is satisfiable exactly when the Python precondition holds, and then every
successor (and result) the relation admits equals the Python one (its negation is unsat).
Both encodings are checked: bounded (``Mode(N)``, quantifiers unrolled) and unbounded
(``Mode(None)``: symbolic N with quantifiers, the encoding of the unbounded theorems), the
latter for the transitions where Z3 decides the instantiated query (`UNBOUNDED_TRANSITIONS`).
Whole calls are used (the relation unrolled over every element of the argument list).

The helpers are shared with tests/test_z3_encoding.py, which draws random states and
arguments with Hypothesis on top of this exhaustive small-bound run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import z3

from verikv.proofs.runner.registry import Check, Outcome
from verikv.proofs.z3 import pool as z3_pool
from verikv.proofs.z3.common import NONE, Mode
from verikv.spec import pool as spec_pool

MAX_PAGES = 3
STATE_DEPTH = 2
"""States: every state reachable from `init(N)`, N = 1..MAX_PAGES, in STATE_DEPTH transitions
drawn from `_moves` (small arguments). Measured: ~30-80 ms per call, so the sets are kept
small enough for `verikv prove` (CPU budgets: docs/ci.md)."""
KEYS = (0, 1)


class KeyMap:
    """Dense ints for the spec's keys (bounded mode's key domain is 0..N-1)."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}

    def __call__(self, key: Any) -> int:
        return NONE if key is None else self.ids.setdefault(key, len(self.ids))


def pins(sym: z3_pool.PoolSym, s: spec_pool.PoolState, keys: KeyMap, stamps: bool = True) -> list[z3.BoolRef]:
    """Constraints saying that ``sym`` is ``s`` on every index a state of its size can read.

    Stamps are pinned to each page's index in its key's entry, and the clock past all of
    them, when ``stamps`` is set (the ghost order the abstraction gives a concrete state).
    """
    n = s.num_pages
    order = {p: i for _, ids in s.cached for i, p in enumerate(ids)} if stamps else {}
    out = [sym.n == n, sym.flen == len(s.free), sym.unhashed_first == (s.free_order == "unhashed-first")]
    out += [sym.seq[i] == p for i, p in enumerate(s.free)]
    if stamps:
        out.append(sym.clock == n)
    for p in range(n):
        out += [sym.ref[p] == s.ref[p], sym.key[p] == keys(s.key_of[p]),
                sym.pos[p] == (s.free.index(p) if p in s.free else NONE)]
        if p in order:
            out.append(sym.stamp[p] == order[p])
    members = {(keys(k), p) for k, ids in s.cached for p in ids}
    out += [sym.inc[k][p] == ((k, p) in members) for k in range(n) for p in range(n)]
    return out


def same_abstract_state(sym: z3_pool.PoolSym, s: spec_pool.PoolState, keys: KeyMap) -> z3.BoolRef:
    """``sym`` abstracts to ``s``: every pin except stamps, which only need the same order per key."""
    order = [sym.stamp[a] < sym.stamp[b] for _, ids in s.cached for i, a in enumerate(ids) for b in ids[i + 1:]]
    return z3.And(pins(sym, s, keys, stamps=False) + order)


SetArgs = Callable[[z3_pool.PoolArgs, KeyMap], list[z3.BoolRef]]
Run = Callable[[], tuple[spec_pool.PoolState, Any]]
ExpectedResult = Callable[[Any, KeyMap], list[Any]]


def disagreement(s: spec_pool.PoolState, transition: str, length: int, set_args: SetArgs, run: Run,
                 expected_result: ExpectedResult, mode: Mode | None = None) -> tuple[str, str] | None:
    """Instantiate ``transition`` on ``s`` (page list of ``length``) and compare it with ``run``,
    the Python transition returning (successor, result); None when they agree, else
    ``("failed" | "unknown", why)``. ``mode`` defaults to the bounded encoding at ``s``'s size."""
    keys = KeyMap()
    mode = mode or Mode(s.num_pages)
    sym, args = z3_pool.pool_vars("s", mode), z3_pool.pool_args("a", max(length, 1))
    step = z3_pool.TRANSITIONS[transition](sym, args, mode, "t")
    solver = z3.Solver()
    solver.set("timeout", 20_000)
    solver.add(*pins(sym, s, keys), *set_args(args, keys), args.head_slot == 0, step.pre, step.defs)
    try:
        outcome = run()
    except spec_pool.PreconditionError:
        verdict = solver.check()
        why = f"{transition}: encoded precondition {verdict} where the spec's fails"
        return None if verdict == z3.unsat else (_status(verdict), why)
    verdict = solver.check()
    if verdict != z3.sat:
        return _status(verdict), f"{transition}: encoded precondition {verdict} where the spec's holds"
    post, result = outcome
    wanted = expected_result(result, keys)
    solver.add(z3.Or(z3.Not(same_abstract_state(step.post, post, keys)),
                     *[r != w for r, w in zip(step.result, wanted)]))
    verdict = solver.check()
    if verdict == z3.unsat:
        return None
    if verdict == z3.unknown:
        return "unknown", f"{transition}: uniqueness of the successor unknown ({solver.reason_unknown()})"
    return "failed", f"{transition}: the relation admits a successor the spec does not produce:\n{solver.model()}"


def _status(verdict: z3.CheckSatResult) -> str:
    return "unknown" if verdict == z3.unknown else "failed"


def set_bounds(args: z3_pool.PoolArgs, bounds: tuple[int, int] | None) -> list[z3.BoolRef]:
    if bounds is None:
        return [z3.Not(args.has_bounds)]
    return [args.has_bounds, args.lo == bounds[0], args.hi == bounds[1]]


def set_pages(args: z3_pool.PoolArgs, pages: tuple[int, ...]) -> list[z3.BoolRef]:
    return [args.m == len(pages)] + [a == p for a, p in zip(args.pages, pages)]


# ---- one call per transition (shared with the Hypothesis tests) ------------------------------

Call = tuple[str, int, SetArgs, Run, ExpectedResult]


def allocate_call(s: spec_pool.PoolState, n: int, bounds: tuple[int, int] | None) -> Call:
    return ("pool.allocate", n, lambda a, k: [a.m == n] + set_bounds(a, bounds),
            lambda: spec_pool.allocate(s, n, bounds),
            lambda chosen, k: list(chosen) + [NONE] * (max(n, 1) - len(chosen)))


def touch_call(s: spec_pool.PoolState, pages: tuple[int, ...]) -> Call:
    return ("pool.touch", len(pages), lambda a, k: set_pages(a, pages), lambda: (spec_pool.touch(s, pages), None),
            lambda r, k: [])


def free_call(s: spec_pool.PoolState, pages: tuple[int, ...]) -> Call:
    return ("pool.free", len(pages), lambda a, k: set_pages(a, pages), lambda: (spec_pool.free(s, pages), None),
            lambda r, k: [])


def cache_call(s: spec_pool.PoolState, page: int, key: int) -> Call:
    return ("pool.cache", 1, lambda a, k: [a.pages[0] == page, a.key == k(key)],
            lambda: (spec_pool.cache(s, page, key), None), lambda r, k: [])


def reset_call(s: spec_pool.PoolState) -> Call:
    return ("pool.reset_prefix_cache", 0, lambda a, k: [], lambda: spec_pool.reset_prefix_cache(s),
            lambda done, k: [z3.BoolVal(done)])


def lookup_call(s: spec_pool.PoolState, key: int, bounds: tuple[int, int] | None) -> Call:
    return ("pool.lookup", 0, lambda a, k: [a.key == k(key)] + set_bounds(a, bounds),
            lambda: (s, spec_pool.lookup(s, key, bounds)), lambda r, k: [NONE if r is None else r])


def init_call(n: int, order: spec_pool.FreeOrder) -> Call:
    return ("pool.init", 0, lambda a, k: [], lambda: (spec_pool.init(n, order), None), lambda r, k: [])


# ---- the exhaustive small-bound run -----------------------------------------------------------

def _page_lists(s: spec_pool.PoolState) -> Iterator[tuple[int, ...]]:
    """Empty, every single id in -1..N (out of range included: bad calls), a duplicate, a pair."""
    yield ()
    yield from ((p,) for p in range(-1, s.num_pages + 1))
    yield (1, 1)
    yield (1, 2)


def _bounds(s: spec_pool.PoolState) -> tuple[tuple[int, int] | None, ...]:
    """No bounds, the whole pool, and an empty or out-of-range range (a bad call)."""
    return (None, (1, s.num_pages), (s.num_pages, s.num_pages + 1))


def _moves(s: spec_pool.PoolState) -> Iterator[spec_pool.PoolState]:
    """Successors of ``s`` under small valid calls (to enumerate reachable states)."""
    held = [p for p in range(1, s.num_pages) if s.ref[p] > 0]
    for call in [allocate_call(s, n, None) for n in (1, 2)] + [free_call(s, (p,)) for p in held[-1:]] + [
            touch_call(s, (1,)), cache_call(s, 1, 0), cache_call(s, s.num_pages - 1, 1), reset_call(s)]:
        try:
            yield call[3]()[0]
        except spec_pool.PreconditionError:
            continue


def reachable_states() -> list[spec_pool.PoolState]:
    """Every state within `STATE_DEPTH` small transitions of an initial pool, in a fixed order."""
    found: dict[spec_pool.PoolState, None] = {}
    for n in range(1, MAX_PAGES + 1):
        for order in ("esurge", "unhashed-first"):
            level = [spec_pool.init(n, order)]
            for _ in range(STATE_DEPTH + 1):
                fresh = [s for s in level if s not in found]
                found.update(dict.fromkeys(fresh))
                level = [t for s in fresh for t in _moves(s)]
    return list(found)


def calls(transition: str, s: spec_pool.PoolState) -> Iterator[Call]:
    """The argument set of ``transition`` for state ``s``."""
    if transition == "pool.allocate":
        yield from (allocate_call(s, n, b) for n in range(3) for b in _bounds(s))
    elif transition == "pool.touch":
        yield from (touch_call(s, pages) for pages in _page_lists(s))
    elif transition == "pool.free":
        yield from (free_call(s, pages) for pages in _page_lists(s))
    elif transition == "pool.cache":
        yield from (cache_call(s, p, 0) for p in range(-1, s.num_pages + 1))
        yield cache_call(s, 1, 1)
    elif transition == "pool.reset_prefix_cache":
        yield reset_call(s)
    elif transition == "pool.lookup":
        yield from (lookup_call(s, k, b) for k in KEYS for b in _bounds(s))


TRANSITIONS = ("pool.allocate", "pool.touch", "pool.free", "pool.cache", "pool.reset_prefix_cache", "pool.lookup")
UNBOUNDED_TRANSITIONS = ("pool.free", "pool.cache", "pool.reset_prefix_cache", "pool.lookup")
"""The unbounded encodings of allocate and touch are left out: instantiated on a concrete state,
Z3 answers "unknown" (20 s) on the uniqueness query (quantifiers over the untouched indices);
their bounded encodings are checked here and, at random states, in tests/test_z3_encoding.py."""


def agrees_everywhere(transition: str, unbounded: bool) -> Outcome:
    """Run every call of ``transition`` on every reachable state; the first disagreement fails."""
    states = reachable_states()
    total = 0
    for s in states:
        for name, length, set_args, run, expected in calls(transition, s):
            total += 1
            found = disagreement(s, name, length, set_args, run, expected, Mode(None) if unbounded else None)
            if found is not None:
                return Outcome(found[0], f"on {s}: {found[1]}")  # type: ignore[arg-type]
    return Outcome("passed", f"{total} calls on {len(states)} reachable states agree")


def init_agrees(unbounded: bool) -> Outcome:
    for n in range(1, MAX_PAGES + 3):
        for order in ("esurge", "unhashed-first"):
            call = init_call(n, order)  # type: ignore[arg-type]
            found = disagreement(spec_pool.init(n, order), *call, Mode(None) if unbounded else None)  # type: ignore[arg-type]
            if found is not None:
                return Outcome(found[0], found[1])  # type: ignore[arg-type]
    return Outcome("passed", f"N=1..{MAX_PAGES + 2}, both free orders")


def checks() -> list[Check]:
    """One check per pool transition and encoding (bounded, unbounded)."""
    bound = f"N=1..{MAX_PAGES}, states within {STATE_DEPTH} steps of init, fixed argument set"
    out = []
    for unbounded in (False, True):
        label = "unbounded" if unbounded else "bounded"
        out += [Check(name=f"encoding:{t}:{label}", kind="encoding", invariant="ENCODING=SPEC", transition=t,
                      bound=bound, run=lambda t=t, u=unbounded: agrees_everywhere(t, u))  # type: ignore[misc]
                for t in (UNBOUNDED_TRANSITIONS if unbounded else TRANSITIONS)]
        out.append(Check(name=f"encoding:pool.init:{label}", kind="encoding", invariant="ENCODING=SPEC",
                         transition="pool.init", bound=f"N=1..{MAX_PAGES + 2}",
                         run=lambda u=unbounded: init_agrees(u)))  # type: ignore[misc]
    return out
