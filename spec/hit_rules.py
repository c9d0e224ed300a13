"""Prefix-cache hit rules: how long a hit each attention type accepts, and the common hit.

Pure functions of plain data, written so CrossHair's ``diffbehavior`` can compare them with
the implementation. A group's lookup is described by ``hit``: ``hit[j]`` says whether page
``j`` of the request (at that group's page size) has a cached page in the pool; pages past
the end of ``hit`` are misses. A rule returns a `Span` ``(first, end)`` of page indices:
pages ``[0, first)`` are null placeholders (tokens the type never attends to again), pages
``[first, end)`` are real hits, and the hit covers ``end * page_size`` tokens.

Every rule returns at most ``max_length // page_size`` pages, so a hit never exceeds
``max_length`` tokens (callers pass ``num_tokens - 1``: at least one token is computed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

Kind = Literal["full", "sliding", "chunked", "mamba", "mamba_align"]
KINDS: tuple[str, ...] = ("full", "sliding", "chunked", "mamba", "mamba_align")
"""``"mamba"``: a recurrent state that is never prefix-cached (vLLM's ``mamba_cache_mode="none"``);
``"mamba_align"``: states kept at page-aligned positions and hit there (``"align"``)."""


class Span(NamedTuple):
    """Pages ``[0, first)`` are null placeholders, ``[first, end)`` are cache hits."""

    first: int
    end: int


def _hits(hit: Sequence[bool], j: int) -> bool:
    return 0 <= j < len(hit) and bool(hit[j])


def _prefix_run(hit: Sequence[bool], start: int, limit: int) -> int:
    """The first index >= ``start`` (and <= ``limit``) that is not a hit."""
    end = start
    while end < limit and _hits(hit, end):
        end += 1
    return end


def full_rule(hit: Sequence[bool], page_size: int, max_length: int) -> Span:
    """Full attention: the longest run of hits starting at page 0 (a hit is a prefix)."""
    return Span(0, _prefix_run(hit, 0, max_length // page_size))


def sliding_rule(hit: Sequence[bool], page_size: int, max_length: int, window: int) -> Span:
    """Sliding window: the right-most run of ``need`` consecutive hits, nulls before it.

    ``need = max(1, cdiv(window - 1, page_size))`` pages cover the window of the next token
    (eSurge scans from the right; with ``window == 1`` a single hit suffices). When no such
    run exists the hit is the run of hits starting at page 0 (shorter than ``need``).
    """
    need = max(1, -(-(window - 1) // page_size))
    limit = max_length // page_size
    for end in range(limit, need - 1, -1):
        if all(_hits(hit, j) for j in range(end - need, end)):
            return Span(end - need, end)
    return Span(0, _prefix_run(hit, 0, limit))


def chunked_rule(hit: Sequence[bool], page_size: int, max_length: int, chunk: int) -> Span:
    """Chunked local attention: nulls for the pages before the current chunk, then hits.

    The current chunk starts at token ``(max_length // chunk) * chunk``; tokens before it are
    never attended again, so they count as hit without pages (eSurge's rule, even with an
    empty cache).
    """
    first = (max_length // chunk) * chunk // page_size
    return Span(first, _prefix_run(hit, first, max_length // page_size))


def mamba_rule(hit: Sequence[bool], page_size: int, max_length: int) -> Span:
    """Mamba state is never prefix-cached: always no hit."""
    return Span(0, 0)


# --- Mamba, align mode --------------------------------------------------------------------------

def mamba_align_rule(hit: Sequence[bool], page_size: int, max_length: int) -> Span:
    """Mamba in align mode: the right-most cached state, nulls before it.

    Page ``j`` of a Mamba group holds the recurrent state after exactly ``(j + 1) * page_size``
    tokens, so one page restores the whole prefix: the hit is the last page ``j`` within
    ``max_length`` that is cached, preceded by ``j`` null placeholders. No cached page: no hit.
    """
    for j in range(max_length // page_size - 1, -1, -1):
        if _hits(hit, j):
            return Span(j, j + 1)
    return Span(0, 0)


def group_rule(kind: Kind, span: int, hit: Sequence[bool], page_size: int, max_length: int) -> Span:
    """Dispatch on the attention type; ``span`` is the window or the chunk size (else unused)."""
    if kind == "mamba_align":
        return mamba_align_rule(hit, page_size, max_length)
    if kind == "full":
        return full_rule(hit, page_size, max_length)
    if kind == "sliding":
        return sliding_rule(hit, page_size, max_length, span)
    if kind == "chunked":
        return chunked_rule(hit, page_size, max_length, chunk=span)
    return mamba_rule(hit, page_size, max_length)


def fixed_point(lengths: Sequence[Callable[[int], int]], page_sizes: Sequence[int], max_length: int) -> int:
    """The common hit length of several groups, iterated to a fixed point.

    ``lengths[g](L)`` is group g's hit length in tokens when at most ``L`` tokens may hit (it
    never exceeds ``L``). Start from ``max_length`` rounded down to a multiple of every page
    size (their lcm), apply every group in order, and repeat until a whole pass leaves the
    length unchanged: then every group accepts exactly that length. The length only
    decreases, so this terminates.
    """
    unit = math.lcm(*page_sizes) if page_sizes else 1
    length = max(0, max_length) // unit * unit
    while True:
        start = length
        for group_length in lengths:
            length = group_length(length)
        if length == start:
            return length


def common_hit_length(lengths: Sequence[Callable[[int], int]], page_sizes: Sequence[int],
                      max_length: int, use_eagle: bool) -> int:
    """The hit length all groups agree on; with EAGLE, the fixed point is recomputed once.

    EAGLE recomputes the last hit page's hidden states, so a non-empty hit is shortened by
    the largest page size and iterated to a fixed point again (for full attention alone this
    drops exactly one page). This is the only EAGLE adjustment.
    """
    length = fixed_point(lengths, page_sizes, max_length)
    if use_eagle and length > 0:
        length = fixed_point(lengths, page_sizes, length - max(page_sizes))
    return length


# --- vLLM 0.33's EAGLE lookup -------------------------------------------------------------------

EagleRule = Literal["drop-once", "vllm"]
EAGLE_RULES: tuple[str, ...] = ("drop-once", "vllm")
"""How a lookup with EAGLE drops the last hit page. ``"drop-once"``: `common_hit_length` (the
fixed point, recomputed once from one largest page fewer: eSurge's intent, without its second
drop). ``"vllm"``: `vllm_eagle_hit`, the rule of vLLM 0.33's coordinators."""


class LookupGroup(NamedTuple):
    """One cache group as `vllm_eagle_hit` reads it: its layout and which of its pages are cached
    (``hit[j]`` for page ``j``; pages past the end are misses)."""

    kind: Kind
    page_size: int
    span: int
    hit: Sequence[bool]


def sliding_run(window: int, page_size: int, drop: bool) -> int:
    """Consecutive hits vLLM's sliding-window lookup looks for: the pages covering the window of
    the next token (at least one), plus the page it drops when ``drop``."""
    return max(1, -(-(window - 1) // page_size)) + int(drop)


def vllm_group_rule(group: LookupGroup, max_length: int, unit: int, drop: bool) -> Span:
    """vLLM 0.33's lookup in one group: a hit ending on a multiple of ``unit`` tokens (the lcm of
    the page sizes; one page size alone for a single group), at most ``max_length`` tokens, then,
    when ``drop``, the last matched page dropped and the hit rounded down to ``unit`` again.

    - full: the run of hits from page 0, one page fewer when ``drop``, rounded down;
    - sliding: the right-most end ``e`` at which `sliding_run` consecutive pages hit and whose end
      after the drop is a multiple of ``unit``; the drop leaves ``e - 1``. With no such end, the
      run from page 0, cut to the largest length vLLM's right-to-left scan starts a run at (an
      end that is a multiple of ``unit`` after the drop), rounded down, one page fewer when
      ``drop`` and rounded down again;
    - Mamba in align mode: the right-most cached state ending on a multiple of ``unit``; a
      recurrent state is never dropped. Mamba without caching: no hit.

    Chunked-local attention is never combined with EAGLE (`verikv.spec.manager.init`).
    """
    ps = group.page_size
    limit = max_length // ps

    def aligned(pages: int) -> bool:
        return pages * ps % unit == 0

    def round_down(pages: int) -> int:
        return pages * ps // unit * unit // ps

    if group.kind == "full":
        end = _prefix_run(group.hit, 0, limit)
        return Span(0, round_down(end - 1 if drop and end else end))
    if group.kind == "sliding":
        run = sliding_run(group.span, ps, drop)
        for end in range(limit, run - 1, -1):
            if aligned(end - drop) and all(_hits(group.hit, j) for j in range(end - run, end)):
                return Span(end - run, end - drop)
        prefix = _prefix_run(group.hit, 0, limit)
        scanned = next((n for n in range(prefix, 0, -1) if aligned(n - drop)), 0)
        kept = round_down(scanned)
        return Span(0, round_down(kept - 1) if drop and kept else kept)
    if group.kind == "mamba_align":
        last = next((j for j in range(limit - 1, -1, -1) if _hits(group.hit, j) and aligned(j + 1)), None)
        return Span(0, 0) if last is None else Span(last, last + 1)
    if group.kind == "mamba":
        return Span(0, 0)
    raise ValueError(f"vLLM's EAGLE lookup is not defined for {group.kind!r} groups")


def _joint(groups: Sequence[LookupGroup]) -> list[tuple[LookupGroup, list[int]]]:
    """Groups of one layout looked up together (a page hits only where it hits in each), in the
    order vLLM 0.33 asks them: full attention first, then first appearance. Each with the ids of
    its member groups."""
    joint: dict[tuple[str, int, int], list[int]] = {}
    for g, group in enumerate(groups):
        joint.setdefault((group.kind, group.page_size, group.span), []).append(g)
    merged = []
    for (kind, page_size, span), members in joint.items():
        pages = max(len(groups[g].hit) for g in members)
        hit = tuple(all(_hits(groups[g].hit, j) for g in members) for j in range(pages))
        merged.append((LookupGroup(kind, page_size, span, hit), members))  # type: ignore[arg-type]
    return sorted(merged, key=lambda item: item[0].kind != "full")


def vllm_eagle_hit(groups: Sequence[LookupGroup], max_length: int, peek_limit: int) -> tuple[int, tuple[Span, ...]]:
    """vLLM 0.33's EAGLE lookup: the hit length and each group's span (full attention cut to it).

    ``max_length``: at most this many tokens hit (``num_tokens - 1``, or a lower cap);
    ``peek_limit``: the tokens of the request's full key pages, which a group may read past the
    candidate length.

    One group (vLLM's unitary coordinator): its rule at ``max_length`` with the drop (none for
    Mamba), no peek. Several groups (its hybrid coordinator; groups of one layout are looked up
    together, full attention first): starting from ``max_length``, each group in turn lowers the
    candidate length. A full-attention group is looked up once (later passes only cut to what it
    found: a full hit is a prefix). Another group, the first time it is asked at a candidate
    length, peeks one of its pages past it (at most ``peek_limit``) and drops the last matched
    page (`vllm_group_rule`), landing back at the candidate when its pages are cached there; it
    is then verified, and asked again without peek or drop, until a group asked that way
    shortens the length: every group is then unverified. Mamba groups never peek nor drop. The
    passes repeat until one leaves the length unchanged (one full group beside one other: one
    pass).

    Bounds: every group's answer is at most the candidate it was asked at (a peek of ``p``
    tokens past ``L`` reads at most ``(L + p) // p`` pages, minus the dropped one: at most
    ``L // p`` pages; without peek at most ``L // p``) and a multiple of ``unit``, and the
    candidate starts at ``max_length``; so the hit is a multiple of every page size and at most
    ``max_length``. The passes end because a pass that does not shorten the length ends them.
    """
    if len(groups) == 1:
        group = groups[0]
        span = vllm_group_rule(group, max_length, group.page_size, drop=True)
        return span.end * group.page_size, (span,)
    unit = math.lcm(*(group.page_size for group in groups))
    joint = _joint(groups)
    one_pass = len(joint) == 2 and joint[0][0].kind == "full"
    spans: list[Span | None] = [None] * len(joint)
    verified: set[int] = set()
    length = max_length
    while True:
        candidate = length
        for i, (group, _) in enumerate(joint):
            found = spans[i]
            if group.kind == "full" and found is not None:
                candidate = min(candidate, found.end * group.page_size)
                continue
            drop = i not in verified
            limit = candidate
            if drop and group.kind not in ("mamba", "mamba_align"):
                limit = min(candidate + group.page_size, peek_limit)
            found = spans[i] = vllm_group_rule(group, limit, unit, drop)
            if drop:
                verified.add(i)
            elif found.end * group.page_size < candidate:
                verified.clear()
            candidate = found.end * group.page_size
        if candidate >= length or one_pass:
            return _cut_full(joint, spans, min(length, candidate), len(groups))
        length = candidate


def _cut_full(joint: list[tuple[LookupGroup, list[int]]], spans: list[Span | None], length: int,
              num_groups: int) -> tuple[int, tuple[Span, ...]]:
    """`vllm_eagle_hit`'s result: each group's last span, full attention cut to ``length``."""
    out: list[Span] = [Span(0, 0)] * num_groups
    for (group, members), found in zip(joint, spans):
        span = Span(0, length // group.page_size) if group.kind == "full" else found
        for g in members:
            out[g] = span  # type: ignore[assignment]  # every group was asked in the first pass
    return length, tuple(out)
