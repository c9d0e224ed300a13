"""Z3: a Mamba state (align mode) is hit only at an aligned position, with its exact prefix.

INV-HIT-SAFE for state pages, proved unbounded (every page size, computed count, length cap
and pattern of cached pages) on an encoding of the spec's rules (`verikv.spec.manager`,
`verikv.spec.hit_rules`):

- *engine contract*: the allocation that ends at ``T`` tokens writes the state after ``T``
  into the request's page ``cdiv(T, P) - 1``;
- *keying* (`mamba_cacheable_page`): `cache_pages` keys at most the page ``c / P - 1`` of the
  request's computed count ``c``, only when ``c`` is a positive multiple of ``P`` within the
  tokens, under the key of the request's first ``(k + 1) * P`` tokens (`page_key`);
- *lookup* (`mamba_align_rule`): page ``j`` is looked up under the key of the first
  ``(j + 1) * P`` tokens; the hit is the right-most cached ``j`` below the cap ``L``, and covers
  ``(j + 1) * P`` tokens.

With the ideal hash (equal keys are equal contents, so equal prefix lengths), the theorem
says: the keyed page is the one holding the state after ``c`` tokens and its key covers exactly
those ``c`` tokens; a later step of the request writes its state elsewhere (a cached state is
never overwritten); and a hit is page-aligned, within the cap, and restores the state of
exactly the hit's tokens. Each fault below is a one-line change of the encoding (a state keyed
at an unaligned position, a lookup for the next page's prefix, an unaligned hit length) that
the theorem is shown to catch; `checks` also compares the rule's encoding with the spec's
Python rule on every cached-page pattern over four pages.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import z3

from verikv.proofs.runner.registry import Check, Mutant
from verikv.proofs.z3.layouts import HIT, Encoded, Faults, LayoutTheorem, cdiv
from verikv.proofs.z3.layouts_encoding import _first_difference, _hit_array
from verikv.spec import hit_rules


def mamba_align_rule(page: z3.ArithRef, cap: z3.ArithRef, tag: str,
                     faults: Faults = frozenset()) -> tuple[z3.BoolRef, z3.ArithRef, z3.ArithRef, z3.BoolRef]:
    """`hit_rules.mamba_align_rule` as a relation: ``(found, j, hit tokens, definitions)``
    (fault ``mamba-hit-unaligned``: a hit covers the whole cap)."""
    found, j, i = z3.Bool(f"{tag}.found"), z3.Int(f"{tag}.j"), z3.Int(f"{tag}.i")
    limit = cap / page
    later_miss = z3.ForAll([i], z3.Implies(z3.And(j < i, i < limit), z3.Not(HIT[i])), patterns=[HIT[i]])
    all_miss = z3.ForAll([i], z3.Implies(z3.And(0 <= i, i < limit), z3.Not(HIT[i])), patterns=[HIT[i]])
    defs = z3.And(z3.Implies(found, z3.And(0 <= j, j < limit, HIT[j], later_miss)),
                  z3.Implies(z3.Not(found), all_miss))
    covered = cap if "mamba-hit-unaligned" in faults else (j + 1) * page
    return found, j, z3.If(found, covered, 0), defs


def _state_hit(faults: Faults) -> Encoded:
    """The keying request's computed count ``c``, its keyed page ``k``, the state ``T`` it
    holds; a lookup by another request (or the same) with cap ``L`` finding that page at ``j``."""
    page, c, ntok, k, state, cap, later = (z3.Int(n) for n in ("P", "c", "num_tokens", "k", "T", "L", "T_later"))
    if "mamba-state-keyed-unaligned" in faults:
        keyed = z3.And(c >= 1, c <= ntok)
        keyed_index = cdiv(c, page) - 1
    else:
        keyed = z3.And(c >= page, c % page == 0, c <= ntok)
        keyed_index = c / page - 1
    found, j, hit, rule = mamba_align_rule(page, cap, "lookup", faults)
    key_len = (j + 2) * page if "mamba-hit-next-prefix" in faults else (j + 1) * page
    hyp = z3.And(page >= 1, c >= 0, ntok >= c, cap >= 0, keyed, k == keyed_index,
                 state == c,                       # the step that ended at c wrote the page's state
                 rule, z3.Implies(found, key_len == (k + 1) * page))  # ideal hash: equal keys, equal lengths
    goals = [
        ("keyed-page-holds-the-state", k == cdiv(state, page) - 1),
        ("key-covers-exactly-the-state", (k + 1) * page == state),
        ("later-step-writes-elsewhere", z3.Implies(later > c, cdiv(later, page) - 1 > k)),
        ("hit-page-aligned", hit % page == 0),
        ("hit-within-cap", hit <= cap),
        ("hit-restores-exactly-its-prefix", z3.Implies(found, hit == state)),
    ]
    branches = {"hit": found, "no-hit-with-room": z3.And(z3.Not(found), cap >= page),
                "hit-below-cap": z3.And(found, hit < cap - page), "state-after-several-pages": k >= 2}
    return Encoded(hyp, goals, branches, (page, c, ntok, k, state, cap, found, j, hit))


THEOREM = LayoutTheorem(
    "manager.mamba_align", "INV-HIT-SAFE",
    "every page size, computed count, token count, length cap and cached-page pattern", _state_hit,
    {"mamba-state-keyed-unaligned": "a state is keyed when the computed tokens end inside a page",
     "mamba-hit-next-prefix": "the lookup at page j uses the key of the next page's prefix",
     "mamba-hit-unaligned": "a Mamba hit covers the whole cap, not the state's page"})


def _rule_value(pattern: tuple[bool, ...], page: int, cap: int) -> int:
    """The hit length the rule's encoding denotes for this pattern: -1 none, -2 several."""
    _, _, hit, defs = mamba_align_rule(z3.IntVal(page), z3.IntVal(cap), "c")
    solver = z3.Solver()
    solver.add(HIT == _hit_array(pattern), defs)
    if solver.check() != z3.sat:
        return -1
    value = solver.model().eval(hit, model_completion=True)
    return value.as_long() if solver.check(hit != value) == z3.unsat else -2  # type: ignore[no-any-return]


def _rule_cases() -> Iterator[tuple[str, int, int]]:
    for pattern, page, cap in itertools.product(itertools.product((False, True), repeat=4), (1, 2), range(0, 9)):
        want = hit_rules.mamba_align_rule(pattern, page, cap).end * page
        yield f"mamba_align_rule(hits={pattern}, page={page}, length={cap})", _rule_value(pattern, page, cap), want


def checks() -> list[Check]:
    """The theorem, its branch witnesses, and the rule's encoding checked against the spec."""
    encoding = Check("encoding:layout.mamba_align_rule", "encoding", "ENCODING=SPEC", "lookup.rule",
                     "every hit pattern over 4 pages, page sizes 1-2, lengths 0-8",
                     lambda: _first_difference(_rule_cases()))
    return [*THEOREM.checks(), encoding]


def mutants() -> list[Mutant]:
    """One spec mutant per fault, each caught by the theorem."""
    return [Mutant(f"spec:z3-{fault}", "spec", THEOREM.invariant,
                   f"{THEOREM.transition}: {text}", lambda fault=fault: THEOREM.detect(fault))  # type: ignore[misc]
            for fault, text in THEOREM.faults.items()]
