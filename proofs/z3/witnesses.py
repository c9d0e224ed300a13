"""Per-branch reachability witnesses for the manager encodings of `verikv.proofs.z3.manager`.

One vacuity check per theorem only shows that *some* pre-state satisfies the hypotheses. An
encoding cut down to one branch (an ``allocate_slots`` that always fails or never caches, a
lookup that never hits) would still pass it and still prove every invariant. So each branch of
each manager transition gets its own check: the induction hypothesis (every invariant), the
precondition and the transition, together with the branch's condition, must be satisfiable.
A branch found unsatisfiable is reported "vacuous" (a failure): the theorems say nothing about
it. Bound: the manager encoding's scope at N = `PAGES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import z3

from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.proofs.z3 import manager as zm
from verikv.proofs.z3.common import NONE, QUERY_RLIMIT, QUERY_TIMEOUT_MS

PAGES = 4

Branch = Callable[[zm.ManagerSym, zm.ReqArgs, zm.MStep], z3.BoolRef]


def _keys_changed(s: zm.ManagerSym, step: zm.MStep) -> z3.BoolRef:
    return z3.Or([step.post.key[p] != s.key[p] for p in range(s.n)])


def _evicts(s: zm.ManagerSym, step: zm.MStep) -> z3.BoolRef:
    """A free page that held a key is handed out again (lazy eviction)."""
    return z3.Or([z3.And(s.key[p] != NONE, s.ref[p] == 0, step.post.ref[p] > 0) for p in range(1, s.n)])


def _revives(s: zm.ManagerSym, a: zm.ReqArgs) -> z3.BoolRef:
    """The first hit page was free (ref 0): touching it takes it off the free list."""
    return z3.And(a.num_hits > 0, zm.pick(s.ref, a.hits[0]) == 0)


BRANCHES: dict[str, dict[str, Branch]] = {
    "manager.allocate_slots": {
        "does-not-fit": lambda s, a, t: z3.Not(t.result[0]),
        "fits-with-new-pages": lambda s, a, t: z3.And(t.result[0], t.result[1] != NONE),
        "fits-without-new-page": lambda s, a, t: z3.And(t.result[0], t.result[1] == NONE),
        "fits-and-caches": lambda s, a, t: z3.And(t.result[0], _keys_changed(s, t)),
        "fits-delayed-no-cache": lambda s, a, t: z3.And(t.result[0], a.delay),
        "takes-hits": lambda s, a, t: z3.And(t.result[0], a.num_hits > 0),
        "revives-free-hit": lambda s, a, t: z3.And(t.result[0], _revives(s, a)),
        "evicts-a-cached-page": lambda s, a, t: z3.And(t.result[0], _evicts(s, t)),
        "grows-a-held-request": lambda s, a, t: z3.And(t.result[0], s.has[0], t.result[1] != NONE),
        "fails-for-a-held-request": lambda s, a, t: z3.And(z3.Not(t.result[0]), s.has[0]),
    },
    "manager.lookup": {
        "hits": lambda s, a, t: t.result[0] > 0,
        "misses-with-a-warm-cache": lambda s, a, t: z3.And(t.result[0] == 0, z3.Or([k != NONE for k in s.key])),
        "hit-capped-at-num-tokens-minus-1": lambda s, a, t: z3.And(t.result[0] > 0,
                                                                   t.result[0] + zm.PAGE_SIZE > a.length - 1),
    },
    "manager.cache_pages": {
        "keys-a-page": lambda s, a, t: _keys_changed(s, t),
        "keys-nothing": lambda s, a, t: z3.Not(_keys_changed(s, t)),
    },
    "manager.free_request": {
        "releases-a-page": lambda s, a, t: z3.Or([z3.And(s.ref[p] == 1, t.post.ref[p] == 0) for p in range(1, s.n)]),
        "shared-page-stays-held": lambda s, a, t: z3.Or([z3.And(s.ref[p] == 2, t.post.ref[p] == 1)
                                                         for p in range(1, s.n)]),
    },
    "manager.fail_key_computation": {
        "rejects-a-call-that-would-allocate": lambda s, a, t: t.result[1],
    },
    "manager.reset_prefix_cache": {
        "resets": lambda s, a, t: z3.And(t.result[0], z3.Or([k != NONE for k in s.key])),
        "refuses-while-held": lambda s, a, t: z3.Not(t.result[0]),
    },
}


def reachable(transition: str, branch: Branch, encoding: zm.StepFn | None = None) -> Outcome:
    """Inv(s) ∧ Pre ∧ Trans ∧ branch is satisfiable (with the model shown as the witness).
    ``encoding`` replaces the transition's encoding (for mutants only)."""
    s, a = zm.manager_vars("s", PAGES), zm.req_args("a")
    step = (encoding or zm.TRANSITIONS[transition])(s, a, "t")
    solver = z3.Solver()
    solver.set("rlimit", QUERY_RLIMIT)
    solver.set("timeout", QUERY_TIMEOUT_MS)
    solver.add(zm.all_invariants(s), step.pre, step.contract, step.defs, branch(s, a, step))
    verdict = solver.check()
    if verdict == z3.sat:
        return Outcome("proved", "witness:\n" + zm.explain(solver.model(), transition, s, a, step),
                       vacuity_checked=True)
    if verdict == z3.unsat:
        return Outcome("vacuous", "no reachable state takes this branch: the theorems say nothing about it",
                       vacuity_checked=True)
    return Outcome("unknown", solver.reason_unknown(), vacuity_checked=True)


def checks() -> list[Check]:
    """One satisfiability check per (transition, branch)."""
    return [Check(name=f"witness:{t}:{b}:N={PAGES}", kind="z3-witness", invariant="REACHABILITY", transition=t,
                  bound=f"N={PAGES}; {zm.SCOPE}", run=lambda t=t, fn=fn: reachable(t, fn))  # type: ignore[misc]
            for t, branches in BRANCHES.items() for b, fn in branches.items()]


# --- encodings cut down to one branch: each still proves every theorem, a witness must fail ---

def _never_fits(s: zm.ManagerSym, a: zm.ReqArgs, tag: str) -> zm.MStep:
    step = zm.allocate_slots(s, a, tag)
    return replace(step, post=s, result=(z3.BoolVal(False),) + tuple(z3.IntVal(NONE) for _ in step.result[1:]))


def _never_caches(s: zm.ManagerSym, a: zm.ReqArgs, tag: str) -> zm.MStep:
    step = zm.allocate_slots(s, a, tag)
    return replace(step, post=zm.ite(step.result[0], replace(step.post, key=s.key), s))


def _never_hits(s: zm.ManagerSym, a: zm.ReqArgs, tag: str) -> zm.MStep:
    return zm.lookup(s, a, tag, max_tokens=lambda _: z3.IntVal(0))


_CUT_ENCODINGS: tuple[tuple[str, str, zm.StepFn], ...] = (
    ("allocate_never_fits", "manager.allocate_slots", _never_fits),
    ("allocate_never_caches", "manager.allocate_slots", _never_caches),
    ("lookup_never_hits", "manager.lookup", _never_hits),
)


def _detector(transition: str, encoding: zm.StepFn) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        return [f"witness:{transition}:{b}:N={PAGES}: REACHABILITY" for b, fn in BRANCHES[transition].items()
                if not reachable(transition, fn, encoding).ok]
    return detect


def mutants() -> list[Mutant]:
    """Encodings cut down to one branch, named ``spec:witness-<cut>``: caught by a witness."""
    return [Mutant(name=f"spec:witness-{name}", kind="spec", invariant="REACHABILITY",
                   description=f"{transition} encoding reduced to one branch ({name.replace('_', ' ')})",
                   detect=_detector(transition, encoding))
            for name, transition, encoding in _CUT_ENCODINGS]
