"""``skip_unreachable_sliding_pages``: skipping loses no hit (spec, exhaustive) and the real
manager follows the spec (exhaustive refinement).

With the option on, `cache_pages` leaves uncached the sliding-window pages that can never serve
a hit (`verikv.spec.manager.sliding_page_can_hit`: with a hit unit, the lcm of the page sizes,
of ``per`` sliding pages and ``need`` pages per hit, only the last ``need`` pages of each unit).

- ``hit-rules:sliding-skip-loses-no-hit``: for a full-attention group whose page is the hit
  unit beside a sliding group, every pattern of cached pages of both groups and every length
  cap, with and without EAGLE, the hybrid lookup (`common_hit_length` over the two rules, and
  the sliding group's pages at the result) is the same when the sliding pages the predicate skips are uncached.
  With the same free order both managers hand out the same pages, so by induction over calls
  the skipping pool holds exactly the dense pool's keys minus the skipped ones: no lookup, and
  so no allocation, differs.
- ``refine:skip-unreachable(full4+sliding)``: the exhaustive refinement of
  `verikv.proofs.refinement.exhaustive` on full attention with 4-token pages and a window of 3 tokens in
  2-token pages (every even sliding page is skipped).

An implementation mask shifted by one page is caught by the refinement; a spec predicate that
skips the wrong pages is caught by the loses-no-hit check.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

from verikv.proofs.refinement.exhaustive import SLIDING, Case, build_manager, failed_checks, run_case
from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.spec import manager as spec
from verikv.spec.hit_rules import common_hit_length, full_rule, sliding_rule

CASE = Case("skip-unreachable(full4+sliding)", (spec.GroupLayout("full", 4), SLIDING), 8, 4,
            skip_unreachable_sliding_pages=True)
REFINE_NAME = f"refine:{CASE.name}:N<={CASE.num_pages},depth<={CASE.depth} exhaustive"
SLIDING_PAGES = 6
"""Sliding pages in each hit pattern (the full group's patterns cover the same tokens)."""
GEOMETRIES = tuple((page, window, per) for page in (1, 2) for window in range(1, 6) for per in (2, 3))
"""(sliding page size, window, sliding pages per full page): hit units of 2-3 sliding pages."""
NO_HIT_NAME = (f"hit-rules:sliding-skip-loses-no-hit:sliding pages<={SLIDING_PAGES},"
               f"page 1-2,window 1-5,unit 2-3 pages,with and without EAGLE")


def _lookup(full_hits: tuple[bool, ...], sliding_hits: tuple[bool, ...], page: int, window: int, unit: int,
            cap: int, eagle: bool) -> tuple[int, tuple[int, int]]:
    """The hybrid lookup's length and the sliding group's span at that length."""
    rules: list[Callable[[int], int]] = [lambda n: full_rule(full_hits, unit, n).end * unit,
                                         lambda n: sliding_rule(sliding_hits, page, n, window).end * page]
    length = common_hit_length(rules, [unit, page], cap, use_eagle=eagle)
    return length, tuple(sliding_rule(sliding_hits, page, length, window))  # type: ignore[return-value]


def _cases() -> Iterator[tuple[str, tuple[Any, ...], tuple[Any, ...]]]:
    for page, window, per in GEOMETRIES:
        unit = page * per
        config = spec.ManagerConfig((spec.GroupLayout("full", unit), spec.GroupLayout("sliding", page, window)),
                                    4, 64, skip_unreachable_sliding_pages=True)
        kept = [spec.sliding_page_can_hit(config, 1, j) for j in range(SLIDING_PAGES)]
        full_pages = SLIDING_PAGES // per
        for full_hits in itertools.product((False, True), repeat=full_pages):
            for sliding_hits in itertools.product((False, True), repeat=SLIDING_PAGES):
                skipped = tuple(h and k for h, k in zip(sliding_hits, kept))
                for cap, eagle in itertools.product(range(0, SLIDING_PAGES * page + 1, unit), (False, True)):
                    dense = _lookup(full_hits, sliding_hits, page, window, unit, cap, eagle)
                    sparse = _lookup(full_hits, skipped, page, window, unit, cap, eagle)
                    yield (f"page={page} window={window} unit={unit} full={full_hits} sliding={sliding_hits} "
                           f"cap={cap} eagle={eagle}"), dense, sparse


def _no_hit_lost() -> Outcome:
    start, count = time.perf_counter(), 0
    for what, dense, sparse in _cases():
        count += 1
        if dense != sparse:
            return Outcome("failed", f"{what}: lookup {dense} with every page cached, {sparse} with skipping")
    return Outcome("passed", f"{count} cases agree ({time.perf_counter() - start:.1f} s)")


def checks() -> list[Check]:
    return [Check(NO_HIT_NAME, "hit-rules", "LONGEST-COMMON-HIT", "manager.cache_pages[skip-unreachable]",
                  f"sliding pages<={SLIDING_PAGES}", _no_hit_lost),
            Check(REFINE_NAME, "refinement", "REFINEMENT+all", "manager.*", CASE.bound,
                  lambda: run_case(CASE))]


# --- mutants ------------------------------------------------------------------------------------

def _detect_impl_mask_shift() -> list[str]:
    """impl: the implementation's mask is shifted by one page (keeps the first page of each hit
    unit, skips the last)."""
    import verikv.coordinators as coordinators

    original = coordinators.sliding_page_can_hit
    coordinators.sliding_page_can_hit = lambda j, per, need, peek=0: original(j + 1, per, need, peek)
    try:
        return [f"{REFINE_NAME}: {name}" for name in failed_checks(CASE, build_manager(CASE))]
    finally:
        coordinators.sliding_page_can_hit = original


def _detect_spec_keeps_first() -> list[str]:
    """spec: the predicate keeps the first ``need`` pages of each hit unit instead of the last
    (the pages a hit at the unit's end needs go uncached)."""
    original = spec.sliding_page_can_hit

    def keeps_first(cfg: spec.ManagerConfig, g: int, j: int) -> bool:
        layout = cfg.groups[g]
        if layout.kind != "sliding":
            return True
        per = max(other.page_size for other in cfg.groups) // layout.page_size
        return original(cfg, g, j + per - 1) if per > 1 else True
    spec.sliding_page_can_hit = keeps_first
    try:
        return [] if _no_hit_lost().ok else [f"{NO_HIT_NAME}: LONGEST-COMMON-HIT"]
    finally:
        spec.sliding_page_can_hit = original


def mutants() -> list[Mutant]:
    return [Mutant("impl:sliding_skip_mask_one_page_late", "impl", "REFINEMENT",
                   " ".join((_detect_impl_mask_shift.__doc__ or "").split()) + f" [{REFINE_NAME}]",
                   _detect_impl_mask_shift),
            Mutant("spec:sliding-skip-keeps-first-pages", "spec", "LONGEST-COMMON-HIT",
                   " ".join((_detect_spec_keeps_first.__doc__ or "").split()) + f" [{NO_HIT_NAME}]",
                   _detect_spec_keeps_first)]
