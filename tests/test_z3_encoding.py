"""The Z3 pool encoding is the Python spec: same preconditions, same (and only that) successor.

For random reachable spec states (built by running `verikv.spec.pool` transitions from
`init`) and random, sometimes invalid, arguments, the encoded relation of each transition is
instantiated on the concrete state (bounded mode with N = the state's size) and checked:
the encoded precondition is satisfiable exactly when the Python precondition holds, and then
every successor the relation admits equals the Python successor (its negation is unsat).
Whole calls are used (the relation unrolled over every element), not single elements. The
same comparison runs inside `verikv prove` over every small reachable state
(`verikv.proofs.z3.encoding`); this test adds random, larger states and arguments.
"""

from __future__ import annotations

import z3
from hypothesis import given, settings, strategies as st

from verikv.proofs.z3.common import NONE
from verikv.proofs.z3.encoding import (
    ExpectedResult,
    Run,
    SetArgs,
    disagreement,
    set_bounds,
    set_pages,
)
from verikv.spec import pool as spec_pool

KEYS = st.integers(0, 3)


@st.composite
def states(draw: st.DrawFn) -> spec_pool.PoolState:
    """A reachable pool state: init, then a random run of valid transitions."""
    s = spec_pool.init(draw(st.integers(1, 6)), draw(st.sampled_from(["esurge", "unhashed-first"])))
    for _ in range(draw(st.integers(0, 12))):
        op = draw(st.sampled_from(["allocate", "touch", "free", "cache", "reset"]))
        held = [p for p in range(1, s.num_pages) if s.ref[p] > 0]
        if op == "allocate" and s.free:
            s = spec_pool.allocate(s, draw(st.integers(1, len(s.free))))[0]
        elif op == "touch" and s.num_pages > 1:
            s = spec_pool.touch(s, tuple(draw(st.lists(st.integers(0, s.num_pages - 1), max_size=3))))
        elif op == "free" and held:
            s = spec_pool.free(s, tuple(draw(st.lists(st.sampled_from(held), max_size=2, unique=True))))
        elif op == "cache":
            unkeyed = [p for p in range(1, s.num_pages) if s.key_of[p] is None]
            if unkeyed:
                s = spec_pool.cache(s, draw(st.sampled_from(unkeyed)), draw(KEYS))
        elif op == "reset":
            s = spec_pool.reset_prefix_cache(s)[0]
    return s


def relation_agrees(s: spec_pool.PoolState, transition: str, length: int, set_args: SetArgs, run: Run,
                    expected_result: ExpectedResult) -> None:
    """The bounded encoding of ``transition`` on ``s`` agrees with the Python transition ``run``."""
    found = disagreement(s, transition, length, set_args, run, expected_result)
    assert found is None, found


def page_lists(s: spec_pool.PoolState) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(-1, s.num_pages), max_size=3).map(tuple)


def bounds_for(s: spec_pool.PoolState) -> st.SearchStrategy[tuple[int, int] | None]:
    return st.none() | st.tuples(st.integers(0, s.num_pages + 1), st.integers(0, s.num_pages + 1))


EXAMPLES = settings(max_examples=100)


@EXAMPLES
@given(st.data())
def test_allocate_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    n, bounds = data.draw(st.integers(0, 4)), data.draw(bounds_for(s))
    relation_agrees(s, "pool.allocate", n, lambda a, k: [a.m == n] + set_bounds(a, bounds),
                    lambda: spec_pool.allocate(s, n, bounds),
                    lambda chosen, k: list(chosen) + [NONE] * (max(n, 1) - len(chosen)))


@EXAMPLES
@given(st.data())
def test_touch_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    pages = data.draw(page_lists(s))
    relation_agrees(s, "pool.touch", len(pages), lambda a, k: set_pages(a, pages),
                    lambda: (spec_pool.touch(s, pages), None), lambda r, k: [])


@EXAMPLES
@given(st.data())
def test_free_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    held = [p for p in range(1, s.num_pages) if s.ref[p] > 0]
    pages = data.draw(page_lists(s) | st.lists(st.sampled_from(held or [0]), max_size=3).map(tuple))
    relation_agrees(s, "pool.free", len(pages), lambda a, k: set_pages(a, pages),
                    lambda: (spec_pool.free(s, pages), None), lambda r, k: [])


@EXAMPLES
@given(st.data())
def test_cache_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    page, key = data.draw(st.integers(-1, s.num_pages)), data.draw(KEYS)
    relation_agrees(s, "pool.cache", 1, lambda a, k: [a.pages[0] == page, a.key == k(key)],
                    lambda: (spec_pool.cache(s, page, key), None), lambda r, k: [])


@EXAMPLES
@given(states())
def test_reset_relation_is_the_spec(s: spec_pool.PoolState) -> None:
    relation_agrees(s, "pool.reset_prefix_cache", 0, lambda a, k: [], lambda: spec_pool.reset_prefix_cache(s),
                    lambda done, k: [z3.BoolVal(done)])


@EXAMPLES
@given(st.data())
def test_lookup_relation_is_the_spec(data: st.DataObject) -> None:
    s = data.draw(states())
    key, bounds = data.draw(KEYS), data.draw(bounds_for(s))
    relation_agrees(s, "pool.lookup", 0, lambda a, k: [a.key == k(key)] + set_bounds(a, bounds),
                    lambda: (s, spec_pool.lookup(s, key, bounds)), lambda r, k: [NONE if r is None else r])


@given(st.integers(1, 6), st.sampled_from(["esurge", "unhashed-first"]))
def test_init_relation_is_the_spec(n: int, order: spec_pool.FreeOrder) -> None:
    relation_agrees(spec_pool.init(n, order), "pool.init", 0, lambda a, k: [], lambda: (spec_pool.init(n, order), None),
                    lambda r, k: [])
