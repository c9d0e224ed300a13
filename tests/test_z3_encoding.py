"""The Z3 pool encoding is the Python spec: same preconditions, same (and only that) successor.

For random reachable spec states (built by running `verikv.spec.pool` transitions from
`init`) and random, sometimes invalid, arguments, the encoded relation of each transition is
instantiated on the concrete state (bounded mode with N = the state's size) and checked:
the encoded precondition is satisfiable exactly when the Python precondition holds, and then
every successor the relation admits equals the Python successor (its negation is unsat).
Whole calls are used (the relation unrolled over every element), not single elements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from verikv.proofs import z3_pool
from verikv.proofs.z3_common import NONE, Mode
from verikv.spec import pool as P

KEYS = st.integers(0, 3)


@st.composite
def states(draw: st.DrawFn) -> P.PoolState:
    """A reachable pool state: init, then a random run of valid transitions."""
    s = P.init(draw(st.integers(1, 6)), draw(st.sampled_from(["esurge", "unhashed-first"])))
    for _ in range(draw(st.integers(0, 12))):
        op = draw(st.sampled_from(["allocate", "touch", "free", "cache", "reset"]))
        held = [p for p in range(1, s.num_pages) if s.ref[p] > 0]
        if op == "allocate" and s.free:
            s = P.allocate(s, draw(st.integers(1, len(s.free))))[0]
        elif op == "touch" and s.num_pages > 1:
            s = P.touch(s, tuple(draw(st.lists(st.integers(0, s.num_pages - 1), max_size=3))))
        elif op == "free" and held:
            s = P.free(s, tuple(draw(st.lists(st.sampled_from(held), max_size=2, unique=True))))
        elif op == "cache":
            unkeyed = [p for p in range(1, s.num_pages) if s.key_of[p] is None]
            if unkeyed:
                s = P.cache(s, draw(st.sampled_from(unkeyed)), draw(KEYS))
        elif op == "reset":
            s = P.reset_prefix_cache(s)[0]
    return s


class KeyMap:
    """Dense ints for the spec's keys (bounded mode's key domain is 0..N-1)."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}

    def __call__(self, key: Any) -> int:
        return NONE if key is None else self.ids.setdefault(key, len(self.ids))


def pins(sym: z3_pool.PoolSym, s: P.PoolState, keys: KeyMap, stamps: bool = True) -> list[z3.BoolRef]:
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


def same_abstract_state(sym: z3_pool.PoolSym, s: P.PoolState, keys: KeyMap) -> z3.BoolRef:
    """``sym`` abstracts to ``s``: every pin except stamps, which only need the same order per key."""
    order = [sym.stamp[a] < sym.stamp[b] for _, ids in s.cached for i, a in enumerate(ids) for b in ids[i + 1:]]
    return z3.And(pins(sym, s, keys, stamps=False) + order)


def relation_agrees(s: P.PoolState, transition: str, length: int,
                    set_args: Callable[[z3_pool.PoolArgs, KeyMap], list[z3.BoolRef]],
                    run: Callable[[], tuple[P.PoolState, Any]],
                    expected_result: Callable[[Any, KeyMap], list[Any]]) -> None:
    """Instantiate ``transition`` on ``s`` (page list of ``length``) and compare it with ``run``,
    the Python transition returning (successor, result)."""
    keys = KeyMap()
    mode = Mode(s.num_pages)
    sym, args = z3_pool.pool_vars("s", mode), z3_pool.pool_args("a", max(length, 1))
    step = z3_pool.TRANSITIONS[transition](sym, args, mode, "t")
    solver = z3.Solver()
    solver.add(*pins(sym, s, keys), *set_args(args, keys), args.head_slot == 0, step.pre, step.defs)
    try:
        outcome = run()
    except P.PreconditionError:
        assert solver.check() == z3.unsat, f"{transition}: encoded precondition holds where the spec's fails"
        return
    assert solver.check() == z3.sat, f"{transition}: encoded precondition fails where the spec's holds"
    post, result = outcome
    wanted = expected_result(result, keys)
    differs = z3.Or(z3.Not(same_abstract_state(step.post, post, keys)),
                    *[r != w for r, w in zip(step.result, wanted)])
    solver.add(differs)
    verdict = solver.check()
    assert verdict == z3.unsat, f"{transition}: the relation admits a successor the spec does not produce:\n{solver.model() if verdict == z3.sat else verdict}"


def page_lists(s: P.PoolState) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(-1, s.num_pages), max_size=3).map(tuple)


def bounds_for(s: P.PoolState) -> st.SearchStrategy[tuple[int, int] | None]:
    return st.none() | st.tuples(st.integers(0, s.num_pages + 1), st.integers(0, s.num_pages + 1))


def set_bounds(args: z3_pool.PoolArgs, bounds: tuple[int, int] | None) -> list[z3.BoolRef]:
    if bounds is None:
        return [z3.Not(args.has_bounds)]
    return [args.has_bounds, args.lo == bounds[0], args.hi == bounds[1]]


def set_pages(args: z3_pool.PoolArgs, pages: tuple[int, ...]) -> list[z3.BoolRef]:
    return [args.m == len(pages)] + [a == p for a, p in zip(args.pages, pages)]


EXAMPLES = settings(max_examples=100)


@EXAMPLES
@given(st.data())
def test_allocate_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    n, bounds = data.draw(st.integers(0, 4)), data.draw(bounds_for(s))
    relation_agrees(s, "pool.allocate", n, lambda a, k: [a.m == n] + set_bounds(a, bounds),
                    lambda: P.allocate(s, n, bounds), lambda chosen, k: list(chosen) + [NONE] * (max(n, 1) - len(chosen)))


@EXAMPLES
@given(st.data())
def test_touch_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    pages = data.draw(page_lists(s))
    relation_agrees(s, "pool.touch", len(pages), lambda a, k: set_pages(a, pages),
                    lambda: (P.touch(s, pages), None), lambda r, k: [])


@EXAMPLES
@given(st.data())
def test_free_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    held = [p for p in range(1, s.num_pages) if s.ref[p] > 0]
    pages = data.draw(page_lists(s) | st.lists(st.sampled_from(held or [0]), max_size=3).map(tuple))
    relation_agrees(s, "pool.free", len(pages), lambda a, k: set_pages(a, pages),
                    lambda: (P.free(s, pages), None), lambda r, k: [])


@EXAMPLES
@given(st.data())
def test_cache_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    page, key = data.draw(st.integers(-1, s.num_pages)), data.draw(KEYS)
    relation_agrees(s, "pool.cache", 1, lambda a, k: [a.pages[0] == page, a.key == k(key)],
                    lambda: (P.cache(s, page, key), None), lambda r, k: [])


@EXAMPLES
@given(states())
def test_reset_relation_is_the_spec(s: P.PoolState) -> None:
    relation_agrees(s, "pool.reset_prefix_cache", 0, lambda a, k: [], lambda: P.reset_prefix_cache(s),
                    lambda done, k: [z3.BoolVal(done)])


@EXAMPLES
@given(st.data())
def test_lookup_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    key, bounds = data.draw(KEYS), data.draw(bounds_for(s))
    relation_agrees(s, "pool.lookup", 0, lambda a, k: [a.key == k(key)] + set_bounds(a, bounds),
                    lambda: (s, P.lookup(s, key, bounds)), lambda r, k: [NONE if r is None else r])


@given(st.integers(1, 6), st.sampled_from(["esurge", "unhashed-first"]))
def test_init_relation_is_the_spec(n: int, order: str) -> None:
    relation_agrees(P.init(n, order), "pool.init", 0, lambda a, k: [], lambda: (P.init(n, order), None), lambda r, k: [])
