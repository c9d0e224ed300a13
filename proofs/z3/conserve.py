"""INV-CONSERVE and INV-USAGE for every pool size: the counting invariants, proved unbounded.

`verikv.proofs.z3.pool` proves the counting invariants only for fixed N (a count of pages is a sum of N
terms). Here the held pages are *enumerated* by a ghost sequence, as the free pages already
are by the free list: ``held[0..hlen)`` lists, without repetition, exactly the pages
``p >= 1`` with ``ref[p] > 0`` (position map ``hpos``). With INV-FREE-IFF-ZERO and
INV-FREE-DISTINCT (the free list enumerates exactly the pages with ``ref = 0``, proved
unbounded in `verikv.proofs.z3.pool`), ``hlen`` is the number of held pages and ``flen`` the number of free
ones, so INV-CONSERVE is ``flen + hlen = N - 1`` (the one step outside Z3: a set enumerated
without repetition has the enumeration's length). INV-USAGE follows in real arithmetic.

Each pool transition (per list element, as in `verikv.proofs.z3.pool`) moves the ghost the only way the
spec allows: a page whose count leaves 0 is appended, a page whose count reaches 0 is
removed (the last entry takes its slot). Any other change of a page's held status, or a
free-list length that does not move in step, breaks a conjunct.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from verikv.proofs.mutants import spec as spec_mutants
from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.proofs.z3 import pool as zp
from verikv.proofs.z3.common import NONE, Conjuncts, Mode, Obligation, Theorem, solve

UNBOUNDED = Mode(None)
ELEMENT_TRANSITIONS = {"pool.allocate", "pool.touch", "pool.free"}
SCOPE = "every pool size N; per element for list arguments; held pages enumerated by a ghost sequence"


@dataclass(frozen=True)
class Held:
    """Ghost: the held pages ``seq[0..length)``, and each page's position (NONE if not held)."""

    seq: z3.ArrayRef
    pos: z3.ArrayRef
    length: z3.ArithRef


def held_vars(tag: str) -> Held:
    ii = (z3.IntSort(), z3.IntSort())
    return Held(z3.Array(f"{tag}.held", *ii), z3.Array(f"{tag}.hpos", *ii), z3.Int(f"{tag}.hlen"))


def usage(s: zp.PoolSym, null_counted: bool = False) -> z3.ArithRef:
    """`spec.pool.usage`: ``1 - free / (N - 1)``, 0.0 for a pool with no usable page
    (``null_counted``, for mutants only: divides by N)."""
    usable = s.n if null_counted else s.n - 1
    return z3.If(usable <= 0, z3.RealVal(0), 1 - z3.ToReal(s.flen) / z3.ToReal(usable))


def invariants(s: zp.PoolSym, h: Held, null_counted: bool = False) -> dict[str, Conjuncts]:
    """INV-CONSERVE (the held enumeration and the count) and INV-USAGE, as named conjuncts."""
    f = UNBOUNDED.forall
    held_fraction = z3.If(s.n - 1 <= 0, z3.RealVal(0), z3.ToReal(h.length) / z3.ToReal(s.n - 1))
    u = usage(s, null_counted)
    return {
        "INV-CONSERVE": [
            ("held-entries", f("ci", 0, h.length, lambda i: z3.And(1 <= h.seq[i], h.seq[i] < s.n, s.ref[h.seq[i]] > 0,
                                                                  h.pos[h.seq[i]] == i), lambda i: h.seq[i])),
            ("held-iff-positive", f("cp", 1, s.n, lambda p: (h.pos[p] != NONE) == (s.ref[p] > 0), lambda p: h.pos[p])),
            ("held-positions", f("cq", 0, s.n, lambda p: z3.Or(h.pos[p] == NONE, z3.And(
                0 <= h.pos[p], h.pos[p] < h.length, h.seq[h.pos[p]] == p)), lambda p: h.pos[p])),
            ("held-length-nonneg", h.length >= 0),
            ("null-not-held", h.pos[0] == NONE),
            ("free-plus-held", s.flen + h.length == s.n - 1),
        ],
        "INV-USAGE": [
            ("usage-is-held-fraction", u == held_fraction),
            ("idle-is-zero", z3.Implies(h.length == 0, u == 0)),
            ("within-0-1", z3.And(0 <= u, u <= 1)),
        ],
    }


def _moved(s: zp.PoolSym, post: zp.PoolSym, h: Held, page: z3.ArithRef, active: z3.BoolRef,
           tag: str) -> tuple[Held, z3.BoolRef]:
    """The ghost after one element: ``page`` appended if its count left 0, removed if it reached 0."""
    new = held_vars(tag)
    joins = z3.And(active, 1 <= page, page < s.n, s.ref[page] == 0, post.ref[page] > 0)
    leaves = z3.And(active, 1 <= page, page < s.n, s.ref[page] > 0, post.ref[page] == 0)
    slot, last = h.pos[page], h.seq[h.length - 1]
    defs = z3.And(
        new.seq == z3.If(joins, z3.Store(h.seq, h.length, page), z3.If(leaves, z3.Store(h.seq, slot, last), h.seq)),
        new.pos == z3.If(joins, z3.Store(h.pos, page, h.length),
                         z3.If(leaves, z3.Store(z3.Store(h.pos, last, slot), page, NONE), h.pos)),
        new.length == z3.If(joins, h.length + 1, z3.If(leaves, h.length - 1, h.length)))
    return new, defs


def _element(transition: str, step: zp.Step, a: zp.PoolArgs) -> tuple[z3.ArithRef, z3.BoolRef]:
    """The one page whose count the element may move, and whether the element acts."""
    if transition == "pool.allocate":
        return step.result[0], step.result[0] != NONE
    if transition in ("pool.touch", "pool.free"):
        return a.pages[0], a.m > 0
    return z3.IntVal(NONE), z3.BoolVal(False)


def _at_page(s: zp.PoolSym, h: Held, page: z3.ArithRef) -> z3.BoolRef:
    """The quantified ghost conjuncts instantiated at the element's page: implied by them, so
    the hypotheses say no more, but stated because whether the solver finds these instances by
    itself varies (z3-solver 5.4.1 answered "unknown" on ``pool.free``'s held-length goal
    depending on what the process had built before)."""
    return z3.Implies(z3.And(1 <= page, page < s.n), z3.And(
        (h.pos[page] != NONE) == (s.ref[page] > 0),
        z3.Or(h.pos[page] == NONE, z3.And(0 <= h.pos[page], h.pos[page] < h.length, h.seq[h.pos[page]] == page))))


def _hint(s: zp.PoolSym, h: Held, held_refs: int = 1) -> z3.BoolRef:
    """`verikv.proofs.z3.pool.is_witness` (page 1 held ``held_refs`` times, 2 and 3 free) with the
    ghost listing page 1."""
    return z3.And(zp.is_witness(s, held_refs), h.length == 1, h.seq == z3.Store(z3.K(z3.IntSort(), z3.IntVal(0)), 0, 1),
                  h.pos == z3.Store(z3.K(z3.IntSort(), z3.IntVal(NONE)), 1, 0))


@dataclass(frozen=True)
class Setup:
    """One element of a transition with the ghost: pre-state, ghost, step, ghost after, hypotheses."""

    s: zp.PoolSym
    held: Held
    args: zp.PoolArgs
    step: zp.Step
    after: Held
    hypotheses: z3.BoolRef


def setup(transition: str, fn: zp.StepFn, null_counted: bool = False) -> Setup:
    """Inv(s) ∧ Ghost(s) ∧ Pre ∧ Trans ∧ GhostStep (``pool.init``: Pre ∧ Init, no ghost before)."""
    s, h, a = zp.pool_vars("s", UNBOUNDED), held_vars("s"), zp.pool_args("a", zp.THEOREM_ELEMENTS)
    step = fn(s, a, UNBOUNDED, "t")
    if transition == "pool.init":
        after = held_vars("t.ghost")
        base = zp.well_formed(s, UNBOUNDED)
        ghost = z3.And(after.length == 0, after.pos == z3.K(z3.IntSort(), z3.IntVal(NONE)))
    else:
        page, active = _element(transition, step, a)
        after, ghost = _moved(s, step.post, h, page, active, "t.ghost")
        base = z3.And(zp.well_formed(s, UNBOUNDED), zp.holds(s, UNBOUNDED),
                      *[c for _, c in invariants(s, h, null_counted)["INV-CONSERVE"]], _at_page(s, h, page))
    return Setup(s, h, a, step, after, z3.And(base, step.pre, step.defs, ghost))


def obligation(transition: str, invariant: str, fn: zp.StepFn, null_counted: bool = False) -> Obligation:
    """The setup's hypotheses ⇒ ``invariant`` of the successor and its ghost."""
    st = setup(transition, fn, null_counted)
    goals = [(f"{invariant}[{name}]", c) for name, c in invariants(st.step.post, st.after, null_counted)[invariant]]
    return Obligation(st.hypotheses, goals,
                      lambda model: zp.explain(model, transition, st.s, st.args, st.step, UNBOUNDED),
                      witness_hint=_hint(st.s, st.held))


BRANCHES: dict[str, dict[str, Callable[[Setup], z3.BoolRef]]] = {
    "pool.allocate": {"a-page-becomes-held": lambda st: st.after.length == st.held.length + 1},
    "pool.touch": {"a-free-page-becomes-held": lambda st: st.after.length == st.held.length + 1,
                   "a-held-page-gains-a-reference": lambda st: z3.And(st.args.m > 0, st.after.length == st.held.length,
                                                                      st.s.ref[st.args.pages[0]] > 0)},
    "pool.free": {"a-page-becomes-free": lambda st: st.after.length == st.held.length - 1,
                  "a-shared-page-stays-held": lambda st: z3.And(st.args.m > 0, st.after.length == st.held.length)},
}
"""Per element transition, the ways the held set can move: each must be reachable."""


def witness(transition: str, branch: str) -> Outcome:
    """The branch is taken by some state satisfying the hypotheses (found in the hint's small world)."""
    st = setup(transition, zp.TRANSITIONS[transition])
    refs = 2 if "shared" in branch else 1
    verdict, solver = solve(st.hypotheses, _hint(st.s, st.held, refs), BRANCHES[transition][branch](st))
    if verdict == z3.sat:
        return Outcome("proved", "witness:\n" + zp.explain(solver.model(), transition, st.s, st.args, st.step,
                                                           UNBOUNDED), vacuity_checked=True)
    if verdict == z3.unsat:
        return Outcome("vacuous", "not taken in the witness world (N = 4, page 1 held, 2 and 3 free)",
                       vacuity_checked=True)
    return Outcome("unknown", solver.reason_unknown(), vacuity_checked=True)


def theorems(transitions: dict[str, zp.StepFn] | None = None, null_counted: bool = False) -> list[Theorem]:
    """Every pool transition x {INV-CONSERVE, INV-USAGE}, unbounded."""
    table = {**zp.TRANSITIONS, **(transitions or {})}
    return [Theorem(name, inv, False,
                    lambda mode, name=name, inv=inv, fn=fn: obligation(name, inv, fn, null_counted),  # type: ignore[misc]
                    scope="per element" if name in ELEMENT_TRANSITIONS else "")
            for name, fn in table.items() for inv in ("INV-CONSERVE", "INV-USAGE")]


def checks() -> list[Check]:
    """Registry provider: the unbounded counting theorems."""
    witnesses = [Check(f"witness:{transition}:{branch}", "z3-witness", "REACHABILITY", transition,
                       "N=4 witness world of the unbounded INV-CONSERVE theorem",
                       lambda transition=transition, branch=branch: witness(transition, branch))  # type: ignore[misc]
                 for transition, branches in BRANCHES.items() for branch in branches]
    return [t.check() for t in theorems()] + witnesses


# --- mutants: broken relations the bounded theorems catch must fail the unbounded ones too ---

_BROKEN: tuple[tuple[str, str, zp.StepFn], ...] = (
    ("free-without-rejoin", "pool.free", spec_mutants.free_without_rejoin),
    ("allocate-without-ref", "pool.allocate", spec_mutants.allocate_without_ref),
    ("touch-without-unlink", "pool.touch", spec_mutants.touch_without_unlink),
)


def refuted(transition: str, invariant: str, fn: zp.StepFn, null_counted: bool = False) -> list[str]:
    """The theorem's name if a counterexample exists in the small world of the vacuity hint (N = 4,
    see `_hint`): a concrete refutation, found at once where quantified model search stalls."""
    ob = obligation(transition, invariant, fn, null_counted)
    for _, goal in ob.goals:
        verdict, _ = solve(ob.hypotheses, ob.witness_hint, z3.Not(goal))
        if verdict == z3.sat:
            return [f"{transition}/{invariant}"]
    return []


def mutants() -> list[Mutant]:
    """Spec mutants ``spec:conserve-*`` (INV-CONSERVE) and ``spec:usage-counts-null-page``."""
    out = [Mutant(f"spec:conserve-{name}", "spec", "INV-CONSERVE", f"{transition}: {(fn.__doc__ or '').strip()}",
                  lambda transition=transition, fn=fn: refuted(transition, "INV-CONSERVE", fn))  # type: ignore[misc]
           for name, transition, fn in _BROKEN]
    out.append(Mutant("spec:usage-counts-null-page", "spec", "INV-USAGE",
                      "usage divides by N instead of N - 1 (the null page counted as usable)",
                      lambda: refuted("pool.free", "INV-USAGE", zp.free, null_counted=True)))
    return out
