"""The pool spec: transitions, preconditions, and invariant predicates that can fail."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest
from hypothesis import given, strategies as st

from verikv.page_pool import PagePool
from verikv.spec import pool as spec_pool
from verikv.spec.abstraction import abstract_pool
from verikv.spec.invariants import INVARIANTS, POOL_INVARIANTS, violated_pool_invariants


def test_init() -> None:
    s = spec_pool.init(4)
    assert s == spec_pool.PoolState(4, (0, 0, 0, 0), (1, 2, 3), (None,) * 4, frozenset(), "esurge")
    assert violated_pool_invariants(s) == [] and spec_pool.usage(s) == 0.0
    assert spec_pool.usage(spec_pool.init(1)) == 0.0
    for bad in [(0,), (True,), (3, "lifo")]:
        with pytest.raises(spec_pool.PreconditionError):
            spec_pool.init(*bad)  # type: ignore[arg-type]


def test_issue_example() -> None:
    s, held = spec_pool.allocate(spec_pool.init(8), 4)
    assert held == (1, 2, 3, 4)
    s = spec_pool.free(s, held[::-1])
    assert s.free == (5, 6, 7, 4, 3, 2, 1)


def test_allocate_evicts_keys_and_respects_bounds() -> None:
    s, (a, b) = spec_pool.allocate(spec_pool.init(6), 2)
    s = spec_pool.cache(spec_pool.cache(s, a, "k"), b, "k")
    s = spec_pool.free(s, (a,))
    assert spec_pool.lookup(s, "k") == a and s.cached_ids("k") == (a, b)
    s, got = spec_pool.allocate(s, 3, bounds=(3, 6))
    assert got == (3, 4, 5)
    s, got = spec_pool.allocate(s, 1)
    assert got == (a,) and s.key_of[a] is None and s.cached_ids("k") == (b,)
    assert violated_pool_invariants(s) == []


def test_allocating_two_pages_of_one_key_evicts_both() -> None:
    s, (a, b) = spec_pool.allocate(spec_pool.init(4), 2)
    s = spec_pool.free(spec_pool.cache(spec_pool.cache(s, a, "k"), b, "k"), (a, b))
    s, got = spec_pool.allocate(s, 3)
    assert set(got) >= {a, b} and s.cached == frozenset() and violated_pool_invariants(s) == []


def test_touch_revives_and_skips_null() -> None:
    s, (a,) = spec_pool.allocate(spec_pool.init(4), 1)
    s = spec_pool.free(spec_pool.cache(s, a, "k"), (a,))
    s = spec_pool.touch(s, (0, a, a))
    assert s.ref[a] == 2 and a not in s.free and s.ref[0] == 0 and s.key_of[a] == "k"


def test_unhashed_first_order() -> None:
    s, held = spec_pool.allocate(spec_pool.init(8, "unhashed-first"), 4)
    s = spec_pool.free(spec_pool.cache(s, 2, "k"), held[::-1])
    assert s.free == (4, 3, 1, 5, 6, 7, 2)


def test_free_in_the_order_pages_reach_zero() -> None:
    s, (a, b) = spec_pool.allocate(spec_pool.init(4), 2)
    s = spec_pool.touch(s, (a,))
    s = spec_pool.free(s, (a, b, a))
    assert s.free == (3, b, a)


@pytest.mark.parametrize("pages, reason", [((0,), "null-page"), ((9,), "out-of-range"), ((3,), "double-free"),
                                           ((1, 1), "double-free"), (("1",), "argument"), ([1], "argument")])
def test_free_preconditions(pages, reason) -> None:
    s, _ = spec_pool.allocate(spec_pool.init(4), 2)
    assert not spec_pool.pre_free(s, pages)
    with pytest.raises(spec_pool.PreconditionError) as info:
        spec_pool.free(s, pages)
    assert info.value.reason == reason and info.value.transition == "free"


def test_other_preconditions() -> None:
    s, (a,) = spec_pool.allocate(spec_pool.init(3), 1)
    s = spec_pool.cache(s, a, "k")
    cases = [(lambda: spec_pool.allocate(s, 2), "out-of-pages"), (lambda: spec_pool.allocate(s, -1), "argument"),
             (lambda: spec_pool.allocate(s, 1, bounds=(2, 9)), "argument"),
             (lambda: spec_pool.touch(s, (3,)), "out-of-range"),
             (lambda: spec_pool.cache(s, 0, "x"), "null-page"), (lambda: spec_pool.cache(s, a, "x"), "already-keyed"),
             (lambda: spec_pool.cache(s, 2, None), "argument"), (lambda: spec_pool.cache(s, 5, "x"), "out-of-range"),
             (lambda: spec_pool.lookup(s, "k", bounds=(0,)), "argument")]  # type: ignore[arg-type]
    for call, reason in cases:
        with pytest.raises(spec_pool.PreconditionError) as info:
            call()
        assert info.value.reason == reason


def test_reset_only_when_nothing_is_held() -> None:
    s, (a, b) = spec_pool.allocate(spec_pool.init(4), 2)
    s = spec_pool.free(spec_pool.cache(s, a, "k"), (a,))
    assert spec_pool.reset_prefix_cache(s) == (s, False)
    s = spec_pool.free(s, (b,))
    reset, done = spec_pool.reset_prefix_cache(s)
    assert done and reset.cached == frozenset() and reset.key_of == (None,) * 4 and reset.free == s.free
    assert spec_pool.pre_reset_prefix_cache(s)


BROKEN = {
    "INV-NULL": lambda s: replace(s, free=(0,) + s.free),
    "INV-FREE-IFF-ZERO": lambda s: replace(s, free=s.free[1:]),
    "INV-FREE-DISTINCT": lambda s: replace(s, free=s.free + s.free[:1]),
    "INV-REF-NONNEG": lambda s: replace(s, ref=s.ref[:1] + (-1,) + s.ref[2:], free=tuple(p for p in s.free if p != 1)),
    "INV-CONSERVE": lambda s: replace(s, ref=s.ref[:1] + (1,) + s.ref[2:]),
    "INV-KEY-BIJ": lambda s: replace(s, key_of=s.key_of[:1] + ("k",) + s.key_of[2:]),
    "INV-USAGE": lambda s: replace(s, free=s.free[1:]),
}


@pytest.mark.parametrize("name", sorted(POOL_INVARIANTS))
def test_each_invariant_can_fail(name: str) -> None:
    broken = BROKEN[name](spec_pool.init(4))
    assert not POOL_INVARIANTS[name](broken)
    assert name in violated_pool_invariants(broken)


def test_catalogue() -> None:
    assert set(POOL_INVARIANTS) == {"INV-NULL", "INV-FREE-IFF-ZERO", "INV-FREE-DISTINCT", "INV-REF-NONNEG",
                                    "INV-CONSERVE", "INV-KEY-BIJ", "INV-USAGE"}
    assert set(POOL_INVARIANTS) <= set(INVARIANTS)
    assert violated_pool_invariants(replace(spec_pool.init(3), ref=(0,))) == ["well-formed"]


def test_state_is_immutable() -> None:
    s = spec_pool.init(3)
    with pytest.raises(AttributeError):
        s.free = ()  # type: ignore[misc]
    spec_pool.allocate(s, 2)
    assert s == spec_pool.init(3)


def test_abstraction_of_a_fresh_pool_is_init() -> None:
    for order in sorted(spec_pool.FREE_ORDERS):
        # FREE_ORDERS is a frozenset[str] holding exactly the FreeOrder values
        assert abstract_pool(PagePool(5, free_order=order)) == spec_pool.init(5, cast(spec_pool.FreeOrder, order))


STEP = st.tuples(st.sampled_from(["allocate", "touch", "free", "cache", "reset"]), st.integers(0, 7), st.integers(0, 3))


@given(st.integers(1, 8), st.sampled_from(sorted(spec_pool.FREE_ORDERS)), st.lists(STEP, max_size=40))
def test_transitions_preserve_every_invariant(n: int, order: str, steps: list[tuple[str, int, int]]) -> None:
    s = spec_pool.init(n, order)  # type: ignore[arg-type]
    for op, x, k in steps:
        if op == "allocate" and spec_pool.pre_allocate(s, x % (len(s.free) + 1)):
            s, _ = spec_pool.allocate(s, x % (len(s.free) + 1))
        elif op == "touch" and spec_pool.pre_touch(s, (x % n,)):
            s = spec_pool.touch(s, (x % n,))
        elif op == "free" and spec_pool.pre_free(s, (x % n,)):
            s = spec_pool.free(s, (x % n,))
        elif op == "cache" and spec_pool.pre_cache(s, x % n, k):
            s = spec_pool.cache(s, x % n, k)
        elif op == "reset":
            s, _ = spec_pool.reset_prefix_cache(s)
        assert violated_pool_invariants(s) == [], (op, x, k, s)
