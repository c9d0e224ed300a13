"""The bounded Z3 manager encoding is the Python spec, its theorems prove, its mutants are caught.

Encoding = spec: for random reachable `verikv.spec.manager` states within the bound (built by
running spec transitions from `init`) and random, sometimes invalid, arguments, the encoded
relation is instantiated on the concrete state and checked (`verikv.proofs.z3.manager_encoding`,
whose exhaustive small-bound run is a `verikv prove` check): its precondition is satisfiable
exactly when the Python call succeeds, and then the only successor and result it admits are
the Python ones (stamps compared by order within a key, the only thing the spec keeps).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from verikv.proofs.z3 import manager as zm, manager_encoding as enc
from verikv.proofs.z3.manager_encoding import PROMPT, RIDS, config, request
from verikv.spec import manager as spec_manager
from verikv.spec.pool import PreconditionError

TOKENS = st.one_of(
    st.integers(1, zm.MAX_TOKENS).map(lambda n: PROMPT[:n]),  # shared prefixes, so that lookups hit
    st.lists(st.integers(0, 1), min_size=1, max_size=zm.MAX_TOKENS).map(tuple))


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


def agrees(s: spec_manager.ManagerState, call: enc.Call) -> None:
    """The encoded relation accepts exactly the calls Python accepts, with only Python's successor."""
    found = enc.check_call(s, call)
    assert found is None, found


SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(states(), st.data())
def test_encoding_matches_spec(s: spec_manager.ManagerState, data: st.DataObject) -> None:
    req = request("r0", data.draw(TOKENS), data.draw(st.integers(0, 3)))
    n = s.config.num_pages

    agrees(s, enc.lookup_call(s, req))
    num_new = data.draw(st.integers(1, zm.MAX_TOKENS))
    delay = data.draw(st.booleans())
    hits: tuple[int, ...] = ()
    if s.entry("r0") is None and data.draw(st.booleans()):
        hits = spec_manager.lookup(s, req).pages[0] if data.draw(st.booleans()) else tuple(
            data.draw(st.lists(st.integers(0, n - 1), max_size=zm.MAX_HITS)))
    agrees(s, enc.allocate_call(s, req, num_new, hits, delay))
    agrees(s, enc.failing_keys_call(s, req, num_new, hits, delay))
    agrees(s, enc.cache_call(s, req, data.draw(st.integers(0, zm.MAX_TOKENS))))
    agrees(s, enc.free_call(s, req))
    agrees(s, enc.remove_skipped_call(s, req))
    agrees(s, enc.reset_call(s, req))


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
    agrees(s, enc.allocate_call(s, req, 2, hit.pages[0], False))


def test_a_cut_encoding_proves_its_theorems_yet_fails_the_encoding_check() -> None:
    """``cache_pages`` keying only page 0 is safe, so its theorems prove; it is not the spec."""
    cut: zm.StepFn = lambda s, a, tag: zm.cache_pages(s, a, tag, zm.Faults(keyed_pages=1))
    theorems = [t for t in zm.theorems({"manager.cache_pages": cut}) if t.transition == "manager.cache_pages"]
    assert theorems and all(t.run().ok for t in theorems)
    caught = enc.agrees_everywhere("manager.cache_pages", {"manager.cache_pages": cut})
    assert caught.status == "failed" and ("another successor" in caught.detail or "not admitted" in caught.detail)


def test_the_manager_encoding_check_passes_on_one_state() -> None:
    s = enc.reachable_states()[5]
    assert all(enc.check_call(s, call) is None for t in zm.TRANSITIONS for call in enc.calls(t, s))
