"""The bounded Z3 manager encoding is the Python spec, its theorems prove, its mutants are caught.

Encoding = spec: for random reachable `verikv.spec.manager` states within the bound (built by
running spec transitions from `init`) and random, sometimes invalid, arguments, the encoded
relation is instantiated on the concrete state and checked: its precondition is satisfiable
exactly when the Python call succeeds, and then the only successor and result it admits are
the Python ones (stamps compared by order within a key, the only thing the spec keeps).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
import z3
from hypothesis import HealthCheck, given, settings, strategies as st

from verikv.proofs import z3_manager as zm
from verikv.proofs.z3_common import NONE
from verikv.spec import manager as spec_manager
from verikv.spec.pool import PreconditionError

RIDS = ("r0", "r1")
PROMPT = (0, 1, 1, 0, 1, 1)
TOKENS = st.one_of(
    st.integers(1, zm.MAX_TOKENS).map(lambda n: PROMPT[:n]),  # shared prefixes, so that lookups hit
    st.lists(st.integers(0, 1), min_size=1, max_size=zm.MAX_TOKENS).map(tuple))


def config(n: int) -> spec_manager.ManagerConfig:
    """The bound's configuration with ``n`` pages."""
    return spec_manager.ManagerConfig((spec_manager.GroupLayout("full", zm.PAGE_SIZE),), n, zm.MAX_TOKENS)


def request(rid: str, tokens: tuple[int, ...], computed: int = 0) -> spec_manager.RequestView:
    return spec_manager.RequestView(rid, tokens, computed)


def allocate(s: spec_manager.ManagerState, req: spec_manager.RequestView, num_new: int, use_hits: bool,
             delay: bool) -> tuple[spec_manager.ManagerState, Any]:
    """allocate_slots, with the lookup's hits for a request holding no pages when ``use_hits``."""
    hit = spec_manager.lookup(s, req) if use_hits and s.entry(req.request_id) is None else None
    if hit is None:
        return spec_manager.allocate_slots(s, req, num_new, delay_cache_pages=delay)
    return spec_manager.allocate_slots(s, req, num_new, hit.num_tokens, hit.pages, delay_cache_pages=delay)


@st.composite
def states(draw: st.DrawFn) -> spec_manager.ManagerState:
    """A reachable manager state within the bound: init, then a random run of spec calls."""
    s = spec_manager.init(config(draw(st.integers(3, 5))))
    for _ in range(draw(st.integers(0, 8))):
        rid = draw(st.sampled_from(RIDS))
        req = request(rid, draw(TOKENS))
        op = draw(st.sampled_from(["allocate", "allocate", "allocate", "cache", "free", "reset"]))
        try:
            if op == "allocate":
                s = allocate(s, req, draw(st.integers(1, zm.MAX_TOKENS)), draw(st.booleans()),
                             draw(st.booleans()))[0]
            elif op == "cache":
                s = spec_manager.cache_pages(s, req, draw(st.integers(0, req.num_tokens)))
            elif op == "free":
                s = spec_manager.free_request(s, rid)
            else:
                s = spec_manager.reset_prefix_cache(s)[0]
        except PreconditionError:
            pass
    return s


def key_code(key: Any) -> int:
    """The encoding's integer for a spec pool key or ghost content ``((salt, pages), group)``."""
    if key is None:
        return NONE
    bits = [b for tokens, _, _ in key[0][1] for b in tokens]
    return (1 << len(bits)) + sum(b << i for i, b in enumerate(bits))


def pins(sym: zm.ManagerSym, s: spec_manager.ManagerState, with_stamps: bool) -> list[z3.BoolRef]:
    """``sym`` is ``s``: every field (stamps as the order of each key's page list, or pinned to it)."""
    p = s.pool
    facts = [sym.flen == len(p.free)] + ([sym.clock == p.num_pages] if with_stamps else [])
    for q in range(p.num_pages):
        facts += [sym.ref[q] == p.ref[q], sym.key[q] == key_code(p.key_of[q]),
                  sym.pos[q] == (p.free.index(q) if q in p.free else NONE), sym.content[q] == key_code(s.content[q])]
    for _, ids in p.cached:
        if with_stamps:
            facts += [sym.stamp[q] == i for i, q in enumerate(ids)]
        else:
            facts += [sym.stamp[a] < sym.stamp[b] for a, b in pairwise(ids)]
    for r, rid in enumerate(RIDS):
        e = s.entry(rid)
        pages = e.pages[0] if e else ()
        facts += [sym.has[r] == (e is not None), sym.npages[r] == len(pages),
                  sym.ncached[r] == (e.num_cached[0] if e else 0)]
        facts += [x == (pages[j] if j < len(pages) else 0) for j, x in enumerate(sym.pages[r])]
    return facts


def pin_args(a: zm.ReqArgs, req: spec_manager.RequestView, num_new: int = 0, hits: tuple[int, ...] = (),
             delay: bool = False) -> list[z3.BoolRef]:
    """The encoded arguments are the concrete ones (tokens past the prompt are 0)."""
    padded = req.tokens + (0,) * (zm.MAX_TOKENS - req.num_tokens)
    return ([t == v for t, v in zip(a.tokens, padded)]
            + [a.length == req.num_tokens, a.computed == req.num_computed_tokens, a.num_new == num_new,
               a.num_hits == len(hits), a.delay == delay]
            + [h == (hits[j] if j < len(hits) else 0) for j, h in enumerate(a.hits)])


def sat(*facts: z3.BoolRef) -> bool:
    solver = z3.Solver()
    solver.add(*facts)
    verdict = solver.check()
    assert verdict != z3.unknown
    return verdict == z3.sat


Expected = Callable[[zm.MStep, Any], list[tuple[z3.ExprRef, int | bool]]]


def agrees(transition: str, s: spec_manager.ManagerState, req: spec_manager.RequestView, call: Callable[[], Any],
           expected_result: Expected = lambda step, result: [], **args: Any) -> None:
    """The encoded relation accepts exactly the calls Python accepts, with only Python's successor."""
    sym, a = zm.manager_vars("s", s.config.num_pages), zm.req_args("a")
    step = zm.TRANSITIONS[transition](sym, a, "t")
    base = pins(sym, s, True) + pin_args(a, req, **args) + [step.defs]
    try:
        out = call()
    except PreconditionError:
        assert not sat(*base, step.pre), f"{transition}: encoded pre holds where Python rejects"
        return
    assert sat(*base, step.pre), f"{transition}: encoded pre fails where Python accepts"
    if isinstance(out, spec_manager.Hit):
        post, result = s, out
    else:
        post, result = out if isinstance(out, tuple) else (out, None)
    same = z3.And(pins(step.post, post, False) + [t == v for t, v in expected_result(step, result)])
    assert sat(*base, step.pre, same), f"{transition}: Python's successor is not admitted"
    assert not sat(*base, step.pre, z3.Not(same)), f"{transition}: another successor is admitted"


def hit_result(step: zm.MStep, hit: spec_manager.Hit) -> list[tuple[z3.ExprRef, int]]:
    """Lookup: the hit's token count, then its pages (NONE past the hit)."""
    pages = hit.pages[0] + (NONE,) * (len(step.result) - 1 - len(hit.pages[0]))
    return [(step.result[0], hit.num_tokens)] + list(zip(step.result[1:], pages))


def alloc_result(step: zm.MStep, res: Any) -> list[tuple[z3.ExprRef, int | bool]]:
    """allocate_slots: success, then the new pages (NONE past them, all NONE on failure)."""
    got = res[0] if res is not None else ()
    return [(step.result[0], res is not None)] + [(x, got[i] if i < len(got) else NONE)
                                                   for i, x in enumerate(step.result[1:])]


def would_allocate(s: spec_manager.ManagerState, req: spec_manager.RequestView, num_new: int,
                   hits: tuple[int, ...]) -> bool:
    """Whether the (valid) call would have handed out at least one new page."""
    _, new = spec_manager.allocate_slots(s, req, num_new, zm.PAGE_SIZE * len(hits), (hits,), delay_cache_pages=True)
    return new is not None and len(new[0]) > 0


SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(states(), st.data())
def test_encoding_matches_spec(s: spec_manager.ManagerState, data: st.DataObject) -> None:
    req = request("r0", data.draw(TOKENS), data.draw(st.integers(0, 3)))
    n = s.config.num_pages

    agrees("manager.lookup", s, req, lambda: spec_manager.lookup(s, req), hit_result)
    num_new = data.draw(st.integers(1, zm.MAX_TOKENS))
    delay = data.draw(st.booleans())
    hits: tuple[int, ...] = ()
    if s.entry("r0") is None and data.draw(st.booleans()):
        hits = spec_manager.lookup(s, req).pages[0] if data.draw(st.booleans()) else tuple(
            data.draw(st.lists(st.integers(0, n - 1), max_size=zm.MAX_HITS)))
    agrees("manager.allocate_slots", s, req,
           lambda: spec_manager.allocate_slots(s, req, num_new, zm.PAGE_SIZE * len(hits), (hits,),
                                               delay_cache_pages=delay),
           alloc_result, num_new=num_new, hits=hits, delay=delay)
    # the same call while its keys cannot be computed: rejected, nothing changes
    would = spec_manager.allocate_slots
    agrees("manager.fail_key_computation", s, req,
           lambda: (would(s, req, num_new, zm.PAGE_SIZE * len(hits), (hits,), delay_cache_pages=True),
                    spec_manager.fail_key_computation(s, req, "allocate_slots", "hash backend down"))[1],
           lambda step, error: [(step.result[0], False), (step.result[1], would_allocate(s, req, num_new, hits))],
           num_new=num_new, hits=hits, delay=delay)
    # cache_pages, free_request, remove_skipped, reset_prefix_cache.
    nt = data.draw(st.integers(0, zm.MAX_TOKENS))
    agrees("manager.cache_pages", s, req, lambda: spec_manager.cache_pages(s, req, nt), num_new=nt)
    agrees("manager.free_request", s, req, lambda: spec_manager.free_request(s, "r0"))
    agrees("manager.remove_skipped", s, req, lambda: spec_manager.remove_skipped(s, "r0", req.num_computed_tokens))
    agrees("manager.reset_prefix_cache", s, req, lambda: spec_manager.reset_prefix_cache(s),
           lambda step, done: [(step.result[0], done)])


@pytest.mark.parametrize("theorem", zm.theorems(), ids=lambda t: t.name)
def test_theorem_proves(theorem: Any) -> None:
    outcome = theorem.run()
    assert outcome.ok and outcome.vacuity_checked, outcome.detail


@pytest.mark.parametrize("mutant", zm.mutants(), ids=lambda m: m.name)
def test_mutant_is_caught(mutant: Any) -> None:
    caught = mutant.detect()
    assert any(mutant.invariant in name for name in caught), caught


def test_encoding_matches_spec_on_failed_allocation_with_hits() -> None:
    """A case random states rarely reach: hits taken, then too few free pages (INV-ATOMIC's branch)."""
    # r1 holds and caches both pages
    s = spec_manager.allocate_slots(spec_manager.init(config(3)), request("r1", PROMPT[:4]), 4)[0]
    req = request("r0", PROMPT)
    hit = spec_manager.lookup(s, req)
    assert hit.num_tokens == 4
    agrees("manager.allocate_slots", s, req,
           lambda: spec_manager.allocate_slots(s, req, 2, hit.num_tokens, hit.pages),
           alloc_result, num_new=2, hits=hit.pages[0])
