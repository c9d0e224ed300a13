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
