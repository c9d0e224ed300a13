"""The coordinator's fixed point is the longest common hit, and EAGLE drops once: exhaustive.

`verikv.spec.hit_rules.common_hit_length` iterates the groups' rules to a fixed point. For
every layout of up to three groups drawn from a small catalogue (full, sliding with the
window above and at the page size, chunked local, Mamba in both modes, two page sizes), every hit pattern of
up to `PAGES` pages per group and every ``max_length`` up to ``PAGES * 2``, it is compared with
a brute-force definition: the largest length, a multiple of every page size and at most
``max_length``, that every group accepts (a group accepts ``L`` when its rule returns ``L``).
With EAGLE, a non-empty hit is the same maximum taken again below ``hit - largest page size``
(one drop, not two). Bounded: the bound is in each check's name.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.spec import hit_rules
from verikv.spec.hit_rules import group_rule

PAGES = 3
Layout = tuple[str, int, int]  # kind, page size, window/chunk
CATALOGUE: tuple[Layout, ...] = (("full", 2, 0), ("full", 4, 0), ("sliding", 2, 3), ("sliding", 2, 2),
                                 ("chunked", 2, 4), ("mamba", 2, 0), ("mamba_align", 2, 0))
TRIPLE_KINDS: tuple[Layout, ...] = (("full", 2, 0), ("sliding", 2, 3), ("chunked", 2, 4))


def _layouts() -> Iterator[tuple[Layout, ...]]:
    yield from ((g,) for g in CATALOGUE)
    yield from itertools.product(CATALOGUE, repeat=2)
    yield from itertools.product(TRIPLE_KINDS, repeat=3)


def _rule(layout: Layout, hit: tuple[bool, ...]) -> Callable[[int], int]:
    kind, page_size, span = layout
    return lambda n: group_rule(kind, span, hit, page_size, n).end * page_size  # type: ignore[arg-type]


def _longest_common(rules: list[Callable[[int], int]], unit: int, max_length: int) -> int:
    return max(m for m in range(0, max(0, max_length) + 1, unit) if all(rule(m) == m for rule in rules))


def check(use_eagle: bool) -> Outcome:
    cases = 0
    for layouts in _layouts():
        if use_eagle and any(kind == "chunked" for kind, _, _ in layouts):
            continue  # EAGLE is not combined with chunked-local attention (spec.init)
        sizes = [ps for _, ps, _ in layouts]
        unit = math.lcm(*sizes)
        for hits in itertools.product(itertools.product((False, True), repeat=PAGES), repeat=len(layouts)):
            rules = [_rule(layout, hit) for layout, hit in zip(layouts, hits)]
            for max_length in range(2 * PAGES + 1):
                cases += 1
                got = hit_rules.common_hit_length(rules, sizes, max_length, use_eagle)
                want = _longest_common(rules, unit, max_length)
                if use_eagle and want > 0:
                    want = _longest_common(rules, unit, want - max(sizes))
                if got != want:
                    return Outcome("failed", f"layout {layouts}, hits {hits}, max_length {max_length}: "
                                             f"common_hit_length {got}, longest common hit {want}")
    return Outcome("passed", f"{cases} (layout, hit pattern, max_length) cases")


def checks() -> list[Check]:
    bound = f"<=3 groups, <={PAGES} pages per group, max_length<={2 * PAGES}"
    return [
        Check(name=f"hit-rules:fixed-point-is-longest-common:groups<=3,pages<={PAGES} exhaustive",
              kind="exhaustive", invariant="LONGEST-COMMON-HIT", transition="manager.lookup", bound=bound,
              run=lambda: check(False)),
        Check(name=f"hit-rules:eagle-drops-once:groups<=3,pages<={PAGES} exhaustive",
              kind="exhaustive", invariant="LONGEST-COMMON-HIT", transition="manager.lookup", bound=bound,
              run=lambda: check(True)),
    ]


# --- mutants: the rules' combination broken in the spec ----------------------------------------

def _one_pass(lengths: list[Callable[[int], int]], page_sizes: list[int], max_length: int) -> int:
    """fixed_point that applies each group once, in order (no iteration to a fixed point)."""
    unit = math.lcm(*page_sizes) if page_sizes else 1
    length = max(0, max_length) // unit * unit
    for group_length in lengths:
        length = group_length(length)
    return length


def _eagle_twice(lengths: list[Callable[[int], int]], page_sizes: list[int], max_length: int,
                 use_eagle: bool) -> int:
    """common_hit_length that drops the EAGLE page twice."""
    length = _ORIGINAL["common_hit_length"](lengths, page_sizes, max_length, use_eagle)
    if use_eagle and length > 0:
        length = hit_rules.fixed_point(lengths, page_sizes, length - max(page_sizes))
    return length


_ORIGINAL: dict[str, Callable[..., Any]] = {"fixed_point": hit_rules.fixed_point,
                                            "common_hit_length": hit_rules.common_hit_length}


def _detector(function: str, replacement: Callable[..., int], use_eagle: bool) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        setattr(hit_rules, function, replacement)
        try:
            outcome = check(use_eagle)
        finally:
            setattr(hit_rules, function, _ORIGINAL[function])
        name = checks()[1 if use_eagle else 0].name
        return [] if outcome.ok else [f"{name}: LONGEST-COMMON-HIT"]
    return detect


def mutants() -> list[Mutant]:
    return [
        Mutant(name="spec:hybrid-lookup-one-pass", kind="spec", invariant="LONGEST-COMMON-HIT",
               description=_one_pass.__doc__ or "", detect=_detector("fixed_point", _one_pass, False)),
        Mutant(name="spec:eagle-drops-twice", kind="spec", invariant="LONGEST-COMMON-HIT",
               description=_eagle_twice.__doc__ or "", detect=_detector("common_hit_length", _eagle_twice, True)),
    ]
