"""vLLM 0.33's EAGLE lookup (`verikv.spec.hit_rules.vllm_eagle_hit`, ``eagle_rule="vllm"``):
exhaustive hit-rule checks, a Z3 bound, and mutants the checks catch.

``hit-rules:eagle-vllm`` enumerates every layout of up to three groups drawn from a small
catalogue (full attention at two page sizes, sliding windows above and at the page size,
Mamba in both modes), every pattern of cached pages (up to `PAGES` per group), every
``max_length`` up to the groups' pages and every peek limit a request with those key pages
allows (from the full key pages of ``max_length + 1`` tokens up). For each it checks:

- *shape* (INV-HIT-SHAPE): the hit is at most ``max_length`` and a multiple of the hit unit
  (the lcm of the page sizes; one group: its page size);
- *pages* (INV-HIT-SAFE): each group's span covers exactly the hit; its real pages are cached
  in every group of its layout; full attention holds no placeholder, a sliding group the pages
  covering the window of the next token, a Mamba align group one state page;
- *scan*: each group's rule (`vllm_group_rule`) equals a right-to-left scan that counts runs
  of cached pages the way vLLM's sliding-window lookup does (the declarative rule's fallback
  is where the two could part);
- *one full group*: the result of the drop-once rule (vLLM's unitary coordinator drops the
  last page too);
- *resend*: with every page of every group cached, the hit is the longest the groups' peek
  allows: the largest multiple of the unit at most ``max_length`` and at most
  ``peek_limit - p`` rounded down to ``p`` for each non-Mamba group of page size ``p`` (no
  hit beside a Mamba group without caching; one group: one page below ``max_length``, none
  for a Mamba align state). This is what vLLM's rule is for: a resent page-aligned prompt keeps
  a hit.

``hit-rules:sliding-skip-loses-no-hit(eagle-vllm)`` (exhaustive): with
``skip_unreachable_sliding_pages``, the sliding pages the spec leaves uncached under vLLM's rule
(`verikv.spec.manager.sliding_page_can_hit`: one page past each hit unit too) change no
lookup: for a full group whose page is the hit unit beside a sliding group, every pattern of
cached pages, ``max_length`` and peek limit, the hit and the sliding group's span are the same
with those pages uncached (the geometries of `verikv.proofs.refinement.sliding_skip`).

``lookup.eagle-vllm(full+sliding)/INV-HIT-SHAPE`` (Z3, unbounded): counted in each group's
pages, for every length, window, peek limit and pattern of cached pages, a full group's answer
with peek and drop is at most the length, and a sliding group's answer at a candidate (with
peek and drop) is at most the candidate: although a group reads one page past the candidate,
its answer never exceeds it, so one pass of vLLM's rule on the common layout stays within
``max_length`` (every later pass only lowers it). That answers land on whole hit units is the
exhaustive check's part.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import z3

from verikv.proofs.mutants.manager import _base, _override
from verikv.proofs.refinement.exhaustive import CASES_BY_NAME, build_manager, failed_checks
from verikv.proofs.refinement.sliding_skip import GEOMETRIES, SLIDING_PAGES
from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.proofs.z3.layouts import Encoded, Faults, LayoutTheorem, _prefix_run
from verikv.spec import hit_rules, manager as spec
from verikv.spec.hit_rules import LookupGroup, Span, sliding_run

PAGES = 3
Layout = tuple[str, int, int]  # kind, page size, window
CATALOGUE: tuple[Layout, ...] = (("full", 2, 0), ("full", 4, 0), ("sliding", 2, 3), ("sliding", 2, 2),
                                 ("mamba", 2, 0), ("mamba_align", 2, 0))
TRIPLES: tuple[Layout, ...] = (("full", 2, 0), ("sliding", 2, 3), ("mamba_align", 2, 0))
SCAN_PAGES = 6
"""Pages of the patterns the sliding rule is compared with the scan on."""
CHECK_NAME = f"hit-rules:eagle-vllm:groups<=3,pages<={PAGES} exhaustive"
REFINE_CASE = CASES_BY_NAME["eagle-vllm(full+sliding)"]


def _layouts() -> Iterator[tuple[Layout, ...]]:
    yield from ((g,) for g in CATALOGUE)
    yield from itertools.product(CATALOGUE, repeat=2)
    yield from itertools.product(TRIPLES, repeat=3)


def _scan_sliding(group: LookupGroup, max_length: int, unit: int, drop: bool) -> Span:
    """vLLM's sliding-window lookup as a scan: from the right, count cached pages; a run starts
    only at a page whose end (after the drop) is a whole number of units; a run of
    `sliding_run` pages is the hit (its last page dropped); else the run the scan ends in (from
    page 0) is cut to whole units, loses its last page when dropping, and is cut again."""
    ps, per = group.page_size, unit // group.page_size
    need = sliding_run(group.span, ps, drop)
    run = 0
    for i in reversed(range(max_length // ps)):
        if not (i < len(group.hit) and group.hit[i]):
            run = 0
        elif run or (i + 1 - drop) % per == 0:
            run += 1
            if run == need:
                return Span(i, i + run - drop)
    kept = run // per * per
    if drop and kept:
        kept = (kept - 1) // per * per
    return Span(0, kept)


def _expected_resend(groups: list[LookupGroup], max_length: int, peek_limit: int, unit: int) -> int:
    """The hit with every page cached (see the module docstring)."""
    kinds = {g.kind for g in groups}
    if "mamba" in kinds:
        return 0
    if len(groups) == 1:
        ps = groups[0].page_size
        return max_length // ps * ps if "mamba_align" in kinds else max(0, max_length // ps * ps - ps)
    peeks = [peek_limit // g.page_size * g.page_size - g.page_size for g in groups if g.kind != "mamba_align"]
    return max(0, min([max_length, *peeks]) // unit * unit)


def _pages_problem(group: LookupGroup, joint_hit: tuple[bool, ...], span: Span, length: int) -> str | None:
    """What is wrong with one group's span of a hit of ``length`` tokens (None: nothing)."""
    if span.end * group.page_size != length or span.first > span.end:
        return f"span {span} does not cover {length} tokens"
    if not all(j < len(joint_hit) and joint_hit[j] for j in range(span.first, span.end)):
        return f"span {span} holds a page that is not cached"
    real = span.end - span.first
    if group.kind == "full" and span.first:
        return f"full-attention span {span} has placeholders"
    if group.kind == "sliding" and real < min(span.end, sliding_run(group.span, group.page_size, False)):
        return f"sliding span {span} does not hold the window's pages"
    if group.kind == "mamba_align" and span.end and real != 1:
        return f"Mamba span {span} is not one state page"
    return None


def _joint_hits(groups: list[LookupGroup]) -> list[tuple[bool, ...]]:
    """Per group, where every group of its layout is cached."""
    return [tuple(all(other.hit[j] for other in groups if other[:3] == group[:3]) for j in range(PAGES))
            for group in groups]


def _case_problem(groups: list[LookupGroup], max_length: int, peek_limit: int) -> str | None:
    unit = math.lcm(*(g.page_size for g in groups)) if len(groups) > 1 else groups[0].page_size
    length, spans = hit_rules.vllm_eagle_hit(groups, max_length, peek_limit)
    if not (0 <= length <= max_length and length % unit == 0):
        return f"shape: hit {length} (unit {unit}, max_length {max_length})"
    for group, joint_hit, span in zip(groups, _joint_hits(groups), spans):
        problem = _pages_problem(group, joint_hit, span, length)
        if problem:
            return f"pages: {group.kind} group: {problem}"
    if len(groups) == 1 and groups[0].kind == "full":
        ps, hit = groups[0].page_size, groups[0].hit
        once = hit_rules.common_hit_length([lambda n: hit_rules.full_rule(hit, ps, n).end * ps], [ps], max_length,
                                           use_eagle=True)
        if once != length:
            return f"one full group: vLLM rule {length} != drop-once {once}"
    if all(all(g.hit) for g in groups) and peek_limit <= min(PAGES * g.page_size for g in groups):
        want = _expected_resend(groups, max_length, peek_limit, unit)
        if length != want:
            return f"resend: every page cached, hit {length} != {want}"
    return None


def _peek_limits(groups: list[LookupGroup], max_length: int) -> range:
    """Peek limits of a request with ``max_length + 1`` or more tokens: the tokens of its full key
    pages (at the smallest caching page size), up to the pages the patterns describe."""
    base = min((g.page_size for g in groups if g.kind != "mamba"), default=1)
    top = max(PAGES * g.page_size for g in groups)
    return range((max_length + 1) // base * base, top + 1, base)


def _scan_problem() -> str | None:
    """The sliding rule against the scan: every sliding layout of the catalogue, unit of one or
    two pages, pattern of `SCAN_PAGES` pages, limit and drop."""
    for kind, ps, window in CATALOGUE:
        if kind != "sliding":
            continue
        for per, hit in itertools.product((1, 2), itertools.product((False, True), repeat=SCAN_PAGES)):
            group = LookupGroup("sliding", ps, window, hit)
            for limit, drop in itertools.product(range((SCAN_PAGES + 1) * ps + 1), (False, True)):
                rule, scan = (hit_rules.vllm_group_rule(group, limit, per * ps, drop),
                              _scan_sliding(group, limit, per * ps, drop))
                if rule != scan:
                    return f"scan: window {window}, page {ps}, unit {per * ps}, hits {hit}, limit {limit}, " \
                           f"drop {drop}: rule {rule} != scan {scan}"
    return None


def check() -> Outcome:
    start, cases = time.perf_counter(), 0
    problem = _scan_problem()
    if problem:
        return Outcome("failed", problem)
    for layouts in _layouts():
        top = max(PAGES * ps for _, ps, _ in layouts)
        for hits in itertools.product(itertools.product((False, True), repeat=PAGES), repeat=len(layouts)):
            groups = [LookupGroup(kind, ps, span, hit) for (kind, ps, span), hit in zip(layouts, hits)]  # type: ignore[arg-type]
            for max_length in range(top + 1):
                for peek_limit in _peek_limits(groups, max_length):
                    cases += 1
                    problem = _case_problem(groups, max_length, peek_limit)
                    if problem:
                        return Outcome("failed", f"layout {layouts}, hits {hits}, max_length {max_length}, "
                                                 f"peek limit {peek_limit}: {problem}")
    return Outcome("passed", f"{cases} (layout, hit pattern, max_length, peek limit) cases "
                             f"({time.perf_counter() - start:.1f} s)")


# --- skipping unreachable sliding pages loses no hit under the rule -------------------------------

SKIP_NAME = (f"hit-rules:sliding-skip-loses-no-hit(eagle-vllm):sliding pages<={SLIDING_PAGES},page 1-2,"
             f"window 1-5,unit 2-3 pages")


def _skip_lookup(full_hits: tuple[bool, ...], sliding_hits: tuple[bool, ...], page: int, window: int, unit: int,
                 max_length: int, peek_limit: int) -> tuple[int, Span]:
    groups = [LookupGroup("full", unit, 0, full_hits), LookupGroup("sliding", page, window, sliding_hits)]
    length, spans = hit_rules.vllm_eagle_hit(groups, max_length, peek_limit)
    return length, spans[1]


def _skip_loses_no_hit() -> Outcome:
    start, cases = time.perf_counter(), 0
    top = SLIDING_PAGES
    for page, window, per in GEOMETRIES:
        unit = page * per
        config = spec.ManagerConfig((spec.GroupLayout("full", unit), spec.GroupLayout("sliding", page, window)),
                                    4, 64, use_eagle=True, eagle_rule="vllm", skip_unreachable_sliding_pages=True)
        kept = [spec.sliding_page_can_hit(config, 1, j) for j in range(top)]
        for full_hits in itertools.product((False, True), repeat=top // per):
            for sliding_hits in itertools.product((False, True), repeat=top):
                skipped = tuple(h and k for h, k in zip(sliding_hits, kept))
                for max_length in range(top * page + 1):
                    for peek_limit in {(max_length + 1) // page * page, top * page}:
                        cases += 1
                        args = (page, window, unit, max_length, peek_limit)
                        dense, sparse = _skip_lookup(full_hits, sliding_hits, *args), _skip_lookup(full_hits, skipped,
                                                                                                    *args)
                        if dense != sparse:
                            return Outcome("failed", f"page={page} window={window} unit={unit} full={full_hits} "
                                                     f"sliding={sliding_hits} max_length={max_length} "
                                                     f"peek={peek_limit}: lookup {dense} with every page cached, "
                                                     f"{sparse} with skipping")
    return Outcome("passed", f"{cases} cases agree ({time.perf_counter() - start:.1f} s)")


# --- Z3: a group's answer with peek and drop stays within the candidate ---------------------------

def _round_down(tag: str) -> tuple[z3.FuncDeclRef, z3.BoolRef]:
    """Rounding a page count down to whole hit units, as an uninterpreted function with the one
    property the bound uses (for ``x >= 0``: ``0 <= R(x) <= x``); that it lands on whole units
    is checked exhaustively (``hit-rules:eagle-vllm``)."""
    rounded = z3.Function(f"{tag}.round_down", z3.IntSort(), z3.IntSort())
    x = z3.Int(f"{tag}.x")
    return rounded, z3.ForAll([x], z3.Implies(x >= 0, z3.And(0 <= rounded(x), rounded(x) <= x)),
                               patterns=[rounded(x)])


def _vllm_full(faults: Faults) -> tuple[dict[str, z3.BoolRef], z3.BoolRef, dict[str, z3.BoolRef], tuple[Any, ...]]:
    """Full attention, counted in its pages, asked with peek and drop at a length of ``m`` whole
    pages plus less than a page: the run of hits within ``min(m + 1, peek)`` pages, one page
    fewer, rounded down to whole units (fault ``eagle-vllm-peek-kept``: the peeked page is
    kept). It is at most ``m`` pages, so at most the length."""
    m, peek = z3.Ints("full.m full.peek")
    rounded, rounding = _round_down("full")
    end, defs = _prefix_run(z3.IntVal(0), z3.If(m + 1 <= peek, m + 1, peek), "full")
    kept = end if "eagle-vllm-peek-kept" in faults else z3.If(end > 0, end - 1, 0)
    pages = rounded(kept)
    hyp = z3.And(m >= 0, peek >= 0, defs, rounding)
    goals = {"full-within-length": z3.And(0 <= pages, pages <= m)}
    branches = {"full-peeks-past-length": z3.And(end == m + 1, pages == m, m > 0)}
    return goals, hyp, branches, (m, peek, end, pages)


def _vllm_sliding(faults: Faults) -> tuple[dict[str, z3.BoolRef], z3.BoolRef, dict[str, z3.BoolRef], tuple[Any, ...]]:
    """A sliding window, counted in its pages, asked with peek and drop at a candidate of ``c``
    pages (`vllm_group_rule`): a run of ``need`` hits (the window's pages and the dropped one)
    ending at ``e <= min(c + 1, peek)`` whose end less one page is whole units gives ``e - 1``
    pages; otherwise a count ``f`` within the limit (the run from page 0 the scan counted, cut
    to whole units), one page fewer, rounded down again. It is at most ``c`` pages."""
    c, peek, need, e, f = z3.Ints("sliding.c sliding.peek sliding.need sliding.e sliding.f")
    found = z3.Bool("sliding.found")
    whole_units = z3.Function("sliding.whole_units", z3.IntSort(), z3.BoolSort())
    rounded, rounding = _round_down("sliding")
    limit = z3.If(c + 1 <= peek, c + 1, peek)
    i = z3.Int("sliding.i")
    hits = z3.ForAll([i], z3.Implies(z3.And(e - need <= i, i < e), HIT2[i]), patterns=[HIT2[i]])
    kept = e if "eagle-vllm-peek-kept" in faults else e - 1
    pages = z3.If(found, kept, z3.If(f > 0, rounded(f - 1), 0))
    hyp = z3.And(c >= 0, peek >= 0, need >= 2, rounding,
                 z3.Implies(found, z3.And(need <= e, e <= limit, whole_units(e - 1), hits)),
                 0 <= f, f <= limit)
    goals = {"sliding-within-candidate": z3.And(0 <= pages, pages <= c)}
    branches = {"sliding-window-found": z3.And(found, pages == c, c > 0),
                "sliding-fallback": z3.And(z3.Not(found), pages > 0)}
    return goals, hyp, branches, (c, peek, need, found, e, f, pages)


HIT2 = z3.Array("hit_sliding", z3.IntSort(), z3.BoolSort())
"""The sliding group's cached pages (the full group's are `verikv.proofs.z3.layouts.HIT`)."""


def _vllm_shape(faults: Faults) -> Encoded:
    """Both groups' answers (independent: each holds for any candidate). The sliding group is
    asked at the full group's answer; every later pass asks at a lower candidate, so by
    induction the hit is at most ``max_length``."""
    full_goals, full_hyp, full_branches, full_shown = _vllm_full(faults)
    sliding_goals, sliding_hyp, sliding_branches, sliding_shown = _vllm_sliding(faults)
    goals = list({**full_goals, **sliding_goals}.items())
    return Encoded(z3.And(full_hyp, sliding_hyp), goals, {**full_branches, **sliding_branches},
                   full_shown + sliding_shown)


THEOREM = LayoutTheorem("lookup.eagle-vllm(full+sliding)", "INV-HIT-SHAPE",
                        "every length, window run, peek limit, rounding to units and pattern of cached pages",
                        _vllm_shape, {"eagle-vllm-peek-kept": "the page peeked past the candidate is kept"})


def checks() -> list[Check]:
    bound = f"<=3 groups, <={PAGES} pages per group, every max_length and peek limit they allow"
    return [Check(CHECK_NAME, "exhaustive", "INV-HIT-SHAPE", "manager.lookup[eagle-vllm]", bound, check),
            Check(SKIP_NAME, "hit-rules", "LONGEST-COMMON-HIT", "manager.cache_pages[skip-unreachable,eagle-vllm]",
                  f"sliding pages<={SLIDING_PAGES}", _skip_loses_no_hit),
            *THEOREM.checks()]


# --- mutants ------------------------------------------------------------------------------------

def _spec_no_peek(groups: Any, max_length: int, peek_limit: int) -> Any:
    """spec: the hybrid asks each group at the candidate length, without peeking past it (the
    drop then costs a page: a resent page-aligned prompt loses its hit)."""
    return _ORIGINAL(groups, max_length, min(peek_limit, max_length))


def _spec_drops_twice(group: LookupGroup, max_length: int, unit: int, drop: bool) -> Span:
    """spec: an attention group's rule drops two pages instead of one."""
    span = _ORIGINAL_GROUP(group, max_length, unit, drop)
    if drop and span.end and group.kind in ("full", "sliding"):
        return Span(min(span.first, span.end - 1), span.end - 1)
    return span


_ORIGINAL = hit_rules.vllm_eagle_hit
_ORIGINAL_GROUP = hit_rules.vllm_group_rule


def _detect_spec(attribute: str, replacement: Any) -> list[str]:
    original = getattr(hit_rules, attribute)
    setattr(hit_rules, attribute, replacement)
    try:
        outcome = check()
    finally:
        setattr(hit_rules, attribute, original)
    return [] if outcome.ok else [f"{CHECK_NAME}: INV-HIT-SHAPE"]


def _spec_mask_ignores_peek(cfg: spec.ManagerConfig, g: int, j: int) -> bool:
    """spec: with vLLM's rule, the sliding pages kept are those of the drop-once rule (the page
    past each hit unit, which the rule peeks at, goes uncached)."""
    return _ORIGINAL_MASK(replace(cfg, eagle_rule="drop-once"), g, j)


_ORIGINAL_MASK = spec.sliding_page_can_hit


def _detect_mask() -> list[str]:
    spec.sliding_page_can_hit = _spec_mask_ignores_peek
    try:
        return [] if _skip_loses_no_hit().ok else [f"{SKIP_NAME}: LONGEST-COMMON-HIT"]
    finally:
        spec.sliding_page_can_hit = _ORIGINAL_MASK


def impl_no_peek(manager: Any) -> None:
    """impl: vLLM's lookup asks each group at the candidate length, without peeking past it."""
    lookup = manager.coordinator._vllm_eagle

    def find(self: Any, keys: Any, max_length: int, peek_limit: int, shard: Any, dp: Any) -> Any:
        return _base(self).find(self, keys, max_length, min(peek_limit, max_length), shard, dp)
    _override(lookup, find=find)


def _detect_impl() -> list[str]:
    def make(config: Any) -> Any:
        manager = build_manager(REFINE_CASE)(config)
        impl_no_peek(manager)
        return manager
    return [f"{REFINE_CASE.check_name}: {name}" for name in failed_checks(REFINE_CASE, make)]


def _doc(text: str | None) -> str:
    return " ".join((text or "").split())


def mutants() -> list[Mutant]:
    return [
        Mutant("spec:eagle-vllm-no-peek", "spec", "INV-HIT-SHAPE", _doc(_spec_no_peek.__doc__) + f" [{CHECK_NAME}]",
               lambda: _detect_spec("vllm_eagle_hit", _spec_no_peek)),
        Mutant("spec:eagle-vllm-drops-twice", "spec", "INV-HIT-SHAPE",
               _doc(_spec_drops_twice.__doc__) + f" [{CHECK_NAME}]",
               lambda: _detect_spec("vllm_group_rule", _spec_drops_twice)),
        Mutant("spec:sliding-skip-ignores-eagle-peek", "spec", "LONGEST-COMMON-HIT",
               _doc(_spec_mask_ignores_peek.__doc__) + f" [{SKIP_NAME}]", _detect_mask),
        Mutant("impl:eagle_vllm_no_peek", "impl", "REFINEMENT",
               _doc(impl_no_peek.__doc__) + f" [{REFINE_CASE.check_name}]", _detect_impl),
        *(Mutant(f"spec:layout-{fault}", "spec", THEOREM.invariant, f"{THEOREM.transition}: {text}",
                 lambda fault=fault: THEOREM.detect(fault))  # type: ignore[misc]
          for fault, text in THEOREM.faults.items()),
    ]

