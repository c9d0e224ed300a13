"""Shared machinery of the Z3 theorems: the two modes, range quantifiers, the prover and theorems.

A theorem ``<transition>/<INVARIANT>`` states Inv ∧ Pre ∧ Trans ⇒ Inv′ for one
invariant, split into its named conjuncts (one solver query each, so a failure names the
broken fact). It runs in one of two modes:

* **unbounded**: the number of pages N is a symbolic integer and every "for all pages /
  positions / keys" is a quantifier with an explicit trigger (array-property style);
* **bounded** ``N=3..8``: N is each fixed value in turn and quantifiers are expanded into
  conjunctions; this is where counting facts (INV-CONSERVE, INV-USAGE) are proved, and where a
  wrong theorem yields a small, readable counterexample instead of ``unknown``.

Before any goal, the hypotheses alone are checked satisfiable (the vacuity check): a theorem
whose premises are contradictory reports "vacuous", a failure. ``unknown`` (including the
per-query resource limit, deterministic whatever the machine's load, and a wall-clock
backstop) is a failure too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import z3

from verikv.proofs.runner.registry import Check, Outcome

NONE = -1                   # "no page" / "no key" in every encoding
TRUE = z3.BoolVal(True)     # one shared term: the default of "no extra constraint" fields
QUERY_RLIMIT = 200_000_000   # per query, in Z3's deterministic resource units (heaviest measured: 15M)
QUERY_TIMEOUT_MS = 60_000    # wall-clock backstop per query; either limit gives "unknown", a failure
BOUNDED_SIZES = tuple(range(3, 6))  # N=6..8 measured at up to 20 s per theorem: over the CI budget
BOUNDED_LABEL = f"N={BOUNDED_SIZES[0]}..{BOUNDED_SIZES[-1]}"

Conjuncts = list[tuple[str, z3.BoolRef]]


@dataclass(frozen=True)
class Mode:
    """How quantifiers are encoded: ``size=None`` is symbolic N, an int is that fixed N.

    In bounded mode keys are drawn from ``0..size-1``: a pool of N pages holds at most N-1
    keyed pages, so together with one argument key N distinct key values cover every
    equality pattern (keys are compared only for equality).
    """

    size: int | None

    @property
    def bounded(self) -> bool:
        return self.size is not None

    @property
    def label(self) -> str:
        return "unbounded" if self.size is None else f"N={self.size}"

    def num_pages(self, name: str) -> z3.ArithRef:
        """The page count: a fresh Int, or the fixed size."""
        return z3.Int(name) if self.size is None else z3.IntVal(self.size)

    def forall(self, name: str, lo: z3.ArithRef | int, hi: z3.ArithRef | int,
               body: Callable[[z3.ArithRef], z3.BoolRef],
               trigger: Callable[[z3.ArithRef], z3.ExprRef]) -> z3.BoolRef:
        """∀x. lo ≤ x < hi ⇒ body(x); in bounded mode x ranges over 0..size-1 (hi ≤ size)."""
        if self.size is None:
            x = z3.Int(name)
            return z3.ForAll([x], z3.Implies(z3.And(lo <= x, x < hi), body(x)), patterns=[trigger(x)])
        return z3.And([z3.Implies(z3.And(lo <= i, i < hi), body(z3.IntVal(i))) for i in range(self.size)])

    def exists(self, name: str, lo: z3.ArithRef | int, hi: z3.ArithRef | int,
               body: Callable[[z3.ArithRef], z3.BoolRef]) -> z3.BoolRef:
        """∃x. lo ≤ x < hi ∧ body(x), with the same domain rule as `forall`."""
        if self.size is None:
            x = z3.Int(name)
            return z3.Exists([x], z3.And(lo <= x, x < hi, body(x)))
        return z3.Or([z3.And(lo <= i, i < hi, body(z3.IntVal(i))) for i in range(self.size)])

    def forall_keys(self, name: str, body: Callable[[z3.ArithRef], z3.BoolRef],
                    trigger: Callable[[z3.ArithRef], z3.ExprRef]) -> z3.BoolRef:
        """∀k ≥ 0 (every real key); in bounded mode k ranges over the key domain 0..size-1."""
        if self.size is None:
            k = z3.Int(name)
            return z3.ForAll([k], z3.Implies(k >= 0, body(k)), patterns=[trigger(k)])
        return z3.And([body(z3.IntVal(k)) for k in range(self.size)])

    def define(self, array: z3.ArrayRef, body: Callable[[z3.ArithRef], z3.ExprRef]) -> z3.BoolRef:
        """``array[x] = body(x)`` for every index: a λ-term, or (bounded) for x in 0..size.

        Bounded mode defines the array on the indices a state of that size can read (pages
        0..size-1, free-list positions 0..size); outside them it is left unconstrained.
        """
        if self.size is None:
            x = z3.Int("x")
            return array == z3.Lambda([x], body(x))
        return z3.And([array[i] == body(z3.IntVal(i)) for i in range(self.size + 1)])

    def key_domain(self, key: z3.ArithRef) -> z3.BoolRef:
        """A real key of this mode: ``k >= 0`` (and ``k < size`` when bounded)."""
        return key >= 0 if self.size is None else z3.And(key >= 0, key < self.size)


def count(terms: Iterable[z3.BoolRef]) -> z3.ArithRef:
    """How many of the (finitely many) conditions hold: a bounded-mode counting term."""
    return z3.Sum([z3.If(t, 1, 0) for t in terms] or [z3.IntVal(0)])


@dataclass(frozen=True)
class Obligation:
    """What one mode of a theorem asks the solver: hypotheses, named goals, and a model printer.

    ``witness_hint`` narrows the vacuity check to a small world (e.g. N = 3) first: quantified
    hypotheses are hard to satisfy in general, easy in a small world, and a model of the
    narrowed hypotheses is a model of the hypotheses. Only if that fails is the plain
    hypothesis set checked, where unsat means vacuous.
    """

    hypotheses: z3.BoolRef
    goals: Conjuncts
    explain: Callable[[z3.ModelRef], str]
    witness_hint: z3.BoolRef = TRUE


def solve(*formulas: z3.BoolRef) -> tuple[z3.CheckSatResult, z3.Solver]:
    """One query on a fresh solver (non-incremental solving preprocesses λ-terms far better)."""
    solver = z3.Solver()
    solver.set("rlimit", QUERY_RLIMIT)
    solver.set("timeout", QUERY_TIMEOUT_MS)
    solver.add(*formulas)
    return solver.check(), solver


def discharge(ob: Obligation) -> Outcome:
    """Vacuity check, then one query per goal conjunct; the first failure is the outcome."""
    premise, solver = solve(ob.hypotheses, ob.witness_hint)
    if premise != z3.sat:
        premise, solver = solve(ob.hypotheses)
    if premise == z3.unsat:
        return Outcome("vacuous", "the hypotheses are unsatisfiable: the theorem would hold vacuously",
                       vacuity_checked=True)
    if premise != z3.sat:
        return Outcome("unknown", f"vacuity check: {solver.reason_unknown()}", vacuity_checked=True)
    for name, goal in ob.goals:
        verdict, solver = solve(ob.hypotheses, z3.Not(goal))
        if verdict == z3.sat:
            return Outcome("failed", f"violated conjunct: {name}\n{ob.explain(solver.model())}",
                           vacuity_checked=True)
        if verdict != z3.unsat:
            return Outcome("unknown", f"conjunct {name}: {solver.reason_unknown()}", vacuity_checked=True)
    return Outcome("proved", "", vacuity_checked=True)


@dataclass(frozen=True)
class Theorem:
    """``<transition>/<invariant>`` in one mode family: ``bounded`` runs every size of BOUNDED_SIZES.

    ``build(mode)`` returns the obligation for that mode; ``assumption`` is stated in the
    outcome detail of a proved theorem (e.g. the ideal-hash assumption of INV-HIT-SAFE);
    ``scope`` qualifies the bound (e.g. "per element" for list arguments proved by induction).
    """

    transition: str
    invariant: str
    bounded: bool
    build: Callable[[Mode], Obligation]
    assumption: str = ""
    scope: str = ""

    @property
    def name(self) -> str:
        return f"{self.transition}/{self.invariant}" + (f":{BOUNDED_LABEL}" if self.bounded else "")

    @property
    def bound(self) -> str:
        base = BOUNDED_LABEL if self.bounded else "unbounded"
        return f"{base}, {self.scope}" if self.scope else base

    def run(self) -> Outcome:
        """Discharge the obligation in every mode of this theorem; stop at the first failure."""
        modes = [Mode(n) for n in BOUNDED_SIZES] if self.bounded else [Mode(None)]
        for mode in modes:
            outcome = discharge(self.build(mode))
            if not outcome.ok:
                return Outcome(outcome.status, f"[{mode.label}] {outcome.detail}", outcome.vacuity_checked)
        return Outcome("proved", "; ".join(filter(None, [self.scope, self.assumption])), vacuity_checked=True)

    def check(self) -> Check:
        """This theorem as a registry Check."""
        return Check(self.name, "z3", self.invariant, self.transition, self.bound, self.run)


def failed_theorems(theorems: Sequence[Theorem]) -> list[str]:
    """Names of the theorems that do not prove (what a spec mutant's detector reports)."""
    return [t.name for t in theorems if not t.run().ok]


def show(model: z3.ModelRef, expr: z3.ExprRef) -> str:
    """A model value as plain text (ints as ints, ``NONE`` as ``-``)."""
    value = model.eval(expr, model_completion=True)
    if z3.is_int_value(value):
        return "-" if value.as_long() == NONE else str(value.as_long())
    return str(value)


def as_int(model: z3.ModelRef, expr: z3.ExprRef) -> int:
    """A model's integer value of ``expr`` (completing unconstrained parts)."""
    return model.eval(expr, model_completion=True).as_long()
