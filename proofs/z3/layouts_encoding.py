"""Encoding = spec for `verikv.proofs.z3.layouts`: its encodings evaluated on concrete values against the spec.

The layout theorems are only as good as the encodings they are stated on. Each check below
instantiates an encoding with concrete numbers (and, for the hit rules, a concrete pattern of
cached pages), and compares what Z3 says it denotes with what the spec's Python function
returns: the arithmetic encodings are simplified to a numeral; a hit rule's encoding is a
relation, so Z3 must find the spec's hit length and show no other length satisfies it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import z3

from verikv.proofs.runner.registry import Check, Outcome
from verikv.proofs.z3 import layouts as zl
from verikv.spec import hit_rules, manager as spec

PAGE_SIZES = (1, 2, 3)
SPANS = (1, 2, 3, 4, 5)
TOKENS = range(0, 13)
HIT_PAGES = 3
"""Hit patterns over the first 3 pages (all 8); lengths up to 8 tokens."""


def _value(term: z3.ExprRef) -> int:
    return z3.simplify(term).as_long()  # type: ignore[no-any-return]


def _first_difference(cases: Iterator[tuple[str, int, int]]) -> Outcome:
    count = 0
    for what, encoded, expected in cases:
        count += 1
        if encoded != expected:
            return Outcome("failed", f"{what}: encoding gives {encoded}, spec {expected}")
    return Outcome("passed", f"{count} cases agree")


def _skipped_cases() -> Iterator[tuple[str, int, int]]:
    for page, span, n in itertools.product(PAGE_SIZES, SPANS, TOKENS):
        for kind, encode in (("sliding", zl.skipped_sliding), ("chunked", zl.skipped_chunked)):
            expected = spec.skipped_before(spec.GroupLayout(kind, page, span), n)  # type: ignore[arg-type]
            got = _value(encode(z3.IntVal(n), z3.IntVal(span), z3.IntVal(page)))
            yield f"skipped_before({kind}, page={page}, span={span}, n={n})", got, expected


def _shard_cases() -> Iterator[tuple[str, int, int]]:
    for n, dp in ((4, 2), (6, 2), (6, 3), (8, 4), (4, 4)):
        config = spec.ManagerConfig((spec.GroupLayout("full", 1),), n, 4, data_parallel_size=dp)
        state = spec.init(config)
        for shard in range(dp):
            bounds = spec.shard_bounds(state, shard) or (-1, -1)  # (a shard is given: never None)
            lo = _value(zl.shard_lo(z3.IntVal(shard), z3.IntVal(n // dp)))
            yield f"shard_bounds(N={n}, dp={dp}, shard={shard}).lo", lo, bounds[0]
            yield f"shard_bounds(N={n}, dp={dp}, shard={shard}).hi", (shard + 1) * (n // dp), bounds[1]


def _hit_array(pattern: tuple[bool, ...]) -> z3.ArrayRef:
    arr = z3.K(z3.IntSort(), z3.BoolVal(False))
    for j, hit in enumerate(pattern):
        arr = z3.Store(arr, j, hit)
    return arr


def _miss_table(pattern: tuple[bool, ...], need: int, limit: int) -> z3.BoolRef:
    """The sliding encoding's Skolem function ``miss`` given as a table: for each window end
    ``x``, the right-most miss in ``[x - need, x)``. A model-finding hint only (quantified
    satisfiability is incomplete in Z3): with it, every case is decided."""
    miss, x = z3.Function("c.miss", z3.IntSort(), z3.IntSort()), z3.Int("hint.x")
    table: z3.ArithRef = x - 1
    for end in range(limit + 1):
        misses = [j for j in range(max(0, end - need), end) if not (j < len(pattern) and pattern[j])]
        if misses:
            table = z3.If(x == end, misses[-1], table)
    return z3.ForAll([x], miss(x) == table)


def _rule_value(rule: zl.RuleEnc, pattern: tuple[bool, ...], hint: z3.BoolRef | None = None) -> int:
    """The hit length the relation denotes for this pattern: -1 if it has none, -2 if several."""
    solver = z3.Solver()
    solver.add(zl.HIT == _hit_array(pattern), rule.defs)
    if solver.check(*([] if hint is None else [hint])) != z3.sat:
        return -1
    value = solver.model().eval(rule.tokens, model_completion=True)
    return value.as_long() if solver.check(rule.tokens != value) == z3.unsat else -2  # type: ignore[no-any-return]


def _rule_cases() -> Iterator[tuple[str, int, int]]:
    kinds: dict[str, Callable[[int, int, int], zl.RuleEnc]] = {
        "full": lambda length, page, span: zl.full_rule(z3.IntVal(length), z3.IntVal(page), "c"),
        "sliding": lambda length, page, span: zl.sliding_rule(z3.IntVal(length), z3.IntVal(page),
                                                              z3.IntVal(span), "c"),
        "chunked": lambda length, page, span: zl.chunked_rule(z3.IntVal(length), z3.IntVal(page),
                                                              z3.IntVal(span), "c"),
    }
    for kind, encode in kinds.items():
        spans = (0,) if kind == "full" else (1, 2, 3, 4)
        for pattern, page, span, length in itertools.product(itertools.product((False, True), repeat=HIT_PAGES),
                                                             (1, 2), spans, range(0, 8)):
            end = hit_rules.group_rule(kind, span, pattern, page, length).end  # type: ignore[arg-type]
            need = max(1, -(-(span - 1) // page))
            hint = _miss_table(pattern, need, length // page) if kind == "sliding" else None
            yield (f"{kind}_rule(hits={pattern}, page={page}, span={span}, length={length})",
                   _rule_value(encode(length, page, span), pattern, hint), end * page)


def checks() -> list[Check]:
    """One check per family of `verikv.proofs.z3.layouts` encodings."""
    table = {
        "skipped_before": ("manager.remove_skipped", _skipped_cases,
                           f"page sizes {PAGE_SIZES}, spans {SPANS}, n 0..12"),
        "shard_bounds": ("manager.shard_bounds", _shard_cases, "(N, dp) in (4,2) (6,2) (6,3) (8,4) (4,4)"),
        "hit_rules": ("lookup.rule", _rule_cases, f"every hit pattern over {HIT_PAGES} pages, page sizes 1-2, "
                                                  "spans 1-4, lengths 0-7"),
    }
    return [Check(name=f"encoding:layout.{name}", kind="encoding", invariant="ENCODING=SPEC", transition=transition,
                  bound=bound, run=lambda cases=cases: _first_difference(cases()))  # type: ignore[misc]
            for name, (transition, cases, bound) in table.items()]
