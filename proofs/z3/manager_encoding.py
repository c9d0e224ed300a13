"""Encoding-equals-spec checks in `verikv prove` for the manager encoding of `verikv.proofs.z3.manager`.

The manager theorems are stated on `verikv.proofs.z3.manager`'s relations; they say something about
`verikv.spec.manager` only if each relation *is* the spec's transition. For every spec state
reachable within the encoding's bound (breadth-first from `init` over the spec's own
transitions, `STATE_DEPTH` calls of `_moves`, N = `SIZES`) and a fixed set of arguments per
transition (valid and invalid, with and without hits, delayed caching or not), the relation is
instantiated on the concrete state and arguments: its precondition is satisfiable exactly when
the Python call succeeds, and then the successor and result it admits are exactly Python's
(on every field the spec has; stamps by their order within a key, the only thing the spec
keeps). The encoding's own proof ghosts (each request's tokens and computed count) are left
free: they are not spec state. An encoding cut down (say, a ``cache_pages`` that keys only
page 0) proves every theorem and reaches every witness, and is caught here: see `mutants`.

`tests/test_z3_manager.py` draws random states and arguments with Hypothesis on top of this
exhaustive small-bound run, using the same helpers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import z3

from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.proofs.z3 import manager as zm
from verikv.proofs.z3.common import NONE
from verikv.spec import manager as spec
from verikv.spec.pool import PreconditionError

RIDS = ("r0", "r1")
PROMPT = (0, 1, 1, 0, 1, 1)
PROMPTS = (PROMPT[:4], PROMPT, (1, 1, 0), (0, 1, 1, 1))
"""Prompts of the reachable states: the first two share their first two pages (hits), the last
shares only its first page with them."""
SIZES = (3, 4)
STATE_DEPTH = 2


def config(n: int) -> spec.ManagerConfig:
    """The encoding's configuration with ``n`` pages."""
    return spec.ManagerConfig((spec.GroupLayout("full", zm.PAGE_SIZE),), n, zm.MAX_TOKENS)


def request(rid: str, tokens: tuple[int, ...], computed: int = 0) -> spec.RequestView:
    return spec.RequestView(rid, tokens, computed)


def key_code(key: Any) -> int:
    """The encoding's integer for a spec pool key or ghost content ``((salt, pages), group)``."""
    if key is None:
        return NONE
    bits = [b for tokens, _, _ in key[0][1] for b in tokens]
    return (1 << len(bits)) + sum(b << i for i, b in enumerate(bits))


def pins(sym: zm.ManagerSym, s: spec.ManagerState, with_stamps: bool) -> list[z3.BoolRef]:
    """``sym`` is ``s``: every field the spec has (stamps as the order of each key's page list,
    or pinned to it); the encoding's proof ghosts stay free."""
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


def pin_args(a: zm.ReqArgs, req: spec.RequestView, num_new: int = 0, hits: tuple[int, ...] = (),
             delay: bool = False) -> list[z3.BoolRef]:
    """The encoded arguments are the concrete ones (tokens past the prompt are 0)."""
    padded = req.tokens + (0,) * (zm.MAX_TOKENS - req.num_tokens)
    return ([t == v for t, v in zip(a.tokens, padded)]
            + [a.length == req.num_tokens, a.computed == req.num_computed_tokens, a.num_new == num_new,
               a.num_hits == len(hits), a.delay == delay]
            + [h == (hits[j] if j < len(hits) else 0) for j, h in enumerate(a.hits)])


def _sat(*facts: z3.BoolRef) -> z3.CheckSatResult:
    solver = z3.Solver()
    solver.set("timeout", 20_000)
    solver.add(*facts)
    return solver.check()


Expected = Callable[[zm.MStep, Any], list[tuple[z3.ExprRef, int | bool]]]
Encodings = dict[str, zm.StepFn]


def disagreement(transition: str, s: spec.ManagerState, req: spec.RequestView, call: Callable[[], Any],
                 expected_result: Expected = lambda step, result: [], encodings: Encodings | None = None,
                 **args: Any) -> str | None:
    """None when the encoded relation accepts exactly what Python accepts, with only Python's
    successor and result; else what differs. ``encodings`` replaces relations (mutants only)."""
    sym, a = zm.manager_vars("s", s.config.num_pages), zm.req_args("a")
    step = {**zm.TRANSITIONS, **(encodings or {})}[transition](sym, a, "t")
    base = pins(sym, s, True) + pin_args(a, req, **args) + [step.defs]
    try:
        out = call()
    except PreconditionError:
        verdict = _sat(*base, step.pre)
        return None if verdict == z3.unsat else f"{transition}: encoded precondition {verdict} where the spec's fails"
    verdict = _sat(*base, step.pre)
    if verdict != z3.sat:
        return f"{transition}: encoded precondition {verdict} where the spec's holds"
    if isinstance(out, spec.Hit):
        post, result = s, out
    else:
        post, result = out if isinstance(out, tuple) else (out, None)
    same = z3.And(pins(step.post, post, False) + [t == v for t, v in expected_result(step, result)])
    if _sat(*base, step.pre, same) != z3.sat:
        return f"{transition}: the spec's successor is not admitted"
    verdict = _sat(*base, step.pre, z3.Not(same))
    return None if verdict == z3.unsat else f"{transition}: another successor is admitted ({verdict})"


def hit_result(step: zm.MStep, hit: spec.Hit) -> list[tuple[z3.ExprRef, int]]:
    """Lookup: the hit's token count, then its pages (NONE past the hit)."""
    pages = hit.pages[0] + (NONE,) * (len(step.result) - 1 - len(hit.pages[0]))
    return [(step.result[0], hit.num_tokens)] + list(zip(step.result[1:], pages))


def alloc_result(step: zm.MStep, res: Any) -> list[tuple[z3.ExprRef, int | bool]]:
    """allocate_slots: success, then the new pages (NONE past them, all NONE on failure)."""
    got = res[0] if res is not None else ()
    return [(step.result[0], res is not None)] + [(x, got[i] if i < len(got) else NONE)
                                                   for i, x in enumerate(step.result[1:])]


def would_allocate(s: spec.ManagerState, req: spec.RequestView, num_new: int, hits: tuple[int, ...]) -> bool:
    """Whether the (valid) call would have handed out at least one new page."""
    _, new = spec.allocate_slots(s, req, num_new, zm.PAGE_SIZE * len(hits), (hits,), delay_cache_pages=True)
    return new is not None and len(new[0]) > 0


# ---- one comparison per transition and argument set (shared with the Hypothesis test) ---------

@dataclass(frozen=True)
class Call:
    """One instantiation: a transition on a state, with the request ``r0`` and its arguments."""

    transition: str
    req: spec.RequestView
    run: Callable[[], Any]
    expected: Expected
    args: dict[str, Any]


def lookup_call(s: spec.ManagerState, req: spec.RequestView) -> Call:
    return Call("manager.lookup", req, lambda: spec.lookup(s, req), hit_result, {})


def allocate_call(s: spec.ManagerState, req: spec.RequestView, num_new: int, hits: tuple[int, ...],
                  delay: bool) -> Call:
    def run() -> Any:
        return spec.allocate_slots(s, req, num_new, zm.PAGE_SIZE * len(hits), (hits,), delay_cache_pages=delay)
    return Call("manager.allocate_slots", req, run, alloc_result, {"num_new": num_new, "hits": hits, "delay": delay})


def failing_keys_call(s: spec.ManagerState, req: spec.RequestView, num_new: int, hits: tuple[int, ...],
                      delay: bool) -> Call:
    """The same allocate_slots call while its keys cannot be computed: rejected, nothing changes."""
    def run() -> Any:
        spec.allocate_slots(s, req, num_new, zm.PAGE_SIZE * len(hits), (hits,), delay_cache_pages=True)  # pre
        return spec.fail_key_computation(s, req, "allocate_slots", "hash backend down")[0]

    def expected(step: zm.MStep, _: Any) -> list[tuple[z3.ExprRef, int | bool]]:
        return [(step.result[0], False), (step.result[1], would_allocate(s, req, num_new, hits))]
    return Call("manager.fail_key_computation", req, run, expected, {"num_new": num_new, "hits": hits, "delay": delay})


def cache_call(s: spec.ManagerState, req: spec.RequestView, num_tokens: int) -> Call:
    return Call("manager.cache_pages", req, lambda: spec.cache_pages(s, req, num_tokens), lambda st, r: [],
                {"num_new": num_tokens})


def free_call(s: spec.ManagerState, req: spec.RequestView) -> Call:
    return Call("manager.free_request", req, lambda: spec.free_request(s, "r0"), lambda st, r: [], {})


def remove_skipped_call(s: spec.ManagerState, req: spec.RequestView) -> Call:
    return Call("manager.remove_skipped", req, lambda: spec.remove_skipped(s, "r0", req.num_computed_tokens),
                lambda st, r: [], {})


def reset_call(s: spec.ManagerState, req: spec.RequestView) -> Call:
    return Call("manager.reset_prefix_cache", req, lambda: spec.reset_prefix_cache(s),
                lambda step, done: [(step.result[0], done)], {})


def check_call(s: spec.ManagerState, call: Call, encodings: Encodings | None = None) -> str | None:
    """`disagreement` for one `Call`."""
    return disagreement(call.transition, s, call.req, call.run, call.expected, encodings, **call.args)


# ---- the exhaustive small-bound run -----------------------------------------------------------

Node = tuple[spec.ManagerState, tuple[tuple[int, ...] | None, ...]]
"""A reachable state and the prompt each request of `RIDS` holds pages for (None: none)."""


def _with_prompt(prompts: tuple[tuple[int, ...] | None, ...], r: int,
                 prompt: tuple[int, ...] | None) -> tuple[tuple[int, ...] | None, ...]:
    return prompts[:r] + (prompt,) + prompts[r + 1:]


def _moves(node: Node) -> Iterator[Node]:
    """Successors under a scheduler's calls: admit a prompt (with its hit, or without one and
    delayed caching), grow a held request by one token, cache what it computed, free it, reset."""
    s, prompts = node
    for r, rid in enumerate(RIDS):
        held = prompts[r]
        if held is None:
            for prompt in PROMPTS:
                req = request(rid, prompt)
                hit = spec.lookup(s, req)
                for t, new in (spec.allocate_slots(s, req, req.num_tokens - hit.num_tokens, hit.num_tokens, hit.pages),
                               spec.allocate_slots(s, req, req.num_tokens, delay_cache_pages=True)):
                    if new is not None:
                        yield t, _with_prompt(prompts, r, prompt)
            continue
        if len(held) < zm.MAX_TOKENS:
            t, new = spec.allocate_slots(s, request(rid, held + (1,), len(held)), 1)
            if new is not None:
                yield t, _with_prompt(prompts, r, held + (1,))
        yield spec.cache_pages(s, request(rid, held, len(held)), len(held)), prompts
        yield spec.free_request(s, rid), _with_prompt(prompts, r, None)
    yield spec.reset_prefix_cache(s)[0], prompts


def reachable_states() -> list[spec.ManagerState]:
    """Every state within `STATE_DEPTH` calls of `_moves` from an empty manager of each size, in
    a fixed order (states are told apart with their ghost content, which the pins read)."""
    found: dict[Any, spec.ManagerState] = {}
    for n in SIZES:
        level: list[Node] = [(spec.init(config(n)), (None,) * len(RIDS))]
        seen: set[Any] = set()
        for _ in range(STATE_DEPTH + 1):
            fresh = [node for node in level if (node[0], node[0].content, node[1]) not in seen]
            seen.update((s, s.content, prompts) for s, prompts in fresh)
            found.update(((s, s.content), s) for s, _ in fresh)
            level = [t for node in fresh for t in _moves(node)]
    return list(found.values())


def calls(transition: str, s: spec.ManagerState) -> Iterator[Call]:
    """The argument set of ``transition`` on ``s``: r0 with a prompt sharing pages with the
    states' prompts and one that does not, each with its computed count as a scheduler has it
    (0 without pages, inside the held pages with them) and, for lookup and remove_skipped, one
    past it. allocate_slots: one new token, two after the lookup's hit,
    three with delayed caching, one with a hit page the lookup did not give (the last two for
    the first request only); the failing-key case: the first two; cache_pages: 2, 4 and 7 (past
    the prompt) tokens."""
    e = s.entry("r0")
    held = 0 if e is None else zm.PAGE_SIZE * len(e.pages[0])
    for first, tokens in enumerate((PROMPT, (1, 0, 1))):
        natural = min(held, len(tokens) - 1)
        for computed in dict.fromkeys((natural, 3)):
            req = request("r0", tokens, computed)
            if computed != natural and transition not in ("manager.lookup", "manager.remove_skipped"):
                continue
            hit = spec.lookup(s, req).pages[0] if e is None else ()
            if transition == "manager.lookup":
                yield lookup_call(s, req)
            elif transition == "manager.allocate_slots":
                variants = [(1, (), False), (2, hit, False)] + [(3, (), True), (1, (1,), False)] * (first == 0)
                yield from (allocate_call(s, req, n, hits, delay) for n, hits, delay in variants)
            elif transition == "manager.fail_key_computation":
                yield from (failing_keys_call(s, req, n, hits, False) for n, hits in ((1, ()), (2, hit)))
            elif transition == "manager.cache_pages":
                yield from (cache_call(s, req, nt) for nt in (2, 4, 7))
            elif transition == "manager.free_request":
                yield free_call(s, req)
            elif transition == "manager.remove_skipped":
                yield remove_skipped_call(s, req)
            elif transition == "manager.reset_prefix_cache":
                yield reset_call(s, req)


def agrees_everywhere(transition: str, encodings: Encodings | None = None) -> Outcome:
    """Every call of ``transition`` on every reachable state; the first disagreement fails."""
    start, total = time.process_time(), 0
    states = reachable_states()
    for s in states:
        for call in calls(transition, s):
            total += 1
            found = check_call(s, call, encodings)
            if found is not None:
                return Outcome("failed", f"{found}\n  state: {s}\n  request: {call.req}, arguments: {call.args}")
    return Outcome("passed", f"{total} calls on {len(states)} reachable states agree "
                             f"({time.process_time() - start:.1f} CPU s)")


BOUND = (f"N={SIZES[0]}..{SIZES[-1]}, states within {STATE_DEPTH} calls of init "
         f"({len(PROMPTS)} prompts, 2 requests), fixed argument set")


def checks() -> list[Check]:
    """One check per manager transition of the encoding."""
    return [Check(name=f"encoding:{t}", kind="encoding", invariant="ENCODING=SPEC", transition=t, bound=BOUND,
                  run=lambda t=t: agrees_everywhere(t))  # type: ignore[misc]
            for t in zm.TRANSITIONS]


# ---- cut encodings: they prove every theorem, the encoding check must fail --------------------

_CUTS: tuple[tuple[str, str, zm.StepFn], ...] = (
    ("cache-pages-keys-only-page-0", "manager.cache_pages",
     lambda s, a, tag: zm.cache_pages(s, a, tag, zm.Faults(keyed_pages=1))),
    ("allocate-caches-only-page-0", "manager.allocate_slots",
     lambda s, a, tag: zm.allocate_slots(s, a, tag, faults=zm.Faults(keyed_pages=1))),
)


def _detector(transition: str, encoding: zm.StepFn) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        outcome = agrees_everywhere(transition, {transition: encoding})
        return [] if outcome.ok else [f"encoding:{transition}: ENCODING=SPEC"]
    return detect


def mutants() -> list[Mutant]:
    """Manager encodings cut down (``spec:encoding-<cut>``): every theorem still proves and
    every witness is still reachable; the encoding check catches them."""
    return [Mutant(name=f"spec:encoding-{name}", kind="spec", invariant="ENCODING=SPEC",
                   description=f"{transition} encoding cut: {name.replace('-', ' ')}",
                   detect=_detector(transition, encoding))
            for name, transition, encoding in _CUTS]
