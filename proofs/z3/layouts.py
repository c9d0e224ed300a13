"""Manager-level Z3 theorems for every layout: the rules windows, hybrids, EAGLE, DP and lookahead add.

`verikv.proofs.z3.manager` proves the manager's transitions for one full-attention group within a small
bound. What the other layouts add is a handful of rules, each a pure function of a few integers
(and, for the hit rules, of which pages are cached), so each is proved here *unbounded*: for
every page size, window, chunk, length, pool size and number of groups, and for every pattern
of cached pages (an array). Each rule is encoded as the spec writes it (`verikv.spec.manager`,
`verikv.spec.hit_rules`); `encoding_checks` compares the arithmetic encodings with the spec's
Python functions on concrete values.

The hybrid coordinator's fixed point is proved for *any number of groups* in two layers: each
group rule (full, sliding, chunked; Mamba's is the constant 0) is deflationary (never longer
than the length it is offered), monotone, and returns its longest acceptable hit; and for any
K >= 1 groups whose rules are deflationary and monotone (uninterpreted functions with those
two properties), one step of the iteration never goes below a common hit (the loop invariant,
inductive over any number of steps), a pass only shortens (induction step stated as a
conjunct), and a pass that leaves the length unchanged ends at a length every group accepts.
Together: the coordinator returns the longest common hit.

Every theorem has the vacuity check of `verikv.proofs.z3.common.discharge`, a reachability witness per
branch (``witness:<transition>:<branch>``: the hypotheses and the branch are satisfiable) and
at least one spec mutant (``spec:layout-<fault>``, a one-line change of the encoding) that the
theorem is shown to catch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import z3

from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.proofs.z3.common import QUERY_RLIMIT, QUERY_TIMEOUT_MS, Conjuncts, Obligation, discharge

Faults = frozenset[str]
NO_FAULT: Faults = frozenset()


@dataclass(frozen=True)
class Encoded:
    """One theorem's hypotheses, goals (named conjuncts), branches to witness, and the terms a
    counterexample shows."""

    hypotheses: z3.BoolRef
    goals: Conjuncts
    branches: dict[str, z3.BoolRef]
    shown: tuple[z3.ExprRef, ...]


@dataclass(frozen=True)
class LayoutTheorem:
    """``<transition>/<invariant>``, unbounded; ``faults`` names the mutants of its encoding."""

    transition: str
    invariant: str
    scope: str
    build: Callable[[Faults], Encoded]
    faults: dict[str, str] = field(default_factory=dict)
    """Mutant fault name -> what the broken encoding does."""

    @property
    def name(self) -> str:
        return f"{self.transition}/{self.invariant}"

    def prove(self, faults: Faults = NO_FAULT) -> Outcome:
        enc = self.build(faults)
        outcome = discharge(Obligation(enc.hypotheses, enc.goals, lambda model: _explain(model, enc)))
        if outcome.ok:
            return Outcome("proved", f"unbounded: {self.scope}", vacuity_checked=True)
        return outcome

    def witness(self, branch: str, faults: Faults = NO_FAULT) -> Outcome:
        enc = self.build(faults)
        solver = z3.Solver()
        solver.set("rlimit", QUERY_RLIMIT)
        solver.set("timeout", QUERY_TIMEOUT_MS)
        solver.add(enc.hypotheses, enc.branches[branch])
        verdict = solver.check()
        if verdict == z3.sat:
            return Outcome("proved", "witness: " + _explain(solver.model(), enc), vacuity_checked=True)
        if verdict == z3.unsat:
            return Outcome("vacuous", "no case takes this branch: the theorem says nothing about it",
                           vacuity_checked=True)
        return Outcome("unknown", solver.reason_unknown(), vacuity_checked=True)

    def witness_name(self, branch: str) -> str:
        return f"witness:{self.transition}:{branch}"

    def checks(self) -> list[Check]:
        theorem = Check(self.name, "z3", self.invariant, self.transition, f"unbounded: {self.scope}",
                        lambda: self.prove())
        witnesses = [Check(self.witness_name(b), "z3-witness", "REACHABILITY", self.transition,
                           f"unbounded: {self.scope}", lambda b=b: self.witness(b))  # type: ignore[misc]
                     for b in self.build(NO_FAULT).branches]
        return [theorem, *witnesses]

    def detect(self, fault: str) -> list[str]:
        """The checks of this theorem that fail with ``fault`` planted in the encoding."""
        faults = frozenset({fault})
        failed = [] if self.prove(faults).ok else [self.name]
        return failed + [self.witness_name(b) for b in self.build(faults).branches
                         if not self.witness(b, faults).ok]


def _explain(model: z3.ModelRef, enc: Encoded) -> str:
    values = ", ".join(f"{t}={model.eval(t, model_completion=True)}" for t in enc.shown)
    return values[:1500]


def _ints(names: str) -> list[z3.ArithRef]:
    return list(z3.Ints(names))


def cdiv(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """Ceiling division for ``b >= 1`` (Z3's ``/`` on Ints floors for a positive divisor)."""
    return (a + b - 1) / b


# --- window-free rules: `spec.manager.skipped_before` ----------------------------------------

def skipped_sliding(n: z3.ArithRef, window: z3.ArithRef, page: z3.ArithRef, faults: Faults = NO_FAULT) -> z3.ArithRef:
    """``max(0, (n - window + 1) // page_size)`` (fault ``sliding-one-token-too-few``: + 2)."""
    x = n - window + (2 if "sliding-one-token-too-few" in faults else 1)
    return z3.If(x <= 0, 0, x / page)


def skipped_chunked(n: z3.ArithRef, chunk: z3.ArithRef, page: z3.ArithRef, faults: Faults = NO_FAULT) -> z3.ArithRef:
    """``(n // chunk) * chunk // page_size`` (fault ``chunked-boundary-one-token-early``: n + 1)."""
    m = n + 1 if "chunked-boundary-one-token-early" in faults else n
    return (m / chunk) * chunk / page


def _window_free(kind: str, faults: Faults) -> Encoded:
    """Pages before `skipped_before(n)` are attended by no token at or after ``n``; page
    `skipped_before(n)` is attended by token ``n`` (nothing more could be freed); and the
    count never decreases as ``n`` grows (a freed page is never needed again)."""
    n, n2, span, page, j, t = _ints("n n2 span page j t")
    if kind == "sliding":
        skip = lambda m: skipped_sliding(m, span, page, faults)
        first_attended = lambda m: m - span + 1           # the window of token m starts here
    else:
        skip = lambda m: skipped_chunked(m, span, page, faults)
        first_attended = lambda m: (m / span) * span       # the chunk of token m starts here
    s = skip(n)
    hyp = z3.And(n >= 0, span >= 1, page >= 1)
    goals = [
        ("freed-pages-unattended", z3.Implies(z3.And(0 <= j, j < s, t >= n), (j + 1) * page - 1 < first_attended(t))),
        ("first-kept-page-attended", z3.Implies(s * page <= n, (s + 1) * page - 1 >= first_attended(n))),
        ("monotone-in-n", z3.Implies(n2 >= n, s <= skip(n2))),
    ]
    branches = {"frees-pages": s > 0, "frees-nothing": z3.And(s == 0, n > 0),
                "span-wider-than-page": z3.And(span > page, s > 0), "span-within-page": z3.And(span <= page, s > 0)}
    if kind == "chunked":
        branches["chunk-not-page-aligned"] = z3.And(span % page != 0, s > 0)
    return Encoded(hyp, goals, branches, (n, n2, span, page, j, t, s))


# --- group hit rules: `spec.hit_rules` -------------------------------------------------------

HIT = z3.Array("hit", z3.IntSort(), z3.BoolSort())
"""Which pages of the request are cached (page j at index j), any pattern."""


def _all_hit(lo: z3.ArithRef, hi: z3.ArithRef, tag: str) -> z3.BoolRef:
    i = z3.Int(f"{tag}.i")
    return z3.ForAll([i], z3.Implies(z3.And(lo <= i, i < hi), HIT[i]), patterns=[HIT[i]])


def _prefix_run(start: z3.ArithRef, limit: z3.ArithRef, tag: str) -> tuple[z3.ArithRef, z3.BoolRef]:
    """`hit_rules._prefix_run`: the first index >= start (and <= limit) that is not a hit."""
    end = z3.Int(f"{tag}.end")
    return end, z3.And(start <= end, end <= limit, _all_hit(start, end, tag),
                       z3.Implies(end < limit, z3.Not(HIT[end])))


@dataclass(frozen=True)
class RuleEnc:
    """One group rule applied at length ``length``: its hit length in tokens and definitions."""

    length: z3.ArithRef
    defs: z3.BoolRef
    tokens: z3.ArithRef
    limit: z3.ArithRef
    branch: dict[str, z3.BoolRef]


def full_rule(length: z3.ArithRef, page: z3.ArithRef, tag: str, faults: Faults = NO_FAULT) -> RuleEnc:
    """`full_rule`: the run of hits from page 0, at most ``length // page_size`` pages
    (fault ``full-cap-off-by-one``: one page more)."""
    limit = length / page + (1 if "full-cap-off-by-one" in faults else 0)
    end, defs = _prefix_run(z3.IntVal(0), limit, tag)
    return RuleEnc(length, defs, end * page, limit, {"stops-at-a-miss": end < limit, "capped": end == limit})


def sliding_need(window: z3.ArithRef, page: z3.ArithRef) -> z3.ArithRef:
    """``max(1, cdiv(window - 1, page_size))``: pages covering the window of the next token."""
    return z3.If(window <= 1, 1, cdiv(window - 1, page))


def sliding_rule(length: z3.ArithRef, page: z3.ArithRef, window: z3.ArithRef, tag: str,
                 faults: Faults = NO_FAULT) -> RuleEnc:
    """`sliding_rule`: the right-most run of ``need`` hits ending at or before the limit, else
    the run from page 0. A window end ``x`` that is not all hits has a miss ``miss(x)`` inside
    it (a Skolem function: the certificate that no later window qualifies). Fault
    ``sliding-leftmost-window``: the left-most qualifying window instead."""
    limit, need = length / page, sliding_need(window, page)
    found, e = z3.Bool(f"{tag}.found"), z3.Int(f"{tag}.e")
    miss = z3.Function(f"{tag}.miss", z3.IntSort(), z3.IntSort())
    x = z3.Int(f"{tag}.x")

    def no_window_at(x: z3.ArithRef) -> z3.BoolRef:
        return z3.And(x - need <= miss(x), miss(x) < x, z3.Not(HIT[miss(x)]))
    others = z3.And(need <= x, x < e) if "sliding-leftmost-window" in faults else z3.And(e < x, x <= limit)
    prefix, prefix_defs = _prefix_run(z3.IntVal(0), limit, f"{tag}.p")
    defs = z3.And(prefix_defs, z3.If(
        found,
        z3.And(need <= e, e <= limit, _all_hit(e - need, e, f"{tag}.w"),
               z3.ForAll([x], z3.Implies(others, no_window_at(x)), patterns=[miss(x)])),
        z3.ForAll([x], z3.Implies(z3.And(need <= x, x <= limit), no_window_at(x)), patterns=[miss(x)])))
    end = z3.If(found, e, prefix)
    return RuleEnc(length, defs, end * page, limit,
                   {"window-found": found, "no-window-prefix-hit": z3.And(z3.Not(found), prefix > 0)})


def chunked_rule(length: z3.ArithRef, page: z3.ArithRef, chunk: z3.ArithRef, tag: str,
                 faults: Faults = NO_FAULT) -> RuleEnc:
    """`chunked_rule`: nulls before the current chunk's first page, then the run of hits
    (fault ``chunked-rule-chunk-one-token-early``: the current chunk of ``length - 1``)."""
    limit = length / page
    m = length - 1 if "chunked-rule-chunk-one-token-early" in faults else length
    first = (m / chunk) * chunk / page
    end, defs = _prefix_run(first, limit, tag)
    return RuleEnc(length, defs, end * page, limit,
                   {"earlier-chunks-null": z3.And(first > 0, end > first),
                    "hits-in-first-chunk": z3.And(first == 0, end > 0)})


def _rule(kind: str, faults: Faults) -> Encoded:
    """The rule is deflationary and monotone (what the fixed point needs) and returns the
    longest hit it accepts: no qualifying end up to the limit lies beyond it."""
    page, span, length, length2, x = _ints("page span length length2 x")

    def apply(at: z3.ArithRef, tag: str) -> RuleEnc:
        if kind == "full":
            return full_rule(at, page, tag, faults)
        if kind == "sliding":
            return sliding_rule(at, page, span, tag, faults)
        return chunked_rule(at, page, span, tag, faults)
    a, b = apply(length, "a"), apply(length2, "b")
    hyp = z3.And(page >= 1, span >= 1, length >= 0, length2 >= 0, a.defs, b.defs)
    goals = [("deflationary", a.tokens <= length),
             ("monotone", z3.Implies(length <= length2, a.tokens <= b.tokens))]
    if kind == "full":
        acceptable = z3.And(0 <= x, x <= a.limit, _all_hit(z3.IntVal(0), x, "acc"))
    elif kind == "sliding":
        need = sliding_need(span, page)
        acceptable = z3.And(need <= x, x <= a.limit, _all_hit(x - need, x, "acc"))
    else:
        first = (length / span) * span / page
        acceptable = z3.And(first <= x, x <= a.limit, _all_hit(first, x, "acc"))
    goals.append(("longest-acceptable", z3.Implies(acceptable, x * page <= a.tokens)))
    branches = {**a.branch, "length-grows-hit-grows": z3.And(length < length2, a.tokens < b.tokens)}
    return Encoded(hyp, goals, branches, (page, span, length, length2, a.tokens, b.tokens, x))


# --- the coordinator's fixed point, for any number of groups ---------------------------------

def _fixed_point(faults: Faults) -> Encoded:
    """K >= 1 groups, group g's rule ``F(g, L)`` any function (uninterpreted); ``seq[i]`` the
    length after the i-th rule application of a pass (``seq[i + 1] = F(i, seq[i])``). Each
    conjunct assumes only the instances of "deflationary" and "monotone" (the rule theorems)
    it uses, so it holds for every such family of rules.

    Conjuncts: (step) a step never goes below a length its group accepts at or below the
    current one: by induction over the steps of every pass, the result stays at least every
    common hit <= the start; (descends) the induction step of "every later length is at most
    every earlier one"; (exit) a pass that ends where it started (the spec's test) leaves every
    group at that length, so the result is itself a common hit; (start) rounding the start
    down to a multiple of the page sizes' lcm keeps every common hit (each is a multiple of
    every page size). Fault ``fixed-point-one-pass``: the loop stops after one pass whatever
    it did.
    """
    rule = z3.Function("F", z3.IntSort(), z3.IntSort(), z3.IntSort())
    seq = z3.Array("seq", z3.IntSort(), z3.IntSort())
    groups, i, common, g, unit, mx = _ints("K i common g unit max")
    j, k = _ints("j k")
    pass_defs = z3.And(groups >= 1, seq[0] >= 0,
                       z3.ForAll([k], z3.Implies(z3.And(0 <= k, k < groups), seq[k + 1] == rule(k, seq[k])),
                                 patterns=[seq[k + 1]]))

    def descends_to(at: z3.ArithRef) -> z3.BoolRef:
        return z3.ForAll([k], z3.Implies(z3.And(0 <= k, k <= at), seq[at] <= seq[k]), patterns=[seq[k]])
    every_prefix_descends = z3.ForAll([j, k], z3.Implies(z3.And(0 <= k, k <= j, j <= groups), seq[j] <= seq[k]),
                                      patterns=[z3.MultiPattern(seq[j], seq[k])])
    exits = z3.BoolVal(True) if "fixed-point-one-pass" in faults else seq[groups] == seq[0]
    step = z3.And(0 <= i, i < groups)
    goals = [
        ("step-keeps-common-hits", z3.Implies(
            z3.And(step, 0 <= common, common <= seq[i], rule(i, common) == common,
                   rule(i, common) <= rule(i, seq[i])),  # monotone at (common, seq[i])
            common <= seq[i + 1])),
        ("pass-descends", z3.Implies(
            z3.And(step, descends_to(i), rule(i, seq[i]) <= seq[i]),  # deflationary at seq[i]
            descends_to(i + 1))),
        ("exit-is-common-hit", z3.Implies(z3.And(0 <= g, g < groups, every_prefix_descends, exits),
                                          rule(g, seq[groups]) == seq[groups])),
        ("start-keeps-common-hits", z3.Implies(z3.And(unit >= 1, 0 <= common, common <= mx, common % unit == 0),
                                               common <= mx / unit * unit)),
    ]
    branches = {
        "a-pass-shortens-twice": z3.And(groups >= 2, seq[1] < seq[0], seq[2] < seq[1]),
        "a-stable-pass": z3.And(groups >= 2, seq[groups] == seq[0], seq[0] > 0),
    }
    return Encoded(pass_defs, goals, branches, (groups, i, g, common, seq[0], seq[1], seq[groups]))


# --- EAGLE: one page dropped, once ----------------------------------------------------------

def _eagle(faults: Faults) -> Encoded:
    """One full-attention group with EAGLE: a non-empty hit ``L1`` (the fixed point of the
    full rule, reached in one pass) is recomputed from ``L1 - page_size`` and ends exactly one
    page shorter. Faults: ``eagle-ignored`` (no drop), ``eagle-drops-twice``."""
    page, mx = _ints("page max")
    first = full_rule(mx, page, "first")
    l1 = first.tokens
    drop = 0 if "eagle-ignored" in faults else (2 if "eagle-drops-twice" in faults else 1)
    restart = l1 - drop * page
    again = full_rule(z3.If(restart >= 0, restart, 0), page, "again")
    hyp = z3.And(page >= 1, mx >= 0, first.defs, again.defs)
    goals = [("drops-exactly-one-page", z3.Implies(l1 > 0, again.tokens == l1 - page))]
    branches = {"hit-then-drop": l1 > page, "drop-to-empty": z3.And(l1 == page, again.tokens == 0),
                "no-hit": l1 == 0}
    return Encoded(hyp, goals, branches, (page, mx, l1, again.tokens))


# --- data-parallel shards: `spec.manager.shard_bounds` and the shard an allocation uses -------

def shard_lo(shard: z3.ArithRef, per: z3.ArithRef, faults: Faults = NO_FAULT) -> z3.ArithRef:
    """``max(1, shard * per)`` (fault ``dp-null-page-in-shard-0``: ``shard * per``)."""
    lo = shard * per
    return lo if "dp-null-page-in-shard-0" in faults else z3.If(lo >= 1, lo, 1)


def _shards(faults: Faults) -> Encoded:
    """For every pool size N and DP size dividing it: each shard is a page range inside the
    pool without the null page; shards are disjoint and together cover pages 1..N-1."""
    n, dp, a, b = _ints("N dp a b")
    per = n / dp
    lo = lambda s: shard_lo(s, per, faults)
    hi = lambda s: (s + 1) * per
    hyp = z3.And(dp >= 2, n >= dp, n % dp == 0, 0 <= a, a < dp, 0 <= b, b < dp)
    goals = [("null-page-excluded", lo(a) >= 1), ("inside-pool", hi(a) <= n),
             ("disjoint", z3.Implies(a < b, hi(a) <= lo(b))),
             ("contiguous", z3.Implies(a + 1 < dp, hi(a) == lo(a + 1))),
             ("covers-1-to-N", z3.And(lo(0) == 1, hi(dp - 1) == n))]
    branches = {"shard-0-has-pages": z3.And(a == 0, lo(a) < hi(a)), "shard-0-empty": per == 1,
                "later-shard": z3.And(a > 0, lo(a) < hi(a))}
    return Encoded(hyp, goals, branches, (n, dp, a, b))


def _shard_choice(faults: Faults) -> Encoded:
    """`allocate_slots` under DP: a request holding pages allocates in its own shard whatever
    the call's hint (and a decode step without DP arguments too); a new request takes the
    hint's shard. So every page a request holds lies in one shard. Faults:
    ``dp-hint-overrides-held-shard``, ``dp-decode-ignores-shard`` (no DP arguments: the whole
    pool)."""
    n, dp, held_shard, hint, q = _ints("N dp held_shard hint q")
    held, plain = z3.Bools("held plain_call")
    per = n / dp
    if "dp-hint-overrides-held-shard" in faults:
        used = hint
    else:
        used = z3.If(held, held_shard, hint)
    whole_pool = z3.And(plain, "dp-decode-ignores-shard" in faults)
    # pool.allocate within bounds (spec.pool: the first free page inside the range) hands out q
    in_used = z3.And(shard_lo(used, per) <= q, q < (used + 1) * per)
    taken = z3.If(whole_pool, z3.And(1 <= q, q < n), in_used)
    owner = z3.If(held, held_shard, hint)
    hyp = z3.And(dp >= 2, n >= dp, n % dp == 0, 0 <= held_shard, held_shard < dp, 0 <= hint, hint < dp,
                 z3.Implies(plain, held), taken)
    goals = [("new-page-in-owner-shard", z3.And(shard_lo(owner, per) <= q, q < (owner + 1) * per))]
    branches = {"held-request-other-hint": z3.And(held, hint != held_shard),
                "decode-without-dp-arguments": plain, "new-request": z3.Not(held)}
    return Encoded(hyp, goals, branches, (n, dp, held, held_shard, hint, plain, q))


# --- lookahead and delayed caching: what allocate_slots keys --------------------------------

def _lookahead(faults: Faults) -> Encoded:
    """`allocate_slots` allocates room for ``computed + new + lookahead`` tokens (capped at
    max_model_len) but keys only the pages whose tokens are all computed: up to ``min(computed
    + new, num_tokens)``; with ``delay_cache_pages`` none. So a page holding a lookahead slot
    is never keyed (INV-KEYED-COMPUTED). Fault ``lookahead-cached``: caches up to the slots."""
    page, computed, new, look, ntok, mml, cached, j = _ints("page computed new lookahead num_tokens max_model_len "
                                                            "num_cached j")
    delay = z3.Bool("delay")
    slots = z3.If(computed + new + look <= mml, computed + new + look, mml)
    upto = slots if "lookahead-cached" in faults else z3.If(computed + new <= ntok, computed + new, ntok)
    keyed = z3.And(z3.Not(delay), cached <= j, j < upto / page)
    hyp = z3.And(page >= 1, computed >= 0, new >= 1, look >= 0, computed + new <= mml, ntok >= 1,
                 computed <= ntok, 0 <= cached, cached * page <= computed)
    goals = [("keyed-pages-computed", z3.Implies(keyed, (j + 1) * page <= computed + new)),
             ("keyed-pages-allocated", z3.Implies(keyed, j < cdiv(slots, page)))]
    branches = {"lookahead-page-allocated": z3.And(look > 0, cdiv(slots, page) > (computed + new) / page),
                "keys-a-page": keyed, "delayed": z3.And(delay, new >= page)}
    return Encoded(hyp, goals, branches, (page, computed, new, look, ntok, mml, cached, j, delay))


# --- the catalogue --------------------------------------------------------------------------

THEOREMS: tuple[LayoutTheorem, ...] = (
    LayoutTheorem("manager.remove_skipped.sliding", "INV-WINDOW-LIVE",
                  "every n >= 0, window >= 1, page size >= 1",
                  lambda f: _window_free("sliding", f),
                  {"sliding-one-token-too-few": "the window keeps one token too few (frees a page still attended)"}),
    LayoutTheorem("manager.remove_skipped.chunked", "INV-WINDOW-LIVE",
                  "every n >= 0, chunk >= 1, page size >= 1",
                  lambda f: _window_free("chunked", f),
                  {"chunked-boundary-one-token-early": "the chunk boundary is taken one token early"}),
    LayoutTheorem("lookup.rule.full", "LONGEST-COMMON-HIT", "every page size, length and cached-page pattern",
                  lambda f: _rule("full", f),
                  {"full-cap-off-by-one": "the full rule lets the hit run one page past the length"}),
    LayoutTheorem("lookup.rule.sliding", "LONGEST-COMMON-HIT",
                  "every page size, window, length and cached-page pattern",
                  lambda f: _rule("sliding", f),
                  {"sliding-leftmost-window": "the sliding rule takes the left-most run of hits, not the right-most"}),
    LayoutTheorem("lookup.rule.chunked", "LONGEST-COMMON-HIT",
                  "every page size, chunk, length and cached-page pattern",
                  lambda f: _rule("chunked", f),
                  {"chunked-rule-chunk-one-token-early":
                       "the chunked rule takes the chunk of the token before the length"}),
    LayoutTheorem("lookup.fixed_point", "LONGEST-COMMON-HIT",
                  "any number K >= 1 of groups with deflationary monotone rules, every length",
                  _fixed_point,
                  {"fixed-point-one-pass": "the hybrid lookup stops after one pass (no fixed point)"}),
    LayoutTheorem("lookup.eagle.full", "EAGLE-SINGLE-DROP", "every page size, length and cached-page pattern",
                  _eagle,
                  {"eagle-ignored": "EAGLE ignored: no page dropped",
                   "eagle-drops-twice": "EAGLE drops two pages"}),
    LayoutTheorem("manager.shard_bounds", "DP-SHARD-CONFINED", "every pool size N and DP size dividing it",
                  _shards, {"dp-null-page-in-shard-0": "shard 0 starts at page 0 (the null page)"}),
    LayoutTheorem("manager.allocate_slots.dp", "DP-SHARD-CONFINED",
                  "every pool size N, DP size dividing it, shard and hint",
                  _shard_choice,
                  {"dp-hint-overrides-held-shard": "a call's DP hint overrides the shard the request holds",
                   "dp-decode-ignores-shard": "a decode step without DP arguments allocates from the whole pool"}),
    LayoutTheorem("manager.allocate_slots.lookahead", "INV-KEYED-COMPUTED",
                  "every page size, token counts, lookahead and max_model_len",
                  _lookahead, {"lookahead-cached": "pages holding lookahead slots are cached"}),
)


def checks() -> list[Check]:
    """Registry provider: each theorem and its branch witnesses."""
    return [c for t in THEOREMS for c in t.checks()]


def mutants() -> list[Mutant]:
    """Registry provider: one spec mutant per fault of each theorem's encoding."""
    return [Mutant(f"spec:layout-{fault}", "spec", t.invariant, f"{t.transition}: {text}",
                   lambda t=t, fault=fault: t.detect(fault))  # type: ignore[misc]
            for t in THEOREMS for fault, text in t.faults.items()]
